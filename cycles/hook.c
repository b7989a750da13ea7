/* hook.c: the gc.callbacks entry that makes the detector cheap enough to leave on.
 *
 * "start": set DEBUG_SAVEALL for this one collection, remembering the user's flags and
 *          len(gc.garbage).
 * "stop":  restore the flags, take exactly what this collection appended to gc.garbage, run the
 *          observers on it, then free it ourselves the way the collector would have (tp_clear),
 *          sparing anything an observer made reachable again. No extra collections, no profiler
 *          trampoline; the user's gc.garbage entries, flags and sys.getprofile() are untouched. */
#include "tgc.h"
#include "ptrmap.h"

#define TGC_DEBUG_SAVEALL 32   /* gc.DEBUG_SAVEALL, fixed since Python 2 */

void
tgc_filter_clear(tgc_filter *f)
{
    Py_CLEAR(f->predicate);
}

/* Logs the pending exception on logger "tensorgc" with its traceback; never raises. */
void
tgc_log_exception(tgc_state *st, const char *what)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) {
        return;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) {
        PyException_SetTraceback(value, tb);
    }
    if (st->logger == NULL && !tgc_compat_is_finalizing()) {
        PyObject *logging = PyImport_ImportModule("logging");
        st->logger = logging ? PyObject_CallMethod(logging, "getLogger", "s", "tensorgc") : NULL;
        Py_XDECREF(logging);
        PyErr_Clear();
    }
    PyObject *ok = NULL;
    if (st->logger != NULL && value != NULL) {
        PyObject *meth = PyObject_GetAttrString(st->logger, "error");
        PyObject *args = meth ? Py_BuildValue("(ss)", "tensorgc: %s raised", what) : NULL;
        PyObject *kw = args ? Py_BuildValue("{s:O}", "exc_info", value) : NULL;
        ok = kw ? PyObject_Call(meth, args, kw) : NULL;
        Py_XDECREF(meth);
        Py_XDECREF(args);
        Py_XDECREF(kw);
    }
    if (ok == NULL) {
        /* logging itself failed (or is gone at shutdown): fall back to sys.unraisablehook */
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        PyErr_WriteUnraisable(NULL);
        return;
    }
    Py_DECREF(ok);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* ------------------------------------------------------------------------------------------ */
/* Registration                                                                                */

static int
hook__registered(tgc_state *st)
{
    PyObject *cbs = PyObject_GetAttrString(st->gc_module, "callbacks");
    if (cbs == NULL) {
        return -1;
    }
    int found = PySequence_Contains(cbs, st->hook);
    Py_DECREF(cbs);
    return found;
}

int
tgc_hook_add(tgc_state *st, PyObject *module, tgc_handle *h)
{
    if (PyList_Append(st->observers, (PyObject *)h) < 0) {
        return -1;
    }
    h->module = Py_NewRef(module);
    /* Someone may have cleared gc.callbacks (test suites do): put the hook back if missing. */
    int found = hook__registered(st);
    if (found == 0) {
        /* First in line: "stop" then sees the garbage before any other callback can touch it,
         * which is what lets hook__stop skip the resurrection check when nothing else ran. */
        PyObject *cbs = PyObject_GetAttrString(st->gc_module, "callbacks");
        found = cbs ? PyList_Insert(cbs, 0, st->hook) : -1;
        Py_XDECREF(cbs);
    }
    if (found < 0) {
        Py_ssize_t last = PyList_GET_SIZE(st->observers) - 1;
        PySequence_DelItem(st->observers, last);
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
    tgc_state *st = tgc_state_of(module);
    int rc = 0;
    if (st != NULL && st->observers != NULL) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(st->observers); i++) {
            if (PyList_GET_ITEM(st->observers, i) == (PyObject *)h) {
                rc = PySequence_DelItem(st->observers, i);
                break;
            }
        }
        /* The hook stays on gc.callbacks only while someone listens: otherwise zero cost. */
        if (rc == 0 && PyList_GET_SIZE(st->observers) == 0 && st->gc_module != NULL &&
            !st->armed) {
            PyObject *cbs = PyObject_GetAttrString(st->gc_module, "callbacks");
            if (cbs != NULL) {
                int found = PySequence_Contains(cbs, st->hook);
                if (found == 1) {
                    PyObject *r = PyObject_CallMethod(cbs, "remove", "O", st->hook);
                    Py_XDECREF(r);
                }
                rc = PyErr_Occurred() ? -1 : 0;
                Py_DECREF(cbs);
            }
            else {
                rc = -1;
            }
        }
    }
    Py_DECREF(module);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Freeing garbage the way the collector would                                                 */

typedef struct {
    const tgc_ptrmap *map;
    uint32_t *internal;
    uint8_t *alive;
    uint32_t *stack;
    uint32_t sp;
} free_ctx;

static int
free__count(PyObject *o, void *arg)
{
    free_ctx *c = arg;
    uint32_t j = tgc_ptrmap_get(c->map, o);
    if (j != UINT32_MAX) {
        c->internal[j]++;
    }
    return 0;
}

static int
free__mark(PyObject *o, void *arg)
{
    free_ctx *c = arg;
    uint32_t j = tgc_ptrmap_get(c->map, o);
    if (j != UINT32_MAX && !c->alive[j]) {
        c->alive[j] = 1;
        c->stack[c->sp++] = j;
    }
    return 0;
}

Py_ssize_t
tgc_hook_free(PyObject *objs, int check)
{
    Py_ssize_t n = PyList_GET_SIZE(objs);
    if (n == 0 || n >= (Py_ssize_t)UINT32_MAX) {
        return 0;
    }
    PyObject **items = PySequence_Fast_ITEMS(objs);
    tgc_ptrmap map;
    free_ctx c = {0};
    Py_ssize_t cleared = 0;
    if (!check) {
        /* No Python code ran since the collector's own resurrection check: all unreachable. */
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *op = items[i];
            inquiry clear = Py_TYPE(op)->tp_clear;
            if (clear != NULL) {
                Py_INCREF(op);
                (void)clear(op);
                if (PyErr_Occurred()) {
                    PyErr_WriteUnraisable(op);
                }
                Py_DECREF(op);
                cleared++;
            }
        }
        return cleared;
    }
    if (tgc_ptrmap_init(&map, (size_t)n) < 0) {
        return 0;
    }
    c.map = &map;
    c.internal = calloc((size_t)n, sizeof(uint32_t));
    c.alive = calloc((size_t)n, 1);
    c.stack = malloc((size_t)n * sizeof(uint32_t));
    uint32_t *slot = malloc((size_t)n * sizeof(uint32_t));
    if (!c.internal || !c.alive || !c.stack || !slot) {
        goto done;
    }
    /* Our list holds one reference per occurrence (an object may appear twice when naming added
     * a dict that was already garbage). */
    for (Py_ssize_t i = 0; i < n; i++) {
        slot[i] = tgc_ptrmap_put(&map, items[i], (uint32_t)i);
        c.internal[slot[i]]++;
    }
    /* References from inside the set. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slot[i] != (uint32_t)i) {
            continue;  /* a duplicate: traverse each object once */
        }
        traverseproc trav = Py_TYPE(items[i])->tp_traverse;
        if (trav != NULL && PyObject_IS_GC(items[i])) {
            trav(items[i], free__count, &c);
        }
    }
    /* The resurrection check: any reference we cannot account for comes from outside, so that
     * object and everything it reaches stay alive and intact. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slot[i] == (uint32_t)i && (size_t)Py_REFCNT(items[i]) > c.internal[i] &&
            !c.alive[i]) {
            c.alive[i] = 1;
            c.stack[c.sp++] = (uint32_t)i;
        }
    }
    while (c.sp > 0) {
        PyObject *op = items[c.stack[--c.sp]];
        traverseproc trav = Py_TYPE(op)->tp_traverse;
        if (trav != NULL && PyObject_IS_GC(op)) {
            trav(op, free__mark, &c);
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slot[i] != (uint32_t)i || c.alive[i]) {
            continue;
        }
        PyObject *op = items[i];
        inquiry clear = Py_TYPE(op)->tp_clear;
        if (clear == NULL) {
            continue;
        }
        Py_INCREF(op);
        (void)clear(op);
        if (PyErr_Occurred()) {
            PyErr_WriteUnraisable(op);
        }
        Py_DECREF(op);
        cleared++;
    }
done:
    tgc_ptrmap_free(&map);
    free(c.internal);
    free(c.alive);
    free(c.stack);
    free(slot);
    return cleared;
}

/* ------------------------------------------------------------------------------------------ */
/* The gc callback                                                                             */

static long
hook__get_debug(tgc_state *st)
{
    PyObject *r = PyObject_CallMethod(st->gc_module, "get_debug", NULL);
    long flags = r ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    return flags;
}

static int
hook__set_debug(tgc_state *st, long flags)
{
    PyObject *r = PyObject_CallMethod(st->gc_module, "set_debug", "l", flags);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static void
hook__start(tgc_state *st)
{
    if (st->armed || st->busy || PyList_GET_SIZE(st->observers) == 0 ||
        tgc_compat_is_finalizing()) {
        return;
    }
    long flags = hook__get_debug(st);
    PyObject *garbage = flags >= 0 ? PyObject_GetAttrString(st->gc_module, "garbage") : NULL;
    if (garbage == NULL || !PyList_Check(garbage)) {
        Py_XDECREF(garbage);
        PyErr_Clear();
        return;
    }
    st->user_saveall = (flags & TGC_DEBUG_SAVEALL) != 0;
    if (!st->user_saveall && hook__set_debug(st, flags | TGC_DEBUG_SAVEALL) < 0) {
        Py_DECREF(garbage);
        PyErr_Clear();
        return;
    }
    st->saved_flags = flags;
    st->garbage = garbage;
    st->garbage_len = PyList_GET_SIZE(garbage);
    st->armed = 1;
}

/* Calls one observer; its exceptions are logged, never propagated. */
static void
hook__call(tgc_state *st, tgc_handle *h, PyObject *arg, const char *what)
{
    PyObject *cb = Py_NewRef(h->callback);  /* it may remove itself, dropping its reference */
    PyObject *r = PyObject_CallOneArg(cb, arg);
    Py_DECREF(cb);
    if (r == NULL) {
        tgc_log_exception(st, what);
    }
    Py_XDECREF(r);
}

/* Runs the observers on objs. Returns 1 when Python code may have run (and so may have made
 * some of objs reachable again), 0 when nothing ran. */
static int
hook__notify(tgc_state *st, PyObject *objs, int generation)
{
    int ran = 0;
    PyObject *snapshot = PyList_AsTuple(st->observers);  /* observers may (un)register meanwhile */
    if (snapshot == NULL) {
        tgc_log_exception(st, "listing observers");
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
                tgc_log_exception(st, "copying the garbage list");
                continue;
            }
            hook__call(st, h, copy, "an observe_garbage observer");
            Py_DECREF(copy);
            ran = 1;
        }
        else {
            want_tensors = 1;
        }
    }
    if (want_tensors && tgc_torch_resolve(st) == 1) {
        int any = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objs) && !any; i++) {
            any = tgc_is_tensor(st, PyList_GET_ITEM(objs, i));
        }
        /* One report per distinct filter: observers with the same device share it. */
        PyObject *made[8] = {NULL};
        const tgc_filter *made_for[8] = {NULL};
        int nmade = 0;
        for (Py_ssize_t i = 0; any && i < nobs; i++) {
            tgc_handle *h = (tgc_handle *)PyTuple_GET_ITEM(snapshot, i);
            if (h->module == NULL || h->kind == TGC_OBS_GARBAGE) {
                continue;
            }
            PyObject *report = NULL;
            for (int k = 0; k < nmade && report == NULL; k++) {
                const tgc_filter *f = made_for[k];
                if (f->kind == h->filter.kind && f->index == h->filter.index &&
                    f->predicate == h->filter.predicate && strcmp(f->type, h->filter.type) == 0) {
                    report = Py_NewRef(made[k]);
                }
            }
            ran = 1;  /* building a report calls reprs, the predicate, torch */
            if (report == NULL) {
                report = tgc_report_build(st, objs, &h->filter, generation);
                if (report == NULL) {
                    tgc_log_exception(st, "building a cycle report");
                    continue;
                }
                if (nmade < 8) {
                    made[nmade] = Py_NewRef(report);
                    made_for[nmade++] = &h->filter;
                }
            }
            if (report != Py_None) {
                if (h->kind == TGC_OBS_HTML) {
                    PyObject *html = tgc_report_html(st, (tgc_report *)report);
                    if (html == NULL) {
                        tgc_log_exception(st, "rendering a cycle report");
                    }
                    else {
                        hook__call(st, h, html, "an observe_tensor_cycles callback");
                        Py_DECREF(html);
                    }
                }
                else {
                    hook__call(st, h, report, "an observe_cycles callback");
                }
            }
            Py_DECREF(report);
        }
        for (int k = 0; k < nmade; k++) {
            Py_DECREF(made[k]);
        }
    }
    PyErr_Clear();
    Py_DECREF(snapshot);
    return ran;
}

static void
hook__stop(tgc_state *st, PyObject *info)
{
    if (!st->armed) {
        return;
    }
    st->armed = 0;
    PyObject *garbage = st->garbage;  /* take over the state's reference */
    st->garbage = NULL;
    if (!st->user_saveall && hook__set_debug(st, st->saved_flags) < 0) {
        PyErr_WriteUnraisable(st->hook);  /* nothing better to do; flags must not stay */
    }
    Py_ssize_t now = PyList_GET_SIZE(garbage);
    if (now <= st->garbage_len) {
        Py_DECREF(garbage);
        return;
    }
    int generation = -1;
    PyObject *gen = PyDict_Check(info) ? PyDict_GetItemString(info, "generation") : NULL;
    if (gen != NULL) {
        generation = (int)PyLong_AsLong(gen);
        PyErr_Clear();
    }
    Py_ssize_t k = now - st->garbage_len;
    PyObject *objs = PyList_New(k);  /* new reference */
    if (objs == NULL) {
        PyErr_WriteUnraisable(st->hook);
        Py_DECREF(garbage);
        return;
    }
    PyObject **src = ((PyListObject *)garbage)->ob_item + st->garbage_len;
    if (st->user_saveall) {
        /* The user asked the collector to keep garbage: we only look. */
        for (Py_ssize_t i = 0; i < k; i++) {
            PyList_SET_ITEM(objs, i, Py_NewRef(src[i]));
        }
        st->busy = 1;
        if (!tgc_compat_is_finalizing()) {
            hook__notify(st, objs, generation);
        }
        st->busy = 0;
        Py_DECREF(objs);
        Py_DECREF(garbage);
        return;
    }
    /* Move this collection's entries out of gc.garbage: the references change owner, so no
     * refcount traffic, and the list keeps its capacity for the next collection. */
    memcpy(((PyListObject *)objs)->ob_item, src, (size_t)k * sizeof(PyObject *));
    Py_SET_SIZE(garbage, st->garbage_len);
    /* Objects with a legacy tp_del are uncollectable: the collector leaves them in gc.garbage. */
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *op = PyList_GET_ITEM(objs, i);
        if (Py_TYPE(op)->tp_del != NULL && PyList_Append(garbage, op) < 0) {
            PyErr_WriteUnraisable(st->hook);
        }
    }
    /* If another gc callback ran before ours, it may have looked at gc.garbage. */
    PyObject *cbs = PyObject_GetAttrString(st->gc_module, "callbacks");
    int check = cbs == NULL || !PyList_Check(cbs) || PyList_GET_SIZE(cbs) == 0 ||
                PyList_GET_ITEM(cbs, 0) != st->hook;
    Py_XDECREF(cbs);
    PyErr_Clear();
    st->busy = 1;
    if (!tgc_compat_is_finalizing()) {
        check |= hook__notify(st, objs, generation);
    }
    tgc_hook_free(objs, check);
    st->busy = 0;
    Py_DECREF(objs);
    Py_DECREF(garbage);
}

PyObject *
tgc_hook_callback(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_state *st = tgc_state_of(module);
    if (st == NULL || nargs != 2 || !PyUnicode_Check(args[0]) || st->observers == NULL) {
        Py_RETURN_NONE;
    }
    if (PyUnicode_CompareWithASCIIString(args[0], "start") == 0) {
        hook__start(st);
    }
    else if (PyUnicode_CompareWithASCIIString(args[0], "stop") == 0) {
        hook__stop(st, args[1]);
    }
    if (PyErr_Occurred()) {
        /* never let our trouble escape into the collector */
        PyErr_WriteUnraisable(st->hook);
    }
    Py_RETURN_NONE;
}
