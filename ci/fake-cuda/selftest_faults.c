/* selftest_faults.c - each violation (and the sticky 700 and reset after
 * it), the controls, the knobs (in child processes: they are read once, at
 * cuInit), and an unimplemented entry point. */
#include <dlfcn.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "selftest.h"

extern char **environ;

static const char ptx[] = ".version 7.0\n.target sm_50\n.entry euler_decay()\n";

void st_faults(CUcontext ctx)
{
    enum { N = 256 };
    CUmemoryPool pool = st_pool(0);
    CUstream a, b;
    CUevent e;
    CUdeviceptr x;
    unsigned char *h;
    (void)ctx;
    EXPECT(cuStreamCreate(&a, 1), 0);
    EXPECT(cuStreamCreate(&b, 1), 0);
    EXPECT(cuEventCreate(&e, 2), 0);
    EXPECT(cuMemHostAlloc((void **)&h, N, 0), 0);

    /* 1. Used on a stream the allocation is not ordered before. */
    EXPECT(cuMemAllocFromPoolAsync(&x, N, pool, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h, N, b), 700);
    VIOLATION("before its allocation on stream");
    EXPECT(cuEventRecord(e, a), 0);
    EXPECT(cuStreamWaitEvent(b, e, 0), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h, N, b), 0);

    /* 2. Freed on a while b's use is not ordered before the free. */
    EXPECT(cuMemFreeAsync(x, a), 700);
    VIOLATION("while still in use on stream");
    EXPECT(cuEventRecord(e, b), 0);
    EXPECT(cuStreamWaitEvent(a, e, 0), 0);
    EXPECT(cuMemFreeAsync(x, a), 0);
    /* ... and used after its stream-ordered free (even on the same stream). */
    EXPECT(cuMemcpyDtoHAsync_v2(h, x, N, a), 700);
    VIOLATION("after its stream-ordered free");
    EXPECT(cuMemFreeAsync(x, a), 700);
    VIOLATION("freed again");
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuMemcpyHtoD_v2(x, h, N), 700); /* still caught after the free executed */
    VIOLATION("after its stream-ordered free");

    /* 3. Page-locked bytes written by one copy while another, unordered, touches them. */
    EXPECT(cuMemAllocFromPoolAsync(&x, N, pool, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h, N / 2, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x + N / 2, h, N / 2, b), 0); /* both read h: fine */
    EXPECT(cuMemcpyDtoHAsync_v2(h + 16, x + N / 2, 16, b), 700);
    VIOLATION("page-locked memory");
    EXPECT(cuEventRecord(e, b), 0);
    EXPECT(cuStreamWaitEvent(a, e, 0), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h, x, N, a), 0); /* after b's read */
    EXPECT(cuMemFreeHost(h), 700); /* copies in flight */
    VIOLATION("page-locked memory");
    EXPECT(cuCtxSynchronize(), 0);

    /* cuMemFree_v2 of pool memory a queued copy still uses: it does not wait. */
    CUdeviceptr y;
    EXPECT(cuMemAllocFromPoolAsync(&y, N, pool, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(y, h, N, b), 0);
    EXPECT(cuMemFree_v2(y), 700);
    VIOLATION("freed with cuMemFree_v2 while still in use");
    EXPECT(cuStreamSynchronize(b), 0);
    EXPECT(cuMemFree_v2(y), 0);

    /* 4. A pool destroyed with a live allocation. */
    EXPECT(cuMemPoolDestroy(pool), 700);
    VIOLATION("destroyed with 1 live allocations");

    /* Kernels: a pointer outside any allocation, a module unloaded too soon. */
    CUmodule m;
    CUfunction f;
    CUdeviceptr bogus = 0x1000;
    double dt = 0.5;
    unsigned n = 4;
    EXPECT(cuModuleLoadDataEx(&m, ptx, 0, NULL, NULL), 0);
    EXPECT(cuModuleGetFunction(&f, m, "euler_decay"), 0);
    void *bad[] = {&x, &bogus, &dt, &n};
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, a, bad, NULL), 700);
    VIOLATION("illegal address");
    void *good[] = {&x, &x, &dt, &n};
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, a, good, NULL), 0);
    EXPECT(cuModuleUnload(m), 700);
    VIOLATION("module unloaded while 1 launches");
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuModuleUnload(m), 0);

    /* The sticky error leaves the pure calls alone. */
    CUdeviceptr x2;
    EXPECT(cuMemFreeHost(h + 3), 1);
    EXPECT(cuMemAllocFromPoolAsync(&x2, N, pool, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x2, h, N, b), 700);
    int v = 0;
    EXPECT(cuDriverGetVersion(&v), 0);
    EXPECT(cuInit(0), 700);
    VIOLATION("before its allocation on stream");
    EXPECT(cuMemFreeAsync(x2, a), 0);
    EXPECT(cuCtxSynchronize(), 0);

    /* Controls. */
    CUdeviceptr p;
    unsigned long long queries = cubieFakeCudaCalls("cuStreamQuery");
    EXPECT(cuStreamQuery(a), 0);
    EXPECT(cuStreamQuery(NULL), 0);
    CHECK(cubieFakeCudaCalls("cuStreamQuery") == queries + 2);
    CHECK(cubieFakeCudaCalls("cuNope") == 0 && cubieFakeCudaCalls(NULL) == 0);
    CHECK(cubieFakeCudaControl("fail=cuMemAlloc_v2:2,cuStreamQuery:46") == 0);
    EXPECT(cuMemAlloc_v2(&p, 8), 2);
    EXPECT(cuMemAlloc_v2(&p, 8), 2);
    EXPECT(cuStreamQuery(a), 46);
    CHECK(cubieFakeCudaControl("reset") == 0);
    EXPECT(cuMemAlloc_v2(&p, 8), 0);
    EXPECT(cuMemFree_v2(p), 0);
    CHECK(cubieFakeCudaControl("fail-call=2:912") == 0);
    EXPECT(cuStreamQuery(a), 0);
    EXPECT(cuStreamQuery(a), 912);
    EXPECT(cuStreamQuery(a), 0);
    CHECK(cubieFakeCudaControl("oom-above=1000") == 0);
    EXPECT(cuMemAllocFromPoolAsync(&p, 1001, pool, a), 2);
    EXPECT(cuMemAlloc_v2(&p, 1001), 2);
    EXPECT(cuMemFreeAsync(x, a), 0);
    EXPECT(cuMemAllocFromPoolAsync(&p, 1000, pool, a), 0);
    EXPECT(cuMemFreeAsync(p, a), 0);
    CHECK(cubieFakeCudaControl("reset") == 0);
    static const char *const wrong[] = {"bogus", "fail=cuNope:1", "fail=cuInit", "fail=cuInit:0",
                                        "fail-call=0:1", "fail-call=1:x", "oom-above=x",
                                        "oom-above=-1", "log=/nonexistent/dir/file", ""};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++)
        CHECK(cubieFakeCudaControl(wrong[i]) == -1);
    CHECK(cubieFakeCudaControl(NULL) == -1);

    /* An entry point the fake does not implement. */
    CUresult (*unimplemented)(void) = (CUresult(*)(void))dlsym(RTLD_DEFAULT, "cuArrayCreate_v2");
    CHECK(unimplemented != NULL);
    if (unimplemented)
        EXPECT(unimplemented(), 801);
    CHECK(dlsym(RTLD_DEFAULT, "cuMemAlloc") != NULL);

    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemFreeHost(h), 0);
    EXPECT(cuEventDestroy_v2(e), 0);
    EXPECT(cuStreamDestroy_v2(a), 0);
    EXPECT(cuStreamDestroy_v2(b), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    CHECK(cubieFakeCudaViolations(NULL, 0) == 0);
}

/* ---- knobs: each case in a process of its own -------------------------- */

static int spawn(const char *which, const char *const *knobs)
{
    size_t n = 0, k = 0;
    while (environ[n])
        n++;
    while (knobs[k])
        k++;
    char **env = calloc(n + k + 1, sizeof *env);
    if (!env)
        return -1;
    memcpy(env, environ, n * sizeof *env);
    for (size_t i = 0; i < k; i++)
        env[n + i] = (char *)knobs[i];
    char *argv[] = {(char *)st_self, "--child", (char *)which, (char *)st_dir, NULL};
    pid_t pid;
    int status = -1;
    if (posix_spawn(&pid, st_self, NULL, NULL, argv, env) != 0 || waitpid(pid, &status, 0) < 0)
        status = -1;
    free(env);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int st_spawn(const char *which, const char *const *knobs)
{
    return spawn(which, knobs);
}

void st_children(void)
{
    char log[600], viol[600];
    snprintf(log, sizeof log, "CUBIE_FAKE_CUDA_LOG=%s/knob.jsonl", st_dir);
    snprintf(viol, sizeof viol, "CUBIE_FAKE_CUDA_VIOLATIONS=%s/violations.txt", st_dir);
    const char *knobs[] = {"CUBIE_FAKE_CUDA_DEVICES=3", "CUBIE_FAKE_CUDA_NAME_2=gpu two",
                           "CUBIE_FAKE_CUDA_TOTAL_2=1073741824", "CUBIE_FAKE_CUDA_FREE_2=536870912",
                           "CUBIE_FAKE_CUDA_NO_POOLS=1", "CUBIE_FAKE_CUDA_VERSION=12080",
                           "CUBIE_FAKE_CUDA_PINNED_GBPS=50", "CUBIE_FAKE_CUDA_PAGEABLE_GBPS=5",
                           "CUBIE_FAKE_CUDA_KERNEL_NS_PER_ELEMENT=1",
                           "CUBIE_FAKE_CUDA_OOM_ABOVE=1048576",
                           "CUBIE_FAKE_CUDA_JIT_ERROR=knob says no",
                           "CUBIE_FAKE_CUDA_FAIL=cuStreamQuery:999,cuEventQuery:46",
                           "CUBIE_FAKE_CUDA_FAIL_CALL=4:46", log, viol, NULL};
    CHECK(spawn("knobs", knobs) == 0);
    const char *unknown[] = {"CUBIE_FAKE_CUDA_DEVICE=1", NULL};
    CHECK(spawn("invalid", unknown) == 0);
    const char *malformed[] = {"CUBIE_FAKE_CUDA_TOTAL_0=12abc", NULL};
    CHECK(spawn("invalid", malformed) == 0);
    const char *range[] = {"CUBIE_FAKE_CUDA_FREE_2=1024", NULL};
    CHECK(spawn("invalid", range) == 0);
    const char *names[] = {"CUBIE_FAKE_CUDA_FAIL=cuNope:1", NULL};
    CHECK(spawn("invalid", names) == 0);
    const char *gbps[] = {"CUBIE_FAKE_CUDA_PINNED_GBPS=0", NULL};
    CHECK(spawn("invalid", gbps) == 0);
    const char *none[] = {"CUBIE_FAKE_CUDA_DEVICES=0", NULL};
    CHECK(spawn("nodevice", none) == 0);
    const char *first[] = {"CUBIE_FAKE_CUDA_FAIL_CALL=1:46", NULL};
    CHECK(spawn("failinit", first) == 0);
}

static int read_file(const char *name, char *buf, size_t len)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", st_dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

static void knobs_child(void)
{
    int n = 0, v = 0;
    char name[64], text[4096];
    CUcontext c;
    CUstream s;
    CUevent t0, t1;
    CUdeviceptr p, q;
    size_t f, t;
    float ms;
    EXPECT(cuInit(0), 0);                             /* call 1 */
    EXPECT(cuDeviceGetCount(&n), 0);                  /* call 2 */
    CHECK(n == 3);
    EXPECT(cuDriverGetVersion(&v), 0);                /* call 3 */
    CHECK(v == 12080);
    EXPECT(cuDeviceGetName(name, sizeof name, 2), 46); /* call 4: FAIL_CALL */
    EXPECT(cuDeviceGetName(name, sizeof name, 2), 0);
    CHECK(strcmp(name, "gpu two") == 0);
    EXPECT(cuDeviceGetAttribute(&v, 115, 2), 0);
    CHECK(v == 0);
    EXPECT(cuDevicePrimaryCtxRetain(&c, 2), 0);
    EXPECT(cuCtxSetCurrent(c), 0);
    EXPECT(cuMemGetInfo_v2(&f, &t), 0);
    CHECK(f == 512 * MIB && t == GIB);
    EXPECT(cuStreamCreate(&s, 1), 0);
    EXPECT(cuStreamQuery(s), 999);
    CUmemoryPool pool = st_pool(2);
    EXPECT(cuMemAllocFromPoolAsync(&p, 2 * MIB, pool, s), 2); /* OOM_ABOVE */
    EXPECT(cuMemAllocFromPoolAsync(&p, MIB, pool, s), 0);
    CUmodule m;
    CUjit_option options[2] = {5, 6};
    void *values[2] = {text, (void *)(uintptr_t)sizeof text};
    EXPECT(cuModuleLoadDataEx(&m, ptx, 2, options, values), 218);
    CHECK(strcmp(text, "knob says no") == 0);
    CHECK(cubieFakeCudaControl("oom-above=100000000") == 0);
    EXPECT(cuMemAllocFromPoolAsync(&q, 100000, pool, s), 0);
    unsigned char *h, *pageable = calloc(1, 100000);
    CHECK(pageable != NULL);
    EXPECT(cuMemHostAlloc((void **)&h, 100000, 0), 0);
    EXPECT(cuEventCreate(&t0, 0), 0);
    EXPECT(cuEventCreate(&t1, 0), 0);
    EXPECT(cuEventRecord(t0, s), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(q, h, 50000, s), 0);       /* 1000 ns at 50 GB/s */
    EXPECT(cuMemcpyHtoDAsync_v2(q, pageable, 5000, s), 0); /* 1000 ns at 5 GB/s */
    CHECK(cubieFakeCudaControl("jit-error=") == 0);
    const char *real = ".version 7.0\n.target sm_90\n.entry euler_decay(\n)\n";
    EXPECT(cuModuleLoadDataEx(&m, real, 0, NULL, NULL), 0);
    CUfunction fn;
    EXPECT(cuModuleGetFunction(&fn, m, "euler_decay"), 0);
    double dt = 0.1;
    unsigned count = 1000;
    void *params[] = {&q, &q, &dt, &count};
    EXPECT(cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, s, params, NULL), 0); /* 2000 + 1000 ns */
    EXPECT(cuEventRecord(t1, s), 0);
    EXPECT(cuEventSynchronize(t1), 0);
    EXPECT(cuEventElapsedTime(&ms, t0, t1), 0);
    CHECK(ms > 0.004999f && ms < 0.005001f);
    EXPECT(cuEventQuery(t1), 46);
    /* A violation lands in the file. */
    EXPECT(cuMemFreeAsync(p, s), 0);
    EXPECT(cuMemFreeAsync(p, s), 700);
    CHECK(cubieFakeCudaControl("reset") == 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuStreamQuery(s), 0); /* reset cleared FAIL too */
    CHECK(read_file("violations.txt", text, sizeof text) == 0 &&
          st_contains(text, "fake libcuda: VIOLATION: device memory") &&
          st_contains(text, "freed again"));
    CHECK(read_file("knob.jsonl", text, sizeof text) == 0 && st_contains(text, "\"device\":2") &&
          st_contains(text, "\"kind\":\"kernel\"") && st_contains(text, "\"name\":\"euler_decay\"") &&
          st_contains(text, "\"end_ns\":"));
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemFreeHost(h), 0);
    free(pageable);
    EXPECT(cuDevicePrimaryCtxRelease_v2(2), 0);
}

int st_child(const char *which)
{
    int n = 0;
    if (strcmp(which, "knobs") == 0) {
        knobs_child();
    } else if (strcmp(which, "invalid") == 0) {
        EXPECT(cuInit(0), 1);
        EXPECT(cuInit(0), 1);
        EXPECT(cuDeviceGetCount(&n), 3);
    } else if (strcmp(which, "exec") == 0) {
        st_exec_child();
    } else if (strcmp(which, "nodevice") == 0) {
        EXPECT(cuInit(0), 100);
        EXPECT(cuDeviceGetCount(&n), 3);
    } else if (strcmp(which, "failinit") == 0) {
        EXPECT(cuInit(0), 46);
        EXPECT(cuDeviceGetCount(&n), 3);
        EXPECT(cuInit(0), 0);
        EXPECT(cuDeviceGetCount(&n), 0);
        CHECK(n == 2);
    } else {
        CHECK(!"a known child case");
    }
    return st_failures() ? 1 : 0;
}
