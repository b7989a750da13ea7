/* reporter.h: what the files of reporter/ share: the reporter part of the module state (made by
 * binding.c at module exec) and the contracts of the MemReporter's walk (walk.c), of the index
 * of live tensors (index.c) and of the storage keys that checkpoint() and growth() compare
 * (storages.c). The line profiler's are in lineprof_py.h. Private to reporter/:
 * cycles/ never includes it; module.c sees only binding.h. Python.h comes first. */
#ifndef TGC_REPORTER_H
#define TGC_REPORTER_H

#include "tensorgc/compat.h"
#include "tensorgc/tensor.h"
#include "lineprof_py.h"

typedef struct tgc_reporter tgc_reporter;  /* also forward-declared in module/state.h */
struct tgc_reporter {
    tgc_tensor_state *tensor;  /* borrowed: the module state's tensor part (module.c) */
    /* Set in module exec (binding.c), released in m_clear; all of it is used with the GIL. */
    PyObject *gc_module;       /* new reference */
    PyObject *gc_callbacks;    /* the interpreter's gc.callbacks list */
    /* The tensor index (index.c): index_busy guards its gc callback against re-entry. */
    PyObject *index;           /* dict: tensor address -> weakref, NULL while off */
    PyObject *index_hook;      /* its gc.callbacks entry, a builtin bound to the module */
    int index_busy, index_stale;
    long index_freeze;         /* gc.get_freeze_count() when last checked */
    long index_promotions;     /* collections of generation >= 1 seen while on */
    /* Holds on the index (index.c): one per live tensorgc.Checkpoint, one per growth() call
     * running, one for a pytest session with the plugin on. index_auto: the index was turned on
     * for a hold (not by track_tensors), so the last release turns it off again. GIL. */
    Py_ssize_t index_holds;
    int index_auto;
    tgc_lineprof lineprof;     /* the line profiler (lineprof_py.h) */
};

/* walk.c: every live tensor object, and what a report needs of one. Each needs torch imported:
 * NULL with RuntimeError before. */
PyObject *tgc_walk_tensors(tgc_reporter *r);              /* new reference: list */
PyObject *tgc_walk_row(tgc_reporter *r, PyObject *t);     /* new reference: tuple */
PyObject *tgc_walk_rows(tgc_reporter *r, PyObject *tensors);  /* list in, new list out */

/* index.c: the opt-in index of live tensors. */
/* The index's gc.callbacks entry's body: phase and info as gc passes them (borrowed). Never
 * raises. */
void tgc_index_callback(tgc_reporter *r, PyObject *phase, PyObject *info);
/* The user's switch (track_tensors): on stays on whatever the holds do. 0, or -1 with an
 * exception; enabling is a no-op where the collector has no generations. */
int tgc_index_enable(tgc_reporter *r);
int tgc_index_disable(tgc_reporter *r);
/* A hold: the index stays on until the matching release, turned on now (one walk of the heap)
 * if it was off. 1 when it is on, 0 where the collector has no generations (the hold still
 * counts), -1 with an exception (nothing held). */
int tgc_index_hold(tgc_reporter *r);
/* Ends a hold; the last one turns off an index that a hold turned on. Extra releases are
 * ignored. 0, or -1 with an exception. */
int tgc_index_release(tgc_reporter *r);
PyObject *tgc_index_tensors(tgc_reporter *r);  /* new reference: list */

/* storages.c: the storages that tensors hold, as checkpoint() and growth() compare them. */
typedef struct {
    PyObject *type;  /* borrowed: the device type kept ("cuda"), NULL: every device */
    long index;      /* the device index kept, -1: any (a tensor without one counts as 0) */
} tgc_device_filter;
typedef struct {
    PyObject *keys;            /* new reference: list of (device str, data address, bytes) */
    PyObject *where;           /* new reference: list of int, the index in `tensors` of the
                                  tensor that claims each key; NULL without `before` */
    PyObject *table;           /* new reference: without `before`, the table of the keys, for
                                  later calls' `before` (bytes, devices); else NULL */
    Py_ssize_t matched;        /* keys found in `before` (and left out of keys) */
    unsigned long long nbytes; /* the listed keys' bytes, summed */
} tgc_storage_keys_result;
/* Every storage that the tensors of `tensors` (a list, borrowed; every item a tensor) hold on
 * the devices `f` keeps, once: the key of the first row MemReporter's _build would count it in,
 * in the list's order (a tensor's own storage, or each part of a sparse tensor or a wrapper
 * subclass; none for a tensor with no elements or on the meta device). `before` (borrowed): NULL,
 * a set or frozenset of keys, or a table an earlier call made of its keys; the keys in it are
 * counted in `matched` instead of listed (a table of another build is a ValueError). Reads a
 * plain tensor directly and any other through tgc_walk_row, subclass dispatch off. Needs torch
 * imported. 0 with `out` filled, or -1 with an exception and nothing to release. */
int tgc_storage_keys(tgc_reporter *r, PyObject *tensors, const tgc_device_filter *f,
                     PyObject *before, tgc_storage_keys_result *out);

#endif /* TGC_REPORTER_H */
