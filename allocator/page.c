/* page.c: what the timeline page reads beside the detail engine (detail.c): the frames of the
 * stacks it shows, interned -- each distinct frame (file, line, name) once, each stack a list of
 * frame ids, so that the page carries every frame of a stack (a long C++ stack keeps the Python
 * frames under it) for little more than the ids -- and the stream column of a trace held as a
 * list of entry dicts (the streaming loader's columns have one). Binding in binding.c; GIL held
 * throughout. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "tensorgc/detail.h"
#include "tensorgc/ptrmap.h"
#include "convert.h"

/* d[key], borrowed, or NULL when absent or when the lookup fails (cleared). */
static inline PyObject *
st__get(PyObject *d, PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* The key of a frame: (filename, line, name) when the three are an exact str, int, str, else
 * None (a frame of another shape: shown as "?"). New reference, or NULL with an exception. */
static PyObject *
st__key(PyObject *f, PyObject *kf, PyObject *kl, PyObject *kn)
{
    if (!PyDict_CheckExact(f)) {
        return Py_NewRef(Py_None);
    }
    PyObject *file = st__get(f, kf);
    Py_XINCREF(file);  /* held: a later lookup may run code that drops it from the frame */
    PyObject *name = st__get(f, kn);
    Py_XINCREF(name);
    PyObject *line = st__get(f, kl);
    Py_XINCREF(line);
    PyObject *key;
    if (file != NULL && name != NULL && line != NULL && PyUnicode_CheckExact(file) &&
        PyUnicode_CheckExact(name) && PyLong_CheckExact(line)) {
        key = PyTuple_Pack(3, file, line, name);
    }
    else {
        key = Py_NewRef(Py_None);
    }
    Py_XDECREF(file);
    Py_XDECREF(name);
    Py_XDECREF(line);
    return key;
}

PyObject *
tgc_alloc_stack_frames(PyObject *stacks, PyObject *used, Py_ssize_t max_frames,
                       Py_ssize_t max_ids)
{
    PyObject *kf = PyUnicode_InternFromString("filename");
    PyObject *kl = PyUnicode_InternFromString("line");
    PyObject *kn = PyUnicode_InternFromString("name");
    PyObject *ids = PyDict_New();      /* key -> frame id */
    PyObject *frames = PyList_New(0);  /* frame id -> key */
    PyObject *held = PyList_New(0);    /* the frame dicts the identity table names */
    PyObject *out = NULL, *ids_b = NULL, *lens_b = NULL, *full_b = NULL;
    Py_ssize_t nused = PyList_Check(used) ? PyList_GET_SIZE(used) : -1;
    uint32_t *buf = NULL, *lens = NULL, *full = NULL;
    size_t nbuf = 0, cap = 0;
    tgc_ptrmap seen = {0};  /* frame dict -> id, for frames shared between stacks */
    if (kf == NULL || kl == NULL || kn == NULL || ids == NULL || frames == NULL || held == NULL) {
        goto done;
    }
    if (!PyList_Check(stacks) || nused < 0) {
        PyErr_SetString(PyExc_TypeError, "_stack_frames(stacks: list, used: list, ...)");
        goto done;
    }
    lens = calloc((size_t)nused + 1, sizeof(uint32_t));
    full = calloc((size_t)nused + 1, sizeof(uint32_t));
    if (lens == NULL || full == NULL || tgc_ptrmap_init(&seen, 1024) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    size_t nseen = 0;
    for (Py_ssize_t u = 0; u < nused; u++) {
        Py_ssize_t k = PyLong_AsSsize_t(PyList_GET_ITEM(used, u));
        if (k == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (k < 0 || k >= PyList_GET_SIZE(stacks)) {
            PyErr_Format(PyExc_ValueError, "used: stack %zd of %zd", k, PyList_GET_SIZE(stacks));
            goto done;
        }
        PyObject *fl = PyList_GET_ITEM(stacks, k);  /* borrowed; stacks holds it */
        if (!PyList_Check(fl)) {
            continue;
        }
        Py_ssize_t nf = PyList_GET_SIZE(fl);
        full[u] = (uint32_t)(nf > (Py_ssize_t)UINT32_MAX ? UINT32_MAX : nf);
        for (Py_ssize_t i = 0; i < nf && i < max_frames && (Py_ssize_t)nbuf < max_ids; i++) {
            if (i >= PyList_GET_SIZE(fl)) {  /* code run by a lookup may shrink it */
                break;
            }
            PyObject *f = PyList_GET_ITEM(fl, i);
            Py_INCREF(f);
            uint32_t id = tgc_ptrmap_get(&seen, f);
            if (id == UINT32_MAX) {
                PyObject *key = st__key(f, kf, kl, kn);
                if (key == NULL) {
                    Py_DECREF(f);
                    goto done;
                }
                PyObject *have = PyDict_GetItemWithError(ids, key);  /* exact keys: no code */
                if (have != NULL) {
                    id = (uint32_t)PyLong_AsUnsignedLong(have);
                }
                else if (PyErr_Occurred()) {
                    Py_DECREF(key);
                    Py_DECREF(f);
                    goto done;
                }
                else {
                    PyObject *v = PyLong_FromSsize_t(PyList_GET_SIZE(frames));
                    int rc = v != NULL ? PyDict_SetItem(ids, key, v) : -1;
                    if (rc == 0) {
                        id = (uint32_t)PyList_GET_SIZE(frames);
                        rc = PyList_Append(frames, key);
                    }
                    Py_XDECREF(v);
                    if (rc < 0) {
                        Py_DECREF(key);
                        Py_DECREF(f);
                        goto done;
                    }
                }
                Py_DECREF(key);
                if (nseen * 2 + 2 > seen.mask) {  /* keep the identity table under half full */
                    tgc_ptrmap bigger;
                    if (tgc_ptrmap_init(&bigger, (seen.mask + 1) * 2) < 0) {
                        Py_DECREF(f);
                        PyErr_NoMemory();
                        goto done;
                    }
                    for (size_t q = 0; q <= seen.mask; q++) {
                        if (seen.keys[q] != NULL) {
                            (void)tgc_ptrmap_put(&bigger, seen.keys[q], seen.vals[q]);
                        }
                    }
                    tgc_ptrmap_free(&seen);
                    seen = bigger;
                }
                if (PyList_Append(held, f) < 0) {  /* held: no other object takes its address */
                    Py_DECREF(f);
                    goto done;
                }
                (void)tgc_ptrmap_put(&seen, f, id);
                nseen++;
            }
            Py_DECREF(f);
            if (nbuf == cap) {
                size_t c = cap ? cap * 2 : 4096;
                uint32_t *p = realloc(buf, c * sizeof(uint32_t));
                if (p == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                buf = p;
                cap = c;
            }
            buf[nbuf++] = id;
            lens[u]++;
        }
    }
    ids_b = PyBytes_FromStringAndSize(buf ? (const char *)buf : "", (Py_ssize_t)(nbuf * 4));
    lens_b = PyBytes_FromStringAndSize((const char *)lens, nused * 4);
    full_b = PyBytes_FromStringAndSize((const char *)full, nused * 4);
    if (ids_b != NULL && lens_b != NULL && full_b != NULL) {
        out = PyTuple_Pack(4, frames, ids_b, lens_b, full_b);
    }
done:
    tgc_ptrmap_free(&seen);
    free(buf);
    free(lens);
    free(full);
    Py_XDECREF(kf);
    Py_XDECREF(kl);
    Py_XDECREF(kn);
    Py_XDECREF(ids);
    Py_XDECREF(frames);
    Py_XDECREF(held);
    Py_XDECREF(ids_b);
    Py_XDECREF(lens_b);
    Py_XDECREF(full_b);
    return out;
}

PyObject *
tgc_alloc_trace_streams(PyObject *trace)
{
    PyObject *items = PySequence_Tuple(trace);  /* new: a fixed copy of the list */
    PyObject *key = PyUnicode_InternFromString("stream"), *out = NULL;
    if (items == NULL || key == NULL) {
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    out = PyBytes_FromStringAndSize(NULL, n * 8);
    if (out == NULL) {
        goto done;
    }
    int64_t *w = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyTuple_GET_ITEM(items, i), *v;  /* borrowed; the tuple keeps it */
        w[i] = 0;
        if (PyDict_Check(e) && (v = st__get(e, key)) != NULL && PyLong_CheckExact(v)) {
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred()) {
                PyErr_Clear();
            }
            else if (!overflow) {
                w[i] = x;
            }
        }
    }
done:
    Py_XDECREF(items);
    Py_XDECREF(key);
    return out;
}

PyObject *
tgc_alloc_series(PyObject *a, PyObject *f, PyObject *s, unsigned long long events, PyObject *cats,
                 unsigned columns)
{
    if (!PyBytes_Check(a) || !PyBytes_Check(f) || !PyBytes_Check(s) ||
        (cats != Py_None && !PyBytes_Check(cats))) {
        PyErr_SetString(PyExc_TypeError, "_series(a, f, s: bytes, events, cats: bytes or None, "
                                         "columns)");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(a) / 8;
    if (PyBytes_GET_SIZE(a) != n * 8 || PyBytes_GET_SIZE(f) != n * 8 ||
        PyBytes_GET_SIZE(s) != n * 8 || (cats != Py_None && PyBytes_GET_SIZE(cats) != n)) {
        PyErr_SetString(PyExc_ValueError, "_series: arrays of one length (8 bytes a value; cats: 1)");
        return NULL;
    }
    if (columns == 0 || columns > 100000) {
        PyErr_SetString(PyExc_ValueError, "columns must be 1..100000");
        return NULL;
    }
    tgc_detail d = {0};
    d.n = (size_t)n;
    d.a = (uint64_t *)PyBytes_AS_STRING(a);
    d.f = (uint64_t *)PyBytes_AS_STRING(f);
    d.s = (uint64_t *)PyBytes_AS_STRING(s);
    d.events = events;
    for (Py_ssize_t j = 0; j < n; j++) {  /* the engine indexes its entries by these */
        if ((d.a[j] >= events && d.a[j] != 0) ||
            (d.f[j] != TGC_DETAIL_ALIVE && (d.f[j] >= events || d.f[j] < d.a[j]))) {
            PyErr_Format(PyExc_ValueError, "_series: allocation %zd is outside the trace", j);
            return NULL;
        }
    }
    const uint8_t *cat = cats != Py_None ? (const uint8_t *)PyBytes_AS_STRING(cats) : NULL;
    tgc_series ser;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tgc_detail_series(&d, cat, columns, &ser);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        return PyErr_NoMemory();
    }
    PyObject *out = tgc_alloc_series_dict(&ser);
    tgc_series_free(&ser);
    return out;
}
