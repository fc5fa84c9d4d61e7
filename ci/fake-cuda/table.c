/* table.c - an open-addressing hash map from nonzero 64-bit keys to
 * pointers (linear probing, backward-shift deletion), for the handle and
 * stream-id tables. */
#include <stdlib.h>

#include "fake.h"

static size_t slot_of(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 17) & (cap - 1);
}

static int grow(struct fk_htab *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    if (cap < t->cap || cap > SIZE_MAX / sizeof(void *))
        return -1;
    uint64_t *keys = calloc(cap, sizeof *keys);
    void **vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->keys[i])
            continue;
        size_t j = slot_of(t->keys[i], cap);
        while (keys[j])
            j = (j + 1) & (cap - 1);
        keys[j] = t->keys[i];
        vals[j] = t->vals[i];
    }
    free(t->keys);
    free(t->vals);
    t->keys = keys;
    t->vals = vals;
    t->cap = cap;
    return 0;
}

int fk_htab_put(struct fk_htab *t, uint64_t key, void *val)
{
    if (key == 0)
        return -1;
    if ((t->len + 1) * 2 > t->cap && grow(t) != 0)
        return -1;
    size_t i = slot_of(key, t->cap);
    while (t->keys[i] && t->keys[i] != key)
        i = (i + 1) & (t->cap - 1);
    if (!t->keys[i])
        t->len++;
    t->keys[i] = key;
    t->vals[i] = val;
    return 0;
}

void *fk_htab_get(const struct fk_htab *t, uint64_t key)
{
    if (t->cap == 0 || key == 0)
        return NULL;
    for (size_t i = slot_of(key, t->cap); t->keys[i]; i = (i + 1) & (t->cap - 1))
        if (t->keys[i] == key)
            return t->vals[i];
    return NULL;
}

void *fk_htab_del(struct fk_htab *t, uint64_t key)
{
    if (t->cap == 0 || key == 0)
        return NULL;
    size_t mask = t->cap - 1, i = slot_of(key, t->cap);
    while (t->keys[i] && t->keys[i] != key)
        i = (i + 1) & mask;
    if (!t->keys[i])
        return NULL;
    void *val = t->vals[i];
    /* Backward shift: move later entries of the run into the hole when
     * their home slot does not lie cyclically in (hole, j]. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!t->keys[j])
            break;
        size_t home = slot_of(t->keys[j], t->cap);
        int keep = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (keep)
            continue;
        t->keys[hole] = t->keys[j];
        t->vals[hole] = t->vals[j];
        hole = j;
    }
    t->keys[hole] = 0;
    t->vals[hole] = NULL;
    t->len--;
    return val;
}

void fk_htab_free(struct fk_htab *t)
{
    free(t->keys);
    free(t->vals);
    t->keys = NULL;
    t->vals = NULL;
    t->cap = t->len = 0;
}
