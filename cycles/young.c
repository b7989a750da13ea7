/* young.c: the pre-scan that lets a young collection run without the detector.
 *
 * DEBUG_SAVEALL costs every collection something (the collector appends its garbage to
 * gc.garbage, we take it back, scan it and free it), although in most young collections nothing
 * could possibly hold a tensor. Garbage found by a collection of generation g is a subset of the
 * objects in generations 0..g, and the tensors it keeps alive are those objects or what they
 * reference directly (the same reach as hook.c's held-tensor pass). So "start" walks those lists
 * once: when no object is a tensor and none references one, the collection cannot produce a report
 * and the collector runs alone.
 *
 * The generation lists are the collector's internals, so this is the one file built with
 * Py_BUILD_CORE, and only where compat.h says the layout is known (TGC_HAVE_YOUNG_SCAN). At module
 * exec, tgc_young_selfcheck() confirms the layout on the running interpreter (a new object must be
 * the tail of generation 0); if it does not match, the detector arms every collection as before. */
#define Py_BUILD_CORE 1
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#include "tensorgc/compat.h"

#if TGC_HAVE_YOUNG_SCAN
#  include "internal/pycore_interp.h"
#  include "internal/pycore_gc.h"
#endif

#include "young.h"


/* The tp_traverse that classes defined in Python get (typeobject.c's subtype_traverse), taken
 * from a probe class; NULL when unknown. Written at module exec with the GIL held; the same
 * function in every interpreter. */
static traverseproc young_subtype_traverse;

static void
young__probe_class(void)
{
    PyObject *ns = Py_BuildValue("{s:()}", "__slots__");  /* new reference */
    PyObject *cls = ns ? PyObject_CallFunction((PyObject *)&PyType_Type, "s()O",
                                               "_tensorgc_probe", ns) : NULL;  /* new */
    if (cls != NULL && PyType_Check(cls)) {
        young_subtype_traverse = ((PyTypeObject *)cls)->tp_traverse;
    }
    Py_XDECREF(cls);
    Py_XDECREF(ns);
    PyErr_Clear();
}

/* A class defined in Python whose instances hold nothing but __slots__ (no __dict__, no C base
 * with contents): subtype_traverse would visit the type and the slots, so the walk reads the slots
 * itself. nslots stays -1 for any other type, which goes through its tp_traverse. */
static void
young__shape_of(PyTypeObject *tp, tgc_shape *s)
{
    s->type = tp;
    s->nslots = -1;
    if (young_subtype_traverse == NULL || tp->tp_traverse != young_subtype_traverse ||
        tp->tp_dictoffset != 0 || (tp->tp_flags & TGC_TPFLAGS_MANAGED_DICT)) {
        return;
    }
    int n = 0;
    PyTypeObject *b = tp;
    for (; b != NULL && b->tp_traverse == young_subtype_traverse; b = b->tp_base) {
        /* subtype_traverse's traverse_slots: the first Py_SIZE(b) members after the heap type
         * (where tp_members points for such classes), T_OBJECT_EX ones only */
        PyMemberDef *mp = (PyMemberDef *)((char *)b + Py_TYPE(b)->tp_basicsize);
        if (!(b->tp_flags & Py_TPFLAGS_HEAPTYPE) || (Py_SIZE(b) > 0 && b->tp_members != mp)) {
            return;
        }
        for (Py_ssize_t i = 0; i < Py_SIZE(b); i++, mp++) {
            if (mp->type == TGC_T_OBJECT_EX) {
                if (n == TGC_SHAPE_SLOTS) {
                    return;
                }
                s->off[n++] = mp->offset;
            }
        }
    }
    if (b == NULL || b->tp_traverse != NULL) {
        return;  /* a base that traverses contents of its own */
    }
    s->nslots = n;
}

int
tgc_traverse_fast(tgc_shapes *c, PyObject *op, visitproc visit, void *arg)
{
    PyTypeObject *tp = Py_TYPE(op);
    const tgc_shape *sh = NULL;
    for (int i = 0; i < 4; i++) {
        if (c->shapes[i].type == tp) {
            sh = &c->shapes[i];
            break;
        }
    }
    if (sh == NULL) {
        tgc_shape *fresh = &c->shapes[c->next++ & 3];
        young__shape_of(tp, fresh);
        sh = fresh;
    }
    if (sh->nslots >= 0) {
        for (int i = 0; i < sh->nslots; i++) {
            PyObject *v = *(PyObject **)((char *)op + sh->off[i]);
            int rc = v != NULL ? visit(v, arg) : 0;
            if (rc != 0) {
                return rc;
            }
        }
        return 0;
    }
    return tp->tp_traverse != NULL && PyObject_IS_GC(op) ? tp->tp_traverse(op, visit, arg) : 0;
}

#if TGC_HAVE_YOUNG_SCAN

static PyGC_Head *
young__head(int gen)
{
    return &PyInterpreterState_Get()->gc.generations[gen].head;
}
int
tgc_young_selfcheck(void)
{
    young__probe_class();
    PyObject *probe = PyList_New(0);  /* new reference; tracked at once, at generation 0's tail */
    if (probe == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyGC_Head *head = young__head(0), *g = _Py_AS_GC(probe);
    int ok = PyObject_GC_IsTracked(probe) && _PyGCHead_NEXT(g) == head &&
             _PyGCHead_PREV(head) == g;
    Py_DECREF(probe);
    return ok;
}

/* What the walk keeps: the tensor base type and a few recently seen types that are not tensors
 * (types repeat a lot among young objects; they stay alive while their objects do). */
typedef struct {
    PyTypeObject *tensor;
    tgc_typecache types;
    tgc_shapes shapes;
} young_ctx;

static int
young__is_tensor(young_ctx *c, PyObject *o)
{
    return tgc_typecache_is_tensor(&c->types, c->tensor, o);
}

/* tp_traverse visitor: a nonzero return ends the traversal, which is all we need. */
static int
young__visit(PyObject *o, void *arg)
{
    return young__is_tensor((young_ctx *)arg, o);
}

int
tgc_young_may_hold(PyTypeObject *tensor, int generation)
{
    if (tensor == NULL) {
        return 0;  /* torch is not imported: there are no tensors */
    }
    if (generation < 0 || generation >= NUM_GENERATIONS - 1) {
        return 1;  /* a full collection: the walk would be the whole heap; it is not worth it */
    }
    young_ctx c;
    memset(&c, 0, sizeof(c));
    c.tensor = tensor;
    /* No Python code runs below (tp_traverse must not run any, the collector relies on that
     * too), so the lists cannot change under the walk. */
    for (int gen = 0; gen <= generation; gen++) {
        PyGC_Head *head = young__head(gen);
        for (PyGC_Head *g = _PyGCHead_NEXT(head); g != head; g = _PyGCHead_NEXT(g)) {
            PyObject *op = (PyObject *)(g + 1);  /* the object follows its gc header */
            if (young__is_tensor(&c, op)) {
                return 1;
            }
            if (tgc_traverse_fast(&c.shapes, op, young__visit, &c) != 0) {
                return 1;
            }
        }
    }
    return 0;
}

#else  /* no known generation lists: every collection may hold tensors */

int
tgc_young_selfcheck(void)
{
    young__probe_class();  /* tgc_traverse_fast still uses it */
    return 0;
}

int
tgc_young_may_hold(PyTypeObject *tensor, int generation)
{
    (void)tensor;
    (void)generation;
    return 1;
}

#endif
