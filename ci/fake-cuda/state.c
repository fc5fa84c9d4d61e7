/* state.c - the global state and its mutex, the entry and exit of every
 * call (call counting, fault knobs, the sticky error, cuInit required),
 * violations, error names, cuInit and cuDriverGetVersion. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

struct fk_global g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .version = 13050,
    .pinned_gbps = 25.0,
    .pageable_gbps = 10.0,
    .kernel_ns = 0.05,
    .next_id = 1,
    .next_sid = 1,
};

static const unsigned fn_flags[FN_COUNT] = {
#define FK_FLAGS(name, flags) flags,
    FK_FUNCTIONS(FK_FLAGS)
#undef FK_FLAGS
};

const char *const fk_fn_names[FN_COUNT] = {
#define FK_NAME(name, flags) #name,
    FK_FUNCTIONS(FK_NAME)
#undef FK_NAME
};

/* Takes the lock (fk_leave releases it) and counts the call; a result
 * other than CUDA_SUCCESS is the call's answer, given without doing
 * anything. The sticky error is the calling thread's current context's:
 * a violation in device 0's context leaves a thread with device 1's
 * context current working, and binding a thread to a context
 * (cuCtxGetCurrent/SetCurrent) is never refused, so that a thread can
 * leave a broken context for a working one. */
CUresult fk_enter(enum fk_fn fn)
{
    pthread_mutex_lock(&g.lock);
    g.calls++;
    g.fn_calls[fn]++;
    g.violation_in_call = 0;
    if (g.fail_call_at != 0 && g.calls == g.fail_call_at) {
        g.fail_call_at = 0;
        return g.fail_call_code;
    }
    if (g.fail_code[fn] != 0)
        return g.fail_code[fn];
    if (!(fn_flags[fn] & (FK_PURE | FK_BIND)) && fk_current_sticky())
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (!(fn_flags[fn] & (FK_PURE | FK_NOINIT)) && !g.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

/* Runs what the execution mode runs after a call (exec.c) and releases
 * the lock; a call that found a violation answers 700. */
CUresult fk_leave(CUresult r)
{
    if (g.violation_in_call) {
        g.violation_in_call = 0;
        r = CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    fk_exec_after_call();
    pthread_mutex_unlock(&g.lock);
    return r;
}

void fk_violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.last_violation, sizeof g.last_violation, fmt, ap);
    va_end(ap);
    size_t len = strlen(g.last_violation);
    fk_exec_suffix(g.last_violation + len, sizeof g.last_violation - len);
    fprintf(stderr, "fake libcuda: VIOLATION: %s\n", g.last_violation);
    if (g.violations_path) {
        FILE *f = fopen(g.violations_path, "a");
        if (f) {
            fprintf(f, "fake libcuda: VIOLATION: %s\n", g.last_violation);
            fclose(f);
        } else {
            fprintf(stderr, "fake libcuda: cannot append to CUBIE_FAKE_CUDA_VIOLATIONS=%s\n",
                    g.violations_path);
        }
    }
    g.violations++;
    fk_mark_sticky();
    g.violation_in_call = 1;
}

static const struct {
    CUresult code;
    const char *name, *text;
} codes[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static CUresult describe(CUresult error, const char **pStr, int name)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        if (codes[i].code == error) {
            *pStr = name ? codes[i].name : codes[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    CUresult r = fk_enter(FN_cuGetErrorString);
    if (r == CUDA_SUCCESS)
        r = describe(error, pStr, 0);
    return fk_leave(r);
}

FK_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    CUresult r = fk_enter(FN_cuGetErrorName);
    if (r == CUDA_SUCCESS)
        r = describe(error, pStr, 1);
    return fk_leave(r);
}

FK_API CUresult cuDriverGetVersion(int *driverVersion)
{
    CUresult r = fk_enter(FN_cuDriverGetVersion);
    if (r == CUDA_SUCCESS) {
        int version = g.version;
        if (!driverVersion)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!g.initialized && fk_env_version(&version) != 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *driverVersion = version;
    }
    return fk_leave(r);
}

FK_API CUresult cuInit(unsigned int Flags)
{
    CUresult r = fk_enter(FN_cuInit);
    if (r == CUDA_SUCCESS) {
        if (Flags != 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!g.initialized)
            r = fk_knobs_load();
    }
    return fk_leave(r);
}
