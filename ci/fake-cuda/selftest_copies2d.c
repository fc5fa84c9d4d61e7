/* selftest_copies2d.c - cuMemcpy2DAsync_v2: rows move byte-exact both
 * ways with the bytes between them untouched (from page-locked and from
 * pageable memory), bad pitches and extents are refused before anything
 * is queued, and races are found per row, on device memory and on
 * page-locked memory, while other streams may use the bytes between rows. */
#include <stdio.h>

#include "selftest.h"

enum { W = 16, ROWS = 4, HP = 40, DP = 24, N = 4096 };

static CUDA_MEMCPY2D up(const void *host, CUdeviceptr dev)
{
    return (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = HP,
                           .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = dev,
                           .dstPitch = DP, .WidthInBytes = W, .Height = ROWS};
}

static CUDA_MEMCPY2D down(void *host, CUdeviceptr dev)
{
    return (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = dev,
                           .srcPitch = DP, .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = host,
                           .dstPitch = HP, .WidthInBytes = W, .Height = ROWS};
}

/* Rows land where they should, both ways; the bytes between stay. */
static void exact(CUstream a, CUdeviceptr x, unsigned char *h)
{
    unsigned char dev[N], pageable[HP * ROWS];
    for (int i = 0; i < HP * ROWS; i++)
        h[i] = pageable[i] = (unsigned char)(i + 1);
    memset(dev, 0xEE, sizeof dev);
    EXPECT(cuMemcpyHtoD_v2(x, dev, sizeof dev), 0);
    CUDA_MEMCPY2D c = up(h, x);
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuMemcpyDtoH_v2(dev, x, sizeof dev), 0);
    int ok = 1;
    for (int i = 0; i < DP * ROWS; i++) {
        int row = i / DP, col = i % DP;
        ok &= dev[i] == (col < W ? (unsigned char)(row * HP + col + 1) : 0xEE);
    }
    CHECK(ok);
    /* From pageable memory: staged, packed. */
    c = up(pageable, x + 2 * N / 4);
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 0);
    pageable[0] = 0; /* the driver staged it at the call */
    EXPECT(cuStreamSynchronize(a), 0);
    EXPECT(cuMemcpyDtoH_v2(dev, x + 2 * N / 4, DP * ROWS), 0);
    CHECK(dev[0] == 1 && dev[DP] == HP + 1 && dev[W] == 0xEE);
    /* Back into page-locked rows, offset by srcY rows on the device. */
    unsigned char *back = h + N;
    memset(back, 0x11, HP * ROWS);
    c = down(back, x);
    c.srcY = 1;
    c.Height = ROWS - 1;
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    ok = 1;
    for (int i = 0; i < HP * (ROWS - 1); i++) {
        int row = i / HP, col = i % HP;
        ok &= back[i] == (col < W ? (unsigned char)((row + 1) * HP + col + 1) : 0x11);
    }
    CHECK(ok);
}

/* Refused before anything is queued. */
static void refused(CUstream a, CUdeviceptr x, unsigned char *h)
{
    CUDA_MEMCPY2D c = up(h, x);
    c.srcPitch = W - 1;
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 1);
    c = up(h, x);
    c.dstPitch = 2147483648ULL;
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 1);
    c = up(h, x + N - DP * (ROWS - 1)); /* the last row passes the allocation */
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 1);
    c = up(h, x);
    c.Height = SIZE_MAX;
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 1);
    c = up(h, x);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = x;
    EXPECT(cuMemcpy2DAsync_v2(&c, a), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT(cuMemcpy2DAsync_v2(NULL, a), 1);
    c = up(h, x);
    c.Height = 0;
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
}

/* Races per row: other streams may use the bytes between rows. */
static void races(CUstream a, CUstream b, CUdeviceptr x, unsigned char *h, unsigned char *h2)
{
    CUDA_MEMCPY2D c = up(h, x);
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 0);
    /* Device bytes W..DP lie between the first two rows. */
    EXPECT(cuMemcpyDtoHAsync_v2(h2, x + W, DP - W, b), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h2, x + DP, 8, b), 700);
    VIOLATION("race on device memory: d2h on stream ");
    EXPECT(cuCtxSynchronize(), 0);
    /* A download into page-locked rows: the host bytes between them are free. */
    c = down(h, x);
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x + N / 2, h + W, HP - W, b), 0);
    EXPECT(cuMemcpyHtoDAsync_v2(x + N / 2, h + HP, 8, b), 700);
    VIOLATION("page-locked memory");
    EXPECT(cuCtxSynchronize(), 0);
    /* The 2D copy is the later one: each of its rows is checked. */
    EXPECT(cuMemcpyHtoDAsync_v2(x + DP + 4, h2, 4, b), 0); /* in the second row */
    c = up(h, x);
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 700);
    VIOLATION("race on device memory: h2d on stream ");
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemcpyDtoHAsync_v2(h + 2 * HP + 4, x + N / 2, 4, b), 0); /* in the third host row */
    c = down(h, x);
    EXPECT(cuMemcpy2DAsync_v2(&c, a), 700);
    VIOLATION("page-locked memory");
    EXPECT(cuCtxSynchronize(), 0);
}

void st_copies2d(CUcontext ctx)
{
    CUmemoryPool pool = st_pool(0);
    CUstream a, b;
    CUdeviceptr x;
    unsigned char *h, *h2;
    (void)ctx;
    EXPECT(cuStreamCreate(&a, 1), 0);
    EXPECT(cuStreamCreate(&b, 1), 0);
    EXPECT(cuMemHostAlloc((void **)&h, 2 * N, 1), 0);
    EXPECT(cuMemHostAlloc((void **)&h2, N, 1), 0);
    EXPECT(cuMemAllocFromPoolAsync(&x, N, pool, a), 0);
    EXPECT(cuStreamSynchronize(a), 0);
    exact(a, x, h);
    refused(a, x, h);
    races(a, b, x, h, h2);
    EXPECT(cuMemFreeAsync(x, a), 0);
    EXPECT(cuCtxSynchronize(), 0);
    EXPECT(cuMemFreeHost(h), 0);
    EXPECT(cuMemFreeHost(h2), 0);
    EXPECT(cuStreamDestroy_v2(a), 0);
    EXPECT(cuStreamDestroy_v2(b), 0);
    EXPECT(cuMemPoolDestroy(pool), 0);
    CHECK(cubieFakeCudaViolations(NULL, 0) == 0);
}
