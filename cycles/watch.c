/* watch.c: the tensor watch (contract and reasoning in watch.h): a counting tp_is_gc on torch's
 * tensor types, put on with the first sentinel and kept for the life of the process. Built with
 * Py_BUILD_CORE for gclists.h, like young.c: finding every tensor type takes one pass over the
 * collector's lists. */
#define Py_BUILD_CORE 1
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "gclists.h"

#include "watch.h"

/* What every copy of tensorgc in the interpreter shares (a test or a benchmark may load several
 * builds side by side): the first one to put the watch on publishes its own in the interpreter's
 * dict (PyInterpreterState_GetDict) under WATCH_KEY, the others find it there and read its
 * counts, and a slot holding its is_gc is the watch's, not another tool's. Its code stays loaded
 * (extension modules are never unloaded), so the pointers stay good. A copy whose struct differs
 * uses another key and sees the slots as someone else's. */
#define WATCH_KEY "tensorgc.tensor_watch.3"
typedef struct {
    inquiry is_gc;          /* the slot it sets */
    size_t tensor_visits;   /* what is_gc counts */
    int state;              /* 0: not tried yet; 1: on; -1: refused (a slot of another's) */
    unsigned long epoch;    /* changes whenever the watch goes on (or, in tests, off) */
    tgc_watch_planter plant;  /* called before each count, NULL when none (tgc_watch_planter_set) */
    void *plant_arg;
} watch_shared;

/* All protected by the GIL (the collector, and every other caller of tp_is_gc, hold it). */
static watch_shared watch_own;      /* this copy's, published or not */
static watch_shared *watch;         /* the one in use: this copy's or another's, NULL until found */
static size_t watch_own_visits;     /* the sentinel type's (this copy's own) */

static int
watch__tensor_is_gc(PyObject *op)
{
    if (watch_own.plant != NULL) {
        watch_own.plant(watch_own.plant_arg, op);  /* first: a mark it takes counts this visit */
    }
    watch_own.tensor_visits++;
    return 1;
}

int
tgc_watch_own_is_gc(PyObject *op)
{
    (void)op;
    watch_own_visits++;
    return 1;
}

/* The watch every copy uses: published by this copy, or by the first copy that needed one.
 * NULL without memory (no exception left set). */
static watch_shared *
watch__find(void)
{
    if (watch != NULL) {
        return watch;
    }
    PyObject *dict = PyInterpreterState_GetDict(PyInterpreterState_Get());  /* borrowed */
    if (dict == NULL) {
        return NULL;
    }
    PyObject *cap = PyDict_GetItemString(dict, WATCH_KEY);  /* borrowed */
    if (cap != NULL) {
        watch = PyCapsule_GetPointer(cap, WATCH_KEY);
        PyErr_Clear();
        return watch;
    }
    watch_own.is_gc = watch__tensor_is_gc;
    cap = PyCapsule_New(&watch_own, WATCH_KEY, NULL);  /* new reference */
    if (cap == NULL || PyDict_SetItemString(dict, WATCH_KEY, cap) < 0) {
        Py_XDECREF(cap);
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(cap);
    return watch = &watch_own;
}

#if TGC_HAVE_YOUNG_SCAN
/* Appends to `all` every type object in the collector's list at head that is a subclass of
 * tensor. Allocates no gc object (only the list's own array grows), so no collection can start
 * and no list changes while it walks. 0, or -1 without memory. */
static int
watch__scan_list(tgc_gc_node *head, PyTypeObject *tensor, PyObject *all)
{
    for (tgc_gc_node *g = tgc_gc_next(head); g != head; g = tgc_gc_next(g)) {
        PyObject *op = tgc_gc_object(g);
        if (PyType_Check(op) && PyType_IsSubtype((PyTypeObject *)op, tensor) &&
            PyList_Append(all, op) < 0) {
            return -1;
        }
    }
    return 0;
}
#endif

/* Every tensor type (tensor and its subclasses), as a new list (duplicates possible), or NULL
 * without an exception set. type.__subclasses__ finds the static ones; a class the collector
 * once found as garbage that a finalizer kept alive, or that gc.DEBUG_SAVEALL keeps in
 * gc.garbage, is no longer among its base's subclasses (the collector cleared that weak
 * reference), so every list of the collector, the frozen objects' too, is read as well (heap
 * types are always tracked). Runs no Python code. O(tensor types + tracked objects). */
static PyObject *
watch__tensor_types(PyTypeObject *tensor, int scan_lists)
{
    PyObject *all = PyList_New(0);  /* new reference */
    if (all == NULL || PyList_Append(all, (PyObject *)tensor) < 0) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        /* type.__subclasses__(t), not t.__subclasses__(): no metaclass's lookup runs */
        PyObject *subs = PyObject_CallMethod((PyObject *)&PyType_Type, "__subclasses__", "O",
                                             PyList_GET_ITEM(all, i));  /* new reference */
        if (subs == NULL || !PyList_Check(subs)) {
            Py_XDECREF(subs);
            goto error;
        }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(subs); j++) {
            if (PyList_Append(all, PyList_GET_ITEM(subs, j)) < 0) {
                Py_DECREF(subs);
                goto error;
            }
        }
        Py_DECREF(subs);
    }
#if TGC_HAVE_YOUNG_SCAN
    for (int gen = 0; scan_lists && gen < TGC_GC_GENERATIONS; gen++) {
        if (watch__scan_list(tgc_gc_list(gen), tensor, all) < 0) {
            goto error;
        }
    }
    if (scan_lists && watch__scan_list(tgc_gc_permanent_list(), tensor, all) < 0) {
        goto error;
    }
#else
    (void)scan_lists;
#endif
    return all;
error:
    Py_XDECREF(all);
    PyErr_Clear();
    return NULL;
}

static void
watch__next_epoch(watch_shared *w)
{
    w->epoch = w->epoch + 1 ? w->epoch + 1 : 1;
}

int
tgc_watch_on(PyTypeObject *tensor)
{
    watch_shared *w = watch__find();
    if (w == NULL) {
        return 0;  /* no memory: tried again at the next plant */
    }
    if (w->state != 0) {
        return w->state > 0;
    }
    PyObject *all = watch__tensor_types(tensor, 1);  /* new reference */
    if (all == NULL) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        inquiry is_gc = ((PyTypeObject *)PyList_GET_ITEM(all, i))->tp_is_gc;
        if (is_gc != NULL && is_gc != w->is_gc) {
            w->state = -1;
            Py_DECREF(all);
            return 0;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        ((PyTypeObject *)PyList_GET_ITEM(all, i))->tp_is_gc = w->is_gc;
    }
    Py_DECREF(all);
    w->state = 1;
    watch__next_epoch(w);
    return 1;
}

int
tgc_watch_reset(PyTypeObject *tensor, int scan_lists)
{
    watch_shared *w = watch__find();
    if (w == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "tensorgc: the tensor watch could not be published in the interpreter's dict");
        return -1;
    }
    PyObject *all = watch__tensor_types(tensor, scan_lists);  /* new */
    if (all == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyTypeObject *tp = (PyTypeObject *)PyList_GET_ITEM(all, i);
        if (tp->tp_is_gc == w->is_gc) {
            tp->tp_is_gc = NULL;
        }
    }
    Py_DECREF(all);
    w->state = 0;
    w->plant = NULL;  /* the slots are gone: nothing calls it */
    w->plant_arg = NULL;
    watch__next_epoch(w);
    return 0;
}

int
tgc_watch_planter_set(tgc_watch_planter fn, void *arg)
{
    if (watch == NULL || watch->state != 1) {
        return 0;
    }
    if (watch->plant != NULL && (watch->plant != fn || watch->plant_arg != arg)) {
        return 0;  /* another copy's detector */
    }
    watch->plant = fn;
    watch->plant_arg = arg;
    return 1;
}

int
tgc_watch_planter_is(tgc_watch_planter fn, void *arg)
{
    return watch != NULL && watch->state == 1 && watch->plant == fn && watch->plant_arg == arg;
}

void
tgc_watch_planter_clear(tgc_watch_planter fn, void *arg)
{
    if (watch != NULL && watch->plant == fn && watch->plant_arg == arg) {
        watch->plant = NULL;
        watch->plant_arg = NULL;
    }
}

int
tgc_watch_on_type(PyTypeObject *tp)
{
    return watch != NULL && tp->tp_is_gc == watch->is_gc;
}

void
tgc_watch_set_mark(tgc_watch_mark *m, int watching)
{
    m->tensor_visits = watching ? watch->tensor_visits : 0;
    m->own_visits = watch_own_visits;
    m->epoch = watching ? watch->epoch : 0;
}

int
tgc_watch_quiet(const tgc_watch_mark *m)
{
    return m->epoch != 0 && m->epoch == watch->epoch &&
           watch->tensor_visits == m->tensor_visits && watch_own_visits - m->own_visits >= 2;
}

size_t
tgc_watch_visits(const tgc_watch_mark *m)
{
    return m->epoch != 0 && m->epoch == watch->epoch ? watch->tensor_visits - m->tensor_visits : 0;
}
