/* pools.c - memory pools and stream-ordered allocation: reserved and used
 * bytes, reuse of bytes freed earlier in stream order, the release
 * threshold applied at synchronisation, trimming, attributes. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

enum {
    ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
    ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
    ATTR_RELEASE_THRESHOLD = 4,
    ATTR_RESERVED_MEM_CURRENT = 5,
    ATTR_RESERVED_MEM_HIGH = 6,
    ATTR_USED_MEM_CURRENT = 7,
    ATTR_USED_MEM_HIGH = 8,
};

static CUresult pool_of(CUmemoryPool h, struct fk_ctx **c, struct fk_pool **p)
{
    struct fk_obj *o;
    CUresult r = fk_current(c);
    if (r == CUDA_SUCCESS && (r = fk_obj_get(h, FK_POOL, *c, &o)) == CUDA_SUCCESS)
        *p = (struct fk_pool *)o;
    return r;
}

/* Gives `bytes` idle reserved bytes back to the device. */
static void release(struct fk_pool *p, uint64_t bytes)
{
    p->reserved -= bytes;
    g.devs[p->dev].taken -= bytes;
}

void fk_pool_free(struct fk_pool *p)
{
    free(p);
}

/* An allocation's free executed; a destroyed pool goes with its last one. */
void fk_pool_alloc_gone(struct fk_pool *p)
{
    p->allocs--;
    if (p->destroyed && p->allocs == 0) {
        release(p, p->reserved);
        fk_obj_unlink(&p->o);
        fk_pool_free(p);
    }
}

void fk_pool_unpend(struct fk_alloc *a)
{
    struct fk_pool *p = a->pool;
    if (a->pprev)
        a->pprev->pnext = a->pnext;
    else if (p && p->pending == a)
        p->pending = a->pnext;
    if (a->pnext)
        a->pnext->pprev = a->pprev;
    a->pprev = a->pnext = NULL;
}

void fk_pool_release_to_threshold(struct fk_ctx *c)
{
    for (struct fk_obj *o = c->objs; o; o = o->next) {
        struct fk_pool *p = (struct fk_pool *)o;
        if (o->kind != FK_POOL)
            continue;
        uint64_t idle = p->reserved - p->used;
        if (idle > p->threshold)
            release(p, idle - p->threshold);
    }
}

static int props_valid(const CUmemPoolProps *pp)
{
    if (pp->allocType != 1 || pp->handleTypes != 0 || pp->location.type != 1 ||
        pp->location.id < 0 || pp->location.id >= g.ndev || pp->win32SecurityAttributes ||
        pp->usage != 0 || pp->gpuDirectRDMACapable > 1)
        return 0;
    for (size_t i = 0; i < sizeof pp->reserved; i++)
        if (pp->reserved[i])
            return 0;
    return 1;
}

FK_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    struct fk_ctx *c;
    CUresult r = fk_enter(FN_cuMemPoolCreate);
    if (r == CUDA_SUCCESS && (!pool || !poolProps || !props_valid(poolProps)))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS) {
        struct fk_ctx *owner = &g.devs[poolProps->location.id].ctx;
        struct fk_pool *p;
        if (owner->refs == 0) {
            r = CUDA_ERROR_INVALID_CONTEXT;
        } else if (!(p = calloc(1, sizeof *p))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((r = fk_obj_register(&p->o, FK_POOL, owner)) != CUDA_SUCCESS) {
            free(p);
        } else {
            p->dev = owner->dev;
            p->max_size = poolProps->maxSize;
            p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
            *pool = fk_handle(&p->o);
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct fk_ctx *c;
    struct fk_pool *p;
    CUresult r = fk_enter(FN_cuMemPoolDestroy);
    if (r == CUDA_SUCCESS && (r = pool_of(pool, &c, &p)) == CUDA_SUCCESS) {
        if (p->live > 0) {
            fk_violation("memory pool of device %d destroyed with %llu live allocations "
                         "(%llu bytes in use)",
                         p->dev, (unsigned long long)p->live, (unsigned long long)p->used);
        } else {
            fk_obj_unregister(&p->o);
            p->destroyed = 1;
            release(p, p->reserved - p->used);
            /* Frees still queued finish the pool off when they execute. */
            p->allocs++;
            fk_pool_alloc_gone(p);
        }
    }
    return fk_leave(r);
}

/* Frees queued before this point in stream order (on the same stream, or
 * on another that the allocation's clock covers when the pool follows
 * event dependencies) give their bytes back to the pool at once. */
static void reuse_pending(struct fk_pool *p, const struct fk_queue *q)
{
    struct fk_alloc *a = p->pending, *next;
    for (; a; a = next) {
        next = a->pnext;
        if (a->free_at.stream == q->s->sid ||
            (p->reuse[0] && fk_covered(&q->clock, a->free_at))) {
            fk_pool_unpend(a);
            a->released = 1;
            p->used -= a->bytes;
            g.devs[p->dev].allocated -= a->bytes;
        }
    }
}

FK_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                        CUstream hStream)
{
    struct fk_ctx *c;
    struct fk_pool *p;
    struct fk_stream *s;
    struct fk_queue q;
    CUresult r = fk_enter(FN_cuMemAllocFromPoolAsync);
    if (r == CUDA_SUCCESS && (!dptr || bytesize == 0))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = pool_of(pool, &c, &p)) == CUDA_SUCCESS &&
        (r = fk_stream_get(hStream, c, &s)) == CUDA_SUCCESS &&
        (r = fk_q_begin(&q, s)) == CUDA_SUCCESS) {
        struct fk_device *d = &g.devs[p->dev];
        reuse_pending(p, &q);
        uint64_t idle = p->reserved - p->used;
        uint64_t grow = bytesize > idle ? bytesize - idle : 0;
        uint64_t avail = d->free0 > d->taken ? d->free0 - d->taken : 0;
        struct fk_op *op = NULL;
        struct fk_alloc *a = NULL;
        if (grow > avail || (p->max_size && (grow > p->max_size || p->reserved > p->max_size - grow)) ||
            fk_oom_above(d, bytesize))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else if (!(op = calloc(1, sizeof *op)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((r = fk_alloc_map(bytesize, p->dev, &a)) != CUDA_SUCCESS)
            free(op);
        if (r != CUDA_SUCCESS) {
            fk_q_abort(&q);
        } else {
            op->kind = OP_ALLOC;
            struct fk_qlog lg = {.kind = "alloc", .has_ptr = 1, .ptr = a->base, .bytes = bytesize};
            fk_q_commit(&q, op, -1, 0, &lg);
            p->reserved += grow;
            d->taken += grow;
            p->used += bytesize;
            d->allocated += bytesize;
            if (p->reserved > p->reserved_high)
                p->reserved_high = p->reserved;
            if (p->used > p->used_high)
                p->used_high = p->used;
            p->live++;
            p->allocs++;
            a->pool = p;
            a->at = (struct fk_point){s->sid, op->seq};
            *dptr = a->base;
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    struct fk_ctx *c;
    struct fk_pool *p;
    CUresult r = fk_enter(FN_cuMemPoolTrimTo);
    if (r == CUDA_SUCCESS && (r = pool_of(pool, &c, &p)) == CUDA_SUCCESS) {
        uint64_t keep = minBytesToKeep > p->used ? minBytesToKeep : p->used;
        if (p->reserved > keep)
            release(p, p->reserved - keep);
    }
    return fk_leave(r);
}

static CUresult attribute(struct fk_pool *p, CUmemPool_attribute attr, void *value, int set)
{
    uint64_t v = 0;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        if (set)
            memcpy(&p->reuse[attr - 1], value, sizeof(int));
        else
            memcpy(value, &p->reuse[attr - 1], sizeof(int));
        return CUDA_SUCCESS;
    case ATTR_RELEASE_THRESHOLD:
        if (set)
            memcpy(&p->threshold, value, sizeof p->threshold);
        else
            memcpy(value, &p->threshold, sizeof p->threshold);
        return CUDA_SUCCESS;
    case ATTR_RESERVED_MEM_HIGH:
    case ATTR_USED_MEM_HIGH:
        if (set) { /* only 0: the high mark restarts from the current value */
            memcpy(&v, value, sizeof v);
            if (v != 0)
                return CUDA_ERROR_INVALID_VALUE;
            if (attr == ATTR_RESERVED_MEM_HIGH)
                p->reserved_high = p->reserved;
            else
                p->used_high = p->used;
            return CUDA_SUCCESS;
        }
        v = attr == ATTR_RESERVED_MEM_HIGH ? p->reserved_high : p->used_high;
        memcpy(value, &v, sizeof v);
        return CUDA_SUCCESS;
    case ATTR_RESERVED_MEM_CURRENT:
    case ATTR_USED_MEM_CURRENT:
        if (set)
            return CUDA_ERROR_INVALID_VALUE;
        v = attr == ATTR_RESERVED_MEM_CURRENT ? p->reserved : p->used;
        memcpy(value, &v, sizeof v);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

FK_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct fk_ctx *c;
    struct fk_pool *p;
    CUresult r = fk_enter(FN_cuMemPoolSetAttribute);
    if (r == CUDA_SUCCESS && (r = pool_of(pool, &c, &p)) == CUDA_SUCCESS)
        r = attribute(p, attr, value, 1);
    return fk_leave(r);
}

FK_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct fk_ctx *c;
    struct fk_pool *p;
    CUresult r = fk_enter(FN_cuMemPoolGetAttribute);
    if (r == CUDA_SUCCESS && (r = pool_of(pool, &c, &p)) == CUDA_SUCCESS)
        r = attribute(p, attr, value, 0);
    return fk_leave(r);
}
