/* selftest_limits.c - the pool's granules and segments, reuse through an
 * internal dependency (pool attribute 3), the device memory of modules, the
 * PTX versions and targets a module load refuses, the launch limits, and
 * the local memory a launch reserves. */
#include "selftest.h"

static const char ptx_euler[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry euler_decay(.param .u64 y, .param .u64 k, .param .f64 dt, .param .u32 n)\n"
    "{ ret; }\n";

static CUresult load(CUmodule *m, const char *image, char *log, unsigned size)
{
    CUjit_option options[2] = {5, 6};
    void *values[2] = {log, (void *)(uintptr_t)size};
    log[0] = '\0';
    return cuModuleLoadDataEx(m, image, 2, options, values);
}

/* Granules, separate segments, trimming, and a full device. */
static void segments(void)
{
    CUmemoryPool pool = st_pool(0);
    CUstream s;
    CUdeviceptr p[4], big, fill;
    uint64_t keep = UINT64_MAX;
    EXPECT(cuMemPoolSetAttribute(pool, 4, &keep), 0);
    EXPECT(cuStreamCreate(&s, 1), 0);
    size_t f0 = st_free_bytes();
    CHECK(f0 % (2 * MIB) == 0);
    EXPECT(cuMemAllocFromPoolAsync(&p[0], 3 * MIB, pool, s), 0);
    CHECK(st_pool_attr(pool, 5) == 4 * MIB && st_free_bytes() == f0 - 4 * MIB);
    EXPECT(cuMemAllocFromPoolAsync(&p[1], MIB, pool, s), 0); /* the rest of that segment */
    CHECK(st_pool_attr(pool, 5) == 4 * MIB && st_pool_attr(pool, 7) == 4 * MIB);
    EXPECT(cuMemFreeAsync(p[0], s), 0);
    EXPECT(cuMemFreeAsync(p[1], s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuMemPoolTrimTo(pool, 0), 0);
    CHECK(st_pool_attr(pool, 5) == 0 && st_free_bytes() == f0);

    /* Leave 8 MiB of the device, spent as four 2 MiB segments, then idle. */
    EXPECT(cuMemAllocFromPoolAsync(&fill, f0 - 8 * MIB, pool, s), 0);
    for (int i = 0; i < 4; i++)
        EXPECT(cuMemAllocFromPoolAsync(&p[i], 2 * MIB, pool, s), 0);
    CHECK(st_free_bytes() == 0);
    for (int i = 0; i < 4; i++)
        EXPECT(cuMemFreeAsync(p[i], s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    CHECK(st_pool_attr(pool, 5) - st_pool_attr(pool, 7) == 8 * MIB);
    /* 8 MiB idle in four segments serve 2 MiB, never 4 MiB at once. */
    EXPECT(cuMemAllocFromPoolAsync(&big, 4 * MIB, pool, s), 2);
    EXPECT(cuMemAllocFromPoolAsync(&p[0], 2 * MIB, pool, s), 0);
    EXPECT(cuMemFreeAsync(p[0], s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    /* A trim gives the idle segments back; then the pool grows by 4 MiB. */
    EXPECT(cuMemPoolTrimTo(pool, 0), 0);
    CHECK(st_free_bytes() == 8 * MIB && st_pool_attr(pool, 5) == f0 - 8 * MIB);
    EXPECT(cuMemAllocFromPoolAsync(&big, 4 * MIB, pool, s), 0);
    CHECK(st_free_bytes() == 4 * MIB);
    /* A module needs 2 MiB of device memory too. */
    CUmodule m;
    char log[256];
    EXPECT(cuMemAllocFromPoolAsync(&p[0], 4 * MIB, pool, s), 0);
    CHECK(st_free_bytes() == 0);
    EXPECT(load(&m, ptx_euler, log, sizeof log), 2);
    EXPECT(cuMemFreeAsync(p[0], s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(load(&m, ptx_euler, log, sizeof log), 2); /* the pool keeps its idle segment */
    EXPECT(cuMemPoolTrimTo(pool, 0), 0);
    EXPECT(load(&m, ptx_euler, log, sizeof log), 0);
    CHECK(st_free_bytes() == 2 * MIB);
    EXPECT(cuModuleUnload(m), 0);
    CHECK(st_free_bytes() == 4 * MIB);
    EXPECT(cuMemFreeAsync(big, s), 0);
    EXPECT(cuMemFreeAsync(fill, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    CHECK(st_free_bytes() == f0);
    EXPECT(cuStreamDestroy_v2(s), 0);
}

/* Attribute 3: an allocation on b takes bytes freed on a, unordered, by
 * waiting for that free; with it off, the pool grows instead. */
static void internal_dependencies(void)
{
    CUmemoryPool pool = st_pool(0);
    CUstream a, b;
    CUdeviceptr x, y;
    uint64_t keep = UINT64_MAX;
    int off = 0, flag = -1;
    EXPECT(cuMemPoolSetAttribute(pool, 4, &keep), 0);
    EXPECT(cuMemPoolGetAttribute(pool, 3, &flag), 0);
    CHECK(flag == 1); /* the driver's default */
    EXPECT(cuStreamCreate(&a, 1), 0);
    EXPECT(cuStreamCreate(&b, 1), 0);
    char path[512];
    snprintf(path, sizeof path, "log=%s/internal.log", st_dir);
    CHECK(cubieFakeCudaControl(path) == 0);
    EXPECT(cuMemAllocFromPoolAsync(&x, 2 * MIB, pool, a), 0);
    EXPECT(cuMemFreeAsync(x, a), 0);
    EXPECT(cuMemAllocFromPoolAsync(&y, 2 * MIB, pool, b), 0);
    CHECK(st_pool_attr(pool, 5) == 2 * MIB); /* reused, not grown */
    CHECK(cubieFakeCudaControl("log=") == 0);
    /* b's allocation (the log's second) has a's free (a's op 2) in its clock. */
    char text[4096] = {0};
    snprintf(path, sizeof path, "%s/internal.log", st_dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        CHECK(fread(text, 1, sizeof text - 1, f) > 0);
        fclose(f);
    }
    const char *second = strstr(text, "\"kind\":\"alloc\"");
    second = second ? strstr(second + 1, "\"kind\":\"alloc\"") : NULL;
    const char *clock = second ? strstr(second, "\"clock\":{") : NULL;
    CHECK(clock && strncmp(strchr(clock, '{') + 1, "\"", 1) == 0);
    char entries[64] = {0};
    if (clock)
        sscanf(clock, "\"clock\":{%63[^}]", entries);
    CHECK(strchr(entries, ',') && st_contains(entries, ":2,") && st_contains(entries, ":1"));
    EXPECT(cuStreamSynchronize(b), 0); /* runs a's free first */
    EXPECT(cuStreamQuery(a), 0);
    EXPECT(cuMemFreeAsync(y, b), 0);
    EXPECT(cuStreamSynchronize(b), 0);

    EXPECT(cuMemPoolSetAttribute(pool, 3, &off), 0);
    EXPECT(cuMemAllocFromPoolAsync(&x, 2 * MIB, pool, a), 0);
    EXPECT(cuMemFreeAsync(x, a), 0);
    EXPECT(cuMemAllocFromPoolAsync(&y, 2 * MIB, pool, b), 0);
    CHECK(st_pool_attr(pool, 5) == 4 * MIB); /* grown: the free is not b's to wait for */
    EXPECT(cuStreamQuery(a), 600);
    EXPECT(cuMemFreeAsync(y, b), 0);
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    EXPECT(cuStreamDestroy_v2(a), 0);
    EXPECT(cuStreamDestroy_v2(b), 0);
}

/* .version newer than the driver's CUDA version (13.5 loads PTX ISA 9.5),
 * .target above the device (9.0). */
static void ptx_versions(void)
{
    CUmodule m;
    char log[256];
    EXPECT(load(&m, ".version 9.6\n.target sm_90\n.entry k() { ret; }\n", log, sizeof log), 222);
    CHECK(st_contains(log, "Unsupported .version 9.6; current version is '9.5'"));
    EXPECT(load(&m, ".version 9.5\n.target sm_100\n.entry k() { ret; }\n", log, sizeof log), 218);
    CHECK(st_contains(log, "higher than default SM version"));
    EXPECT(load(&m, ".version 9.5\n.target sm_90a\n.entry k() { ret; }\n", log, sizeof log), 0);
    EXPECT(cuModuleUnload(m), 0);
}

static void launch_limits(void)
{
    static const int attrs[][2] = {{1, 1024}, {2, 1024}, {3, 1024}, {4, 64}, {5, 2147483647},
                                   {6, 65535}, {7, 65535}, {8, 49152}, {97, 232448}};
    int v;
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        EXPECT(cuDeviceGetAttribute(&v, attrs[i][0], 0), 0);
        CHECK(v == attrs[i][1]);
    }
    CUmodule m;
    CUfunction f;
    char log[256];
    EXPECT(load(&m, ptx_euler, log, sizeof log), 0);
    EXPECT(cuModuleGetFunction(&f, m, "euler_decay"), 0);
    EXPECT(cuFuncGetAttribute(&v, 0, f), 0);
    CHECK(v == 1024);
    EXPECT(cuFuncGetAttribute(&v, 1, f), 0);
    CHECK(v == 0);
    EXPECT(cuFuncGetAttribute(&v, 8, f), 0);
    CHECK(v == 49152);
    size_t offset, size;
    static const size_t offsets[] = {0, 8, 16, 24}, sizes[] = {8, 8, 8, 4};
    for (size_t i = 0; i < 4; i++) {
        EXPECT(cuFuncGetParamInfo(f, i, &offset, &size), 0);
        CHECK(offset == offsets[i] && size == sizes[i]);
    }
    EXPECT(cuFuncGetParamInfo(f, 4, &offset, &size), 1);
    EXPECT(cuFuncGetParamInfo(f, 0, NULL, &size), 1);

    CUmemoryPool pool = st_pool(0);
    CUstream s;
    CUdeviceptr d;
    double dt = 0.5;
    unsigned n = 16;
    EXPECT(cuStreamCreate(&s, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&d, 16 * sizeof(double), pool, s), 0);
    void *params[] = {&d, &d, &dt, &n}, *three[] = {&d, &d, &dt, NULL};
    EXPECT(cuLaunchKernel(f, 1, 65536, 1, 16, 1, 1, 0, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 1, 1, 65536, 16, 1, 1, 0, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 2147483648u, 1, 1, 16, 1, 1, 0, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 65, 0, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 64, 32, 1, 0, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, three, NULL), 1);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 49153, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 49152, s, params, NULL), 0);
    EXPECT(cuFuncSetAttribute(f, 8, 232449), 1);
    EXPECT(cuFuncSetAttribute(f, 0, 512), 1); /* read-only */
    EXPECT(cuFuncSetAttribute(f, 8, 100000), 0);
    EXPECT(cuFuncGetAttribute(&v, 8, f), 0);
    CHECK(v == 100000);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 100000, s, params, NULL), 0);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 100001, s, params, NULL), 1);
    EXPECT(cuMemFreeAsync(d, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuModuleUnload(m), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    EXPECT(cuStreamDestroy_v2(s), 0);
}

/* euler_decay_local's 512 bytes a thread, for 132 x 2048 resident threads:
 * reserved by its first launch, kept by the context (so it comes last). */
static void local_memory(void)
{
    static const char ptx_local[] =
        ".version 7.0\n.target sm_50\n.address_size 64\n"
        ".visible .entry euler_decay_local(.param .u64 y, .param .u64 k, .param .f64 dt, "
        ".param .u32 n)\n{ ret; }\n";
    const size_t local = 512ULL * 132 * 2048;
    CUmemoryPool pool = st_pool(0);
    CUmodule m;
    CUfunction f;
    CUstream s;
    CUdeviceptr d, fill;
    char log[256];
    double dt = 0.5;
    unsigned n = 16;
    EXPECT(load(&m, ptx_local, log, sizeof log), 0);
    EXPECT(cuModuleGetFunction(&f, m, "euler_decay_local"), 0);
    EXPECT(cuStreamCreate(&s, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&d, 16 * sizeof(double), pool, s), 0);
    void *params[] = {&d, &d, &dt, &n};
    size_t f0 = st_free_bytes();
    /* Leave the device 2 MiB short of the local memory. */
    EXPECT(cuMemAllocFromPoolAsync(&fill, f0 - local + 2 * MIB, pool, s), 0);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, params, NULL), 2);
    EXPECT(cuMemFreeAsync(fill, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuMemPoolTrimTo(pool, 16 * sizeof(double)), 0);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, params, NULL), 0);
    CHECK(st_free_bytes() == f0 - local);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, params, NULL), 0);
    CHECK(st_free_bytes() == f0 - local); /* reserved once */
    EXPECT(cuMemFreeAsync(d, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuModuleUnload(m), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    EXPECT(cuStreamDestroy_v2(s), 0);
}

void st_limits(CUcontext ctx)
{
    (void)ctx;
    segments();
    internal_dependencies();
    ptx_versions();
    launch_limits();
    local_memory();
}
