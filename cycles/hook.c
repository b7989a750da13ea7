/* hook.c: the gc.callbacks entry that makes the detector cheap enough to leave on.
 *
 * "start": set DEBUG_SAVEALL for this one collection, remembering the user's flags and
 *          len(gc.garbage).
 * "stop":  restore the flags, take exactly what this collection appended to gc.garbage, run the
 *          observers on it, then free it ourselves the way the collector would have (tp_clear),
 *          sparing anything an observer made reachable again. No extra collections, no profiler
 *          trampoline; the user's gc.garbage entries, flags and sys.getprofile() are untouched. */
#include "tgc.h"

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

/* How many times the hook sits on gc.callbacks (by identity: no user __eq__ runs). */
static Py_ssize_t
hook__registered(tgc_state *st)
{
    Py_ssize_t found = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(st->gc_callbacks); i++) {
        found += PyList_GET_ITEM(st->gc_callbacks, i) == st->hook;
    }
    return found;
}

/* Takes every occurrence of the hook off gc.callbacks. Only safe where the collector is not
 * iterating the list, or from the list's last entry. */
static int
hook__unhook(tgc_state *st)
{
    PyObject *cbs = st->gc_callbacks;
    for (Py_ssize_t i = PyList_GET_SIZE(cbs) - 1; i >= 0; i--) {
        if (PyList_GET_ITEM(cbs, i) == st->hook && PySequence_DelItem(cbs, i) < 0) {
            return -1;
        }
    }
    return 0;
}

int
tgc_hook_add(tgc_state *st, PyObject *module, tgc_handle *h)
{
    if (PyList_Append(st->observers, (PyObject *)h) < 0) {
        return -1;
    }
    h->module = Py_NewRef(module);
    st->unhook_pending = 0;
    /* Someone may have cleared gc.callbacks (test suites do): put the hook back if missing. */
    int rc = 0;
    if (hook__registered(st) == 0) {
        /* First in line: "stop" then sees the garbage before any other callback can touch it,
         * which is what lets hook__stop skip the resurrection check when nothing else ran.
         * Inside a collection the collector is walking the list by index: append instead, so
         * no callback runs twice. */
        rc = st->busy ? PyList_Append(st->gc_callbacks, st->hook)
                      : PyList_Insert(st->gc_callbacks, 0, st->hook);
    }
    if (rc < 0) {
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
        /* The hook stays on gc.callbacks only while someone listens: otherwise zero cost.
         * Inside our own "stop" the collector is iterating gc.callbacks by index, and removing
         * our entry would make it skip the next callback: append the hook once more instead;
         * that last call of the phase takes every copy off, with nothing left to skip. */
        if (rc == 0 && PyList_GET_SIZE(st->observers) == 0 && st->gc_callbacks != NULL) {
            if (st->busy) {
                if (!st->unhook_pending) {
                    rc = PyList_Append(st->gc_callbacks, st->hook);
                }
                st->unhook_pending = 1;
            }
            else if (!st->armed) {
                rc = hook__unhook(st);
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

/* tp_traverse of a gc object; nothing for the others. */
static void
hook__traverse(PyObject *op, visitproc visit, void *arg)
{
    traverseproc trav = Py_TYPE(op)->tp_traverse;
    if (trav != NULL && PyObject_IS_GC(op)) {
        (void)trav(op, visit, arg);
    }
}

/* Clears items[i] the way the collector's delete_garbage does and drops the list's reference
 * at once, so objects die in the order (and while in cache) the collector would free them. */
static void
hook__clear_release(PyObject **items, Py_ssize_t i)
{
    PyObject *op = items[i];
    inquiry clear = Py_TYPE(op)->tp_clear;
    /* Only our list still holds it: dropping that reference deallocates it, which releases
     * everything it references. That is what the collector's cascade does to such an object
     * (clearing a neighbour freed it), and it halves the tp_clear calls on pairs and rings. */
    if (clear != NULL && Py_REFCNT(op) > 1) {
        (void)clear(op);
        if (PyErr_Occurred()) {
            PyErr_WriteUnraisable((PyObject *)Py_TYPE(op));
        }
    }
    items[i] = NULL;  /* the list no longer owns it */
    Py_DECREF(op);
}

/* The collector's resurrection check, redone over a list's objects: which of them something
 * outside the list still references, directly or through other members. */
typedef struct {
    tgc_ptrmap map;
    free_ctx c;      /* c.alive[slot]: reachable from outside, so to be left intact */
    uint32_t *slot;  /* per position: the slot of the object's first occurrence (== position) */
} free_check;

static void
free__check_free(free_check *fc)
{
    tgc_ptrmap_free(&fc->map);
    free(fc->c.internal);
    free(fc->c.alive);
    free(fc->c.stack);
    free(fc->slot);
}

/* Fills fc for items[0..n) (0 < n < UINT32_MAX), each of which the list holds one reference to
 * per occurrence. Runs no Python code. Returns -1 without memory (fc is then still fine to
 * pass to free__check_free). */
static int
free__check(free_check *fc, PyObject **items, Py_ssize_t n)
{
    memset(fc, 0, sizeof(*fc));
    if (tgc_ptrmap_init(&fc->map, (size_t)n) < 0) {
        return -1;
    }
    free_ctx *c = &fc->c;
    c->map = &fc->map;
    c->internal = calloc((size_t)n, sizeof(uint32_t));
    c->alive = calloc((size_t)n, 1);
    c->stack = malloc((size_t)n * sizeof(uint32_t));
    fc->slot = malloc((size_t)n * sizeof(uint32_t));
    if (!c->internal || !c->alive || !c->stack || !fc->slot) {
        return -1;
    }
    uint32_t *slot = fc->slot;
    /* Our list holds one reference per occurrence (an object may appear twice when naming added
     * a dict that was already garbage). */
    for (Py_ssize_t i = 0; i < n; i++) {
        slot[i] = tgc_ptrmap_put(&fc->map, items[i], (uint32_t)i);
        c->internal[slot[i]]++;
    }
    /* References from inside the set. */
    tgc_ptrcount inside = {&fc->map, c->internal};
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slot[i] != (uint32_t)i) {
            continue;  /* a duplicate: traverse each object once */
        }
        hook__traverse(items[i], tgc_ptrcount_visit, &inside);
    }
    /* Any reference we cannot account for comes from outside, so that object and everything it
     * reaches stay alive and intact. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slot[i] == (uint32_t)i && (size_t)Py_REFCNT(items[i]) > c->internal[i] &&
            !c->alive[i]) {
            c->alive[i] = 1;
            c->stack[c->sp++] = (uint32_t)i;
        }
    }
    while (c->sp > 0) {
        hook__traverse(items[c->stack[--c->sp]], free__mark, c);
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
    Py_ssize_t cleared = 0;
    if (!check) {
        /* No Python code ran since the collector's own resurrection check: all unreachable.
         * Each object's list reference is dropped right after its clear, so objects die while
         * still in cache, in the order the collector itself would free them. */
        for (Py_ssize_t i = 0; i < n; i++) {
            hook__clear_release(items, i);
        }
        return n;
    }
    free_check fc;
    if (free__check(&fc, items, n) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (fc.slot[i] != (uint32_t)i || fc.c.alive[i]) {
            continue;
        }
        /* duplicates further on still hold their own references */
        hook__clear_release(items, i);
        cleared++;
    }
done:
    free__check_free(&fc);
    return cleared;
}

/* Whether op's tp_finalize (__del__, a suspended generator's or coroutine's close) has yet to run:
 * the collector runs it once, in finalize_garbage, before it clears garbage. */
static int
hook__finalizer_pending(PyObject *op)
{
    return Py_TYPE(op)->tp_finalize != NULL && !PyObject_GC_IsFinalized(op);
}

static int
hook__finalizer_pending_any(PyObject *objs)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objs); i++) {
        if (hook__finalizer_pending(PyList_GET_ITEM(objs, i))) {
            return 1;
        }
    }
    return 0;
}

/* The collector's finalize_garbage, for garbage it never saw (an island, kept aside by our list):
 * runs the pending tp_finalize of each object of objs that nothing outside still reaches (the
 * observers ran Python code), in list order, which is the order the collector finds garbage in.
 * A finalizer may break the cycle (a generator's close() releases its frame's locals), resurrect
 * objects, or raise (reported as unraisable, as the collector does); the caller's
 * tgc_hook_free(objs, 1) then frees what is still unreachable. Without memory, nothing runs and
 * the objects live until a later collection finds them. Returns how many finalizers ran. */
static Py_ssize_t
hook__finalize(PyObject *objs)
{
    Py_ssize_t n = PyList_GET_SIZE(objs), ran = 0;
    if (n == 0 || n >= (Py_ssize_t)UINT32_MAX) {
        return 0;
    }
    PyObject **items = PySequence_Fast_ITEMS(objs);
    free_check fc;
    PyObject *due = NULL;
    if (free__check(&fc, items, n) < 0) {
        goto done;
    }
    due = PyList_New(0);  /* new reference: the finalizers' own list, since they run Python code
                             that could reach objs (gc.get_referrers) */
    if (due == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (fc.slot[i] == (uint32_t)i && !fc.c.alive[i] && hook__finalizer_pending(items[i]) &&
            PyList_Append(due, items[i]) < 0) {
            goto done;
        }
    }
    free__check_free(&fc);
    memset(&fc, 0, sizeof(fc));
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(due); i++) {
        PyObject *op = Py_NewRef(PyList_GET_ITEM(due, i));  /* as finalize_garbage holds it */
        PyObject_CallFinalizer(op);  /* marks it finalized: never again, not even in dealloc */
        if (PyErr_Occurred()) {
            PyErr_WriteUnraisable(op);
        }
        Py_DECREF(op);
        ran++;
    }
done:
    PyErr_Clear();  /* only an out-of-memory error of our own can be left here */
    free__check_free(&fc);
    Py_XDECREF(due);
    return ran;
}

/* ------------------------------------------------------------------------------------------ */
/* The gc callback                                                                             */

static long
hook__get_debug(tgc_state *st)
{
    PyObject *r = PyObject_CallNoArgs(st->gc_get_debug);
    long flags = r ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    return flags;
}

static int
hook__set_debug(tgc_state *st, long flags)
{
    PyObject *f = PyLong_FromLong(flags);
    PyObject *r = f ? PyObject_CallOneArg(st->gc_set_debug, f) : NULL;
    Py_XDECREF(f);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static void hook__stop(tgc_state *st, PyObject *info);
static void hook__island_stop(tgc_state *st, PyObject *info);
/* hook__deliver's `how`: some objects still have a tp_finalize to run (an island: the collector
 * never saw it); the objects come from the young generations only, whatever the collection. */
enum { DELIVER_FINALIZE = 1, DELIVER_YOUNG = 2 };
static void hook__deliver(tgc_state *st, PyObject *objs, int generation, Py_ssize_t garbage_total,
                          int check, int how, PyObject *gc_garbage);
static int hook__finalizer_pending_any(PyObject *objs);
static void hook__island_early(tgc_state *st, PyObject *info);

/* The "generation" of a gc callback's info dict, -1 when missing. */
static int
hook__info_generation(tgc_state *st, PyObject *info)
{
    /* an interned key: this runs for every collection, skipped or not */
    PyObject *gen = info && PyDict_Check(info) ? PyDict_GetItemWithError(info, st->str_generation)
                                               : NULL;  /* borrowed */
    long g = gen != NULL && PyLong_Check(gen) ? PyLong_AsLong(gen) : -1;
    PyErr_Clear();
    return g < 0 || g > 2 ? -1 : (int)g;
}

/* Whether a callback other than ours runs after ours in this "start" phase. It runs Python code
 * after the pre-scan and before the collection, and what it allocates (a tensor, a cycle holding
 * one) joins generation 0, which every collection examines: the pre-scan's answer would be stale.
 * Judged from our first entry (a later copy of ours only runs after the first declined). */
static int
hook__others_follow(tgc_state *st)
{
    PyObject *cbs = st->gc_callbacks;
    Py_ssize_t i = 0, n = PyList_GET_SIZE(cbs);
    while (i < n && PyList_GET_ITEM(cbs, i) != st->hook) {
        i++;
    }
    if (i == n) {
        return 1;  /* not called by the collector from the list: we know nothing of the rest */
    }
    for (i++; i < n; i++) {
        if (PyList_GET_ITEM(cbs, i) != st->hook) {
            return 1;
        }
    }
    return 0;
}

/* Whether this collection needs the detector. observe_garbage observers see every collection;
 * cycle observers only care about garbage that holds tensors, which a young collection can only
 * find when its generations contain a tensor or an object referencing one (young.c). */
static int
hook__wanted(tgc_state *st, PyObject *info)
{
    if (!st->young_scan) {
        return 1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(st->observers); i++) {
        if (((tgc_handle *)PyList_GET_ITEM(st->observers, i))->kind == TGC_OBS_GARBAGE) {
            return 1;
        }
    }
    int torch_known = tgc_torch_resolve(st) == 1;
    PyErr_Clear();
    int gen = hook__info_generation(st, info);
    if (gen < 0) {
        return 1;
    }
    PyTypeObject *tensor = torch_known ? (PyTypeObject *)st->tensor_type : NULL;  /* borrowed */
    int verdict;
    if (hook__others_follow(st)) {
        verdict = TGC_YOUNG_ARM;
    }
    else if (st->island_on) {
        /* A full collection is armed whatever the young generations hold: no pre-scan walks the
         * old ones. But a young island there whose finalizer breaks its cycle would be freed
         * during the collection, before DEBUG_SAVEALL saves anything: hook__start reports it
         * first. Other islands are left to the armed path, which reports them as well. */
        TGC_PHASE_BEGIN(t0);
        tgc_island_info how;
        verdict = tgc_young_island(tensor, gen < 2 ? gen : 1, st->island_crosscheck, &st->island,
                                   &how);
        st->island_marked += how.marked;
        st->island_checked += how.checked;
        st->island_mismatched += how.mismatch;
        TGC_PHASE_END(st, verdict == TGC_YOUNG_ISLAND ? TGC_PHASE_ISLAND : TGC_PHASE_SCAN, t0);
        if (verdict == TGC_YOUNG_ISLAND && gen < 2) {
            return 0;  /* the collector runs alone; "stop" reports the island (hook__start) */
        }
        if (verdict == TGC_YOUNG_ISLAND && !hook__finalizer_pending_any(st->island)) {
            Py_CLEAR(st->island);
        }
        if (gen == 2 && tensor != NULL) {
            verdict = TGC_YOUNG_ARM;
        }
        st->island_fallback += verdict == TGC_YOUNG_ARM && gen < 2;
    }
    else {
        verdict = tgc_young_may_hold(tensor, gen) ? TGC_YOUNG_ARM : TGC_YOUNG_NONE;
    }
    if (verdict == TGC_YOUNG_ARM) {
        st->young_armed++;
        return 1;
    }
    st->young_skipped++;
    return 0;
}

static void
hook__start(tgc_state *st, PyObject *info)
{
    if (st->island != NULL && !st->busy) {
        /* The last "stop" never came: its island is still unreachable garbage, which a later
         * collection finds again once our list lets go of it. */
        Py_CLEAR(st->island);
    }
    if (st->armed && !st->busy) {
        /* The last "stop" never came (gc.callbacks changed mid-collection): restore the flags
         * and drain what that collection left, with the full check since we know nothing. */
        hook__stop(st, NULL);
    }
    if (st->armed || st->busy || PyList_GET_SIZE(st->observers) == 0 ||
        tgc_compat_is_finalizing()) {
        return;
    }
    int want = hook__wanted(st, info);
    if (!want && st->island == NULL) {
        return;
    }
    long flags = hook__get_debug(st);
    if (flags < 0) {
        PyErr_Clear();
        Py_CLEAR(st->island);
        return;
    }
    if (st->island != NULL && want) {
        /* A full collection's island (hook__wanted): now, then the collection is armed. */
        if (flags == 0) {
            hook__island_early(st, info);
            /* the observers ran: they may have left, or changed the flags */
            flags = PyList_GET_SIZE(st->observers) > 0 ? hook__get_debug(st) : -1;
            if (flags < 0) {
                PyErr_Clear();
                return;
            }
        }
        Py_CLEAR(st->island);
    }
    if (st->island != NULL) {
        if (flags == 0) {
            st->island_used++;
            return;  /* "stop" reports the island */
        }
        /* The user's own debug flags (DEBUG_SAVEALL, DEBUG_COLLECTABLE...) are about what the
         * collector sees as garbage: it must see the island too. */
        Py_CLEAR(st->island);
        st->island_fallback++;
        st->young_armed++;
    }
    PyObject *garbage = Py_NewRef(st->gc_garbage);
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

/* The hook lets go of a report (holding one reference to it) before the garbage is freed. */
static void
hook__settle(tgc_state *st, PyObject *report)
{
    int drawn = tgc_report_settle(report, 1);
    st->dots_kept += drawn == 1;
    st->dots_skipped += drawn == 0;
}

/* Runs the observers on objs. Returns 1 when Python code may have run (and so may have made
 * some of objs reachable again), 0 when nothing ran. */
static int
hook__notify(tgc_state *st, PyObject *objs, int generation, int any_tensor,
             Py_ssize_t garbage_total)
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
                report = tgc_report_build(st, objs, &h->filter, generation, garbage_total);
                TGC_PHASE_END(st, TGC_PHASE_BUILD, t0);
                if (report == NULL) {
                    tgc_log_exception(st, "building a cycle report");
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
                    TGC_PHASE_BEGIN(t0);
                    hook__call(st, h, report, "an observe_cycles callback");
                    TGC_PHASE_END(st, TGC_PHASE_CALLBACK, t0);
                }
            }
            if (!shared) {
                hook__settle(st, report);
            }
            Py_DECREF(report);
        }
        for (int k = 0; k < nmade; k++) {
            /* The garbage is freed after this: a report kept by an observer draws its DOT now. */
            hook__settle(st, made[k]);
            Py_DECREF(made[k]);
        }
    }
    PyErr_Clear();
    Py_DECREF(snapshot);
    return ran;
}

/* Tensors outside the garbage that the garbage holds the last references to: a young collection
 * only examines young objects, so a new cycle holding an old tensor frees that tensor through
 * refcounting once the cycle is cleared, without the tensor ever being in the garbage list.
 * Such a tensor is kept alive by the garbage just the same, so it joins objs (and is freed with
 * it, exactly when it would have died anyway). Only valid while no Python code has run since the
 * collector's check, so reference counts are exact.
 *
 * The common case (a few referenced tensors at most) needs no allocation: the table and arrays
 * live in the context; more distinct tensors than HELD_INLINE sends the caller to the heap-sized
 * retry in hook__held_more. */
#define HELD_INLINE 32
typedef struct {
    tgc_state *st;
    tgc_ptrmap counts;   /* tensor address -> slot in tensors[]/refs[] */
    PyObject **tensors;
    Py_ssize_t *refs;
    uint32_t n, cap;
    int full;
    tgc_typecache types;     /* recent types that are not tensors (alive: objects of them are
                                referenced by the garbage we hold) */
    /* For hook__split_seeded: positions in the garbage list of the tensors and of the objects
     * that reference one (seeds), found by the same pass; `lost` once either overflows. */
    int cur_hit, lost;
    uint32_t ntargets, nseeds;
    uint32_t targets[HELD_INLINE], seeds[HELD_INLINE];
    const void *keys_inline[2 * HELD_INLINE];
    uint32_t vals_inline[2 * HELD_INLINE];
    PyObject *tensors_inline[HELD_INLINE];
    Py_ssize_t refs_inline[HELD_INLINE];
} held_ctx;

static void
held__init_inline(held_ctx *c, tgc_state *st)
{
    c->st = st;
    memset(c->keys_inline, 0, sizeof(c->keys_inline));
    c->counts.keys = c->keys_inline;
    c->counts.vals = c->vals_inline;
    c->counts.mask = 2 * HELD_INLINE - 1;
    c->tensors = c->tensors_inline;
    c->refs = c->refs_inline;
    c->n = 0;
    c->cap = HELD_INLINE;
    c->full = 0;
    memset(&c->types, 0, sizeof(c->types));
    c->cur_hit = c->lost = 0;
    c->ntargets = c->nseeds = 0;
}

static void
held__note(held_ctx *c, uint32_t *list, uint32_t *n, Py_ssize_t pos)
{
    if (*n == HELD_INLINE) {
        c->lost = 1;
        return;
    }
    list[(*n)++] = (uint32_t)pos;
}

static int
held__visit(PyObject *o, void *arg)
{
    held_ctx *c = arg;
    /* only used once torch is resolved (want_held in hook__stop), so tensor_type is set */
    if (c->full || !tgc_typecache_is_tensor(&c->types, (PyTypeObject *)c->st->tensor_type, o)) {
        return 0;
    }
    c->cur_hit = 1;
    uint32_t slot = tgc_ptrmap_get(&c->counts, o);
    if (slot == UINT32_MAX) {
        if (c->n == c->cap) {
            c->full = 1;  /* more distinct tensors than we made room for: retry bigger */
            return 0;
        }
        slot = tgc_ptrmap_put(&c->counts, o, c->n);
        c->tensors[c->n] = o;
        c->refs[c->n] = 0;
        c->n++;
    }
    c->refs[slot]++;
    return 0;
}

/* Appends to objs every tensor of c whose references all come from the garbage. Returns 1 when
 * any joined. */
static int
held__join(held_ctx *c, PyObject *objs)
{
    int joined = 0;
    for (uint32_t k = 0; k < c->n; k++) {
        /* Every reference is one from the garbage: nothing else keeps it. (A tensor that is
         * itself garbage has one more, from objs, so it is not added twice.) */
        if (Py_REFCNT(c->tensors[k]) == c->refs[k]) {
            if (PyList_Append(objs, c->tensors[k]) < 0) {
                PyErr_Clear();
                break;
            }
            joined = 1;
        }
    }
    return joined;
}

/* The slow path, for garbage that references more than HELD_INLINE distinct tensors: one more
 * traversal with heap tables sized for all of them. Returns 1 when any tensor joined objs. */
static int
hook__held_more(tgc_state *st, PyObject *objs, Py_ssize_t n)
{
    int joined = 0;
    for (uint32_t cap = 8 * HELD_INLINE; cap != 0 && cap <= (1u << 24); cap *= 8) {
        held_ctx *c = malloc(sizeof(held_ctx));
        if (c == NULL) {
            return 0;
        }
        held__init_inline(c, st);
        c->tensors = malloc(cap * sizeof(PyObject *));
        c->refs = malloc(cap * sizeof(Py_ssize_t));
        c->cap = cap;
        if (c->tensors == NULL || c->refs == NULL || tgc_ptrmap_init(&c->counts, cap) < 0) {
            free(c->tensors);
            free(c->refs);
            free(c);
            return 0;
        }
        for (Py_ssize_t i = 0; i < n && !c->full; i++) {
            hook__traverse(PyList_GET_ITEM(objs, i), held__visit, c);
        }
        int retry = c->full;
        if (!retry) {
            joined = held__join(c, objs);
        }
        tgc_ptrmap_free(&c->counts);
        free(c->tensors);
        free(c->refs);
        free(c);
        if (!retry) {
            break;
        }
    }
    return joined;
}

/* The tensors' part of the garbage without the whole reference graph. What hook__split keeps is
 * the set A of objects that reach a tensor (tensors included) plus everything A reaches. A starts
 * as the tensors and the objects referencing one of them (both found by hook__scan; a referrer of
 * a tensor outside the garbage is no member); it is complete once every member's reference count
 * is explained by our list's reference plus references from members, since any other referrer
 * would be an object outside A referencing into it. (Counts are exact: no Python code ran since
 * the collector's check.) Until then, one pass over the rest adds whatever references a member.
 * Small sets only: anything larger, or still open after a few passes, goes to the full split. */
#define SEEDED_MAX 256
#define SEEDED_PASSES 3

typedef struct {
    tgc_ptrmap set;      /* members: object -> index in members[] */
    uint32_t members[SEEDED_MAX];
    uint32_t inner[SEEDED_MAX];
    uint32_t n;
    uint8_t *in;         /* per position in the garbage list */
    int hit;
} seeded_ctx;

static int
seeded__add(seeded_ctx *c, PyObject *const *items, uint32_t pos)
{
    if (c->in[pos]) {
        return 0;
    }
    if (c->n == SEEDED_MAX) {
        return -1;
    }
    c->in[pos] = 1;
    tgc_ptrmap_put(&c->set, items[pos], c->n);
    c->members[c->n++] = pos;
    return 0;
}

static int
seeded__refers(PyObject *o, void *arg)
{
    seeded_ctx *c = arg;
    c->hit = tgc_ptrmap_get(&c->set, o) != UINT32_MAX;
    return c->hit;  /* one reference into the set is enough: stop the traversal */
}

/* Whether every member's references are accounted for; -1 when the counts cannot be right. */
static int
seeded__closed(seeded_ctx *c, PyObject *const *items)
{
    memset(c->inner, 0, c->n * sizeof(uint32_t));
    tgc_ptrcount inside = {&c->set, c->inner};
    for (uint32_t k = 0; k < c->n; k++) {
        hook__traverse(items[c->members[k]], tgc_ptrcount_visit, &inside);
    }
    int closed = 1;
    for (uint32_t k = 0; k < c->n; k++) {
        Py_ssize_t rc = Py_REFCNT(items[c->members[k]]);
        if (rc < 1 + (Py_ssize_t)c->inner[k]) {
            return -1;
        }
        closed &= rc == 1 + (Py_ssize_t)c->inner[k];
    }
    return closed;
}

/* Fills keep[] (n bytes) like tgc_relevant would. Returns 1 when done, 0 when the caller must use
 * the full split, -1 on out of memory. */
static int
hook__seeded_keep(const held_ctx *held, PyObject *const *items, uint32_t n, uint32_t scanned,
                  uint8_t *keep)
{
    seeded_ctx *c = malloc(sizeof(seeded_ctx));
    uint8_t *in = calloc(n, 1);
    tgc_ptrmap all = {0};
    free_ctx fw = {0};
    if (c == NULL || in == NULL || tgc_ptrmap_init(&c->set, SEEDED_MAX) < 0) {
        free(c);
        free(in);
        return -1;
    }
    c->n = 0;
    c->in = in;
    int over = 0;  /* more members than SEEDED_MAX */
    for (uint32_t k = 0; k < held->ntargets; k++) {
        over |= seeded__add(c, items, held->targets[k]) < 0;
    }
    for (uint32_t pos = scanned; pos < n; pos++) {
        over |= seeded__add(c, items, pos) < 0;  /* old tensors only the garbage held (held__join) */
    }
    /* A seed referenced some tensor, but maybe only one that lives on outside the garbage (not
     * joined): the full split's graph has no edge to that one, so such a seed belongs to the set
     * only when it references a member. */
    for (uint32_t k = 0; k < held->nseeds && !over; k++) {
        c->hit = 0;
        hook__traverse(items[held->seeds[k]], seeded__refers, c);
        if (c->hit) {
            over |= seeded__add(c, items, held->seeds[k]) < 0;
        }
    }
    int closed = over ? -1 : seeded__closed(c, items);
    for (int pass = 0; closed == 0 && pass < SEEDED_PASSES; pass++) {
        for (uint32_t pos = 0; pos < n && closed == 0; pos++) {
            if (in[pos]) {
                continue;
            }
            c->hit = 0;
            hook__traverse(items[pos], seeded__refers, c);
            if (c->hit && seeded__add(c, items, pos) < 0) {
                closed = -1;
            }
        }
        if (closed == 0) {
            closed = seeded__closed(c, items);
        }
    }
    int rc = 0;
    if (closed != 1) {
        goto done;  /* the full split decides */
    }
    /* Everything the members reach stays intact too. */
    rc = -1;  /* out of memory from here on */
    fw.map = &all;
    fw.alive = keep;
    fw.stack = malloc((size_t)n * sizeof(uint32_t));
    if (fw.stack == NULL || tgc_ptrmap_init(&all, n) < 0) {
        goto done;
    }
    for (uint32_t pos = 0; pos < n; pos++) {
        tgc_ptrmap_put(&all, items[pos], pos);
        keep[pos] = in[pos];
    }
    for (uint32_t k = 0; k < c->n; k++) {
        fw.stack[fw.sp++] = c->members[k];
    }
    while (fw.sp > 0) {
        hook__traverse(items[fw.stack[--fw.sp]], free__mark, &fw);
    }
    rc = 1;
done:
    tgc_ptrmap_free(&all);
    free(fw.stack);
    tgc_ptrmap_free(&c->set);
    free(c);
    free(in);
    return rc;
}

/* Called while the collector's own resurrection check still holds (no Python code ran since):
 * frees at once every object of *objs that neither reaches a tensor nor is reached from one
 * that does, the way the fast path would, and replaces *objs (stolen) with a list of the rest.
 * Reports and the later check then only look at that part. On any failure *objs is left as it
 * was. Returns the number freed. */
static Py_ssize_t
hook__split(tgc_state *st, PyObject **objs_p, const held_ctx *held, Py_ssize_t scanned)
{
    PyObject *objs = *objs_p;
    Py_ssize_t n = PyList_GET_SIZE(objs);
    if (n < 64 || n >= (Py_ssize_t)UINT32_MAX) {
        return 0;  /* small sets: not worth it */
    }
    PyObject **items = PySequence_Fast_ITEMS(objs);
    tgc_ptrmap map = {0};
    tgc_graph g = {0};
    uint32_t *src = NULL, *dst = NULL, m = 0;
    uint8_t *target = calloc((size_t)n, 1), *keep = malloc((size_t)n);
    Py_ssize_t freed = 0;
    long kept = -1;
    int seeded = 0;
    if (keep != NULL && held != NULL && st->seeded_on) {
        /* without the scan's complete lists of tensors and their referrers: the full split */
        if (!held->full && !held->lost && scanned <= n) {
            seeded = hook__seeded_keep(held, items, (uint32_t)n, (uint32_t)scanned, keep);
        }
        st->seeded_used += seeded == 1;
        st->seeded_fallback += seeded != 1;
    }
    if (seeded == 1) {
        kept = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            kept += keep[i];
        }
        goto split;
    }
    if (target == NULL || keep == NULL ||
        tgc_edges(items, (uint32_t)n, &map, &src, &dst, &m) < 0) {
        PyErr_Clear();
        free(target);
        free(keep);
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        target[i] = (uint8_t)tgc_is_tensor(st, items[i]);
    }
    if (tgc_graph_build(&g, (uint32_t)n, m, src, dst) == 0) {
        kept = tgc_relevant(&g, target, keep);
    }
split:;
    PyObject *rest = kept >= 0 && kept < n ? PyList_New((Py_ssize_t)kept) : NULL;
    if (rest != NULL) {
        /* Move the kept references first, so clearing the others cannot free them. */
        Py_ssize_t j = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (keep[i]) {
                PyList_SET_ITEM(rest, j++, items[i]);
                items[i] = NULL;
            }
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (items[i] != NULL) {
                hook__clear_release(items, i);
                freed++;
            }
        }
        Py_DECREF(objs);  /* all its slots are NULL now */
        *objs_p = rest;
    }
    PyErr_Clear();
    tgc_graph_free(&g);
    tgc_ptrmap_free(&map);
    free(src);
    free(dst);
    free(target);
    free(keep);
    return freed;
}

/* info["collected"] / info["uncollectable"] of the "stop" phase, -1 when missing. */
static Py_ssize_t
hook__info_count(PyObject *info, const char *key)
{
    PyObject *v = info && PyDict_Check(info) ? PyDict_GetItemString(info, key) : NULL;  /* borrowed */
    Py_ssize_t n = v != NULL && PyLong_Check(v) ? PyLong_AsSsize_t(v) : -1;
    PyErr_Clear();
    return n;
}

/* One pass over this collection's garbage: whether it holds a tensor, and (when `garbage` is
 * given) objects with a legacy tp_del put back into gc.garbage, where the collector leaves them
 * as uncollectable. With `held`, the same pass also traverses each object for the tensors it
 * references (see held_ctx), so the garbage is walked once while it is in cache. Types repeat a
 * lot in garbage, so their answers are cached for this pass; the objects keep their types alive
 * meanwhile. */
static int
hook__scan(tgc_state *st, PyObject *objs, PyObject *garbage, held_ctx *held)
{
    enum { CACHE = 8, TENSOR = 1, LEGACY = 2 };
    PyTypeObject *types[CACHE] = {NULL};
    int flags[CACHE] = {0};
    int any_tensor = 0, next = 0;
    int torch_known = tgc_torch_resolve(st) == 1;
    PyErr_Clear();
    PyTypeObject *last = NULL;
    int last_f = 0;
    tgc_shapes shapes;
    memset(&shapes, 0, sizeof(shapes));
    Py_ssize_t n = PyList_GET_SIZE(objs);
    PyObject **items = PySequence_Fast_ITEMS(objs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = items[i];
        PyTypeObject *tp = Py_TYPE(op);
        int f;
        if (tp == last) {
            f = last_f;  /* runs of one type are the common case */
        }
        else {
            f = -1;
            for (int c = 0; c < CACHE; c++) {
                if (types[c] == tp) {
                    f = flags[c];
                    break;
                }
            }
            if (f < 0) {
                f = (torch_known && tgc_is_tensor(st, op) ? TENSOR : 0) |
                    (tp->tp_del ? LEGACY : 0);
                types[next] = tp;
                flags[next] = f;
                next = (next + 1) % CACHE;
            }
            last = tp;
            last_f = f;
        }
        any_tensor |= f & TENSOR;
        if (held != NULL && !held->full) {
            held->cur_hit = 0;
            (void)tgc_traverse_fast(&shapes, op, held__visit, held);  /* types are no tensors */
            if (held->cur_hit) {
                held__note(held, held->seeds, &held->nseeds, i);
            }
            if (f & TENSOR) {
                held__note(held, held->targets, &held->ntargets, i);
            }
        }
        if ((f & LEGACY) && garbage != NULL && PyList_Append(garbage, op) < 0) {
            PyErr_WriteUnraisable(st->hook);
        }
    }
    return any_tensor;
}

static void
hook__stop(tgc_state *st, PyObject *info)
{
    if (st->island != NULL) {
        hook__island_stop(st, info);
        return;
    }
    if (!st->armed) {
        return;
    }
    st->armed = 0;
    PyObject *garbage = st->garbage;  /* take over the state's reference */
    st->garbage = NULL;
    if (!st->user_saveall && hook__set_debug(st, st->saved_flags) < 0) {
        PyErr_WriteUnraisable(st->hook);  /* nothing better to do; flags must not stay */
    }
    /* If another gc callback ran before ours, it may have looked at gc.garbage. */
    PyObject *cbs = st->gc_callbacks;
    int check = PyList_GET_SIZE(cbs) == 0 || PyList_GET_ITEM(cbs, 0) != st->hook;
    /* With DEBUG_SAVEALL the collector appends its final garbage ("collected"), then the legacy
     * finalizer set ("uncollectable"), after every finalizer, weakref callback and "start"
     * callback ran. Whatever those appended to gc.garbage sits before that tail and is the
     * user's: take only the tail. */
    Py_ssize_t now = PyList_GET_SIZE(garbage);
    Py_ssize_t ncol = hook__info_count(info, "collected");
    Py_ssize_t nunc = hook__info_count(info, "uncollectable");
    Py_ssize_t grew = now - st->garbage_len;
    Py_ssize_t k = ncol >= 0 && nunc >= 0 ? ncol + nunc : -1;
    if (k != grew) {
        /* Python code appended or removed entries during the collection, or "collected" also
         * counts weakrefs freed by their callbacks: the range may hold the user's objects, so
         * only the full resurrection check is safe. */
        check = 1;
        if (k < 0 || k > grew) {
            k = grew;
        }
    }
    if (nunc != 0) {
        check = 1;  /* the legacy finalizer set never went through the resurrection check */
    }
    if (k <= 0) {
        Py_DECREF(garbage);
        return;
    }
    Py_ssize_t from = now - k;
    int generation = hook__info_generation(st, info);
    PyObject *objs = PyList_New(k);  /* new reference */
    if (objs == NULL) {
        PyErr_WriteUnraisable(st->hook);
        Py_DECREF(garbage);
        return;
    }
    PyObject **src = ((PyListObject *)garbage)->ob_item + from;
    if (st->user_saveall) {
        /* The user asked the collector to keep garbage: we only look. */
        for (Py_ssize_t i = 0; i < k; i++) {
            PyList_SET_ITEM(objs, i, Py_NewRef(src[i]));
        }
        st->busy = 1;
        if (!tgc_compat_is_finalizing()) {
            hook__notify(st, objs, generation, hook__scan(st, objs, NULL, NULL), k);
        }
        st->busy = 0;
        Py_DECREF(objs);
        Py_DECREF(garbage);
        return;
    }
    /* Move this collection's entries out of gc.garbage: the references change owner, so no
     * refcount traffic, and the list keeps its capacity for the next collection. */
    memcpy(((PyListObject *)objs)->ob_item, src, (size_t)k * sizeof(PyObject *));
    Py_SET_SIZE(garbage, from);
    hook__deliver(st, objs, generation, k, check, 0, garbage);
    Py_DECREF(garbage);
}

/* The common end of all paths: finds the tensors objs holds, reports, frees. objs is a list
 * owning this collection's garbage (stolen); garbage_total counts all of the collection's
 * garbage; check says Python code may have run since the last proof that objs is unreachable;
 * how (DELIVER_*): with DELIVER_FINALIZE the pending finalizers of objs run after the report and
 * before anything is cleared; gc_garbage, when not NULL, takes back objects with a legacy tp_del. */
static void
hook__deliver(tgc_state *st, PyObject *objs, int generation, Py_ssize_t garbage_total, int check,
              int how, PyObject *gc_garbage)
{
    int finalize = (how & DELIVER_FINALIZE) != 0;
    Py_ssize_t k = PyList_GET_SIZE(objs);
    /* Which kinds of observer are listening decides the extra work below. */
    int garbage_observers = 0, cycle_observers = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(st->observers); i++) {
        int kind = ((tgc_handle *)PyList_GET_ITEM(st->observers, i))->kind;
        garbage_observers |= kind == TGC_OBS_GARBAGE;
        cycle_observers |= kind != TGC_OBS_GARBAGE;
    }
    /* A full collection examined every tensor itself; a younger one (or an island of young
     * objects) may have left out old tensors that only this garbage keeps alive. */
    held_ctx held;
    int young = generation != 2 || (how & DELIVER_YOUNG);
    int want_held = cycle_observers && young && !check && tgc_torch_resolve(st) == 1;
    if (want_held) {
        held__init_inline(&held, st);
    }
    PyErr_Clear();
    int any_tensor = hook__scan(st, objs, gc_garbage, want_held ? &held : NULL);
    if (want_held) {
        any_tensor |= held.full ? hook__held_more(st, objs, k) : held__join(&held, objs);
    }
    st->busy = 1;  /* from here on, clearing objects can run __del__ of objects they release */
    /* An observe_garbage observer is handed every object intact; otherwise only the tensors'
     * part of the garbage needs to outlive the report. (The split clears what it frees: not
     * before pending finalizers ran.) */
    if (any_tensor && !check && !finalize && !garbage_observers && !tgc_compat_is_finalizing()) {
        hook__split(st, &objs, want_held ? &held : NULL, k);
    }
    if (!tgc_compat_is_finalizing()) {
        check |= hook__notify(st, objs, generation, any_tensor, garbage_total);
    }
    if (finalize) {
        /* The report shows the garbage as the collector found it; now what finalize_garbage
         * would have done, which may break the cycles or resurrect objects. */
        st->island_finalizers += (unsigned long long)hook__finalize(objs);
        check = 1;
    }
    TGC_PHASE_BEGIN(t0);
    tgc_hook_free(objs, check);
    TGC_PHASE_END(st, TGC_PHASE_FREE, t0);
    st->busy = 0;
    Py_DECREF(objs);
}

/* "stop" after "start" found an island: the collector ran alone on everything else, and the
 * island, kept alive by our list, is this collection's tensor-holding garbage. The collector
 * would have run its members' pending finalizers before handing it over (and a finalizer that
 * breaks the cycle would have freed it unseen, DEBUG_SAVEALL or not): hook__deliver runs them
 * after the report. */
static void
hook__island_stop(tgc_state *st, PyObject *info)
{
    PyObject *objs = st->island;  /* take over the state's reference */
    st->island = NULL;
    Py_ssize_t ncol = hook__info_count(info, "collected");
    Py_ssize_t total = PyList_GET_SIZE(objs) + (ncol > 0 ? ncol : 0);
    TGC_PHASE_BEGIN(t0);
    int check = !tgc_young_island_exact(objs);
    TGC_PHASE_END(st, TGC_PHASE_EXACT, t0);
    int finalize = hook__finalizer_pending_any(objs);
    st->island_finalized += finalize;
    hook__deliver(st, objs, hook__info_generation(st, info), total, check,
                  finalize ? DELIVER_FINALIZE : 0, NULL);
}

/* "start" of a full collection, with an island of young objects that has a pending finalizer
 * (hook__wanted): reported, finalized and freed now, before the collection, since DEBUG_SAVEALL
 * could not save it (the finalizer may break the cycle and free it unseen). No Python code ran
 * since the proof: no check needed. */
static void
hook__island_early(tgc_state *st, PyObject *info)
{
    PyObject *objs = st->island;  /* take over the state's reference */
    st->island = NULL;
    st->island_finalized++;
    st->island_early++;
    hook__deliver(st, objs, hook__info_generation(st, info), PyList_GET_SIZE(objs), 0,
                  DELIVER_FINALIZE | DELIVER_YOUNG, NULL);
}

/* 1 for "start", 2 for "stop", 0 for anything else. The collector passes a fresh ASCII str every
 * time (never interned), twice per collection: compared in place, without a call. */
static int
hook__phase(PyObject *s)
{
    if (!PyUnicode_IS_COMPACT_ASCII(s)) {
        return 0;
    }
    const char *p = (const char *)PyUnicode_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    return n == 5 && memcmp(p, "start", 5) == 0 ? 1 : n == 4 && memcmp(p, "stop", 4) == 0 ? 2 : 0;
}

PyObject *
tgc_hook_callback(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_state *st = tgc_state_of(module);
    if (st == NULL || nargs != 2 || !PyUnicode_Check(args[0]) || st->observers == NULL) {
        Py_RETURN_NONE;
    }
    if (st->unhook_pending && !st->busy) {
        /* the trailing copy appended by tgc_hook_remove: the last callback of this phase */
        st->unhook_pending = 0;
        if (PyList_GET_SIZE(st->observers) == 0 && hook__unhook(st) < 0) {
            PyErr_WriteUnraisable(st->hook);
        }
        Py_RETURN_NONE;
    }
    int phase = hook__phase(args[0]);
    if (phase == 1) {
        hook__start(st, args[1]);
    }
    else if (phase == 2) {
        hook__stop(st, args[1]);
    }
    if (PyErr_Occurred()) {
        /* never let our trouble escape into the collector */
        PyErr_WriteUnraisable(st->hook);
    }
    Py_RETURN_NONE;
}
