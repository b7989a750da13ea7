/* walk.c: the MemReporter's C half (contract in reporter.h). Finds every live tensor object by
 * walking the collector's object lists (PyUnstable_GC_VisitObjects on 3.12+, gc.get_objects()
 * before), and reads what a report needs of each tensor through tensor/ (TensorBase's own
 * descriptors), so no Python-level isinstance, subclass property or deprecation warning ever
 * runs. Names are given in Python (tensorgc/reporter/__init__.py); this file only finds and
 * measures. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reporter.h"

/* A million objects are mostly of a few types: remember the last types that are not tensors,
 * so most objects cost one pointer compare instead of an MRO walk. The types stay alive while
 * objects of them are on the collector's lists, which the walk does not change. */
typedef struct {
    PyTypeObject *tensor_type;
    tgc_tensor_typecache types;
    PyObject *out;
    int failed;
} walk_ctx;

static inline int
walk__is_tensor(walk_ctx *c, PyObject *op)
{
    return tgc_tensor_typecache_check(&c->types, c->tensor_type, op);
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
tgc_walk_tensors(tgc_reporter *r)
{
    tgc_tensor_state *tn = r->tensor;
    if (tgc_tensor_resolve(tn) <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "tensorgc: torch is not imported");
        }
        return NULL;
    }
    PyObject *out = PyList_New(0);  /* new reference */
    if (out == NULL) {
        return NULL;
    }
    walk_ctx c = {(PyTypeObject *)tn->type, {{NULL}, 0, {NULL}}, out, 0};
#if TGC_HAVE_GC_VISIT
    PyUnstable_GC_VisitObjects(walk__visit, &c);
    if (c.failed) {
        Py_DECREF(out);
        return NULL;
    }
#else
    PyObject *all = PyObject_CallMethod(r->gc_module, "get_objects", NULL);  /* new */
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

/* A device's type (new reference, str) and index (new reference, int or None) from its str,
 * "cuda:0" or "cpu", for a tensor whose .device could not be read. 0, or -1 with an exception. */
static int
walk__parse_device(PyObject *device_s, PyObject **type, PyObject **index)
{
    Py_ssize_t colon = PyUnicode_FindChar(device_s, ':', 0, PyUnicode_GET_LENGTH(device_s), 1);
    if (colon == -2) {
        return -1;
    }
    if (colon < 0) {
        *type = Py_NewRef(device_s);
        *index = Py_NewRef(Py_None);
        return 0;
    }
    PyObject *digits = PyUnicode_Substring(device_s, colon + 1, PyUnicode_GET_LENGTH(device_s));
    *index = digits ? PyLong_FromUnicodeObject(digits, 10) : NULL;
    Py_XDECREF(digits);
    if (*index == NULL) {
        PyErr_Clear();
        *index = Py_NewRef(Py_None);
    }
    *type = PyUnicode_Substring(device_s, 0, colon);
    return *type ? 0 : -1;
}

/* The number of elements: the product of the sizes when all are plain, else what numel() says
 * (a nested tensor's ragged size), else None. New reference. */
static PyObject *
walk__numel(tgc_tensor_state *tn, PyObject *t, PyObject *shape)
{
    Py_ssize_t numel = 1;
    for (Py_ssize_t i = 0; PyTuple_Check(shape) && i < PyTuple_GET_SIZE(shape); i++) {
        PyObject *d_o = PyTuple_GET_ITEM(shape, i);
        Py_ssize_t d = PyLong_Check(d_o) ? PyLong_AsSsize_t(d_o) : -1;
        if (d < 0) {
            if (d_o == Py_None) {
                goto ask;
            }
            if (PyErr_Occurred()) {
                return NULL;
            }
            d = 0;
        }
        /* a subclass may report any shape: saturate rather than overflow */
        numel = d == 0 ? 0 : numel > PY_SSIZE_T_MAX / d ? PY_SSIZE_T_MAX : numel * d;
    }
    if (PyTuple_Check(shape)) {
        return PyLong_FromSsize_t(numel);
    }
ask:;
    PyObject *m = tn->attr[TGC_TA_NUMEL];
    PyObject *n = m ? PyObject_CallOneArg(m, t) : NULL;
    if (n == NULL || !PyLong_Check(n)) {
        PyErr_Clear();
        Py_XSETREF(n, Py_NewRef(Py_None));
    }
    return n;
}

/* One tensor: (storage_ptr, storage_nbytes, device, device_type, device_index, shape, dtype,
 * numel, is_sparse, storage, parts, nbytes, no_storage), new reference. storage_ptr and
 * storage_nbytes are its own storage's ((0, 0) for a meta tensor, None where it has none: sparse,
 * mkldnn, wrapper subclasses). storage is how nbytes, its real bytes, were counted
 * (tensor/layout.c); parts is None when they are the tensor's own, else ((name, tensor), ...) of
 * the tensors that hold them (a sparse tensor's indices and values, a wrapper's inner tensors);
 * no_storage says why nothing is counted (e.g. "meta"), else None. */
PyObject *
tgc_walk_row(tgc_reporter *r, PyObject *t)
{
    tgc_tensor_state *tn = r->tensor;
    PyObject *shape = NULL, *dtype = NULL, *dtype_s = NULL, *device = NULL, *numel = NULL;
    PyObject *device_s = NULL, *dev_type = NULL, *dev_index = NULL, *sp = NULL, *parts = NULL;
    PyObject *row = NULL;
    tgc_tensor_bytes bytes;
    int measured = 0;
    if (!tgc_tensor_check(tn, t)) {
        PyErr_Format(PyExc_TypeError, "expected a tensor, got %.100s", Py_TYPE(t)->tp_name);
        return NULL;
    }
    shape = tgc_tensor_shape(tn, t);
    dtype = shape ? tgc_tensor_get(tn->get_dtype, t) : NULL;
    dtype_s = dtype ? tgc_tensor_str(tn, dtype) : NULL;
    if (dtype_s != NULL && PyUnicode_GET_LENGTH(dtype_s) > 6 &&
        PyUnicode_Tailmatch(dtype_s, tn->str_torch_dot, 0, 6, -1) == 1) {
        Py_SETREF(dtype_s, PyUnicode_Substring(dtype_s, 6, PyUnicode_GET_LENGTH(dtype_s)));
    }
    sp = dtype_s ? tgc_tensor_get(tn->get_is_sparse, t) : NULL;
    int is_sparse = sp ? PyObject_IsTrue(sp) : -1;
    if (is_sparse < 0) {
        goto done;
    }
    /* A wrapper subclass may answer .device through a __torch_dispatch__ that raises: its device
     * is then its first inner tensor's, once measured. */
    device = tgc_tensor_get(tn->get_device, t);
    device_s = device ? tgc_tensor_str(tn, device) : NULL;
    dev_type = device_s ? PyObject_GetAttr(device, tn->str_type) : NULL;
    dev_index = dev_type ? PyObject_GetAttr(device, tn->str_index) : NULL;
    if (dev_index == NULL) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            goto done;
        }
        PyErr_Clear();
        Py_CLEAR(device_s);
        Py_CLEAR(dev_type);
    }
    const char *dt = dev_type ? PyUnicode_AsUTF8(dev_type) : NULL;
    PyErr_Clear();
    tgc_tensor_measure(tn, t, dt, device_s, 1, NULL, &bytes);
    measured = 1;
    if (device_s == NULL) {
        device_s = bytes.nparts > 0 && bytes.parts[0].device_s
                       ? Py_NewRef(bytes.parts[0].device_s) : PyUnicode_FromString("unknown");
        if (device_s == NULL || walk__parse_device(device_s, &dev_type, &dev_index) < 0) {
            goto done;
        }
    }
    numel = walk__numel(tn, t, shape);
    if (numel == NULL) {
        goto done;
    }
    /* Its own storage's address and size; a meta tensor's (0, 0): it holds nothing. */
    int meta = bytes.how == tn->how[TGC_HOW_META];
    PyObject *own_ptr = bytes.own ? PyLong_FromUnsignedLongLong(bytes.parts[0].ptr)
                        : meta ? PyLong_FromLong(0) : Py_NewRef(Py_None);
    PyObject *own_nb = bytes.own ? PyLong_FromUnsignedLongLong(bytes.parts[0].nbytes)
                       : meta ? PyLong_FromLong(0) : Py_NewRef(Py_None);
    PyObject *nb = PyLong_FromUnsignedLongLong(bytes.nbytes);
    PyObject *none = bytes.none ? PyUnicode_FromString(bytes.none) : Py_NewRef(Py_None);
    if (bytes.own || bytes.nparts == 0 || (bytes.nparts == 1 && bytes.parts[0].name == NULL)) {
        parts = Py_NewRef(Py_None);
    }
    else if ((parts = PyTuple_New(bytes.nparts)) != NULL) {
        for (int i = 0; i < bytes.nparts; i++) {
            const tgc_tensor_part *p = &bytes.parts[i];
            PyObject *pair = PyTuple_Pack(2, p->name ? p->name : Py_None, p->tensor);
            if (pair == NULL) {
                Py_CLEAR(parts);
                break;
            }
            PyTuple_SET_ITEM(parts, i, pair);  /* steals pair */
        }
    }
    if (own_ptr && own_nb && nb && none && parts) {
        row = PyTuple_Pack(13, own_ptr, own_nb, device_s, dev_type, dev_index, shape, dtype_s,
                           numel, is_sparse ? Py_True : Py_False, bytes.how, parts, nb, none);
    }
    Py_XDECREF(own_ptr);
    Py_XDECREF(own_nb);
    Py_XDECREF(nb);
    Py_XDECREF(none);
done:
    Py_XDECREF(shape); Py_XDECREF(dtype); Py_XDECREF(dtype_s); Py_XDECREF(numel);
    Py_XDECREF(device); Py_XDECREF(device_s); Py_XDECREF(dev_type); Py_XDECREF(dev_index);
    Py_XDECREF(sp); Py_XDECREF(parts);
    if (measured) {
        tgc_tensor_bytes_clear(&bytes);
    }
    return row;
}

/* Rows for every tensor of the list (new reference), with torch's subclass dispatch off
 * (DisableTorchFunctionSubclass, where torch has it) so a subclass's __torch_function__ does not
 * run for .shape and friends. Works on a tuple copy that also keeps each tensor alive: a row can
 * still run Python (a torch function mode) that changes the caller's list. */
PyObject *
tgc_walk_rows(tgc_reporter *r, PyObject *tensors)
{
    PyObject *items = PyList_AsTuple(tensors);  /* new reference */
    if (items == NULL) {
        return NULL;
    }
    tgc_tensor_nodispatch guard;
    tgc_tensor_nodispatch_enter(r->tensor, &guard);
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *row = tgc_walk_row(r, PyTuple_GET_ITEM(items, i));
        if (row == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, row);  /* steals row */
    }
    tgc_tensor_nodispatch_exit(&guard);  /* keeps a row's error */
    Py_DECREF(items);
    return out;
}
