/* races.h - races on device memory (races.c) and the execution modes
 * (exec.c); included by fake.h. */
#ifndef FAKE_CUDA_RACES_H
#define FAKE_CUDA_RACES_H

/* How an op uses device memory: a stand-in's `access` for each pointer. */
enum fk_access_mode { FK_READ = 1, FK_WRITE = 2, FK_RW = 3 };

/* Who accesses device memory: a queued op on stream `sid` ("h2d", "d2h",
 * "kernel" with the stand-in's name), or the host (sid 0) in a synchronous
 * copy (`op` its entry point). The strings must be static. */
struct fk_racer {
    uint32_t sid;
    const char *op;
    const char *name;
};
/* Reports a race (700) with an access of `a` not ordered before an op of
 * `clock`; then makes room for the op's fk_race_note calls. */
CUresult fk_race_check(struct fk_alloc *a, uint64_t ptr, uint64_t bytes, int mode,
                       const struct fk_vclock *clock, const struct fk_racer *who);
/* Makes room for `n` more fk_race_note calls (a 2D copy's rows). */
CUresult fk_race_reserve(struct fk_alloc *a, uint64_t n);
/* Records the access of the op queued at `at`, its stream's clock `clock`. */
void fk_race_note(struct fk_alloc *a, uint64_t ptr, uint64_t bytes, int mode, struct fk_point at,
                  const struct fk_vclock *clock, const struct fk_racer *who);
void fk_race_forget(struct fk_alloc *a);

enum fk_exec_mode { FK_EXEC_LAZY, FK_EXEC_EAGER, FK_EXEC_RANDOM };
int fk_exec_mode(const char *s, size_t len); /* the mode named, or -1 */
void fk_exec_set(int mode, int have_seed, uint64_t seed); /* mode -1: kept */
void fk_exec_restart(void);                  /* random: from the seed again */
void fk_exec_suffix(char *buf, size_t len);  /* the mode, for a violation */
void fk_exec_after_call(void);               /* from fk_leave */

#endif
