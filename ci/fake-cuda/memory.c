/* memory.c - device memory: real host pages (mmap, MAP_NORESERVE) whose
 * addresses are the device pointers, the table of allocations, their
 * checks (ordering after the allocation, use after free), the free memory
 * of each device, and the quarantine that keeps freed ranges mapped
 * without access so that their addresses are not reused at once. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake.h"

#define QUARANTINE_MAX 4096
#define QUARANTINE_BYTES (1ULL << 40)

static struct fk_alloc **table; /* every mapped range, sorted by base */
static size_t count, cap;
static struct fk_alloc *q_head, *q_tail;
static size_t q_count;
static uint64_t q_bytes;

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

/* The index of the last allocation with base <= addr, or count. */
static size_t find_le(uint64_t addr)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (table[mid]->base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? count : lo - 1;
}

struct fk_alloc *fk_alloc_find(uint64_t addr)
{
    size_t i = find_le(addr);
    if (i == count)
        return NULL;
    struct fk_alloc *a = table[i];
    return addr - a->base < a->bytes ? a : NULL;
}

CUresult fk_alloc_map(size_t bytes, int dev, struct fk_alloc **out)
{
    size_t page = page_size();
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes > SIZE_MAX - (page - 1))
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t map_len = (bytes + page - 1) / page * page;
    if (count == cap) {
        size_t ncap = cap ? cap * 2 : 64;
        struct fk_alloc **t;
        if (ncap > SIZE_MAX / sizeof *t || !(t = realloc(table, ncap * sizeof *t)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        table = t;
        cap = ncap;
    }
    struct fk_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = (uint64_t)(uintptr_t)p;
    a->bytes = bytes;
    a->map_len = map_len;
    a->dev = dev;
    a->state = FK_LIVE;
    /* Mapped ranges never overlap: freed ones stay mapped until evicted. */
    size_t i = count == 0 ? 0 : find_le(a->base);
    i = i == count ? 0 : i + 1;
    memmove(&table[i + 1], &table[i], (count - i) * sizeof *table);
    table[i] = a;
    count++;
    *out = a;
    return CUDA_SUCCESS;
}

/* Removes `a` from the table, unmaps it and frees it. */
void fk_alloc_unmap(struct fk_alloc *a)
{
    size_t i = find_le(a->base);
    if (i != count && table[i] == a) {
        memmove(&table[i], &table[i + 1], (count - i - 1) * sizeof *table);
        count--;
    }
    munmap((void *)(uintptr_t)a->base, a->map_len);
    free(a->uses);
    fk_race_forget(a);
    free(a);
}

/* A freed range: its pages are dropped and it stays mapped without access
 * (a use is reported as a use after free, not as an unknown address)
 * until the quarantine is full. */
static void quarantine(struct fk_alloc *a)
{
    fk_race_forget(a); /* a later use is a use after free */
    void *p = mmap((void *)(uintptr_t)a->base, a->map_len, PROT_NONE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fk_alloc_unmap(a);
        return;
    }
    a->qnext = NULL;
    if (q_tail)
        q_tail->qnext = a;
    else
        q_head = a;
    q_tail = a;
    q_count++;
    q_bytes += a->map_len;
    while (q_head && (q_count > QUARANTINE_MAX || q_bytes > QUARANTINE_BYTES)) {
        struct fk_alloc *old = q_head;
        q_head = old->qnext;
        if (!q_head)
            q_tail = NULL;
        q_count--;
        q_bytes -= old->map_len;
        fk_alloc_unmap(old);
    }
}

/* Frees `a` now (its cuMemFreeAsync executes, cuMemFree_v2): the bytes go
 * back to the pool's idle bytes, or to the device. */
void fk_alloc_free_exec(struct fk_alloc *a)
{
    struct fk_device *d = &g.devs[a->dev];
    struct fk_pool *p = a->pool;
    if (!a->released) {
        a->released = 1;
        d->allocated -= a->bytes;
        if (p) {
            fk_pool_give_back(a);
        } else {
            d->taken -= a->bytes;
        }
    }
    a->state = FK_FREED;
    a->pool = NULL;
    quarantine(a);
    if (p)
        fk_pool_alloc_gone(p);
}

/* The context of device c->dev is going: every allocation of the device
 * is freed and its memory goes back to the device. */
void fk_mem_context_destroyed(struct fk_ctx *c)
{
    struct fk_device *d = &g.devs[c->dev];
    for (size_t i = 0; i < count;) {
        struct fk_alloc *a = table[i];
        if (a->dev != c->dev || a->state == FK_FREED) {
            i++;
            continue;
        }
        a->state = FK_FREED;
        a->freed_by = FK_BY_CONTEXT;
        a->released = 1;
        a->pool = NULL; /* its pool goes with the context */
        a->pprev = a->pnext = NULL;
        quarantine(a); /* may evict others: look at index i again */
        i = 0;
    }
    d->taken = d->allocated = 0;
    c->local_reserved = 0;
}

int fk_host_overlaps_device(const void *p, size_t len)
{
    uint64_t lo = (uint64_t)(uintptr_t)p;
    size_t i = find_le(lo + len - 1);
    return i != count && table[i]->base + table[i]->map_len > lo;
}

CUresult fk_alloc_reserve_use(struct fk_alloc *a)
{
    if (a->nuses < a->capuses)
        return CUDA_SUCCESS;
    uint32_t ncap = a->capuses ? a->capuses * 2 : 2;
    struct fk_point *u;
    if (ncap < a->capuses || !(u = realloc(a->uses, (size_t)ncap * sizeof *u)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->uses = u;
    a->capuses = ncap;
    return CUDA_SUCCESS;
}

/* Keeps the last use on each stream; needs fk_alloc_reserve_use first. */
void fk_alloc_note_use(struct fk_alloc *a, struct fk_point p)
{
    for (uint32_t i = 0; i < a->nuses; i++) {
        if (a->uses[i].stream == p.stream) {
            if (a->uses[i].seq < p.seq)
                a->uses[i].seq = p.seq;
            return;
        }
    }
    if (a->nuses < a->capuses)
        a->uses[a->nuses++] = p;
}

static const char *freed_how(const struct fk_alloc *a)
{
    switch (a->freed_by) {
    case FK_BY_ASYNC:
        return "its stream-ordered free";
    case FK_BY_SYNC:
        return "its free (cuMemFree_v2)";
    default:
        return "its context was destroyed";
    }
}

/* Checks that [ptr, ptr + bytes) lies in one live allocation (of device
 * `dev` unless -1) whose allocation `clock` covers; CUDA_ERROR_INVALID_VALUE
 * when it is in no allocation, 700 after reporting a violation. */
CUresult fk_mem_check(uint64_t ptr, size_t bytes, int dev, const struct fk_vclock *clock,
                      const char *who, struct fk_alloc **out)
{
    char buf[32];
    struct fk_alloc *a = fk_alloc_find(ptr);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    if (a->state != FK_LIVE) {
        fk_violation("device memory 0x%llx (+%zu bytes) used on %s after %s",
                     (unsigned long long)ptr, bytes, who, freed_how(a));
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if (bytes > a->bytes - (ptr - a->base) || (dev >= 0 && a->dev != dev))
        return CUDA_ERROR_INVALID_VALUE;
    if (clock && !fk_covered(clock, a->at)) {
        fk_violation("device memory 0x%llx (+%zu bytes) used on %s before its allocation on "
                     "%s is ordered before it",
                     (unsigned long long)ptr, bytes, who, fk_who(a->at.stream, buf, sizeof buf));
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    *out = a;
    return CUDA_SUCCESS;
}

FK_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct fk_ctx *c;
    CUresult r = fk_enter(FN_cuMemGetInfo_v2);
    if (r == CUDA_SUCCESS && (!free_bytes || !total))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS) {
        struct fk_device *d = &g.devs[c->dev];
        *free_bytes = d->free0 > d->taken ? (size_t)(d->free0 - d->taken) : 0;
        *total = (size_t)d->total;
    }
    return fk_leave(r);
}

/* Whether `bytes` more allocated bytes would exceed CUBIE_FAKE_CUDA_OOM_ABOVE. */
int fk_oom_above(const struct fk_device *d, uint64_t bytes)
{
    return g.have_oom_above && (bytes > g.oom_above || d->allocated > g.oom_above - bytes);
}

FK_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct fk_ctx *c;
    struct fk_alloc *a;
    CUresult r = fk_enter(FN_cuMemAlloc_v2);
    if (r == CUDA_SUCCESS && (!dptr || bytesize == 0))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS) {
        struct fk_device *d = &g.devs[c->dev];
        uint64_t avail = d->free0 > d->taken ? d->free0 - d->taken : 0;
        if (bytesize > avail || fk_oom_above(d, bytesize))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((r = fk_alloc_map(bytesize, c->dev, &a)) == CUDA_SUCCESS) {
            d->taken += bytesize;
            d->allocated += bytesize;
            *dptr = a->base;
        }
    }
    return fk_leave(r);
}

/* Whether the host has waited for the allocation of pool memory `a` and
 * for its every use, so that cuMemFree_v2 (which does not wait for
 * stream-ordered work) may free it; reports a violation otherwise. */
static int fk_pool_alloc_idle(struct fk_alloc *a)
{
    char buf[32];
    if (!fk_vc_covers(&g.host_clock, a->at)) {
        fk_violation("pool memory 0x%llx freed with cuMemFree_v2 before the host waited for its "
                     "allocation on %s (cuMemFree does not wait for stream-ordered work)",
                     (unsigned long long)a->base, fk_who(a->at.stream, buf, sizeof buf));
        return 0;
    }
    for (uint32_t i = 0; i < a->nuses; i++) {
        if (!fk_vc_covers(&g.host_clock, a->uses[i])) {
            fk_violation("pool memory 0x%llx freed with cuMemFree_v2 while still in use on %s "
                         "(its op %llu there; cuMemFree does not wait for stream-ordered work)",
                         (unsigned long long)a->base, fk_who(a->uses[i].stream, buf, sizeof buf),
                         (unsigned long long)a->uses[i].seq);
            return 0;
        }
    }
    return 1;
}

FK_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    struct fk_ctx *c;
    CUresult r = fk_enter(FN_cuMemFree_v2);
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS) {
        struct fk_alloc *a = fk_alloc_find(dptr);
        if (a && a->state != FK_LIVE) {
            fk_violation("device memory 0x%llx freed (cuMemFree_v2) after %s",
                         (unsigned long long)dptr, freed_how(a));
        } else if (!a || a->base != dptr) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (a->pool && !fk_pool_alloc_idle(a)) {
            /* cuMemFree_v2 does not wait for stream-ordered work on pool
             * memory: every use must be one the host has waited for. */
        } else {
            /* Of cuMemAlloc_v2 memory the real call synchronises: everything
             * queued runs first. */
            struct fk_ctx *owner = &g.devs[a->dev].ctx;
            if ((r = fk_run_ctx(owner)) == CUDA_SUCCESS && (r = fk_run_ctx(c)) == CUDA_SUCCESS &&
                (r = fk_host_observe_ctx(owner)) == CUDA_SUCCESS &&
                (r = fk_host_observe_ctx(c)) == CUDA_SUCCESS) {
                a->freed_by = FK_BY_SYNC;
                if (a->pool)
                    a->pool->live--;
                fk_alloc_free_exec(a);
                fk_pool_release_to_threshold(owner);
            }
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    struct fk_ctx *c;
    struct fk_stream *s;
    struct fk_queue q;
    char who[32], buf[32];
    CUresult r = fk_enter(FN_cuMemFreeAsync);
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS &&
        (r = fk_stream_get(hStream, c, &s)) == CUDA_SUCCESS) {
        struct fk_alloc *a = fk_alloc_find(dptr);
        fk_who(s->sid, who, sizeof who);
        if (a && a->state != FK_LIVE) {
            fk_violation("device memory 0x%llx freed again on %s after %s",
                         (unsigned long long)dptr, who, freed_how(a));
        } else if (!a || a->base != dptr || a->dev != c->dev) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if ((r = fk_q_begin(&q, s)) == CUDA_SUCCESS) {
            struct fk_op *op = NULL;
            if (!fk_covered(&q.clock, a->at)) {
                fk_violation("device memory 0x%llx (+%zu bytes) freed on %s before its "
                             "allocation on %s is ordered before it",
                             (unsigned long long)dptr, a->bytes, who,
                             fk_who(a->at.stream, buf, sizeof buf));
            }
            for (uint32_t i = 0; i < a->nuses && !g.violation_in_call; i++) {
                if (!fk_covered(&q.clock, a->uses[i]))
                    fk_violation("device memory 0x%llx (+%zu bytes) freed on %s while still in "
                                 "use on %s (its op %llu there is not ordered before the free)",
                                 (unsigned long long)dptr, a->bytes, who,
                                 fk_who(a->uses[i].stream, buf, sizeof buf),
                                 (unsigned long long)a->uses[i].seq);
            }
            if (!g.violation_in_call && !(op = calloc(1, sizeof *op)))
                r = CUDA_ERROR_OUT_OF_MEMORY;
            if (!op) {
                fk_q_abort(&q);
            } else {
                op->kind = OP_FREE;
                op->alloc = a;
                struct fk_qlog lg = {.kind = "free", .has_ptr = 1, .ptr = dptr, .bytes = a->bytes};
                fk_q_commit(&q, op, -1, 0, &lg);
                a->state = FK_FREE_QUEUED;
                a->freed_by = FK_BY_ASYNC;
                a->free_at = (struct fk_point){s->sid, op->seq};
                if (a->pool) {
                    a->pool->live--;
                    a->pnext = a->pool->pending;
                    a->pprev = NULL;
                    if (a->pool->pending)
                        a->pool->pending->pprev = a;
                    a->pool->pending = a;
                }
            }
        }
    }
    return fk_leave(r);
}

FK_API int cubieFakeCudaPointerDevice(unsigned long long ptr)
{
    pthread_mutex_lock(&g.lock);
    struct fk_alloc *a = fk_alloc_find(ptr);
    int dev = a && a->state == FK_LIVE ? a->dev : -1;
    pthread_mutex_unlock(&g.lock);
    return dev;
}
