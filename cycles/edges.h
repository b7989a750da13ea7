/* edges.h: the contract of edges.c, the references among a set of objects, found with
 * tp_traverse: the input of the graph engine (include/tensorgc/graph.h) for reports and for the
 * hook's split. Python.h comes first; GIL. */
#ifndef TGC_EDGES_H
#define TGC_EDGES_H

#include "tensorgc/ptrmap.h"

/* Fills *map (object address -> index in items; the caller frees it with tgc_ptrmap_free) and
 * malloc'd edge arrays (the caller frees them). Returns 0, or -1 with MemoryError set. */
int tgc_edges(PyObject *const *items, uint32_t n, tgc_ptrmap *map,
              uint32_t **src, uint32_t **dst, uint32_t *m);

#endif /* TGC_EDGES_H */
