/* modules.c - PTX modules (checked for .version, .target and balanced braces;
 * a .version newer than the driver's CUDA version loads, a .target above the
 * device's compute capability; the names after .entry; 2 MiB of device
 * memory each while loaded), kernel lookup, and launches, which run host
 * stand-ins (standins.c) in stream order after the checks of launch.c. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

enum {
    JIT_INFO_LOG_BUFFER = 3,
    JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    JIT_ERROR_LOG_BUFFER = 5,
    JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    JIT_NUM_OPTIONS = 36,
    MAX_NAME = 1024,
    DEVICE_SM = 90, /* the compute capability cuDeviceGetAttribute reports, 9.0 */
};

/* What a module's directives declare: .version (major * 10 + minor) and the
 * sm_NN of .target, 0 when absent. */
struct ptx_info {
    int version, sm;
};

int fk_ptx_isa_max(int version)
{
    /* The PTX ISA release history: CUDA 11.x loads 7.x, 12.0..12.5 8.0..8.5,
     * 12.6 8.5, 12.7 8.6, 12.8 8.7, 12.9 8.8, 13.x 9.x (known to 13.1,
     * assumed after it). */
    static const int cuda12[10] = {80, 81, 82, 83, 84, 85, 85, 86, 87, 88};
    int major = version / 1000, minor = version % 1000 / 10;
    if (major == 11)
        return 70 + minor;
    if (major == 12)
        return cuda12[minor];
    if (major == 13)
        return 90 + minor;
    return 0;
}

/* The decimal number at *p (at most 4 digits), advancing past it; -1 when none. */
static int number(const char **p)
{
    int n = -1;
    for (int digits = 0; **p >= '0' && **p <= '9' && digits < 4; digits++, (*p)++)
        n = (n < 0 ? 0 : n * 10) + (**p - '0');
    return n;
}

struct names {
    char **v;
    uint32_t n, cap;
};

static void names_free(struct names *ns)
{
    for (uint32_t i = 0; i < ns->n; i++)
        free(ns->v[i]);
    free(ns->v);
}

static int ident(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '$' || ch == '%';
}

static const char *skip_blank(const char *p)
{
    for (;;) {
        if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') {
            p++;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n')
                p++;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end ? end + 2 : p + strlen(p);
        } else {
            return p;
        }
    }
}

/* Scans the PTX text outside comments and strings: whether it has the
 * .version and .target directives and balanced braces, and the kernel
 * names. 0, or an error message for the log (-1 with `err` empty: out of
 * memory). */
static int parse_ptx(const char *p, struct names *ns, struct ptx_info *info, char *err,
                     size_t errlen)
{
    int version = 0, target = 0;
    long depth = 0;
    err[0] = '\0';
    for (p = skip_blank(p); *p; p = skip_blank(p)) {
        if (*p == '"') {
            const char *end = strchr(p + 1, '"');
            p = end ? end + 1 : p + strlen(p);
            continue;
        }
        if (*p == '{' || *p == '}') {
            depth += *p == '{' ? 1 : -1;
            if (depth < 0) {
                snprintf(err, errlen, "ptxas fatal   : syntax error: '}' without '{' (fake libcuda)");
                return -1;
            }
            p++;
            continue;
        }
        if (*p != '.' || !ident(p[1])) {
            const char *start = p;
            while (ident(*p))
                p++;
            if (p == start)
                p++;
            continue;
        }
        const char *tok = p++;
        while (ident(*p))
            p++;
        size_t len = (size_t)(p - tok);
        if (len == 8 && memcmp(tok, ".version", 8) == 0) {
            version = 1;
            p = skip_blank(p);
            int major = number(&p), minor = *p == '.' ? (p++, number(&p)) : 0;
            info->version = major < 0 ? 0 : major * 10 + (minor > 9 ? 9 : minor < 0 ? 0 : minor);
        } else if (len == 7 && memcmp(tok, ".target", 7) == 0) {
            target = 1;
            p = skip_blank(p);
            if (strncmp(p, "sm_", 3) == 0) {
                p += 3;
                int sm = number(&p);
                info->sm = sm < 0 ? 0 : sm;
            }
        }
        if (len != 6 || memcmp(tok, ".entry", 6) != 0)
            continue;
        p = skip_blank(p);
        const char *name = p;
        while (ident(*p))
            p++;
        size_t nlen = (size_t)(p - name);
        if (nlen == 0 || nlen >= MAX_NAME) {
            snprintf(err, errlen, "ptxas fatal   : .entry without a kernel name (or over %d "
                                  "characters)", MAX_NAME - 1);
            return -1;
        }
        for (uint32_t i = 0; i < ns->n; i++) {
            if (strlen(ns->v[i]) == nlen && memcmp(ns->v[i], name, nlen) == 0) {
                snprintf(err, errlen, "ptxas fatal   : duplicate definition of function '%.*s'",
                         (int)nlen, name);
                return -1;
            }
        }
        if (ns->n == ns->cap) {
            uint32_t cap = ns->cap ? ns->cap * 2 : 4;
            char **v = cap > ns->cap ? realloc(ns->v, (size_t)cap * sizeof *v) : NULL;
            if (!v)
                return -1;
            ns->v = v;
            ns->cap = cap;
        }
        char *copy = malloc(nlen + 1);
        if (!copy)
            return -1;
        memcpy(copy, name, nlen);
        copy[nlen] = '\0';
        ns->v[ns->n++] = copy;
    }
    if (!version || !target) {
        snprintf(err, errlen, "ptxas fatal   : the PTX has no %s directive (fake libcuda)",
                 !version ? ".version" : ".target");
        return -1;
    }
    if (depth != 0) {
        snprintf(err, errlen, "ptxas fatal   : syntax error at end of input: %ld '{' not closed "
                              "(fake libcuda)", depth);
        return -1;
    }
    return 0;
}

/* Writes `text` into a log buffer of `size` bytes; the bytes written, NUL included. */
static unsigned write_log(char *buf, unsigned size, const char *text)
{
    if (!buf || size == 0)
        return 0;
    size_t len = strlen(text);
    if (len > size - 1)
        len = size - 1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    return (unsigned)len + 1;
}

void fk_function_free(struct fk_function *f)
{
    free(f->name);
    free(f);
}

void fk_module_free(struct fk_module *m)
{
    free(m->funcs);
    free(m);
}

/* Unregisters, unlinks and frees the module and its functions. */
static void module_drop(struct fk_module *m)
{
    for (uint32_t i = 0; i < m->nfuncs; i++) {
        fk_obj_unregister(&m->funcs[i]->o);
        fk_obj_unlink(&m->funcs[i]->o);
        fk_function_free(m->funcs[i]);
    }
    fk_obj_unregister(&m->o);
    fk_obj_unlink(&m->o);
    fk_module_free(m);
}

static CUresult module_new(struct fk_ctx *c, struct names *ns, struct fk_module **out)
{
    struct fk_module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fk_obj_register(&m->o, FK_MODULE, c) != CUDA_SUCCESS) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (ns->n && !(m->funcs = calloc(ns->n, sizeof *m->funcs))) {
        module_drop(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < ns->n; i++) {
        struct fk_function *f = calloc(1, sizeof *f);
        if (!f || fk_obj_register(&f->o, FK_FUNCTION, c) != CUDA_SUCCESS) {
            free(f);
            module_drop(m);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        f->module = m;
        f->max_dynamic_shared = FK_SHARED_DEFAULT;
        f->name = ns->v[i]; /* taken over */
        ns->v[i] = NULL;
        m->funcs[m->nfuncs++] = f;
    }
    *out = m;
    return CUDA_SUCCESS;
}

static CUresult load(CUmodule *module, const char *image, unsigned numOptions,
                     const CUjit_option *options, void **values)
{
    struct fk_ctx *c;
    char *elog = NULL, *ilog = NULL;
    unsigned esize = 0, isize = 0, esize_at = 0, isize_at = 0;
    int has_esize = 0, has_isize = 0;
    CUresult r;
    if (!module || !image || (numOptions > 0 && (!options || !values)))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numOptions; i++) {
        switch (options[i]) {
        case JIT_ERROR_LOG_BUFFER:
            elog = values[i];
            break;
        case JIT_ERROR_LOG_BUFFER_SIZE_BYTES: /* an unsigned int in the pointer's bits */
            esize = (unsigned)(uintptr_t)values[i];
            esize_at = i;
            has_esize = 1;
            break;
        case JIT_INFO_LOG_BUFFER:
            ilog = values[i];
            break;
        case JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            isize = (unsigned)(uintptr_t)values[i];
            isize_at = i;
            has_isize = 1;
            break;
        default:
            if (options[i] < 0 || options[i] >= JIT_NUM_OPTIONS)
                return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if ((r = fk_current(&c)) != CUDA_SUCCESS)
        return r;
    if (!has_esize)
        elog = NULL;
    if (!has_isize)
        ilog = NULL;
    unsigned ewritten = write_log(elog, esize, ""), iwritten = write_log(ilog, isize, "");
    struct names ns = {0};
    struct ptx_info info = {0};
    struct fk_device *d = &g.devs[c->dev];
    char err[2048];
    const unsigned char *u = (const unsigned char *)image;
    if ((u[0] == 0x7f && u[1] == 'E' && u[2] == 'L' && u[3] == 'F') ||
        (u[0] == 0x50 && u[1] == 0xED && u[2] == 0x55 && u[3] == 0xBA)) {
        fprintf(stderr, "fake libcuda: cuModuleLoadDataEx: only PTX text is implemented, not "
                        "cubin or fatbin images\n");
        r = CUDA_ERROR_NOT_SUPPORTED;
    } else if (g.jit_error) {
        ewritten = write_log(elog, esize, g.jit_error);
        r = CUDA_ERROR_INVALID_PTX;
    } else if (parse_ptx(image, &ns, &info, err, sizeof err) != 0) {
        if (err[0]) {
            ewritten = write_log(elog, esize, err);
            r = CUDA_ERROR_INVALID_PTX;
        } else {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if (fk_ptx_isa_max(g.version) && info.version > fk_ptx_isa_max(g.version)) {
        int max = fk_ptx_isa_max(g.version);
        snprintf(err, sizeof err, "ptxas fatal   : Unsupported .version %d.%d; current version "
                                  "is '%d.%d' (fake libcuda)",
                 info.version / 10, info.version % 10, max / 10, max % 10);
        ewritten = write_log(elog, esize, err);
        r = CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    } else if (info.sm > DEVICE_SM) {
        ewritten = write_log(elog, esize, "ptxas fatal   : SM version specified by .target is "
                                          "higher than default SM version assumed (fake libcuda)");
        r = CUDA_ERROR_INVALID_PTX;
    } else if (d->free0 < d->taken || d->free0 - d->taken < FK_MODULE_BYTES) {
        r = CUDA_ERROR_OUT_OF_MEMORY; /* the module's code and data need device memory */
    } else {
        struct fk_module *m;
        if ((r = module_new(c, &ns, &m)) == CUDA_SUCCESS) {
            d->taken += FK_MODULE_BYTES;
            *module = fk_handle(&m->o);
        }
    }
    names_free(&ns);
    if (has_esize)
        values[esize_at] = (void *)(uintptr_t)ewritten;
    if (has_isize)
        values[isize_at] = (void *)(uintptr_t)iwritten;
    return r;
}

FK_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                   CUjit_option *options, void **optionValues)
{
    CUresult r = fk_enter(FN_cuModuleLoadDataEx);
    if (r == CUDA_SUCCESS)
        r = load(module, image, numOptions, options, optionValues);
    return fk_leave(r);
}

/* cuModuleLoadDataEx without options (cudarc loads modules so). */
FK_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUresult r = fk_enter(FN_cuModuleLoadData);
    if (r == CUDA_SUCCESS)
        r = load(module, image, 0, NULL, NULL);
    return fk_leave(r);
}

FK_API CUresult cuModuleUnload(CUmodule hmod)
{
    struct fk_ctx *c;
    struct fk_obj *o;
    CUresult r = fk_enter(FN_cuModuleUnload);
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS &&
        (r = fk_obj_get(hmod, FK_MODULE, c, &o)) == CUDA_SUCCESS) {
        struct fk_module *m = (struct fk_module *)o;
        if (m->pending > 0) {
            fk_violation("module unloaded while %llu launches of its kernels have not executed",
                         (unsigned long long)m->pending);
        } else {
            g.devs[c->dev].taken -= FK_MODULE_BYTES;
            module_drop(m);
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    struct fk_ctx *c;
    struct fk_obj *o;
    CUresult r = fk_enter(FN_cuModuleGetFunction);
    if (r == CUDA_SUCCESS && (!hfunc || !name))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = fk_current(&c)) == CUDA_SUCCESS &&
        (r = fk_obj_get(hmod, FK_MODULE, c, &o)) == CUDA_SUCCESS) {
        struct fk_module *m = (struct fk_module *)o;
        r = CUDA_ERROR_NOT_FOUND;
        for (uint32_t i = 0; i < m->nfuncs; i++) {
            if (strcmp(m->funcs[i]->name, name) == 0) {
                *hfunc = fk_handle(&m->funcs[i]->o);
                r = CUDA_SUCCESS;
                break;
            }
        }
    }
    return fk_leave(r);
}

static CUresult launch(CUfunction hf, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, CUstream hStream, void **params, void **extra)
{
    struct fk_ctx *c;
    struct fk_obj *o;
    struct fk_stream *s;
    struct fk_queue q;
    struct fk_alloc *allocs[FK_MAX_PARAMS] = {0};
    CUresult r;
    if ((r = fk_current(&c)) != CUDA_SUCCESS || (r = fk_obj_get(hf, FK_FUNCTION, c, &o)) != CUDA_SUCCESS ||
        (r = fk_stream_get(hStream, c, &s)) != CUDA_SUCCESS)
        return r;
    struct fk_function *f = (struct fk_function *)o;
    const struct fk_standin *k = fk_standin_find(f->name);
    if (extra)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fk_launch_check(f, k, grid, block, shared, params)) != CUDA_SUCCESS)
        return r;
    if (!k) {
        fprintf(stderr, "fake libcuda: kernel %s has no host stand-in (add one to "
                        "ci/fake-cuda/standins.c)\n", f->name);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    struct fk_kargs args = {.threads_x = (uint64_t)grid[0] * block[0]};
    if (k->nparams && !params)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < k->nparams; i++) {
        if (!params[i])
            return CUDA_ERROR_INVALID_VALUE;
        uint32_t v32;
        switch (k->kinds[i]) {
        case FK_P_U32:
            memcpy(&v32, params[i], sizeof v32);
            args.u[i] = v32;
            break;
        case FK_P_F64:
            memcpy(&args.f[i], params[i], sizeof args.f[i]);
            break;
        default: /* pointers and u64: copied at once, as the driver does */
            memcpy(&args.u[i], params[i], sizeof args.u[i]);
        }
    }
    if ((r = fk_launch_reserve_local(c, k)) != CUDA_SUCCESS ||
        (r = fk_q_begin(&q, s)) != CUDA_SUCCESS)
        return r;
    char who[64];
    snprintf(who, sizeof who, "stream %u (kernel %s)", s->sid, f->name);
    unsigned first_ptr = k->nparams;
    for (unsigned i = 0; i < k->nparams && r == CUDA_SUCCESS; i++) {
        uint64_t bytes;
        if (k->kinds[i] != FK_P_PTR || (bytes = k->bytes(&args, i)) == 0)
            continue;
        if (first_ptr == k->nparams)
            first_ptr = i;
        r = bytes > SIZE_MAX ? CUDA_ERROR_INVALID_VALUE
                             : fk_mem_check(args.u[i], (size_t)bytes, c->dev, &q.clock, who,
                                            &allocs[i]);
        if (r == CUDA_ERROR_INVALID_VALUE && bytes <= SIZE_MAX && !fk_alloc_find(args.u[i])) {
            /* Unified addressing: a kernel reads and writes page-locked host
             * memory in place, through its host address; no copy in flight
             * may touch those bytes unordered. */
            const void *host = (const void *)(uintptr_t)args.u[i];
            struct fk_pinned *pb = NULL;
            if (fk_pinned_find(host, (size_t)bytes, &pb) == CUDA_SUCCESS && pb)
                r = fk_pinned_check(pb, host, (size_t)bytes, 1, &q.clock, who);
        }
        if (r == CUDA_ERROR_INVALID_VALUE) {
            fk_violation("kernel %s on stream %u: parameter %s = 0x%llx (+%llu bytes) is not "
                         "inside a live allocation of device %d (illegal address)",
                         f->name, s->sid, k->pnames[i], (unsigned long long)args.u[i],
                         (unsigned long long)bytes, c->dev);
            r = CUDA_ERROR_ILLEGAL_ADDRESS;
        } else if (r == CUDA_SUCCESS && allocs[i]) {
            const struct fk_racer racer = {s->sid, "kernel", k->name};
            if ((r = fk_race_check(allocs[i], args.u[i], bytes, k->access[i], &q.clock,
                                   &racer)) == CUDA_SUCCESS)
                r = fk_alloc_reserve_use(allocs[i]);
        }
    }
    struct fk_op *op = NULL;
    if (r == CUDA_SUCCESS && !(op = calloc(1, sizeof *op)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        fk_q_abort(&q);
        return r;
    }
    op->kind = OP_KERNEL;
    op->kernel = k;
    op->module = f->module;
    op->args = args;
    uint64_t elements = k->elements(&args);
    struct fk_qlog lg = {.kind = "kernel", .name = f->name};
    if (first_ptr < k->nparams) {
        lg.has_ptr = 1;
        lg.ptr = args.u[first_ptr];
        lg.bytes = k->bytes(&args, first_ptr);
    }
    fk_q_commit(&q, op, FK_ENG_COMPUTE, 2000.0 + g.kernel_ns * (double)elements, &lg);
    f->module->pending++;
    for (unsigned i = 0; i < k->nparams; i++) {
        if (allocs[i]) {
            struct fk_point at = {s->sid, op->seq};
            const struct fk_racer racer = {s->sid, "kernel", k->name};
            fk_alloc_note_use(allocs[i], at);
            fk_race_note(allocs[i], args.u[i], k->bytes(&args, i), k->access[i], at, &s->clock,
                         &racer);
        }
    }
    return CUDA_SUCCESS;
}

FK_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                               void **extra)
{
    const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
    const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
    CUresult r = fk_enter(FN_cuLaunchKernel);
    if (r == CUDA_SUCCESS)
        r = launch(f, grid, block, sharedMemBytes, hStream, kernelParams, extra);
    return fk_leave(r);
}
