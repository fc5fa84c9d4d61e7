/* streams.c - the stream and event entry points: creation, ordering
 * (records and waits), queries and synchronisation, elapsed time. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define EVENT_DISABLE_TIMING 2u

static CUresult stream_of(CUstream h, struct fk_ctx **c, struct fk_stream **s)
{
    CUresult r = fk_current(c);
    return r != CUDA_SUCCESS ? r : fk_stream_get(h, *c, s);
}

static CUresult event_of(CUevent h, struct fk_ctx *c, struct fk_event **e)
{
    struct fk_obj *o;
    CUresult r = fk_obj_get(h, FK_EVENT, c, &o);
    if (r == CUDA_SUCCESS)
        *e = (struct fk_event *)o;
    return r;
}

/* After the host waited for a stream or event: the pools give memory
 * above their release thresholds back, destroyed streams that ran dry go. */
static void synchronised(struct fk_ctx *c)
{
    fk_pool_release_to_threshold(c);
    fk_reap_streams(c);
}

FK_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    CUresult r = fk_enter(FN_cuStreamCreate);
    if (r == CUDA_SUCCESS && (!phStream || Flags > 1))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS &&
        (r = fk_stream_new(c, Flags, 0, &s)) == CUDA_SUCCESS)
        *phStream = fk_handle(&s->o);
    return fk_leave(r);
}

/* As cuStreamCreate: the fake runs one queue per stream in issue order, so a
 * priority (cust creates every stream with one) changes nothing it models. */
FK_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    CUresult r = fk_enter(FN_cuStreamCreateWithPriority);
    (void)priority;
    if (r == CUDA_SUCCESS && (!phStream || flags > 1))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS &&
        (r = fk_stream_new(c, flags, 0, &s)) == CUDA_SUCCESS)
        *phStream = fk_handle(&s->o);
    return fk_leave(r);
}

FK_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    CUresult r = fk_enter(FN_cuStreamDestroy_v2);
    if (r == CUDA_SUCCESS && (r = stream_of(hStream, &c, &s)) == CUDA_SUCCESS) {
        if (s->is_null) {
            r = CUDA_ERROR_INVALID_HANDLE;
        } else {
            /* The handle is invalid at once; queued work still runs. */
            fk_obj_unregister(&s->o);
            s->destroyed = 1;
            fk_reap_streams(c);
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuStreamQuery(CUstream hStream)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    CUresult r = fk_enter(FN_cuStreamQuery);
    if (r == CUDA_SUCCESS && (r = stream_of(hStream, &c, &s)) == CUDA_SUCCESS) {
        if (s->done < s->queued) {
            r = fk_run_to(s, s->queued);
            if (r == CUDA_SUCCESS)
                r = CUDA_ERROR_NOT_READY;
        } else {
            r = fk_host_observe(&s->clock, s->tail);
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuStreamSynchronize(CUstream hStream)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    CUresult r = fk_enter(FN_cuStreamSynchronize);
    if (r == CUDA_SUCCESS && (r = stream_of(hStream, &c, &s)) == CUDA_SUCCESS &&
        (r = fk_run_to(s, s->queued)) == CUDA_SUCCESS &&
        (r = fk_host_observe(&s->clock, s->tail)) == CUDA_SUCCESS)
        synchronised(c);
    return fk_leave(r);
}

FK_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    struct fk_event *e;
    struct fk_queue q;
    CUresult r = fk_enter(FN_cuStreamWaitEvent);
    if (r == CUDA_SUCCESS && Flags != 0)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = stream_of(hStream, &c, &s)) == CUDA_SUCCESS &&
        (r = event_of(hEvent, c, &e)) == CUDA_SUCCESS && (r = fk_q_begin(&q, s)) == CUDA_SUCCESS) {
        struct fk_op *op = calloc(1, sizeof *op);
        /* An event never recorded: no dependency. */
        if (!op || (e->recorded && fk_q_add_dep(&q, e->at, &e->clock, e->time) != CUDA_SUCCESS)) {
            free(op);
            fk_q_abort(&q);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->kind = OP_WAIT;
            struct fk_qlog lg = {.kind = "wait"};
            fk_q_commit(&q, op, -1, 0, &lg);
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct fk_ctx *c;
    CUresult r = fk_enter(FN_cuEventCreate);
    if (r == CUDA_SUCCESS && (!phEvent || Flags > 3))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS) {
        struct fk_event *e = calloc(1, sizeof *e);
        if (!e) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((r = fk_obj_register(&e->o, FK_EVENT, c)) != CUDA_SUCCESS) {
            free(e);
        } else {
            e->flags = Flags;
            *phEvent = fk_handle(&e->o);
        }
    }
    return fk_leave(r);
}

void fk_event_free(struct fk_event *e)
{
    fk_vc_free(&e->clock);
    free(e);
}

FK_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    struct fk_ctx *c;
    struct fk_event *e;
    CUresult r = fk_enter(FN_cuEventDestroy_v2);
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS &&
        (r = event_of(hEvent, c, &e)) == CUDA_SUCCESS) {
        fk_obj_unregister(&e->o);
        fk_obj_unlink(&e->o);
        fk_event_free(e);
    }
    return fk_leave(r);
}

FK_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    struct fk_event *e;
    struct fk_queue q;
    CUresult r = fk_enter(FN_cuEventRecord);
    if (r == CUDA_SUCCESS && (r = stream_of(hStream, &c, &s)) == CUDA_SUCCESS &&
        (r = event_of(hEvent, c, &e)) == CUDA_SUCCESS && (r = fk_q_begin(&q, s)) == CUDA_SUCCESS) {
        struct fk_op *op = calloc(1, sizeof *op);
        struct fk_vclock clock = {0};
        if (!op || fk_vc_copy(&clock, &q.clock) != 0) {
            free(op);
            fk_q_abort(&q);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->kind = OP_RECORD;
            struct fk_qlog lg = {.kind = "record"};
            fk_q_commit(&q, op, -1, 0, &lg);
            fk_vc_free(&e->clock);
            e->clock = clock;
            e->at = (struct fk_point){s->sid, op->seq};
            e->time = q.end;
            e->recorded = 1;
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuEventQuery(CUevent hEvent)
{
    struct fk_ctx *c;
    struct fk_event *e;
    CUresult r = fk_enter(FN_cuEventQuery);
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS &&
        (r = event_of(hEvent, c, &e)) == CUDA_SUCCESS && e->recorded) {
        if (fk_point_done(e->at)) {
            r = fk_host_observe(&e->clock, e->time);
        } else {
            r = fk_run_to(fk_stream_by_sid(e->at.stream), e->at.seq);
            if (r == CUDA_SUCCESS)
                r = CUDA_ERROR_NOT_READY;
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuEventSynchronize(CUevent hEvent)
{
    struct fk_ctx *c;
    struct fk_event *e;
    CUresult r = fk_enter(FN_cuEventSynchronize);
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS &&
        (r = event_of(hEvent, c, &e)) == CUDA_SUCCESS && e->recorded) {
        if (!fk_point_done(e->at))
            r = fk_run_to(fk_stream_by_sid(e->at.stream), e->at.seq);
        if (r == CUDA_SUCCESS && (r = fk_host_observe(&e->clock, e->time)) == CUDA_SUCCESS)
            synchronised(c);
    }
    return fk_leave(r);
}

static CUresult elapsed(float *ms, CUevent hStart, CUevent hEnd)
{
    struct fk_ctx *c;
    struct fk_event *a, *b;
    CUresult r;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fk_current(&c)) != CUDA_SUCCESS || (r = event_of(hStart, c, &a)) != CUDA_SUCCESS ||
        (r = event_of(hEnd, c, &b)) != CUDA_SUCCESS)
        return r;
    if ((a->flags | b->flags) & EVENT_DISABLE_TIMING || !a->recorded || !b->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!fk_point_done(a->at) || !fk_point_done(b->at))
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((b->time - a->time) / 1e6);
    return CUDA_SUCCESS;
}

FK_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult r = fk_enter(FN_cuEventElapsedTime);
    if (r == CUDA_SUCCESS)
        r = elapsed(pMilliseconds, hStart, hEnd);
    return fk_leave(r);
}

FK_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult r = fk_enter(FN_cuEventElapsedTime_v2);
    if (r == CUDA_SUCCESS)
        r = elapsed(pMilliseconds, hStart, hEnd);
    return fk_leave(r);
}
