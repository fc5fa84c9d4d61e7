/* launch.c - the launch limits of the fake's devices and kernels: the
 * device attributes a launch is checked against (grid, block, shared
 * memory), the function attributes (cuFuncGetAttribute, cuFuncSetAttribute:
 * the opt-in to more than 48 KiB of dynamic shared memory), the parameter
 * layout of the stand-ins (cuFuncGetParamInfo), the check each launch
 * passes before it is queued, and the local memory a launch reserves. */
#include <stdarg.h>

#include "fake.h"

enum {
    MAX_THREADS = 1024,
    MAX_BLOCK_X = 1024,
    MAX_BLOCK_Y = 1024,
    MAX_BLOCK_Z = 64,
    MAX_GRID_X = 2147483647,
    MAX_GRID_Y = 65535,
    MAX_GRID_Z = 65535,
    SHARED_OPTIN = 232448, /* 227 KiB, as on compute capability 9.0 */
    FUNC_MAX_THREADS_PER_BLOCK = 0,
    FUNC_SHARED_SIZE_BYTES = 1,
    FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

int fk_device_limit(int attrib, int *out)
{
    switch (attrib) {
    case 2: /* MAX_BLOCK_DIM_X */
        *out = MAX_BLOCK_X;
        return 1;
    case 3: /* MAX_BLOCK_DIM_Y */
        *out = MAX_BLOCK_Y;
        return 1;
    case 4: /* MAX_BLOCK_DIM_Z */
        *out = MAX_BLOCK_Z;
        return 1;
    case 5: /* MAX_GRID_DIM_X */
        *out = MAX_GRID_X;
        return 1;
    case 6: /* MAX_GRID_DIM_Y */
        *out = MAX_GRID_Y;
        return 1;
    case 7: /* MAX_GRID_DIM_Z */
        *out = MAX_GRID_Z;
        return 1;
    case 8: /* MAX_SHARED_MEMORY_PER_BLOCK */
        *out = FK_SHARED_DEFAULT;
        return 1;
    case 97: /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
        *out = SHARED_OPTIN;
        return 1;
    default:
        return 0;
    }
}

/* Says why a launch of `f` is refused; CUDA_ERROR_INVALID_VALUE. */
FK_PRINTF(2, 3) static CUresult refuse(const struct fk_function *f, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fake libcuda: cuLaunchKernel of %s refused: ", f->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult fk_launch_check(const struct fk_function *f, const struct fk_standin *k,
                         const unsigned grid[3], const unsigned block[3], unsigned shared,
                         void **params)
{
    static const unsigned max_grid[3] = {MAX_GRID_X, MAX_GRID_Y, MAX_GRID_Z};
    static const unsigned max_block[3] = {MAX_BLOCK_X, MAX_BLOCK_Y, MAX_BLOCK_Z};
    static const char axis[3] = {'x', 'y', 'z'};
    for (int i = 0; i < 3; i++) {
        if (grid[i] == 0 || grid[i] > max_grid[i])
            return refuse(f, "gridDim.%c = %u is outside 1..%u", axis[i], grid[i], max_grid[i]);
        if (block[i] == 0 || block[i] > max_block[i])
            return refuse(f, "blockDim.%c = %u is outside 1..%u", axis[i], block[i],
                          max_block[i]);
    }
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    if (threads > MAX_THREADS)
        return refuse(f, "%u x %u x %u = %llu threads per block exceed %d", block[0], block[1],
                      block[2], threads, MAX_THREADS);
    if (shared > (unsigned)f->max_dynamic_shared)
        return refuse(f, "%u bytes of dynamic shared memory exceed the kernel's %d "
                         "(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; cuFuncSetAttribute "
                         "raises it up to %d)",
                      shared, f->max_dynamic_shared, SHARED_OPTIN);
    if (k && k->nparams && !params)
        return refuse(f, "kernelParams is NULL, but the kernel takes %u parameters", k->nparams);
    for (unsigned i = 0; k && i < k->nparams; i++)
        if (!params[i])
            return refuse(f, "kernelParams[%u] (%s) is NULL: the kernel takes %u parameters "
                             "(too few arguments?)",
                          i, k->pnames[i], k->nparams);
    return CUDA_SUCCESS;
}

static CUresult function_of(CUfunction h, struct fk_function **out)
{
    struct fk_ctx *c;
    struct fk_obj *o;
    CUresult r = fk_current(&c);
    if (r == CUDA_SUCCESS && (r = fk_obj_get(h, FK_FUNCTION, c, &o)) == CUDA_SUCCESS)
        *out = (struct fk_function *)o;
    return r;
}

FK_API CUresult cuFuncGetAttribute(int *pi, int attrib, CUfunction hfunc)
{
    struct fk_function *f;
    CUresult r = fk_enter(FN_cuFuncGetAttribute);
    if (r == CUDA_SUCCESS && !pi)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = function_of(hfunc, &f)) == CUDA_SUCCESS) {
        switch (attrib) {
        case FUNC_MAX_THREADS_PER_BLOCK:
            *pi = MAX_THREADS;
            break;
        case FUNC_SHARED_SIZE_BYTES: /* the stand-ins have no static shared memory */
            *pi = 0;
            break;
        case FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            *pi = f->max_dynamic_shared;
            break;
        default:
            fprintf(stderr, "fake libcuda: cuFuncGetAttribute: attribute %d is not "
                            "implemented\n", attrib);
            r = CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value)
{
    struct fk_function *f;
    CUresult r = fk_enter(FN_cuFuncSetAttribute);
    if (r == CUDA_SUCCESS && (r = function_of(hfunc, &f)) == CUDA_SUCCESS) {
        if (attrib == FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES && value >= 0 && value <= SHARED_OPTIN) {
            f->max_dynamic_shared = value;
        } else if (attrib == FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
            fprintf(stderr, "fake libcuda: cuFuncSetAttribute of %s: %d bytes of dynamic shared "
                            "memory are outside 0..%d (MAX_SHARED_MEMORY_PER_BLOCK_OPTIN less "
                            "the kernel's static shared memory)\n",
                    f->name, value, SHARED_OPTIN);
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (attrib >= 0 && attrib < FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
            r = CUDA_ERROR_INVALID_VALUE; /* read-only */
        } else {
            fprintf(stderr, "fake libcuda: cuFuncSetAttribute: attribute %d is not "
                            "implemented\n", attrib);
            r = CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    return fk_leave(r);
}

FK_API CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                   size_t *paramSize)
{
    struct fk_function *f;
    CUresult r = fk_enter(FN_cuFuncGetParamInfo);
    if (r == CUDA_SUCCESS && !paramOffset)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = function_of(func, &f)) == CUDA_SUCCESS) {
        const struct fk_standin *k = fk_standin_find(f->name);
        if (!k) {
            fprintf(stderr, "fake libcuda: cuFuncGetParamInfo: kernel %s has no host stand-in, "
                            "so its parameters are not known (ci/fake-cuda/standins.c)\n",
                    f->name);
            r = CUDA_ERROR_NOT_SUPPORTED;
        } else if (paramIndex >= k->nparams) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            size_t offset = 0, size;
            for (size_t i = 0;; i++) { /* each parameter at its natural alignment */
                size = k->kinds[i] == FK_P_U32 ? 4 : 8;
                offset = (offset + size - 1) / size * size;
                if (i == paramIndex)
                    break;
                offset += size;
            }
            *paramOffset = offset;
            if (paramSize)
                *paramSize = size;
        }
    }
    return fk_leave(r);
}

/* Threads the device holds at once: attribute 16 (multiprocessors, 132)
 * times attribute 39 (threads per multiprocessor, 2048), as on an H100. */
#define RESIDENT_THREADS (132ULL * 2048ULL)

/* A kernel's local memory, as a GPU reserves it: per thread, for every
 * thread the device can hold at once, taken from the device's free memory
 * on the first launch that needs more than the context holds, and kept
 * until the context goes. When the device lacks it the launch fails with
 * CUDA_ERROR_OUT_OF_MEMORY (2) and nothing is queued. */
CUresult fk_launch_reserve_local(struct fk_ctx *c, const struct fk_standin *k)
{
    if (k->local_bytes == 0)
        return CUDA_SUCCESS;
    uint64_t needed = k->local_bytes > UINT64_MAX / RESIDENT_THREADS
                          ? UINT64_MAX
                          : k->local_bytes * RESIDENT_THREADS;
    if (needed <= c->local_reserved)
        return CUDA_SUCCESS;
    struct fk_device *d = &g.devs[c->dev];
    uint64_t grow = needed - c->local_reserved;
    uint64_t avail = d->free0 > d->taken ? d->free0 - d->taken : 0;
    if (grow > avail)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d->taken += grow;
    c->local_reserved = needed;
    return CUDA_SUCCESS;
}
