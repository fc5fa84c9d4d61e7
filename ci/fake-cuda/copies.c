/* copies.c - host<->device copies. Asynchronous ones are queued on their
 * stream: from and into page-locked memory the bytes move when the copy
 * executes; from pageable memory the source is staged at once; into
 * pageable memory the stream runs up to the copy before the call returns;
 * from or into a block another context page-locked without
 * CU_MEMHOSTALLOC_PORTABLE (pageable to this one) is a violation.
 * Synchronous ones run at once, after everything queued in the context. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/* The host range and the device range, before anything is queued. */
static CUresult check_ranges(CUdeviceptr dptr, const void *host, size_t bytes,
                             struct fk_pinned **pinned)
{
    if (!host || (uintptr_t)host > UINTPTR_MAX - bytes || dptr > UINT64_MAX - bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (fk_host_overlaps_device(host, bytes)) {
        fprintf(stderr, "fake libcuda: host range %p (+%zu bytes) of a copy is device memory\n",
                host, bytes);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return fk_pinned_find(host, bytes, pinned);
}

static CUresult copy_async(int to_device, CUdeviceptr dptr, void *host, size_t bytes,
                           CUstream hStream)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    struct fk_pinned *pinned;
    struct fk_alloc *a;
    struct fk_queue q;
    char who[32];
    CUresult r;
    if ((r = fk_current(&c)) != CUDA_SUCCESS || (r = fk_stream_get(hStream, c, &s)) != CUDA_SUCCESS)
        return r;
    if (bytes == 0)
        return CUDA_SUCCESS;
    if ((r = check_ranges(dptr, host, bytes, &pinned)) != CUDA_SUCCESS)
        return r;
    fk_who(s->sid, who, sizeof who);
    if (pinned && !fk_pinned_locked_for(pinned, c)) {
        fk_violation("page-locked memory %p (+%zu bytes) of device %d's context, allocated "
                     "without CU_MEMHOSTALLOC_PORTABLE, is pageable to device %d's context: "
                     "the asynchronous copy %s it on %s would be staged and synchronous",
                     host, bytes, pinned->dev, c->dev, to_device ? "from" : "into", who);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if ((r = fk_q_begin(&q, s)) != CUDA_SUCCESS)
        return r;
    struct fk_op *op = NULL;
    void *snapshot = NULL;
    const struct fk_racer racer = {s->sid, to_device ? "h2d" : "d2h", NULL};
    int mode = to_device ? FK_WRITE : FK_READ;
    if ((r = fk_mem_check(dptr, bytes, -1, &q.clock, who, &a)) == CUDA_SUCCESS &&
        (r = fk_race_check(a, dptr, bytes, mode, &q.clock, &racer)) == CUDA_SUCCESS &&
        (!pinned || (r = fk_pinned_check(pinned, host, bytes, !to_device, &q.clock, who)) ==
                        CUDA_SUCCESS)) {
        if (fk_alloc_reserve_use(a) != CUDA_SUCCESS || (pinned && fk_pinned_reserve(pinned)) ||
            (!pinned && to_device && !(snapshot = malloc(bytes))) || !(op = calloc(1, sizeof *op)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        free(snapshot);
        fk_q_abort(&q);
        return r;
    }
    if (snapshot)
        memcpy(snapshot, host, bytes); /* the driver stages pageable memory */
    op->kind = to_device ? OP_H2D : OP_D2H;
    op->dptr = dptr;
    op->host = host;
    op->bytes = bytes;
    op->snapshot = snapshot;
    op->pinned = pinned;
    double gbps = pinned ? g.pinned_gbps : g.pageable_gbps;
    struct fk_qlog lg = {.kind = to_device ? "h2d" : "d2h", .has_ptr = 1, .ptr = dptr,
                         .bytes = bytes};
    fk_q_commit(&q, op, to_device ? FK_ENG_H2D : FK_ENG_D2H, (double)bytes / gbps, &lg);
    struct fk_point at = {s->sid, op->seq};
    fk_alloc_note_use(a, at);
    fk_race_note(a, dptr, bytes, mode, at, &s->clock, &racer);
    if (pinned)
        fk_pinned_note(pinned, host, bytes, !to_device, at);
    if (!to_device && !pinned) {
        /* Into pageable memory the copy is synchronous. */
        if ((r = fk_run_to(s, at.seq)) == CUDA_SUCCESS)
            r = fk_host_observe(&s->clock, q.end);
    }
    return r;
}

static CUresult copy_sync(int to_device, CUdeviceptr dptr, void *host, size_t bytes)
{
    struct fk_ctx *c;
    struct fk_pinned *pinned;
    struct fk_alloc *a;
    struct fk_vclock clock = {0};
    double ready;
    CUresult r;
    if ((r = fk_current(&c)) != CUDA_SUCCESS)
        return r;
    if (bytes == 0)
        return CUDA_SUCCESS;
    if ((r = check_ranges(dptr, host, bytes, &pinned)) != CUDA_SUCCESS)
        return r;
    /* Ordered after what the host synchronised with, and (legacy default
     * stream) after the context's blocking streams. */
    if ((r = fk_legacy_clock(c, &clock, &ready)) != CUDA_SUCCESS)
        return r;
    const char *who = to_device ? "the host (cuMemcpyHtoD_v2)" : "the host (cuMemcpyDtoH_v2)";
    const struct fk_racer racer = {0, to_device ? "cuMemcpyHtoD_v2" : "cuMemcpyDtoH_v2", NULL};
    if ((r = fk_mem_check(dptr, bytes, -1, &clock, who, &a)) == CUDA_SUCCESS &&
        (r = fk_race_check(a, dptr, bytes, to_device ? FK_WRITE : FK_READ, &clock, &racer)) ==
            CUDA_SUCCESS &&
        (!pinned || (r = fk_pinned_check(pinned, host, bytes, !to_device, &clock, who)) ==
                        CUDA_SUCCESS) &&
        (r = fk_run_ctx(&g.devs[a->dev].ctx)) == CUDA_SUCCESS && (r = fk_run_ctx(c)) == CUDA_SUCCESS) {
        if (to_device)
            memcpy((void *)(uintptr_t)dptr, host, bytes);
        else
            memcpy(host, (const void *)(uintptr_t)dptr, bytes);
        struct fk_device *d = &g.devs[c->dev];
        int engine = to_device ? FK_ENG_H2D : FK_ENG_D2H;
        double start = fk_max(ready, d->engine[engine]);
        d->engine[engine] = start + (double)bytes / (pinned ? g.pinned_gbps : g.pageable_gbps);
        r = fk_host_observe(&clock, d->engine[engine]);
    }
    fk_vc_free(&clock);
    return r;
}

FK_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                     CUstream hStream)
{
    CUresult r = fk_enter(FN_cuMemcpyHtoDAsync_v2);
    if (r == CUDA_SUCCESS)
        r = copy_async(1, dstDevice, (void *)(uintptr_t)srcHost, ByteCount, hStream);
    return fk_leave(r);
}

FK_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream)
{
    CUresult r = fk_enter(FN_cuMemcpyDtoHAsync_v2);
    if (r == CUDA_SUCCESS)
        r = copy_async(0, srcDevice, dstHost, ByteCount, hStream);
    return fk_leave(r);
}

FK_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    CUresult r = fk_enter(FN_cuMemcpyHtoD_v2);
    if (r == CUDA_SUCCESS)
        r = copy_sync(1, dstDevice, (void *)(uintptr_t)srcHost, ByteCount);
    return fk_leave(r);
}

FK_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    CUresult r = fk_enter(FN_cuMemcpyDtoH_v2);
    if (r == CUDA_SUCCESS)
        r = copy_sync(0, srcDevice, dstHost, ByteCount);
    return fk_leave(r);
}
