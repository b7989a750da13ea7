/* names.h: the contract of graph/names.c, which names the references of objects ("one edge per
 * reference": ".attr", "[key]", "local x", "__self__"...) and describes the objects, with C-level
 * field reads only (no properties, no __getattr__; a user __repr__ only in tgc_describe, where
 * failures are caught). Users: the cycle detector's reports (cycles/report_*.c, for the objects
 * they draw; the hook never calls it) and the owner chains' labels (graph/binding.c).
 *
 * References: the objects passed in are borrowed; what is handed out is marked new or borrowed
 * below. Work: tgc_names_collect is one pass over an object's references (a dict's entries, a
 * frame's locals...), no more; every string taken from the user's objects is cut before it
 * reaches a label or a description (TGC_NAME_MAX). Errors: -1 or NULL with an exception set, as
 * said per function. Python.h comes first; GIL. */
#ifndef TENSORGC_NAMES_H
#define TENSORGC_NAMES_H

/* Labels made once and reused by every report (the caller keeps them: the cycle detector in its
 * part of the module state; GIL): the fixed ones ("__dict__", "__self__"...) found by the
 * address of their C literal, ".name" by the attribute's name. */
#define TGC_LABELS_FIXED 32
#define TGC_LABELS_ATTRS 4096   /* a bound: the dict is emptied when it reaches this size */
typedef struct {
    struct {
        const char *literal;   /* the label's C string, compared by address */
        PyObject *label;       /* new reference */
    } fixed[TGC_LABELS_FIXED];
    int nfixed;
    PyObject *attrs;           /* new reference: dict, exact str name -> ".name"; NULL: none */
} tgc_labels;
void tgc_labels_clear(tgc_labels *l);

typedef struct {
    PyObject *target;   /* borrowed; only compared by address */
    PyObject *via;      /* borrowed; the container the reference sits in, NULL when direct */
    PyObject *label;    /* new reference (str) */
    int used;
} tgc_name;
typedef struct {
    tgc_name *items;
    size_t n, cap;
    PyObject *folds[8];  /* borrowed; containers drawn as part of the owner (dict, closure) */
    int nfolds;
    tgc_labels *labels;  /* borrowed: reusable labels, or NULL to make every label anew */
} tgc_names;
/* Names obj's references into ns. owned (borrowed list) takes what naming materialises (a frame's
 * locals, an instance dict), so the check before freeing counts its references. 0, or -1 with an
 * exception. */
int tgc_names_collect(PyObject *obj, tgc_names *ns, PyObject *owned);
PyObject *tgc_names_take(tgc_names *ns, PyObject *target, PyObject *via);  /* borrowed or NULL */
void tgc_names_clear(tgc_names *ns);
/* The label of a dict's value as tgc_names_collect writes it: "[key]" (new reference). */
PyObject *tgc_names_key_label(PyObject *key);
/* Whether obj is a generator, a coroutine or an async generator (a frame of its own). */
int tgc_is_generator(PyObject *obj);

/* Every string taken from the user's objects is cut before it reaches a label, the text or the
 * table: names and descriptions at TGC_NAME_MAX characters, anything written into a buffer at
 * TGC_PYSTR_MAX bytes (buf.h: a safety net), each with an ellipsis and the true length. */
#define TGC_NAME_MAX 120
/* s (a new reference, stolen; NULL passes through) cut to limit characters: "abc… (1000 chars)".
 * New reference. */
PyObject *tgc_cut(PyObject *s, Py_ssize_t limit);
PyObject *tgc_type_name(PyObject *obj);  /* new reference */
/* "torch.Tensor", "mymodule.Outer.Node": the type's module and qualified name, read from the
 * class itself (no attribute lookup, no user code); the module left out for builtins. New
 * reference. */
PyObject *tgc_type_qualname(PyTypeObject *tp);
PyObject *tgc_describe(PyObject *obj);   /* new reference: one short line, may be "" */

#endif /* TENSORGC_NAMES_H */
