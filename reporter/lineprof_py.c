/* lineprof_py.c: the Python side of the line profiler. The _LineProfiler type holds one
 * profiler's registered code objects, its memory source (the CUDA caching allocator's counters
 * through torch, or the process's resident memory) and its engine (lineprof.c folds the
 * readings). The event entry points are called by sys.monitoring for the profiled code objects
 * only (3.12+, wired by tensorgc/lineprof.py) or by a C trace function (3.10, 3.11).
 * Everything here runs with the GIL held. */
#include "tgc.h"
#include "tensorgc/lineprof.h"

enum { LP_SRC_RSS = 1, LP_SRC_CUDA = 2 };

/* Inside an event or a first reading on this thread: the readings' own code is never profiled.
 * Per thread: a reading that runs Python code may let other threads run, and their events are
 * theirs to record. Each thread touches only its own. */
static _Thread_local int lp_busy;
enum { LP_EV_ENTER = 0, LP_EV_LINE = 1, LP_EV_LEAVE = 2, LP_EV_RESUME = 3 };
#define LP_MAX_KEYS 4096  /* a sanity bound on memory_stats()' size */
#define LP_MAX_DEPTH 8    /* ...and on its nesting ("active_bytes.all.peak" is 3 deep) */

typedef struct {
    PyObject_HEAD
    tgc_lp engine;          /* usable once keys != NULL */
    PyObject *codes;        /* list of the registered code objects (new reference): keeps alive
                               the identities the engine compares */
    PyObject *keys;         /* tuple of str, the layout of a reading; NULL before the first */
    PyObject *stats_fn;     /* CUDA: torch._C._cuda_memoryStats (new reference) */
    PyObject *reset_fn;     /* CUDA: torch._C._cuda_resetPeakMemoryStats (new reference) */
    PyObject *device_obj;   /* CUDA: the device index as an int (new reference) */
    int64_t *reading;       /* the latest reading, LP_MAX_KEYS values */
    int source, device;
    int enabled;            /* in the module's lp_enabled list */
    int rss_resettable;     /* the kernel accepted a peak reset (RSS source) */
    int read_ok;            /* the reading of the current event succeeded */
    Py_ssize_t errors;      /* failed readings; the first is reported as unraisable */
} lp_object;

/* ------------------------------------------------------------------------------------------ */
/* Readings                                                                                    */

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
lp__read(lp_object *p, PyObject *names)
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
lp__reset_peak(lp_object *p)
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

/* ------------------------------------------------------------------------------------------ */
/* Events                                                                                      */

static int
lp__interested(tgc_state *st, PyObject *code)
{
    Py_ssize_t n = PyList_GET_SIZE(st->lp_enabled);
    for (Py_ssize_t i = 0; i < n; i++) {
        lp_object *p = (lp_object *)PyList_GET_ITEM(st->lp_enabled, i);
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
lp__failed(lp_object *p, PyObject **failed, PyObject *exc[3], int *interrupted)
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
static void
lp__dispatch(tgc_state *st, int ev, PyObject *code, int line)
{
    if (lp_busy || !lp__interested(st, code)) {
        return;
    }
    PyObject *list = PyList_GetSlice(st->lp_enabled, 0, PY_SSIZE_T_MAX);  /* new reference */
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
        lp_object *p = (lp_object *)PyList_GET_ITEM(list, i);  /* borrowed from the copy */
        p->read_ok = 0;
        if (!p->enabled || p->keys == NULL) {
            continue;  /* disabled by a reading earlier in this event */
        }
        int shared = 0;
        for (Py_ssize_t j = 0; j < i; j++) {
            lp_object *q = (lp_object *)PyList_GET_ITEM(list, j);
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
        lp_object *p = (lp_object *)PyList_GET_ITEM(list, i);
        int first = p->read_ok;
        for (Py_ssize_t j = 0; j < i && first; j++) {
            lp_object *q = (lp_object *)PyList_GET_ITEM(list, j);
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

static int
lp__code_arg(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *fn)
{
    if (nargs < want || !PyCode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s() takes a code object and %zd more argument(s)", fn,
                     want - 1);
        return -1;
    }
    return 0;
}

/* sys.monitoring's PY_START: (code, offset). The offset is not 0 for closures (their cells are
 * copied first), so only the event says whether a frame starts or resumes. */
static PyObject *
lp_mon_start(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (lp__code_arg(args, nargs, 2, "_lp_start") < 0) {
        return NULL;
    }
    lp__dispatch(tgc_state_of(module), LP_EV_ENTER, args[0],
                 ((PyCodeObject *)args[0])->co_firstlineno);
    Py_RETURN_NONE;
}

/* sys.monitoring's PY_RESUME / PY_THROW: (code, offset): a generator or coroutine goes on, on
 * the line of that offset */
static PyObject *
lp_mon_resume(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (lp__code_arg(args, nargs, 2, "_lp_resume") < 0) {
        return NULL;
    }
    PyCodeObject *code = (PyCodeObject *)args[0];
    int line = code->co_firstlineno;
    long off = PyLong_Check(args[1]) ? PyLong_AsLong(args[1]) : -1;
    if (off >= 0 && off < INT_MAX) {
        int l = PyCode_Addr2Line(code, (int)off);
        line = l > 0 ? l : line;
    }
    PyErr_Clear();
    lp__dispatch(tgc_state_of(module), LP_EV_RESUME, args[0], line);
    Py_RETURN_NONE;
}

/* sys.monitoring's LINE: (code, line) */
static PyObject *
lp_mon_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (lp__code_arg(args, nargs, 2, "_lp_line") < 0) {
        return NULL;
    }
    long line = PyLong_Check(args[1]) ? PyLong_AsLong(args[1]) : -1;
    if (line < 0 || line > INT_MAX) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    lp__dispatch(tgc_state_of(module), LP_EV_LINE, args[0], (int)line);
    Py_RETURN_NONE;
}

/* sys.monitoring's PY_RETURN / PY_YIELD / PY_UNWIND: (code, offset, value) */
static PyObject *
lp_mon_leave(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (lp__code_arg(args, nargs, 1, "_lp_leave") < 0) {
        return NULL;
    }
    lp__dispatch(tgc_state_of(module), LP_EV_LEAVE, args[0], 0);
    Py_RETURN_NONE;
}

/* The tracer a thread had before _lp_settrace put ours on it, kept in that thread's state dict
 * (PyThreadState_GetDict) under LP_SAVED_KEY as a capsule: tracers are per thread, and the
 * thread that enables is not always the one that disables. Only its own thread touches it. */
#define LP_SAVED_KEY "tensorgc.lineprof.saved_tracer"
typedef struct {
    Py_tracefunc func;
    PyObject *obj;          /* new reference */
} lp_saved_tracer;

static void
lp__saved_free(PyObject *capsule)
{
    lp_saved_tracer *s = PyCapsule_GetPointer(capsule, LP_SAVED_KEY);
    if (s != NULL) {
        Py_XDECREF(s->obj);
        PyMem_Free(s);
    }
}

/* Remembers this thread's tracer (ts is the current thread's). 0, or -1 with an exception. */
static int
lp__save_tracer(PyThreadState *ts)
{
    PyObject *dict = PyThreadState_GetDict();  /* borrowed */
    if (dict == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no thread state dict to keep the tracer in");
        return -1;
    }
    lp_saved_tracer *s = PyMem_Malloc(sizeof(*s));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->func = ts->c_tracefunc;
    s->obj = s->func ? Py_XNewRef(ts->c_traceobj) : NULL;
    PyObject *cap = PyCapsule_New(s, LP_SAVED_KEY, lp__saved_free);  /* new reference */
    if (cap == NULL) {
        Py_XDECREF(s->obj);
        PyMem_Free(s);
        return -1;
    }
    int rc = PyDict_SetItemString(dict, LP_SAVED_KEY, cap);
    Py_DECREF(cap);
    return rc;
}

/* Takes this thread's saved tracer out of its dict: *func and *obj (new reference), both NULL
 * when there is none. Never raises. */
static void
lp__take_saved_tracer(Py_tracefunc *func, PyObject **obj)
{
    *func = NULL;
    *obj = NULL;
    PyObject *dict = PyThreadState_GetDict();  /* borrowed */
    PyObject *cap = dict ? PyDict_GetItemString(dict, LP_SAVED_KEY) : NULL;  /* borrowed */
    if (cap != NULL) {
        lp_saved_tracer *s = PyCapsule_GetPointer(cap, LP_SAVED_KEY);
        if (s != NULL) {
            *func = s->func;
            *obj = Py_XNewRef(s->obj);
        }
        if (PyDict_DelItemString(dict, LP_SAVED_KEY) < 0) {
            PyErr_Clear();
        }
    }
    PyErr_Clear();
}

/* Our tracer is on this thread: puts back the one it replaced (none on a thread that got ours
 * through threading.settrace). */
static void
lp__restore_tracer(void)
{
    Py_tracefunc func;
    PyObject *obj;  /* new reference */
    lp__take_saved_tracer(&func, &obj);
    PyEval_SetTrace(func, obj);
    Py_XDECREF(obj);
}

/* The C trace function of the 3.10/3.11 path. `obj` is st->lp_hook (the module's
 * _lp_thread_hook) on every thread. On any thread, the first event after the last profiler went
 * away puts the thread's previous tracer back (a disable on another thread could not). */
static int
lp__trace(PyObject *obj, PyFrameObject *frame, int what, PyObject *Py_UNUSED(arg))
{
    tgc_state *st = tgc_state_of(PyCFunction_GET_SELF(obj));
    if (st == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (PyList_GET_SIZE(st->lp_enabled) == 0) {
        lp__restore_tracer();  /* nobody listens any more */
        return 0;
    }
    int ev;
    switch (what) {
    case PyTrace_CALL: ev = LP_EV_ENTER; break;
    case PyTrace_LINE: ev = LP_EV_LINE; break;
    case PyTrace_RETURN: ev = LP_EV_LEAVE; break;  /* also on an exception's way out */
    default: return 0;
    }
    PyCodeObject *code = PyFrame_GetCode(frame);  /* new reference */
    if (lp__interested(st, (PyObject *)code)) {
        int line = ev == LP_EV_LINE ? PyFrame_GetLineNumber(frame) : code->co_firstlineno;
        if (ev == LP_EV_ENTER && tgc_compat_frame_resumed(frame)) {
            ev = LP_EV_RESUME;  /* a generator's "call" event on each resume */
            line = PyFrame_GetLineNumber(frame);
        }
        lp__dispatch(st, ev, (PyObject *)code, line);
    }
    Py_DECREF(code);
    return 0;
}

/* _lp_settrace(on): installs the C tracer on this thread (remembering, for this thread, the
 * tracer it replaces), or takes it off this thread and puts that one back. Other threads that
 * have ours put theirs back at their next event. The 3.10/3.11 path. */
static PyObject *
lp_settrace(PyObject *module, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) {
        return NULL;
    }
    PyThreadState *ts = PyThreadState_Get();
    if (on) {
        if (ts->c_tracefunc != lp__trace && lp__save_tracer(ts) < 0) {
            return NULL;
        }
        PyEval_SetTrace(lp__trace, tgc_state_of(module)->lp_hook);
    }
    else if (ts->c_tracefunc == lp__trace) {
        lp__restore_tracer();
    }
    else {
        /* someone replaced ours meanwhile: theirs stays, the saved one is stale */
        Py_tracefunc func;
        PyObject *obj;  /* new reference */
        lp__take_saved_tracer(&func, &obj);
        Py_XDECREF(obj);
    }
    Py_RETURN_NONE;
}

/* _lp_thread_hook(frame, event, arg) -> None, a Python tracer that puts the C tracer on its
 * thread (and hands it a "call" event). threading.settrace's hook calls it on a new thread's
 * first event on the 3.10/3.11 path; and it is the C tracer's argument, which sys.gettrace()
 * returns: a tool that saves that and later hands it back to sys.settrace gives the thread the
 * C tracer back, where anything not callable would raise TypeError into the user's code. */
static PyObject *
lp_thread_hook(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_state *st = tgc_state_of(module);
    if (st->lp_hook == NULL) {
        Py_RETURN_NONE;  /* the module is being torn down */
    }
    PyEval_SetTrace(lp__trace, st->lp_hook);
    if (nargs == 3 && PyFrame_Check(args[0]) && PyUnicode_Check(args[1]) &&
        PyUnicode_CompareWithASCIIString(args[1], "call") == 0) {
        lp__trace(st->lp_hook, (PyFrameObject *)args[0], PyTrace_CALL, NULL);
    }
    Py_RETURN_NONE;
}

static PyMethodDef lp_hook_def = {
    "_lp_thread_hook", (PyCFunction)(void (*)(void))lp_thread_hook, METH_FASTCALL,
    "The line profiler's Python-level tracer: puts its C tracer on this thread (Python < 3.12)."};

PyMethodDef tgc_lineprof_methods[] = {
    {"_lp_start", (PyCFunction)(void (*)(void))lp_mon_start, METH_FASTCALL,
     "sys.monitoring PY_START callback of the line profiler."},
    {"_lp_resume", (PyCFunction)(void (*)(void))lp_mon_resume, METH_FASTCALL,
     "sys.monitoring PY_RESUME/PY_THROW callback of the line profiler."},
    {"_lp_line", (PyCFunction)(void (*)(void))lp_mon_line, METH_FASTCALL,
     "sys.monitoring LINE callback of the line profiler."},
    {"_lp_leave", (PyCFunction)(void (*)(void))lp_mon_leave, METH_FASTCALL,
     "sys.monitoring PY_RETURN/PY_YIELD/PY_UNWIND callback of the line profiler."},
    {"_lp_settrace", (PyCFunction)lp_settrace, METH_O,
     "_lp_settrace(on): the line profiler's C tracer on this thread (Python < 3.12)."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------------------------------ */
/* The _LineProfiler type                                                                      */

static int
lp_traverse(lp_object *p, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(p));
    Py_VISIT(p->codes);
    Py_VISIT(p->keys);
    Py_VISIT(p->stats_fn);
    Py_VISIT(p->reset_fn);
    Py_VISIT(p->device_obj);
    return 0;
}

static int
lp_clear(lp_object *p)
{
    Py_CLEAR(p->codes);
    Py_CLEAR(p->keys);
    Py_CLEAR(p->stats_fn);
    Py_CLEAR(p->reset_fn);
    Py_CLEAR(p->device_obj);
    return 0;
}

static void
lp_dealloc(lp_object *p)
{
    PyTypeObject *tp = Py_TYPE(p);
    PyObject_GC_UnTrack(p);
    lp_clear(p);
    tgc_lp_free(&p->engine);
    PyMem_Free(p->reading);
    tp->tp_free(p);
    Py_DECREF(tp);
}

static PyObject *
lp_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "_LineProfiler() takes no arguments");
        return NULL;
    }
    lp_object *p = (lp_object *)tp->tp_alloc(tp, 0);
    if (p == NULL) {
        return NULL;
    }
    p->codes = PyList_New(0);
    p->reading = PyMem_Calloc(LP_MAX_KEYS, sizeof(int64_t));
    if (p->codes == NULL || p->reading == NULL) {
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    p->source = LP_SRC_RSS;
    p->rss_resettable = 1;
    return (PyObject *)p;
}

/* The engine for the layout `names` (list of str): kept when the layout is the same, rebuilt
 * (records dropped) when it changed. 0, or -1 with an exception. */
static int
lp__setup(lp_object *p, PyObject *names)
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

static PyObject *
lp_add_code(lp_object *p, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "add_code() takes a code object, not %.100s",
                     Py_TYPE(code)->tp_name);
        return NULL;
    }
    int has = PySequence_Contains(p->codes, code);
    if (has < 0 || (!has && PyList_Append(p->codes, code) < 0)) {
        return NULL;
    }
    if (p->keys != NULL &&
        tgc_lp_add_code(&p->engine, code, ((PyCodeObject *)code)->co_firstlineno) < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* set_source("rss") or set_source("cuda", device, stats_fn, reset_fn) */
static PyObject *
lp_set_source(lp_object *p, PyObject *args)
{
    const char *kind;
    int device = 0;
    PyObject *stats = NULL, *reset = NULL;
    if (!PyArg_ParseTuple(args, "s|iOO:set_source", &kind, &device, &stats, &reset)) {
        return NULL;
    }
    if (strcmp(kind, "rss") == 0) {
        p->source = LP_SRC_RSS;
        p->device = 0;
        Py_CLEAR(p->stats_fn);
        Py_CLEAR(p->reset_fn);
        Py_RETURN_NONE;
    }
    if (strcmp(kind, "cuda") != 0 || device < 0 || stats == NULL || reset == NULL ||
        !PyCallable_Check(stats) || !PyCallable_Check(reset)) {
        PyErr_SetString(PyExc_ValueError,
                        "set_source takes 'rss', or 'cuda', a device >= 0 and two callables");
        return NULL;
    }
    PyObject *dev = PyLong_FromLong(device);
    if (dev == NULL) {
        return NULL;
    }
    Py_XSETREF(p->device_obj, dev);
    Py_XSETREF(p->stats_fn, Py_NewRef(stats));
    Py_XSETREF(p->reset_fn, Py_NewRef(reset));
    p->source = LP_SRC_CUDA;
    p->device = device;
    Py_RETURN_NONE;
}

static PyObject *
lp_enable(lp_object *p, PyObject *Py_UNUSED(ignored))
{
    tgc_state *st = tgc_state_of(PyType_GetModule(Py_TYPE(p)));
    if (st == NULL) {
        return NULL;
    }
    if (p->enabled) {
        Py_RETURN_NONE;
    }
    PyObject *names = PyList_New(0);
    if (names == NULL) {
        return NULL;
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
    if (rc < 0) {
        return NULL;
    }
    if (p->enabled) {
        Py_RETURN_NONE;  /* the reading (Python code) enabled it already: listed once */
    }
    if (PyList_Append(st->lp_enabled, (PyObject *)p) < 0) {
        return NULL;
    }
    p->enabled = 1;
    Py_RETURN_NONE;
}

static PyObject *
lp_disable(lp_object *p, PyObject *Py_UNUSED(ignored))
{
    tgc_state *st = tgc_state_of(PyType_GetModule(Py_TYPE(p)));
    if (st == NULL) {
        return NULL;
    }
    p->read_ok = 0;  /* no later profiler of this event shares its reading (or its layout) */
    if (p->enabled) {
        Py_ssize_t n = PyList_GET_SIZE(st->lp_enabled);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyList_GET_ITEM(st->lp_enabled, i) == (PyObject *)p) {
                p->enabled = 0;
                tgc_lp_drop_frames(&p->engine);
                if (PySequence_DelItem(st->lp_enabled, i) < 0) {
                    return NULL;
                }
                break;
            }
        }
        p->enabled = 0;
    }
    Py_RETURN_NONE;
}

/* clear(forget_codes): drops the records (and the registered code objects when asked) */
static PyObject *
lp_clear_records(lp_object *p, PyObject *arg)
{
    int forget = PyObject_IsTrue(arg);
    if (forget < 0) {
        return NULL;
    }
    if (forget) {
        if (p->enabled) {
            PyErr_SetString(PyExc_RuntimeError, "disable the profiler before forgetting its functions");
            return NULL;
        }
        tgc_lp_free(&p->engine);
        Py_CLEAR(p->keys);
        if (PyList_SetSlice(p->codes, 0, PyList_GET_SIZE(p->codes), NULL) < 0) {
            return NULL;
        }
    }
    else if (p->keys != NULL) {
        tgc_lp_reset(&p->engine);
    }
    Py_RETURN_NONE;
}

/* records() -> [(code, line, hits, a: tuple, b: tuple)] for every line that ran */
static PyObject *
lp_records(lp_object *p, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    if (out == NULL || p->keys == NULL) {
        return out;
    }
    size_t nk = p->engine.nkeys;
    for (uint32_t c = 0; c < p->engine.ncodes; c++) {
        const tgc_lp_code *code = &p->engine.codes[c];
        for (uint32_t i = 0; i < code->nlines; i++) {
            int32_t line = code->lines[i];
            const int64_t *s = tgc_lp_slot(&p->engine, c, line);
            if (s == NULL) {
                continue;
            }
            PyObject *a = PyTuple_New((Py_ssize_t)nk), *b = PyTuple_New((Py_ssize_t)nk);
            if (a == NULL || b == NULL) {
                Py_XDECREF(a);
                Py_XDECREF(b);
                goto error;
            }
            for (size_t k = 0; k < nk; k++) {
                PyObject *x = PyLong_FromLongLong(s[1 + k]);
                PyObject *y = PyLong_FromLongLong(s[1 + nk + k]);
                if (x == NULL || y == NULL) {
                    Py_XDECREF(x);
                    Py_XDECREF(y);
                    Py_DECREF(a);
                    Py_DECREF(b);
                    goto error;
                }
                PyTuple_SET_ITEM(a, (Py_ssize_t)k, x);  /* stolen */
                PyTuple_SET_ITEM(b, (Py_ssize_t)k, y);
            }
            /* the code object: engine identities are the entries of p->codes */
            PyObject *row = Py_BuildValue("(OiLNN)", (PyObject *)code->code, line,
                                          (long long)s[0], a, b);  /* a, b stolen */
            if (row == NULL || PyList_Append(out, row) < 0) {
                Py_XDECREF(row);
                goto error;
            }
            Py_DECREF(row);
        }
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
lp_get_keys(lp_object *p, void *Py_UNUSED(closure))
{
    return p->keys ? Py_NewRef(p->keys) : PyTuple_New(0);
}

static PyObject *
lp_get_stat(lp_object *p, void *closure)
{
    switch ((int)(intptr_t)closure) {
    case 0: return PyBool_FromLong(p->enabled);
    case 1: return PyUnicode_FromString(p->source == LP_SRC_CUDA ? "cuda" : "rss");
    case 2: return PyLong_FromLong(p->device);
    case 3: return PyLong_FromUnsignedLongLong(p->engine.lines);
    case 4: return PyLong_FromSsize_t(p->errors);
    case 5: return PyBool_FromLong(p->rss_resettable);
    default: return PyLong_FromUnsignedLong(p->engine.nframes);
    }
}

static PyMethodDef lp_methods[] = {
    {"add_code", (PyCFunction)lp_add_code, METH_O, "add_code(code): profile this code object."},
    {"set_source", (PyCFunction)lp_set_source, METH_VARARGS,
     "set_source('rss') or set_source('cuda', device, stats_fn, reset_fn)."},
    {"enable", (PyCFunction)lp_enable, METH_NOARGS, "Start folding events (takes a reading)."},
    {"disable", (PyCFunction)lp_disable, METH_NOARGS, "Stop; open lines are dropped."},
    {"clear", (PyCFunction)lp_clear_records, METH_O, "clear(forget_codes)."},
    {"records", (PyCFunction)lp_records, METH_NOARGS,
     "[(code, line, hits, maxes, sums)] of every line that ran."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef lp_getset[] = {
    {"keys", (getter)lp_get_keys, NULL, "the reading's layout (tuple of str)", NULL},
    {"enabled", (getter)lp_get_stat, NULL, NULL, (void *)0},
    {"source", (getter)lp_get_stat, NULL, "'cuda' or 'rss'", (void *)1},
    {"device", (getter)lp_get_stat, NULL, NULL, (void *)2},
    {"lines", (getter)lp_get_stat, NULL, "line records folded so far", (void *)3},
    {"errors", (getter)lp_get_stat, NULL, "failed readings", (void *)4},
    {"peak_resettable", (getter)lp_get_stat, NULL, "the RSS peak resets per line", (void *)5},
    {"open_frames", (getter)lp_get_stat, NULL, NULL, (void *)6},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot lp_slots[] = {
    {Py_tp_doc, "The line profiler's C core: code objects, a memory source and the folded "
                "records. Use tensorgc.LineProfiler."},
    {Py_tp_new, lp_new},
    {Py_tp_dealloc, lp_dealloc},
    {Py_tp_traverse, lp_traverse},
    {Py_tp_clear, lp_clear},
    {Py_tp_methods, lp_methods},
    {Py_tp_getset, lp_getset},
    {0, NULL},
};

static PyType_Spec lp_spec = {
    .name = "tensorgc._tensorgc._LineProfiler",
    .basicsize = sizeof(lp_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = lp_slots,
};

int
tgc_lineprof_exec(PyObject *module, tgc_state *st)
{
    st->lp_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &lp_spec, NULL);
    if (st->lp_type == NULL || PyModule_AddType(module, st->lp_type) < 0) {
        return -1;
    }
    st->lp_enabled = PyList_New(0);
    if (st->lp_enabled == NULL) {
        return -1;
    }
    st->lp_hook = PyCFunction_NewEx(&lp_hook_def, module, NULL);
    if (st->lp_hook == NULL || PyModule_AddObjectRef(module, "_lp_thread_hook", st->lp_hook) < 0) {
        return -1;
    }
    return 0;
}

int
tgc_lineprof_traverse(tgc_state *st, visitproc visit, void *arg)
{
    Py_VISIT(st->lp_type);
    Py_VISIT(st->lp_enabled);
    Py_VISIT(st->lp_hook);
    return 0;
}

void
tgc_lineprof_clear(tgc_state *st)
{
    Py_CLEAR(st->lp_type);
    Py_CLEAR(st->lp_enabled);
    Py_CLEAR(st->lp_hook);
}
