/* context.c - devices, their primary contexts, the current context of each
 * thread, and the handle table of the objects a context owns. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/* Handles are tagged ids, not pointers: a stale or foreign handle is
 * looked up, never dereferenced, and ids are never reused. */
#define OBJ_TAG 0x5A00000000000000ULL
#define CTX_TAG 0x5C00000000000000ULL
#define TAG_MASK 0xFF00000000000000ULL

static __thread struct fk_ctx *current;

CUresult fk_devices_create(int n)
{
    struct fk_device *devs = calloc((size_t)n, sizeof *devs);
    if (!devs)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < n; i++)
        devs[i].ctx.dev = i;
    free(g.devs);
    g.devs = devs;
    g.ndev = n;
    return CUDA_SUCCESS;
}

int fk_current_sticky(void)
{
    return current && current->sticky;
}

void fk_mark_sticky(void)
{
    if (current) {
        current->sticky = 1;
        return;
    }
    for (int i = 0; i < g.ndev; i++)
        g.devs[i].ctx.sticky = 1;
}

void fk_sticky_clear(void)
{
    for (int i = 0; i < g.ndev; i++)
        g.devs[i].ctx.sticky = 0;
}

CUresult fk_current(struct fk_ctx **out)
{
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (current->refs == 0)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = current;
    return CUDA_SUCCESS;
}

void fk_obj_link(struct fk_obj *o, int kind, struct fk_ctx *c)
{
    o->kind = kind;
    o->ctx = c;
    o->prev = NULL;
    o->next = c->objs;
    if (c->objs)
        c->objs->prev = o;
    c->objs = o;
}

void fk_obj_unlink(struct fk_obj *o)
{
    if (o->prev)
        o->prev->next = o->next;
    else if (o->ctx->objs == o)
        o->ctx->objs = o->next;
    if (o->next)
        o->next->prev = o->prev;
    o->prev = o->next = NULL;
}

CUresult fk_obj_register(struct fk_obj *o, int kind, struct fk_ctx *c)
{
    uint64_t id = g.next_id;
    if (id & TAG_MASK || fk_htab_put(&g.handles, id, o) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g.next_id++;
    o->id = id;
    fk_obj_link(o, kind, c);
    return CUDA_SUCCESS;
}

void fk_obj_unregister(struct fk_obj *o)
{
    if (o->id)
        fk_htab_del(&g.handles, o->id);
    o->id = 0;
}

void *fk_handle(const struct fk_obj *o)
{
    return (void *)(uintptr_t)(OBJ_TAG | o->id);
}

CUresult fk_obj_get(const void *handle, int kind, const struct fk_ctx *cur, struct fk_obj **out)
{
    uint64_t v = (uint64_t)(uintptr_t)handle;
    if ((v & TAG_MASK) != OBJ_TAG)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fk_obj *o = fk_htab_get(&g.handles, v & ~TAG_MASK);
    if (!o || o->kind != kind)
        return CUDA_ERROR_INVALID_HANDLE;
    if (o->ctx != cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = o;
    return CUDA_SUCCESS;
}

static CUcontext ctx_handle(const struct fk_ctx *c)
{
    return (CUcontext)(uintptr_t)(CTX_TAG | (uint64_t)(c->dev + 1));
}

static struct fk_ctx *ctx_of(CUcontext h)
{
    uint64_t v = (uint64_t)(uintptr_t)h;
    if ((v & TAG_MASK) != CTX_TAG)
        return NULL;
    v &= ~TAG_MASK;
    if (v == 0 || v > (uint64_t)g.ndev)
        return NULL;
    return &g.devs[v - 1].ctx;
}

/* Runs the context's work, then frees everything it owns; its memory goes
 * back to the device. Pinned host blocks are not the context's. */
static void ctx_destroy(struct fk_ctx *c)
{
    if (fk_run_ctx(c) != CUDA_SUCCESS)
        fprintf(stderr, "fake libcuda: out of memory running the work of a context being "
                        "released; the rest of it is dropped\n");
    (void)fk_host_observe_ctx(c);
    fk_mem_context_destroyed(c); /* before the pools go */
    while (c->objs) {
        struct fk_obj *o = c->objs;
        fk_obj_unregister(o);
        fk_obj_unlink(o);
        switch (o->kind) {
        case FK_STREAM:
            fk_stream_free((struct fk_stream *)o);
            break;
        case FK_EVENT:
            fk_event_free((struct fk_event *)o);
            break;
        case FK_POOL:
            fk_pool_free((struct fk_pool *)o);
            break;
        case FK_MODULE:
            fk_module_free((struct fk_module *)o);
            break;
        case FK_FUNCTION:
            fk_function_free((struct fk_function *)o);
            break;
        }
    }
    c->null_stream = NULL;
    c->gen++;
}

static CUresult device_of(CUdevice dev, struct fk_device **out)
{
    if (dev < 0 || dev >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *out = &g.devs[dev];
    return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = fk_enter(FN_cuDeviceGet);
    if (r == CUDA_SUCCESS) {
        if (!device)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (ordinal < 0 || ordinal >= g.ndev)
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            *device = ordinal;
    }
    return fk_leave(r);
}

FK_API CUresult cuDeviceGetCount(int *count)
{
    CUresult r = fk_enter(FN_cuDeviceGetCount);
    if (r == CUDA_SUCCESS) {
        if (!count)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *count = g.ndev;
    }
    return fk_leave(r);
}

FK_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    struct fk_device *d;
    CUresult r = fk_enter(FN_cuDeviceGetName);
    if (r == CUDA_SUCCESS && (!name || len <= 0))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = device_of(dev, &d)) == CUDA_SUCCESS)
        snprintf(name, (size_t)len, "%s", d->name);
    return fk_leave(r);
}

FK_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    struct fk_device *d;
    CUresult r = fk_enter(FN_cuDeviceGetAttribute);
    if (r == CUDA_SUCCESS && !pi)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = device_of(dev, &d)) == CUDA_SUCCESS) {
        switch (attrib) {
        case 1: /* MAX_THREADS_PER_BLOCK */
            *pi = 1024;
            break;
        case 16: /* MULTIPROCESSOR_COUNT */
            *pi = 132;
            break;
        case 75: /* COMPUTE_CAPABILITY_MAJOR */
            *pi = 9;
            break;
        case 76: /* COMPUTE_CAPABILITY_MINOR */
            *pi = 0;
            break;
        case 115: /* MEMORY_POOLS_SUPPORTED */
            *pi = g.no_pools ? 0 : 1;
            break;
        default: /* the launch limits (launch.c), else unknown */
            r = fk_device_limit(attrib, pi) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    struct fk_device *d;
    CUresult r = fk_enter(FN_cuDevicePrimaryCtxRetain);
    if (r == CUDA_SUCCESS && !pctx)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = device_of(dev, &d)) == CUDA_SUCCESS) {
        if (d->ctx.refs == 0x7fffffff) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            d->ctx.refs++;
            *pctx = ctx_handle(&d->ctx);
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    struct fk_device *d;
    CUresult r = fk_enter(FN_cuDevicePrimaryCtxRelease_v2);
    if (r == CUDA_SUCCESS && (r = device_of(dev, &d)) == CUDA_SUCCESS) {
        if (d->ctx.refs == 0)
            r = CUDA_ERROR_INVALID_CONTEXT;
        else if (--d->ctx.refs == 0)
            ctx_destroy(&d->ctx);
    }
    return fk_leave(r);
}

FK_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    struct fk_device *d;
    CUresult r = fk_enter(FN_cuDevicePrimaryCtxGetState);
    if (r == CUDA_SUCCESS && (!flags || !active))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = device_of(dev, &d)) == CUDA_SUCCESS) {
        *flags = d->ctx.flags;
        *active = d->ctx.refs > 0;
    }
    return fk_leave(r);
}

/* The flags of cuda.h's CUctx_flags up to CU_CTX_SYNC_MEMOPS (128), with
 * at most one scheduling flag (SPIN 1, YIELD 2, BLOCKING_SYNC 4); set
 * while the context is active too, as the _v2 entry point allows. */
FK_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    struct fk_device *d;
    unsigned sched = flags & 7;
    CUresult r = fk_enter(FN_cuDevicePrimaryCtxSetFlags_v2);
    if (r == CUDA_SUCCESS && (flags > 0xFF || (sched & (sched - 1)) != 0))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = device_of(dev, &d)) == CUDA_SUCCESS)
        d->ctx.flags = flags;
    return fk_leave(r);
}

FK_API unsigned long long cubieFakeCudaEvents(unsigned int flags)
{
    unsigned long long n = 0;
    pthread_mutex_lock(&g.lock);
    for (int i = 0; i < g.ndev; i++)
        for (const struct fk_obj *o = g.devs[i].ctx.objs; o; o = o->next)
            if (o->kind == FK_EVENT && o->id != 0 && ((const struct fk_event *)o)->flags == flags)
                n++;
    pthread_mutex_unlock(&g.lock);
    return n;
}

FK_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult r = fk_enter(FN_cuCtxSetCurrent);
    if (r == CUDA_SUCCESS) {
        struct fk_ctx *c = ctx_of(ctx);
        if (!ctx)
            current = NULL;
        else if (!c)
            r = CUDA_ERROR_INVALID_CONTEXT;
        else if (c->refs == 0)
            r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
        else
            current = c;
    }
    return fk_leave(r);
}

FK_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult r = fk_enter(FN_cuCtxGetCurrent);
    if (r == CUDA_SUCCESS) {
        if (!pctx)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *pctx = current ? ctx_handle(current) : NULL;
    }
    return fk_leave(r);
}

/* The context of a stream, current or not; the default streams' is the
 * current context. */
FK_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    CUresult r = fk_enter(FN_cuStreamGetCtx);
    uint64_t v = (uint64_t)(uintptr_t)hStream;
    if (r == CUDA_SUCCESS && !pctx)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && v <= 2) { /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
        struct fk_ctx *c;
        if ((r = fk_current(&c)) == CUDA_SUCCESS)
            *pctx = ctx_handle(c);
    } else if (r == CUDA_SUCCESS) {
        struct fk_obj *o = (v & TAG_MASK) == OBJ_TAG ? fk_htab_get(&g.handles, v & ~TAG_MASK) : NULL;
        if (!o || o->kind != FK_STREAM)
            r = CUDA_ERROR_INVALID_HANDLE;
        else
            *pctx = ctx_handle(o->ctx);
    }
    return fk_leave(r);
}

FK_API CUresult cuCtxSynchronize(void)
{
    struct fk_ctx *c;
    CUresult r = fk_enter(FN_cuCtxSynchronize);
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS) {
        r = fk_run_ctx(c);
        if (r == CUDA_SUCCESS)
            r = fk_host_observe_ctx(c);
        if (r == CUDA_SUCCESS)
            fk_pool_release_to_threshold(c);
        fk_reap_streams(c);
    }
    return fk_leave(r);
}
