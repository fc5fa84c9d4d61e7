/* pinned.c - page-locked host memory: cuMemHostAlloc / cuMemFreeHost, the
 * lookup of a host range, and the check that no two unordered copies
 * touch the same page-locked bytes with one of them writing them (and that
 * no block is freed while a copy from or into it is in flight). A block
 * allocated without CU_MEMHOSTALLOC_PORTABLE is page-locked only for the
 * context that allocated it. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define HOST_ALIGN 4096
#define FILL 0xA5

static struct fk_pinned **blocks; /* sorted by base */
static size_t count, cap;

/* The index of the last block with base <= p, or count. */
static size_t find_le(uintptr_t p)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)blocks[mid]->base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? count : lo - 1;
}

/* The block holding [p, p + len) (*out NULL: pageable memory), or
 * CUDA_ERROR_INVALID_VALUE when the range straddles a block's edge. */
CUresult fk_pinned_find(const void *p, size_t len, struct fk_pinned **out)
{
    uintptr_t lo = (uintptr_t)p;
    *out = NULL;
    if (len == 0 || lo > UINTPTR_MAX - len)
        return CUDA_ERROR_INVALID_VALUE;
    size_t i = find_le(lo + len - 1); /* the last block starting inside or before */
    if (i == count)
        return CUDA_SUCCESS;
    struct fk_pinned *b = blocks[i];
    uintptr_t base = (uintptr_t)b->base;
    if (base + b->bytes <= lo)
        return CUDA_SUCCESS; /* ends before the range */
    if (base > lo || len > b->bytes - (lo - base))
        return CUDA_ERROR_INVALID_VALUE;
    /* The block starts at or before p; no other block can start inside. */
    *out = b;
    return CUDA_SUCCESS;
}

int fk_pinned_locked_for(const struct fk_pinned *b, const struct fk_ctx *c)
{
    return (b->flags & 1) || b->dev == c->dev;
}

/* Copies the host has since synchronised with are done for good. */
static void prune(struct fk_pinned *b)
{
    size_t w = 0;
    for (size_t i = 0; i < b->ncopies; i++)
        if (!fk_vc_covers(&g.host_clock, b->copies[i].at))
            b->copies[w++] = b->copies[i];
    b->ncopies = w;
}

CUresult fk_pinned_check(struct fk_pinned *b, const void *p, size_t len, int writes,
                         const struct fk_vclock *clock, const char *who)
{
    char buf[32];
    size_t off = (size_t)((const char *)p - b->base);
    prune(b);
    for (size_t i = 0; i < b->ncopies; i++) {
        const struct fk_pcopy *c = &b->copies[i];
        if (!(writes || c->writes) || off >= c->off + c->len || c->off >= off + len)
            continue;
        if (!fk_covered(clock, c->at)) {
            fk_violation("page-locked memory %p (+%zu bytes) touched while a copy from or into "
                         "it is in flight: a copy %s it on %s is not ordered after the copy %s "
                         "its bytes %zu..%zu on %s (op %llu)",
                         p, len, writes ? "into" : "from", who, c->writes ? "into" : "from",
                         c->off, c->off + c->len, fk_who(c->at.stream, buf, sizeof buf),
                         (unsigned long long)c->at.seq);
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
    }
    return CUDA_SUCCESS;
}

CUresult fk_pinned_reserve(struct fk_pinned *b)
{
    if (b->ncopies < b->capcopies)
        return CUDA_SUCCESS;
    size_t ncap = b->capcopies ? b->capcopies * 2 : 4;
    struct fk_pcopy *c;
    if (ncap > SIZE_MAX / sizeof *c || !(c = realloc(b->copies, ncap * sizeof *c)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    b->copies = c;
    b->capcopies = ncap;
    return CUDA_SUCCESS;
}

/* Records an asynchronous copy; needs fk_pinned_reserve first. An earlier
 * record of the same stream whose bytes the new one covers, and that
 * writes only if the new one does, goes: whatever is not ordered after
 * it is not ordered after the new one either, so the new one finds every
 * conflict it would (this keeps a reused staging block's list short). */
void fk_pinned_note(struct fk_pinned *b, const void *p, size_t len, int writes, struct fk_point at)
{
    size_t off = (size_t)((const char *)p - b->base), w = 0;
    for (size_t i = 0; i < b->ncopies; i++) {
        const struct fk_pcopy *c = &b->copies[i];
        if (c->at.stream == at.stream && c->off >= off && c->off + c->len <= off + len &&
            c->writes <= writes)
            continue;
        b->copies[w++] = *c;
    }
    b->ncopies = w;
    if (b->ncopies == b->capcopies)
        return;
    b->copies[b->ncopies++] = (struct fk_pcopy){at, off, len, writes};
    b->pending++;
}

/* As fk_pinned_note for each row, in one pass over the earlier records
 * (a record inside one row goes as fk_pinned_note drops it), so that a
 * copy of many rows costs its rows, not its rows times the records. */
void fk_pinned_note_rows(struct fk_pinned *b, const char *p, size_t len, size_t pitch, size_t rows,
                         int writes, struct fk_point at)
{
    size_t off = (size_t)(p - b->base), w = 0;
    for (size_t i = 0; i < b->ncopies; i++) {
        const struct fk_pcopy *c = &b->copies[i];
        size_t row = c->off >= off && pitch ? (c->off - off) / pitch : rows;
        if (c->at.stream == at.stream && row < rows && c->off + c->len <= off + row * pitch + len &&
            c->writes <= writes)
            continue;
        b->copies[w++] = *c;
    }
    b->ncopies = w;
    for (size_t row = 0; row < rows && fk_pinned_reserve(b) == CUDA_SUCCESS; row++)
        b->copies[b->ncopies++] = (struct fk_pcopy){at, off + row * pitch, len, writes};
    b->pending++; /* one op, executed once */
}

FK_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    struct fk_ctx *c;
    CUresult r = fk_enter(FN_cuMemHostAlloc);
    if (r == CUDA_SUCCESS && (!pp || bytesize == 0 || Flags > 7))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS) {
        struct fk_pinned *b = NULL;
        void *mem = NULL;
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct fk_pinned **t;
            if (ncap > SIZE_MAX / sizeof *t || !(t = realloc(blocks, ncap * sizeof *t)))
                r = CUDA_ERROR_OUT_OF_MEMORY;
            else {
                blocks = t;
                cap = ncap;
            }
        }
        if (r == CUDA_SUCCESS &&
            (!(b = calloc(1, sizeof *b)) || posix_memalign(&mem, HOST_ALIGN, bytesize) != 0)) {
            free(b);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (r == CUDA_SUCCESS) {
            /* Not zeroed, as the driver's: a caller relying on zeros is caught. */
            memset(mem, FILL, bytesize);
            b->base = mem;
            b->bytes = bytesize;
            b->dev = c->dev;
            b->flags = Flags;
            size_t i = find_le((uintptr_t)mem);
            i = i == count ? 0 : i + 1;
            memmove(&blocks[i + 1], &blocks[i], (count - i) * sizeof *blocks);
            blocks[i] = b;
            count++;
            *pp = mem;
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuMemFreeHost(void *p)
{
    struct fk_ctx *c;
    char buf[32];
    CUresult r = fk_enter(FN_cuMemFreeHost);
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS) {
        size_t i = find_le((uintptr_t)p);
        struct fk_pinned *b = i == count ? NULL : blocks[i];
        if (!p || !b || b->base != p) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            prune(b);
            if (b->ncopies > 0) {
                const struct fk_pcopy *cp = &b->copies[0];
                fk_violation("page-locked memory %p (+%zu bytes) touched while a copy from or "
                             "into it is in flight: cuMemFreeHost before the host synchronised "
                             "with the copy %s its bytes %zu..%zu on %s (op %llu%s)",
                             p, b->bytes, cp->writes ? "into" : "from", cp->off,
                             cp->off + cp->len, fk_who(cp->at.stream, buf, sizeof buf),
                             (unsigned long long)cp->at.seq,
                             fk_point_done(cp->at) ? "" : ", not executed");
            } else {
                memmove(&blocks[i], &blocks[i + 1], (count - i - 1) * sizeof *blocks);
                count--;
                free(b->base);
                free(b->copies);
                free(b);
            }
        }
    }
    return fk_leave(r);
}
