/* selftest_contexts.c - what belongs to one context: the sticky error (a
 * violation on device 0 leaves device 1's context working), page-locked
 * blocks allocated without CU_MEMHOSTALLOC_PORTABLE (pageable to the other
 * contexts), and the primary context's flags. */
#include "selftest.h"

enum { N = 4096 };

/* Device 1's context works while device 0's is sticky; a thread leaves
 * the broken context and comes back to it. */
static void sticky_per_context(CUcontext c0, CUcontext c1, unsigned char *h)
{
    CUmemoryPool p0 = st_pool(0);
    CUstream a, b, s1;
    CUdeviceptr x, y;
    CUcontext cur = NULL;
    size_t free_bytes, total;
    int n = 0, v = 0;
    EXPECT(cuStreamCreate(&a, 1), 0);
    EXPECT(cuStreamCreate(&b, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&x, N, p0, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, h, N, b), 700); /* not ordered after the allocation */
    EXPECT(cuMemGetInfo_v2(&free_bytes, &total), 700);
    EXPECT(cuDeviceGetCount(&n), 700); /* no context needed: refused here, as before */
    EXPECT(cuDriverGetVersion(&v), 0);

    /* Binding the thread is no call on the context. */
    EXPECT(cuCtxGetCurrent(&cur), 0);
    CHECK(cur == c0);
    EXPECT(cuCtxSetCurrent(c1), 0);
    EXPECT(cuDeviceGetCount(&n), 0);
    CHECK(n == 2);
    EXPECT(cuMemGetInfo_v2(&free_bytes, &total), 0);
    CHECK(total == 2 * GIB);
    CUmemoryPool p1 = st_pool(1);
    unsigned char back[N];
    EXPECT(cuStreamCreate(&s1, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&y, N, p1, s1), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(y, h, N, s1), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(back, y, N, s1), 0);
    /* A stream's context, whichever is current. */
    EXPECT(cuStreamGetCtx(s1, &cur), 0);
    CHECK(cur == c1);
    EXPECT(cuStreamGetCtx(a, &cur), 0);
    CHECK(cur == c0);
    EXPECT(cuStreamGetCtx(NULL, &cur), 0);
    CHECK(cur == c1);
    EXPECT(cuStreamGetCtx((CUstream)(uintptr_t)0x5A00000000ABCDEFULL, &cur), 400);
    EXPECT(cuStreamGetCtx(s1, NULL), 1);
    CHECK(memcmp(back, h, N) == 0);
    EXPECT(cuMemFreeAsync(y, s1), 0);
    EXPECT(cuStreamSynchronize(s1), 0);
    EXPECT(cuStreamSynchronize(a), 201); /* device 0's handle: another context, not 700 */
    EXPECT(cuStreamDestroy_v2(s1), 0);
    EXPECT(cuMemPoolDestroy(p1), 0);
    CHECK(cubieFakeCudaViolations(NULL, 0) == 1);

    /* Back in device 0's context: still refused, until reset. */
    EXPECT(cuCtxSetCurrent(c0), 0);
    EXPECT(cuStreamSynchronize(a), 700);
    VIOLATION("before its allocation on stream");
    EXPECT(cuMemFreeAsync(x, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuStreamDestroy_v2(a), 0);
    EXPECT(cuStreamDestroy_v2(b), 0);
    EXPECT(cuMemPoolDestroy(p0), 0);
}

/* A block page-locked without CU_MEMHOSTALLOC_PORTABLE is page-locked
 * for its own context only; a portable one for every context. */
static void portable_blocks(CUcontext c0, CUcontext c1)
{
    unsigned char *own, *mapped, *portable, out[64];
    CUstream s0, s1;
    CUdeviceptr x, y;
    EXPECT(cuMemHostAlloc((void **)&own, N, 0), 0);
    EXPECT(cuMemHostAlloc((void **)&mapped, N, 2), 0); /* DEVICEMAP alone: not portable */
    EXPECT(cuMemHostAlloc((void **)&portable, N, 1 | 2), 0);
    CUmemoryPool p0 = st_pool(0);
    EXPECT(cuStreamCreate(&s0, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&x, N, p0, s0), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x, own, N, s0), 0); /* its own context */
    EXPECT(cuMemcpyDtoHAsync_v2(mapped, x, N, s0), 0);
    EXPECT(cuStreamSynchronize(s0), 0);

    EXPECT(cuCtxSetCurrent(c1), 0);
    CUmemoryPool p1 = st_pool(1);
    EXPECT(cuStreamCreate(&s1, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&y, N, p1, s1), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(y, portable, N, s1), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(portable, y, N, s1), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(y, own, N, s1), 700);
    VIOLATION("allocated without CU_MEMHOSTALLOC_PORTABLE, is pageable to device 1's context");
    EXPECT(cuMemcpyDtoHAsync_v2(mapped + 64, y, 64, s1), 700);
    VIOLATION("the asynchronous copy into it on stream");
    EXPECT(cuStreamSynchronize(s1), 0);
    EXPECT(cuMemcpyHtoD_v2(y, own, 64), 0); /* synchronous: pageable or not, it waits */
    EXPECT(cuMemcpyDtoH_v2(out, y, 64), 0);
    CHECK(memcmp(out, own, 64) == 0);
    EXPECT(cuMemFreeAsync(y, s1), 0);
    EXPECT(cuStreamSynchronize(s1), 0);
    EXPECT(cuStreamDestroy_v2(s1), 0);
    EXPECT(cuMemPoolDestroy(p1), 0);
    EXPECT(cuMemFreeHost(own), 0); /* any context frees it */

    EXPECT(cuCtxSetCurrent(c0), 0);
    EXPECT(cuMemFreeAsync(x, s0), 0);
    EXPECT(cuStreamSynchronize(s0), 0);
    EXPECT(cuStreamDestroy_v2(s0), 0);
    EXPECT(cuMemPoolDestroy(p0), 0);
    EXPECT(cuMemFreeHost(mapped), 0);
    EXPECT(cuMemFreeHost(portable), 0);
}

/* cuDevicePrimaryCtxSetFlags_v2 / GetState: at most one scheduling flag;
 * set while the context is active too; kept when it goes. The live events
 * by creation flags. */
static void primary_flags(void)
{
    unsigned flags = 99;
    int active = -1;
    CUevent e1, e3;
    unsigned long long blocking = cubieFakeCudaEvents(1), both = cubieFakeCudaEvents(3);
    EXPECT(cuEventCreate(&e1, 1), 0);
    EXPECT(cuEventCreate(&e3, 3), 0);
    CHECK(cubieFakeCudaEvents(1) == blocking + 1 && cubieFakeCudaEvents(3) == both + 1);
    EXPECT(cuEventDestroy_v2(e1), 0);
    EXPECT(cuEventDestroy_v2(e3), 0);
    CHECK(cubieFakeCudaEvents(1) == blocking && cubieFakeCudaEvents(3) == both);
    EXPECT(cuDevicePrimaryCtxGetState(1, &flags, &active), 0);
    CHECK(flags == 0 && active == 1);
    EXPECT(cuDevicePrimaryCtxSetFlags_v2(1, 4), 0); /* CU_CTX_SCHED_BLOCKING_SYNC */
    EXPECT(cuDevicePrimaryCtxGetState(1, &flags, &active), 0);
    CHECK(flags == 4 && active == 1);
    EXPECT(cuDevicePrimaryCtxSetFlags_v2(1, 3), 1);     /* spin and yield */
    EXPECT(cuDevicePrimaryCtxSetFlags_v2(1, 0x100), 1); /* not a context flag */
    EXPECT(cuDevicePrimaryCtxSetFlags_v2(2, 0), 101);
    EXPECT(cuDevicePrimaryCtxGetState(1, NULL, &active), 1);
    EXPECT(cuDevicePrimaryCtxGetState(1, &flags, NULL), 1);
    EXPECT(cuDevicePrimaryCtxGetState(-1, &flags, &active), 101);
    EXPECT(cuDevicePrimaryCtxSetFlags_v2(1, 2 | 16), 0); /* yield, LMEM_RESIZE_TO_MAX */
    EXPECT(cuDevicePrimaryCtxRelease_v2(1), 0);
    EXPECT(cuDevicePrimaryCtxGetState(1, &flags, &active), 0);
    CHECK(flags == (2 | 16) && active == 0);
    EXPECT(cuDevicePrimaryCtxSetFlags_v2(1, 0), 0);
    EXPECT(cuDevicePrimaryCtxGetState(1, &flags, &active), 0);
    CHECK(flags == 0 && active == 0);
}

void st_contexts(CUcontext c0)
{
    CUcontext c1;
    unsigned char *h;
    CHECK(cubieFakeCudaViolations(NULL, 0) == 0);
    EXPECT(cuDevicePrimaryCtxRetain(&c1, 1), 0);
    EXPECT(cuMemHostAlloc((void **)&h, N, 1), 0);
    for (int i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 13 + 1);
    sticky_per_context(c0, c1, h);
    EXPECT(cuMemFreeHost(h), 0);
    portable_blocks(c0, c1);
    primary_flags();
    EXPECT(cuCtxGetCurrent(&c1), 0);
    CHECK(c1 == c0);
}
