/* ptrmap.h: address -> dense index, open addressing, header-only (inline: it sits on the
 * collector hook's per-object path). Used by cycles/ (refcount accounting, edges restricted to the
 * garbage set) and allocator/ (addresses a trace allocates). Keys are compared, never
 * dereferenced. */
#ifndef TENSORGC_PTRMAP_H
#define TENSORGC_PTRMAP_H

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    const void **keys;
    uint32_t *vals;
    size_t mask;
} tgc_ptrmap;

static inline size_t
tgc_ptrmap__hash(const void *p, size_t mask)
{
    uintptr_t x = (uintptr_t)p >> 4;  /* objects are 16-byte aligned */
    x ^= x >> 33;
    x *= (uintptr_t)0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & mask;
}

static inline int
tgc_ptrmap_init(tgc_ptrmap *m, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2) {
        cap <<= 1;
    }
    m->keys = calloc(cap, sizeof(void *));
    m->vals = malloc(cap * sizeof(uint32_t));
    m->mask = cap - 1;
    if (m->keys == NULL || m->vals == NULL) {
        free(m->keys);
        free(m->vals);
        m->keys = NULL;
        m->vals = NULL;
        return -1;
    }
    return 0;
}

static inline void
tgc_ptrmap_free(tgc_ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
}

/* Inserts p -> v unless p is there; returns the index stored for p. */
static inline uint32_t
tgc_ptrmap_put(tgc_ptrmap *m, const void *p, uint32_t v)
{
    size_t i = tgc_ptrmap__hash(p, m->mask);
    while (m->keys[i] != NULL) {
        if (m->keys[i] == p) {
            return m->vals[i];
        }
        i = (i + 1) & m->mask;
    }
    m->keys[i] = p;
    m->vals[i] = v;
    return v;
}

static inline uint32_t
tgc_ptrmap_get(const tgc_ptrmap *m, const void *p)
{
    size_t i = tgc_ptrmap__hash(p, m->mask);
    while (m->keys[i] != NULL) {
        if (m->keys[i] == p) {
            return m->vals[i];
        }
        i = (i + 1) & m->mask;
    }
    return UINT32_MAX;
}

#ifdef Py_PYTHON_H  /* the Python half: for files that include Python.h first */
/* The tp_traverse visitor of every "do the references from inside the set explain each member's
 * refcount" check (cycles/free.c's freeing, split.c's seeded split, young.c's islands): arg is a tgc_ptrcount,
 * and each reference to a key of map adds one to counts[its index]. */
typedef struct {
    const tgc_ptrmap *map;
    uint32_t *counts;
} tgc_ptrcount;

static inline int
tgc_ptrcount_visit(PyObject *o, void *arg)
{
    const tgc_ptrcount *pc = arg;
    uint32_t j = tgc_ptrmap_get(pc->map, o);
    if (j != UINT32_MAX) {
        pc->counts[j]++;
    }
    return 0;
}
#endif

#endif /* TENSORGC_PTRMAP_H */
