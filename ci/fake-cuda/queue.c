/* queue.c - the ordering of work: queuing an op on a stream (its vector
 * clock, dependencies, modelled start and end, the order log line) and
 * deferred execution (running a stream up to a point, first what that
 * point waits for). */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

struct fk_stream *fk_stream_by_sid(uint32_t sid)
{
    return fk_htab_get(&g.sids, sid);
}

/* Whether `p` is ordered before an op of clock `c` being queued: on the
 * device (the op's clock covers it), or through the host, which waited for
 * `p` before it queued the op. Stream clocks hold device order only. */
int fk_covered(const struct fk_vclock *c, struct fk_point p)
{
    return fk_vc_covers(c, p) || fk_vc_covers(&g.host_clock, p);
}

int fk_point_done(struct fk_point p)
{
    if (p.stream == 0)
        return 1;
    struct fk_stream *s = fk_stream_by_sid(p.stream);
    return !s || s->done >= p.seq; /* a stream freed has run everything */
}

const char *fk_who(uint32_t sid, char *buf, size_t len)
{
    if (sid == 0)
        snprintf(buf, len, "the host");
    else
        snprintf(buf, len, "stream %u", sid);
    return buf;
}

CUresult fk_stream_new(struct fk_ctx *c, unsigned flags, int is_null, struct fk_stream **out)
{
    if (g.next_sid == UINT32_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fk_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->sid = g.next_sid;
    if (fk_htab_put(&g.sids, s->sid, s) != 0) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (is_null) {
        fk_obj_link(&s->o, FK_STREAM, c);
    } else if (fk_obj_register(&s->o, FK_STREAM, c) != CUDA_SUCCESS) {
        fk_htab_del(&g.sids, s->sid);
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g.next_sid++;
    s->flags = flags;
    s->is_null = is_null;
    *out = s;
    return CUDA_SUCCESS;
}

CUresult fk_stream_get(CUstream h, struct fk_ctx *c, struct fk_stream **out)
{
    uintptr_t v = (uintptr_t)h;
    if (v == 0 || v == 1) { /* the NULL stream, CU_STREAM_LEGACY */
        if (!c->null_stream) {
            CUresult r = fk_stream_new(c, 0, 1, &c->null_stream);
            if (r != CUDA_SUCCESS)
                return r;
        }
        *out = c->null_stream;
        return CUDA_SUCCESS;
    }
    if (v == 2) {
        fprintf(stderr, "fake libcuda: CU_STREAM_PER_THREAD is not implemented\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    struct fk_obj *o;
    CUresult r = fk_obj_get(h, FK_STREAM, c, &o);
    if (r == CUDA_SUCCESS)
        *out = (struct fk_stream *)o;
    return r;
}

void fk_op_discard(struct fk_op *op)
{
    if (op->pinned)
        op->pinned->pending--;
    free(op->snapshot);
    free(op->deps);
    free(op);
}

void fk_stream_free(struct fk_stream *s)
{
    while (s->head) {
        struct fk_op *op = s->head;
        s->head = op->next;
        fk_op_discard(op);
    }
    fk_vc_free(&s->clock);
    fk_htab_del(&g.sids, s->sid);
    if (s->o.ctx && s->o.ctx->null_stream == s)
        s->o.ctx->null_stream = NULL;
    free(s);
}

/* Frees the destroyed streams whose work has run and the host has
 * synchronised with (until then a context's synchronisation observes
 * their clocks, whatever ran their work). */
void fk_reap_streams(struct fk_ctx *c)
{
    struct fk_obj *o = c->objs, *next;
    for (; o; o = next) {
        next = o->next;
        struct fk_stream *s = (struct fk_stream *)o;
        if (o->kind == FK_STREAM && s->destroyed && s->done == s->queued &&
            fk_vc_covers(&g.host_clock, (struct fk_point){s->sid, s->queued})) {
            fk_obj_unlink(o);
            fk_stream_free(s);
        }
    }
}

/* ---- queuing ------------------------------------------------------------ */

CUresult fk_q_add_dep(struct fk_queue *q, struct fk_point p, const struct fk_vclock *c, double t)
{
    if (c && fk_vc_merge(&q->clock, c) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    q->ready = fk_max(q->ready, t);
    if (fk_point_done(p))
        return CUDA_SUCCESS;
    if (q->ndeps == q->capdeps) {
        uint32_t cap = q->capdeps ? q->capdeps * 2 : 2;
        struct fk_point *d;
        if (cap < q->capdeps || !(d = realloc(q->deps, (size_t)cap * sizeof *d)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        q->deps = d;
        q->capdeps = cap;
    }
    q->deps[q->ndeps++] = p;
    return CUDA_SUCCESS;
}

/* The legacy default stream: work on it waits for the blocking streams of
 * its context, and work on a blocking stream waits for it. */
static CUresult legacy_deps(struct fk_queue *q)
{
    struct fk_stream *s = q->s;
    struct fk_ctx *c = s->o.ctx;
    CUresult r = CUDA_SUCCESS;
    if (s->is_null) {
        for (struct fk_obj *o = c->objs; o && r == CUDA_SUCCESS; o = o->next) {
            struct fk_stream *b = (struct fk_stream *)o;
            if (o->kind == FK_STREAM && b != s && b->flags == 0 && b->queued > 0)
                r = fk_q_add_dep(q, (struct fk_point){b->sid, b->queued}, &b->clock, b->tail);
        }
    } else if (s->flags == 0 && c->null_stream && c->null_stream->queued > 0) {
        struct fk_stream *n = c->null_stream;
        r = fk_q_add_dep(q, (struct fk_point){n->sid, n->queued}, &n->clock, n->tail);
    }
    return r;
}

CUresult fk_q_begin(struct fk_queue *q, struct fk_stream *s)
{
    memset(q, 0, sizeof *q);
    q->s = s;
    q->ready = fk_max(s->tail, g.host_time);
    if (s->queued == UINT64_MAX - 1 || fk_vc_copy(&q->clock, &s->clock) != 0 ||
        fk_vc_set(&q->clock, s->sid, s->queued + 1) != 0 || legacy_deps(q) != CUDA_SUCCESS) {
        fk_q_abort(q);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

void fk_q_abort(struct fk_queue *q)
{
    fk_vc_free(&q->clock);
    free(q->deps);
    q->deps = NULL;
    q->ndeps = q->capdeps = 0;
}

static void json_string(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
}

static void log_op(const struct fk_queue *q, const struct fk_op *op, const struct fk_qlog *lg)
{
    FILE *f = g.log;
    const struct fk_stream *s = q->s;
    fprintf(f, "{\"op\":%llu,\"kind\":\"%s\",\"device\":%d,\"stream\":%u,\"seq\":%llu", g.ops,
            lg->kind, s->o.ctx->dev, s->sid, (unsigned long long)op->seq);
    if (lg->name) {
        fputs(",\"name\":\"", f);
        json_string(f, lg->name);
        fputc('"', f);
    }
    if (lg->has_ptr)
        fprintf(f, ",\"ptr\":%llu,\"bytes\":%llu", (unsigned long long)lg->ptr,
                (unsigned long long)lg->bytes);
    fprintf(f, ",\"start_ns\":%.0f,\"end_ns\":%.0f,\"clock\":{", q->start, q->end);
    for (uint32_t i = 0; i < s->clock.len; i++)
        fprintf(f, "%s\"%u\":%llu", i ? "," : "", s->clock.e[i].id,
                (unsigned long long)s->clock.e[i].n);
    fputs("}}\n", f);
    fflush(f);
}

/* Cannot fail: everything that allocates was done by fk_q_begin and the caller. */
void fk_q_commit(struct fk_queue *q, struct fk_op *op, int engine, double ns,
                 const struct fk_qlog *lg)
{
    struct fk_stream *s = q->s;
    struct fk_device *d = &g.devs[s->o.ctx->dev];
    op->seq = ++s->queued;
    op->deps = q->deps;
    op->ndeps = q->ndeps;
    q->deps = NULL;
    q->ndeps = q->capdeps = 0;
    fk_vc_free(&s->clock);
    s->clock = q->clock;
    memset(&q->clock, 0, sizeof q->clock);
    q->start = q->ready;
    if (engine >= 0)
        q->start = fk_max(q->start, d->engine[engine]);
    q->end = q->start + ns;
    if (engine >= 0)
        d->engine[engine] = q->end;
    s->tail = q->end;
    op->next = NULL;
    if (s->last)
        s->last->next = op;
    else
        s->head = op;
    s->last = op;
    g.ops++;
    if (g.log)
        log_op(q, op, lg);
}

CUresult fk_legacy_clock(struct fk_ctx *c, struct fk_vclock *out, double *ready)
{
    double t = g.host_time;
    if (fk_vc_copy(out, &g.host_clock) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (struct fk_obj *o = c->objs; o; o = o->next) {
        struct fk_stream *s = (struct fk_stream *)o;
        if (o->kind != FK_STREAM || (s->flags != 0 && !s->is_null))
            continue;
        if (fk_vc_merge(out, &s->clock) != 0) {
            fk_vc_free(out);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        t = fk_max(t, s->tail);
    }
    *ready = t;
    return CUDA_SUCCESS;
}

/* ---- execution ---------------------------------------------------------- */

static void exec_op(struct fk_op *op)
{
    switch (op->kind) {
    case OP_FREE:
        fk_alloc_free_exec(op->alloc);
        break;
    case OP_H2D:
        if (op->rows)
            fk_copy_rows((char *)(uintptr_t)op->dptr, op->dev_pitch,
                         op->snapshot ? op->snapshot : op->host,
                         op->snapshot ? op->bytes : op->host_pitch, op->bytes, op->rows);
        else
            memcpy((void *)(uintptr_t)op->dptr, op->snapshot ? op->snapshot : op->host,
                   op->bytes);
        if (op->pinned)
            op->pinned->pending--;
        break;
    case OP_D2H:
        if (op->rows)
            fk_copy_rows(op->host, op->host_pitch, (const char *)(uintptr_t)op->dptr,
                         op->dev_pitch, op->bytes, op->rows);
        else
            memcpy(op->host, (const void *)(uintptr_t)op->dptr, op->bytes);
        if (op->pinned)
            op->pinned->pending--;
        break;
    case OP_KERNEL:
        op->kernel->run(&op->args);
        /* A module with a launch not executed is never unloaded (a
         * violation), and a context runs its work before it goes. */
        op->module->pending--;
        break;
    default:
        break;
    }
}

/* Runs the next op of `s`, whose dependencies have all run. */
void fk_run_head(struct fk_stream *s)
{
    struct fk_op *op = s->head;
    s->head = op->next;
    if (!s->head)
        s->last = NULL;
    exec_op(op);
    s->done++;
    free(op->snapshot);
    free(op->deps);
    free(op);
}

struct frame {
    struct fk_stream *s;
    uint64_t seq;
};

/* Runs `s` up to and including op `seq`, first the points each op waits
 * for, recursively (an explicit stack: a point only ever waits for ops
 * queued before it, so there is no cycle and a stream is never on the
 * stack twice). */
CUresult fk_run_to(struct fk_stream *s, uint64_t seq)
{
    struct frame *stack = malloc(8 * sizeof *stack);
    size_t n = 0, cap = 8;
    if (!stack)
        return CUDA_ERROR_OUT_OF_MEMORY;
    stack[n++] = (struct frame){s, seq};
    while (n > 0) {
        struct fk_stream *cs = stack[n - 1].s;
        if (cs->done >= stack[n - 1].seq || !cs->head) {
            n--;
            continue;
        }
        struct fk_op *op = cs->head;
        struct frame need = {NULL, 0};
        for (uint32_t i = 0; i < op->ndeps && !need.s; i++) {
            struct fk_stream *d = fk_stream_by_sid(op->deps[i].stream);
            if (d && d->done < op->deps[i].seq)
                need = (struct frame){d, op->deps[i].seq};
        }
        if (need.s) {
            if (n > g.sids.len) {
                fprintf(stderr, "fake libcuda: internal error: a dependency cycle\n");
                abort();
            }
            if (n == cap) {
                struct frame *st = realloc(stack, cap * 2 * sizeof *st);
                if (!st) {
                    free(stack);
                    return CUDA_ERROR_OUT_OF_MEMORY;
                }
                stack = st;
                cap *= 2;
            }
            stack[n++] = need;
            continue;
        }
        fk_run_head(cs);
    }
    free(stack);
    return CUDA_SUCCESS;
}

CUresult fk_run_ctx(struct fk_ctx *c)
{
    for (struct fk_obj *o = c->objs; o; o = o->next) {
        struct fk_stream *s = (struct fk_stream *)o;
        if (o->kind == FK_STREAM) {
            CUresult r = fk_run_to(s, s->queued);
            if (r != CUDA_SUCCESS)
                return r;
        }
    }
    return CUDA_SUCCESS;
}

CUresult fk_host_observe(const struct fk_vclock *c, double t)
{
    if (fk_vc_merge(&g.host_clock, c) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g.host_time = fk_max(g.host_time, t);
    return CUDA_SUCCESS;
}

CUresult fk_host_observe_ctx(struct fk_ctx *c)
{
    for (struct fk_obj *o = c->objs; o; o = o->next) {
        struct fk_stream *s = (struct fk_stream *)o;
        if (o->kind == FK_STREAM && fk_host_observe(&s->clock, s->tail) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}
