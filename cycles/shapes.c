/* shapes.c: the shapes of objects, whose references the walks read in place (shapes.h). Built
 * with Py_BUILD_CORE for the layouts compat.h reads (a function's fields, managed attributes). */
#define Py_BUILD_CORE 1
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "tensorgc/compat.h"
#include "shapes.h"

/* The tp_traverse that classes defined in Python get (typeobject.c's subtype_traverse), taken
 * from a probe class; NULL when unknown. Written at module exec with the GIL held; the same
 * function in every interpreter. */
static traverseproc shapes_subtype_traverse;

void
tgc_shapes_init(void)
{
    PyObject *ns = Py_BuildValue("{s:()}", "__slots__");  /* new reference */
    PyObject *cls = ns ? PyObject_CallFunction((PyObject *)&PyType_Type, "s()O",
                                               "_tensorgc_probe", ns) : NULL;  /* new */
    if (cls != NULL && PyType_Check(cls)) {
        shapes_subtype_traverse = ((PyTypeObject *)cls)->tp_traverse;
    }
    Py_XDECREF(cls);
    Py_XDECREF(ns);
    PyErr_Clear();
}

/* A bound method's references, read as one run of two fields. */
_Static_assert(offsetof(PyMethodObject, im_self) ==
               offsetof(PyMethodObject, im_func) + sizeof(PyObject *),
               "a bound method's im_func and im_self are neighbours");

/* The shape of tp (shapes.h's TGC_SHAPE_*). A class defined in Python qualifies when
 * subtype_traverse would visit nothing but its type, its T_OBJECT_EX __slots__ (at most
 * TGC_SHAPE_SLOTS) and, with a managed dict, its attributes: every class of its chain defined in
 * Python, the first other base without a tp_traverse (`object` for a managed dict), no other
 * instance dict. Every other type, subclasses of list and the rest included, goes through its
 * tp_traverse. */
static void
shapes__of(PyTypeObject *tp, tgc_shape *s)
{
    s->type = tp;
    s->kind = TGC_SHAPE_TRAVERSE;
    s->nslots = -1;
    s->nfields = s->nfields2 = 0;
    if (tp == &PyList_Type || tp == &PyTuple_Type) {
        s->kind = TGC_SHAPE_ITEMS;
        return;
    }
    if (tp == &PyCell_Type || tp == &PyMethod_Type) {
        s->kind = TGC_SHAPE_FIELDS;
        s->off[0] = tp == &PyCell_Type ? (Py_ssize_t)offsetof(PyCellObject, ob_ref)
                                       : (Py_ssize_t)offsetof(PyMethodObject, im_func);
        s->nfields = tp == &PyCell_Type ? 1 : 2;
        s->off[1] = s->off[0];  /* an empty second run: its pointer stays inside the object */
        return;
    }
#if TGC_FUNC_RUNS
    if (tp == &PyFunction_Type) {
        s->kind = TGC_SHAPE_FIELDS;
        s->off[0] = (Py_ssize_t)TGC_FUNC_RUN1;
        s->nfields = (int)TGC_FUNC_RUN1_N;
        s->off[1] = (Py_ssize_t)TGC_FUNC_RUN2;
        s->nfields2 = (int)TGC_FUNC_RUN2_N;
        s->off[2] = (Py_ssize_t)TGC_FUNC_ANY1;
        s->off[3] = (Py_ssize_t)TGC_FUNC_ANY2;
        s->off[4] = (Py_ssize_t)TGC_FUNC_ANY3;
        return;
    }
#endif
    int managed = TGC_HAVE_MANAGED_ATTRS && (tp->tp_flags & TGC_TPFLAGS_MANAGED_DICT) != 0;
    if (shapes_subtype_traverse == NULL || tp->tp_traverse != shapes_subtype_traverse ||
        (!managed && (tp->tp_dictoffset != 0 || (tp->tp_flags & TGC_TPFLAGS_MANAGED_DICT)))) {
        return;
    }
    int n = 0;
    PyTypeObject *b = tp;
    for (; b != NULL && b->tp_traverse == shapes_subtype_traverse; b = b->tp_base) {
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
    if (b == NULL || b->tp_traverse != NULL || (managed && b != &PyBaseObject_Type)) {
        return;  /* a base that traverses contents of its own */
    }
    s->kind = managed ? TGC_SHAPE_INSTANCE : TGC_SHAPE_SLOTTED;
    s->nslots = managed ? -1 : n;
    s->nfields = n;
}

const tgc_shape *
tgc_shape_lookup(tgc_shapes *c, PyTypeObject *tp)
{
    for (int i = 0; i < 4; i++) {
        if (c->shapes[i].type == tp) {
            return &c->shapes[i];
        }
    }
    tgc_shape *fresh = &c->shapes[c->next++ & 3];
    shapes__of(tp, fresh);
    return fresh;
}

PyObject *
tgc_shapes_own_dict(tgc_shapes *c, PyObject *op)
{
    PyObject *d = tgc_compat_existing_dict(op);  /* borrowed */
    if (d != NULL) {
        return d;
    }
#if TGC_HAVE_MANAGED_ATTRS
    if ((Py_TYPE(op)->tp_flags & TGC_TPFLAGS_MANAGED_DICT) &&
        tgc_shape_lookup(c, Py_TYPE(op))->kind == TGC_SHAPE_INSTANCE) {
        Py_ssize_t n;
        PyObject **dictslot;
        (void)tgc_compat_managed_attrs(op, &n, &dictslot);
        if (dictslot != NULL && *dictslot != NULL && PyDict_Check(*dictslot)) {
            return *dictslot;
        }
    }
#else
    (void)c;
    (void)op;
#endif
    return NULL;
}

int
tgc_traverse_fast(tgc_shapes *c, PyObject *op, visitproc visit, void *arg)
{
    PyTypeObject *tp = Py_TYPE(op);
    const tgc_shape *sh = tgc_shape_lookup(c, tp);
    if (sh->kind == TGC_SHAPE_TRAVERSE) {
        return tp->tp_traverse != NULL && PyObject_IS_GC(op) ? tp->tp_traverse(op, visit, arg)
                                                              : 0;
    }
    tgc_shape_run r[TGC_SHAPE_RUNS];
    int k = tgc_shape_runs(sh, op, r, 0);
    for (int j = 0; j < k; j++) {
        for (Py_ssize_t i = 0; i < r[j].n; i++) {
            PyObject *v = r[j].p[i];
            int rc = v != NULL ? visit(v, arg) : 0;
            if (rc != 0) {
                return rc;
            }
        }
    }
    return 0;
}

