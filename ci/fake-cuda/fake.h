/* fake.h - internal types of the fake CUDA driver (ci/fake-cuda).
 *
 * The driver API's own types are declared here (no cuda.h in CI): handles
 * are pointers to opaque structs, CUresult an unsigned int. Every exported
 * function is declared below so that each definition is checked against
 * its prototype. All state is guarded by one mutex (g.lock), taken by
 * fk_enter and released by fk_leave around every entry point; the internal
 * functions assume it is held. */
#ifndef FAKE_CUDA_FAKE_H
#define FAKE_CUDA_FAKE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FK_API __attribute__((visibility("default")))
#define FK_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* ---- the driver API's types ------------------------------------------ */

typedef unsigned int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice_attribute;
typedef int CUjit_option;
typedef int CUmemPool_attribute;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmemPoolHandle_st *CUmemoryPool;

typedef struct {
    int type;
    int id;
} CUmemLocation;

/* 88 bytes in every CUDA version since 11.2; 13.x carved maxSize, usage and
 * gpuDirectRDMACapable out of the start of what was reserved[64]. */
typedef struct {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char gpuDirectRDMACapable;
    unsigned char reserved[53];
} CUmemPoolProps;
_Static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps is 88 bytes");

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

/* ---- every implemented entry point ------------------------------------ */

#define FK_PURE 1   /* needs no cuInit, not refused by the sticky error */
#define FK_NOINIT 2 /* needs no cuInit */
#define FK_BIND 4   /* binds a thread to a context: not refused by a sticky error */

#define FK_FUNCTIONS(X)                                                        \
    X(cuGetErrorString, FK_PURE)                                               \
    X(cuGetErrorName, FK_PURE)                                                 \
    X(cuDriverGetVersion, FK_PURE)                                             \
    X(cuInit, FK_NOINIT)                                                       \
    X(cuDeviceGet, 0)                                                          \
    X(cuDeviceGetCount, 0)                                                     \
    X(cuDeviceGetName, 0)                                                      \
    X(cuDeviceGetAttribute, 0)                                                 \
    X(cuDevicePrimaryCtxRetain, 0)                                             \
    X(cuDevicePrimaryCtxRelease_v2, 0)                                         \
    X(cuDevicePrimaryCtxGetState, 0)                                           \
    X(cuDevicePrimaryCtxSetFlags_v2, 0)                                        \
    X(cuCtxSetCurrent, FK_BIND)                                                \
    X(cuCtxGetCurrent, FK_BIND)                                                \
    X(cuCtxSynchronize, 0)                                                     \
    X(cuModuleLoadData, 0)                                                     \
    X(cuModuleLoadDataEx, 0)                                                   \
    X(cuModuleUnload, 0)                                                       \
    X(cuModuleGetFunction, 0)                                                  \
    X(cuMemGetInfo_v2, 0)                                                      \
    X(cuMemAlloc_v2, 0)                                                        \
    X(cuMemFree_v2, 0)                                                         \
    X(cuMemFreeHost, 0)                                                        \
    X(cuMemHostAlloc, 0)                                                       \
    X(cuMemcpyHtoD_v2, 0)                                                      \
    X(cuMemcpyDtoH_v2, 0)                                                      \
    X(cuMemcpyHtoDAsync_v2, 0)                                                 \
    X(cuMemcpyDtoHAsync_v2, 0)                                                 \
    X(cuMemcpy2DAsync_v2, 0)                                                   \
    X(cuMemFreeAsync, 0)                                                       \
    X(cuMemPoolTrimTo, 0)                                                      \
    X(cuMemPoolSetAttribute, 0)                                                \
    X(cuMemPoolGetAttribute, 0)                                                \
    X(cuMemPoolCreate, 0)                                                      \
    X(cuMemPoolDestroy, 0)                                                     \
    X(cuMemAllocFromPoolAsync, 0)                                              \
    X(cuStreamCreate, 0)                                                       \
    X(cuStreamCreateWithPriority, 0)                                           \
    X(cuStreamWaitEvent, 0)                                                    \
    X(cuStreamQuery, 0)                                                        \
    X(cuStreamSynchronize, 0)                                                  \
    X(cuStreamDestroy_v2, 0)                                                   \
    X(cuStreamGetCtx, 0)                                                       \
    X(cuEventCreate, 0)                                                        \
    X(cuEventRecord, 0)                                                        \
    X(cuEventQuery, 0)                                                         \
    X(cuEventSynchronize, 0)                                                   \
    X(cuEventDestroy_v2, 0)                                                    \
    X(cuEventElapsedTime, 0)                                                   \
    X(cuEventElapsedTime_v2, 0)                                                \
    X(cuLaunchKernel, 0)                                                       \
    X(cuFuncGetAttribute, 0)                                                   \
    X(cuFuncSetAttribute, 0)                                                   \
    X(cuFuncGetParamInfo, 0)

enum fk_fn {
#define FK_ENUM(name, flags) FN_##name,
    FK_FUNCTIONS(FK_ENUM)
#undef FK_ENUM
    FN_COUNT
};

FK_API CUresult cuGetErrorString(CUresult error, const char **pStr);
FK_API CUresult cuGetErrorName(CUresult error, const char **pStr);
FK_API CUresult cuInit(unsigned int Flags);
FK_API CUresult cuDriverGetVersion(int *driverVersion);
FK_API CUresult cuDeviceGet(CUdevice *device, int ordinal);
FK_API CUresult cuDeviceGetCount(int *count);
FK_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
FK_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
FK_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
FK_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
FK_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
FK_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
FK_API CUresult cuCtxSetCurrent(CUcontext ctx);
FK_API CUresult cuCtxGetCurrent(CUcontext *pctx);
FK_API CUresult cuCtxSynchronize(void);
FK_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                   CUjit_option *options, void **optionValues);
FK_API CUresult cuModuleLoadData(CUmodule *module, const void *image);
FK_API CUresult cuModuleUnload(CUmodule hmod);
FK_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
FK_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
FK_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
FK_API CUresult cuMemFree_v2(CUdeviceptr dptr);
FK_API CUresult cuMemFreeHost(void *p);
FK_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
FK_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
FK_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
FK_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                     CUstream hStream);
FK_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream);
FK_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
FK_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
FK_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
FK_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
FK_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
FK_API CUresult cuMemPoolDestroy(CUmemoryPool pool);
FK_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                        CUstream hStream);
FK_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
FK_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
FK_API CUresult cuStreamQuery(CUstream hStream);
FK_API CUresult cuStreamSynchronize(CUstream hStream);
FK_API CUresult cuStreamDestroy_v2(CUstream hStream);
FK_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx);
FK_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
FK_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
FK_API CUresult cuEventQuery(CUevent hEvent);
FK_API CUresult cuEventSynchronize(CUevent hEvent);
FK_API CUresult cuEventDestroy_v2(CUevent hEvent);
FK_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
FK_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd);
FK_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                               void **extra);
FK_API CUresult cuFuncGetAttribute(int *pi, int attrib, CUfunction hfunc);
FK_API CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value);
FK_API CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                   size_t *paramSize);

/* The control entry points (tests in the same process). */
FK_API int cubieFakeCudaControl(const char *command);
FK_API unsigned long long cubieFakeCudaViolations(char *last, size_t len);
FK_API int cubieFakeCudaPointerDevice(unsigned long long ptr);
FK_API unsigned long long cubieFakeCudaCalls(const char *name);
FK_API unsigned long long cubieFakeCudaEvents(unsigned int flags);
FK_API unsigned long long cubieFakeCudaAccesses(unsigned long long ptr);

/* ---- small containers (table.c, clock.c) ------------------------------ */

/* An open-addressing map from nonzero 64-bit keys to pointers. */
struct fk_htab {
    uint64_t *keys; /* 0: empty slot */
    void **vals;
    size_t cap; /* a power of two, or 0 */
    size_t len;
};
int fk_htab_put(struct fk_htab *t, uint64_t key, void *val); /* 0, or -1: no memory */
void *fk_htab_get(const struct fk_htab *t, uint64_t key);
void *fk_htab_del(struct fk_htab *t, uint64_t key);
void fk_htab_free(struct fk_htab *t);

/* A point of a stream's order: its op number `seq` (from 1). Stream 0 is
 * the host: a point there is ordered before everything. */
struct fk_point {
    uint32_t stream;
    uint64_t seq;
};

/* A vector clock: stream id -> ops of that stream ordered before, sorted by id. */
struct fk_centry {
    uint32_t id;
    uint64_t n;
};
struct fk_vclock {
    struct fk_centry *e;
    uint32_t len, cap;
};
uint64_t fk_vc_get(const struct fk_vclock *c, uint32_t id);
int fk_vc_set(struct fk_vclock *c, uint32_t id, uint64_t n);              /* 0 or -1 */
int fk_vc_merge(struct fk_vclock *dst, const struct fk_vclock *src);      /* 0 or -1 */
int fk_vc_copy(struct fk_vclock *dst, const struct fk_vclock *src);       /* 0 or -1 */
int fk_vc_covers(const struct fk_vclock *c, struct fk_point p);
void fk_vc_free(struct fk_vclock *c);

/* ---- devices, contexts, handles (context.c) --------------------------- */

enum fk_kind { FK_STREAM = 1, FK_EVENT, FK_POOL, FK_MODULE, FK_FUNCTION };

/* The head of every object a handle names. Objects of a context are linked
 * into its list (zombies too: destroyed streams with work, pools with
 * frees in flight) and freed with it; the handle table holds the live ones. */
struct fk_obj {
    int kind;
    uint64_t id; /* 0: no handle (the null stream, zombies) */
    struct fk_ctx *ctx;
    struct fk_obj *prev, *next;
};

struct fk_ctx {
    int dev;
    int refs;       /* primary-context retains; 0: not active */
    uint64_t gen;   /* incarnation, bumped at each destruction */
    int sticky;     /* a violation of its ops: its calls answer 700 until reset */
    unsigned flags; /* cuDevicePrimaryCtxSetFlags_v2's, kept across incarnations */
    uint64_t local_reserved; /* device memory held for launches' local memory */
    struct fk_obj *objs;
    struct fk_stream *null_stream; /* created on first use */
};

enum { FK_ENG_H2D, FK_ENG_D2H, FK_ENG_COMPUTE, FK_ENGINES };

struct fk_device {
    char name[256];
    uint64_t total, free0;   /* configured total, free before any allocation */
    uint64_t taken;          /* pools' reserved bytes + cuMemAlloc_v2 bytes */
    uint64_t allocated;      /* pools' used bytes + cuMemAlloc_v2 bytes */
    double engine[FK_ENGINES]; /* modelled time each engine is free again (ns) */
    struct fk_ctx ctx;
};

CUresult fk_current(struct fk_ctx **out);
int fk_current_sticky(void); /* the calling thread's current context is sticky */
void fk_mark_sticky(void);   /* makes it so (every context when none is current) */
void fk_sticky_clear(void);  /* every context (control reset) */
CUresult fk_obj_register(struct fk_obj *o, int kind, struct fk_ctx *c);
void fk_obj_link(struct fk_obj *o, int kind, struct fk_ctx *c);
void fk_obj_unregister(struct fk_obj *o);
void fk_obj_unlink(struct fk_obj *o);
void *fk_handle(const struct fk_obj *o);
CUresult fk_obj_get(const void *handle, int kind, const struct fk_ctx *cur, struct fk_obj **out);

/* ---- global state (state.c) ------------------------------------------- */

struct fk_global {
    pthread_mutex_t lock;
    int initialized;
    int ndev;
    struct fk_device *devs;
    /* knobs */
    int version;
    int no_pools;
    double pinned_gbps, pageable_gbps, kernel_ns;
    uint64_t calls;        /* implemented entry points called so far */
    uint64_t fn_calls[FN_COUNT];
    uint64_t fail_call_at; /* 0: none */
    CUresult fail_call_code;
    CUresult fail_code[FN_COUNT]; /* 0: none */
    int have_oom_above;
    uint64_t oom_above;
    char *jit_error; /* NULL: none */
    FILE *log;
    char *violations_path;
    /* violations (the sticky error is per context: struct fk_ctx) */
    int violation_in_call;
    unsigned long long violations;
    char last_violation[1024];
    /* handles and ordering */
    struct fk_htab handles; /* object id -> struct fk_obj */
    uint64_t next_id;
    struct fk_htab sids; /* stream id -> struct fk_stream (zombies too) */
    uint32_t next_sid;
    struct fk_vclock host_clock; /* what the host has synchronised with */
    double host_time;
    unsigned long long ops; /* ops queued so far (the log's "op") */
};
extern struct fk_global g;
extern const char *const fk_fn_names[FN_COUNT];

CUresult fk_enter(enum fk_fn fn);
CUresult fk_leave(CUresult r);
/* Reports a violation of the call in progress: it answers 700, and so does
 * every later call in the calling thread's current context (the context of
 * the op that violated) until the control reset. */
void fk_violation(const char *fmt, ...) FK_PRINTF(1, 2);
CUresult fk_knobs_load(void);           /* knobs.c, from cuInit */
int fk_env_version(int *out);           /* knobs.c, before cuInit */
CUresult fk_devices_create(int n);      /* context.c */

/* ---- streams, ops, ordering, modelled time (queue.c, streams.c) ------- */

enum fk_op_kind { OP_ALLOC, OP_FREE, OP_H2D, OP_D2H, OP_KERNEL, OP_RECORD, OP_WAIT };

#define FK_MAX_PARAMS 8
enum fk_pkind { FK_P_PTR, FK_P_U32, FK_P_U64, FK_P_F64 };

/* A launch's parameter values, decoded by kind (u for integers and
 * pointers, f for doubles), and the threads along x (gridDimX * blockDimX). */
struct fk_kargs {
    uint64_t u[FK_MAX_PARAMS];
    double f[FK_MAX_PARAMS];
    uint64_t threads_x;
};

/* A host stand-in for a kernel (standins.c). */
struct fk_standin {
    const char *name;
    unsigned nparams;
    unsigned char kinds[FK_MAX_PARAMS];
    unsigned char access[FK_MAX_PARAMS]; /* a pointer's FK_READ, FK_WRITE, FK_RW */
    const char *pnames[FK_MAX_PARAMS];
    uint64_t (*elements)(const struct fk_kargs *a);               /* for the modelled time */
    uint64_t (*bytes)(const struct fk_kargs *a, unsigned param); /* a pointer's range */
    void (*run)(const struct fk_kargs *a);
    uint64_t local_bytes; /* local memory per thread (launch.c reserves it) */
};
const struct fk_standin *fk_standin_find(const char *name);

struct fk_alloc;
struct fk_seg;
struct fk_block;
struct fk_pinned;
struct fk_module;

struct fk_op {
    struct fk_op *next;
    int kind;
    uint64_t seq;
    struct fk_point *deps; /* points that must execute first */
    uint32_t ndeps;
    struct fk_alloc *alloc; /* OP_FREE */
    /* OP_H2D, OP_D2H */
    CUdeviceptr dptr;
    void *host;
    void *snapshot; /* pageable HtoD: the staged bytes (a 2D copy's packed) */
    size_t bytes;   /* a 2D copy's: each row's */
    size_t rows;    /* a 2D copy's rows, a pitch apart on each side; 0: 1-D */
    size_t host_pitch, dev_pitch;
    struct fk_pinned *pinned;
    /* OP_KERNEL */
    const struct fk_standin *kernel;
    struct fk_module *module;
    struct fk_kargs args;
};

struct fk_stream {
    struct fk_obj o;
    uint32_t sid;
    unsigned flags; /* CU_STREAM_NON_BLOCKING or 0 */
    int is_null;
    int destroyed;
    struct fk_vclock clock;
    uint64_t queued, done;
    double tail; /* modelled time its last op ends */
    struct fk_op *head, *last;
};

struct fk_event {
    struct fk_obj o;
    unsigned flags;
    int recorded;
    struct fk_point at;
    struct fk_vclock clock;
    double time;
};

/* An op being queued: its clock (the stream's and what it waits for, with
 * its own entry already advanced), dependencies, and the earliest
 * modelled time it may start. */
struct fk_queue {
    struct fk_stream *s;
    struct fk_vclock clock;
    struct fk_point *deps;
    uint32_t ndeps, capdeps;
    double ready;
    double start, end; /* set by fk_q_commit */
};
struct fk_qlog {
    const char *kind;
    const char *name; /* kernels only */
    int has_ptr;
    uint64_t ptr, bytes;
};

CUresult fk_q_begin(struct fk_queue *q, struct fk_stream *s);
CUresult fk_q_add_dep(struct fk_queue *q, struct fk_point p, const struct fk_vclock *c, double t);
void fk_q_abort(struct fk_queue *q);
void fk_q_commit(struct fk_queue *q, struct fk_op *op, int engine, double ns,
                 const struct fk_qlog *lg);
CUresult fk_legacy_clock(struct fk_ctx *c, struct fk_vclock *out, double *ready);

struct fk_stream *fk_stream_by_sid(uint32_t sid);
int fk_point_done(struct fk_point p);
int fk_covered(const struct fk_vclock *c, struct fk_point p);
CUresult fk_run_to(struct fk_stream *s, uint64_t seq);
void fk_run_head(struct fk_stream *s);
CUresult fk_run_ctx(struct fk_ctx *c);
CUresult fk_host_observe(const struct fk_vclock *c, double t);
CUresult fk_host_observe_ctx(struct fk_ctx *c);
void fk_reap_streams(struct fk_ctx *c);
void fk_stream_free(struct fk_stream *s);
void fk_op_discard(struct fk_op *op);
CUresult fk_stream_get(CUstream h, struct fk_ctx *c, struct fk_stream **out);
CUresult fk_stream_new(struct fk_ctx *c, unsigned flags, int is_null, struct fk_stream **out);
void fk_event_free(struct fk_event *e);
const char *fk_who(uint32_t sid, char *buf, size_t len);

/* ---- device memory (memory.c, pools.c) -------------------------------- */

enum fk_astate { FK_LIVE, FK_FREE_QUEUED, FK_FREED };
enum fk_freed_by { FK_BY_ASYNC = 1, FK_BY_SYNC, FK_BY_CONTEXT };

struct fk_pool {
    struct fk_obj o;
    int dev;
    uint64_t reserved, used, reserved_high, used_high;
    uint64_t threshold, max_size;
    int reuse[3]; /* pool attributes 1..3 */
    int destroyed;
    uint64_t live;   /* allocations not freed */
    uint64_t allocs; /* allocations whose free has not executed */
    struct fk_alloc *pending; /* queued frees not yet returned to the pool */
    struct fk_seg *segs;      /* its reservations from the device (pools.c) */
};

struct fk_alloc {
    uint64_t base;
    size_t bytes, map_len;
    int dev;
    struct fk_pool *pool; /* NULL: cuMemAlloc_v2 */
    struct fk_point at;   /* where it is allocated (stream 0: the host) */
    int state;
    int freed_by;
    int released; /* its bytes are back in the pool's idle bytes */
    struct fk_point free_at;
    struct fk_point *uses; /* the last use on each stream */
    uint32_t nuses, capuses;
    struct fk_access *accesses; /* races.c: accesses not known to be over */
    uint32_t naccesses, capaccesses;
    struct fk_alloc *pnext, *pprev; /* the pool's pending frees */
    struct fk_alloc *qnext;         /* the quarantine */
    struct fk_block *block;         /* its bytes in a pool segment (pools.c) */
};

CUresult fk_alloc_map(size_t bytes, int dev, struct fk_alloc **out);
void fk_alloc_unmap(struct fk_alloc *a);
struct fk_alloc *fk_alloc_find(uint64_t addr);
CUresult fk_mem_check(uint64_t ptr, size_t bytes, int dev, const struct fk_vclock *clock,
                      const char *who, struct fk_alloc **out);
CUresult fk_alloc_reserve_use(struct fk_alloc *a);
void fk_alloc_note_use(struct fk_alloc *a, struct fk_point p);
void fk_alloc_free_exec(struct fk_alloc *a);
void fk_mem_context_destroyed(struct fk_ctx *c);
int fk_host_overlaps_device(const void *p, size_t len);
int fk_oom_above(const struct fk_device *d, uint64_t bytes);

void fk_pool_release_to_threshold(struct fk_ctx *c);
void fk_pool_unpend(struct fk_alloc *a);
void fk_pool_alloc_gone(struct fk_pool *p);
void fk_pool_free(struct fk_pool *p);
void fk_pool_give_back(struct fk_alloc *a); /* its bytes are idle in the pool again */

/* ---- page-locked host memory (pinned.c) ------------------------------- */

struct fk_pcopy {
    struct fk_point at;
    size_t off, len;
    int writes; /* a DtoH: writes the host bytes */
};
struct fk_pinned {
    char *base;
    size_t bytes;
    int dev;        /* whose context allocated it */
    unsigned flags; /* cuMemHostAlloc's: CU_MEMHOSTALLOC_PORTABLE (1) page-locks it for all */
    uint64_t pending; /* queued copies not executed */
    struct fk_pcopy *copies;
    size_t ncopies, capcopies;
};
CUresult fk_pinned_find(const void *p, size_t len, struct fk_pinned **out);
/* Whether the block is page-locked for context c (portable, or c allocated it). */
int fk_pinned_locked_for(const struct fk_pinned *b, const struct fk_ctx *c);
CUresult fk_pinned_check(struct fk_pinned *b, const void *p, size_t len, int writes,
                         const struct fk_vclock *clock, const char *who);
CUresult fk_pinned_reserve(struct fk_pinned *b);
void fk_pinned_note(struct fk_pinned *b, const void *p, size_t len, int writes, struct fk_point at);

/* ---- modules (modules.c) ---------------------------------------------- */

struct fk_module {
    struct fk_obj o;
    uint64_t pending; /* launches of its kernels not executed */
    struct fk_function **funcs;
    uint32_t nfuncs;
};
struct fk_function {
    struct fk_obj o;
    struct fk_module *module;
    char *name;
    int max_dynamic_shared; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
};
void fk_module_free(struct fk_module *m);
void fk_function_free(struct fk_function *f);

/* ---- launch limits (launch.c) ------------------------------------------ */

#define FK_MODULE_BYTES (2ULL << 20) /* device memory a loaded module takes */
#define FK_SHARED_DEFAULT 49152       /* dynamic shared memory without opt-in */
/* A device attribute of the launch limits (CUdevice_attribute 2..8, 97): 1 and
 * its value in `out`, or 0 for another attribute. */
int fk_device_limit(int attrib, int *out);
/* Checks a launch of `f` (stand-in `k`) against the device's and the
 * function's limits: 0, or CUDA_ERROR_INVALID_VALUE after saying why. */
CUresult fk_launch_check(const struct fk_function *f, const struct fk_standin *k,
                         const unsigned grid[3], const unsigned block[3], unsigned shared,
                         void **params);
CUresult fk_launch_reserve_local(struct fk_ctx *c, const struct fk_standin *k); /* 0 or 2 */
/* The newest PTX ISA version (major * 10 + minor) a driver of CUDA `version`
 * (cuDriverGetVersion) loads, or 0 when not known. */
int fk_ptx_isa_max(int version);

/* ---- helpers ----------------------------------------------------------- */

static inline double fk_max(double a, double b) { return a > b ? a : b; }

#include "races.h" /* races on device memory, execution modes */
#include "copies2d.h" /* 2D copies */

#endif
