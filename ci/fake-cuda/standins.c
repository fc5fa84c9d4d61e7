/* standins.c - host stand-ins for kernels, found by the kernel's name.
 *
 * To add one: write its elements/bytes/run functions and a row in
 * `standins` with the parameter kinds in order (FK_P_PTR for a device
 * pointer, FK_P_U32, FK_P_U64, FK_P_F64) and, for each pointer, what the
 * kernel does with its bytes (FK_READ, FK_WRITE, FK_RW: races.c checks
 * them against other streams' accesses). Each pointer parameter's range
 * (`bytes`) must lie in a live allocation of the launch stream's device,
 * else the launch is a violation (illegal address). Built with
 * -ffp-contract=off: no fused multiply-add, so a stand-in's arithmetic
 * matches the same expression on the host bit for bit. */
#include <string.h>

#include "fake.h"

/* euler_decay(u64 y, u64 k, f64 dt, u32 n): for i < min(n, gridDimX *
 * blockDimX), y[i] = y[i] + dt * (-(k[i] * y[i])). */
static uint64_t euler_elements(const struct fk_kargs *a)
{
    return a->u[3] < a->threads_x ? a->u[3] : a->threads_x;
}

static uint64_t euler_bytes(const struct fk_kargs *a, unsigned param)
{
    (void)param;
    return euler_elements(a) * sizeof(double);
}

static void euler_run(const struct fk_kargs *a)
{
    unsigned char *y = (unsigned char *)(uintptr_t)a->u[0];
    const unsigned char *k = (const unsigned char *)(uintptr_t)a->u[1];
    double dt = a->f[2];
    uint64_t n = euler_elements(a);
    for (uint64_t i = 0; i < n; i++) {
        double yi, ki;
        memcpy(&yi, y + i * sizeof yi, sizeof yi);
        memcpy(&ki, k + i * sizeof ki, sizeof ki);
        yi = yi + dt * (-(ki * yi));
        memcpy(y + i * sizeof yi, &yi, sizeof yi);
    }
}

/* euler_decay_into(u64 out, u64 y, u64 k, f64 dt, u32 n): for i < min(n,
 * gridDimX * blockDimX), out[i] = y[i] + dt * (-(k[i] * y[i])); out is
 * only written. */
static uint64_t into_elements(const struct fk_kargs *a)
{
    return a->u[4] < a->threads_x ? a->u[4] : a->threads_x;
}

static uint64_t into_bytes(const struct fk_kargs *a, unsigned param)
{
    (void)param;
    return into_elements(a) * sizeof(double);
}

static void into_run(const struct fk_kargs *a)
{
    unsigned char *out = (unsigned char *)(uintptr_t)a->u[0];
    const unsigned char *y = (const unsigned char *)(uintptr_t)a->u[1];
    const unsigned char *k = (const unsigned char *)(uintptr_t)a->u[2];
    double dt = a->f[3];
    uint64_t n = into_elements(a);
    for (uint64_t i = 0; i < n; i++) {
        double yi, ki;
        memcpy(&yi, y + i * sizeof yi, sizeof yi);
        memcpy(&ki, k + i * sizeof ki, sizeof ki);
        yi = yi + dt * (-(ki * yi));
        memcpy(out + i * sizeof yi, &yi, sizeof yi);
    }
}

static const struct fk_standin standins[] = {
    {
        .name = "euler_decay",
        .nparams = 4,
        .kinds = {FK_P_PTR, FK_P_PTR, FK_P_F64, FK_P_U32},
        .access = {FK_RW, FK_READ},
        .pnames = {"y", "k", "dt", "n"},
        .elements = euler_elements,
        .bytes = euler_bytes,
        .run = euler_run,
    },
    {
        .name = "euler_decay_into",
        .nparams = 5,
        .kinds = {FK_P_PTR, FK_P_PTR, FK_P_PTR, FK_P_F64, FK_P_U32},
        .access = {FK_WRITE, FK_READ, FK_READ},
        .pnames = {"out", "y", "k", "dt", "n"},
        .elements = into_elements,
        .bytes = into_bytes,
        .run = into_run,
    },
    {
        /* euler_decay with 512 bytes of local memory a thread (a stack of
         * spilled registers): its first launch on a context reserves that
         * for every thread the device can hold at once. */
        .name = "euler_decay_local",
        .nparams = 4,
        .kinds = {FK_P_PTR, FK_P_PTR, FK_P_F64, FK_P_U32},
        .access = {FK_RW, FK_READ},
        .pnames = {"y", "k", "dt", "n"},
        .elements = euler_elements,
        .bytes = euler_bytes,
        .run = euler_run,
        .local_bytes = 512,
    },
};

const struct fk_standin *fk_standin_find(const char *name)
{
    for (size_t i = 0; i < sizeof standins / sizeof standins[0]; i++)
        if (strcmp(standins[i].name, name) == 0)
            return &standins[i];
    return NULL;
}
