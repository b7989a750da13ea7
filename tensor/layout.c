/* layout.c: a tensor's shape, and how many bytes it holds whatever its layout: one storage of its
 * own (strided, quantized, strided nested), the index and value tensors of a sparse one, an mkldnn
 * tensor's size (opaque: no storage to read), the inner tensors of a wrapper subclass (jagged
 * nested tensors among them), or nothing (meta). Contract in include/tensorgc/tensor.h; cycles/
 * (CycleReport.tensors) and reporter/ (MemReporter) read tensors through it. Every failure is
 * caught here: an odd tensor gets a best-effort count and an explanation of how it was made,
 * never an exception. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/buf.h"
#include "tensorgc/compat.h"
#include "tensorgc/tensor.h"

/* A TensorBase getter's value (new reference), or NULL with no exception: absent from this torch,
 * or failed (a wrapper subclass may answer through a __torch_dispatch__ that raises). */
static PyObject *
layout__get(tgc_tensor_state *tn, int which, PyObject *t)
{
    PyObject *d = tn->attr[which];
    PyObject *v = d ? Py_TYPE(d)->tp_descr_get(d, t, (PyObject *)Py_TYPE(t)) : NULL;
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* A boolean getter: 1, 0, or -1 when it cannot be read. */
static int
layout__flag(tgc_tensor_state *tn, int which, PyObject *t)
{
    PyObject *v = layout__get(tn, which, t);
    int r = v ? PyObject_IsTrue(v) : -1;
    Py_XDECREF(v);
    if (r < 0) {
        PyErr_Clear();
    }
    return r;
}

/* A TensorBase method called on t, with one int argument when i >= 0. New reference, or NULL
 * with no exception. */
static PyObject *
layout__call(tgc_tensor_state *tn, int which, PyObject *t, Py_ssize_t i)
{
    PyObject *m = tn->attr[which];
    PyObject *v = NULL;
    if (m != NULL) {
        v = i < 0 ? PyObject_CallOneArg(m, t) : PyObject_CallFunction(m, "On", t, i);
    }
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* t's own storage: 0 with its size and address, -1 when it has none that can be read (sparse and
 * mkldnn tensors refuse; a wrapper subclass's storage has no data pointer). */
static int
layout__storage(tgc_tensor_state *tn, PyObject *t, unsigned long long *nbytes,
                unsigned long long *ptr)
{
    PyObject *s = PyObject_CallOneArg(tn->untyped_storage, t);     /* new reference */
    /* A storage on the meta device holds nothing, whatever device its tensor says (a
     * FakeTensor of torch.compile's tracing: "cpu" outside, meta inside); its data_ptr() would
     * warn. */
    PyObject *dev = s ? PyObject_GetAttr(s, tn->str_device) : NULL;
    /* str(), cached per device (tgc_tensor_str): reading .type makes a new str every time, the
     * largest part of measuring a plain tensor. "meta", or "meta:N" where an index was given. */
    PyObject *ds = dev ? tgc_tensor_str(tn, dev) : NULL;
    const char *du = ds != NULL && PyUnicode_Check(ds) ? PyUnicode_AsUTF8(ds) : NULL;
    int meta = du != NULL && strncmp(du, "meta", 4) == 0 && (du[4] == '\0' || du[4] == ':');
    Py_XDECREF(dev);
    Py_XDECREF(ds);
    PyErr_Clear();
    if (meta) {
        Py_DECREF(s);
        return 1;
    }
    PyObject *nb = s ? PyObject_CallMethodNoArgs(s, tn->str_nbytes) : NULL;  /* interned names */
    PyObject *dp = nb ? PyObject_CallMethodNoArgs(s, tn->str_data_ptr) : NULL;
    int rc = -1;
    if (dp != NULL) {
        *nbytes = PyLong_AsUnsignedLongLong(nb);
        *ptr = PyLong_AsUnsignedLongLong(dp);
        rc = PyErr_Occurred() ? -1 : 0;
    }
    Py_XDECREF(s);
    Py_XDECREF(nb);
    Py_XDECREF(dp);
    PyErr_Clear();
    return rc;
}

/* The layouts told apart by str(t.layout); strided and unknown ones are L_OTHER. */
enum { L_OTHER, L_COO, L_CSR, L_CSC, L_BSR, L_BSC, L_MKLDNN, L_JAGGED };

static int
layout__kind(tgc_tensor_state *tn, PyObject *t)
{
    static const struct {
        const char *name;
        int kind;
    } known[] = {{"torch.sparse_coo", L_COO}, {"torch.sparse_csr", L_CSR},
                 {"torch.sparse_csc", L_CSC}, {"torch.sparse_bsr", L_BSR},
                 {"torch.sparse_bsc", L_BSC}, {"torch._mkldnn", L_MKLDNN},
                 {"torch.jagged", L_JAGGED}};
    PyObject *layout = layout__get(tn, TGC_TA_LAYOUT, t);     /* new reference or NULL */
    PyObject *s = layout ? tgc_tensor_str(tn, layout) : NULL;  /* new reference or NULL */
    const char *u = s ? PyUnicode_AsUTF8(s) : NULL;           /* lives as long as s */
    int kind = L_OTHER;
    for (size_t i = 0; u != NULL && i < sizeof(known) / sizeof(known[0]); i++) {
        if (strcmp(u, known[i].name) == 0) {
            kind = known[i].kind;
        }
    }
    Py_XDECREF(layout);
    Py_XDECREF(s);
    PyErr_Clear();
    return kind;
}

typedef struct {
    tgc_tensor_state *tn;
    tgc_tensor_bytes *out;
    int keep;            /* hold the parts' tensors */
    int left_out;        /* a part was not counted: TGC_PARTS_MAX or TGC_PARTS_DEPTH reached */
    const char *via;     /* how the top wrapper's inner tensors were found */
    PyObject *owned;     /* borrowed list, or NULL: where an instance dict made here goes */
} measure;

/* name + "." + leaf, or leaf alone at the top (both borrowed). New reference, NULL on failure. */
static PyObject *
layout__name(PyObject *name, PyObject *leaf)
{
    PyObject *r = name ? PyUnicode_FromFormat("%U.%U", name, leaf) : Py_NewRef(leaf);
    if (r == NULL) {
        PyErr_Clear();
    }
    return r;
}

/* Adds a part (name and device_s borrowed; device_s NULL: t's device is read here). */
static void
layout__part(measure *m, PyObject *t, PyObject *name, PyObject *device_s,
             unsigned long long nbytes, unsigned long long ptr)
{
    tgc_tensor_bytes *o = m->out;
    if (o->nparts == TGC_PARTS_MAX) {
        m->left_out = 1;
        return;
    }
    tgc_tensor_part *p = &o->parts[o->nparts++];
    p->name = Py_XNewRef(name);
    p->tensor = m->keep ? Py_NewRef(t) : NULL;
    if (device_s != NULL) {
        p->device_s = Py_NewRef(device_s);
    }
    else {
        PyObject *d = m->tn->get_device;
        PyObject *dev = Py_TYPE(d)->tp_descr_get(d, t, (PyObject *)Py_TYPE(t));  /* new or NULL */
        p->device_s = dev ? tgc_tensor_str(m->tn, dev) : NULL;
        Py_XDECREF(dev);
        PyErr_Clear();
    }
    p->nbytes = nbytes;
    p->ptr = ptr;
}

/* One index or value tensor of a sparse t (method `which`), as the part `leaf`. */
static void
layout__sparse_part(measure *m, PyObject *t, PyObject *name, int which, const char *leaf,
                    PyObject *device_s)
{
    PyObject *sub = layout__call(m->tn, which, t, -1);  /* new reference or NULL */
    PyObject *leaf_s = sub ? PyUnicode_InternFromString(leaf) : NULL;
    PyObject *nm = leaf_s ? layout__name(name, leaf_s) : NULL;
    unsigned long long nb = 0, ptr = 0;
    if (nm != NULL && layout__storage(m->tn, sub, &nb, &ptr) == 0) {
        layout__part(m, sub, nm, device_s, nb, ptr);
    }
    Py_XDECREF(sub);
    Py_XDECREF(leaf_s);
    Py_XDECREF(nm);
    PyErr_Clear();
}

static int layout__add(measure *m, PyObject *t, PyObject *name, const char *dev_type,
                       PyObject *device_s, int depth);

/* Up to TGC_PARTS_MAX inner tensors of a wrapper subclass t, as new references in names[] and
 * vals[]: those its __tensor_flatten__ names (read with getattr, as torch.compile reads them),
 * else the tensors among the first 64 entries of its instance __dict__ when t dispatches to
 * Python (_make_wrapper_subclass) or is jagged. Both may run the subclass's Python code; its
 * errors are dropped. Returns how many, or -1 when t is not a wrapper. */
static int
layout__inner_list(measure *m, PyObject *t, int top, int jagged, PyObject **names,
                   PyObject **vals)
{
    tgc_tensor_state *tn = m->tn;
    int n = 0;
    PyObject *fn = PyObject_GetAttr(t, tn->str_flatten);  /* new reference or NULL */
    PyObject *res = fn ? PyObject_CallNoArgs(fn) : NULL;
    Py_XDECREF(fn);
    /* a tuple copy: the getattrs below run Python code that could change a list */
    PyObject *attrs = res && PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 2
                          ? PySequence_Tuple(PyTuple_GET_ITEM(res, 0)) : NULL;  /* new */
    Py_XDECREF(res);
    PyErr_Clear();
    if (attrs != NULL) {
        m->via = top ? "__tensor_flatten__" : m->via;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(attrs); i++) {
            PyObject *key = PyTuple_GET_ITEM(attrs, i);  /* borrowed; attrs holds it */
            PyObject *v = PyUnicode_Check(key) ? PyObject_GetAttr(t, key) : NULL;
            PyErr_Clear();
            if (v == NULL || v == t || !tgc_tensor_check(tn, v)) {
                Py_XDECREF(v);  /* None (an optional part) or not a tensor */
                continue;
            }
            if (n == TGC_PARTS_MAX) {
                m->left_out = 1;
                Py_DECREF(v);
                break;
            }
            names[n] = Py_NewRef(key);
            vals[n++] = v;
        }
        Py_DECREF(attrs);
        return n;
    }
    if (!jagged && layout__flag(tn, TGC_TA_PY_DISPATCH, t) != 1) {
        return -1;
    }
    m->via = top ? "__dict__" : m->via;
    PyObject *d = tgc_compat_instance_dict(t);  /* new reference or NULL */
    /* A dict made here (3.12+ keeps attributes inline until asked) now belongs to t and holds
     * its inner tensors: the garbage list must own it too, or the check before freeing would
     * take its references for outside ones (as graph/names.c does). */
    if (d != NULL && m->owned != NULL && PyList_Append(m->owned, d) < 0) {
        PyErr_Clear();
        Py_CLEAR(d);  /* not accounted for: not read either */
    }
    PyObject *key, *v;
    Py_ssize_t pos = 0;
    /* Only reads the dict (no Python code runs while it is walked), borrowed items. */
    for (int seen = 0; d != NULL && seen < 64 && PyDict_Next(d, &pos, &key, &v); seen++) {
        if (!PyUnicode_Check(key) || v == t || !tgc_tensor_check(tn, v)) {
            continue;
        }
        if (n == TGC_PARTS_MAX) {
            m->left_out = 1;
            break;
        }
        names[n] = Py_NewRef(key);
        vals[n++] = Py_NewRef(v);
    }
    Py_XDECREF(d);
    return n;
}

/* Adds the inner tensors of a wrapper subclass t. 1 when t is a wrapper, 0 when not. */
static int
layout__inner(measure *m, PyObject *t, PyObject *name, int depth, int jagged)
{
    PyObject *names[TGC_PARTS_MAX], *vals[TGC_PARTS_MAX];
    int n = layout__inner_list(m, t, depth == 0, jagged, names, vals);
    for (int i = 0; i < n; i++) {
        PyObject *nm = layout__name(name, names[i]);
        if (nm != NULL) {
            layout__add(m, vals[i], nm, NULL, NULL, depth + 1);
        }
        Py_XDECREF(nm);
        Py_DECREF(names[i]);
        Py_DECREF(vals[i]);
    }
    return n >= 0;
}

/* Adds t's storages to m->out as parts called `name` (borrowed; NULL for the measured tensor
 * itself), and says what t turned out to be (TGC_HOW_*). */
static int
layout__add(measure *m, PyObject *t, PyObject *name, const char *dev_type, PyObject *device_s,
            int depth)
{
    tgc_tensor_state *tn = m->tn;
    int meta = dev_type ? strcmp(dev_type, "meta") == 0 : layout__flag(tn, TGC_TA_IS_META, t) == 1;
    if (meta) {
        return TGC_HOW_META;  /* its storage claims bytes at address 0: none are held */
    }
    unsigned long long nb = 0, ptr = 0;
    int rc = layout__storage(tn, t, &nb, &ptr);
    if (rc == 1) {
        return TGC_HOW_META;  /* a meta storage under another device's name: none are held */
    }
    if (rc == 0) {
        layout__part(m, t, name, device_s, nb, ptr);
        if (depth > 0) {
            return TGC_HOW_STRIDED;
        }
        m->out->own = 1;
        if (layout__flag(tn, TGC_TA_IS_NESTED, t) == 1) {
            return TGC_HOW_NESTED;
        }
        return layout__flag(tn, TGC_TA_IS_QUANTIZED, t) == 1 ? TGC_HOW_QUANTIZED : TGC_HOW_STRIDED;
    }
    int kind = layout__kind(tn, t);
    switch (kind) {
    case L_COO:
        layout__sparse_part(m, t, name, TGC_TA_INDICES, "indices", device_s);
        layout__sparse_part(m, t, name, TGC_TA_VALUES_COO, "values", device_s);
        return TGC_HOW_COO;
    case L_CSR:
    case L_BSR:
        layout__sparse_part(m, t, name, TGC_TA_CROW, "crow_indices", device_s);
        layout__sparse_part(m, t, name, TGC_TA_COL, "col_indices", device_s);
        layout__sparse_part(m, t, name, TGC_TA_VALUES, "values", device_s);
        return kind == L_CSR ? TGC_HOW_CSR : TGC_HOW_BSR;
    case L_CSC:
    case L_BSC:
        layout__sparse_part(m, t, name, TGC_TA_CCOL, "ccol_indices", device_s);
        layout__sparse_part(m, t, name, TGC_TA_ROW, "row_indices", device_s);
        layout__sparse_part(m, t, name, TGC_TA_VALUES, "values", device_s);
        return kind == L_CSC ? TGC_HOW_CSC : TGC_HOW_BSC;
    case L_MKLDNN:
        break;
    default: {
        if (depth >= TGC_PARTS_DEPTH) {
            m->left_out = 1;  /* a wrapper this deep is not opened; its nbytes would be a guess */
            return TGC_HOW_EMPTY_WRAPPER;
        }
        int before = m->out->nparts;
        if (layout__inner(m, t, name, depth, kind == L_JAGGED)) {
            if (m->out->nparts == before) {
                return TGC_HOW_EMPTY_WRAPPER;
            }
            return kind == L_JAGGED ? TGC_HOW_JAGGED : TGC_HOW_WRAPPER;
        }
    }
    }
    /* No storage to read: nbytes is element_size * numel, the size of the data it stands for. */
    PyObject *v = layout__get(tn, TGC_TA_NBYTES, t);
    unsigned long long est = v ? PyLong_AsUnsignedLongLong(v) : 0;
    Py_XDECREF(v);
    if (v == NULL || PyErr_Occurred()) {
        PyErr_Clear();
        return TGC_HOW_UNREADABLE;
    }
    layout__part(m, t, name, device_s, est, 0);
    return kind == L_MKLDNN ? TGC_HOW_MKLDNN : TGC_HOW_ESTIMATE;
}

/* "wrapper subclass (__tensor_flatten__): a + b" (new reference, NULL on failure). */
static PyObject *
layout__explain(measure *m, int how)
{
    tgc_buf b = {0};
    if (how == TGC_HOW_JAGGED) {
        tgc_buf_puts(&b, "nested (jagged): ");
    }
    else {
        tgc_buf_printf(&b, "wrapper subclass (%s): ", m->via ? m->via : "inner tensors");
    }
    for (int i = 0; i < m->out->nparts; i++) {
        if (i > 0) {
            tgc_buf_puts(&b, " + ");
        }
        PyObject *nm = m->out->parts[i].name;
        if (nm == NULL || tgc_buf_pystr(&b, nm, 0) < 0) {
            tgc_buf_puts(&b, "?");
        }
    }
    if (m->left_out) {
        tgc_buf_printf(&b, " (more inner tensors not counted: at most %d, %d deep)",
                       TGC_PARTS_MAX, TGC_PARTS_DEPTH);
    }
    PyObject *s = b.oom ? NULL : PyUnicode_DecodeUTF8(b.data, (Py_ssize_t)b.len, "replace");
    tgc_buf_free(&b);
    PyErr_Clear();
    return s;
}

static int
layout__same_device(PyObject *a, PyObject *b)
{
    if (a == b) {
        return 1;
    }
    int eq = a && b ? PyUnicode_Compare(a, b) == 0 : 0;
    PyErr_Clear();
    return eq;
}

void
tgc_tensor_measure(tgc_tensor_state *tn, PyObject *t, const char *dev_type, PyObject *device_s,
                   int keep, PyObject *owned, tgc_tensor_bytes *out)
{
    memset(out, 0, sizeof(*out));
    measure m = {tn, out, keep, 0, NULL, owned};
    int how = layout__add(&m, t, NULL, dev_type, device_s, 0);
    /* Each storage once: the parts of one tensor may share one (a wrapper holding a view). */
    unsigned long long largest = 0;
    for (int i = 0; i < out->nparts; i++) {
        const tgc_tensor_part *p = &out->parts[i];
        int dup = 0;
        for (int j = 0; j < i && p->ptr != 0 && !dup; j++) {
            dup = out->parts[j].ptr == p->ptr &&
                  layout__same_device(out->parts[j].device_s, p->device_s);
        }
        if (!dup) {
            out->nbytes += p->nbytes;
        }
        if (p->ptr != 0 && (out->ptr == 0 || p->nbytes > largest)) {
            out->ptr = p->ptr;
            largest = p->nbytes;
        }
    }
    if (how == TGC_HOW_WRAPPER || how == TGC_HOW_JAGGED) {
        out->how = layout__explain(&m, how);
    }
    if (out->how == NULL) {
        out->how = Py_NewRef(tn->how[how]);
    }
    if (how == TGC_HOW_META) {
        out->none = "meta";
    }
    else if (how == TGC_HOW_EMPTY_WRAPPER) {
        out->none = "wrapper subclass without inner tensors";
    }
    else if (how == TGC_HOW_UNREADABLE) {
        out->none = "storage not readable";
    }
    PyErr_Clear();
}

void
tgc_tensor_bytes_clear(tgc_tensor_bytes *b)
{
    for (int i = 0; i < b->nparts; i++) {
        Py_CLEAR(b->parts[i].name);
        Py_CLEAR(b->parts[i].tensor);
        Py_CLEAR(b->parts[i].device_s);
    }
    b->nparts = 0;
    Py_CLEAR(b->how);
}

PyObject *
tgc_tensor_shape(tgc_tensor_state *tn, PyObject *t)
{
    PyObject *d = tn->get_shape;
    PyObject *size = Py_TYPE(d)->tp_descr_get(d, t, (PyObject *)Py_TYPE(t));  /* new or NULL */
    PyObject *shape = size ? PySequence_Tuple(size) : NULL;
    Py_XDECREF(size);
    if (shape != NULL) {
        Py_ssize_t nd = PyTuple_GET_SIZE(shape), plain_dims = 0;
        while (plain_dims < nd && PyLong_CheckExact(PyTuple_GET_ITEM(shape, plain_dims))) {
            plain_dims++;
        }
        if (plain_dims == nd) {
            return shape;
        }
        /* A symbolic size (a jagged tensor's ragged one) becomes None: a report holds numbers,
         * no torch object. */
        PyObject *plain = PyTuple_New(nd);
        for (Py_ssize_t i = 0; plain != NULL && i < nd; i++) {
            PyObject *v = PyTuple_GET_ITEM(shape, i);
            PyTuple_SET_ITEM(plain, i, Py_NewRef(PyLong_CheckExact(v) ? v : Py_None));
        }
        Py_DECREF(shape);
        return plain;
    }
    if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
        return NULL;
    }
    PyErr_Clear();
    /* A strided nested tensor has no sizes, only a size per regular dimension. */
    PyObject *dim = layout__call(tn, TGC_TA_DIM, t, -1);
    Py_ssize_t nd = dim && PyLong_Check(dim) ? PyLong_AsSsize_t(dim) : -1;
    Py_XDECREF(dim);
    PyErr_Clear();
    if (nd < 0 || nd > 64) {
        return Py_NewRef(Py_None);
    }
    shape = PyTuple_New(nd);
    for (Py_ssize_t i = 0; shape != NULL && i < nd; i++) {
        PyObject *v = layout__call(tn, TGC_TA_SIZE, t, i);
        if (v == NULL || !PyLong_CheckExact(v)) {
            Py_XSETREF(v, Py_NewRef(Py_None));
        }
        PyTuple_SET_ITEM(shape, i, v);
    }
    return shape;
}
