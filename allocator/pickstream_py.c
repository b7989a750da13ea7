/* pickstream_py.c: the Python side of the streaming snapshot loader (pickstream.h): the builder
 * that makes the snapshot's objects around the trace, the frames and stacks as dicts and lists
 * (one object per distinct frame and stack), the source that reads the file descriptor, and the
 * result that snapshot.py turns into LeanTrace objects (contract in convert.h). binding.c parses
 * the arguments. The GIL is held throughout, except while read() waits. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <unistd.h>

#include "tensorgc/pickstream.h"
#include "convert.h"

typedef struct {
    tgc_ps_stream *s;
    int fd;
    PyObject *make_trace;  /* borrowed (the caller's argument) */
    PyObject *loads;       /* new: pickle.loads, for protocol-0 scalars; NULL until needed */
    PyObject *scratch;     /* new: the UTF-8 of the last str unboxed with surrogates */
    /* caches, each entry a new reference: strings by id, frames, stacks, devices */
    PyObject **strs, **frames, **stacks, **devices;
    size_t nstrs, nframes, nstacks, ndevices;
} pb;

/* Slot i of a cache, grown to hold it (NULL on failure, MemoryError set). */
static PyObject **
pb_cache(PyObject ***cache, size_t *n, size_t i)
{
    if (i >= *n) {
        size_t m = *n ? *n : 64;
        while (m <= i) {
            m *= 2;
        }
        PyObject **p = PyMem_Realloc(*cache, m * sizeof(PyObject *));
        if (p == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        memset(p + *n, 0, (m - *n) * sizeof(PyObject *));
        *cache = p;
        *n = m;
    }
    return &(*cache)[i];
}

static void
pb_clear_cache(PyObject **cache, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        Py_XDECREF(cache[i]);
    }
    PyMem_Free(cache);
}

static void *
pb_scalar(void *ctx, const tgc_ps_scalar *sc)
{
    pb *b = ctx;
    switch (sc->kind) {
    case TGC_PSS_NONE: return Py_NewRef(Py_None);
    case TGC_PSS_TRUE: return Py_NewRef(Py_True);
    case TGC_PSS_FALSE: return Py_NewRef(Py_False);
    case TGC_PSS_INT: return PyLong_FromLongLong(sc->i);
    case TGC_PSS_UINT: return PyLong_FromUnsignedLongLong(sc->u);
    case TGC_PSS_FLOAT: return PyFloat_FromDouble(sc->f);
    case TGC_PSS_BYTES: return PyBytes_FromStringAndSize(sc->p, (Py_ssize_t)sc->n);
    case TGC_PSS_BYTEARRAY: return PyByteArray_FromStringAndSize(sc->p, (Py_ssize_t)sc->n);
    case TGC_PSS_BIGINT: {
        /* int.from_bytes(p, "little", signed=True): rare, so the public call */
        PyObject *raw = PyBytes_FromStringAndSize(sc->p, (Py_ssize_t)sc->n);  /* new */
        PyObject *args = raw ? Py_BuildValue("(Os)", raw, "little") : NULL;  /* new */
        PyObject *kw = args ? Py_BuildValue("{s:O}", "signed", Py_True) : NULL;  /* new */
        PyObject *from = kw ? PyObject_GetAttrString((PyObject *)&PyLong_Type, "from_bytes") : NULL;
        PyObject *v = from ? PyObject_Call(from, args, kw) : NULL;
        Py_XDECREF(raw);
        Py_XDECREF(args);
        Py_XDECREF(kw);
        Py_XDECREF(from);
        return v;
    }
    case TGC_PSS_STR: {
        PyObject **slot = NULL;
        if (sc->sid != UINT32_MAX) {  /* one object per distinct string */
            slot = pb_cache(&b->strs, &b->nstrs, sc->sid);
            if (slot == NULL) {
                return NULL;
            }
            if (*slot != NULL) {
                return Py_NewRef(*slot);
            }
        }
        PyObject *v = PyUnicode_DecodeUTF8(sc->p, (Py_ssize_t)sc->n, "surrogatepass");
        if (v != NULL && slot != NULL) {
            *slot = Py_NewRef(v);
        }
        return v;
    }
    default:
        PyErr_SetString(PyExc_SystemError, "pickle stream: unknown scalar kind");
        return NULL;
    }
}

/* A protocol-0 scalar through pickle itself, so that it reads exactly as the plain loader's:
 * a pickle of that one opcode and STOP can only make a scalar. */
static void *
pb_text(void *ctx, unsigned op, const char *arg, size_t n)
{
    pb *b = ctx;
    if (b->loads == NULL) {
        PyObject *mod = PyImport_ImportModule("pickle");  /* new */
        if (mod == NULL) {
            return NULL;
        }
        b->loads = PyObject_GetAttrString(mod, "loads");
        Py_DECREF(mod);
        if (b->loads == NULL) {
            return NULL;
        }
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n + 5);  /* new */
    if (data == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(data);
    p[0] = (char)0x80;
    p[1] = 2;
    p[2] = (char)op;
    memcpy(p + 3, arg, n);
    p[n + 3] = '\n';
    p[n + 4] = '.';
    PyObject *v = PyObject_CallOneArg(b->loads, data);
    Py_DECREF(data);
    return v;
}

static void *
pb_make(void *ctx, int kind, void *const *items, size_t n)
{
    (void)ctx;
    PyObject *o = NULL;
    switch (kind) {
    case TGC_PSB_LIST:
    case TGC_PSB_TUPLE:
        o = kind == TGC_PSB_LIST ? PyList_New((Py_ssize_t)n) : PyTuple_New((Py_ssize_t)n);
        for (size_t i = 0; o != NULL && i < n; i++) {
            PyObject *x = Py_NewRef((PyObject *)items[i]);  /* stolen by the container */
            if (kind == TGC_PSB_LIST) {
                PyList_SET_ITEM(o, (Py_ssize_t)i, x);
            }
            else {
                PyTuple_SET_ITEM(o, (Py_ssize_t)i, x);
            }
        }
        return o;
    case TGC_PSB_DICT:
        o = PyDict_New();
        for (size_t i = 0; o != NULL && i + 1 < n; i += 2) {
            if (PyDict_SetItem(o, items[i], items[i + 1]) < 0) {
                Py_CLEAR(o);
            }
        }
        return o;
    case TGC_PSB_SET:
    case TGC_PSB_FROZENSET: {
        PyObject *tmp = PyTuple_New((Py_ssize_t)n);  /* new */
        for (size_t i = 0; tmp != NULL && i < n; i++) {
            PyTuple_SET_ITEM(tmp, (Py_ssize_t)i, Py_NewRef((PyObject *)items[i]));
        }
        if (tmp != NULL) {
            o = kind == TGC_PSB_SET ? PySet_New(tmp) : PyFrozenSet_New(tmp);
            Py_DECREF(tmp);
        }
        return o;
    }
    default:
        PyErr_SetString(PyExc_SystemError, "pickle stream: unknown container kind");
        return NULL;
    }
}

/* APPENDS, SETITEMS and ADDITEMS as CPython's unpickler does them: the container's own
 * methods for anything but a list, a dict or a set (the machine only makes builtin types, so
 * no code from the file runs). */
static int
pb_extend(void *ctx, void *target, int op, void *const *items, size_t n)
{
    (void)ctx;
    PyObject *t = target;
    if (op == TGC_PSB_SETITEMS) {
        for (size_t i = 0; i + 1 < n; i += 2) {
            int rc = PyDict_CheckExact(t) ? PyDict_SetItem(t, items[i], items[i + 1])
                                          : PyObject_SetItem(t, items[i], items[i + 1]);
            if (rc < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (op == TGC_PSB_APPENDS && PyList_CheckExact(t)) {
        for (size_t i = 0; i < n; i++) {
            if (PyList_Append(t, items[i]) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (op == TGC_PSB_ADDITEMS && PySet_Check(t) && !PyFrozenSet_Check(t)) {
        for (size_t i = 0; i < n; i++) {
            if (PySet_Add(t, items[i]) < 0) {
                return -1;
            }
        }
        return 0;
    }
    PyObject *method = PyObject_GetAttrString(t, op == TGC_PSB_APPENDS ? "append" : "add");
    if (method == NULL) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *r = PyObject_CallOneArg(method, items[i]);  /* new */
        if (r == NULL) {
            Py_DECREF(method);
            return -1;
        }
        Py_DECREF(r);
    }
    Py_DECREF(method);
    return 0;
}

static void *
pb_device(void *ctx, uint32_t dev)
{
    pb *b = ctx;
    PyObject **slot = pb_cache(&b->devices, &b->ndevices, dev);
    if (slot == NULL) {
        return NULL;
    }
    if (*slot == NULL) {
        *slot = PyObject_CallFunction(b->make_trace, "I", (unsigned int)dev);
        if (*slot == NULL) {
            return NULL;
        }
    }
    return Py_NewRef(*slot);
}

static PyObject *
pb_string(pb *b, uint32_t sid)
{
    tgc_ps_scalar sc;
    memset(&sc, 0, sizeof(sc));
    sc.kind = TGC_PSS_STR;
    sc.sid = sid;
    if (tgc_ps_string(b->s, sid, &sc.p, &sc.n) < 0) {
        PyErr_SetString(PyExc_SystemError, "pickle stream: no such string");
        return NULL;
    }
    return pb_scalar(b, &sc);
}

/* A frame as torch writes it: {"name", "filename", "line"}, the absent ones left out, then
 * the other keys it had. */
static void *
pb_frame(void *ctx, uint32_t id)
{
    pb *b = ctx;
    PyObject **slot = pb_cache(&b->frames, &b->nframes, id);
    if (slot == NULL) {
        return NULL;
    }
    if (*slot != NULL) {
        return Py_NewRef(*slot);
    }
    tgc_ps_frame f;
    if (tgc_ps_get_frame(b->s, id, &f) < 0) {
        PyErr_SetString(PyExc_SystemError, "pickle stream: no such frame");
        return NULL;
    }
    PyObject *d = PyDict_New();  /* new */
    PyObject *name = NULL, *file = NULL, *line = NULL;
    if (d == NULL) {
        return NULL;
    }
    if (f.name != TGC_PS_ABSENT && ((name = pb_string(b, f.name)) == NULL ||
                                    PyDict_SetItemString(d, "name", name) < 0)) {
        goto error;
    }
    if (f.filename != TGC_PS_ABSENT && ((file = pb_string(b, f.filename)) == NULL ||
                                        PyDict_SetItemString(d, "filename", file) < 0)) {
        goto error;
    }
    if (f.line_kind != 0) {
        line = f.line_kind == 1 ? PyLong_FromLongLong(f.line)
                                : PyLong_FromUnsignedLongLong((uint64_t)f.line);
        if (line == NULL || PyDict_SetItemString(d, "line", line) < 0) {
            goto error;
        }
    }
    for (uint32_t k = 0; k < tgc_ps_extras_len(b->s, f.extra); k++) {  /* its other keys */
        PyObject *key = tgc_ps_extras_item(b->s, f.extra, k, 0);  /* new */
        PyObject *value = key ? tgc_ps_extras_item(b->s, f.extra, k, 1) : NULL;  /* new */
        int rc = value ? PyDict_SetItem(d, key, value) : -1;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (rc < 0) {
            goto error;
        }
    }
    Py_XDECREF(name);
    Py_XDECREF(file);
    Py_XDECREF(line);
    *slot = Py_NewRef(d);
    return d;
error:
    Py_XDECREF(name);
    Py_XDECREF(file);
    Py_XDECREF(line);
    Py_DECREF(d);
    return NULL;
}

static void *
pb_stack(void *ctx, uint32_t id)
{
    pb *b = ctx;
    PyObject **slot = pb_cache(&b->stacks, &b->nstacks, id);
    if (slot == NULL) {
        return NULL;
    }
    if (*slot != NULL) {
        return Py_NewRef(*slot);
    }
    uint32_t n;
    const uint32_t *ids = tgc_ps_get_stack(b->s, id, &n);
    PyObject *l = PyList_New(n);  /* new */
    for (uint32_t i = 0; l != NULL && i < n; i++) {
        PyObject *f = pb_frame(b, ids[i]);  /* new, stolen by the list */
        if (f == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, f);
    }
    if (l == NULL) {
        return NULL;
    }
    /* the cache slot may have moved while frames were made: look it up again */
    slot = pb_cache(&b->stacks, &b->nstacks, id);
    if (slot == NULL) {
        Py_DECREF(l);
        return NULL;
    }
    *slot = Py_NewRef(l);
    return l;
}

static void
pb_incref(void *ctx, void *obj)
{
    (void)ctx;
    Py_INCREF((PyObject *)obj);
}

static void
pb_decref(void *ctx, void *obj)
{
    (void)ctx;
    Py_DECREF((PyObject *)obj);
}

/* pickscan's classes: plain scalars hash cheaply; tuples, frozensets and ints beyond 64 bits
 * hash at a cost that grows with their size; containers do not hash. */
static int
pb_classify(void *ctx, void *obj)
{
    (void)ctx;
    PyObject *o = obj;
    if (PyLong_CheckExact(o)) {
        int overflow;
        (void)PyLong_AsLongLongAndOverflow(o, &overflow);
        return overflow ? TGC_PSK_COSTLY : TGC_PSK_CHEAP;
    }
    if (PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) || PyFloat_CheckExact(o) ||
        o == Py_None || PyBool_Check(o)) {
        return TGC_PSK_CHEAP;
    }
    if (PyTuple_CheckExact(o) || PyFrozenSet_CheckExact(o)) {
        return TGC_PSK_COSTLY;
    }
    return TGC_PSK_UNHASHABLE;
}

static int
pb_unbox(void *ctx, void *obj, tgc_ps_scalar *out)
{
    pb *b = ctx;
    PyObject *o = obj;
    memset(out, 0, sizeof(*out));
    out->sid = UINT32_MAX;
    out->type_name = Py_TYPE(o)->tp_name;  /* a static type's name: lives as long as we need */
    out->kind = TGC_PSS_OTHER;
    if (o == Py_None) {
        out->kind = TGC_PSS_NONE;
    }
    else if (PyBool_Check(o)) {
        out->kind = o == Py_True ? TGC_PSS_TRUE : TGC_PSS_FALSE;
    }
    else if (PyLong_Check(o)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        out->kind = TGC_PSS_INT;
        out->i = v;
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(o);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                out->kind = TGC_PSS_BIGINT;
            }
            else {
                out->kind = TGC_PSS_UINT;
                out->u = u;
            }
        }
        else if (overflow < 0) {
            out->kind = TGC_PSS_BIGINT;
        }
    }
    else if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *p = PyUnicode_AsUTF8AndSize(o, &n);
        if (p == NULL) {  /* lone surrogates: as the file held them */
            PyErr_Clear();
            Py_CLEAR(b->scratch);
            b->scratch = PyUnicode_AsEncodedString(o, "utf-8", "surrogatepass");
            if (b->scratch == NULL) {
                return -1;
            }
            p = PyBytes_AS_STRING(b->scratch);
            n = PyBytes_GET_SIZE(b->scratch);
        }
        out->kind = TGC_PSS_STR;
        out->p = p;
        out->n = (size_t)n;
    }
    else if (PyFloat_Check(o)) {
        out->kind = TGC_PSS_FLOAT;
        out->f = PyFloat_AS_DOUBLE(o);
    }
    else if (PyDict_Check(o)) {
        out->kind = TGC_PSS_DICT;
    }
    else if (PyList_Check(o)) {
        out->kind = TGC_PSS_LIST;
    }
    return 0;
}

static int
pb_dict_next(void *ctx, void *dict, size_t *pos, void **key, void **value)
{
    (void)ctx;
    Py_ssize_t p = (Py_ssize_t)*pos;
    PyObject *k, *v;
    if (!PyDict_Check((PyObject *)dict) || !PyDict_Next(dict, &p, &k, &v)) {
        return 0;
    }
    *pos = (size_t)p;
    *key = k;
    *value = v;
    return 1;
}

static int
pb_list_item(void *ctx, void *list, size_t i, void **item)
{
    (void)ctx;
    PyObject *l = list;
    if (!PyList_Check(l) || (Py_ssize_t)i >= PyList_GET_SIZE(l)) {
        return 0;
    }
    *item = PyList_GET_ITEM(l, (Py_ssize_t)i);
    return 1;
}

static void
pb_adopt(void *ctx, int kind, uint32_t id, void *obj)
{
    pb *b = ctx;
    PyObject **slot = kind == TGC_PSB_DICT ? pb_cache(&b->frames, &b->nframes, id)
                                           : pb_cache(&b->stacks, &b->nstacks, id);
    if (slot == NULL) {
        PyErr_Clear();  /* no memory for the cache: the object is made again when asked */
        return;
    }
    if (*slot == NULL) {
        *slot = Py_NewRef((PyObject *)obj);
    }
}

/* The source: read() with the GIL released; a pending signal (Ctrl-C) is seen once per
 * chunk. */
static long long
pb_read(void *ctx, unsigned char *buf, size_t n)
{
    pb *b = ctx;
    for (;;) {
        ssize_t got;
        int err;
        Py_BEGIN_ALLOW_THREADS
        got = read(b->fd, buf, n);
        err = errno;
        Py_END_ALLOW_THREADS
        if (got >= 0) {
            return PyErr_CheckSignals() < 0 ? -1 : (long long)got;
        }
        if (err != EINTR) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
    }
}

static const char *const col_names[] = {"action", "addr", "size", "time_us", "stream",
                                        "device_free", "stack"};
static const size_t col_width[] = {1, 8, 8, 8, 8, 8, 4, 1, 4};

/* Column col of device d as bytes (the engine's array freed right after the copy). */
static PyObject *
pb_column(pb *b, uint32_t d, int col)
{
    void *data;
    size_t n;
    if (tgc_ps_take_column(b->s, d, col, &data, &n) < 0) {
        return PyErr_NoMemory();
    }
    PyObject *v = PyBytes_FromStringAndSize(data, (Py_ssize_t)(n * col_width[col]));
    free(data);
    return v;
}

/* (shell, columns, actions, present, extra, error) of device d. */
static PyObject *
pb_device_result(pb *b, uint32_t d)
{
    PyObject *shell = NULL, *cols = NULL, *actions = NULL, *present = NULL, *extra = NULL;
    PyObject *result = NULL;
    shell = pb_device(b, d);
    cols = shell ? PyDict_New() : NULL;
    if (cols == NULL) {
        goto done;
    }
    for (int c = 0; c < TGC_PS_COL_PRESENT; c++) {
        PyObject *v = pb_column(b, d, c);  /* new */
        if (v == NULL || PyDict_SetItemString(cols, col_names[c], v) < 0) {
            Py_XDECREF(v);
            goto done;
        }
        Py_DECREF(v);
    }
    present = pb_column(b, d, TGC_PS_COL_PRESENT);
    extra = present ? pb_column(b, d, TGC_PS_COL_EXTRA) : NULL;
    uint32_t na = tgc_ps_device_nactions(b->s, d);
    actions = extra ? PyTuple_New(na) : NULL;
    for (uint32_t i = 0; actions != NULL && i < na; i++) {
        PyObject *a = pb_string(b, tgc_ps_device_action(b->s, d, i));  /* new, stolen */
        if (a == NULL) {
            Py_CLEAR(actions);
            break;
        }
        PyTuple_SET_ITEM(actions, i, a);
    }
    if (actions == NULL) {
        goto done;
    }
    const char *why = tgc_ps_device_error(b->s, d);
    result = Py_BuildValue("(OOOOOs)", shell, cols, actions, present, extra, why);
done:
    Py_XDECREF(shell);
    Py_XDECREF(cols);
    Py_XDECREF(actions);
    Py_XDECREF(present);
    Py_XDECREF(extra);
    return result;
}

/* (root, traces, stacks, extras) after a successful run. */
static PyObject *
pb_result(pb *b, PyObject *root)
{
    PyObject *traces = NULL, *stacks = NULL, *extras = NULL, *result = NULL;
    uint32_t nd = tgc_ps_ndevices(b->s), ns = tgc_ps_nstacks(b->s), nx = tgc_ps_nextras(b->s);
    traces = PyList_New(nd);
    for (uint32_t d = 0; traces != NULL && d < nd; d++) {
        PyObject *t = pb_device_result(b, d);  /* new, stolen */
        if (t == NULL) {
            Py_CLEAR(traces);
            break;
        }
        PyList_SET_ITEM(traces, d, t);
    }
    stacks = traces ? PyList_New(ns) : NULL;
    for (uint32_t i = 0; stacks != NULL && i < ns; i++) {
        PyObject *l = pb_stack(b, i);  /* new, stolen */
        if (l == NULL) {
            Py_CLEAR(stacks);
            break;
        }
        PyList_SET_ITEM(stacks, i, l);
    }
    extras = stacks ? PyList_New(nx) : NULL;
    for (uint32_t i = 0; extras != NULL && i < nx; i++) {
        PyObject *d = PyDict_New();  /* new, stolen */
        uint32_t len = tgc_ps_extras_len(b->s, i);
        for (uint32_t k = 0; d != NULL && k < len; k++) {
            PyObject *key = tgc_ps_extras_item(b->s, i, k, 0);  /* new */
            PyObject *value = key ? tgc_ps_extras_item(b->s, i, k, 1) : NULL;  /* new */
            if (value == NULL || PyDict_SetItem(d, key, value) < 0) {
                Py_CLEAR(d);
            }
            Py_XDECREF(key);
            Py_XDECREF(value);
        }
        if (d == NULL) {
            Py_CLEAR(extras);
            break;
        }
        PyList_SET_ITEM(extras, i, d);
    }
    if (extras != NULL) {
        result = Py_BuildValue("(OOOO)", root, traces, stacks, extras);
    }
    Py_XDECREF(traces);
    Py_XDECREF(stacks);
    Py_XDECREF(extras);
    return result;
}

/* _pickle_stream(fd, size, max_bytes, make_trace, seed) ->
 *   (code, pos, a, b, c, size, text, payload)
 * code 0: payload is (root, traces, stacks, extras); traces[d] is (shell, columns, actions,
 * present, extra, error) with shell = make_trace(d), the object that stands for device d's list
 * in root. Another code: pickscan's or pickstream.h's (payload None), or TGC_PS_BUILDER with
 * payload the exception a builder call raised (the caller words it; a KeyboardInterrupt it
 * raises again). An error of the file descriptor, a pending signal's exception and
 * MemoryError are raised. */
PyObject *
tgc_alloc_pickle_stream(int fd, unsigned long long size, unsigned long long max_bytes,
                        PyObject *make_trace, unsigned long long seed)
{
    pb b;
    memset(&b, 0, sizeof(b));
    b.fd = fd;
    b.make_trace = make_trace;
    tgc_ps_builder vt = {&b, pb_scalar, pb_text, pb_make, pb_extend, pb_device, pb_frame,
                         pb_stack, pb_incref, pb_decref, pb_classify, pb_unbox, pb_dict_next,
                         pb_list_item, pb_adopt};
    PyObject *result = NULL, *payload = NULL;
    void *root = NULL;
    b.s = tgc_ps_new(&vt, pb_read, &b, size, max_bytes, seed);
    if (b.s == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int rc = tgc_ps_run(b.s, &root);
    const tgc_ps_error *e = tgc_ps_last_error(b.s);
    if (rc == 0) {
        payload = pb_result(&b, root);
        if (payload == NULL) {
            goto done;
        }
    }
    else if (e->code == TGC_PS_NOMEM) {
        PyErr_Clear();
        PyErr_NoMemory();
        goto done;
    }
    else if (e->code == TGC_PS_READ || (e->code == TGC_PS_BUILDER && !PyErr_Occurred())) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError, "pickle stream: a read failed without an error");
        }
        goto done;
    }
    else if (e->code == TGC_PS_BUILDER) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            goto done;
        }
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL && value != NULL) {
            PyException_SetTraceback(value, tb);
        }
        Py_XDECREF(type);
        Py_XDECREF(tb);
        payload = value ? value : Py_NewRef(Py_None);
    }
    else {
        PyErr_Clear();
        payload = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(iKKKKKy#O)", e->code, (unsigned long long)e->pos,
                           (unsigned long long)e->a, (unsigned long long)e->b,
                           (unsigned long long)e->c, (unsigned long long)e->size, e->text,
                           (Py_ssize_t)strnlen(e->text, sizeof(e->text)), payload);
done:
    Py_XDECREF(payload);
    if (root != NULL) {
        Py_DECREF((PyObject *)root);
    }
    tgc_ps_free(b.s);  /* lets go of the objects it holds, then its tables */
    pb_clear_cache(b.strs, b.nstrs);
    pb_clear_cache(b.frames, b.nframes);
    pb_clear_cache(b.stacks, b.nstacks);
    pb_clear_cache(b.devices, b.ndevices);
    Py_XDECREF(b.loads);
    Py_XDECREF(b.scratch);
    return result;
}
