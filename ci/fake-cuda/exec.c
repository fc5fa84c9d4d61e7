/* exec.c - when queued work runs. lazy (the default): only when the host
 * must observe it (queue.c). eager: at the end of every call, everything
 * queued runs, each op as soon as its stream and waits allow (a wait is
 * always on work queued before it, so everything queued can run). random:
 * at the end of every call a seeded xorshift generator runs 0 to 3 ops,
 * each the next op of a stream chosen at random among those whose next op
 * has nothing left to wait for. In every mode the host's synchronisation
 * still runs what it must first, and the checks, the modelled time and the
 * order log are made at queue time, from clocks: only what the data is
 * when an unordered op runs differs between modes. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define DEFAULT_SEED 1

static int mode = FK_EXEC_LAZY;
static uint64_t seed = DEFAULT_SEED, state;

static const char *const names[] = {"lazy", "eager", "random"};

int fk_exec_mode(const char *s, size_t len)
{
    for (int m = 0; m < 3; m++)
        if (strlen(names[m]) == len && memcmp(names[m], s, len) == 0)
            return m;
    return -1;
}

/* splitmix64 of the seed: a nonzero xorshift state for every seed. */
static void restart(void)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    state = z ? z : 0x2545F4914F6CDD1DULL;
}

void fk_exec_set(int m, int have_seed, uint64_t s)
{
    if (m >= 0)
        mode = m;
    if (have_seed)
        seed = s;
    restart();
}

void fk_exec_restart(void)
{
    restart();
}

static uint64_t next(void)
{
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1DULL;
}

void fk_exec_suffix(char *buf, size_t len)
{
    if (mode == FK_EXEC_EAGER)
        snprintf(buf, len, " [exec=eager]");
    else if (mode == FK_EXEC_RANDOM)
        snprintf(buf, len, " [exec=random:%llu]", (unsigned long long)seed);
}

static int ready(const struct fk_stream *s)
{
    const struct fk_op *op = s->head;
    if (!op)
        return 0;
    for (uint32_t i = 0; i < op->ndeps; i++)
        if (!fk_point_done(op->deps[i]))
            return 0;
    return 1;
}

/* One ready stream head, chosen at random; 0 when none is ready. */
static int run_random_head(void)
{
    size_t n = 0, pick;
    for (size_t i = 0; i < g.sids.cap; i++)
        if (g.sids.keys[i] && ready(g.sids.vals[i]))
            n++;
    if (n == 0)
        return 0;
    pick = (size_t)(next() % n);
    for (size_t i = 0; i < g.sids.cap; i++) {
        if (g.sids.keys[i] && ready(g.sids.vals[i]) && pick-- == 0) {
            fk_run_head(g.sids.vals[i]);
            return 1;
        }
    }
    return 0;
}

void fk_exec_after_call(void)
{
    if (mode == FK_EXEC_EAGER) {
        for (size_t i = 0; i < g.sids.cap; i++) {
            struct fk_stream *s = g.sids.keys[i] ? g.sids.vals[i] : NULL;
            if (s && s->done < s->queued)
                fk_run_to(s, s->queued); /* out of memory: runs later */
        }
    } else if (mode == FK_EXEC_RANDOM) {
        for (uint64_t steps = next() % 4; steps > 0 && run_random_head(); steps--)
            ;
    }
}
