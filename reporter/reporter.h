/* reporter.h: what the files of reporter/ share: the reporter part of the module state (made by
 * binding.c at module exec) and the contracts of the MemReporter's walk (walk.c) and of the index
 * of live tensors (index.c). The line profiler's are in lineprof_py.h. Private to reporter/:
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
int tgc_index_enable(tgc_reporter *r);   /* 0, or -1 with an exception */
int tgc_index_disable(tgc_reporter *r);  /* 0, or -1 with an exception */
PyObject *tgc_index_tensors(tgc_reporter *r);  /* new reference: list */

#endif /* TGC_REPORTER_H */
