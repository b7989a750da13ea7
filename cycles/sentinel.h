/* sentinel.h: the sentinel's pair, shared by young.c (its type, walk and finalizer) and
 * resident.c (the resident sentinel's spare and planter); nothing else includes it. Python.h,
 * young.h and watch.h come first. Everything here needs the GIL. */
#ifndef TGC_SENTINEL_H
#define TGC_SENTINEL_H

/* Two objects of this type, each holding the other, planted at the front of the list the
 * collection examines (young.h's tgc_young_plant). Nothing else references them, so the collector
 * finds them first among its garbage, and finalize_garbage calls the first one's tp_finalize
 * before any other finalizer: the second one then heads what is left of the garbage list, its
 * _gc_prev the list's head. The pair is freed with the rest of the garbage. */
typedef struct young_sentinel_s {
    PyObject_HEAD
    PyObject *peer;              /* new reference: the other one; NULL once cleared */
    int first;                   /* the one whose finalizer looks */
    PyTypeObject *tensor;        /* borrowed: torch's tensor base type (first only) */
    tgc_young_catch catch;       /* first only; NULL once it ran */
    void *arg;
    tgc_watch_mark watch;        /* first only: the tensor watch when it was planted */
    int resident;                /* first only: planted by the watch (young.h's resident sentinel) */
    void (*done)(struct young_sentinel_s *self);  /* first, resident only: after the walk */
    PyObject *hint;              /* first, resident only: new reference, or NULL: the tensor
                                  * the collection followed a reference to when it planted the
                                  * pair; the walk starts beside it when it is garbage. Held
                                  * from inside the collector's first pass to the pair's
                                  * finalizer, before the collector reads refcounts again, so
                                  * that a weakref callback run meanwhile cannot free it under
                                  * us (a live one is freed after the walk instead: young.h) */
} young_sentinel;

/* Whether the pair's type is ready (young.c readies it at module exec). */
int tgc_sentinel_type_ready(void);
/* A new pair, untracked: a holding b and b holding a (a, a new reference), or NULL with no
 * exception left set. */
young_sentinel *tgc_sentinel_pair_new(void);
/* Breaks up the pair whose first is a (borrowed: the caller's reference keeps it alive). */
void tgc_sentinel_break(young_sentinel *a);

#endif
