/* knobs.c - the CUBIE_FAKE_CUDA_* environment knobs, read at the first
 * successful cuInit, and the control entry points for tests. Unknown
 * CUBIE_FAKE_CUDA_* variables and malformed values make cuInit print what
 * is wrong and return CUDA_ERROR_INVALID_VALUE. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

extern char **environ;

#define PREFIX "CUBIE_FAKE_CUDA_"
#define MAX_DEVICES 64
#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

static int problems;

static void FK_PRINTF(1, 2) bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fake libcuda: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    problems++;
}

/* Decimal digits only, no sign, no overflow. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* A result code to fail with: 1 .. UINT_MAX. */
static int parse_code(const char *s, size_t len, CUresult *out)
{
    uint64_t v;
    if (parse_u64(s, len, &v) != 0 || v == 0 || v > UINT_MAX)
        return -1;
    *out = (CUresult)v;
    return 0;
}

/* "N:CODE" with N >= 1. */
static int parse_call(const char *s, uint64_t *n, CUresult *code)
{
    const char *colon = strchr(s, ':');
    if (!colon || parse_u64(s, (size_t)(colon - s), n) != 0 || *n == 0)
        return -1;
    return parse_code(colon + 1, strlen(colon + 1), code);
}

/* "NAME:CODE[,NAME:CODE...]", NAME an implemented entry point. */
static int parse_fail_list(const char *s, CUresult fail[FN_COUNT])
{
    if (*s == '\0')
        return -1;
    while (*s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *colon = memchr(s, ':', len);
        if (!colon)
            return -1;
        size_t nlen = (size_t)(colon - s);
        int fn = -1;
        for (int i = 0; i < FN_COUNT; i++)
            if (strlen(fk_fn_names[i]) == nlen && memcmp(fk_fn_names[i], s, nlen) == 0)
                fn = i;
        CUresult code;
        if (fn < 0 || parse_code(colon + 1, len - nlen - 1, &code) != 0)
            return -1;
        fail[fn] = code;
        if (!end)
            break;
        s = end + 1;
        if (*s == '\0')
            return -1;
    }
    return 0;
}

static int parse_double(const char *s, double *out, int zero_ok)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v) || v < 0 || (!zero_ok && v == 0))
        return -1;
    *out = v;
    return 0;
}

int fk_env_version(int *out)
{
    const char *v = getenv(PREFIX "VERSION");
    uint64_t n;
    if (!v) {
        *out = g.version;
        return 0;
    }
    if (parse_u64(v, strlen(v), &n) != 0 || n == 0 || n > INT_MAX) {
        fprintf(stderr, "fake libcuda: " PREFIX "VERSION=%s is not a positive integer\n", v);
        return -1;
    }
    *out = (int)n;
    return 0;
}

struct dev_knobs {
    const char *name;
    uint64_t total, free;
    int have_total, have_free;
};

struct knobs {
    uint64_t devices;
    struct dev_knobs dev[MAX_DEVICES];
    const char *no_pools, *version, *log, *violations, *pinned, *pageable, *kns;
    const char *fail_call, *fail, *oom, *jit;
    const char *exec, *seed;
};

static int is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && memcmp(name, want, len) == 0;
}

/* NAME_<i>, TOTAL_<i>, FREE_<i>: 0 when `name` is one of them (with `i`
 * below the device count), -1 when it is not one of them. */
static int device_knob(struct knobs *k, const char *name, size_t len, const char *val)
{
    static const char *const kinds[] = {"NAME_", "TOTAL_", "FREE_"};
    for (int kind = 0; kind < 3; kind++) {
        size_t kl = strlen(kinds[kind]);
        uint64_t i;
        if (len <= kl || memcmp(name, kinds[kind], kl) != 0)
            continue;
        if (parse_u64(name + kl, len - kl, &i) != 0 || (name[kl] == '0' && len - kl > 1))
            return -1;
        if (i >= k->devices) {
            bad(PREFIX "%.*s names device %llu, but there are %llu devices", (int)len, name,
                (unsigned long long)i, (unsigned long long)k->devices);
            return 0;
        }
        struct dev_knobs *d = &k->dev[i];
        if (kind == 0) {
            if (*val == '\0' || strlen(val) >= sizeof g.devs[0].name)
                bad(PREFIX "%.*s must be 1 to 255 characters", (int)len, name);
            d->name = val;
        } else {
            uint64_t v;
            if (parse_u64(val, strlen(val), &v) != 0 || v == 0) {
                bad(PREFIX "%.*s=%s is not a positive number of bytes", (int)len, name, val);
            } else if (kind == 1) {
                d->total = v;
                d->have_total = 1;
            } else {
                d->free = v;
                d->have_free = 1;
            }
        }
        return 0;
    }
    return -1;
}

static void collect(struct knobs *k)
{
    static const size_t plen = sizeof PREFIX - 1;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, PREFIX, plen) != 0)
            continue;
        const char *name = *e + plen, *eq = strchr(name, '=');
        if (!eq)
            continue;
        size_t len = (size_t)(eq - name);
        const char *val = eq + 1;
        if (is(name, len, "DEVICES"))
            continue; /* read first */
        else if (is(name, len, "NO_POOLS"))
            k->no_pools = val;
        else if (is(name, len, "VERSION"))
            k->version = val;
        else if (is(name, len, "LOG"))
            k->log = val;
        else if (is(name, len, "VIOLATIONS"))
            k->violations = val;
        else if (is(name, len, "PINNED_GBPS"))
            k->pinned = val;
        else if (is(name, len, "PAGEABLE_GBPS"))
            k->pageable = val;
        else if (is(name, len, "KERNEL_NS_PER_ELEMENT"))
            k->kns = val;
        else if (is(name, len, "FAIL_CALL"))
            k->fail_call = val;
        else if (is(name, len, "FAIL"))
            k->fail = val;
        else if (is(name, len, "OOM_ABOVE"))
            k->oom = val;
        else if (is(name, len, "EXEC"))
            k->exec = val;
        else if (is(name, len, "SEED"))
            k->seed = val;
        else if (is(name, len, "JIT_ERROR"))
            k->jit = val;
        else if (device_knob(k, name, len, val) != 0)
            bad("unknown knob " PREFIX "%.*s (see ci/fake-cuda/README.md)", (int)len, name);
    }
}

static int fail_call_consumed;

CUresult fk_knobs_load(void)
{
    static struct knobs k; /* under the lock */
    memset(&k, 0, sizeof k);
    problems = 0;
    k.devices = 2;
    const char *v = getenv(PREFIX "DEVICES");
    if (v && (parse_u64(v, strlen(v), &k.devices) != 0 || k.devices > MAX_DEVICES)) {
        bad(PREFIX "DEVICES=%s is not a number from 0 to %d", v, MAX_DEVICES);
        k.devices = 0;
    }
    collect(&k);

    int no_pools = 0, version = g.version;
    double pinned = g.pinned_gbps, pageable = g.pageable_gbps, kns = g.kernel_ns;
    uint64_t call_n = 0, oom = 0;
    CUresult call_code = 0, fail[FN_COUNT] = {0};
    if (k.no_pools) {
        if (strcmp(k.no_pools, "0") != 0 && strcmp(k.no_pools, "1") != 0)
            bad(PREFIX "NO_POOLS=%s must be 0 or 1", k.no_pools);
        no_pools = strcmp(k.no_pools, "1") == 0;
    }
    if (k.version && fk_env_version(&version) != 0)
        problems++;
    if (k.pinned && parse_double(k.pinned, &pinned, 0) != 0)
        bad(PREFIX "PINNED_GBPS=%s is not a positive number", k.pinned);
    if (k.pageable && parse_double(k.pageable, &pageable, 0) != 0)
        bad(PREFIX "PAGEABLE_GBPS=%s is not a positive number", k.pageable);
    if (k.kns && parse_double(k.kns, &kns, 1) != 0)
        bad(PREFIX "KERNEL_NS_PER_ELEMENT=%s is not a number >= 0", k.kns);
    if (k.fail && parse_fail_list(k.fail, fail) != 0)
        bad(PREFIX "FAIL=%s: want NAME:CODE[,NAME:CODE...], NAME an implemented entry point, "
                   "CODE a positive integer",
            k.fail);
    if (k.fail_call && !fail_call_consumed) {
        if (parse_call(k.fail_call, &call_n, &call_code) != 0)
            bad(PREFIX "FAIL_CALL=%s: want N:CODE, N and CODE positive integers", k.fail_call);
        else if (call_n < g.calls)
            bad(PREFIX "FAIL_CALL=%s: call %llu was made before cuInit read the knob",
                k.fail_call, (unsigned long long)call_n);
    }
    if (k.oom && parse_u64(k.oom, strlen(k.oom), &oom) != 0)
        bad(PREFIX "OOM_ABOVE=%s is not a number of bytes", k.oom);
    if (k.jit && *k.jit == '\0')
        bad(PREFIX "JIT_ERROR is empty");
    int exec = -1;
    uint64_t seed = 0;
    if (k.exec && (exec = fk_exec_mode(k.exec, strlen(k.exec))) < 0)
        bad(PREFIX "EXEC=%s must be lazy, eager or random", k.exec);
    if (k.seed && parse_u64(k.seed, strlen(k.seed), &seed) != 0)
        bad(PREFIX "SEED=%s is not a number", k.seed);
    if (k.log && *k.log == '\0')
        bad(PREFIX "LOG is empty");
    if (k.violations && *k.violations == '\0')
        bad(PREFIX "VIOLATIONS is empty");
    for (uint64_t i = 0; i < k.devices; i++) {
        struct dev_knobs *d = &k.dev[i];
        if (!d->have_total)
            d->total = i == 0 ? 4 * GIB : 2 * GIB;
        if (!d->have_free && d->total < 256 * MIB)
            bad(PREFIX "TOTAL_%llu is below 256 MiB: set " PREFIX "FREE_%llu too",
                (unsigned long long)i, (unsigned long long)i);
        else if (!d->have_free)
            d->free = d->total - 256 * MIB;
        if (d->free > d->total)
            bad(PREFIX "FREE_%llu exceeds the device's total memory", (unsigned long long)i);
    }
    if (problems) {
        fprintf(stderr, "fake libcuda: cuInit fails with CUDA_ERROR_INVALID_VALUE\n");
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (k.devices == 0)
        return CUDA_ERROR_NO_DEVICE;
    if (fail[FN_cuInit])
        return fail[FN_cuInit];
    if (k.fail_call && !fail_call_consumed && call_n == g.calls) {
        fail_call_consumed = 1;
        return call_code;
    }

    FILE *log = NULL;
    char *violations = NULL, *jit = NULL;
    if (k.log && !(log = fopen(k.log, "a"))) {
        fprintf(stderr, "fake libcuda: cannot open " PREFIX "LOG=%s: %s\n", k.log, strerror(errno));
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (k.violations) {
        FILE *f = fopen(k.violations, "a");
        if (!f) {
            fprintf(stderr, "fake libcuda: cannot open " PREFIX "VIOLATIONS=%s: %s\n",
                    k.violations, strerror(errno));
            if (log)
                fclose(log);
            return CUDA_ERROR_INVALID_VALUE;
        }
        fclose(f);
    }
    if ((k.violations && !(violations = strdup(k.violations))) || (k.jit && !(jit = strdup(k.jit))) ||
        fk_devices_create((int)k.devices) != CUDA_SUCCESS) {
        free(violations);
        free(jit);
        if (log)
            fclose(log);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (uint64_t i = 0; i < k.devices; i++) {
        struct fk_device *d = &g.devs[i];
        if (k.dev[i].name)
            snprintf(d->name, sizeof d->name, "%s", k.dev[i].name);
        else
            snprintf(d->name, sizeof d->name, "cubie fake device %llu", (unsigned long long)i);
        d->total = k.dev[i].total;
        d->free0 = k.dev[i].free;
    }
    /* The environment overrides what a control set before cuInit. */
    g.no_pools = no_pools;
    g.version = version;
    g.pinned_gbps = pinned;
    g.pageable_gbps = pageable;
    g.kernel_ns = kns;
    for (int i = 0; i < FN_COUNT; i++)
        if (fail[i])
            g.fail_code[i] = fail[i];
    if (k.fail_call && !fail_call_consumed) {
        g.fail_call_at = call_n;
        g.fail_call_code = call_code;
        fail_call_consumed = 1;
    }
    if (k.oom) {
        g.have_oom_above = 1;
        g.oom_above = oom;
    }
    if (jit) {
        free(g.jit_error);
        g.jit_error = jit;
    }
    if (log) {
        if (g.log)
            fclose(g.log);
        g.log = log;
    }
    if (violations) {
        free(g.violations_path);
        g.violations_path = violations;
    }
    if (k.exec || k.seed)
        fk_exec_set(exec, k.seed != NULL, seed);
    g.initialized = 1;
    return CUDA_SUCCESS;
}

/* ---- control entry points --------------------------------------------- */

static int starts(const char *s, const char *prefix, const char **rest)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0)
        return 0;
    *rest = s + n;
    return 1;
}

static int control(const char *cmd)
{
    const char *arg;
    if (strcmp(cmd, "reset") == 0) {
        fk_sticky_clear();
        g.violations = 0;
        g.last_violation[0] = '\0';
        fk_exec_restart();
        memset(g.fail_code, 0, sizeof g.fail_code);
        g.fail_call_at = 0;
        g.have_oom_above = 0;
        free(g.jit_error);
        g.jit_error = NULL;
        return 0;
    }
    if (starts(cmd, "fail=", &arg)) {
        CUresult fail[FN_COUNT] = {0};
        if (parse_fail_list(arg, fail) != 0)
            return -1;
        for (int i = 0; i < FN_COUNT; i++)
            if (fail[i])
                g.fail_code[i] = fail[i];
        return 0;
    }
    if (starts(cmd, "fail-call=", &arg)) {
        uint64_t n;
        CUresult code;
        if (parse_call(arg, &n, &code) != 0 || n > UINT64_MAX - g.calls)
            return -1;
        g.fail_call_at = g.calls + n;
        g.fail_call_code = code;
        return 0;
    }
    if (starts(cmd, "oom-above=", &arg)) {
        uint64_t b;
        if (parse_u64(arg, strlen(arg), &b) != 0)
            return -1;
        g.have_oom_above = 1;
        g.oom_above = b;
        return 0;
    }
    if (starts(cmd, "jit-error=", &arg)) {
        char *text = NULL;
        if (*arg && !(text = strdup(arg)))
            return -1;
        free(g.jit_error);
        g.jit_error = text;
        return 0;
    }
    if (starts(cmd, "exec=", &arg)) {
        const char *colon = strchr(arg, ':');
        size_t len = colon ? (size_t)(colon - arg) : strlen(arg);
        int mode = fk_exec_mode(arg, len);
        uint64_t seed = 0;
        if (mode < 0 || (colon && parse_u64(colon + 1, strlen(colon + 1), &seed) != 0))
            return -1;
        fk_exec_set(mode, colon != NULL, seed);
        return 0;
    }
    if (starts(cmd, "log=", &arg)) {
        FILE *f = NULL;
        if (*arg && !(f = fopen(arg, "a")))
            return -1;
        if (g.log)
            fclose(g.log);
        g.log = f;
        return 0;
    }
    return -1;
}

FK_API int cubieFakeCudaControl(const char *command)
{
    if (!command)
        return -1;
    pthread_mutex_lock(&g.lock);
    int r = control(command);
    pthread_mutex_unlock(&g.lock);
    return r;
}

FK_API unsigned long long cubieFakeCudaCalls(const char *name)
{
    unsigned long long n = 0;
    pthread_mutex_lock(&g.lock);
    for (int i = 0; name && i < FN_COUNT; i++)
        if (strcmp(fk_fn_names[i], name) == 0)
            n = g.fn_calls[i];
    pthread_mutex_unlock(&g.lock);
    return n;
}

FK_API unsigned long long cubieFakeCudaViolations(char *last, size_t len)
{
    pthread_mutex_lock(&g.lock);
    unsigned long long n = g.violations;
    if (last && len > 0)
        snprintf(last, len, "%s", g.last_violation);
    pthread_mutex_unlock(&g.lock);
    return n;
}
