/* frames.c: a running frame's local variables as a new dict, read from the frame's own slots.
 *
 * frame.f_locals on 3.10-3.12 materialises a dict that the frame keeps and that a trace or
 * profile trampoline copies back into the frame (PyFrame_LocalsToFast): a search that read a
 * frame through it would either pin every value in it after the variable is gone, or, emptying
 * it, have the frame's variables deleted by the next trampoline (another thread's tracer, a
 * profiler), and it is the same dict a user's locals() returned. So the owner-chain search
 * reads the slots instead, as frame.f_locals does, and touches nothing of the frame. The slots
 * are the interpreter's internals: this file is built with Py_BUILD_CORE (like cycles/young.c),
 * where compat.h says the layout is known (TGC_FRAME_SLOTS: 3.10's, or 3.11's and 3.12's) and,
 * at run time, where common/internals.c agrees; elsewhere tgc_frame_snapshot says it cannot (3.13+ needs it not:
 * its frame.f_locals is a proxy that keeps nothing). GIL. */
#define Py_BUILD_CORE 1
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "tensorgc/internals.h"

#if TGC_FRAME_SLOTS == 2
#  include "internal/pycore_code.h"
#  include "internal/pycore_frame.h"
#endif

#include "frames.h"

#if TGC_FRAME_SLOTS == 1
/* names[i] = slots[i] for i < n, into d; a cell's contents where deref (3.10 makes every cell
 * and free variable's cell when the frame starts). 0, or -1 with an exception. */
static int
frames__slots_to_dict(PyObject *d, PyObject *names, PyObject *const *slots, Py_ssize_t n,
                      int deref)
{
    if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) < n) {
        n = PyTuple_Check(names) ? PyTuple_GET_SIZE(names) : 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = slots[i];  /* borrowed */
        if (value != NULL && deref && PyCell_Check(value)) {
            value = PyCell_GET(value);
        }
        if (value != NULL && PyDict_SetItem(d, PyTuple_GET_ITEM(names, i), value) < 0) {
            return -1;
        }
    }
    return 0;
}

/* 3.10: what PyFrame_FastToLocals copies into f_locals (Objects/frameobject.c), copied into a
 * dict of our own instead: the locals (co_varnames), then the cells and, for a function, the
 * free variables, read through their cells. */
PyObject *
tgc_frame_snapshot(PyObject *frame)
{
    if (!PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "tgc_frame_snapshot: not a frame");
        return NULL;
    }
    if (!tgc_internals_ok()) {
        return Py_NewRef(Py_NotImplemented);  /* not the interpreter this layout is of */
    }
    PyFrameObject *f = (PyFrameObject *)frame;
    PyCodeObject *co = f->f_code;  /* borrowed: the frame keeps it */
    if (!(co->co_flags & CO_OPTIMIZED)) {
        return Py_NewRef(Py_None);  /* a module's or a class body's: its namespace is a mapping */
    }
    PyObject *d = PyDict_New();  /* new reference */
    if (d == NULL) {
        return NULL;
    }
    PyObject *const *fast = f->f_localsplus;
    Py_ssize_t ncells = PyTuple_GET_SIZE(co->co_cellvars);
    if (frames__slots_to_dict(d, co->co_varnames, fast, co->co_nlocals, 0) < 0 ||
        frames__slots_to_dict(d, co->co_cellvars, fast + co->co_nlocals, ncells, 1) < 0 ||
        frames__slots_to_dict(d, co->co_freevars, fast + co->co_nlocals + ncells,
                              PyTuple_GET_SIZE(co->co_freevars), 1) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}
#elif TGC_FRAME_SLOTS == 2
PyObject *
tgc_frame_snapshot(PyObject *frame)
{
    if (!PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "tgc_frame_snapshot: not a frame");
        return NULL;
    }
    if (!tgc_internals_ok()) {
        return Py_NewRef(Py_NotImplemented);  /* not the interpreter this layout is of */
    }
    _PyInterpreterFrame *fr = ((PyFrameObject *)frame)->f_frame;
    PyCodeObject *co = fr->f_code;
    if (!(co->co_flags & CO_OPTIMIZED)) {
        return Py_NewRef(Py_None);  /* a module's or a class body's: its namespace is a mapping */
    }
    PyObject *d = PyDict_New();  /* new reference */
    if (d == NULL) {
        return NULL;
    }
    for (int i = 0; i < co->co_nlocalsplus; i++) {
        _PyLocals_Kind kind = _PyLocals_GetKind(co->co_localspluskinds, i);
#ifdef CO_FAST_HIDDEN
        if (kind & CO_FAST_HIDDEN) {
            continue;  /* an inlined comprehension's variable, not the function's */
        }
#endif
        PyObject *value = fr->localsplus[i];  /* borrowed */
        if (value != NULL && (kind & (CO_FAST_CELL | CO_FAST_FREE)) && PyCell_Check(value)) {
            value = PyCell_GET(value);  /* before MAKE_CELL ran, the slot holds the value */
        }
        if (value != NULL &&
            PyDict_SetItem(d, PyTuple_GET_ITEM(co->co_localsplusnames, i), value) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}
#else
PyObject *
tgc_frame_snapshot(PyObject *frame)
{
    (void)frame;
    return Py_NewRef(Py_NotImplemented);
}
#endif
