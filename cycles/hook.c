/* hook.c: the gc.callbacks entry that makes the detector cheap enough to leave on (contract in
 * hook.h; observers.c calls the observers, split.c finds the tensors' part of the garbage, free.c
 * frees it).
 *
 * "start": plant the sentinel (young.h's tgc_young_plant) and let the collection run alone; its
 *          finalizer, the collector's first, hands over the part of the garbage that holds
 *          tensors (hook__caught keeps it as the island), or arms the collection from inside it.
 *          Where no sentinel can be planted: the pre-scan and islands, or set DEBUG_SAVEALL for
 *          this one collection, remembering the user's flags and len(gc.garbage).
 * "stop":  report the island and free it; or restore the flags, take exactly what this
 *          collection appended to gc.garbage, run the observers on it, then free it ourselves the
 *          way the collector would have (tp_clear), sparing anything an observer made reachable
 *          again. No extra collections, no profiler trampoline; the user's gc.garbage entries,
 *          flags and sys.getprofile() are untouched.
 * Resident: once a "stop" finds it fits (cycle observers only, the program's debug flags off, the
 *          tensor watch on), the hook leaves gc.callbacks; young.c's resident pair plants itself
 *          inside the collections that meet a tensor, and its catcher puts the hook back on
 *          gc.callbacks, first in line, for the "stop" of one whose garbage it took or armed,
 *          which reports and leaves again. A collection that meets no tensor runs with nothing of
 *          ours. */
#include "cycles.h"
#include "hook_int.h"

#define TGC_DEBUG_SAVEALL 32   /* gc.DEBUG_SAVEALL, fixed since Python 2 */

/* ------------------------------------------------------------------------------------------ */
/* The gc callback                                                                             */

static long
hook__get_debug(tgc_cycles *c)
{
    PyObject *r = PyObject_CallNoArgs(c->gc_get_debug);
    long flags = r ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    return flags;
}

static int
hook__set_debug(tgc_cycles *c, long flags)
{
    PyObject *f = PyLong_FromLong(flags);
    PyObject *r = f ? PyObject_CallOneArg(c->gc_set_debug, f) : NULL;
    Py_XDECREF(f);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static void hook__stop(tgc_cycles *c, PyObject *info);
static void hook__island_stop(tgc_cycles *c, PyObject *info);
/* hook__deliver's `how`: some objects still have a tp_finalize to run (an island: the collector
 * never saw it); the objects come from the young generations only, whatever the collection. */
enum { DELIVER_FINALIZE = 1, DELIVER_YOUNG = 2 };
static void hook__deliver(tgc_cycles *c, PyObject *objs, int generation, Py_ssize_t garbage_total,
                          int check, int how, PyObject *gc_garbage);
static void hook__island_early(tgc_cycles *c, PyObject *info);

/* The "generation" of a gc callback's info dict, -1 when missing. */
static int
hook__info_generation(tgc_cycles *c, PyObject *info)
{
    /* an interned key: this runs for every collection, skipped or not */
    PyObject *gen = info && PyDict_Check(info) ? PyDict_GetItemWithError(info, c->str_generation)
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
hook__others_follow(tgc_cycles *c)
{
    PyObject *cbs = c->gc_callbacks;
    Py_ssize_t i = 0, n = PyList_GET_SIZE(cbs);
    while (i < n && PyList_GET_ITEM(cbs, i) != c->hook) {
        i++;
    }
    if (i == n) {
        return 1;  /* not called by the collector from the list: we know nothing of the rest */
    }
    for (i++; i < n; i++) {
        if (PyList_GET_ITEM(cbs, i) != c->hook) {
            return 1;
        }
    }
    return 0;
}

void
tgc_hook_drop_island(tgc_cycles *c)
{
    if (c->island_deferred != NULL) {
        tgc_young_undefer(c->island_deferred);
        Py_CLEAR(c->island_deferred);
    }
    Py_CLEAR(c->island);
}

/* Sets DEBUG_SAVEALL for the rest of this collection, remembering the user's flags (read now:
 * `flags`, negative when unknown) and len(gc.garbage), for "stop". 0, or -1 (no exception set):
 * the collection then runs alone. */
static int
hook__arm(tgc_cycles *c, long flags)
{
    if (flags < 0) {
        PyErr_Clear();
        return -1;
    }
    PyObject *garbage = Py_NewRef(c->gc_garbage);
    c->user_saveall = (flags & TGC_DEBUG_SAVEALL) != 0;
    if (!c->user_saveall && hook__set_debug(c, flags | TGC_DEBUG_SAVEALL) < 0) {
        Py_DECREF(garbage);
        PyErr_Clear();
        return -1;
    }
    c->saved_flags = flags;
    c->garbage = garbage;
    c->garbage_len = PyList_GET_SIZE(garbage);
    c->armed = 1;
    return 0;
}

/* The sentinel's catcher (young.h's tgc_young_catch), called from inside the collection, before
 * any finalizer of the garbage ran. With the user's debug flags all off the garbage it took is
 * this collection's island, which "stop" reports (hook__island_stop) and frees; otherwise the
 * collector must see all of it as garbage (the user's DEBUG_SAVEALL keeps it, DEBUG_COLLECTABLE
 * prints it): the deferred finalizers are given back and the collection is armed, as it would
 * have been from "start". */
static void
hook__caught(void *arg, PyObject *island, PyObject *deferred)
{
    tgc_cycles *c = arg;
    long flags = hook__get_debug(c);
    if (island != NULL && flags == 0 && c->island == NULL && !c->armed) {
        c->island = island;
        c->island_deferred = deferred;
        c->counters.sentinel_taken++;
    }
    else {
        if (island != NULL) {
            tgc_young_undefer(deferred);
            Py_DECREF(deferred);
            Py_DECREF(island);
        }
        if (!c->armed && hook__arm(c, flags) == 0) {
            c->counters.sentinel_armed++;
        }
    }
    PyErr_Clear();  /* the collector expects none from a finalizer */
}

/* ------------------------------------------------------------------------------------------ */
/* The resident sentinel: off gc.callbacks between collections                                 */

/* Puts the hook on gc.callbacks for this collection's "stop", first in line, unless it is there:
 * from inside the collection (the resident pair's finalizer), where the collector is not walking
 * the list (it walked it for "start" and walks it again for "stop"). 0, or -1 (no exception). */
static int
hook__join(tgc_cycles *c)
{
    PyObject *cbs = c->gc_callbacks;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cbs); i++) {
        if (PyList_GET_ITEM(cbs, i) == c->hook) {
            return 0;
        }
    }
    if (PyList_Insert(cbs, 0, c->hook) < 0) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static void
hook__resident_off(tgc_cycles *c)
{
    if (c->resident) {
        c->resident = 0;
        tgc_young_resident_stop();
    }
}

int
tgc_hook_resident(const tgc_cycles *c)
{
    return c->resident;
}

/* The resident pair's catcher: hook__caught, then "stop" must come for what it took or armed.
 * Armed (the user's debug flags, or garbage that could not be walked) the hook stays on
 * gc.callbacks, where "start" handles such collections without a pair, until a "stop" finds the
 * resident sentinel fits again. */
static void hook__stop(tgc_cycles *c, PyObject *info);

static void
hook__resident_caught(void *arg, PyObject *island, PyObject *deferred)
{
    tgc_cycles *c = arg;
    if (c->observers == NULL || PyList_GET_SIZE(c->observers) == 0 || c->busy ||
        tgc_compat_is_finalizing()) {
        /* nobody listens any more (the last observer left inside this collection) */
        if (island != NULL) {
            tgc_young_undefer(deferred);
            Py_DECREF(deferred);
            Py_DECREF(island);
        }
        return;
    }
    /* What an earlier collection's "stop" never came for (the program took the hook off
     * gc.callbacks during it): its island is garbage again, its flags go back and what it saved
     * is reported now, before this collection's. */
    if (c->island != NULL) {
        tgc_hook_drop_island(c);
    }
    if (c->armed) {
        hook__stop(c, NULL);
    }
    hook__caught(c, island, deferred);
    if (c->island == NULL && !c->armed) {
        return;
    }
    c->counters.resident_joined++;
    if (c->armed) {
        hook__resident_off(c);
    }
    if (hook__join(c) == 0) {
        return;
    }
    /* No memory for one more entry: nothing may wait for a "stop" that will not come. The
     * island goes back to being garbage (a later collection finds it); armed flags go back. */
    tgc_hook_drop_island(c);
    if (c->armed) {
        c->armed = 0;
        if (!c->user_saveall && hook__set_debug(c, c->saved_flags) < 0) {
            PyErr_Clear();
        }
        Py_CLEAR(c->garbage);
    }
}

/* No spare pair could be made for the next collection: back on gc.callbacks. */
static void
hook__resident_lost(void *arg)
{
    tgc_cycles *c = arg;
    if (c->resident) {
        hook__resident_off(c);
        if (hook__join(c) < 0) {
            PyErr_Clear();
        }
    }
}

/* Whether the resident sentinel can watch instead of "start": cycle observers only (an
 * observe_garbage observer sees every collection), the sentinel's switches on, torch imported,
 * and the user's debug flags all off (DEBUG_COLLECTABLE and DEBUG_STATS would show the pair,
 * DEBUG_SAVEALL needs every collection armed). */
static int
hook__resident_fits(tgc_cycles *c)
{
    if (!c->resident_on || !c->sentinel_on || !c->young_scan || !c->young_ok ||
        c->observers == NULL || PyList_GET_SIZE(c->observers) == 0 ||
        tgc_compat_is_finalizing()) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c->observers); i++) {
        if (((tgc_handle *)PyList_GET_ITEM(c->observers, i))->kind == TGC_OBS_GARBAGE) {
            return 0;
        }
    }
    int torch_known = tgc_tensor_resolve(c->tensor) == 1;
    PyErr_Clear();
    if (!torch_known) {
        return 0;
    }
    long flags = hook__get_debug(c);
    PyErr_Clear();
    return flags == 0;
}

/* Whether the hook is gc.callbacks' last entry and its only one, nor the tail there: then this
 * call is the last of the collector's walk of the list, and taking it off skips nothing. (With
 * two entries of the hook, a call cannot tell which one it comes from.) */
static int
hook__alone_last(tgc_cycles *c)
{
    PyObject *cbs = c->gc_callbacks;
    Py_ssize_t n = PyList_GET_SIZE(cbs);
    if (n == 0 || PyList_GET_ITEM(cbs, n - 1) != c->hook) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n - 1; i++) {
        PyObject *cb = PyList_GET_ITEM(cbs, i);  /* borrowed */
        if (cb == c->hook || cb == c->tail) {
            return 0;
        }
    }
    return 1;
}

/* Whether a resident hook has nothing left to do on gc.callbacks. */
static int
hook__resident_idle(tgc_cycles *c)
{
    return c->resident && !c->busy && !c->armed && c->island == NULL && c->deferred == NULL &&
           !c->deliver_trailing && !c->unhook_pending;
}

/* Leaves gc.callbacks only where the collector's walk of the list cannot skip an entry for it:
 * when the hook is the list's last entry and its only one, or from inside a collection between
 * the walks (the resident pair's finalizer, hook__resident_tick). Otherwise it stays, called and
 * doing nothing, until one of those: nothing is appended, so a program callback that moves
 * itself to the end of the list is still called once. */
static void
hook__leave(tgc_cycles *c)
{
    if (hook__resident_idle(c) && hook__alone_last(c) && tgc_hook_unhook(c) < 0) {
        PyErr_Clear();  /* stays on; leaves at a later call */
    }
}

/* The end of every resident pair's finalizer: inside the collection, where the collector walks
 * no list the program can change. */
static void
hook__resident_tick(void *arg)
{
    tgc_cycles *c = arg;
    if (hook__resident_idle(c) && tgc_hook_unhook(c) < 0) {
        PyErr_Clear();
    }
}

/* The end of a "stop" with nothing pending: a hook on gc.callbacks goes resident when that
 * fits; a resident one leaves gc.callbacks when it can. */
static void
hook__settle_resident(tgc_cycles *c)
{
    if (!c->resident) {
        if (!hook__resident_fits(c) ||
            tgc_young_resident_start((PyTypeObject *)c->tensor->type, hook__resident_caught,
                                     hook__resident_lost, hook__resident_tick, c) < 0) {
            return;
        }
        c->resident = 1;
        c->counters.resident_went++;
    }
    hook__leave(c);
}

int
tgc_hook_resident_check(tgc_cycles *c)
{
    if (!c->resident || tgc_young_resident()) {
        return 0;
    }
    hook__resident_off(c);
    if (c->observers != NULL && PyList_GET_SIZE(c->observers) > 0 && hook__join(c) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Whether this collection needs the detector. observe_garbage observers see every collection;
 * cycle observers only care about garbage that holds tensors, which a young collection can only
 * find when its generations contain a tensor or an object referencing one (young.c). */
static int
hook__wanted(tgc_cycles *c, PyObject *info)
{
    if (!c->young_scan) {
        return 1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c->observers); i++) {
        if (((tgc_handle *)PyList_GET_ITEM(c->observers, i))->kind == TGC_OBS_GARBAGE) {
            return 1;
        }
    }
    int torch_known = tgc_tensor_resolve(c->tensor) == 1;
    PyErr_Clear();
    int gen = hook__info_generation(c, info);
    if (gen < 0) {
        return 1;
    }
    PyTypeObject *tensor = torch_known ? (PyTypeObject *)c->tensor->type : NULL;  /* borrowed */
    if (tensor == NULL) {
        c->counters.young_skipped++;
        return 0;  /* torch is not imported: there are no tensors */
    }
    if (c->prescan_crosscheck && gen < 2) {
        Py_ssize_t tested;
        c->counters.prescan_mismatched +=
            (unsigned long long)tgc_young_crosscheck_hits(tensor, gen, &tested);
        c->counters.prescan_checked += (unsigned long long)tested;
    }
    if (c->sentinel_on && c->island == NULL &&
        tgc_young_plant(gen, tensor, hook__caught, c) == 0) {
        /* the collector runs alone; the sentinel looks at its garbage (hook__caught) */
        c->counters.sentinel_planted++;
        c->counters.young_skipped++;
        return 0;
    }
    int verdict;
    if (hook__others_follow(c)) {
        verdict = TGC_YOUNG_ARM;
    }
    else if (c->island_on) {
        /* A full collection is armed whatever the young generations hold: no pre-scan walks the
         * old ones. But a young island there whose finalizer breaks its cycle would be freed
         * during the collection, before DEBUG_SAVEALL saves anything: hook__start reports it
         * first. Other islands are left to the armed path, which reports them as well. */
        TGC_PHASE_BEGIN(t0);
        tgc_island_info how;
        verdict = tgc_young_island(tensor, gen < 2 ? gen : 1, c->island_crosscheck, &c->island,
                                   &how);
        c->counters.island_marked += how.marked;
        c->counters.island_checked += how.checked;
        c->counters.island_mismatched += how.mismatch;
        TGC_PHASE_END(c, verdict == TGC_YOUNG_ISLAND ? TGC_PHASE_ISLAND : TGC_PHASE_SCAN, t0);
        if (verdict == TGC_YOUNG_ISLAND && gen < 2) {
            return 0;  /* the collector runs alone; "stop" reports the island (hook__start) */
        }
        if (verdict == TGC_YOUNG_ISLAND && !tgc_hook_finalizer_pending_any(c->island)) {
            Py_CLEAR(c->island);
        }
        if (gen == 2 && tensor != NULL) {
            verdict = TGC_YOUNG_ARM;
        }
        c->counters.island_fallback += verdict == TGC_YOUNG_ARM && gen < 2;
    }
    else {
        verdict = tgc_young_may_hold(tensor, gen) ? TGC_YOUNG_ARM : TGC_YOUNG_NONE;
    }
    if (verdict == TGC_YOUNG_ARM) {
        c->counters.young_armed++;
        return 1;
    }
    c->counters.young_skipped++;
    return 0;
}

static void
hook__start(tgc_cycles *c, PyObject *info)
{
    if (c->island != NULL && !c->busy) {
        /* The last "stop" never came: its island is still unreachable garbage, which a later
         * collection finds again once our list lets go of it. */
        tgc_hook_drop_island(c);
    }
    if (!c->busy) {
        c->counters.sentinel_lost += (unsigned long long)tgc_young_uproot();
    }
    if (c->armed && !c->busy) {
        /* The last "stop" never came (gc.callbacks changed mid-collection): restore the flags
         * and drain what that collection left, with the full check since we know nothing. */
        hook__stop(c, NULL);
    }
    if (c->armed || c->busy || c->resident || PyList_GET_SIZE(c->observers) == 0 ||
        tgc_compat_is_finalizing()) {
        return;  /* resident: the pair plants itself if this collection meets a tensor */
    }
    int want = hook__wanted(c, info);
    if (!want && c->island == NULL) {
        return;
    }
    long flags = hook__get_debug(c);
    if (flags < 0) {
        PyErr_Clear();
        Py_CLEAR(c->island);
        return;
    }
    if (c->island != NULL && want) {
        /* A full collection's island (hook__wanted): now, then the collection is armed. */
        if (flags == 0) {
            hook__island_early(c, info);
            /* the observers ran: they may have left, or changed the flags */
            flags = PyList_GET_SIZE(c->observers) > 0 ? hook__get_debug(c) : -1;
            if (flags < 0) {
                PyErr_Clear();
                return;
            }
        }
        Py_CLEAR(c->island);
    }
    if (c->island != NULL) {
        if (flags == 0) {
            c->counters.island_used++;
            return;  /* "stop" reports the island */
        }
        /* The user's own debug flags (DEBUG_SAVEALL, DEBUG_COLLECTABLE...) are about what the
         * collector sees as garbage: it must see the island too. */
        Py_CLEAR(c->island);
        c->counters.island_fallback++;
        c->counters.young_armed++;
    }
    PyObject *garbage = Py_NewRef(c->gc_garbage);
    c->user_saveall = (flags & TGC_DEBUG_SAVEALL) != 0;
    if (!c->user_saveall && hook__set_debug(c, flags | TGC_DEBUG_SAVEALL) < 0) {
        Py_DECREF(garbage);
        PyErr_Clear();
        return;
    }
    c->saved_flags = flags;
    c->garbage = garbage;
    c->garbage_len = PyList_GET_SIZE(garbage);
    c->armed = 1;
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

static void
hook__stop(tgc_cycles *c, PyObject *info)
{
    if (!c->busy) {
        c->counters.sentinel_lost += (unsigned long long)tgc_young_uproot();
    }
    if (c->island != NULL) {
        hook__island_stop(c, info);
        if (!c->armed) {
            return;
        }
        info = NULL;  /* its counts were the island's collection's; the armed part checks all */
    }
    if (!c->armed) {
        return;
    }
    c->armed = 0;
    PyObject *garbage = c->garbage;  /* take over the state's reference */
    c->garbage = NULL;
    if (!c->user_saveall && hook__set_debug(c, c->saved_flags) < 0) {
        PyErr_WriteUnraisable(c->hook);  /* nothing better to do; flags must not stay */
    }
    /* If another gc callback ran before ours, it may have looked at gc.garbage. */
    PyObject *cbs = c->gc_callbacks;
    int check = PyList_GET_SIZE(cbs) == 0 || PyList_GET_ITEM(cbs, 0) != c->hook;
    /* With DEBUG_SAVEALL the collector appends its final garbage ("collected"), then the legacy
     * finalizer set ("uncollectable"), after every finalizer, weakref callback and "start"
     * callback ran. Whatever those appended to gc.garbage sits before that tail and is the
     * user's: take only the tail. */
    Py_ssize_t now = PyList_GET_SIZE(garbage);
    Py_ssize_t ncol = hook__info_count(info, "collected");
    Py_ssize_t nunc = hook__info_count(info, "uncollectable");
    Py_ssize_t grew = now - c->garbage_len;
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
    int generation = hook__info_generation(c, info);
    PyObject *objs = PyList_New(k);  /* new reference */
    if (objs == NULL) {
        PyErr_WriteUnraisable(c->hook);
        Py_DECREF(garbage);
        return;
    }
    PyObject **src = ((PyListObject *)garbage)->ob_item + from;
    if (c->user_saveall) {
        /* The user asked the collector to keep garbage: we only look. */
        for (Py_ssize_t i = 0; i < k; i++) {
            PyList_SET_ITEM(objs, i, Py_NewRef(src[i]));
        }
        c->busy = 1;
        if (!tgc_compat_is_finalizing()) {
            tgc_hook_notify(c, objs, generation, tgc_hook_scan(c, objs, NULL, NULL), k);
        }
        c->busy = 0;
        Py_DECREF(objs);
        Py_DECREF(garbage);
        return;
    }
    /* Move this collection's entries out of gc.garbage: the references change owner, so no
     * refcount traffic, and the list keeps its capacity for the next collection. */
    memcpy(((PyListObject *)objs)->ob_item, src, (size_t)k * sizeof(PyObject *));
    Py_SET_SIZE(garbage, from);
    hook__deliver(c, objs, generation, k, check, 0, garbage);
    Py_DECREF(garbage);
}

/* The common end of all paths: finds the tensors objs holds, reports, frees. objs is a list
 * owning this collection's garbage (stolen); garbage_total counts all of the collection's
 * garbage; check says Python code may have run since the last proof that objs is unreachable;
 * how (DELIVER_*): with DELIVER_FINALIZE the pending finalizers of objs run after the report and
 * before anything is cleared; gc_garbage, when not NULL, takes back objects with a legacy tp_del. */
static void
hook__deliver(tgc_cycles *c, PyObject *objs, int generation, Py_ssize_t garbage_total, int check,
              int how, PyObject *gc_garbage)
{
    int finalize = (how & DELIVER_FINALIZE) != 0;
    Py_ssize_t k = PyList_GET_SIZE(objs);
    /* Which kinds of observer are listening decides the extra work below. */
    int garbage_observers = 0, cycle_observers = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c->observers); i++) {
        int kind = ((tgc_handle *)PyList_GET_ITEM(c->observers, i))->kind;
        garbage_observers |= kind == TGC_OBS_GARBAGE;
        cycle_observers |= kind != TGC_OBS_GARBAGE;
    }
    /* A full collection examined every tensor itself; a younger one (or an island of young
     * objects) may have left out old tensors that only this garbage keeps alive. */
    tgc_held held;
    int young = generation != 2 || (how & DELIVER_YOUNG);
    int want_held = cycle_observers && young && !check && tgc_tensor_resolve(c->tensor) == 1;
    if (want_held) {
        tgc_hook_held_init(&held, (PyTypeObject *)c->tensor->type);
    }
    PyErr_Clear();
    int any_tensor = tgc_hook_scan(c, objs, gc_garbage, want_held ? &held : NULL);
    if (want_held) {
        any_tensor |= held.full ? tgc_hook_held_more(held.tensor, objs, k) : tgc_hook_held_join(&held, objs);
    }
    c->busy = 1;  /* from here on, clearing objects can run __del__ of objects they release */
    /* An observe_garbage observer is handed every object intact; otherwise only the tensors'
     * part of the garbage needs to outlive the report. (The split clears what it frees: not
     * before pending finalizers ran.) */
    if (any_tensor && !check && !finalize && !garbage_observers && !tgc_compat_is_finalizing()) {
        tgc_hook_split(c, &objs, want_held ? &held : NULL, k);
    }
    if (!tgc_compat_is_finalizing()) {
        check |= tgc_hook_notify(c, objs, generation, any_tensor, garbage_total);
    }
    if (finalize) {
        /* The report shows the garbage as the collector found it; now what finalize_garbage
         * would have done, which may break the cycles or resurrect objects. */
        c->counters.island_finalizers += (unsigned long long)tgc_hook_finalize(objs);
        check = 1;
    }
    TGC_PHASE_BEGIN(t0);
    tgc_hook_free(objs, check);
    TGC_PHASE_END(c, TGC_PHASE_FREE, t0);
    c->busy = 0;
    Py_DECREF(objs);
}

/* "stop" after "start" found an island: the collector ran alone on everything else, and the
 * island, kept alive by our list, is this collection's tensor-holding garbage. The collector
 * would have run its members' pending finalizers before handing it over (and a finalizer that
 * breaks the cycle would have freed it unseen, DEBUG_SAVEALL or not): hook__deliver runs them
 * after the report. */
static void
hook__island_stop(tgc_cycles *c, PyObject *info)
{
    PyObject *objs = c->island;  /* take over the state's reference */
    c->island = NULL;
    if (c->island_deferred != NULL) {
        /* the sentinel kept the collector from running these: now they are due */
        tgc_young_undefer(c->island_deferred);
        Py_CLEAR(c->island_deferred);
    }
    Py_ssize_t ncol = hook__info_count(info, "collected");
    Py_ssize_t total = PyList_GET_SIZE(objs) + (ncol > 0 ? ncol : 0);
    TGC_PHASE_BEGIN(t0);
    int check = !tgc_young_island_exact(objs);
    TGC_PHASE_END(c, TGC_PHASE_EXACT, t0);
    int finalize = tgc_hook_finalizer_pending_any(objs);
    c->counters.island_finalized += finalize;
    hook__deliver(c, objs, hook__info_generation(c, info), total, check,
                  finalize ? DELIVER_FINALIZE : 0, NULL);
}

/* "start" of a full collection, with an island of young objects that has a pending finalizer
 * (hook__wanted): reported, finalized and freed now, before the collection, since DEBUG_SAVEALL
 * could not save it (the finalizer may break the cycle and free it unseen). No Python code ran
 * since the proof: no check needed. */
static void
hook__island_early(tgc_cycles *c, PyObject *info)
{
    PyObject *objs = c->island;  /* take over the state's reference */
    c->island = NULL;
    c->counters.island_finalized++;
    c->counters.island_early++;
    hook__deliver(c, objs, hook__info_generation(c, info), PyList_GET_SIZE(objs), 0,
                  DELIVER_FINALIZE | DELIVER_YOUNG, NULL);
}

/* An observer's exception waits (raise_errors): it must reach the program, not another gc
 * callback, whose exception the collector would only report as unraisable. When callbacks
 * other than ours follow in this "stop", the tail entry appended to gc.callbacks (the collector
 * walks the list by index, so it is called after them) hands it over; otherwise now. */
static void
hook__deliver_later(tgc_cycles *c)
{
    if (c->deliver_trailing) {
        return;
    }
    if (hook__others_follow(c)) {
        if (tgc_hook_append_tail(c) == 0) {
            c->deliver_trailing = 1;
            return;
        }
        PyErr_Clear();
    }
    tgc_deliver(c);
}

/* Whether `entry` is gc.callbacks' last entry. */
static int
hook__last_is(tgc_cycles *c, PyObject *entry)
{
    Py_ssize_t n = PyList_GET_SIZE(c->gc_callbacks);
    return n > 0 && PyList_GET_ITEM(c->gc_callbacks, n - 1) == entry;
}

void
tgc_hook_tail(tgc_cycles *c)
{
    if (c->busy || c->observers == NULL) {
        return;
    }
    if (!hook__last_is(c, c->tail)) {
        /* something was appended behind this one during the walk: a later tail ends it */
        if ((c->unhook_pending || c->deliver_trailing) && tgc_hook_append_tail(c) < 0) {
            PyErr_WriteUnraisable(c->tail);
        }
        return;
    }
    /* The walk of this phase ends here: taking entries off skips nothing. */
    int leave = 0, keep = 0;
    if (c->unhook_pending) {
        if (PyList_GET_SIZE(c->observers) > 0) {
            c->unhook_pending = 0;  /* an observer came back */
        }
        else if (c->armed || c->island != NULL || tgc_young_planted()) {
            keep = 1;  /* this collection's "stop" must still come: the tail waits for its end */
        }
        else {
            c->unhook_pending = 0;
            leave = 1;
        }
    }
    if (c->resident && !c->armed && c->island == NULL && !c->unhook_pending) {
        leave = 1;
    }
    if (leave) {
        if (tgc_hook_unhook(c) < 0) {
            PyErr_WriteUnraisable(c->tail);
        }
    }
    else if (!keep) {
        PyObject *cbs = c->gc_callbacks;
        for (Py_ssize_t i = PyList_GET_SIZE(cbs) - 1; i >= 0; i--) {
            if (PyList_GET_ITEM(cbs, i) == c->tail && PySequence_DelItem(cbs, i) < 0) {
                PyErr_WriteUnraisable(c->tail);
                break;
            }
        }
    }
    tgc_deliver(c);  /* an observer's exception, if one waits (raise_errors) */
    if (c->interrupted) {
        c->interrupted = 0;
        PyErr_SetInterrupt();
    }
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

void
tgc_hook_callback(tgc_cycles *c, PyObject *phase_s, PyObject *info)
{
    if (!PyUnicode_Check(phase_s) || c->observers == NULL) {
        return;
    }
    int phase = hook__phase(phase_s);
    if (c->unhook_pending && !c->busy && !c->armed && c->island == NULL &&
        !tgc_young_planted() && PyList_GET_SIZE(c->observers) == 0) {
        /* The last observer left during a collection: the tail takes the hook off. A walk the
         * program cut short before the tail ran: the tail ends this one. */
        if (tgc_hook_append_tail(c) < 0) {
            PyErr_WriteUnraisable(c->hook);
        }
        return;
    }
    if (c->deliver_trailing && !c->busy) {
        tgc_deliver(c);  /* the tail never ran (gc.callbacks changed): now, before anything */
    }
#ifdef TGC_PHASE_TIMES
    if (phase == 1) {
        TGC_PHASE_BEGIN(t0);
        hook__start(c, info);
        if (tgc_young_planted()) {
            TGC_PHASE_END(c, TGC_PHASE_PLANT, t0);
        }
    }
    else if (phase == 2) {
        int planted = tgc_young_planted() && c->island == NULL;  /* and no report to come */
        TGC_PHASE_BEGIN(t0);
        hook__stop(c, info);
        if (planted) {
            TGC_PHASE_END(c, TGC_PHASE_UPROOT, t0);
        }
    }
#else
    if (phase == 1) {
        hook__start(c, info);
    }
    else if (phase == 2) {
        hook__stop(c, info);
    }
#endif
    if (PyErr_Occurred() && !tgc_keep_interrupt(c)) {
        /* never let our trouble escape into the collector */
        PyErr_WriteUnraisable(c->hook);
    }
    if (c->interrupted && !c->busy) {
        /* After the observers ran, so that the KeyboardInterrupt reaches the program at its next
         * bytecode, not an observer (whose exception we would log). */
        c->interrupted = 0;
        PyErr_SetInterrupt();
    }
    if (c->deferred != NULL && !c->busy && phase == 2) {
        hook__deliver_later(c);
    }
    if (phase == 2 && !c->busy && PyList_GET_SIZE(c->observers) > 0 && !c->armed &&
        c->island == NULL && !tgc_young_planted()) {
        hook__settle_resident(c);
    }
    else if (phase == 1) {
        hook__leave(c);  /* resident and still on the list: leaves when it is the last entry */
    }
    if (phase == 2 && !c->busy && !c->unhook_pending && PyList_GET_SIZE(c->observers) == 0 &&
        !c->armed && c->island == NULL) {
        /* The last observer left during this collection, before this "stop" (tgc_hook_remove
         * kept the hook for it): the tail takes the hook off after the other callbacks, which
         * the collector is walking by index. */
        if (tgc_hook_append_tail(c) == 0) {
            c->unhook_pending = 1;
        }
        else {
            PyErr_WriteUnraisable(c->hook);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Switches                                                                                    */

int
tgc_hook_switch(tgc_cycles *c, int which, int on)
{
    static const char *const names[TGC_HOOK_NSWITCHES] = {"the young-generation pre-scan",
                                                          "the seeded split", "islands",
                                                          "the island crosscheck",
                                                          "the pre-scan crosscheck",
                                                          "the sentinel",
                                                          "the resident sentinel"};
    if (which < 0 || which >= TGC_HOOK_NSWITCHES) {
        PyErr_SetString(PyExc_ValueError, "no such switch");
        return -1;
    }
    if (on && !c->young_ok && (which == TGC_HOOK_YOUNG_SCAN || which == TGC_HOOK_SENTINEL ||
                               which == TGC_HOOK_RESIDENT)) {
        PyErr_Format(PyExc_RuntimeError, "%s is not available on this interpreter: %s",
                     names[which], c->young_why);
        return -1;
    }
    if (on && !c->young_ok && (which == TGC_HOOK_ISLAND || which == TGC_HOOK_PRESCAN_CHECK)) {
        PyErr_Format(PyExc_RuntimeError, "%s %s the young-generation pre-scan, which is not "
                     "available on this interpreter: %s", names[which],
                     which == TGC_HOOK_ISLAND ? "need" : "needs", c->young_why);
        return -1;
    }
    on = on != 0;
    switch (which) {
    case TGC_HOOK_YOUNG_SCAN: c->young_scan = on; break;
    case TGC_HOOK_SEEDED: c->seeded_on = on; break;
    case TGC_HOOK_ISLAND: c->island_on = on; break;
    case TGC_HOOK_CROSSCHECK: c->island_crosscheck = on; break;
    case TGC_HOOK_SENTINEL: c->sentinel_on = on; break;
    case TGC_HOOK_RESIDENT: c->resident_on = on; break;
    default: c->prescan_crosscheck = on; break;
    }
    if (c->resident && !(c->resident_on && c->sentinel_on && c->young_scan)) {
        /* back on gc.callbacks; a later "stop" goes resident again when the switches allow */
        hook__resident_off(c);
        if (c->observers != NULL && PyList_GET_SIZE(c->observers) > 0 && hook__join(c) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

int
tgc_hook_switched(const tgc_cycles *c, int which)
{
    switch (which) {
    case TGC_HOOK_YOUNG_SCAN: return c->young_scan;
    case TGC_HOOK_SEEDED: return c->seeded_on;
    case TGC_HOOK_ISLAND: return c->island_on;
    case TGC_HOOK_CROSSCHECK: return c->island_crosscheck;
    case TGC_HOOK_PRESCAN_CHECK: return c->prescan_crosscheck;
    case TGC_HOOK_SENTINEL: return c->sentinel_on;
    case TGC_HOOK_RESIDENT: return c->resident_on;
    default: return 0;
    }
}

int
tgc_hook_prescan_available(const tgc_cycles *c)
{
    return c->young_ok;
}

