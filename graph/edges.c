/* edges.c: the reference graph of a set of objects, restricted to the set: one edge per
 * reference that tp_traverse reports (contract in include/tensorgc/edges.h). Shared by the cycle
 * detector's split (splitting the garbage before a report) and its reports' graphs. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>

#include "tensorgc/edges.h"

typedef struct {
    const tgc_ptrmap *map;
    uint32_t src;
    uint32_t *esrc, *edst;
    size_t m, cap;
    size_t first_cap;  /* the arrays' first size: small sets get small arrays */
    int oom;
} edges_ctx;

static int
edges__visit(PyObject *o, void *arg)
{
    edges_ctx *c = arg;
    uint32_t j = tgc_ptrmap_get(c->map, o);
    if (j == UINT32_MAX || c->oom) {
        return 0;
    }
    if (c->m == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : c->first_cap;
        uint32_t *s = realloc(c->esrc, cap * sizeof(uint32_t));
        if (s != NULL) {
            c->esrc = s;
        }
        uint32_t *d = s ? realloc(c->edst, cap * sizeof(uint32_t)) : NULL;
        if (d == NULL) {
            c->oom = 1;
            return 0;
        }
        c->edst = d;
        c->cap = cap;
    }
    c->esrc[c->m] = c->src;
    c->edst[c->m] = j;
    c->m++;
    return 0;
}

int
tgc_edges(PyObject *const *items, uint32_t n, tgc_ptrmap *map,
          uint32_t **src, uint32_t **dst, uint32_t *m)
{
    edges_ctx c = {0};
    *src = *dst = NULL;
    *m = 0;
    if (tgc_ptrmap_init(map, n) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        tgc_ptrmap_put(map, items[i], i);
    }
    c.map = map;
    /* About two references per object is typical; a report's few objects then need no regrowth
     * and no large-chunk allocation (which makes glibc consolidate its small free lists). */
    c.first_cap = n < 8 ? 16 : n < 512 ? (size_t)n * 2 : 1024;
    for (uint32_t i = 0; i < n && !c.oom; i++) {
        traverseproc trav = Py_TYPE(items[i])->tp_traverse;
        if (trav != NULL && PyObject_IS_GC(items[i])) {
            c.src = i;
            trav(items[i], edges__visit, &c);
        }
    }
    if (c.oom || c.m >= UINT32_MAX) {
        free(c.esrc);
        free(c.edst);
        tgc_ptrmap_free(map);
        PyErr_NoMemory();
        return -1;
    }
    *src = c.esrc;
    *dst = c.edst;
    *m = (uint32_t)c.m;
    return 0;
}
