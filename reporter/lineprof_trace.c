/* lineprof_trace.c: the line profiler's event source on Python 3.10 and 3.11 (contract in
 * lineprof_py.h): a C trace function, put on each thread that runs profiled code (_lp_settrace on
 * the enabling thread, _lp_thread_hook through threading.settrace on new ones), which hands the
 * events of profiled code objects to lineprof_events.c and puts the thread's previous tracer back
 * once no profiler is left. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#include "tensorgc/compat.h"
#include "module/state.h"
#include "reporter.h"
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

/* The thread's replaced tracer, as saved by lp__save_tracer: NULL when there is none. A
 * dictionary look-up with an interned key per event: the tracer is per thread. Never raises. */
static lp_saved_tracer *
lp__saved(tgc_lineprof *lp)
{
    PyObject *dict = PyThreadState_GetDict();  /* borrowed */
    PyObject *cap = dict && lp->saved_key ? PyDict_GetItemWithError(dict, lp->saved_key) : NULL;
    if (cap == NULL) {
        PyErr_Clear();
        return NULL;
    }
    return PyCapsule_GetPointer(cap, LP_SAVED_KEY);
}

/* The profiler's own handling of one event: the events of profiled code objects go to
 * lineprof_events.c. */
static void
lp__own(tgc_lineprof *lp, PyFrameObject *frame, int what)
{
    int ev;
    switch (what) {
    case PyTrace_CALL: ev = LP_EV_ENTER; break;
    case PyTrace_LINE: ev = LP_EV_LINE; break;
    case PyTrace_RETURN: ev = LP_EV_LEAVE; break;  /* also on an exception's way out */
    default: return;
    }
    PyCodeObject *code = PyFrame_GetCode(frame);  /* new reference */
    if (tgc_lineprof_interested(lp, (PyObject *)code)) {
        int line = ev == LP_EV_LINE ? PyFrame_GetLineNumber(frame) : code->co_firstlineno;
        if (ev == LP_EV_ENTER && tgc_compat_frame_resumed(frame)) {
            ev = LP_EV_RESUME;  /* a generator's "call" event on each resume */
            line = PyFrame_GetLineNumber(frame);
        }
        tgc_lineprof_dispatch(lp, ev, (PyObject *)code, line);
    }
    Py_DECREF(code);
}

/* The C trace function of the 3.10/3.11 path. `obj` is tgc_lineprof.hook (the module's
 * _lp_thread_hook) on every thread. The tracer it replaced on this thread (coverage's, a
 * debugger's) gets every event first, as if the profiler were not there: its result is the
 * interpreter's (an exception it raises goes on as without us). On any thread, the first event
 * after the last profiler went away puts that tracer back (a disable on another thread could
 * not). */
static int
lp__trace(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    tgc_state *st = tgc_state_of(PyCFunction_GET_SELF(obj));
    tgc_lineprof *lp = st != NULL && st->reporter != NULL ? &st->reporter->lineprof : NULL;
    if (lp == NULL || lp->enabled == NULL) {
        PyErr_Clear();
        return 0;  /* the module is being torn down */
    }
    lp_saved_tracer *prev = lp__saved(lp);
    int rc = 0;
    if (prev != NULL && prev->func != NULL) {
        PyObject *prev_obj = Py_XNewRef(prev->obj);  /* it may replace itself meanwhile */
        rc = prev->func(prev_obj, frame, what, arg);
        Py_XDECREF(prev_obj);
    }
    if (PyList_GET_SIZE(lp->enabled) == 0) {
        if (PyThreadState_Get()->c_tracefunc == lp__trace) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);  /* the replaced tracer's exception, if any */
            lp__restore_tracer();  /* nobody listens any more */
            PyErr_Restore(et, ev, tb);
        }
        return rc;
    }
    if (rc == 0) {
        lp__own(lp, frame, what);
    }
    return rc;
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
        PyObject *hook = tgc_state_of(module)->reporter->lineprof.hook;  /* borrowed */
        if (ts->c_tracefunc != lp__trace && ts->c_traceobj != hook && lp__save_tracer(ts) < 0) {
            return NULL;
        }
        PyEval_SetTrace(lp__trace, hook);
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
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "_lp_thread_hook() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *hook = tgc_state_of(module)->reporter->lineprof.hook;  /* borrowed */
    if (hook == NULL) {
        Py_RETURN_NONE;  /* the module is being torn down */
    }
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_tracefunc != lp__trace) {
        /* the tracer the program's own thread hook put on this thread, kept and called first;
         * but this hook as a Python tracer (sys.settrace(sys.gettrace()) round trip) is ours:
         * the one saved before stays the thread's */
        if (ts->c_traceobj != hook && lp__save_tracer(ts) < 0) {
            return NULL;
        }
        PyEval_SetTrace(lp__trace, hook);
    }
    if (PyFrame_Check(args[0]) && PyUnicode_Check(args[1]) &&
        PyUnicode_CompareWithASCIIString(args[1], "call") == 0) {
        /* the replaced tracer had this event already, from the program's thread hook */
        lp__own(&tgc_state_of(module)->reporter->lineprof, (PyFrameObject *)args[0],
                PyTrace_CALL);
    }
    Py_RETURN_NONE;
}

static PyMethodDef lp_hook_def = {
    "_lp_thread_hook", (PyCFunction)(void (*)(void))lp_thread_hook, METH_FASTCALL,
    "_lp_thread_hook($module, frame, event, arg, /)\n--\n\n"
    "The line profiler's Python-level tracer: puts its C tracer on this thread (Python < 3.12)."};

PyMethodDef tgc_lineprof_trace_methods[] = {
    {"_lp_settrace", (PyCFunction)lp_settrace, METH_O,
     "_lp_settrace($module, on, /)\n--\n\n"
     "The line profiler's C tracer on this thread, or off it (Python < 3.12)."},
    {NULL, NULL, 0, NULL},
};

int
tgc_lineprof_trace_exec(PyObject *module, tgc_lineprof *lp)
{
    lp->saved_key = PyUnicode_InternFromString(LP_SAVED_KEY);
    if (lp->saved_key == NULL) {
        return -1;
    }
    lp->hook = PyCFunction_NewEx(&lp_hook_def, module, NULL);
    if (lp->hook == NULL || PyModule_AddObjectRef(module, "_lp_thread_hook", lp->hook) < 0) {
        return -1;
    }
    return 0;
}
