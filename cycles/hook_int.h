/* hook_int.h: what the files of the collector hook share (hook.c, observers.c, split.c, free.c):
 * the per-object helpers of their hot loops, inline here so that each file's loop keeps them
 * inlined, the pass that finds the tensors a collection's garbage holds (tgc_held), and the
 * functions the files call in each other. Private to them; the hook's contract for the rest of
 * cycles/ is hook.h. cycles.h comes first. */
#ifndef TGC_HOOK_INT_H
#define TGC_HOOK_INT_H

/* tp_traverse of a gc object; nothing for the others. */
static inline void
hook__traverse(PyObject *op, visitproc visit, void *arg)
{
    traverseproc trav = Py_TYPE(op)->tp_traverse;
    if (trav != NULL && PyObject_IS_GC(op)) {
        (void)trav(op, visit, arg);
    }
}

/* Clears items[i] the way the collector's delete_garbage does and drops the list's reference
 * at once, so objects die in the order (and while in cache) the collector would free them. */
static inline void
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

/* Marking what something outside a set reaches: the visitor marks each member of map it meets
 * alive and pushes it for a later traversal (free.c's resurrection check, split.c's seeded
 * split). */
typedef struct {
    const tgc_ptrmap *map;
    uint32_t *internal;
    uint8_t *alive;
    uint32_t *stack;
    uint32_t sp;
} free_ctx;

static inline int
free__mark(PyObject *o, void *arg)
{
    free_ctx *fc = arg;
    uint32_t j = tgc_ptrmap_get(fc->map, o);
    if (j != UINT32_MAX && !fc->alive[j]) {
        fc->alive[j] = 1;
        fc->stack[fc->sp++] = j;
    }
    return 0;
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
 * retry in tgc_hook_held_more. */
#define HELD_INLINE 32
typedef struct {
    PyTypeObject *tensor;    /* borrowed: TensorBase (resolved before the pass) */
    tgc_ptrmap counts;       /* tensor address -> slot in tensors[]/refs[] */
    PyObject **tensors;
    Py_ssize_t *refs;
    uint32_t n, cap;
    int full;
    tgc_tensor_typecache types;  /* recent types that are not tensors (alive: objects of them
                                    are referenced by the garbage we hold) */
    /* For the seeded split: positions in the garbage list of the tensors and of the objects
     * that reference one (seeds), found by the same pass; `lost` once either overflows. */
    int cur_hit, lost;
    uint32_t ntargets, nseeds;
    uint32_t targets[HELD_INLINE], seeds[HELD_INLINE];
    const void *keys_inline[2 * HELD_INLINE];
    uint32_t vals_inline[2 * HELD_INLINE];
    PyObject *tensors_inline[HELD_INLINE];
    Py_ssize_t refs_inline[HELD_INLINE];
} tgc_held;

/* split.c: which part of the garbage holds tensors. */
/* Readies h (on the stack: nothing to free) for one pass; tensor: TensorBase, resolved. */
void tgc_hook_held_init(tgc_held *h, PyTypeObject *tensor);
/* Appends to objs every tensor of h whose references all come from the garbage. Returns 1 when
 * any joined. */
int tgc_hook_held_join(tgc_held *h, PyObject *objs);
/* The slow path, for garbage that references more than HELD_INLINE distinct tensors: one more
 * traversal with heap tables sized for all of them. Returns 1 when any tensor joined objs. */
int tgc_hook_held_more(PyTypeObject *tensor, PyObject *objs, Py_ssize_t n);
/* One pass over this collection's garbage objs: whether it holds a tensor, and (when `garbage` is
 * given) objects with a legacy tp_del put back into gc.garbage, where the collector leaves them
 * as uncollectable. With `held`, the same pass also finds the tensors each object references. */
int tgc_hook_scan(tgc_cycles *c, PyObject *objs, PyObject *garbage, tgc_held *held);
/* Called while the collector's own resurrection check still holds (no Python code ran since):
 * frees at once every object of *objs that neither reaches a tensor nor is reached from one
 * that does, and replaces *objs (stolen) with a list of the rest. On any failure *objs is left as
 * it was. Returns the number freed. */
Py_ssize_t tgc_hook_split(tgc_cycles *c, PyObject **objs_p, const tgc_held *held,
                          Py_ssize_t scanned);

/* free.c: what the collector does to garbage, for garbage it handed over or never saw. */
int tgc_hook_finalizer_pending_any(PyObject *objs);
/* Runs the pending tp_finalize of each object of objs that nothing outside still reaches, in
 * list order, as the collector's finalize_garbage would. Returns how many ran. */
Py_ssize_t tgc_hook_finalize(PyObject *objs);

/* observers.c */
/* Takes every occurrence of the hook and of its tail entry off gc.callbacks. Only safe where the
 * collector is not iterating the list, or from the list's last entry. 0, or -1 with an
 * exception. */
int tgc_hook_unhook(tgc_cycles *c);
/* Appends the tail entry to gc.callbacks unless it is the last entry already: it runs after the
 * program's callbacks of the phase the collector is walking (hook.c). 0, or -1 with an
 * exception. */
int tgc_hook_append_tail(tgc_cycles *c);
/* Runs the observers on objs. Returns 1 when Python code may have run (and so may have made
 * some of objs reachable again), 0 when nothing ran. */
int tgc_hook_notify(tgc_cycles *c, PyObject *objs, int generation, int any_tensor,
                    Py_ssize_t garbage_total);

#endif /* TGC_HOOK_INT_H */
