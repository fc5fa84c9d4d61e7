/* selftest_exec.c - the execution modes: a correctly ordered program on
 * two streams gives the same results and the same modelled time in every
 * mode; what has run before the host synchronises is as each mode says;
 * the random mode repeats from its seed after reset and names it in
 * violations; the control exec= and the knobs EXEC and SEED. */
#include <stdio.h>

#include "selftest.h"

enum { N = 1024, COPIES = 40 };

static const char ptx[] = ".version 7.0\n.target sm_50\n"
                          ".entry euler_decay()\n.entry euler_decay_into()\n";

struct program {
    CUstream a, b;
    CUevent e, e2, t0, t1;
    CUfunction decay, into;
    CUdeviceptr y, k, out;
    double *hy, *hk, *hout, *hy2; /* page-locked */
};

static void euler_host(double *out, const double *y, const double *k, double dt)
{
    for (int i = 0; i < N; i++)
        out[i] = y[i] + dt * (-(k[i] * y[i]));
}

/* a: y, k up; y = step(y, k). b, after a: out = step(y, k), out down.
 * a, after b: y up again (new values), y = step(y, k), y down. Returns
 * the modelled time from the first op to the last (ms). */
static float run_program(struct program *p, double dt, int *landed_early)
{
    unsigned n = N;
    float ms = -1;
    for (int i = 0; i < N; i++) {
        p->hy[i] = 1.0 + i / 9.0;
        p->hk[i] = 0.25 + (i % 5) * 0.5;
        p->hy2[i] = 2.0 - i / 2048.0;
        p->hout[i] = 0;
        p->hy[N + i] = 0;
    }
    void *dparams[] = {&p->y, &p->k, &dt, &n};
    void *iparams[] = {&p->out, &p->y, &p->k, &dt, &n};
    EXPECT(cuEventRecord(p->t0, p->a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->y, p->hy, N * sizeof(double), p->a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->k, p->hk, N * sizeof(double), p->a), 0);
    EXPECT(cuLaunchKernel(p->decay, 4, 1, 1, 256, 1, 1, 0, p->a, dparams, NULL), 0);
    EXPECT(cuEventRecord(p->e, p->a), 0);
    EXPECT(cuStreamWaitEvent(p->b, p->e, 0), 0);
    EXPECT(cuLaunchKernel(p->into, 4, 1, 1, 256, 1, 1, 0, p->b, iparams, NULL), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(p->hout, p->out, N * sizeof(double), p->b), 0);
    EXPECT(cuEventRecord(p->e2, p->b), 0);
    EXPECT(cuStreamWaitEvent(p->a, p->e2, 0), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->y, p->hy2, N * sizeof(double), p->a), 0);
    EXPECT(cuLaunchKernel(p->decay, 4, 1, 1, 256, 1, 1, 0, p->a, dparams, NULL), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(p->hy + N, p->y, N * sizeof(double), p->a), 0);
    EXPECT(cuEventRecord(p->t1, p->a), 0);
    *landed_early = p->hout[0] != 0;
    EXPECT(cuEventSynchronize(p->t1), 0);
    EXPECT(cuEventElapsedTime(&ms, p->t0, p->t1), 0);
    return ms;
}

static void check_results(const struct program *p, double dt)
{
    double step[N], want[N];
    euler_host(step, p->hy, p->hk, dt);
    euler_host(want, step, p->hk, dt);
    CHECK(memcmp(p->hout, want, sizeof want) == 0);
    euler_host(want, p->hy2, p->hk, dt);
    CHECK(memcmp(p->hy + N, want, sizeof want) == 0);
}

/* COPIES downloads of k's first double (0.25: its last byte is 0x3F) into
 * distinct bytes, alternating between the streams: after each call, how
 * many have landed. */
static void landing(struct program *p, int trace[COPIES])
{
    unsigned char *h = (unsigned char *)p->hout;
    memset(h, 0, COPIES * 64);
    for (int i = 0; i < COPIES; i++) {
        EXPECT(cuMemcpyDtoHAsync_v2(h + i * 64, p->k, 64, i % 2 ? p->b : p->a), 0);
        int landed = 0;
        for (int j = 0; j <= i; j++)
            landed += h[j * 64 + 7] != 0;
        trace[i] = landed;
    }
    EXPECT(cuCtxSynchronize(), 0);
    for (int j = 0; j < COPIES; j++)
        CHECK(h[j * 64 + 7] == 0x3F);
}

static void modes_agree(struct program *p)
{
    static const char *const modes[] = {"exec=lazy", "exec=eager", "exec=random:1",
                                        "exec=random:7", "exec=random:123456789"};
    const double dt = 0.125;
    float first = -1;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        int early = -1;
        CHECK(cubieFakeCudaControl(modes[m]) == 0);
        float ms = run_program(p, dt, &early);
        check_results(p, dt);
        if (m == 0) {
            first = ms;
            CHECK(!early); /* lazy: nothing ran before the host synchronised */
        } else {
            CHECK(ms == first); /* the same modelled time */
        }
        if (m == 1)
            CHECK(early); /* eager: everything ran at once */
    }
    CHECK(first > 0);
}

static void what_runs(struct program *p)
{
    int lazy[COPIES], eager[COPIES], r1[COPIES], r2[COPIES];
    CHECK(cubieFakeCudaControl("exec=lazy") == 0);
    landing(p, lazy);
    CHECK(lazy[COPIES - 1] == 0);
    CHECK(cubieFakeCudaControl("exec=eager") == 0);
    landing(p, eager);
    int all = 1;
    for (int i = 0; i < COPIES; i++)
        all &= eager[i] == i + 1;
    CHECK(all);
    /* Random: some copies run early, some late; the same seed after reset
     * runs the same ones. */
    CHECK(cubieFakeCudaControl("exec=random:7") == 0);
    landing(p, r1);
    CHECK(cubieFakeCudaControl("reset") == 0);
    landing(p, r2);
    int early = 0, late = 0;
    for (int i = 0; i < COPIES; i++) {
        early |= r1[i] > 0;
        late |= r1[i] < i + 1;
    }
    CHECK(early && late && memcmp(r1, r2, sizeof r1) == 0);
    /* A query sees unexecuted work only where the mode left some. */
    CHECK(cubieFakeCudaControl("exec=eager") == 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->y, p->hy, 64, p->a), 0);
    EXPECT(cuStreamQuery(p->a), 0);
    CHECK(cubieFakeCudaControl("exec=lazy") == 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->y, p->hy, 64, p->a), 0);
    EXPECT(cuStreamQuery(p->a), 600);
    EXPECT(cuStreamQuery(p->a), 0);
}

static void violations_name_the_mode(struct program *p)
{
    char last[1024];
    CHECK(cubieFakeCudaControl("exec=random:99") == 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->y, p->hy, 64, p->a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->y, p->hy, 64, p->b), 700);
    cubieFakeCudaViolations(last, sizeof last);
    CHECK(st_contains(last, "(write after write) [exec=random:99]"));
    VIOLATION("race on device memory");
    CHECK(cubieFakeCudaControl("exec=eager") == 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->y, p->hy, 64, p->b), 700);
    cubieFakeCudaViolations(last, sizeof last);
    CHECK(st_contains(last, "(write after write) [exec=eager]"));
    VIOLATION("race on device memory");
    CHECK(cubieFakeCudaControl("exec=lazy") == 0);
    EXPECT(cuMemcpyHtoDAsync_v2(p->y, p->hy, 64, p->b), 700);
    cubieFakeCudaViolations(last, sizeof last);
    CHECK(!st_contains(last, "[exec="));
    VIOLATION("race on device memory");
    EXPECT(cuCtxSynchronize(), 0);
    static const char *const wrong[] = {"exec=", "exec=fast", "exec=random:", "exec=random:x",
                                        "exec=lazy:-1", "exec=random:99999999999999999999"};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++)
        CHECK(cubieFakeCudaControl(wrong[i]) == -1);
}

void st_exec(CUcontext ctx)
{
    struct program p;
    CUmodule m;
    CUmemoryPool pool = st_pool(0);
    (void)ctx;
    EXPECT(cuStreamCreate(&p.a, 1), 0);
    EXPECT(cuStreamCreate(&p.b, 1), 0);
    CUevent *evs[] = {&p.e, &p.e2, &p.t0, &p.t1};
    for (int i = 0; i < 4; i++)
        EXPECT(cuEventCreate(evs[i], 0), 0);
    /* cuModuleLoadData is cuModuleLoadDataEx without options. */
    EXPECT(cuModuleLoadData(&m, ptx), 0);
    EXPECT(cuModuleGetFunction(&p.decay, m, "euler_decay"), 0);
    EXPECT(cuModuleUnload(m), 0);
    EXPECT(cuModuleLoadData(&m, "no ptx"), 218);
    EXPECT(cuModuleLoadDataEx(&m, ptx, 0, NULL, NULL), 0);
    EXPECT(cuModuleGetFunction(&p.decay, m, "euler_decay"), 0);
    EXPECT(cuModuleGetFunction(&p.into, m, "euler_decay_into"), 0);
    double **hs[] = {&p.hy, &p.hk, &p.hout, &p.hy2};
    for (int i = 0; i < 4; i++)
        EXPECT(cuMemHostAlloc((void **)hs[i], 2 * N * sizeof(double), 0), 0);
    CUdeviceptr *ds[] = {&p.y, &p.k, &p.out};
    for (int i = 0; i < 3; i++)
        EXPECT(cuMemAllocFromPoolAsync(ds[i], N * sizeof(double), pool, p.a), 0);
    EXPECT(cuEventRecord(p.e, p.a), 0);
    EXPECT(cuStreamWaitEvent(p.b, p.e, 0), 0);

    modes_agree(&p);
    what_runs(&p);
    violations_name_the_mode(&p);

    CHECK(cubieFakeCudaControl("exec=lazy") == 0);
    EXPECT(cuCtxSynchronize(), 0);
    for (int i = 0; i < 3; i++)
        EXPECT(cuMemFreeAsync(*ds[i], p.a), 0);
    EXPECT(cuStreamSynchronize(p.a), 0);
    for (int i = 0; i < 4; i++)
        EXPECT(cuMemFreeHost(*hs[i]), 0);
    EXPECT(cuModuleUnload(m), 0);
    for (int i = 0; i < 4; i++)
        EXPECT(cuEventDestroy_v2(*evs[i]), 0);
    EXPECT(cuStreamDestroy_v2(p.a), 0);
    EXPECT(cuStreamDestroy_v2(p.b), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    CHECK(cubieFakeCudaViolations(NULL, 0) == 0);

    const char *knobs[] = {"CUBIE_FAKE_CUDA_EXEC=random", "CUBIE_FAKE_CUDA_SEED=42", NULL};
    CHECK(st_spawn("exec", knobs) == 0);
    const char *bad_mode[] = {"CUBIE_FAKE_CUDA_EXEC=fast", NULL};
    CHECK(st_spawn("invalid", bad_mode) == 0);
    const char *bad_seed[] = {"CUBIE_FAKE_CUDA_EXEC=random", "CUBIE_FAKE_CUDA_SEED=-3", NULL};
    CHECK(st_spawn("invalid", bad_seed) == 0);
}

/* CUBIE_FAKE_CUDA_EXEC=random, CUBIE_FAKE_CUDA_SEED=42: violations name them. */
void st_exec_child(void)
{
    CUcontext c;
    CUstream a, b;
    CUdeviceptr x;
    unsigned char *h;
    char last[1024];
    EXPECT(cuInit(0), 0);
    EXPECT(cuDevicePrimaryCtxRetain(&c, 0), 0);
    EXPECT(cuCtxSetCurrent(c), 0);
    EXPECT(cuStreamCreate(&a, 1), 0);
    EXPECT(cuStreamCreate(&b, 1), 0);
    EXPECT(cuMemAlloc_v2(&x, 64), 0);
    EXPECT(cuMemHostAlloc((void **)&h, 64, 0), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h, x, 32, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h + 32, 32, b), 700);
    cubieFakeCudaViolations(last, sizeof last);
    CHECK(st_contains(last, "race on device memory: h2d on stream ") &&
          st_contains(last, "(write after read) [exec=random:42]"));
    CHECK(cubieFakeCudaControl("reset") == 0);
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemFree_v2(x), 0);
    EXPECT(cuMemFreeHost(h), 0);
    EXPECT(cuDevicePrimaryCtxRelease_v2(0), 0);
}
