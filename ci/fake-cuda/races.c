/* races.c - races on device memory: each allocation keeps the accesses
 * (byte range, read / write / read-write, the op and its stream point) that
 * are not yet known to be over, and each new access (a copy, a kernel's
 * pointer parameter, a synchronous copy) is checked against them when it
 * is queued: two accesses to overlapping bytes, at least one writing them,
 * on different streams, the later not ordered after the earlier (its clock
 * does not cover it, nor did the host's when it was queued), are a race.
 * The check reads clocks only, never what has executed, so it finds the
 * same races in every execution mode (exec.c).
 *
 * The list stays short: accesses the host has synchronised with go, and so
 * does an access that a later one ordered after it (the same stream's next
 * access, or one whose clock covers it) supersedes: the later one covers
 * its bytes and writes them if it did, so whatever races with the earlier
 * one races with the later one too. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

struct fk_access {
    struct fk_point at;
    uint64_t off, len;
    int mode;         /* FK_READ, FK_WRITE, FK_RW */
    const char *op;   /* "h2d", "d2h", "kernel" (static strings) */
    const char *name; /* a kernel's stand-in name (static), or NULL */
};

static const char *verb(int mode)
{
    return mode == FK_RW ? "reads and writes" : mode == FK_WRITE ? "writes" : "reads";
}

static void describe(char *buf, size_t len, const char *op, const char *name, uint32_t sid)
{
    if (sid == 0)
        snprintf(buf, len, "%s on the host", op);
    else if (name)
        snprintf(buf, len, "%s %s on stream %u", op, name, sid);
    else
        snprintf(buf, len, "%s on stream %u", op, sid);
}

/* Accesses the host has synchronised with are over for good. */
static void prune(struct fk_alloc *a)
{
    uint32_t w = 0;
    for (uint32_t i = 0; i < a->naccesses; i++)
        if (!fk_vc_covers(&g.host_clock, a->accesses[i].at))
            a->accesses[w++] = a->accesses[i];
    a->naccesses = w;
}

CUresult fk_race_reserve(struct fk_alloc *a, uint64_t n)
{
    if (a->capaccesses - a->naccesses >= n)
        return CUDA_SUCCESS;
    uint64_t want = (uint64_t)a->naccesses + n;
    uint64_t cap = a->capaccesses ? a->capaccesses : 2 * FK_MAX_PARAMS;
    while (cap < want && cap <= UINT32_MAX / 2)
        cap *= 2;
    struct fk_access *v;
    if (cap < want || cap > UINT32_MAX || !(v = realloc(a->accesses, (size_t)cap * sizeof *v)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->accesses = v;
    a->capaccesses = (uint32_t)cap;
    return CUDA_SUCCESS;
}

CUresult fk_race_check(struct fk_alloc *a, uint64_t ptr, uint64_t bytes, int mode,
                       const struct fk_vclock *clock, const struct fk_racer *who)
{
    uint64_t off = ptr - a->base;
    prune(a);
    for (uint32_t i = 0; i < a->naccesses; i++) {
        const struct fk_access *e = &a->accesses[i];
        if (!((mode | e->mode) & FK_WRITE) || off >= e->off + e->len || e->off >= off + bytes ||
            fk_covered(clock, e->at))
            continue;
        char now[1200], then[1200];
        describe(now, sizeof now, who->op, who->name, who->sid);
        describe(then, sizeof then, e->op, e->name, e->at.stream);
        const char *kind = !(mode & FK_WRITE) ? "read after write"
                           : e->mode & FK_WRITE ? "write after write"
                                                : "write after read";
        fk_violation("race on device memory: %s %s 0x%llx+%llu (bytes %llu..%llu of the "
                     "allocation at 0x%llx) while %s (op %llu) %s bytes %llu..%llu with no "
                     "event between (%s)",
                     now, verb(mode), (unsigned long long)ptr, (unsigned long long)bytes,
                     (unsigned long long)off, (unsigned long long)(off + bytes),
                     (unsigned long long)a->base, then, (unsigned long long)e->at.seq,
                     verb(e->mode), (unsigned long long)e->off,
                     (unsigned long long)(e->off + e->len), kind);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    return fk_race_reserve(a, FK_MAX_PARAMS);
}

void fk_race_note(struct fk_alloc *a, uint64_t ptr, uint64_t bytes, int mode, struct fk_point at,
                  const struct fk_vclock *clock, const struct fk_racer *who)
{
    uint64_t off = ptr - a->base;
    uint32_t w = 0;
    prune(a);
    for (uint32_t i = 0; i < a->naccesses; i++) {
        const struct fk_access *e = &a->accesses[i];
        if (e->at.stream == at.stream && e->at.seq == at.seq && e->off == off && e->len == bytes) {
            mode |= e->mode; /* the same op's other parameter over the same bytes */
            continue;
        }
        if (fk_vc_covers(clock, e->at) && e->off >= off && e->off + e->len <= off + bytes &&
            (!(e->mode & FK_WRITE) || (mode & FK_WRITE)))
            continue;
        a->accesses[w++] = *e;
    }
    a->naccesses = w;
    if (a->naccesses < a->capaccesses)
        a->accesses[a->naccesses++] =
            (struct fk_access){at, off, bytes, mode, who->op, who->name};
}

void fk_race_forget(struct fk_alloc *a)
{
    free(a->accesses);
    a->accesses = NULL;
    a->naccesses = a->capaccesses = 0;
}

FK_API unsigned long long cubieFakeCudaAccesses(unsigned long long ptr)
{
    pthread_mutex_lock(&g.lock);
    struct fk_alloc *a = fk_alloc_find(ptr);
    unsigned long long n = 0;
    if (a) {
        prune(a);
        n = a->naccesses;
    }
    pthread_mutex_unlock(&g.lock);
    return n;
}
