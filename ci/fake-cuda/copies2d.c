/* copies2d.c - cuMemcpy2DAsync_v2 between host and device memory: rows of
 * WidthInBytes, a pitch apart on each side, queued on their stream as one
 * op and checked as the 1-D asynchronous copies are (copies.c), row by
 * row: the host rows in one page-locked block (portable, or of this
 * context; else a violation) or pageable memory (staged at once, or run
 * to before the call returns), the device rows in one live allocation
 * ordered before the copy, races on device memory and on page-locked
 * memory per row (rows that touch count as one range). A pitch under the
 * width or above 2^31 - 1 (CU_DEVICE_ATTRIBUTE_MAX_PITCH), and extents
 * that overflow, are CUDA_ERROR_INVALID_VALUE; copies between two devices,
 * arrays or unified memory are not implemented. Modelled time: the bytes
 * at the copy bandwidth plus FK_ROW_NS a row. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/* The largest pitch a 2D copy takes (CU_DEVICE_ATTRIBUTE_MAX_PITCH). */
#define FK_MAX_PITCH 2147483647ULL
/* The modelled cost of a row beyond its bytes, in ns (as the simulated
 * device's: cudaMemcpy2D of one-byte rows). */
#define FK_ROW_NS 2.5

void fk_copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t rows)
{
    for (size_t row = 0; row < rows; row++)
        memcpy((char *)dst + row * dpitch, (const char *)src + row * spitch, width);
}

/* One side's base (x bytes and y rows in), or 0 when it overflows. */
static uintptr_t side_base(uintptr_t base, size_t x, size_t y, size_t pitch)
{
    if (y && pitch > (UINTPTR_MAX - base) / y)
        return 0;
    uintptr_t at = base + y * pitch;
    return x > UINTPTR_MAX - at ? 0 : at + x;
}

/* From a row's start at `base` to the last row's end, or 0 on overflow. */
static size_t span(uintptr_t base, size_t width, size_t rows, size_t pitch)
{
    if (pitch && rows - 1 > (SIZE_MAX - width) / pitch)
        return 0;
    size_t bytes = (rows - 1) * pitch + width;
    return bytes > UINTPTR_MAX - base ? 0 : bytes;
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream hStream)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    CUresult r;
    if ((r = fk_current(&c)) != CUDA_SUCCESS || (r = fk_stream_get(hStream, c, &s)) != CUDA_SUCCESS)
        return r;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    int to_device;
    if (p->srcMemoryType == CU_MEMORYTYPE_HOST && p->dstMemoryType == CU_MEMORYTYPE_DEVICE)
        to_device = 1;
    else if (p->srcMemoryType == CU_MEMORYTYPE_DEVICE && p->dstMemoryType == CU_MEMORYTYPE_HOST)
        to_device = 0;
    else {
        fprintf(stderr, "fake libcuda: cuMemcpy2DAsync_v2 from memory type %d to %d is not "
                        "implemented (host to device and device to host are)\n",
                (int)p->srcMemoryType, (int)p->dstMemoryType);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    size_t width = p->WidthInBytes, rows = p->Height;
    if (width == 0 || rows == 0)
        return CUDA_SUCCESS;
    size_t hpitch = to_device ? p->srcPitch : p->dstPitch;
    size_t dpitch = to_device ? p->dstPitch : p->srcPitch;
    if (hpitch < width || dpitch < width || hpitch > FK_MAX_PITCH || dpitch > FK_MAX_PITCH) {
        fprintf(stderr, "fake libcuda: cuMemcpy2DAsync_v2 of %zu rows of %zu bytes with pitches "
                        "%zu (host) and %zu (device): a pitch is under the width or above %llu\n",
                rows, width, hpitch, dpitch, FK_MAX_PITCH);
        return CUDA_ERROR_INVALID_VALUE;
    }
    uintptr_t host = to_device ? side_base((uintptr_t)p->srcHost, p->srcXInBytes, p->srcY, hpitch)
                               : side_base((uintptr_t)p->dstHost, p->dstXInBytes, p->dstY, hpitch);
    uintptr_t dptr = to_device ? side_base(p->dstDevice, p->dstXInBytes, p->dstY, dpitch)
                               : side_base(p->srcDevice, p->srcXInBytes, p->srcY, dpitch);
    size_t hspan = host ? span(host, width, rows, hpitch) : 0;
    size_t dspan = dptr ? span(dptr, width, rows, dpitch) : 0;
    if (!hspan || !dspan || rows > SIZE_MAX / width)
        return CUDA_ERROR_INVALID_VALUE;
    if (fk_host_overlaps_device((const void *)host, hspan)) {
        fprintf(stderr, "fake libcuda: host rows %p (+%zu bytes) of a 2D copy are device memory\n",
                (void *)host, hspan);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct fk_pinned *pinned;
    if ((r = fk_pinned_find((const void *)host, hspan, &pinned)) != CUDA_SUCCESS)
        return r;
    char who[32];
    fk_who(s->sid, who, sizeof who);
    if (pinned && !fk_pinned_locked_for(pinned, c)) {
        fk_violation("page-locked memory %p (+%zu bytes) of device %d's context, allocated "
                     "without CU_MEMHOSTALLOC_PORTABLE, is pageable to device %d's context: "
                     "the asynchronous 2D copy %s it on %s would be staged and synchronous",
                     (void *)host, hspan, pinned->dev, c->dev, to_device ? "from" : "into", who);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    /* Rows that touch are one range on their side. */
    size_t hrows = hpitch == width ? 1 : rows, hlen = hpitch == width ? rows * width : width;
    size_t drows = dpitch == width ? 1 : rows, dlen = dpitch == width ? rows * width : width;
    struct fk_queue q;
    if ((r = fk_q_begin(&q, s)) != CUDA_SUCCESS)
        return r;
    struct fk_op *op = NULL;
    void *snapshot = NULL;
    struct fk_alloc *a = NULL;
    const struct fk_racer racer = {s->sid, to_device ? "h2d" : "d2h", NULL};
    int mode = to_device ? FK_WRITE : FK_READ;
    r = fk_mem_check(dptr, dspan, -1, &q.clock, who, &a);
    for (size_t row = 0; r == CUDA_SUCCESS && row < drows; row++)
        r = fk_race_check(a, dptr + row * dpitch, dlen, mode, &q.clock, &racer);
    for (size_t row = 0; r == CUDA_SUCCESS && pinned && row < hrows; row++)
        r = fk_pinned_check(pinned, (const char *)host + row * hpitch, hlen, !to_device, &q.clock,
                            who);
    if (r == CUDA_SUCCESS &&
        (fk_alloc_reserve_use(a) != CUDA_SUCCESS || fk_race_reserve(a, drows) != CUDA_SUCCESS ||
         (!pinned && to_device && !(snapshot = malloc(rows * width))) ||
         !(op = calloc(1, sizeof *op))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        free(snapshot);
        fk_q_abort(&q);
        return r;
    }
    if (snapshot) /* the driver stages pageable memory, packed */
        fk_copy_rows(snapshot, width, (const void *)host, hpitch, width, rows);
    op->kind = to_device ? OP_H2D : OP_D2H;
    op->dptr = dptr;
    op->host = (void *)host;
    op->bytes = width;
    op->rows = rows;
    op->host_pitch = hpitch;
    op->dev_pitch = dpitch;
    op->snapshot = snapshot;
    op->pinned = pinned;
    double gbps = pinned ? g.pinned_gbps : g.pageable_gbps;
    struct fk_qlog lg = {.kind = to_device ? "h2d" : "d2h", .has_ptr = 1, .ptr = dptr,
                         .bytes = rows * width};
    fk_q_commit(&q, op, to_device ? FK_ENG_H2D : FK_ENG_D2H,
                (double)(rows * width) / gbps + FK_ROW_NS * (double)rows, &lg);
    struct fk_point at = {s->sid, op->seq};
    fk_alloc_note_use(a, at);
    for (size_t row = 0; row < drows; row++)
        fk_race_note(a, dptr + row * dpitch, dlen, mode, at, &s->clock, &racer);
    if (pinned)
        fk_pinned_note_rows(pinned, (const char *)host, hlen, hrows == 1 ? hlen : hpitch, hrows,
                            !to_device, at);
    if (!to_device && !pinned) {
        /* Into pageable memory the copy is synchronous. */
        if ((r = fk_run_to(s, at.seq)) == CUDA_SUCCESS)
            r = fk_host_observe(&s->clock, q.end);
    }
    return r;
}

FK_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    CUresult r = fk_enter(FN_cuMemcpy2DAsync_v2);
    if (r == CUDA_SUCCESS)
        r = copy2d(pCopy, hStream);
    return fk_leave(r);
}
