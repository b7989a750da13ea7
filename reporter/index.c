/* index.c: an index of live tensors that makes MemReporter's walk cheap (opt-in).
 *
 * Walking every object the collector tracks costs ~20 ns an object (a million-object heap:
 * 20-25 ms), most of it torch's own import-time objects. With the index on, a report walks only
 * the two young generations and reads the rest from the index: tensors that reached the oldest
 * generation. Objects only enter the oldest generation when a collection of generation 1 or 2
 * promotes the survivors of generations 0 and 1, so a gc callback indexes the tensors of those
 * two generations in that collection's "start" phase (gc.unfreeze(), the one other way in, is
 * noticed through gc.get_freeze_count() and answered with a full walk). The index holds weak
 * references only; dead entries are dropped as reports and promotions meet them.
 *
 * Cost while on: one walk of generations 0 and 1 (a few thousand objects) per collection of
 * generation 1 or 2, i.e. one in ten collections with default thresholds. Only where the
 * collector has these generations (compat.h: TGC_HAVE_GEN_INDEX, and at run time
 * common/internals.c).
 *
 * Two ways to turn it on: the user's (track_tensors: on until turned off), and holds
 * (checkpoint() and growth(), the pytest plugin's session): on while any hold is held, and off
 * again after the last release if a hold turned it on. Building it, and each read of it, runs
 * with automatic collection off: no collection, so no callback or finalizer, can run in the
 * middle and change the dict or promote a tensor between the read of the index and the read of
 * the young generations. Contract in reporter.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/internals.h"
#include "reporter.h"

#if TGC_HAVE_GEN_INDEX

static int
index__refers_to(PyObject *ref, PyObject *op)
{
    PyObject *t = tgc_compat_weakref_target(ref);  /* new or NULL */
    Py_XDECREF(t);
    return t == op;
}

/* Adds the tensors of gc.get_objects(gen) (every generation for -1) to `index` (borrowed dict:
 * address -> weakref) and, when `out` is given, appends them to it as well. Runs no Python code.
 * Returns 0, or -1 with an exception. */
static int
index__scan_gen(tgc_reporter *r, PyObject *index, int gen, PyObject *out)
{
    PyObject *objs = gen >= 0 ? PyObject_CallMethod(r->gc_module, "get_objects", "(i)", gen)
                              : PyObject_CallMethod(r->gc_module, "get_objects", NULL);  /* new */
    if (objs == NULL) {
        return -1;
    }
    if (!PyList_Check(objs)) {
        Py_DECREF(objs);
        PyErr_SetString(PyExc_TypeError, "gc.get_objects() did not return a list");
        return -1;
    }
    PyTypeObject *tt = (PyTypeObject *)r->tensor->type;
    PyTypeObject *plain[4] = {NULL, NULL, NULL, NULL};
    unsigned next = 0;
    int rc = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objs) && rc == 0; i++) {
        PyObject *op = PyList_GET_ITEM(objs, i);  /* borrowed; the list keeps it alive */
        PyTypeObject *tp = Py_TYPE(op);
        if (tp == plain[0] || tp == plain[1] || tp == plain[2] || tp == plain[3]) {
            continue;
        }
        if (!PyType_IsSubtype(tp, tt)) {
            plain[next++ & 3] = tp;
            continue;
        }
        if (out != NULL && PyList_Append(out, op) < 0) {
            rc = -1;
            break;
        }
        PyObject *key = PyLong_FromVoidPtr(op);
        PyObject *have = key ? PyDict_GetItemWithError(index, key) : NULL;  /* borrowed */
        if (key == NULL || (have == NULL && PyErr_Occurred())) {
            rc = -1;
        }
        else if (have == NULL || !index__refers_to(have, op)) {
            /* new, or the address now belongs to another tensor */
            PyObject *ref = PyWeakref_NewRef(op, NULL);
            if (ref == NULL || PyDict_SetItem(index, key, ref) < 0) {
                rc = -1;
            }
            Py_XDECREF(ref);
        }
        Py_XDECREF(key);
    }
    Py_DECREF(objs);
    return rc;
}

/* The gc callback of the index: on "start" of a collection of generation 1 or 2, index what it
 * may promote. Never raises into the collector. */
void
tgc_index_callback(tgc_reporter *r, PyObject *phase, PyObject *info)
{
    if (r->index == NULL || !PyUnicode_Check(phase) || r->index_busy ||
        tgc_compat_is_finalizing() || PyUnicode_CompareWithASCIIString(phase, "start") != 0) {
        return;
    }
    PyObject *g = PyDict_Check(info) ? PyDict_GetItemString(info, "generation") : NULL;
    long gen = g != NULL && PyLong_Check(g) ? PyLong_AsLong(g) : -1;
    if (gen >= 1) {
        r->index_busy = 1;  /* gc.get_objects cannot start a collection, but stay safe */
        if (index__scan_gen(r, r->index, 0, NULL) < 0 ||
            index__scan_gen(r, r->index, 1, NULL) < 0) {
            PyErr_WriteUnraisable(r->index_hook);
            r->index_stale = 1;  /* the next report walks everything */
        }
        r->index_busy = 0;
        r->index_promotions++;
    }
    PyErr_Clear();
}

static long
index__freeze_count(tgc_reporter *r)
{
    PyObject *v = PyObject_CallMethod(r->gc_module, "get_freeze_count", NULL);
    long n = v != NULL ? PyLong_AsLong(v) : -1;
    Py_XDECREF(v);
    PyErr_Clear();
    return n;
}

/* Turns the index on: one walk of every generation, automatic collection off meanwhile. The dict
 * is built aside and installed only if no one installed one in the meantime. 0, or -1 with an
 * exception. */
static int
index__start(tgc_reporter *r)
{
    if (r->index != NULL) {
        return 0;
    }
    if (!tgc_internals_ok()) {
        return 0;  /* not the collector whose promotion rule the index relies on */
    }
    if (tgc_tensor_resolve(r->tensor) <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "tensorgc: torch is not imported");
        }
        return -1;
    }
    PyObject *index = PyDict_New();  /* new reference */
    if (index == NULL) {
        return -1;
    }
    int was = PyGC_Disable();
    int rc = index__scan_gen(r, index, -1, NULL);
    if (was) {
        PyGC_Enable();
    }
    if (rc < 0) {
        Py_DECREF(index);
        return -1;
    }
    if (r->index != NULL) {
        Py_DECREF(index);  /* turned on meanwhile: keep that one */
        return 0;
    }
    if (PyList_Append(r->gc_callbacks, r->index_hook) < 0) {
        Py_DECREF(index);
        return -1;
    }
    r->index = index;  /* takes the reference */
    r->index_freeze = index__freeze_count(r);
    r->index_stale = 0;
    return 0;
}

static int
index__stop(tgc_reporter *r)
{
    if (r->index == NULL) {
        return 0;
    }
    Py_CLEAR(r->index);
    PyObject *cbs = r->gc_callbacks;
    for (Py_ssize_t i = PyList_GET_SIZE(cbs) - 1; i >= 0; i--) {
        if (PyList_GET_ITEM(cbs, i) == r->index_hook && PySequence_DelItem(cbs, i) < 0) {
            return -1;
        }
    }
    return 0;
}

int
tgc_index_enable(tgc_reporter *r)
{
    if (index__start(r) < 0) {
        return -1;
    }
    r->index_auto = 0;  /* the user's now: the holds' releases leave it on */
    return 0;
}

int
tgc_index_disable(tgc_reporter *r)
{
    r->index_auto = 0;
    return index__stop(r);
}

int
tgc_index_hold(tgc_reporter *r)
{
    int was_off = r->index == NULL;
    r->index_holds++;  /* first: a release that runs meanwhile does not turn it off under us */
    if (was_off && index__start(r) < 0) {
        r->index_holds--;
        return -1;
    }
    if (was_off && r->index != NULL) {
        r->index_auto = 1;
    }
    return r->index != NULL;
}

int
tgc_index_release(tgc_reporter *r)
{
    if (r->index_holds == 0) {
        return 0;
    }
    if (--r->index_holds == 0 && r->index_auto) {
        r->index_auto = 0;
        return index__stop(r);
    }
    return 0;
}

/* Every live tensor (new list): generations 0 and 1 first, then the index's live entries not
 * among them, the order of a walk of the collector's lists (young generations first), or a full
 * walk (re-indexing) when the index may have missed something. Automatic collection is off
 * meanwhile, so no promotion falls between the two reads. */
PyObject *
tgc_index_tensors(tgc_reporter *r)
{
    long fc = index__freeze_count(r);
    if (r->index_stale || fc < r->index_freeze) {
        /* gc.unfreeze() moved frozen objects to the oldest generation behind our back */
        if (index__stop(r) < 0 || index__start(r) < 0) {
            return NULL;
        }
    }
    r->index_freeze = fc;
    if (r->index == NULL) {
        return tgc_walk_tensors(r);
    }
    int was = PyGC_Disable();
    PyObject *index = Py_NewRef(r->index);  /* ours for the call, whatever happens to r->index */
    PyObject *out = PyList_New(0);  /* new reference: the young generations' tensors, then more */
    PyObject *seen = PySet_New(NULL);
    PyObject *dead = PyList_New(0);
    int rc = out && seen && dead ? 0 : -1;
    /* the young generations: tensors made since the last promotion (indexed now as well) */
    for (int gen = 0; gen <= 1 && rc == 0; gen++) {
        rc = index__scan_gen(r, index, gen, out);
    }
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(out); i++) {
        PyObject *k = PyLong_FromVoidPtr(PyList_GET_ITEM(out, i));
        if (k == NULL || PySet_Add(seen, k) < 0) {
            rc = -1;
        }
        Py_XDECREF(k);
    }
    PyObject *key, *ref;
    Py_ssize_t pos = 0;
    while (rc == 0 && PyDict_Next(index, &pos, &key, &ref)) {  /* borrowed */
        PyObject *t = tgc_compat_weakref_target(ref);  /* new or NULL */
        if (t == NULL) {
            rc = PyList_Append(dead, key);
            continue;
        }
        int has = PySet_Contains(seen, key);
        if (has == 0) {
            has = PyList_Append(out, t);
        }
        Py_DECREF(t);
        rc = has < 0 ? -1 : 0;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(dead); i++) {
        rc = PyDict_DelItem(index, PyList_GET_ITEM(dead, i));
    }
    Py_XDECREF(seen);
    Py_XDECREF(dead);
    Py_DECREF(index);
    if (was) {
        PyGC_Enable();
    }
    if (rc < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

#else  /* no generations to rely on (3.14's incremental collector, an unknown interpreter) */

void
tgc_index_callback(tgc_reporter *r, PyObject *phase, PyObject *info)
{
    (void)r;
    (void)phase;
    (void)info;
}

int
tgc_index_enable(tgc_reporter *r)
{
    (void)r;
    return 0;  /* reports fall back to the full walk */
}

int
tgc_index_disable(tgc_reporter *r)
{
    (void)r;
    return 0;
}

int
tgc_index_hold(tgc_reporter *r)
{
    r->index_holds++;
    return 0;  /* no index: checkpoint() and growth() walk the heap */
}

int
tgc_index_release(tgc_reporter *r)
{
    if (r->index_holds > 0) {
        r->index_holds--;
    }
    return 0;
}

PyObject *
tgc_index_tensors(tgc_reporter *r)
{
    return tgc_walk_tensors(r);
}

#endif
