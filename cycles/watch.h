/* watch.h: the contract of watch.c, the tensor watch: the collector itself counts the references
 * to tensors it follows, so that the sentinel (young.c) can tell a collection that met no tensor
 * and skip its walk. Python.h comes first. Everything here needs the GIL and runs no Python
 * code; nothing leaves an exception set unless it says so.
 *
 * A collection follows every reference of every object it examines before its garbage exists
 * (subtract_refs), asking _PyObject_IS_GC of each referenced object, which calls the type's
 * tp_is_gc when one is set (visit_decref, CPython 3.10-3.13). torch's tensor types leave that
 * slot empty; the watch sets it on every tensor type, TensorBase and each of its subclasses, to
 * a function that counts and answers 1, as an empty slot does. A subclass made later inherits
 * it (inherit_slots copies tp_is_gc). Each garbage object's refcount is all references from the
 * objects examined, so a garbage tensor, and a tensor referenced by garbage, was counted; when
 * the count did not move, no garbage is or references a tensor. Other callers of
 * _PyObject_IS_GC (sys.getsizeof, a dict deciding whether to track itself, other gc callbacks)
 * only add to the count, which can only make a walk run that was not needed.
 *
 * The sentinel's own type counts the same way (tgc_watch_own_is_gc): its pair always holds each
 * other, so a collection that counted fewer than two references to it is not one this reasoning
 * holds for (the interpreter asks elsewhere), and the walk runs.
 *
 * The slots stay once set, for the life of the process. Taking them off and putting them on
 * again would have to find every tensor type again each time (a pass over every tracked object,
 * below), and a class that the collector once found as garbage and a finalizer kept alive is no
 * longer among its base's __subclasses__: a slot kept is never missing. When any tensor type
 * already has a tp_is_gc of its own (another tool's), the watch changes nothing and stays off;
 * a subclass given a slot of its own later, by C code, is not noticed. */
#ifndef TGC_WATCH_H
#define TGC_WATCH_H

/* What the sentinel remembers of the watch when it is planted. */
typedef struct {
    size_t tensor_visits, own_visits;  /* the counts then */
    unsigned long epoch;               /* the watch that was on then; 0: it was off */
} tgc_watch_mark;

/* Puts the watch on torch's tensor types (tensor: TensorBase, borrowed), the first time; later
 * calls cost a comparison. 1 when it is on, 0 when it cannot be (a slot is someone else's, for
 * good; no memory, or the collector's lists unreadable: tried again next time). The first call
 * finds every tensor type: type.__subclasses__ from tensor down, and one pass over every list of
 * the collector (the frozen objects' too) for classes no longer among their base's subclasses;
 * O(tensor types + tracked objects), no gc object allocated during the pass. Only where young.c's
 * self-check passed (the pass reads the collector's lists). Every copy of tensorgc loaded in the
 * interpreter shares one watch (watch.c says how). */
int tgc_watch_on(PyTypeObject *tensor);
/* Records the counts now in *m, and the watch's epoch when watching (tgc_watch_on's 1), else 0. */
void tgc_watch_set_mark(tgc_watch_mark *m, int watching);
/* 1 when, since *m was set, the watch stayed on, the collector followed no reference to a tensor,
 * and at least two to the sentinel type's objects: the walk can be skipped. */
int tgc_watch_quiet(const tgc_watch_mark *m);
/* The references to objects of a type carrying the watch that were counted since *m was set (an
 * upper bound on those from the garbage, which tp_traverse of the garbage finds again); 0 when
 * the watch was off then or went off since. */
size_t tgc_watch_visits(const tgc_watch_mark *m);
/* The sentinel type's tp_is_gc: counts, answers 1. */
int tgc_watch_own_is_gc(PyObject *op);
/* The planter: a function the watch calls on each reference to a tensor it counts, before
 * counting it, with the argument given here and the tensor referenced (borrowed): young.c's
 * resident sentinel plants itself from it, inside the collection, the first time a collection
 * follows a reference to a tensor, and keeps that tensor as where its walk starts. It runs
 * inside the collector's passes: it may read and relink the collector's lists, and must run no
 * Python code, allocate no gc object and free nothing. One planter for every copy of tensorgc
 * in the interpreter: tgc_watch_planter_set returns 1 when fn/arg is now the planter, 0 when the
 * watch is off or another planter is set. tgc_watch_reset takes it off with the slots. */
typedef void (*tgc_watch_planter)(void *arg, PyObject *tensor);
int tgc_watch_planter_set(tgc_watch_planter fn, void *arg);
/* Whether fn/arg is the planter and the watch is on. */
int tgc_watch_planter_is(tgc_watch_planter fn, void *arg);
/* Takes fn/arg off when it is the planter. */
void tgc_watch_planter_clear(tgc_watch_planter fn, void *arg);
/* For tests only: gives every tensor type carrying the watch its empty slot back and forgets the
 * verdict, so that the next tgc_watch_on decides afresh; scan_lists: also the classes only the
 * collector's lists know (where young.c's self-check passed). 0, or -1 with MemoryError set. */
int tgc_watch_reset(PyTypeObject *tensor, int scan_lists);
/* Whether tp carries the watch (tests). */
int tgc_watch_on_type(PyTypeObject *tp);

#endif
