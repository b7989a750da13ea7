/* names.c: names the references of objects ("one edge per reference") and describes the objects
 * themselves, with nothing but C-level field reads: no properties, no __getattr__, and a user
 * __repr__ only through tgc_describe, where failures are caught. The cycle detector's reports
 * call it for the objects they draw, the owner chains for the links of a chain (contract in
 * include/tensorgc/names.h). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "tensorgc/names.h"

#include <structmember.h>

#include <frameobject.h>

static int
names__add(tgc_names *ns, PyObject *target, PyObject *via, PyObject *label /* stolen */)
{
    if (label == NULL) {
        return -1;
    }
    if (target == NULL) {
        Py_DECREF(label);
        return 0;
    }
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 16;
        tgc_name *p = PyMem_Realloc(ns->items, cap * sizeof(tgc_name));
        if (p == NULL) {
            Py_DECREF(label);
            PyErr_NoMemory();
            return -1;
        }
        ns->items = p;
        ns->cap = cap;
    }
    ns->items[ns->n].target = target;
    ns->items[ns->n].via = via;
    ns->items[ns->n].label = label;
    ns->items[ns->n].used = 0;
    ns->n++;
    return 0;
}

void
tgc_labels_clear(tgc_labels *l)
{
    int n = l->nfixed;
    l->nfixed = 0;
    for (int i = 0; i < n; i++) {
        Py_CLEAR(l->fixed[i].label);
    }
    Py_CLEAR(l->attrs);
}

PyObject *
tgc_cut(PyObject *s, Py_ssize_t limit)
{
    if (s == NULL || !PyUnicode_Check(s) || PyUnicode_GET_LENGTH(s) <= limit) {
        return s;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    PyObject *head = PyUnicode_Substring(s, 0, limit);  /* new reference */
    PyObject *r = head ? PyUnicode_FromFormat("%U%c (%zd chars)", head, 0x2026, n) : NULL;
    Py_XDECREF(head);
    Py_DECREF(s);
    return r;
}

/* A fixed label as a str, made once per literal when ns has a cache. New reference. */
static PyObject *
names__literal(tgc_names *ns, const char *literal)
{
    tgc_labels *l = ns->labels;
    if (l == NULL) {
        return PyUnicode_FromString(literal);
    }
    for (int i = 0; i < l->nfixed; i++) {
        if (l->fixed[i].literal == literal) {
            return Py_NewRef(l->fixed[i].label);
        }
    }
    PyObject *s = PyUnicode_FromString(literal);
    if (s != NULL && l->nfixed < TGC_LABELS_FIXED) {
        l->fixed[l->nfixed].literal = literal;
        l->fixed[l->nfixed].label = Py_NewRef(s);
        l->nfixed++;
    }
    return s;
}

/* ".name" for an attribute, reused across reports when name is an exact str (whose hash and
 * equality run no user code). New reference. */
static PyObject *
names__attr(tgc_names *ns, PyObject *name)
{
    tgc_labels *l = ns->labels;
    if (l == NULL || !PyUnicode_CheckExact(name)) {
        return tgc_cut(PyUnicode_FromFormat(".%U", name), TGC_NAME_MAX);
    }
    if (l->attrs == NULL && (l->attrs = PyDict_New()) == NULL) {
        PyErr_Clear();  /* the label is good without the cache, as below */
        return tgc_cut(PyUnicode_FromFormat(".%U", name), TGC_NAME_MAX);
    }
    PyObject *label = PyDict_GetItemWithError(l->attrs, name);  /* borrowed */
    if (label != NULL) {
        return Py_NewRef(label);
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    label = tgc_cut(PyUnicode_FromFormat(".%U", name), TGC_NAME_MAX);
    if (label == NULL) {
        return NULL;
    }
    if (PyDict_GET_SIZE(l->attrs) >= TGC_LABELS_ATTRS) {
        PyDict_Clear(l->attrs);  /* many distinct names: start over rather than grow */
    }
    if (PyDict_SetItem(l->attrs, name, label) < 0) {
        PyErr_Clear();  /* the label is good without the cache */
    }
    return label;
}

/* label: a string literal; the label cache (names__literal) knows it by its address. */
static int
names__fixed(tgc_names *ns, PyObject *target, const char *label)
{
    return target ? names__add(ns, target, NULL, names__literal(ns, label)) : 0;
}

static void
names__fold(tgc_names *ns, PyObject *container)
{
    if (container != NULL && ns->nfolds < (int)(sizeof(ns->folds) / sizeof(ns->folds[0]))) {
        ns->folds[ns->nfolds++] = container;
    }
}

void
tgc_names_clear(tgc_names *ns)
{
    for (size_t i = 0; i < ns->n; i++) {
        Py_DECREF(ns->items[i].label);
    }
    PyMem_Free(ns->items);
    memset(ns, 0, sizeof(*ns));
}

PyObject *
tgc_names_take(tgc_names *ns, PyObject *target, PyObject *via)
{
    for (size_t i = 0; i < ns->n; i++) {
        tgc_name *e = &ns->items[i];
        if (!e->used && e->target == target && e->via == via) {
            e->used = 1;
            return e->label;
        }
    }
    return NULL;
}

/* A dict key as it appears in a label: reprs of str/int/float/bytes/bool/None (C types whose repr
 * runs no user code), the type name otherwise. Truncated to keep labels short. New reference. */
static PyObject *
names__key(PyObject *key)
{
    PyObject *r;
    if (PyUnicode_CheckExact(key) || PyLong_CheckExact(key) || PyFloat_CheckExact(key) ||
        PyBytes_CheckExact(key) || PyBool_Check(key) || key == Py_None) {
        r = PyObject_Repr(key);
    }
    else {
        r = PyUnicode_FromFormat("<%s>", Py_TYPE(key)->tp_name);
    }
    return tgc_cut(r, 40);
}

PyObject *
tgc_names_key_label(PyObject *key)
{
    PyObject *kr = names__key(key);
    PyObject *label = kr ? PyUnicode_FromFormat("[%U]", kr) : NULL;
    Py_XDECREF(kr);
    return label;
}

static int
names__dict_items(tgc_names *ns, PyObject *dict, PyObject *via, int attrs)
{
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(dict, &pos, &k, &v)) {
        PyObject *label;
        if (attrs && PyUnicode_Check(k)) {
            label = names__attr(ns, k);
        }
        else {
            PyObject *kr = names__key(k);
            label = kr ? PyUnicode_FromFormat("[%U]", kr) : NULL;
            Py_XDECREF(kr);
        }
        if (names__add(ns, v, via, label) < 0) {
            return -1;
        }
        if (!attrs && names__fixed(ns, k, "(key)") < 0) {
            return -1;
        }
    }
    return 0;
}

static int
names__sequence(tgc_names *ns, PyObject *seq, PyObject *via)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (names__add(ns, items[i], via, PyUnicode_FromFormat("[%zd]", i)) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Slots and C-level object members (T_OBJECT / T_OBJECT_EX), over the whole MRO. */
static int
names__members(tgc_names *ns, PyObject *obj)
{
    PyObject *mro = Py_TYPE(obj)->tp_mro;
    if (mro == NULL || !PyTuple_Check(mro)) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *tp = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (tp->tp_members == NULL) {
            continue;
        }
        for (PyMemberDef *m = tp->tp_members; m->name != NULL; m++) {
            if (m->type != T_OBJECT && m->type != T_OBJECT_EX) {
                continue;
            }
            PyObject *v = *(PyObject **)((char *)obj + m->offset);
            if (v != NULL && names__add(ns, v, NULL, tgc_cut(PyUnicode_FromFormat(".%s", m->name), TGC_NAME_MAX)) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

static int
names__function(tgc_names *ns, PyObject *obj)
{
    PyFunctionObject *f = (PyFunctionObject *)obj;
    if (names__fixed(ns, f->func_code, "__code__") < 0 ||
        names__fixed(ns, f->func_globals, "__globals__") < 0 ||
        names__fixed(ns, f->func_module, "__module__") < 0 ||
        names__fixed(ns, f->func_defaults, "__defaults__") < 0 ||
        names__fixed(ns, f->func_kwdefaults, "__kwdefaults__") < 0 ||
        names__fixed(ns, f->func_doc, "__doc__") < 0 ||
        names__fixed(ns, f->func_name, "__name__") < 0 ||
        names__fixed(ns, f->func_qualname, "__qualname__") < 0 ||
        names__fixed(ns, f->func_annotations, "__annotations__") < 0 ||
        names__fixed(ns, f->func_closure, "__closure__") < 0) {
        return -1;
    }
    if (f->func_dict != NULL) {
        if (names__fixed(ns, f->func_dict, "__dict__") < 0 ||
            names__dict_items(ns, f->func_dict, f->func_dict, 1) < 0) {
            return -1;
        }
        names__fold(ns, f->func_dict);
    }
    /* Closure variables by name: function -> tuple -> cell -> value is drawn as one edge. */
    PyObject *closure = f->func_closure;
    PyObject *freevars = closure ? PyObject_GetAttrString(f->func_code, "co_freevars") : NULL;
    if (closure != NULL && freevars == NULL) {
        PyErr_Clear();
    }
    if (closure != NULL && PyTuple_Check(closure)) {
        names__fold(ns, closure);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(closure); i++) {
            PyObject *cell = PyTuple_GET_ITEM(closure, i);
            if (!PyCell_Check(cell)) {
                continue;
            }
            PyObject *label;
            if (freevars && PyTuple_Check(freevars) && i < PyTuple_GET_SIZE(freevars)) {
                label = tgc_cut(PyUnicode_FromFormat("closure %U", PyTuple_GET_ITEM(freevars, i)),
                                TGC_NAME_MAX);
            }
            else {
                label = PyUnicode_FromFormat("closure [%zd]", i);
            }
            if (names__add(ns, PyCell_GET(cell), cell, label) < 0 ||
                names__add(ns, cell, closure, PyUnicode_FromFormat("[%zd]", i)) < 0) {
                Py_XDECREF(freevars);
                return -1;
            }
            names__fold(ns, cell);
        }
    }
    Py_XDECREF(freevars);
    return 0;
}

/* A frame's references. self_via: where the frame is drawn as part of another object (a
 * generator's, below), the frame itself, so that its local slots are also named as reached
 * through it; NULL otherwise. */
static int
names__frame(tgc_names *ns, PyObject *obj, PyObject *owned, PyObject *self_via)
{
    PyFrameObject *frame = (PyFrameObject *)obj;
    PyFrameObject *back = PyFrame_GetBack(frame);      /* new reference or NULL */
    PyCodeObject *code = PyFrame_GetCode(frame);       /* new reference */
    int rc = names__fixed(ns, (PyObject *)back, "f_back");
    if (rc == 0) {
        rc = names__fixed(ns, (PyObject *)code, "f_code");
    }
    Py_XDECREF(back);
    Py_XDECREF(code);
    if (rc < 0) {
        return -1;
    }
    int owned_by_frame = 0;
    PyObject *locals = tgc_compat_frame_locals(frame, &owned_by_frame);
    if (locals == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (owned_by_frame && PyDict_Check(locals)) {
        /* The frame now keeps this dict: whoever frees the garbage must count its references. */
        if (owned != NULL && PyList_Append(owned, locals) < 0) {
            Py_DECREF(locals);
            return -1;
        }
        names__fold(ns, locals);
    }
    PyObject *items = PyMapping_Items(locals);
    Py_DECREF(locals);
    if (items == NULL) {
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *kv = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(kv, 0))) {
            continue;
        }
        PyObject *k = PyTuple_GET_ITEM(kv, 0), *v = PyTuple_GET_ITEM(kv, 1);
        /* The value may be referenced directly from the frame's fast locals, through the
         * locals dict, or through a cell for variables closures share. */
        if (names__add(ns, v, NULL, tgc_cut(PyUnicode_FromFormat("local %U", k), TGC_NAME_MAX)) < 0 ||
            names__add(ns, v, locals, tgc_cut(PyUnicode_FromFormat("local %U", k), TGC_NAME_MAX)) < 0 ||
            (self_via != NULL &&
             names__add(ns, v, self_via, tgc_cut(PyUnicode_FromFormat("local %U", k), TGC_NAME_MAX)) < 0)) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return 0;
}

int
tgc_is_generator(PyObject *obj)
{
    return PyGen_Check(obj) || PyCoro_CheckExact(obj) || PyAsyncGen_CheckExact(obj);
}

/* The attribute names of a generator's frame and of what it delegates to (yield from, await):
 * each kind spells them its own way. */
static void
names__generator_attrs(PyObject *obj, const char **frame, const char **awaits)
{
    if (PyCoro_CheckExact(obj)) {
        *frame = "cr_frame";
        *awaits = "cr_await";
    }
    else if (PyAsyncGen_CheckExact(obj)) {
        *frame = "ag_frame";
        *awaits = "ag_await";
    }
    else {
        *frame = "gi_frame";
        *awaits = "gi_yieldfrom";
    }
}

/* A generator's, coroutine's or async generator's references: what it delegates to, and the
 * locals of its frame, which are named as a frame's are. The frame is folded into the generator:
 * since 3.11 it lives inside it and the generator references its locals itself; on 3.10 it is an
 * object of its own that only the generator references, which holds the locals, and is drawn as
 * part of the generator all the same. The getters are C (these types cannot be subclassed);
 * reading the frame makes its frame object (and on 3.10-3.12 the frame's locals dict,
 * names__frame) if none existed: the generator keeps them, so they go to `owned` with it. */
static int
names__generator(tgc_names *ns, PyObject *obj, PyObject *owned)
{
    const char *frame_attr, *awaits_attr;
    names__generator_attrs(obj, &frame_attr, &awaits_attr);
    PyObject *awaits = PyObject_GetAttrString(obj, awaits_attr);  /* new reference */
    if (awaits == NULL) {
        PyErr_Clear();
    }
    else {
        /* only the address is kept; the generator still references it */
        int rc = names__fixed(ns, awaits != Py_None ? awaits : NULL, awaits_attr);
        Py_DECREF(awaits);
        if (rc < 0) {
            return -1;
        }
    }
    PyObject *frame = PyObject_GetAttrString(obj, frame_attr);  /* new reference; None once done */
    if (frame == NULL) {
        PyErr_Clear();
        return 0;
    }
    int rc = 0;
    if (PyFrame_Check(frame)) {
        rc = owned != NULL ? PyList_Append(owned, frame) : 0;
        if (rc == 0) {
            rc = names__fixed(ns, frame, frame_attr);
        }
        if (rc == 0) {
            names__fold(ns, frame);
            rc = names__frame(ns, frame, owned, frame);
        }
    }
    Py_DECREF(frame);
    return rc;
}

int
tgc_names_collect(PyObject *obj, tgc_names *ns, PyObject *owned)
{
    PyTypeObject *tp = Py_TYPE(obj);
    int rc = 0;

    if (PyDict_Check(obj)) {
        rc = names__dict_items(ns, obj, NULL, 0);
    }
    else if (PyList_Check(obj) || PyTuple_Check(obj)) {
        rc = names__sequence(ns, obj, NULL);
    }
    else if (PyAnySet_Check(obj)) {
        /* The set type's own iterator: a subclass's Python __iter__ never runs. */
        PyObject *it = PySet_Type.tp_iter(obj), *item;
        if (it == NULL) {
            return -1;
        }
        while (rc == 0 && (item = PyIter_Next(it)) != NULL) {
            rc = names__fixed(ns, item, "member");
            Py_DECREF(item);  /* the set still holds it; we only keep the address */
        }
        Py_DECREF(it);
        if (rc == 0 && PyErr_Occurred()) {
            rc = -1;
        }
    }
    else if (PyCell_Check(obj)) {
        rc = names__fixed(ns, PyCell_GET(obj), "cell_contents");
    }
    else if (PyMethod_Check(obj)) {
        rc = names__fixed(ns, PyMethod_GET_SELF(obj), "__self__");
        if (rc == 0) {
            rc = names__fixed(ns, PyMethod_GET_FUNCTION(obj), "__func__");
        }
    }
    else if (PyFunction_Check(obj)) {
        rc = names__function(ns, obj);
    }
    else if (PyFrame_Check(obj)) {
        rc = names__frame(ns, obj, owned, NULL);
    }
    else if (tgc_is_generator(obj)) {
        rc = names__generator(ns, obj, owned);
    }
    else if (PyTraceBack_Check(obj)) {
        PyTracebackObject *tb = (PyTracebackObject *)obj;
        rc = names__fixed(ns, (PyObject *)tb->tb_next, "tb_next");
        if (rc == 0) {
            rc = names__fixed(ns, (PyObject *)tb->tb_frame, "tb_frame");
        }
    }
    if (rc < 0) {
        return -1;
    }
    if (PyExceptionInstance_Check(obj)) {
        PyObject *tb = PyException_GetTraceback(obj);     /* new references or NULL */
        PyObject *ctx = PyException_GetContext(obj);
        PyObject *cause = PyException_GetCause(obj);
        rc = names__fixed(ns, tb, "__traceback__");
        if (rc == 0) rc = names__fixed(ns, ctx, "__context__");
        if (rc == 0) rc = names__fixed(ns, cause, "__cause__");
        if (rc == 0) rc = names__fixed(ns, ((PyBaseExceptionObject *)obj)->args, "args");
        Py_XDECREF(tb);
        Py_XDECREF(ctx);
        Py_XDECREF(cause);
        if (rc < 0) {
            return -1;
        }
    }
    if (!PyType_Check(obj) && !PyModule_Check(obj) && !PyFunction_Check(obj)) {
        /* Instance attributes, drawn as the owner's own edges (no separate __dict__ node). A
         * dict made here (3.11+ keeps attributes inline until asked) now belongs to obj. */
        PyObject *d = tgc_compat_instance_dict(obj);
        if (d != NULL) {
            if (PyDict_Check(d)) {
                /* Accounted for first, so a failure below cannot leave it uncounted. */
                rc = owned != NULL ? PyList_Append(owned, d) : 0;
                if (rc == 0) rc = names__fixed(ns, d, "__dict__");
                if (rc == 0) rc = names__dict_items(ns, d, d, 1);
                if (rc == 0) rc = names__dict_items(ns, d, NULL, 1);
                names__fold(ns, d);
            }
            Py_DECREF(d);
            if (rc < 0) {
                return -1;
            }
        }
    }
    else if (PyModule_Check(obj)) {
        PyObject *d = PyModule_GetDict(obj);  /* borrowed */
        if (d != NULL && (names__fixed(ns, d, "__dict__") < 0 ||
                          names__dict_items(ns, d, d, 1) < 0)) {
            return -1;
        }
        names__fold(ns, d);
    }
    if (names__members(ns, obj) < 0) {
        return -1;
    }
    if (tp->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        return names__fixed(ns, (PyObject *)tp, "__class__");
    }
    return 0;
}

PyObject *
tgc_type_name(PyObject *obj)
{
    const char *name = Py_TYPE(obj)->tp_name;
    const char *dot = strrchr(name, '.');
    return tgc_cut(PyUnicode_FromString(dot ? dot + 1 : name), TGC_NAME_MAX);
}

PyObject *
tgc_type_qualname(PyTypeObject *tp)
{
    if (!PyType_HasFeature(tp, Py_TPFLAGS_HEAPTYPE)) {
        return tgc_cut(PyUnicode_FromString(tp->tp_name), TGC_NAME_MAX);  /* "module.name" */
    }
    /* A class's own fields, read without attribute lookup: no metaclass code runs. */
    PyObject *qual = ((PyHeapTypeObject *)tp)->ht_qualname;  /* borrowed */
    PyObject *mod = tp->tp_dict ? PyDict_GetItemString(tp->tp_dict, "__module__") : NULL;
    if (qual == NULL || !PyUnicode_Check(qual)) {
        const char *dot = strrchr(tp->tp_name, '.');
        return tgc_cut(PyUnicode_FromString(dot ? dot + 1 : tp->tp_name), TGC_NAME_MAX);
    }
    if (mod == NULL || !PyUnicode_Check(mod) ||
        PyUnicode_CompareWithASCIIString(mod, "builtins") == 0) {
        return tgc_cut(Py_NewRef(qual), TGC_NAME_MAX);
    }
    return tgc_cut(PyUnicode_FromFormat("%U.%U", mod, qual), TGC_NAME_MAX);
}

/* repr() that cannot hurt: a raising or non-str __repr__ becomes a placeholder, newlines become
 * spaces, and the result is cut to `limit` characters. New reference. */
static PyObject *
names__safe_repr(PyObject *obj, Py_ssize_t limit)
{
    PyObject *r = PyObject_Repr(obj);
    if (r == NULL) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        r = PyUnicode_FromFormat("<repr raised %s>",
                                 type ? ((PyTypeObject *)type)->tp_name : "an error");
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return r;
    }
    return tgc_cut(r, limit);
}

/* "Holder.run at file.py:12": a generator's qualified name and where its frame stands (the line
 * it is suspended at, or its def line before it started); "Holder.run, finished" once its frame
 * is gone. C getters only. New reference. */
static PyObject *
names__generator_where(PyObject *obj)
{
    const char *frame_attr, *awaits_attr;
    names__generator_attrs(obj, &frame_attr, &awaits_attr);
    PyObject *q = PyObject_GetAttrString(obj, "__qualname__");  /* new references */
    PyObject *frame = q != NULL ? PyObject_GetAttrString(obj, frame_attr) : NULL;
    PyObject *r = NULL;
    if (frame == NULL || !PyUnicode_Check(q)) {
        PyErr_Clear();
        r = PyUnicode_FromString("");
    }
    else if (PyFrame_Check(frame)) {
        PyCodeObject *code = PyFrame_GetCode((PyFrameObject *)frame);  /* new reference */
        r = PyUnicode_FromFormat("%U at %U:%d", q, code->co_filename,
                                 PyFrame_GetLineNumber((PyFrameObject *)frame));
        Py_DECREF(code);
    }
    else {
        r = PyUnicode_FromFormat("%U, finished", q);
    }
    Py_XDECREF(q);
    Py_XDECREF(frame);
    return r;
}

static PyObject *
names__describe(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (PyDict_Check(obj)) {
        return PyUnicode_FromFormat("%zd items", PyDict_GET_SIZE(obj));
    }
    if (PyList_Check(obj) || PyTuple_Check(obj)) {
        return PyUnicode_FromFormat("%zd items", Py_SIZE(obj));
    }
    if (PyAnySet_Check(obj)) {
        return PyUnicode_FromFormat("%zd items", PySet_GET_SIZE(obj));
    }
    if (PyFunction_Check(obj)) {
        PyObject *q = ((PyFunctionObject *)obj)->func_qualname;
        return q && PyUnicode_Check(q) ? Py_NewRef(q) : PyUnicode_FromString("");
    }
    if (PyMethod_Check(obj)) {
        PyObject *f = PyMethod_GET_FUNCTION(obj);
        PyObject *q = PyFunction_Check(f) ? ((PyFunctionObject *)f)->func_qualname : NULL;
        return q && PyUnicode_Check(q) ? PyUnicode_FromFormat("bound %U", q)
                                       : PyUnicode_FromString("bound method");
    }
    if (PyFrame_Check(obj)) {
        PyCodeObject *code = PyFrame_GetCode((PyFrameObject *)obj);  /* new reference */
        PyObject *r = PyUnicode_FromFormat("%U at %U:%d", code->co_name, code->co_filename,
                                           PyFrame_GetLineNumber((PyFrameObject *)obj));
        Py_DECREF(code);
        return r;
    }
    if (PyTraceBack_Check(obj)) {
        /* Not tb_lineno read raw: from 3.11 it is -1 until the tb_lineno getter (C, no user
         * code) computes it from the frame's instruction. */
        PyObject *line = PyObject_GetAttrString(obj, "tb_lineno");  /* new reference */
        long n = line != NULL ? PyLong_AsLong(line) : -1;
        Py_XDECREF(line);
        PyErr_Clear();
        return n >= 0 ? PyUnicode_FromFormat("line %ld", n) : PyUnicode_FromString("line ?");
    }
    if (tgc_is_generator(obj)) {
        return names__generator_where(obj);
    }
    if (PyCode_Check(obj)) {
        return PyUnicode_FromFormat("%U", ((PyCodeObject *)obj)->co_name);
    }
    if (PyModule_Check(obj)) {
        const char *name = PyModule_GetName(obj);
        if (name == NULL) {
            PyErr_Clear();
            name = "?";
        }
        return PyUnicode_FromString(name);
    }
    if (PyType_Check(obj)) {
        return PyUnicode_FromString(((PyTypeObject *)obj)->tp_name);
    }
    if (PyCell_Check(obj)) {
        return PyUnicode_FromString(PyCell_GET(obj) ? "" : "empty");
    }
    if (tp->tp_repr == PyBaseObject_Type.tp_repr) {
        return PyUnicode_FromString("");  /* "<Foo object at 0x..>" says nothing the type does not */
    }
    return names__safe_repr(obj, 60);
}

PyObject *
tgc_describe(PyObject *obj)
{
    return tgc_cut(names__describe(obj), TGC_NAME_MAX);
}
