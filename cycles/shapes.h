/* shapes.h: where an object's references lie, read in place for the commonest young objects
 * instead of through tp_traverse: the contract of shapes.c, shared by the pre-scan and the
 * sentinel (young.c) and the held-tensor pass (split.c). Python.h comes first; everything here
 * needs the GIL and runs no Python code. */
#ifndef TGC_SHAPES_H
#define TGC_SHAPES_H

/* What tp_traverse visits, faster for the commonest young objects, whose references are read in
 * place (tgc_shape_runs says where, per kind): instances of classes defined in Python on
 * `object` that hold __slots__ and/or a managed instance dict (3.11+: the inline values, or the
 * dict once made), and exact lists, tuples, cells, bound methods and functions (3.11+). The type
 * object of a heap type's instance, which tp_traverse also visits, is skipped: it is never a
 * tensor, and no caller here needs it. Any other object (subclasses of list, dict and the rest
 * included) goes through its tp_traverse (when it is a gc object). The pre-scan reads the same
 * places (tests compare both with tp_traverse). Returns visit's first nonzero result, like
 * tp_traverse. `shapes` is a per-walk cache: zero it before a walk, and do not keep it past one
 * (it holds type pointers, kept alive only by the objects being walked). */
#define TGC_SHAPE_SLOTS 8
enum {
    TGC_SHAPE_TRAVERSE,   /* tp_traverse */
    TGC_SHAPE_SLOTTED,    /* __slots__ only: off[0..nslots) */
    TGC_SHAPE_INSTANCE,   /* __slots__ (maybe none) and a managed dict (3.11+) */
    TGC_SHAPE_ITEMS,      /* an exact list or tuple: its items */
    TGC_SHAPE_FIELDS      /* an exact cell, bound method or function: nfields neighbouring
                             fields from off[0], then nfields2 from off[1]; a function's two
                             that may hold a tensor at off[2] and off[3] */
};
typedef struct {
    PyTypeObject *type;
    int kind;                 /* TGC_SHAPE_* */
    int nslots;               /* -1 unless kind is TGC_SHAPE_SLOTTED (the pre-scan's quick test) */
    int nfields, nfields2;    /* slots (SLOTTED, INSTANCE) or fields (FIELDS) at off[] */
    Py_ssize_t off[TGC_SHAPE_SLOTS];
} tgc_shape;
typedef struct {
    tgc_shape shapes[4];
    unsigned next;
} tgc_shapes;
int tgc_traverse_fast(tgc_shapes *shapes, PyObject *op, visitproc visit, void *arg);

/* The cached shape of tp in c, computed on a miss (c: zeroed before a walk, as above). */
const tgc_shape *tgc_shape_lookup(tgc_shapes *c, PyTypeObject *tp);

/* An instance's own __dict__ where it is an object of its own that op's tp_traverse reports
 * (borrowed), else NULL; never makes one: every instance dict on 3.10
 * (tgc_compat_existing_dict), and from 3.11 a managed one once something made it (vars(), a
 * report's naming), which tp_traverse then visits instead of the attributes. c: a per-walk
 * cache, as above. */
PyObject *tgc_shapes_own_dict(tgc_shapes *c, PyObject *op);

/* Takes subtype_traverse (what classes defined in Python get) from a probe class, so that their
 * shapes can be read in place; until then every such class goes through tp_traverse. Module
 * exec, GIL held. */
void tgc_shapes_init(void);

#ifdef Py_BUILD_CORE
/* The reader itself, inline for the walks; it reads layouts only Py_BUILD_CORE files see
 * (compat.h's TGC_FUNC_RUN*, managed attributes). */
/* Where the references of op (of shape sh, not TGC_SHAPE_TRAVERSE) lie: up to TGC_SHAPE_RUNS runs
 * of pointers, a NULL one no reference. The one place that says what each shape reads, for the
 * pre-scan and tgc_traverse_fast alike (tests compare the latter with tp_traverse, and the
 * pre-scan's verdicts with tp_traverse's). With tensors_only (the pre-scan) a function gives only
 * the fields that may hold a tensor (compat.h's TGC_FUNC_ANY*). */
typedef struct {
    PyObject **p;
    Py_ssize_t n;
} tgc_shape_run;
#define TGC_SHAPE_RUNS (TGC_SHAPE_SLOTS + 2)

static inline Py_ALWAYS_INLINE int
tgc_shape_runs(const tgc_shape *sh, PyObject *op, tgc_shape_run *r, int tensors_only)
{
    int k = 0;
    switch (sh->kind) {
    case TGC_SHAPE_ITEMS:
        r[0].p = sh->type == &PyList_Type ? ((PyListObject *)op)->ob_item
                                          : ((PyTupleObject *)op)->ob_item;
        r[0].n = Py_SIZE(op);
        return 1;
    case TGC_SHAPE_FIELDS:
        if (tensors_only && sh->type == &PyFunction_Type) {
            /* the pre-scan asks for tensors only: a function's other fields cannot hold one */
            r[0].p = (PyObject **)((char *)op + sh->off[2]);
            r[1].p = (PyObject **)((char *)op + sh->off[3]);
            r[2].p = (PyObject **)((char *)op + sh->off[4]);
            r[0].n = r[1].n = r[2].n = 1;
            return 3;
        }
        r[0].p = (PyObject **)((char *)op + sh->off[0]);
        r[0].n = sh->nfields;
        r[1].p = (PyObject **)((char *)op + sh->off[1]);
        r[1].n = sh->nfields2;
        return 2;
    default:  /* SLOTTED, INSTANCE */
        for (; k < sh->nfields; k++) {
            r[k].p = (PyObject **)((char *)op + sh->off[k]);
            r[k].n = 1;
        }
#if TGC_HAVE_MANAGED_ATTRS
        if (sh->kind == TGC_SHAPE_INSTANCE) {
            PyObject **dictslot;
            r[k].p = tgc_compat_managed_attrs(op, &r[k].n, &dictslot);
            k++;
            if (dictslot != NULL) {
                r[k].p = dictslot;
                r[k++].n = 1;
            }
        }
#endif
        return k;
    }
}

#endif

#endif
