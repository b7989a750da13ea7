/* free.c: what the collector does to garbage, done for garbage it handed over (DEBUG_SAVEALL) or
 * never saw (an island): freeing it the way delete_garbage would, after redoing the resurrection
 * check when Python code may have run since the collector's own (tgc_hook_free, hook.h), and
 * running pending finalizers the way finalize_garbage would (tgc_hook_finalize, hook_int.h). */
#include "cycles.h"
#include "hook_int.h"

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

int
tgc_hook_finalizer_pending_any(PyObject *objs)
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
Py_ssize_t
tgc_hook_finalize(PyObject *objs)
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
