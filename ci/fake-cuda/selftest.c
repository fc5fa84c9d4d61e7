/* selftest.c - the fake driver's self-test (run by build.sh): before and
 * after cuInit, devices, contexts, pools and their accounting, copies.
 * selftest_order.c checks streams, events, time, modules and kernels;
 * selftest_faults.c the violations, knobs and controls.
 *
 * Usage: fake-cuda-selftest DIR   (DIR: a directory for its files)
 *        fake-cuda-selftest --child NAME DIR   (a knob case, in a process of its own) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "selftest.h"

extern char **environ;

const char *st_dir, *st_self;
static int checks, failures;
static pthread_mutex_t st_lock = PTHREAD_MUTEX_INITIALIZER;

void st_check(int ok, const char *what, const char *file, int line)
{
    pthread_mutex_lock(&st_lock);
    checks++;
    if (!ok) {
        failures++;
        fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
    }
    pthread_mutex_unlock(&st_lock);
}

void st_expect(CUresult got, CUresult want, const char *what, const char *file, int line)
{
    pthread_mutex_lock(&st_lock);
    checks++;
    if (got != want) {
        failures++;
        fprintf(stderr, "%s:%d: %s returned %u, expected %u\n", file, line, what, got, want);
    }
    pthread_mutex_unlock(&st_lock);
}

int st_failures(void)
{
    return failures;
}

int st_contains(const char *haystack, const char *needle)
{
    return haystack && strstr(haystack, needle) != NULL;
}

CUmemoryPool st_pool(int dev)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = 1;
    props.location.id = dev;
    CUmemoryPool pool = NULL;
    EXPECT(cuMemPoolCreate(&pool, &props), 0);
    return pool;
}

uint64_t st_pool_attr(CUmemoryPool pool, int attr)
{
    uint64_t v = 0xdead;
    EXPECT(cuMemPoolGetAttribute(pool, attr, &v), 0);
    return v;
}

size_t st_free_bytes(void)
{
    size_t free_bytes = 0, total = 0;
    EXPECT(cuMemGetInfo_v2(&free_bytes, &total), 0);
    return free_bytes;
}

void st_violation(const char *needle, const char *file, int line)
{
    char last[1024];
    size_t free_bytes, total;
    unsigned long long n = cubieFakeCudaViolations(last, sizeof last);
    st_check(n == 1, "exactly one violation", file, line);
    st_check(st_contains(last, needle), needle, file, line);
    st_expect(cuMemGetInfo_v2(&free_bytes, &total), 700, "the sticky error after a violation",
              file, line);
    st_check(cubieFakeCudaControl("reset") == 0, "reset", file, line);
    st_expect(cuMemGetInfo_v2(&free_bytes, &total), 0, "a call after reset", file, line);
    st_check(cubieFakeCudaViolations(NULL, 0) == 0, "reset clears the count", file, line);
}

static void before_init(void)
{
    int v = 0, n = 0;
    const char *s = NULL;
    EXPECT(cuDriverGetVersion(&v), 0);
    CHECK(v == 13050);
    EXPECT(cuDriverGetVersion(NULL), 1);
    EXPECT(cuGetErrorName(700, &s), 0);
    CHECK(s && strcmp(s, "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
    EXPECT(cuGetErrorString(2, &s), 0);
    CHECK(s && strcmp(s, "out of memory") == 0);
    EXPECT(cuGetErrorName(12345, &s), 1);
    CHECK(s == NULL);
    EXPECT(cuGetErrorString(0, NULL), 1);
    EXPECT(cuDeviceGetCount(&n), 3);
    EXPECT(cuCtxSynchronize(), 3);
    EXPECT(cuInit(1), 1);
    EXPECT(cuInit(0), 0);
    EXPECT(cuInit(0), 0);
}

static void devices(void)
{
    int n = 0, v = -1;
    CUdevice d = -1;
    char name[64], small[6];
    EXPECT(cuDeviceGetCount(&n), 0);
    CHECK(n == 2);
    EXPECT(cuDeviceGet(&d, 1), 0);
    CHECK(d == 1);
    EXPECT(cuDeviceGet(&d, 2), 101);
    EXPECT(cuDeviceGet(&d, -1), 101);
    EXPECT(cuDeviceGet(NULL, 0), 1);
    EXPECT(cuDeviceGetName(name, sizeof name, 0), 0);
    CHECK(strcmp(name, "cubie fake device 0") == 0);
    EXPECT(cuDeviceGetName(small, sizeof small, 1), 0);
    CHECK(strcmp(small, "cubie") == 0);
    EXPECT(cuDeviceGetName(name, 0, 0), 1);
    EXPECT(cuDeviceGetName(name, sizeof name, 5), 101);
    static const int attrs[][2] = {{115, 1}, {75, 9}, {76, 0}, {16, 132}, {1, 1024}};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        EXPECT(cuDeviceGetAttribute(&v, attrs[i][0], 0), 0);
        CHECK(v == attrs[i][1]);
    }
    EXPECT(cuDeviceGetAttribute(&v, 9, 0), 1); /* TOTAL_CONSTANT_MEMORY: not modelled */
    EXPECT(cuDeviceGetAttribute(&v, 115, 7), 101);
}

static CUcontext contexts(void)
{
    CUcontext cur = (CUcontext)1, c0, again, c1;
    CUdeviceptr p;
    CUstream s;
    size_t f, t;
    EXPECT(cuCtxGetCurrent(&cur), 0);
    CHECK(cur == NULL);
    EXPECT(cuMemAlloc_v2(&p, 16), 201);
    EXPECT(cuStreamCreate(&s, 0), 201);
    EXPECT(cuCtxSynchronize(), 201);
    EXPECT(cuMemGetInfo_v2(&f, &t), 201);
    EXPECT(cuDevicePrimaryCtxRetain(&c0, 0), 0);
    EXPECT(cuDevicePrimaryCtxRetain(&again, 0), 0);
    CHECK(c0 == again && c0 != NULL);
    EXPECT(cuDevicePrimaryCtxRetain(&c0, 9), 101);
    EXPECT(cuCtxSetCurrent((CUcontext)0x1234), 201);
    EXPECT(cuCtxSetCurrent(c0), 0);
    EXPECT(cuCtxGetCurrent(&cur), 0);
    CHECK(cur == c0);
    EXPECT(cuMemGetInfo_v2(&f, &t), 0);
    CHECK(t == 4 * GIB && f == 4 * GIB - 256 * MIB);
    EXPECT(cuDevicePrimaryCtxRelease_v2(0), 0); /* still retained once */
    EXPECT(cuCtxSynchronize(), 0);

    /* Device 1's context: its objects go with it. */
    EXPECT(cuDevicePrimaryCtxRetain(&c1, 1), 0);
    CHECK(c1 != c0);
    EXPECT(cuCtxSetCurrent(c1), 0);
    EXPECT(cuMemGetInfo_v2(&f, &t), 0);
    CHECK(t == 2 * GIB && f == 2 * GIB - 256 * MIB);
    CUmemoryPool pool = st_pool(1);
    EXPECT(cuStreamCreate(&s, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&p, MIB, pool, s), 0);
    CHECK(cubieFakeCudaPointerDevice(p) == 1);
    CHECK(st_free_bytes() == 2 * GIB - 258 * MIB); /* a pool grows by 2 MiB granules */
    EXPECT(cuDevicePrimaryCtxRelease_v2(1), 0);
    CHECK(cubieFakeCudaPointerDevice(p) == -1);
    EXPECT(cuMemGetInfo_v2(&f, &t), 709);
    EXPECT(cuCtxSetCurrent(c1), 709);
    EXPECT(cuDevicePrimaryCtxRelease_v2(1), 201);
    EXPECT(cuDevicePrimaryCtxRetain(&again, 1), 0);
    CHECK(again == c1);
    EXPECT(cuCtxSetCurrent(c1), 0);
    EXPECT(cuStreamQuery(s), 400);
    EXPECT(cuMemPoolDestroy(pool), 400);
    CHECK(st_free_bytes() == 2 * GIB - 256 * MIB);
    /* A handle of another context than the current one. */
    EXPECT(cuStreamCreate(&s, 0), 0);
    EXPECT(cuCtxSetCurrent(c0), 0);
    EXPECT(cuStreamSynchronize(s), 201);
    EXPECT(cuDevicePrimaryCtxRelease_v2(1), 0);
    return c0;
}

static void pools(void)
{
    CUmemPoolProps props;
    CUmemoryPool bad;
    CUstream s, s2;
    CUevent e;
    CUdeviceptr p, q2;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = 1;
    EXPECT(cuMemPoolCreate(&bad, NULL), 1);
    props.allocType = 0;
    EXPECT(cuMemPoolCreate(&bad, &props), 1);
    props.allocType = 1;
    props.handleTypes = 1;
    EXPECT(cuMemPoolCreate(&bad, &props), 1);
    props.handleTypes = 0;
    props.location.id = 5;
    EXPECT(cuMemPoolCreate(&bad, &props), 1);
    props.location.id = 0;
    props.win32SecurityAttributes = &props;
    EXPECT(cuMemPoolCreate(&bad, &props), 1);
    props.win32SecurityAttributes = NULL;
    props.reserved[10] = 1;
    EXPECT(cuMemPoolCreate(&bad, &props), 1);
    props.reserved[10] = 0;
    props.usage = 2;
    EXPECT(cuMemPoolCreate(&bad, &props), 1);

    CUmemoryPool pool = st_pool(0);
    size_t f0 = st_free_bytes();
    EXPECT(cuStreamCreate(&s, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&p, MIB, pool, s), 0);
    CHECK(st_free_bytes() == f0 - 2 * MIB); /* one 2 MiB granule */
    CHECK(st_pool_attr(pool, 5) == 2 * MIB && st_pool_attr(pool, 7) == MIB);
    CHECK(cubieFakeCudaPointerDevice(p) == 0 && cubieFakeCudaPointerDevice(p + MIB - 1) == 0);
    CHECK(cubieFakeCudaPointerDevice(p + MIB) == -1);
    EXPECT(cuMemFreeAsync(p, s), 0);
    CHECK(st_pool_attr(pool, 7) == MIB); /* the free has not executed */
    CHECK(cubieFakeCudaPointerDevice(p) == -1);
    EXPECT(cuMemAllocFromPoolAsync(&p, MIB, pool, s), 0); /* reuses it in stream order */
    CHECK(st_pool_attr(pool, 5) == 2 * MIB && st_pool_attr(pool, 7) == MIB);
    EXPECT(cuMemFreeAsync(p, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    CHECK(st_pool_attr(pool, 7) == 0 && st_pool_attr(pool, 5) == 0); /* threshold 0 */
    CHECK(st_pool_attr(pool, 6) == 2 * MIB && st_pool_attr(pool, 8) == MIB);
    CHECK(st_free_bytes() == f0);

    uint64_t v = UINT64_MAX;
    EXPECT(cuMemPoolSetAttribute(pool, 4, &v), 0);
    CHECK(st_pool_attr(pool, 4) == UINT64_MAX);
    EXPECT(cuMemAllocFromPoolAsync(&p, 2 * MIB, pool, s), 0);
    EXPECT(cuMemFreeAsync(p, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    CHECK(st_pool_attr(pool, 5) == 2 * MIB && st_pool_attr(pool, 7) == 0);
    CHECK(st_free_bytes() == f0 - 2 * MIB);
    EXPECT(cuMemPoolTrimTo(pool, MIB), 0); /* keeps at least 1 MiB: the whole segment */
    CHECK(st_pool_attr(pool, 5) == 2 * MIB && st_free_bytes() == f0 - 2 * MIB);
    EXPECT(cuMemPoolTrimTo(pool, 0), 0);
    CHECK(st_pool_attr(pool, 5) == 0 && st_free_bytes() == f0);
    v = MIB;
    EXPECT(cuMemPoolSetAttribute(pool, 4, &v), 0);
    EXPECT(cuMemAllocFromPoolAsync(&p, 3 * MIB, pool, s), 0);
    EXPECT(cuMemFreeAsync(p, s), 0);
    EXPECT(cuCtxSynchronize(), 0);
    CHECK(st_pool_attr(pool, 5) == 0); /* an idle segment goes while above the threshold */
    EXPECT(cuMemPoolTrimTo(pool, 0), 0);

    /* Attributes. */
    v = 0;
    EXPECT(cuMemPoolSetAttribute(pool, 6, &v), 0);
    CHECK(st_pool_attr(pool, 6) == 0);
    v = 5;
    EXPECT(cuMemPoolSetAttribute(pool, 8, &v), 1);
    EXPECT(cuMemPoolSetAttribute(pool, 7, &v), 1);
    EXPECT(cuMemPoolGetAttribute(pool, 99, &v), 1);
    EXPECT(cuMemPoolGetAttribute(pool, 5, NULL), 1);
    int flag = -1, off = 0;
    EXPECT(cuMemPoolGetAttribute(pool, 1, &flag), 0);
    CHECK(flag == 1);
    EXPECT(cuMemPoolSetAttribute(pool, 2, &off), 0);
    EXPECT(cuMemPoolGetAttribute(pool, 2, &flag), 0);
    CHECK(flag == 0);

    /* The whole device, then nothing more. */
    EXPECT(cuMemAllocFromPoolAsync(&p, f0 + 1, pool, s), 2);
    EXPECT(cuMemAllocFromPoolAsync(&p, f0, pool, s), 0);
    CHECK(st_free_bytes() == 0);
    EXPECT(cuMemAlloc_v2(&q2, 1), 2);
    EXPECT(cuMemFreeAsync(p, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuMemPoolTrimTo(pool, 0), 0);
    CHECK(st_free_bytes() == f0);
    EXPECT(cuMemAllocFromPoolAsync(&p, 0, pool, s), 1);
    EXPECT(cuMemAllocFromPoolAsync(NULL, 8, pool, s), 1);

    /* cuMemAlloc_v2 / cuMemFree_v2, and cuMemFree_v2 of a pool allocation. */
    EXPECT(cuMemAlloc_v2(&q2, MIB), 0);
    CHECK(st_free_bytes() == f0 - MIB && cubieFakeCudaPointerDevice(q2) == 0);
    EXPECT(cuMemFree_v2(q2 + 8), 1);
    EXPECT(cuMemFree_v2(q2), 0);
    CHECK(st_free_bytes() == f0);
    EXPECT(cuMemAlloc_v2(&q2, 0), 1);
    EXPECT(cuMemAllocFromPoolAsync(&p, MIB, pool, s), 0);
    EXPECT(cuStreamSynchronize(s), 0); /* cuMemFree_v2 does not wait for pool memory */
    EXPECT(cuMemFree_v2(p), 0);
    CHECK(st_pool_attr(pool, 7) == 0);

    /* Reuse across streams through an event; frees in flight outlive the pool. */
    EXPECT(cuStreamCreate(&s2, 1), 0);
    EXPECT(cuEventCreate(&e, 2), 0);
    EXPECT(cuMemAllocFromPoolAsync(&p, 4 * MIB, pool, s), 0);
    EXPECT(cuMemFreeAsync(p, s), 0);
    EXPECT(cuEventRecord(e, s), 0);
    EXPECT(cuStreamWaitEvent(s2, e, 0), 0);
    uint64_t reserved = st_pool_attr(pool, 5);
    EXPECT(cuMemAllocFromPoolAsync(&p, 4 * MIB, pool, s2), 0);
    CHECK(st_pool_attr(pool, 5) == reserved);
    EXPECT(cuMemFreeAsync(p, s2), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    EXPECT(cuMemPoolGetAttribute(pool, 5, &v), 400);
    EXPECT(cuCtxSynchronize(), 0);
    CHECK(st_free_bytes() == f0);
    EXPECT(cuEventDestroy_v2(e), 0);
    EXPECT(cuStreamDestroy_v2(s), 0);
    EXPECT(cuStreamDestroy_v2(s2), 0);
    EXPECT(cuStreamDestroy_v2(s2), 400);
}

static void copies(void)
{
    enum { N = 10000 };
    CUmemoryPool pool = st_pool(0);
    CUstream s;
    CUdeviceptr d, d2;
    unsigned char *h, *h2, buf[4096], out[4096];
    EXPECT(cuStreamCreate(&s, 1), 0);
    EXPECT(cuMemHostAlloc((void **)&h, N, 1), 0);
    EXPECT(cuMemHostAlloc((void **)&h2, N, 2), 0);
    EXPECT(cuMemHostAlloc((void **)&h2, N, 8), 1);
    EXPECT(cuMemHostAlloc((void **)&h2, 0, 0), 1);
    CHECK(((uintptr_t)h & 4095) == 0 && h[0] == 0xA5 && h[N - 1] == 0xA5);
    EXPECT(cuMemAllocFromPoolAsync(&d, N, pool, s), 0);
    EXPECT(cuMemAllocFromPoolAsync(&d2, N, pool, s), 0);
    for (int i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 7 + 3);
    EXPECT(cuMemcpyHtoDAsync_v2(d, h, N, s), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h2, d, N, s), 0);
    CHECK(h2[0] == 0xA5 && h2[N - 1] == 0xA5); /* deferred: not landed yet */
    EXPECT(cuStreamSynchronize(s), 0);
    CHECK(memcmp(h, h2, N) == 0);

    /* Pageable: the source is staged at once, the download is synchronous. */
    for (int i = 0; i < 4096; i++)
        buf[i] = (unsigned char)(i ^ 0x5c);
    memcpy(out, buf, sizeof out);
    EXPECT(cuMemcpyHtoDAsync_v2(d, buf, sizeof buf, s), 0);
    memset(buf, 0, sizeof buf);
    memset(h2, 0, N);
    EXPECT(cuMemcpyDtoHAsync_v2(buf, d, sizeof buf, s), 0);
    CHECK(memcmp(buf, out, sizeof buf) == 0);
    /* Synchronous copies. */
    EXPECT(cuMemcpyHtoD_v2(d2 + 100, out, 1000), 0);
    memset(buf, 0, sizeof buf);
    EXPECT(cuMemcpyDtoH_v2(buf, d2 + 100, 1000), 0);
    CHECK(memcmp(buf, out, 1000) == 0);
    /* The legacy default stream. */
    EXPECT(cuMemcpyHtoDAsync_v2(d, h, 64, NULL), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(buf, d, 64, (CUstream)1), 0);
    CHECK(memcmp(buf, h, 64) == 0);
    EXPECT(cuStreamSynchronize(NULL), 0);
    EXPECT(cuStreamDestroy_v2(NULL), 400);

    /* Ranges. */
    EXPECT(cuMemcpyHtoDAsync_v2(d + N - 1, h, 2, s), 1);
    EXPECT(cuMemcpyHtoDAsync_v2(0x1000, h, 2, s), 1);
    EXPECT(cuMemcpyHtoDAsync_v2(d, NULL, 2, s), 1);
    EXPECT(cuMemcpyHtoDAsync_v2(d, h, 0, s), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(d, h + N - 10, 20, s), 1);   /* straddles a block */
    EXPECT(cuMemcpyHtoDAsync_v2(d, (void *)(uintptr_t)d2, 8, s), 1); /* device memory */
    EXPECT(cuMemcpyDtoHAsync_v2(out, d, 8, (CUstream)0x5A00000000000999ULL), 400);
    EXPECT(cuMemcpyHtoD_v2(d + N, out, 1), 1);

    EXPECT(cuMemFreeAsync(d, s), 0);
    EXPECT(cuMemFreeAsync(d2, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuMemFreeHost(h + 1), 1);
    EXPECT(cuMemFreeHost(h), 0);
    EXPECT(cuMemFreeHost(h), 1);
    EXPECT(cuMemFreeHost(h2), 0);
    EXPECT(cuStreamDestroy_v2(s), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
}

/* Threads allocating, copying and freeing on their own streams at once. */
static CUcontext shared_ctx;
static CUmemoryPool shared_pool;

static void *worker(void *arg)
{
    CUstream s;
    unsigned char in[512], back[512];
    (void)arg;
    EXPECT(cuCtxSetCurrent(shared_ctx), 0);
    EXPECT(cuStreamCreate(&s, 1), 0);
    for (int i = 0; i < 40; i++) {
        CUdeviceptr d;
        memset(in, i, sizeof in);
        EXPECT(cuMemAllocFromPoolAsync(&d, sizeof in, shared_pool, s), 0);
        EXPECT(cuMemcpyHtoDAsync_v2(d, in, sizeof in, s), 0);
        EXPECT(cuMemcpyDtoHAsync_v2(back, d, sizeof back, s), 0);
        CHECK(memcmp(in, back, sizeof in) == 0);
        EXPECT(cuMemFreeAsync(d, s), 0);
    }
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuStreamDestroy_v2(s), 0);
    return NULL;
}

static void threads(CUcontext ctx)
{
    pthread_t t[4];
    shared_ctx = ctx;
    shared_pool = st_pool(0);
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    EXPECT(cuMemPoolDestroy(shared_pool), 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0) {
        st_dir = argv[3];
        return st_child(argv[2]);
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR | --child NAME DIR\n", argv[0]);
        return 2;
    }
    st_self = argv[0];
    st_dir = argv[1];
    /* The knobs are the test's: none from the environment. */
    char *names[64];
    int n = 0;
    for (char **e = environ; *e && n < 64; e++)
        if (strncmp(*e, "CUBIE_FAKE_CUDA_", 16) == 0)
            names[n++] = strndup(*e, strcspn(*e, "="));
    for (int i = 0; i < n; i++) {
        unsetenv(names[i]);
        free(names[i]);
    }
    before_init();
    devices();
    CUcontext ctx = contexts();
    pools();
    copies();
    threads(ctx);
    st_orders(ctx);
    st_modules(ctx);
    st_limits(ctx);
    st_faults(ctx);
    st_races(ctx);
    st_copies2d(ctx);
    st_exec(ctx);
    st_contexts(ctx);
    st_children();
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuDevicePrimaryCtxRelease_v2(0), 0);
    if (failures) {
        fprintf(stderr, "%d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("%d checks passed\n", checks);
    return 0;
}
