/* pools.c - memory pools and stream-ordered allocation: reserved and used
 * bytes, reuse of bytes freed earlier in stream order (or, with attribute 3,
 * of a free not ordered before the allocation, which then waits for it), the
 * release threshold applied at synchronisation, trimming, attributes.
 *
 * A pool reserves device memory in segments: each growth takes whole
 * granules (2 MiB) from the device, and only a segment with nothing in use
 * goes back to it (threshold, trim, destruction). An allocation is carved
 * from one idle block of one segment; a block given back merges with idle
 * neighbours of its segment only, so one large request is never served
 * from idle blocks scattered over segments: the pool grows instead, or
 * fails with 2 until a trim released them. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define GRANULE (2ULL << 20)

/* A run of a segment's bytes, in use by one allocation or idle. */
struct fk_block {
    struct fk_block *prev, *next; /* the segment's blocks by offset */
    struct fk_seg *seg;
    uint64_t off, len;
    int busy;
};

/* One growth of a pool: whole granules reserved from the device. */
struct fk_seg {
    struct fk_seg *next;
    uint64_t size;
    uint64_t busy; /* bytes of its blocks in use */
    struct fk_block *blocks;
};

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

static void seg_free(struct fk_seg *sg)
{
    for (struct fk_block *b = sg->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(sg);
}

/* Gives the idle segments back to the device while the pool reserves more
 * than `limit` bytes, keeping at least `floor` reserved. */
static void release_idle(struct fk_pool *p, uint64_t limit, uint64_t floor)
{
    for (struct fk_seg **link = &p->segs; *link && p->reserved > limit;) {
        struct fk_seg *sg = *link;
        if (sg->busy == 0 && p->reserved - sg->size >= floor) {
            *link = sg->next;
            p->reserved -= sg->size;
            g.devs[p->dev].taken -= sg->size;
            seg_free(sg);
        } else {
            link = &sg->next;
        }
    }
}

/* Frees the pool's host state; its device memory is the caller's to account. */
void fk_pool_free(struct fk_pool *p)
{
    for (struct fk_seg *sg = p->segs, *next; sg; sg = next) {
        next = sg->next;
        seg_free(sg);
    }
    free(p);
}

/* An allocation's free executed; a destroyed pool goes with its last one. */
void fk_pool_alloc_gone(struct fk_pool *p)
{
    p->allocs--;
    if (p->destroyed && p->allocs == 0) {
        release_idle(p, 0, 0);
        fk_obj_unlink(&p->o);
        fk_pool_free(p);
    }
}

/* Marks `b` idle and merges it with idle neighbours. */
static void block_idle(struct fk_block *b)
{
    b->busy = 0;
    b->seg->busy -= b->len;
    struct fk_block *n = b->next;
    if (n && !n->busy) {
        b->len += n->len;
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
        free(n);
    }
    struct fk_block *pr = b->prev;
    if (pr && !pr->busy) {
        pr->len += b->len;
        pr->next = b->next;
        if (b->next)
            b->next->prev = pr;
        free(b);
    }
}

void fk_pool_give_back(struct fk_alloc *a)
{
    struct fk_pool *p = a->pool;
    fk_pool_unpend(a);
    p->used -= a->bytes;
    if (a->block)
        block_idle(a->block);
    a->block = NULL;
}

/* The bytes `a` gives back, merged with the idle blocks beside them. */
static uint64_t idle_if_given_back(const struct fk_alloc *a)
{
    const struct fk_block *b = a->block;
    uint64_t len = b ? b->len : 0;
    if (b && b->prev && !b->prev->busy)
        len += b->prev->len;
    if (b && b->next && !b->next->busy)
        len += b->next->len;
    return len;
}

/* Carves `bytes` from the first idle block of at least that size: 0 and
 * the block in `out` (NULL when none fits), or 2 without host memory. */
static CUresult take_idle(struct fk_pool *p, uint64_t bytes, struct fk_block **out)
{
    *out = NULL;
    for (struct fk_seg *sg = p->segs; sg; sg = sg->next) {
        for (struct fk_block *b = sg->blocks; b; b = b->next) {
            if (b->busy || b->len < bytes)
                continue;
            if (b->len > bytes) {
                struct fk_block *rest = calloc(1, sizeof *rest);
                if (!rest)
                    return CUDA_ERROR_OUT_OF_MEMORY;
                *rest = (struct fk_block){.prev = b, .next = b->next, .seg = sg,
                                          .off = b->off + bytes, .len = b->len - bytes};
                if (b->next)
                    b->next->prev = rest;
                b->next = rest;
                b->len = bytes;
            }
            b->busy = 1;
            sg->busy += bytes;
            *out = b;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_SUCCESS;
}

/* Grows the pool by whole granules for `bytes`, carved from the new
 * segment: 0 and the block in `out`, or 2. */
static CUresult grow(struct fk_pool *p, uint64_t bytes, struct fk_block **out)
{
    struct fk_device *d = &g.devs[p->dev];
    if (bytes > UINT64_MAX - GRANULE)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t size = (bytes + GRANULE - 1) / GRANULE * GRANULE;
    uint64_t avail = d->free0 > d->taken ? d->free0 - d->taken : 0;
    if (size > avail || (p->max_size && (size > p->max_size || p->reserved > p->max_size - size)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fk_seg *sg = calloc(1, sizeof *sg);
    struct fk_block *b = calloc(1, sizeof *b);
    if (!sg || !b) {
        free(sg);
        free(b);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *sg = (struct fk_seg){.next = p->segs, .size = size, .blocks = b};
    *b = (struct fk_block){.seg = sg, .len = size};
    p->segs = sg;
    p->reserved += size;
    d->taken += size;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    return take_idle(p, bytes, out);
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
    for (struct fk_obj *o = c->objs; o; o = o->next)
        if (o->kind == FK_POOL)
            release_idle((struct fk_pool *)o, ((struct fk_pool *)o)->threshold, 0);
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
            release_idle(p, 0, 0);
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
            a->released = 1;
            g.devs[p->dev].allocated -= a->bytes;
            fk_pool_give_back(a);
        }
    }
}

/* With attribute 3 (REUSE_ALLOW_INTERNAL_DEPENDENCIES), a free queued on
 * another stream and not ordered before the allocation gives its bytes
 * back at once when they, with the idle blocks beside them, hold `bytes`;
 * the allocation then waits for the free (a dependency in its clock: the
 * free stream's clock when the free is its last op, else the free alone).
 * 0 and the block in `out` (NULL when no free fits), or 2. */
static CUresult reuse_unordered(struct fk_pool *p, struct fk_queue *q, uint64_t bytes,
                                struct fk_block **out)
{
    *out = NULL;
    if (!p->reuse[2])
        return CUDA_SUCCESS;
    for (struct fk_alloc *a = p->pending; a; a = a->pnext) {
        if (idle_if_given_back(a) < bytes)
            continue;
        struct fk_stream *fs = fk_stream_by_sid(a->free_at.stream);
        struct fk_vclock point = {0};
        const struct fk_vclock *clock = &point;
        double t = 0;
        if (fs && fs->queued == a->free_at.seq) {
            clock = &fs->clock;
            t = fs->tail;
        } else if (fk_vc_set(&point, a->free_at.stream, a->free_at.seq) != 0) {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        CUresult r = fk_q_add_dep(q, a->free_at, clock, t);
        fk_vc_free(&point);
        if (r != CUDA_SUCCESS)
            return r;
        a->released = 1;
        g.devs[p->dev].allocated -= a->bytes;
        fk_pool_give_back(a);
        return take_idle(p, bytes, out);
    }
    return CUDA_SUCCESS;
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
        struct fk_op *op = NULL;
        struct fk_alloc *a = NULL;
        struct fk_block *b = NULL;
        reuse_pending(p, &q);
        if (fk_oom_above(d, bytesize) || !(op = calloc(1, sizeof *op)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((r = take_idle(p, bytesize, &b)) == CUDA_SUCCESS && !b &&
                 (r = reuse_unordered(p, &q, bytesize, &b)) == CUDA_SUCCESS && !b)
            r = grow(p, bytesize, &b);
        if (r == CUDA_SUCCESS && (r = fk_alloc_map(bytesize, p->dev, &a)) != CUDA_SUCCESS)
            block_idle(b);
        if (r != CUDA_SUCCESS) {
            free(op);
            fk_q_abort(&q);
        } else {
            op->kind = OP_ALLOC;
            struct fk_qlog lg = {.kind = "alloc", .has_ptr = 1, .ptr = a->base, .bytes = bytesize};
            fk_q_commit(&q, op, -1, 0, &lg);
            p->used += bytesize;
            d->allocated += bytesize;
            if (p->used > p->used_high)
                p->used_high = p->used;
            p->live++;
            p->allocs++;
            a->pool = p;
            a->block = b;
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
        release_idle(p, minBytesToKeep, minBytesToKeep);
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
