/* clock.c - vector clocks: for each stream id, how many of its ops are
 * ordered before a point. Entries are sorted by id. Every function that
 * can fail leaves its destination unchanged. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/* The index of `id`, or where it would be inserted. */
static uint32_t find(const struct fk_vclock *c, uint32_t id)
{
    uint32_t lo = 0, hi = c->len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->e[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int reserve(struct fk_vclock *c, uint64_t want)
{
    if (want <= c->cap)
        return 0;
    if (want > UINT32_MAX / 2)
        return -1;
    uint32_t cap = c->cap ? c->cap : 4;
    while (cap < want)
        cap *= 2;
    struct fk_centry *e = realloc(c->e, (size_t)cap * sizeof *e);
    if (!e)
        return -1;
    c->e = e;
    c->cap = cap;
    return 0;
}

uint64_t fk_vc_get(const struct fk_vclock *c, uint32_t id)
{
    uint32_t i = find(c, id);
    return i < c->len && c->e[i].id == id ? c->e[i].n : 0;
}

int fk_vc_set(struct fk_vclock *c, uint32_t id, uint64_t n)
{
    uint32_t i = find(c, id);
    if (i < c->len && c->e[i].id == id) {
        c->e[i].n = n;
        return 0;
    }
    if (reserve(c, (uint64_t)c->len + 1) != 0)
        return -1;
    memmove(&c->e[i + 1], &c->e[i], (size_t)(c->len - i) * sizeof *c->e);
    c->e[i].id = id;
    c->e[i].n = n;
    c->len++;
    return 0;
}

int fk_vc_merge(struct fk_vclock *dst, const struct fk_vclock *src)
{
    uint32_t extra = 0, i = 0, j = 0;
    while (j < src->len) {
        if (i < dst->len && dst->e[i].id < src->e[j].id) {
            i++;
        } else if (i < dst->len && dst->e[i].id == src->e[j].id) {
            i++;
            j++;
        } else {
            extra++;
            j++;
        }
    }
    if (reserve(dst, (uint64_t)dst->len + extra) != 0)
        return -1;
    /* Merge from the back, in place. */
    int64_t a = (int64_t)dst->len - 1, b = (int64_t)src->len - 1;
    int64_t w = (int64_t)dst->len + extra - 1;
    while (b >= 0) {
        if (a >= 0 && dst->e[a].id > src->e[b].id) {
            dst->e[w--] = dst->e[a--];
        } else if (a >= 0 && dst->e[a].id == src->e[b].id) {
            if (src->e[b].n > dst->e[a].n)
                dst->e[a].n = src->e[b].n;
            dst->e[w--] = dst->e[a--];
            b--;
        } else {
            dst->e[w--] = src->e[b--];
        }
    }
    dst->len += extra;
    return 0;
}

int fk_vc_copy(struct fk_vclock *dst, const struct fk_vclock *src)
{
    struct fk_vclock c = {0};
    if (src->len && reserve(&c, src->len) != 0)
        return -1;
    if (src->len)
        memcpy(c.e, src->e, (size_t)src->len * sizeof *c.e);
    c.len = src->len;
    fk_vc_free(dst);
    *dst = c;
    return 0;
}

int fk_vc_covers(const struct fk_vclock *c, struct fk_point p)
{
    return p.stream == 0 || fk_vc_get(c, p.stream) >= p.seq;
}

void fk_vc_free(struct fk_vclock *c)
{
    free(c->e);
    c->e = NULL;
    c->len = c->cap = 0;
}
