/* selftest_order.c - streams and events (waits across streams, queries,
 * destroyed streams), modelled elapsed time, the order log, modules and
 * the euler_decay stand-in. */
#include <stdio.h>
#include <stdlib.h>

#include "selftest.h"

void st_orders(CUcontext ctx)
{
    enum { N = 4096 };
    CUmemoryPool pool = st_pool(0);
    CUstream a, b, c;
    CUevent e, e2, never, t0, t1, untimed;
    CUdeviceptr x;
    unsigned char *hp, *hq;
    float ms = 0;
    (void)ctx;
    EXPECT(cuStreamCreate(&a, 1), 0);
    EXPECT(cuStreamCreate(&b, 1), 0);
    EXPECT(cuStreamCreate(&c, 2), 1);
    EXPECT(cuEventCreate(&e, 4), 1);
    EXPECT(cuEventCreate(&e, 2), 0);
    EXPECT(cuEventCreate(&e2, 2), 0);
    EXPECT(cuEventCreate(&never, 0), 0);
    EXPECT(cuMemHostAlloc((void **)&hp, N, 0), 0);
    EXPECT(cuMemHostAlloc((void **)&hq, N, 0), 0);
    for (int i = 0; i < N; i++)
        hp[i] = (unsigned char)(i * 13);

    /* b waits for a through an event: synchronising b runs a's copy first. */
    EXPECT(cuMemAllocFromPoolAsync(&x, N, pool, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, hp, N, a), 0);
    EXPECT(cuEventRecord(e, a), 0);
    EXPECT(cuStreamWaitEvent(b, e, 1), 1);
    EXPECT(cuStreamWaitEvent(b, e, 0), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(hq, x, N, b), 0);
    CHECK(hq[1] == 0xA5);
    EXPECT(cuStreamSynchronize(b), 0);
    CHECK(memcmp(hp, hq, N) == 0);

    /* Queries: NOT_READY the first time they see work, then done. */
    EXPECT(cuMemcpyHtoDAsync_v2(x, hp, N, a), 0);
    EXPECT(cuStreamQuery(a), 600);
    EXPECT(cuStreamQuery(a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, hp, N, a), 0);
    EXPECT(cuEventRecord(e2, a), 0);
    EXPECT(cuEventQuery(e2), 600);
    EXPECT(cuEventQuery(e2), 0);
    EXPECT(cuEventQuery(never), 0);
    EXPECT(cuEventSynchronize(never), 0);
    EXPECT(cuStreamWaitEvent(b, never, 0), 0); /* no dependency */
    EXPECT(cuEventQuery((CUevent)a), 400);

    /* A destroyed stream's work still runs; its handle is gone at once. */
    EXPECT(cuStreamCreate(&c, 0), 0);
    memset(hq, 0, N);
    EXPECT(cuStreamWaitEvent(c, e2, 0), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(hq, x, N, c), 0);
    EXPECT(cuStreamDestroy_v2(c), 0);
    EXPECT(cuStreamQuery(c), 400);
    CHECK(hq[5] == 0);
    EXPECT(cuCtxSynchronize(), 0);
    CHECK(memcmp(hp, hq, N) == 0);

    /* Modelled time: 2.5 MB at 25 GB/s page-locked = 0.1 ms. */
    enum { BIG = 2500000 };
    CUdeviceptr big;
    unsigned char *hbig;
    EXPECT(cuEventCreate(&t0, 0), 0);
    EXPECT(cuEventCreate(&t1, 1), 0);
    EXPECT(cuEventCreate(&untimed, 2), 0);
    EXPECT(cuEventElapsedTime(&ms, t0, t1), 400); /* not recorded */
    EXPECT(cuMemHostAlloc((void **)&hbig, BIG, 0), 0);
    EXPECT(cuMemAllocFromPoolAsync(&big, BIG, pool, a), 0);
    EXPECT(cuEventRecord(t0, a), 0);
    EXPECT(cuEventRecord(untimed, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(big, hbig, BIG, a), 0);
    EXPECT(cuEventRecord(t1, a), 0);
    EXPECT(cuEventElapsedTime(&ms, t0, t1), 600);
    EXPECT(cuEventSynchronize(t1), 0);
    EXPECT(cuEventElapsedTime(&ms, t0, t1), 0);
    CHECK(ms > 0.0999f && ms < 0.1001f);
    EXPECT(cuEventElapsedTime_v2(&ms, t1, t0), 0);
    CHECK(ms < -0.0999f && ms > -0.1001f);
    EXPECT(cuEventElapsedTime(&ms, t0, untimed), 400);
    EXPECT(cuEventElapsedTime(NULL, t0, t1), 1);
    /* Pageable at 10 GB/s: 0.25 ms; one engine per direction, one copy at a time. */
    unsigned char *pageable = malloc(BIG);
    CHECK(pageable != NULL);
    if (pageable) {
        memset(pageable, 1, BIG);
        EXPECT(cuEventRecord(t0, a), 0);
        EXPECT(cuMemcpyHtoDAsync_v2(big, pageable, BIG, a), 0);
        EXPECT(cuEventRecord(t1, a), 0);
        EXPECT(cuEventSynchronize(t1), 0);
        EXPECT(cuEventElapsedTime(&ms, t0, t1), 0);
        CHECK(ms > 0.2499f && ms < 0.2501f);
        free(pageable);
    }
    EXPECT(cuEventRecord(t0, b), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(big, hbig, BIG, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, hp, N, b), 0); /* waits for a's on the h2d engine */
    EXPECT(cuEventRecord(t1, b), 0);
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuEventElapsedTime(&ms, t0, t1), 0);
    CHECK(ms > 0.1f && ms < 0.1002f);

    /* The order log: one JSON line per op, clocks giving happens-before. */
    char path[512], line[1024] = "";
    snprintf(path, sizeof path, "%s/order.jsonl", st_dir);
    CHECK(cubieFakeCudaControl("log=") == 0);
    remove(path);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "log=%s", path);
    CHECK(cubieFakeCudaControl(cmd) == 0);
    CUdeviceptr y;
    EXPECT(cuMemAllocFromPoolAsync(&y, 64, pool, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(y, hp, 64, a), 0);
    EXPECT(cuEventRecord(e, a), 0);
    EXPECT(cuStreamWaitEvent(b, e, 0), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(hq, y, 64, b), 0);
    EXPECT(cuMemFreeAsync(y, b), 0);
    /* Clocks hold device order only: what the host waited for is not in them. */
    CUstream d;
    EXPECT(cuStreamCreate(&d, 1), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuEventRecord(e2, d), 0);
    CHECK(cubieFakeCudaControl("log=") == 0);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    int lines = 0;
    static const char *const kinds[] = {"\"kind\":\"alloc\"", "\"kind\":\"h2d\"",
                                        "\"kind\":\"record\"", "\"kind\":\"wait\"",
                                        "\"kind\":\"d2h\"", "\"kind\":\"free\""};
    while (f && fgets(line, sizeof line, f)) {
        if (lines < 6)
            CHECK(st_contains(line, kinds[lines]) && st_contains(line, "\"start_ns\":") &&
                  st_contains(line, "\"clock\":{") && st_contains(line, "}}\n"));
        if (lines == 0) {
            char want[64];
            snprintf(want, sizeof want, "\"ptr\":%llu,\"bytes\":64", (unsigned long long)y);
            CHECK(st_contains(line, want) && st_contains(line, "\"op\":"));
        }
        lines++;
    }
    CHECK(lines == 7);
    CHECK(lines == 7 && st_contains(line, "\"kind\":\"record\"") && st_contains(line, "\"seq\":1,") &&
          strchr(strstr(line, "\"clock\":{"), ',') == NULL);
    if (f)
        fclose(f);

    EXPECT(cuStreamSynchronize(b), 0);
    EXPECT(cuMemFreeAsync(x, a), 0);
    EXPECT(cuMemFreeAsync(big, a), 0);
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemFreeHost(hp), 0);
    EXPECT(cuMemFreeHost(hq), 0);
    EXPECT(cuMemFreeHost(hbig), 0);
    CUevent evs[] = {e, e2, never, t0, t1, untimed};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        EXPECT(cuEventDestroy_v2(evs[i]), 0);
    EXPECT(cuEventDestroy_v2(e), 400);
    EXPECT(cuStreamDestroy_v2(a), 0);
    EXPECT(cuStreamDestroy_v2(b), 0);
    EXPECT(cuStreamDestroy_v2(d), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
}

static const char ptx[] =
    "// .entry in_a_comment( is not a kernel\n"
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry euler_decay(\n .param .u64 y, .param .u64 k, .param .f64 dt, .param .u32 n)\n"
    "{ ret; }\n"
    "/* .entry in_a_block_comment() */\n"
    ".entry mystery() { ret; }\n";

static CUresult load(CUmodule *m, const char *image, char *log, unsigned size, unsigned *written)
{
    CUjit_option options[2] = {5, 6};
    void *values[2] = {log, (void *)(uintptr_t)size};
    CUresult r = cuModuleLoadDataEx(m, image, 2, options, values);
    *written = (unsigned)(uintptr_t)values[1];
    return r;
}

static void euler_host(double *y, const double *k, double dt, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        y[i] = y[i] + dt * (-(k[i] * y[i]));
}

void st_modules(CUcontext ctx)
{
    enum { N = 1000 };
    CUmodule m, m2;
    CUfunction f, f2, mystery;
    char log[256];
    unsigned written = 0;
    (void)ctx;
    EXPECT(load(&m, "hello", log, sizeof log, &written), 218);
    CHECK(st_contains(log, ".version") && written == strlen(log) + 1);
    EXPECT(load(&m, ".version 7.0\n// .target sm_50\n", log, sizeof log, &written), 218);
    CHECK(st_contains(log, ".target"));
    EXPECT(load(&m, ".version 7.0\n.target sm_50\n.entry twice()\n.entry twice()\n", log,
                sizeof log, &written), 218);
    CHECK(st_contains(log, "duplicate"));
    EXPECT(load(&m, ".version 7.0\n.target sm_50\n.entry open()\n{\n ret;\n", log, sizeof log,
                &written), 218);
    CHECK(st_contains(log, "not closed"));
    EXPECT(load(&m, ".version 7.0\n.target sm_50\n}\n", log, sizeof log, &written), 218);
    CHECK(st_contains(log, "without '{'"));
    CHECK(cubieFakeCudaControl("jit-error=boom at line 3") == 0);
    EXPECT(load(&m, ptx, log, 5, &written), 218);
    CHECK(strcmp(log, "boom") == 0 && written == 5);
    CHECK(cubieFakeCudaControl("jit-error=") == 0);
    EXPECT(cuModuleLoadDataEx(&m, NULL, 0, NULL, NULL), 1);
    EXPECT(cuModuleLoadDataEx(&m, "\x7f" "ELF", 0, NULL, NULL), 801);
    EXPECT(load(&m, ptx, log, sizeof log, &written), 0);
    CHECK(log[0] == '\0');
    EXPECT(cuModuleGetFunction(&f, m, "euler_decay"), 0);
    EXPECT(cuModuleGetFunction(&f2, m, "euler_decay"), 0);
    CHECK(f == f2);
    EXPECT(cuModuleGetFunction(&f2, m, "in_a_comment"), 500);
    EXPECT(cuModuleGetFunction(&f2, m, "in_a_block_comment"), 500);
    EXPECT(cuModuleGetFunction(&f2, m, "nope"), 500);
    EXPECT(cuModuleGetFunction(&mystery, m, "mystery"), 0);

    CUmemoryPool pool = st_pool(0);
    CUstream s;
    CUdeviceptr dy, dk;
    double y[N], k[N], want[N], got[N], dt = 0.01;
    unsigned n = N;
    EXPECT(cuStreamCreate(&s, 1), 0);
    EXPECT(cuLaunchKernel(mystery, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), 801);
    for (int i = 0; i < N; i++) {
        y[i] = 1.0 + i * 0.001;
        k[i] = 0.5 + i * 0.0007;
    }
    memcpy(want, y, sizeof y);
    euler_host(want, k, dt, N);
    EXPECT(cuMemAllocFromPoolAsync(&dy, sizeof y, pool, s), 0);
    EXPECT(cuMemAllocFromPoolAsync(&dk, sizeof k, pool, s), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(dy, y, sizeof y, s), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(dk, k, sizeof k, s), 0);
    void *params[] = {&dy, &dk, &dt, &n};
    void *extra[] = {NULL};
    EXPECT(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, params, extra), 1);
    EXPECT(cuLaunchKernel(f, 4, 1, 1, 2048, 1, 1, 0, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 0, 1, 1, 256, 1, 1, 0, s, params, NULL), 1);
    EXPECT(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, NULL, NULL), 1);
    EXPECT(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, params, NULL), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(got, dy, sizeof got, s), 0);
    CHECK(memcmp(got, want, sizeof got) == 0); /* bit for bit */
    /* Fewer threads than elements: only those elements. */
    EXPECT(cuMemcpyHtoDAsync_v2(dy, y, sizeof y, s), 0);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 100, 1, 1, 0, s, params, NULL), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(got, dy, sizeof got, s), 0);
    CHECK(memcmp(got, want, 100 * sizeof *got) == 0 && memcmp(got + 100, y + 100, 900 * sizeof *got) == 0);
    /* y and k the same array. */
    EXPECT(cuMemcpyHtoDAsync_v2(dy, y, sizeof y, s), 0);
    void *same[] = {&dy, &dy, &dt, &n};
    EXPECT(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, same, NULL), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(got, dy, sizeof got, s), 0);
    memcpy(want, y, sizeof y);
    euler_host(want, y, dt, N); /* y[i] + dt * (-(y[i] * y[i])) */
    CHECK(memcmp(got, want, sizeof got) == 0);

    /* A second module of the same PTX; unloading keeps the first. */
    EXPECT(load(&m2, ptx, log, sizeof log, &written), 0);
    EXPECT(cuModuleUnload(m2), 0);
    EXPECT(cuModuleUnload(m2), 400);
    EXPECT(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, params, NULL), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuModuleUnload(m), 0);
    EXPECT(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, params, NULL), 400);
    EXPECT(cuMemFreeAsync(dy, s), 0);
    EXPECT(cuMemFreeAsync(dk, s), 0);
    EXPECT(cuStreamSynchronize(s), 0);
    EXPECT(cuStreamDestroy_v2(s), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
}
