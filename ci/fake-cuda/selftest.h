/* selftest.h - shared helpers of the fake driver's self-test (selftest*.c). */
#ifndef FAKE_CUDA_SELFTEST_H
#define FAKE_CUDA_SELFTEST_H

#include <stdint.h>
#include <string.h>

#include "fake.h"

#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

void st_check(int ok, const char *what, const char *file, int line);
void st_expect(CUresult got, CUresult want, const char *what, const char *file, int line);
#define CHECK(cond) st_check(!!(cond), #cond, __FILE__, __LINE__)
#define EXPECT(call, want) st_expect((call), (want), #call, __FILE__, __LINE__)

extern const char *st_dir; /* a directory for the test's files */
extern const char *st_self; /* this program, for the knob children */

CUmemoryPool st_pool(int dev);
uint64_t st_pool_attr(CUmemoryPool pool, int attr);
size_t st_free_bytes(void);
int st_contains(const char *haystack, const char *needle);
/* Expects a violation whose message holds `needle`, the sticky 700 after
 * it, and clears it (control reset). */
void st_violation(const char *needle, const char *file, int line);
#define VIOLATION(needle) st_violation((needle), __FILE__, __LINE__)

void st_orders(CUcontext ctx);
void st_modules(CUcontext ctx);
void st_limits(CUcontext ctx);
void st_faults(CUcontext ctx);
void st_contexts(CUcontext ctx);
int st_child(const char *which);
/* Runs `st_child(which)` in a process of its own with `knobs` (NULL-ended)
 * added to the environment: its exit status, or -1. */
int st_spawn(const char *which, const char *const *knobs);
void st_races(CUcontext ctx);
void st_copies2d(CUcontext ctx);
void st_exec(CUcontext ctx);
void st_exec_child(void);
int st_failures(void);
void st_children(void);

#endif
