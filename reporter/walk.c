/* walk.c: the MemReporter's C half. Finds every live tensor object by walking the collector's
 * object lists (PyUnstable_GC_VisitObjects on 3.12+, gc.get_objects() before), and reads what a
 * report needs of each tensor through TensorBase's own descriptors, so no Python-level
 * isinstance, subclass property or deprecation warning ever runs. Names are given in Python
 * (tensorgc/reporter.py); this file only finds and measures. */
#include "tgc.h"

/* A million objects are mostly of a few types: remember the last types that are not tensors,
 * so most objects cost one pointer compare instead of an MRO walk. The types stay alive while
 * objects of them are on the collector's lists, which the walk does not change. */
typedef struct {
    PyTypeObject *tensor_type;
    tgc_typecache types;
    PyObject *out;
    int failed;
} walk_ctx;

static inline int
walk__is_tensor(walk_ctx *c, PyObject *op)
{
    return tgc_typecache_is_tensor(&c->types, c->tensor_type, op);
}

#if TGC_HAVE_GC_VISIT
/* Called for every gc-tracked object with a borrowed reference, automatic gc off meanwhile. */
static int
walk__visit(PyObject *op, void *arg)
{
    walk_ctx *c = arg;
    if (walk__is_tensor(c, op) && PyList_Append(c->out, op) < 0) {
        c->failed = 1;
        return 0;  /* stop */
    }
    return 1;
}
#endif

PyObject *
tgc_walk_tensors(tgc_state *st)
{
    if (tgc_torch_resolve(st) <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "tensorgc: torch is not imported");
        }
        return NULL;
    }
    PyObject *out = PyList_New(0);  /* new reference */
    if (out == NULL) {
        return NULL;
    }
    walk_ctx c = {(PyTypeObject *)st->tensor_type, {{NULL, NULL, NULL, NULL}, 0}, out, 0};
#if TGC_HAVE_GC_VISIT
    PyUnstable_GC_VisitObjects(walk__visit, &c);
    if (c.failed) {
        Py_DECREF(out);
        return NULL;
    }
#else
    PyObject *all = PyObject_CallMethod(st->gc_module, "get_objects", NULL);  /* new */
    if (all == NULL || !PyList_Check(all)) {
        Py_XDECREF(all);
        Py_DECREF(out);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "gc.get_objects() did not return a list");
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyObject *op = PyList_GET_ITEM(all, i);  /* borrowed */
        if (walk__is_tensor(&c, op) && PyList_Append(out, op) < 0) {
            Py_DECREF(all);
            Py_DECREF(out);
            return NULL;
        }
    }
    Py_DECREF(all);
#endif
    return out;
}

static PyObject *
walk__get(PyObject *descr, PyObject *obj)
{
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

/* str(dtype) / str(device), cached in st->torch_strs by object (shared with report.c). */
static PyObject *
walk__str(tgc_state *st, PyObject *v)
{
    PyObject *s = st->torch_strs ? PyDict_GetItemWithError(st->torch_strs, v) : NULL;  /* borrowed */
    if (s != NULL) {
        return Py_NewRef(s);
    }
    PyErr_Clear();  /* an unhashable dtype/device from a subclass: just not cached */
    s = PyObject_Str(v);
    if (s != NULL && st->torch_strs != NULL && PyDict_GET_SIZE(st->torch_strs) < 256 &&
        PyDict_SetItem(st->torch_strs, v, s) < 0) {
        PyErr_Clear();
    }
    return s;
}

/* One tensor: (storage_ptr, storage_nbytes, device, device_type, device_index, shape, dtype,
 * numel, is_sparse), new reference. Sparse tensors have no storage of their own: storage_ptr
 * and storage_nbytes are None and the caller measures _indices() and _values(). */
PyObject *
tgc_tensor_row(tgc_state *st, PyObject *t)
{
    PyObject *size = NULL, *shape = NULL, *dtype = NULL, *dtype_s = NULL, *device = NULL;
    PyObject *device_s = NULL, *dev_type = NULL, *dev_index = NULL, *sp = NULL, *storage = NULL;
    PyObject *nb = NULL, *dp = NULL, *row = NULL;
    if (!PyObject_TypeCheck(t, (PyTypeObject *)st->tensor_type)) {
        PyErr_Format(PyExc_TypeError, "expected a tensor, got %.100s", Py_TYPE(t)->tp_name);
        return NULL;
    }
    size = walk__get(st->torch_get_shape, t);
    shape = size ? PySequence_Tuple(size) : NULL;
    dtype = shape ? walk__get(st->torch_get_dtype, t) : NULL;
    dtype_s = dtype ? walk__str(st, dtype) : NULL;
    if (dtype_s != NULL && PyUnicode_GET_LENGTH(dtype_s) > 6 &&
        PyUnicode_Tailmatch(dtype_s, st->str_torch_dot, 0, 6, -1) == 1) {
        Py_SETREF(dtype_s, PyUnicode_Substring(dtype_s, 6, PyUnicode_GET_LENGTH(dtype_s)));
    }
    device = dtype_s ? walk__get(st->torch_get_device, t) : NULL;
    device_s = device ? walk__str(st, device) : NULL;
    dev_type = device_s ? PyObject_GetAttr(device, st->str_type) : NULL;
    dev_index = dev_type ? PyObject_GetAttr(device, st->str_index) : NULL;
    sp = dev_index ? walk__get(st->torch_is_sparse_getter, t) : NULL;
    if (sp == NULL) {
        goto done;
    }
    Py_ssize_t numel = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        if (d < 0) {
            if (PyErr_Occurred()) {
                goto done;
            }
            d = 0;
        }
        /* a subclass may report any shape: saturate rather than overflow */
        numel = d == 0 ? 0 : numel > PY_SSIZE_T_MAX / d ? PY_SSIZE_T_MAX : numel * d;
    }
    int is_sparse = PyObject_IsTrue(sp);
    if (is_sparse < 0) {
        goto done;
    }
    if (is_sparse) {
        nb = Py_NewRef(Py_None);
        dp = Py_NewRef(Py_None);
    }
    else {
        /* Other layouts (sparse CSR, nested, meta-like wrappers) may refuse: measure nothing. */
        storage = PyObject_CallOneArg(st->torch_untyped_storage, t);
        nb = storage ? PyObject_CallMethodNoArgs(storage, st->str_nbytes) : NULL;
        dp = nb ? PyObject_CallMethodNoArgs(storage, st->str_data_ptr) : NULL;
        if (dp == NULL) {
            PyErr_Clear();
            Py_XSETREF(nb, Py_NewRef(Py_None));
            dp = Py_NewRef(Py_None);
        }
    }
    row = Py_BuildValue("(OOOOOOOnO)", dp, nb, device_s, dev_type, dev_index, shape, dtype_s,
                        numel, is_sparse ? Py_True : Py_False);
done:
    Py_XDECREF(size); Py_XDECREF(shape); Py_XDECREF(dtype); Py_XDECREF(dtype_s);
    Py_XDECREF(device); Py_XDECREF(device_s); Py_XDECREF(dev_type); Py_XDECREF(dev_index);
    Py_XDECREF(sp); Py_XDECREF(storage); Py_XDECREF(nb); Py_XDECREF(dp);
    return row;
}

/* Rows for every tensor of the list (new reference), with torch's subclass dispatch off
 * (DisableTorchFunctionSubclass, where torch has it) so a subclass's __torch_function__ does not
 * run for .shape and friends. Works on a tuple copy that also keeps each tensor alive: a row can
 * still run Python (a torch function mode) that changes the caller's list. */
PyObject *
tgc_tensor_rows(tgc_state *st, PyObject *tensors)
{
    PyObject *items = PyList_AsTuple(tensors);  /* new reference */
    if (items == NULL) {
        return NULL;
    }
    PyObject *ctx = NULL, *entered = NULL;
    if (st->torch_no_subclass_dispatch != NULL) {
        ctx = PyObject_CallNoArgs(st->torch_no_subclass_dispatch);
        entered = ctx ? PyObject_CallMethod(ctx, "__enter__", NULL) : NULL;
        if (entered == NULL) {
            PyErr_Clear();  /* dispatch stays on: subclass code may run, nothing worse */
            Py_CLEAR(ctx);
        }
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *row = tgc_tensor_row(st, PyTuple_GET_ITEM(items, i));
        if (row == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, row);  /* steals row */
    }
    if (ctx != NULL) {
        PyObject *exc, *val, *tb;
        PyErr_Fetch(&exc, &val, &tb);  /* keep a row's error across __exit__ */
        PyObject *r = PyObject_CallMethod(ctx, "__exit__", "OOO", Py_None, Py_None, Py_None);
        if (r == NULL) {
            PyErr_Clear();
        }
        Py_XDECREF(r);
        PyErr_Restore(exc, val, tb);
        Py_DECREF(ctx);
        Py_XDECREF(entered);
    }
    Py_DECREF(items);
    return out;
}
