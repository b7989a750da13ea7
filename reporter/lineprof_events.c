/* lineprof_events.c: one event of a profiled code object, on the profilers' side (contract in
 * lineprof_py.h): every enabled profiler takes a reading of its memory source (the CUDA caching
 * allocator's counters through torch, or the process's resident memory), raises its open lines'
 * peaks and folds the event into its engine (lineprof.c); then each source's peak is reset so the
 * next line's peak is its own. Called by the event sources (lineprof_monitoring.c,
 * lineprof_trace.c) and, for a profiler's first reading, by its enable(). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "lineprof_py.h"

/* Inside an event or a first reading on this thread: the readings' own code is never profiled.
 * Per thread: a reading that runs Python code may let other threads run, and their events are
 * theirs to record. Each thread touches only its own. */
static _Thread_local int lp_busy;
#define LP_MAX_DEPTH 8    /* a sanity bound on memory_stats()' nesting ("active_bytes.all.peak"
                             is 3 deep) */


/* Flattens memory_stats' nested dict into out[*n...] in its own order ("a.b.c" names appended
 * to `names` when given). `depth`: the dicts above d (a dict that holds itself must not
 * exhaust the C stack). Returns 0, or -1 with an exception. */
static int
lp__flatten(PyObject *d, PyObject *prefix, PyObject *names, int64_t *out, Py_ssize_t *n,
            int depth)
{
    if (depth >= LP_MAX_DEPTH) {
        PyErr_SetString(PyExc_RuntimeError, "memory_stats() nests too deep");
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;  /* borrowed */
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!PyUnicode_Check(k)) {
            continue;
        }
        PyObject *name = NULL;
        if (names != NULL) {
            name = prefix ? PyUnicode_FromFormat("%U.%U", prefix, k) : Py_NewRef(k);
            if (name == NULL) {
                return -1;
            }
        }
        int rc = 0;
        if (PyDict_Check(v)) {
            rc = lp__flatten(v, name, names, out, n, depth + 1);
        }
        else if (PyLong_Check(v)) {
            if (*n >= LP_MAX_KEYS) {
                PyErr_SetString(PyExc_RuntimeError, "memory_stats() has too many keys");
                rc = -1;
            }
            else {
                long long x = PyLong_AsLongLong(v);
                if (x == -1 && PyErr_Occurred()) {
                    PyErr_Clear();
                    x = 0;  /* out of range: no counter is; keep the layout */
                }
                out[(*n)++] = x;
                if (names != NULL) {
                    rc = PyList_Append(names, name);
                }
            }
        }
        Py_XDECREF(name);
        if (rc < 0) {
            return -1;
        }
    }
    return 0;
}

/* Takes a reading into p->reading; with `names`, also the layout's names. 0, or -1 with an
 * exception. */
static int
lp__read(tgc_lineprof_object *p, PyObject *names)
{
    if (p->source == LP_SRC_RSS) {
        if (tgc_lp_rss_read(p->reading) < 0) {
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, "/proc/self/statm");
            return -1;
        }
        if (names != NULL) {
            PyObject *a = PyUnicode_FromString("rss_bytes.all.current");
            PyObject *b = PyUnicode_FromString("rss_bytes.all.peak");
            int rc = (a && b && PyList_Append(names, a) == 0 && PyList_Append(names, b) == 0)
                     ? 0 : -1;
            Py_XDECREF(a);
            Py_XDECREF(b);
            return rc;
        }
        return 0;
    }
    if (p->stats_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the profiler has no memory source");
        return -1;
    }
    PyObject *d = PyObject_CallOneArg(p->stats_fn, p->device_obj);  /* new reference */
    if (d == NULL) {
        return -1;
    }
    Py_ssize_t n = 0;
    int rc = -1;
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "memory_stats did not return a dict");
    }
    else if (lp__flatten(d, NULL, names, p->reading, &n, 0) == 0) {
        if (names == NULL && p->keys != NULL && n != PyTuple_GET_SIZE(p->keys)) {
            PyErr_SetString(PyExc_RuntimeError, "memory_stats() changed its layout");
        }
        else {
            rc = 0;
        }
    }
    Py_DECREF(d);
    return rc;
}

static int
lp__reset_peak(tgc_lineprof_object *p)
{
    if (p->source == LP_SRC_RSS) {
        if (p->rss_resettable && tgc_lp_rss_reset_peak() < 0) {
            p->rss_resettable = 0;  /* the peak is then the process's; lineprof.py says so */
        }
        return 0;
    }
    PyObject *r = PyObject_CallOneArg(p->reset_fn, p->device_obj);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

int
tgc_lineprof_interested(tgc_lineprof *lp, PyObject *code)
{
    Py_ssize_t n = PyList_GET_SIZE(lp->enabled);
    for (Py_ssize_t i = 0; i < n; i++) {
        tgc_lineprof_object *p = (tgc_lineprof_object *)PyList_GET_ITEM(lp->enabled, i);
        if (p->keys != NULL && tgc_lp_find(&p->engine, code) >= 0) {
            return 1;
        }
    }
    return 0;
}

/* The reading or reset of p failed, with an exception set: counted, and cleared. The first
 * failure of an event is kept in *failed / exc for the unraisable report, except a
 * KeyboardInterrupt (Ctrl-C landing in a reading's Python code): that one is the program's,
 * and *interrupted asks for it to be raised again as a SIGINT, in the program's own code. */
static void
lp__failed(tgc_lineprof_object *p, PyObject **failed, PyObject *exc[3], int *interrupted)
{
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        *interrupted = 1;
        p->errors++;
    }
    else if (p->errors++ == 0 && *failed == NULL) {
        *failed = Py_NewRef(p);  /* new reference */
        PyErr_Fetch(&exc[0], &exc[1], &exc[2]);
    }
    PyErr_Clear();
}

/* One event of a code object: every enabled profiler takes a reading (profilers on the same
 * source share one), raises its open lines' peaks, folds the event if it watches the code, and
 * each source's peak counter is reset so the next line's peak is its own. Never raises: a
 * failed reading is reported once as unraisable and the program goes on.
 * A reading may run Python code (a replaced memory_stats), which may disable profilers and drop
 * their last reference: the walk is over a copy of the list, which owns its profilers, and
 * skips those disabled meanwhile. */
void
tgc_lineprof_dispatch(tgc_lineprof *lp, int ev, PyObject *code, int line)
{
    if (lp_busy || !tgc_lineprof_interested(lp, code)) {
        return;
    }
    PyObject *list = PyList_GetSlice(lp->enabled, 0, PY_SSIZE_T_MAX);  /* new reference */
    if (list == NULL) {
        PyErr_Clear();  /* out of memory: this event is lost */
        return;
    }
    lp_busy++;  /* a reading runs torch's code: never profile our own work */
    PyObject *et, *ev_, *tb;
    PyErr_Fetch(&et, &ev_, &tb);  /* an unwinding frame's exception stays as it was */
    PyObject *failed = NULL;     /* the first profiler whose reading failed (new reference) */
    PyObject *exc[3] = {NULL, NULL, NULL};  /* its exception */
    int interrupted = 0;         /* a KeyboardInterrupt was raised in a reading */
    uint64_t thread = PyThread_get_thread_ident();
    Py_ssize_t n = PyList_GET_SIZE(list);

    for (Py_ssize_t i = 0; i < n; i++) {
        /* borrowed from the copy */
        tgc_lineprof_object *p = (tgc_lineprof_object *)PyList_GET_ITEM(list, i);
        p->read_ok = 0;
        if (!p->enabled || p->keys == NULL) {
            continue;  /* disabled by a reading earlier in this event */
        }
        int shared = 0;
        for (Py_ssize_t j = 0; j < i; j++) {
            tgc_lineprof_object *q = (tgc_lineprof_object *)PyList_GET_ITEM(list, j);
            if (q->read_ok && q->source == p->source && q->device == p->device &&
                PyTuple_GET_SIZE(q->keys) == PyTuple_GET_SIZE(p->keys)) {
                memcpy(p->reading, q->reading, (size_t)PyTuple_GET_SIZE(p->keys) * sizeof(int64_t));
                shared = 1;
                break;
            }
        }
        if (!shared && lp__read(p, NULL) < 0) {
            lp__failed(p, &failed, exc, &interrupted);
            continue;
        }
        if (!p->enabled || p->keys == NULL) {
            continue;  /* its own reading disabled it */
        }
        p->read_ok = 1;
        tgc_lp_observe(&p->engine, p->reading);
        int idx = tgc_lp_find(&p->engine, code);
        if (idx < 0) {
            continue;
        }
        int rc = 0;
        switch (ev) {
        case LP_EV_ENTER:
        case LP_EV_RESUME:
            rc = tgc_lp_enter(&p->engine, (uint32_t)idx, thread, line, ev == LP_EV_RESUME,
                              p->reading);
            break;
        case LP_EV_LINE:
            rc = tgc_lp_line(&p->engine, (uint32_t)idx, thread, line, p->reading);
            break;
        default:
            rc = tgc_lp_leave(&p->engine, (uint32_t)idx, thread, p->reading);
            break;
        }
        if (rc < 0) {
            p->errors++;  /* out of memory: this event is lost, the profile goes on */
        }
    }
    /* reset each source once, after every profiler on it has read */
    for (Py_ssize_t i = 0; i < n; i++) {
        tgc_lineprof_object *p = (tgc_lineprof_object *)PyList_GET_ITEM(list, i);
        int first = p->read_ok;
        for (Py_ssize_t j = 0; j < i && first; j++) {
            tgc_lineprof_object *q = (tgc_lineprof_object *)PyList_GET_ITEM(list, j);
            first = !(q->read_ok && q->source == p->source && q->device == p->device);
        }
        if (first && lp__reset_peak(p) < 0) {
            lp__failed(p, &failed, exc, &interrupted);
        }
    }
    Py_DECREF(list);
    if (failed != NULL) {
        PyErr_Restore(exc[0], exc[1], exc[2]);
        PyErr_WriteUnraisable(failed);  /* runs sys.unraisablehook: still marked busy */
        Py_DECREF(failed);
    }
    if (interrupted) {
        PyErr_SetInterrupt();  /* raised at the program's next bytecode, as a Ctrl-C is */
    }
    lp_busy--;
    PyErr_Restore(et, ev_, tb);
}

/* The engine for the layout `names` (list of str): kept when the layout is the same, rebuilt
 * (records dropped) when it changed. 0, or -1 with an exception. */
static int
lp__setup(tgc_lineprof_object *p, PyObject *names)
{
    PyObject *keys = PyList_AsTuple(names);  /* new reference */
    if (keys == NULL) {
        return -1;
    }
    if (p->keys != NULL) {
        int same = PyObject_RichCompareBool(keys, p->keys, Py_EQ);
        if (same != 0) {
            Py_DECREF(keys);
            return same < 0 ? -1 : 0;
        }
    }
    Py_ssize_t nk = PyTuple_GET_SIZE(keys);
    uint8_t *folds = PyMem_Malloc(nk ? (size_t)nk : 1);
    if (folds == NULL) {
        Py_DECREF(keys);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < nk; k++) {
        const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(keys, k));
        const char *dot = s ? strrchr(s, '.') : NULL;
        const char *leaf = dot ? dot + 1 : (s ? s : "");
        folds[k] = strcmp(leaf, "peak") == 0 ? TGC_LP_PEAK
                   : strcmp(leaf, "current") == 0 ? TGC_LP_CURRENT : TGC_LP_COUNTER;
    }
    PyErr_Clear();
    tgc_lp_free(&p->engine);
    int rc = tgc_lp_init(&p->engine, (size_t)nk, folds);
    PyMem_Free(folds);
    Py_XSETREF(p->keys, keys);
    if (rc < 0) {
        Py_CLEAR(p->keys);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(p->codes); i++) {
        PyCodeObject *c = (PyCodeObject *)PyList_GET_ITEM(p->codes, i);
        if (tgc_lp_add_code(&p->engine, c, c->co_firstlineno) < 0) {
            Py_CLEAR(p->keys);
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

int
tgc_lineprof_start(tgc_lineprof_object *p)
{
    PyObject *names = PyList_New(0);  /* new reference */
    if (names == NULL) {
        return -1;
    }
    lp_busy++;  /* the first reading must not be taken for an event */
    int rc = lp__read(p, names);
    if (rc == 0) {
        rc = lp__setup(p, names);
    }
    if (rc == 0) {
        rc = lp__reset_peak(p);  /* the first line's peak is its own */
    }
    lp_busy--;
    Py_DECREF(names);
    return rc;
}
