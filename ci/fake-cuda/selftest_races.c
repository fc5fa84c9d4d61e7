/* selftest_races.c - races on device memory: each kind across two
 * streams (read after write, write after read, write after write, a
 * synchronous copy against a stream), what orders two accesses (an event,
 * the host's synchronisation, the same stream) and what never races (two
 * reads, disjoint bytes), the kernels' per-parameter access, and the
 * access list staying short over a long pipeline. */
#include <stdio.h>

#include "selftest.h"

static const char ptx[] = ".version 7.0\n.target sm_50\n"
                          ".entry euler_decay()\n.entry euler_decay_into()\n";

/* Copies across streams a and b on x (N bytes), from and into the
 * page-locked blocks h1 and h2 (never the same bytes of one block on two
 * streams, so that only device memory can race). */
static void copies(CUstream a, CUstream b, CUevent e, CUdeviceptr x, unsigned char *h1,
                   unsigned char *h2, size_t n)
{
    char last[1024];
    /* Read after write. */
    EXPECT(cuMemcpyHtoDAsync_v2(x, h1, n, a), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h2, x, n, b), 700);
    cubieFakeCudaViolations(last, sizeof last);
    CHECK(st_contains(last, "race on device memory: d2h on stream "));
    CHECK(st_contains(last, " reads 0x") && st_contains(last, " writes bytes 0.."));
    VIOLATION("with no event between (read after write)");
    EXPECT(cuCtxSynchronize(), 0);
    /* Write after read. */
    EXPECT(cuMemcpyDtoHAsync_v2(h1, x, n, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h2, n, b), 700);
    VIOLATION("(write after read)");
    EXPECT(cuCtxSynchronize(), 0);
    /* Write after write, on overlapping bytes only. */
    EXPECT(cuMemcpyHtoDAsync_v2(x, h1, n / 2, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x + n / 2, h2, n / 2, b), 0); /* disjoint: fine */
    EXPECT(cuMemcpyHtoDAsync_v2(x + n / 2 - 8, h2 + n / 2, 16, b), 700);
    cubieFakeCudaViolations(last, sizeof last);
    char want[128];
    snprintf(want, sizeof want, "(bytes %zu..%zu of the allocation at 0x%llx)", n / 2 - 8,
             n / 2 + 8, (unsigned long long)x);
    CHECK(st_contains(last, want));
    VIOLATION("(write after write)");
    EXPECT(cuCtxSynchronize(), 0);

    /* Not races: two reads, an event between, the host's synchronisation
     * between, the same stream. */
    EXPECT(cuMemcpyDtoHAsync_v2(h1, x, n, a), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h2, x, n, b), 0);
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h1, n, a), 0);
    EXPECT(cuEventRecord(e, a), 0);
    EXPECT(cuStreamWaitEvent(b, e, 0), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h2, x, n, b), 0);
    EXPECT(cuStreamSynchronize(b), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h1, n, a), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h1 + n, x, n, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h1, n, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h2, n, b), 0);
    EXPECT(cuCtxSynchronize(), 0);

    /* A synchronous copy is ordered after the legacy stream and the host,
     * not after a non-blocking stream. */
    unsigned char pageable[64] = {0};
    EXPECT(cuMemcpyDtoHAsync_v2(h1, x, 64, a), 0);
    EXPECT(cuMemcpyHtoD_v2(x, pageable, sizeof pageable), 700);
    VIOLATION("race on device memory: cuMemcpyHtoD_v2 on the host writes");
    EXPECT(cuMemcpyDtoH_v2(pageable, x, sizeof pageable), 0); /* two reads */
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuMemcpyHtoD_v2(x, pageable, sizeof pageable), 0);
}

static void euler_host(double *out, const double *y, const double *k, double dt, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        out[i] = y[i] + dt * (-(k[i] * y[i]));
}

/* euler_decay(y, k) reads and writes y and reads k; euler_decay_into(out,
 * y, k) writes out and reads y and k. */
static void kernels(CUstream a, CUstream b, CUmemoryPool pool)
{
    enum { N = 512 };
    CUmodule m;
    CUfunction decay, into;
    CUdeviceptr y, k, out;
    double *hy, *hk, *hout, want[N], step[N];
    double dt = 0.25;
    unsigned n = N;
    char last[1024];
    EXPECT(cuModuleLoadDataEx(&m, ptx, 0, NULL, NULL), 0);
    EXPECT(cuModuleGetFunction(&decay, m, "euler_decay"), 0);
    EXPECT(cuModuleGetFunction(&into, m, "euler_decay_into"), 0);
    EXPECT(cuMemHostAlloc((void **)&hy, 2 * N * sizeof *hy, 0), 0);
    EXPECT(cuMemHostAlloc((void **)&hk, 2 * N * sizeof *hk, 0), 0);
    EXPECT(cuMemHostAlloc((void **)&hout, 2 * N * sizeof *hout, 0), 0);
    for (unsigned i = 0; i < N; i++) {
        hy[i] = 1.0 + i / 7.0;
        hk[i] = 0.5 + (i % 11) * 0.3;
    }
    EXPECT(cuMemAllocFromPoolAsync(&y, N * sizeof(double), pool, a), 0);
    EXPECT(cuMemAllocFromPoolAsync(&k, N * sizeof(double), pool, a), 0);
    EXPECT(cuMemAllocFromPoolAsync(&out, N * sizeof(double), pool, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(y, hy, N * sizeof(double), a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(k, hk, N * sizeof(double), a), 0);
    EXPECT(cuStreamSynchronize(a), 0);

    void *dparams[] = {&y, &k, &dt, &n};
    EXPECT(cuLaunchKernel(decay, 2, 1, 1, 256, 1, 1, 0, a, dparams, NULL), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(hk + N, k, N * sizeof(double), b), 0); /* both read k */
    EXPECT(cuMemcpyHtoDAsync_v2(k, hk, N * sizeof(double), b), 700);
    cubieFakeCudaViolations(last, sizeof last);
    CHECK(st_contains(last, "while kernel euler_decay on stream ") &&
          st_contains(last, " reads bytes 0..4096"));
    VIOLATION("(write after read)");
    EXPECT(cuMemcpyDtoHAsync_v2(hy + N, y, N * sizeof(double), b), 700);
    VIOLATION("reads and writes bytes 0..4096 with no event between (read after write)");
    EXPECT(cuCtxSynchronize(), 0);

    void *iparams[] = {&out, &y, &k, &dt, &n};
    EXPECT(cuLaunchKernel(into, 2, 1, 1, 256, 1, 1, 0, a, iparams, NULL), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(hy + N, y, N * sizeof(double), b), 0); /* both read y */
    EXPECT(cuMemcpyDtoHAsync_v2(hout, out, N * sizeof(double), b), 700);
    VIOLATION("while kernel euler_decay_into on stream");
    EXPECT(cuMemcpyHtoDAsync_v2(out, hout + N, N * sizeof(double), b), 700);
    VIOLATION("writes bytes 0..4096 with no event between (write after write)");
    EXPECT(cuMemcpyHtoDAsync_v2(y, hy, N * sizeof(double), b), 700);
    VIOLATION("(write after read)");
    /* A kernel on b against the copy and kernel on a. */
    void *bparams[] = {&y, &out, &dt, &n};
    EXPECT(cuLaunchKernel(decay, 2, 1, 1, 256, 1, 1, 0, b, bparams, NULL), 700);
    VIOLATION("race on device memory: kernel euler_decay on stream");
    EXPECT(cuMemcpyDtoHAsync_v2(hout, out, N * sizeof(double), a), 0);
    EXPECT(cuCtxSynchronize(), 0);
    euler_host(step, hy, hk, dt, N);   /* what euler_decay left in y */
    euler_host(want, step, hk, dt, N); /* then euler_decay_into */
    CHECK(memcmp(hout, want, sizeof want) == 0);
    CHECK(memcmp(hy + N, step, sizeof step) == 0);

    EXPECT(cuModuleUnload(m), 0);
    EXPECT(cuMemFreeAsync(y, a), 0);
    EXPECT(cuMemFreeAsync(k, a), 0);
    EXPECT(cuMemFreeAsync(out, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuMemFreeHost(hy), 0);
    EXPECT(cuMemFreeHost(hk), 0);
    EXPECT(cuMemFreeHost(hout), 0);
}

/* A pipeline on one buffer over 1000 rounds, every stream ordered by
 * events, the host never waiting: the access lists keep a few entries. */
static void bounded(CUmemoryPool pool)
{
    enum { N = 256, ROUNDS = 1000 };
    CUstream up, comp, down;
    CUevent eu, ec, ed;
    CUmodule m;
    CUfunction decay;
    CUdeviceptr y, k;
    double *h, dt = 0.5;
    unsigned n = N;
    unsigned long long most_y = 0, most_k = 0;
    EXPECT(cuStreamCreate(&up, 1), 0);
    EXPECT(cuStreamCreate(&comp, 1), 0);
    EXPECT(cuStreamCreate(&down, 1), 0);
    EXPECT(cuEventCreate(&eu, 2), 0);
    EXPECT(cuEventCreate(&ec, 2), 0);
    EXPECT(cuEventCreate(&ed, 2), 0);
    EXPECT(cuModuleLoadDataEx(&m, ptx, 0, NULL, NULL), 0);
    EXPECT(cuModuleGetFunction(&decay, m, "euler_decay"), 0);
    EXPECT(cuMemHostAlloc((void **)&h, 3 * N * sizeof *h, 0), 0);
    memset(h, 0, 3 * N * sizeof *h);
    EXPECT(cuMemAllocFromPoolAsync(&y, N * sizeof *h, pool, comp), 0);
    EXPECT(cuMemAllocFromPoolAsync(&k, N * sizeof *h, pool, comp), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(k, h + 2 * N, N * sizeof *h, comp), 0);
    EXPECT(cuEventRecord(ec, comp), 0);
    EXPECT(cuStreamWaitEvent(up, ec, 0), 0);
    EXPECT(cuStreamWaitEvent(down, ec, 0), 0);
    void *params[] = {&y, &k, &dt, &n};
    for (int i = 0; i < ROUNDS; i++) {
        EXPECT(cuMemcpyHtoDAsync_v2(y, h, N * sizeof *h, up), 0);
        EXPECT(cuEventRecord(eu, up), 0);
        EXPECT(cuStreamWaitEvent(comp, eu, 0), 0);
        EXPECT(cuLaunchKernel(decay, 1, 1, 1, N, 1, 1, 0, comp, params, NULL), 0);
        EXPECT(cuEventRecord(ec, comp), 0);
        EXPECT(cuStreamWaitEvent(down, ec, 0), 0);
        EXPECT(cuMemcpyDtoHAsync_v2(h + N, y, N * sizeof *h, down), 0);
        EXPECT(cuEventRecord(ed, down), 0);
        EXPECT(cuStreamWaitEvent(up, ed, 0), 0);
        unsigned long long ny = cubieFakeCudaAccesses(y), nk = cubieFakeCudaAccesses(k);
        most_y = ny > most_y ? ny : most_y;
        most_k = nk > most_k ? nk : most_k;
    }
    /* y: the last kernel (it writes) and download; k: its upload (it
     * writes) and the last kernel. */
    CHECK(most_y == 2 && most_k == 2);
    /* Unordered copies on one stream each, over the same bytes: one per stream. */
    for (int i = 0; i < ROUNDS; i++) {
        EXPECT(cuMemcpyDtoHAsync_v2(h + N, y, N * sizeof *h, down), 0);
        EXPECT(cuMemcpyDtoHAsync_v2(h + 2 * N, y, N * sizeof *h, up), 0);
    }
    CHECK(cubieFakeCudaAccesses(y) == 3);
    EXPECT(cuCtxSynchronize(), 0);
    CHECK(cubieFakeCudaAccesses(y) == 0 && cubieFakeCudaAccesses(k) == 0);
    CHECK(cubieFakeCudaAccesses(0x1000) == 0);
    EXPECT(cuMemFreeAsync(y, comp), 0);
    EXPECT(cuMemFreeAsync(k, comp), 0);
    EXPECT(cuStreamSynchronize(comp), 0);
    EXPECT(cuModuleUnload(m), 0);
    EXPECT(cuMemFreeHost(h), 0);
    CUevent evs[] = {eu, ec, ed};
    for (int i = 0; i < 3; i++)
        EXPECT(cuEventDestroy_v2(evs[i]), 0);
    CUstream ss[] = {up, comp, down};
    for (int i = 0; i < 3; i++)
        EXPECT(cuStreamDestroy_v2(ss[i]), 0);
}

void st_races(CUcontext ctx)
{
    enum { N = 4096 };
    CUmemoryPool pool = st_pool(0);
    CUstream a, b;
    CUevent e;
    CUdeviceptr x;
    unsigned char *h1, *h2;
    (void)ctx;
    EXPECT(cuStreamCreate(&a, 1), 0);
    EXPECT(cuStreamCreate(&b, 1), 0);
    EXPECT(cuEventCreate(&e, 2), 0);
    EXPECT(cuMemHostAlloc((void **)&h1, 2 * N, 0), 0);
    EXPECT(cuMemHostAlloc((void **)&h2, 2 * N, 0), 0);
    EXPECT(cuMemAllocFromPoolAsync(&x, N, pool, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    copies(a, b, e, x, h1, h2, N);
    EXPECT(cuMemFreeAsync(x, a), 0);
    kernels(a, b, pool);
    bounded(pool);
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemFreeHost(h1), 0);
    EXPECT(cuMemFreeHost(h2), 0);
    EXPECT(cuEventDestroy_v2(e), 0);
    EXPECT(cuStreamDestroy_v2(a), 0);
    EXPECT(cuStreamDestroy_v2(b), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    CHECK(cubieFakeCudaViolations(NULL, 0) == 0);
}
