/* observers.c: who listens to the collector hook (contract in hook.h): registering and removing
 * observers, keeping the hook on gc.callbacks only while someone listens, calling them on a
 * collection's garbage (one report per distinct device filter, settled before the garbage is
 * freed), and logging what they raise (common/log.c), or raising it in the program after the
 * collection (set_observer_errors("raise"), cycles.h's tgc_deliver). */
#include "cycles.h"
#include "hook_int.h"
void
tgc_filter_clear(tgc_filter *f)
{
    Py_CLEAR(f->predicate);
}

void
tgc_observer_failed(tgc_cycles *c, const char *what)
{
    if (!c->raise_errors || !c->busy || c->deferred != NULL) {
        tgc_cycles_log(c, what);  /* handles a KeyboardInterrupt too */
        return;
    }
    if (tgc_keep_interrupt(c)) {
        return;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL) {
        PyException_SetTraceback(value, tb);
    }
    c->deferred = value;  /* the reference moves */
    Py_XDECREF(type);
    Py_XDECREF(tb);
}

/* Delivery: the thread's profile function is swapped, for one event, for deliver__profile,
 * which puts the previous one back, hands it the event, and raises the observer's exception in
 * the frame that event belongs to (a call, a return: the program's next Python call after the
 * collection), as torch's observe_garbage does from sys.setprofile. What it needs rides in its
 * profile object: (exception, previous object or None, a capsule of the previous function). */
typedef struct {
    Py_tracefunc func;
} deliver__prev;

static const char deliver__capsule[] = "tensorgc.observer_error";

static void
deliver__capsule_free(PyObject *capsule)
{
    PyMem_Free(PyCapsule_GetPointer(capsule, deliver__capsule));
}

static int
deliver__profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    Py_INCREF(obj);  /* PyEval_SetProfile drops the thread's reference */
    PyObject *exc = PyTuple_GET_ITEM(obj, 0);
    PyObject *prev = PyTuple_GET_ITEM(obj, 1);
    deliver__prev *p = PyCapsule_GetPointer(PyTuple_GET_ITEM(obj, 2), deliver__capsule);
    Py_tracefunc func = p != NULL ? p->func : NULL;
    PyObject *prev_obj = prev == Py_None ? NULL : prev;
    PyErr_Clear();
    PyEval_SetProfile(func, prev_obj);
    if (func != NULL && func(prev_obj, frame, what, arg) < 0) {
        /* the program's own profiler raised: its exception goes on, with ours as its context */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *ctx = value != NULL && PyExceptionInstance_Check(value)
                            ? PyException_GetContext(value) : Py_NewRef(Py_None);
        if (ctx == NULL) {
            PyException_SetContext(value, Py_NewRef(exc));  /* steals */
        }
        Py_XDECREF(ctx);
        PyErr_Restore(type, value, tb);
    }
    else {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);  /* keeps exc's traceback */
    }
    if (TGC_PROFILE_CALL_ERROR_ADDS_FRAME && what == PyTrace_CALL) {
        (void)PyTraceBack_Here(frame);  /* where it surfaced; a failure leaves an error set */
    }
    Py_DECREF(obj);
    return -1;
}

void
tgc_deliver(tgc_cycles *c)
{
    PyObject *exc = c->deferred;  /* the reference moves here */
    c->deferred = NULL;
    c->deliver_trailing = 0;
    if (exc == NULL) {
        return;
    }
    PyThreadState *ts = PyThreadState_Get();
    PyObject *obj = NULL;
    if (ts->c_profilefunc != deliver__profile) {
        deliver__prev *p = PyMem_Malloc(sizeof(*p));
        PyObject *capsule = p ? PyCapsule_New(p, deliver__capsule, deliver__capsule_free) : NULL;
        if (p != NULL) {
            p->func = ts->c_profilefunc;
        }
        if (capsule == NULL) {
            PyMem_Free(p);
        }
        else {
            obj = PyTuple_Pack(3, exc, ts->c_profileobj ? ts->c_profileobj : Py_None, capsule);
            Py_DECREF(capsule);
        }
    }
    if (obj == NULL) {
        /* one is already waiting in this thread (or no memory): this one is logged */
        PyErr_Clear();
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        tgc_cycles_log(c, "an observer");
    }
    else {
        PyEval_SetProfile(deliver__profile, obj);  /* takes its own reference */
        Py_DECREF(obj);
    }
    Py_DECREF(exc);
    PyErr_Clear();
}

/* ------------------------------------------------------------------------------------------ */
/* Registration                                                                                */

/* How many times the hook sits on gc.callbacks (by identity: no user __eq__ runs). */
static Py_ssize_t
hook__registered(tgc_cycles *c)
{
    Py_ssize_t found = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c->gc_callbacks); i++) {
        found += PyList_GET_ITEM(c->gc_callbacks, i) == c->hook;
    }
    return found;
}

int
tgc_hook_unhook(tgc_cycles *c)
{
    PyObject *cbs = c->gc_callbacks;
    for (Py_ssize_t i = PyList_GET_SIZE(cbs) - 1; i >= 0; i--) {
        PyObject *cb = PyList_GET_ITEM(cbs, i);  /* borrowed */
        if ((cb == c->hook || cb == c->tail) && PySequence_DelItem(cbs, i) < 0) {
            return -1;
        }
    }
    return 0;
}

int
tgc_hook_append_tail(tgc_cycles *c)
{
    PyObject *cbs = c->gc_callbacks;
    Py_ssize_t n = PyList_GET_SIZE(cbs);
    return n > 0 && PyList_GET_ITEM(cbs, n - 1) == c->tail ? 0 : PyList_Append(cbs, c->tail);
}

int
tgc_hook_add(tgc_cycles *c, PyObject *module, tgc_handle *h)
{
    if (PyList_Append(c->observers, (PyObject *)h) < 0) {
        return -1;
    }
    h->module = Py_NewRef(module);
    h->cycles = c;
    c->unhook_pending = 0;
    /* Someone may have cleared gc.callbacks (test suites do): put the hook back if missing. */
    int rc = 0;
    if (c->resident && h->kind == TGC_OBS_GARBAGE) {
        /* an observe_garbage observer sees every collection: back on gc.callbacks */
        c->resident = 0;
        tgc_young_resident_stop();
    }
    if (!c->resident && hook__registered(c) == 0) {
        /* First in line: "stop" then sees the garbage before any other callback can touch it,
         * which is what lets "stop" skip the resurrection check when nothing else ran.
         * Inside a collection the collector is walking the list by index: append instead, so
         * no callback runs twice. */
        rc = c->busy ? PyList_Append(c->gc_callbacks, c->hook)
                     : PyList_Insert(c->gc_callbacks, 0, c->hook);
    }
    if (rc < 0) {
        Py_ssize_t last = PyList_GET_SIZE(c->observers) - 1;
        PySequence_DelItem(c->observers, last);
        Py_CLEAR(h->module);
        return -1;
    }
    return 0;
}

int
tgc_hook_remove(tgc_handle *h)
{
    if (h->module == NULL) {
        return 0;  /* already removed */
    }
    PyObject *module = h->module;  /* take over the handle's reference */
    h->module = NULL;
    tgc_cycles *c = h->cycles;  /* alive: module was still referenced */
    int rc = 0;
    if (c->observers != NULL) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c->observers); i++) {
            if (PyList_GET_ITEM(c->observers, i) == (PyObject *)h) {
                rc = PySequence_DelItem(c->observers, i);
                break;
            }
        }
        /* The hook stays on gc.callbacks only while someone listens: otherwise zero cost.
         * Inside a collection the collector may be iterating gc.callbacks by index, and removing
         * our entry would make it skip the next callback: the tail entry, appended behind the
         * program's, takes it off as the list's last entry, with nothing left to skip. */
        if (rc == 0 && PyList_GET_SIZE(c->observers) == 0 && c->resident) {
            c->resident = 0;
            tgc_young_resident_stop();
        }
        if (rc == 0 && PyList_GET_SIZE(c->observers) == 0 && c->gc_callbacks != NULL) {
            if (c->busy) {
                rc = tgc_hook_append_tail(c);
                c->unhook_pending = 1;
            }
            else if (!c->armed && c->island == NULL && !tgc_young_planted()) {
                if (tgc_young_collecting() == 1 && hook__registered(c) > 0) {
                    /* From inside a collection (a program's own gc callback, a finalizer, a
                     * weakref callback), the collector may be walking gc.callbacks: the tail
                     * entry takes the hook off as the list's last (tgc_hook_tail). */
                    rc = tgc_hook_append_tail(c);
                    c->unhook_pending = 1;
                }
                else {
                    rc = tgc_hook_unhook(c);
                }
            }
            /* Otherwise a collection is under way (a finalizer or a weakref callback removed
             * the observer, or another "start" callback): its "stop" must still come, to restore
             * the flags, break up the sentinel, and report, finalize and free the island it
             * holds; that "stop" takes the hook off (tgc_hook_callback). */
        }
    }
    PyObject *then = h->on_remove;  /* the reference moves here: called once */
    h->on_remove = NULL;
    if (then != NULL) {
        PyObject *r = PyObject_CallNoArgs(then);
        if (r == NULL) {
            tgc_cycles_log(c, "a handle's removal");
        }
        Py_XDECREF(r);
        Py_DECREF(then);
    }
    Py_DECREF(module);
    return rc;
}

int
tgc_hook_remove_all(tgc_cycles *c)
{
    while (c->observers != NULL && PyList_GET_SIZE(c->observers) > 0) {
        tgc_handle *h = (tgc_handle *)PyList_GET_ITEM(c->observers, 0);
        Py_CLEAR(h->on_remove);  /* the interpreter is exiting: nothing to undo */
        Py_INCREF(h);
        int rc = tgc_hook_remove(h);
        Py_DECREF(h);
        if (rc < 0) {
            return -1;
        }
    }
    return 0;
}

/* Calls one observer; its exceptions are logged, or kept for the program (raise_errors), never
 * propagated into the collector. */
static void
hook__call(tgc_cycles *c, tgc_handle *h, PyObject *arg, const char *what)
{
    PyObject *cb = Py_NewRef(h->callback);  /* it may remove itself, dropping its reference */
    PyObject *r = PyObject_CallOneArg(cb, arg);
    Py_DECREF(cb);
    if (r == NULL) {
        tgc_observer_failed(c, what);
    }
    Py_XDECREF(r);
}

/* The hook lets go of a report (holding one reference to it) before the garbage is freed. */
static void
hook__settle(tgc_cycles *c, PyObject *report)
{
    int drawn = tgc_report_settle(report, 1);
    c->counters.dots_kept += drawn == 1;
    c->counters.dots_skipped += drawn == 0;
}

int
tgc_hook_notify(tgc_cycles *c, PyObject *objs, int generation, int any_tensor,
             Py_ssize_t garbage_total)
{
    int ran = 0;
    PyObject *snapshot = PyList_AsTuple(c->observers);  /* observers may (un)register meanwhile */
    if (snapshot == NULL) {
        tgc_cycles_log(c, "listing observers");
        return 1;
    }
    Py_ssize_t nobs = PyTuple_GET_SIZE(snapshot);
    int want_tensors = 0;
    for (Py_ssize_t i = 0; i < nobs; i++) {
        tgc_handle *h = (tgc_handle *)PyTuple_GET_ITEM(snapshot, i);
        if (h->module == NULL) {
            continue;
        }
        if (h->kind == TGC_OBS_GARBAGE) {
            /* A copy: if the observer keeps it, the objects stay alive (and intact). */
            PyObject *copy = PyList_GetSlice(objs, 0, PyList_GET_SIZE(objs));
            if (copy == NULL) {
                tgc_cycles_log(c, "copying the garbage list");
                continue;
            }
            hook__call(c, h, copy, "an observe_garbage observer");
            Py_DECREF(copy);
            ran = 1;
        }
        else {
            want_tensors = 1;
        }
    }
    if (want_tensors && any_tensor) {
        /* One report per distinct filter: observers with the same device share it. */
        PyObject *made[8] = {NULL};
        const tgc_filter *made_for[8] = {NULL};
        int nmade = 0;
        for (Py_ssize_t i = 0; i < nobs; i++) {
            tgc_handle *h = (tgc_handle *)PyTuple_GET_ITEM(snapshot, i);
            if (h->module == NULL || h->kind == TGC_OBS_GARBAGE) {
                continue;
            }
            PyObject *report = NULL;
            int shared = 0;  /* made[] holds it too, and settles it after the last observer */
            for (int k = 0; k < nmade && report == NULL; k++) {
                const tgc_filter *f = made_for[k];
                if (f->kind == h->filter.kind && f->index == h->filter.index &&
                    f->predicate == h->filter.predicate && strcmp(f->type, h->filter.type) == 0) {
                    report = Py_NewRef(made[k]);
                    shared = 1;
                }
            }
            ran = 1;  /* building a report calls reprs, the predicate, torch */
            if (report == NULL) {
                TGC_PHASE_BEGIN(t0);
                report = tgc_report_build(c, objs, &h->filter, generation, garbage_total);
                TGC_PHASE_END(c, TGC_PHASE_BUILD, t0);
                if (report == NULL) {
                    tgc_cycles_log(c, "building a cycle report");
                    continue;
                }
                if (nmade < 8) {
                    made[nmade] = Py_NewRef(report);
                    made_for[nmade++] = &h->filter;
                    shared = 1;
                }
            }
            if (report != Py_None) {
                if (h->kind == TGC_OBS_HTML) {
                    PyObject *html = tgc_report_html(c, (tgc_report *)report);
                    if (html == NULL) {
                        tgc_cycles_log(c, "rendering a cycle report");
                    }
                    else {
                        hook__call(c, h, html, "an observe_tensor_cycles callback");
                        Py_DECREF(html);
                    }
                }
                else {
                    TGC_PHASE_BEGIN(t0);
                    hook__call(c, h, report, "an observe_cycles callback");
                    TGC_PHASE_END(c, TGC_PHASE_CALLBACK, t0);
                }
            }
            if (!shared) {
                hook__settle(c, report);
            }
            Py_DECREF(report);
        }
        for (int k = 0; k < nmade; k++) {
            /* The garbage is freed after this: a report kept by an observer draws its DOT now. */
            hook__settle(c, made[k]);
            Py_DECREF(made[k]);
        }
    }
    PyErr_Clear();
    Py_DECREF(snapshot);
    return ran;
}
