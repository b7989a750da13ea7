/* edges.h: the contract of graph/edges.c, the references among a set of objects, found with
 * tp_traverse: the input of the graph algorithms (graph.h). The cycle detector calls it for the
 * split before a report (cycles/split.c) and for a report's graph (cycles/report_build.c,
 * cycles/report_objects.c).
 *
 * Inputs are borrowed and only read: items are the set; each one's tp_traverse is called once,
 * and nothing else runs (no Python code, no Python object made, no reference taken). Work: one
 * tp_traverse per item; memory: the map (about 2n slots) and one pair of uint32 per reference
 * that stays inside the set. Python.h comes first; GIL. */
#ifndef TENSORGC_EDGES_H
#define TENSORGC_EDGES_H

#include <stdint.h>

#include "tensorgc/ptrmap.h"

/* Fills *map (object address -> index in items; the caller frees it with tgc_ptrmap_free) and
 * malloc'd edge arrays (the caller frees them). Returns 0, or -1 with MemoryError set. */
int tgc_edges(PyObject *const *items, uint32_t n, tgc_ptrmap *map,
              uint32_t **src, uint32_t **dst, uint32_t *m);

#endif /* TENSORGC_EDGES_H */
