/* young.c: how a collection runs without the detector unless its garbage holds a tensor.
 *
 * The sentinel (below, tgc_young_plant) looks at a collection's garbage from inside it, once the
 * collector found it. Where it cannot be planted, the pre-scan decides before the collection:
 *
 * DEBUG_SAVEALL costs every collection something (the collector appends its garbage to
 * gc.garbage, we take it back, scan it and free it), although in most young collections nothing
 * could possibly hold a tensor. Garbage found by a collection of generation g is a subset of the
 * objects in generations 0..g, and the tensors it keeps alive are those objects or what they
 * reference directly (the same reach as split.c's held-tensor pass). So "start" walks those lists
 * once: when no object is a tensor and none references one, the collection cannot produce a report
 * and the collector runs alone.
 *
 * The generation lists are the collector's internals, so this file is built with Py_BUILD_CORE
 * (as is graph/frames.c, for a frame's slots) and reads them only through gclists.h, the one place that
 * knows their layout (CPython 3.10-3.13: compat.h's TGC_HAVE_YOUNG_SCAN); where an object's
 * references lie, it asks shapes.h. It also lends the owner-chain search (graph/owners.c) its
 * visited mark (heapmark.c). At module exec, tgc_young_selfcheck() confirms
 * that the interpreter is the one the build is for (common/internals.c) and the layout on it (the
 * list heads are consistent rings, a new object is the tail of generation 0); otherwise the
 * detector arms every collection, the portable path. */
#define Py_BUILD_CORE 1
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#include "tensorgc/compat.h"
#include "tensorgc/internals.h"
#include "gclists.h"

#include "tensorgc/owners.h"
#include "tensorgc/ptrmap.h"
#include "tensorgc/tensor.h"
#include "young.h"
#include "watch.h"
#include "sentinel.h"


/* What the collector does to garbage before clearing it, and the island path would skip: legacy
 * finalizers (tp_del: such garbage is uncollectable) and weak references (cleared and called back
 * first). Objects needing either, and type objects, send the collection down the armed path. A
 * pending tp_finalize (__del__, a suspended generator or coroutine) is no obstacle: free.c runs
 * it after the report, as the collector's finalize_garbage would have. */
int
tgc_young_plain(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    if (PyType_Check(op) || tp->tp_del != NULL) {
        return 0;
    }
    Py_ssize_t off = tp->tp_weaklistoffset;  /* negative where 3.12 keeps it before the object */
    return off == 0 || *(PyObject **)((char *)op + off) == NULL;
}

#if TGC_HAVE_YOUNG_SCAN

/* Set by tgc_young_selfcheck at module exec (GIL held), read-only afterwards: the running
 * interpreter's lists have the layout this build reads. Nothing below touches them unless it is
 * 1; the collector's layout is the same in every interpreter of the process. */
static int young_layout_ok;
static int sentinel__ready(void);

static tgc_gc_node *
young__head(int gen)
{
    return tgc_gc_list(gen);
}

/* The list at position pos (0..generation) of a collection of `generation`, in the order the
 * collector sees them: it appends generations 0..generation-1, in that order, to the collected
 * one's list, and finds garbage in list order. Walks take the lists in this order, so that a
 * report built from an island lists its objects as one built from gc.garbage does. */
static int
young__gen_at(int generation, int pos)
{
    return pos == 0 ? generation : pos - 1;
}

/* Whether every list head is a consistent ring end: its neighbours point back at it. */
static int
young__heads_sane(void)
{
    for (int gen = 0; gen < TGC_GC_GENERATIONS; gen++) {
        tgc_gc_node *head = young__head(gen);
        tgc_gc_node *next = tgc_gc_next(head), *prev = tgc_gc_prev(head);
        if (next == NULL || prev == NULL || tgc_gc_prev(next) != head ||
            tgc_gc_next(prev) != head) {
            return 0;
        }
    }
    return 1;
}

int
tgc_young_layout_ok(void)
{
    return young_layout_ok;
}

int
tgc_young_selfcheck(const char **why)
{
    tgc_shapes_init();
    if (!tgc_internals_decide()) {
        *why = tgc_internals_why();
        return young_layout_ok = 0;
    }
    if (tgc_gc_collecting()) {
        /* imported from a finalizer or a weakref callback: the lists are the collector's now */
        *why = "imported during a garbage collection, when the collector's lists cannot be "
               "checked";
        return young_layout_ok = 0;
    }
    if (!young__heads_sane()) {
        *why = "the collector's generation lists are not laid out as this build reads them";
        return young_layout_ok = 0;
    }
    PyObject *probe = PyList_New(0);  /* new reference; tracked at once, at generation 0's tail */
    if (probe == NULL) {
        PyErr_Clear();
        *why = "no memory for the layout check";
        return young_layout_ok = 0;
    }
    tgc_gc_node *head = young__head(0), *g = tgc_gc_node_of(probe);
    int ok = PyObject_GC_IsTracked(probe) && tgc_gc_next(g) == head && tgc_gc_prev(head) == g &&
             !tgc_gc_marked(g);
    Py_DECREF(probe);
    *why = ok ? "" : "a new object is not the tail of the collector's generation 0, as this "
                     "build expects";
    young_layout_ok = ok;
    if (ok) {
        (void)sentinel__ready();  /* without it tgc_young_plant declines, and the hook arms */
    }
    return ok;
}

/* What the walk keeps: the tensor base type and a few recently seen types that are not tensors
 * (types repeat a lot among young objects; they stay alive while their objects do). */
typedef struct {
    PyTypeObject *tensor;
    tgc_tensor_typecache types;
    int saw_type;  /* a run of type objects started: some young object is a class */
} young_ctx;

static int
young__is_tensor(young_ctx *c, PyObject *o)
{
    return tgc_tensor_typecache_check(&c->types, c->tensor, o);
}

/* tp_traverse visitor: a nonzero return ends the traversal, which is all we need. */
static int
young__visit(PyObject *o, void *arg)
{
    return young__is_tensor((young_ctx *)arg, o);
}

/* One end of the walk below: the type of the run of objects it is in (never a tensor type), that
 * type's shape, the same for the two runs before (young objects often alternate between two or
 * three types: an instance and its list, a bound method and its instance, a function, its cell
 * and its closure's tuple), and the shapes this end has looked up. The runs' shapes are copies
 * the cursor owns (own[], one each): the cache may reuse an entry for another type while a run
 * still needs it. */
typedef struct {
    PyTypeObject *type;
    tgc_shape *sh;  /* its own entry of the cursor's own[] (rewritten when the run is replaced) */
    Py_ssize_t one;  /* sh's only slot offset when it has exactly one, else 0 (never a slot): the
                        walk's fast path reads no more than this */
} young_run;

typedef struct {
    young_run run, prev, old;  /* the current run, the one before, the one before that */
    tgc_shape own[3];
    tgc_shapes shapes;
} young_cursor;

static void
young__cursor_init(young_cursor *cur)
{
    young_run *runs[3] = {&cur->run, &cur->prev, &cur->old};
    for (int i = 0; i < 3; i++) {
        runs[i]->type = NULL;  /* no type matches */
        runs[i]->sh = &cur->own[i];
        runs[i]->one = 0;
    }
    cur->shapes.next = 0;
    for (int i = 0; i < 4; i++) {
        cur->shapes.shapes[i].type = NULL;  /* an empty entry: no type matches it */
    }
}

/* op's type is the run before's again: the two runs trade places. */
static inline void
young__run_back(young_cursor *cur)
{
    young_run r = cur->run;
    cur->run = cur->prev;
    cur->prev = r;
}

/* The oldest run becomes the current one, the other two move back a place. */
static inline void
young__run_rotate(young_cursor *cur)
{
    young_run r = cur->old;
    cur->old = cur->prev;
    cur->prev = cur->run;
    cur->run = r;
}

/* op starts a new run (its type is not the last one's): whether op is a tensor; else the run
 * and its shape become the cursor's (or a run before comes back, known not to be a tensor), in
 * the place of the oldest. Out of line: runs are long, the walk's loop stays small. */
static int
young__run_start(young_ctx *c, young_cursor *cur, PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    if (tp == cur->prev.type) {
        young__run_back(cur);
        return 0;
    }
    if (tp == cur->old.type) {
        young__run_rotate(cur);
        return 0;
    }
    if (young__is_tensor(c, op)) {
        return 1;
    }
    c->saw_type |= PyType_FastSubclass(tp, Py_TPFLAGS_TYPE_SUBCLASS);  /* once per run */
    const tgc_shape *found = tgc_shape_lookup(&cur->shapes, tp);
    tgc_shape *sh = cur->old.sh;  /* the oldest run's copy, given up */
    *sh = *found;
    cur->old.type = tp;
    cur->old.one = sh->nslots == 1 ? sh->off[0] : 0;
    young__run_rotate(cur);
    return 0;
}

/* Whether op's slot at offset off is empty or holds an object of type tp or plain: no lookup. */
static inline Py_ALWAYS_INLINE int
young__slot_plain(PyObject *op, Py_ssize_t off, PyTypeObject *tp, PyTypeObject *plain)
{
    PyObject *v = *(PyObject **)((char *)op + off);
    return v == NULL || Py_TYPE(v) == tp || Py_TYPE(v) == plain;
}

/* Types whose instances can never be tensors: a subclass of int, str, bytes, tuple, list, dict,
 * type or BaseException cannot also be one of torch's tensor types (their layouts conflict). */
#define YOUNG_NEVER_TENSOR (Py_TPFLAGS_LONG_SUBCLASS | Py_TPFLAGS_LIST_SUBCLASS | \
                            Py_TPFLAGS_TUPLE_SUBCLASS | Py_TPFLAGS_BYTES_SUBCLASS | \
                            Py_TPFLAGS_UNICODE_SUBCLASS | Py_TPFLAGS_DICT_SUBCLASS | \
                            Py_TPFLAGS_BASE_EXC_SUBCLASS | Py_TPFLAGS_TYPE_SUBCLASS)

/* Whether a run of n references (p) holds a tensor; tp is the referrer's type and plain_ref the
 * two referenced types seen last that are not tensors (references often alternate between two
 * types: an instance's peer and its list, a list's ints), which need no lookup. */
static inline Py_ALWAYS_INLINE int
young__run_hit(young_ctx *c, PyObject **p, Py_ssize_t n, PyTypeObject *tp,
               PyTypeObject **plain_ref)
{
    PyTypeObject *p0 = plain_ref[0], *p1 = plain_ref[1];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = p[i];
        if (v == NULL) {
            continue;
        }
        PyTypeObject *vt = Py_TYPE(v);
        if ((vt == tp) | (vt == p0) | (vt == p1)) {
            continue;
        }
        if (young__is_tensor(c, v)) {
            return 1;
        }
        plain_ref[1] = p1 = p0;
        plain_ref[0] = p0 = vt;
    }
    return 0;
}

/* A function's fields that may hold any object (tgc_shape_runs, tensors_only). They mostly hold
 * None, a str and a dict: known without a lookup, and left out of plain_ref, which keeps the
 * types the program's own objects reference. Out of line: the walk's loop stays small. */
static TGC_NOINLINE int
young__function_hit(young_ctx *c, PyObject *op, const tgc_shape *sh, PyTypeObject *tp,
                    PyTypeObject **plain_ref)
{
    for (int j = 2; j < 5; j++) {
        PyObject **f = (PyObject **)((char *)op + sh->off[j]);
        if (*f != NULL && *f != Py_None && !PyType_HasFeature(Py_TYPE(*f), YOUNG_NEVER_TENSOR) &&
            young__run_hit(c, f, 1, tp, plain_ref)) {
            return 1;
        }
    }
    return 0;
}

/* Whether op is a tensor or references one. Inlined into every walk: it runs for each young
 * object, where a call would cost as much as the test. */
static inline Py_ALWAYS_INLINE int
young__hit(young_ctx *c, young_cursor *cur, PyTypeObject **plain_ref, PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    if (tp == cur->run.type && cur->run.one != 0 &&
        young__slot_plain(op, cur->run.one, tp, plain_ref[0])) {
        return 0;  /* the commonest case of a slotted run, in the fewest instructions */
    }
    if (tp != cur->run.type) {
        if (tp == cur->prev.type) {
            young__run_back(cur);  /* inline: young objects alternate between two types */
        }
        else if (young__run_start(c, cur, op)) {
            return 1;
        }
    }
    const tgc_shape *sh = cur->run.sh;
    switch (sh->kind) {
    case TGC_SHAPE_TRAVERSE:
        /* objects in the lists are tracked gc objects: tp_traverse is set */
        return tp->tp_traverse(op, young__visit, c) != 0;
    case TGC_SHAPE_ITEMS:  /* the commonest kinds read directly, without tgc_shape_runs */
        return young__run_hit(c, sh->type == &PyList_Type ? ((PyListObject *)op)->ob_item
                                                          : ((PyTupleObject *)op)->ob_item,
                              Py_SIZE(op), tp, plain_ref);
    case TGC_SHAPE_FIELDS:
        if (sh->type == &PyFunction_Type) {
            return young__function_hit(c, op, sh, tp, plain_ref);
        }
        /* a cell or a bound method: one run (the second is empty) */
        return young__run_hit(c, (PyObject **)((char *)op + sh->off[0]), sh->nfields, tp,
                              plain_ref);
#if TGC_HAVE_MANAGED_ATTRS
    case TGC_SHAPE_INSTANCE:
        if (sh->nfields == 0) {
            Py_ssize_t n;
            PyObject **dictslot;
            PyObject **values = tgc_compat_managed_attrs(op, &n, &dictslot);
            return (values != NULL && young__run_hit(c, values, n, tp, plain_ref)) ||
                   (dictslot != NULL && young__run_hit(c, dictslot, 1, tp, plain_ref));
        }
        break;
#endif
    default:
        break;
    }
    tgc_shape_run r[TGC_SHAPE_RUNS];
    int k = tgc_shape_runs(sh, op, r, 1);
    for (int j = 0; j < k; j++) {
        if (young__run_hit(c, r[j].p, r[j].n, tp, plain_ref)) {
            return 1;
        }
    }
    return 0;
}

/* young__first_hit's walk of one ring, from `first` up to `head` (excluded): NULL when nothing
 * there is a tensor or references one; otherwise a node such that everything before it was tested
 * clean, and *last such that everything after it was (the untested stretch between them holds the
 * hit). */
static inline tgc_gc_node *
young__ring_hit(young_ctx *c, young_cursor *fc, young_cursor *bc, PyTypeObject **plain_ref,
                tgc_gc_node *first, tgc_gc_node *head, tgc_gc_node **last)
{
    /* Objects before f and after b are clean; f is not after b while any is left. */
    tgc_gc_node *f = first, *b = tgc_gc_prev(head);
    while (f != head) {
        if (young__hit(c, fc, plain_ref, tgc_gc_object(f))) {
            *last = b;  /* everything after b was tested clean */
            return f;
        }
        if (f == b) {
            break;
        }
        if (young__hit(c, bc, plain_ref, tgc_gc_object(b))) {
            *last = b;
            return tgc_gc_next(f);  /* f and everything before it are clean */
        }
        tgc_gc_node *prev = tgc_gc_prev(b);
        f = tgc_gc_next(f);
        if (f == b) {
            break;  /* they were neighbours: nothing is left */
        }
        b = prev;
    }
    return NULL;
}

/* Where the tensors of generations 0..generation start: an object such that none before it (in
 * list order, the lists taken in young__gen_at's order) is a tensor or references one, while it or
 * one after it does; NULL when there is none. On a hit, what the walk left untested is the hit to
 * *last in list *last_k (both included; k as in young__gen_at), then the whole lists after it;
 * everything else was tested clean. c (its tensor set by the caller) also says whether
 * a class was among the objects tested. This walk is the whole cost of a collection the detector
 * stays out of, and it is bound by the latency of following the list, not by the tests, so it
 * follows the list from both ends at once (the lists are doubly linked): two independent chains of
 * loads instead of one. Young objects come in runs of one type, whose answers (not a tensor; its
 * shape) each end looks up once per run; __slots__ are read inline, and a referent of the run's own
 * type, or of the last type seen that is not a tensor, needs no lookup. */
static tgc_gc_node *
young__first_hit(young_ctx *c, int generation, tgc_gc_node **last, int *last_k)
{
    /* Only what the walk reads is cleared (this runs for every young collection): the type
     * cache, and per end its run and its cache's type pointers. */
    memset(&c->types, 0, sizeof(c->types));
    c->saw_type = 0;
    PyTypeObject *plain_ref[2] = {NULL, NULL};  /* referenced types known not to be tensors */
    young_cursor fc, bc;
    young__cursor_init(&fc);
    young__cursor_init(&bc);
    /* No Python code runs below (tp_traverse must not run any, the collector relies on that
     * too), so the lists cannot change under the walk. */
    for (int pos = 0; pos <= generation; pos++) {
        tgc_gc_node *head = young__head(young__gen_at(generation, pos));
        *last_k = pos;
        tgc_gc_node *hit = young__ring_hit(c, &fc, &bc, plain_ref, tgc_gc_next(head), head, last);
        if (hit != NULL) {
            return hit;
        }
    }
    return NULL;
}

int
tgc_young_may_hold(PyTypeObject *tensor, int generation)
{
    if (tensor == NULL) {
        return 0;  /* torch is not imported: there are no tensors */
    }
    if (generation < 0 || generation >= TGC_GC_GENERATIONS - 1) {
        return 1;  /* a full collection: the walk would be the whole heap; it is not worth it */
    }
    young_ctx c;
    c.tensor = tensor;
    tgc_gc_node *last;
    int last_k;
    return young__first_hit(&c, generation, &last, &last_k) != NULL;
}

Py_ssize_t
tgc_young_crosscheck_hits(PyTypeObject *tensor, int generation, Py_ssize_t *tested)
{
    *tested = 0;
    if (tensor == NULL || generation < 0 || generation >= TGC_GC_GENERATIONS) {
        return 0;
    }
    young_ctx fast, slow;
    fast.tensor = slow.tensor = tensor;
    memset(&fast.types, 0, sizeof(fast.types));
    memset(&slow.types, 0, sizeof(slow.types));
    fast.saw_type = slow.saw_type = 0;
    PyTypeObject *plain_ref[2] = {NULL, NULL};
    young_cursor cur;
    young__cursor_init(&cur);
    Py_ssize_t mismatched = 0;
    for (int gen = 0; gen <= generation; gen++) {
        tgc_gc_node *head = young__head(gen);
        for (tgc_gc_node *g = tgc_gc_next(head); g != head; g = tgc_gc_next(g)) {
            PyObject *op = tgc_gc_object(g);
            int quick = young__hit(&fast, &cur, plain_ref, op);
            int full = young__is_tensor(&slow, op) ||
                       Py_TYPE(op)->tp_traverse(op, young__visit, &slow) != 0;
            mismatched += quick != full;
            ++*tested;
        }
    }
    return mismatched;
}

/* ------------------------------------------------------------------------------------------ */
/* Islands: young garbage proven before the collection runs                                     */

/* Whether the walk below marked op as young. The mark is the collector's own "being collected"
 * bit of _gc_prev: outside a collection it is clear on every object, and the collector sets it on
 * exactly these objects first thing when it starts (update_refs), so borrowing it for the length
 * of one walk, with no Python code running, disturbs nothing; island__unmark clears it again. */
static inline int
island__young(PyObject *op)
{
    return PyObject_IS_GC(op) && tgc_gc_marked(tgc_gc_node_of(op));
}

static void
island__unmark(int generation)
{
    for (int gen = 0; gen <= generation; gen++) {  /* any order will do */
        tgc_gc_node *head = young__head(gen);
        for (tgc_gc_node *g = tgc_gc_next(head); g != head; g = tgc_gc_next(g)) {
            tgc_gc_unmark(g);
        }
    }
}

/* Lists the members of `map` found in the young lists, in list order, the order the collector
 * finds garbage in, so that a report (whose cycles start at the first object listed) reads the
 * same whichever path produced it; with `unmark`, also does island__unmark's work in the same
 * walk. Returns how many it listed: fewer than the map holds when some member is not young. */
static uint32_t
island__list_ordered(int generation, const tgc_ptrmap *map, PyObject **out, int unmark)
{
    uint32_t k = 0;
    for (int pos = 0; pos <= generation; pos++) {
        tgc_gc_node *head = young__head(young__gen_at(generation, pos));
        for (tgc_gc_node *g = tgc_gc_next(head); g != head; g = tgc_gc_next(g)) {
            if (unmark) {
                tgc_gc_unmark(g);
            }
            PyObject *op = tgc_gc_object(g);
            if (tgc_ptrmap_get(map, op) != UINT32_MAX) {
                out[k++] = op;
            }
        }
    }
    return k;
}

typedef struct {
    young_ctx y;
    tgc_ptrmap map;            /* member -> index in items */
    PyObject **items;          /* borrowed: the members, seeds first */
    uint32_t *internal;        /* references to each member from members */
    uint32_t n, cap, max;      /* max: the most members this attempt takes */
    uint32_t visits;           /* references the quick closure has looked at */
    int overflow;
} island_ctx;

/* Doubles the member capacity (map and list) up to TGC_ISLAND_MAX; -1 when it cannot. Islands are
 * mostly a handful of objects, so they start small: a map sized for the maximum would be 16 KiB
 * to clear for every report, and would push the young objects out of the cache. */
static int
island__grow(island_ctx *c)
{
    if (c->cap >= c->max) {
        return -1;
    }
    uint32_t cap = c->cap ? c->cap * 2 : 16;
    if (cap > c->max) {
        cap = c->max;
    }
    tgc_ptrmap map;
    if (tgc_ptrmap_init(&map, cap) < 0) {
        return -1;
    }
    PyObject **items = realloc(c->items, cap * sizeof(PyObject *));
    if (items == NULL) {
        tgc_ptrmap_free(&map);
        return -1;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        (void)tgc_ptrmap_put(&map, items[i], i);
    }
    tgc_ptrmap_free(&c->map);
    c->map = map;
    c->items = items;
    c->cap = cap;
    return 0;
}

static int
island__add(island_ctx *c, PyObject *op)
{
    if (c->n == c->cap && tgc_ptrmap_get(&c->map, op) == UINT32_MAX && island__grow(c) < 0) {
        c->overflow = 1;  /* more than TGC_ISLAND_MAX members, or no memory */
        return 1;
    }
    if (tgc_ptrmap_put(&c->map, op, c->n) == c->n) {
        c->items[c->n++] = op;
    }
    return 0;
}

/* tp_traverse visitor of the closure: young referents join the set. */
static int
island__reach(PyObject *o, void *arg)
{
    island_ctx *c = arg;
    return island__young(o) ? island__add(c, o) : 0;
}

/* Counts the references from members to members into c->internal; -1 without memory. Runs no
 * Python code. */
static int
island__count(island_ctx *c)
{
    c->internal = calloc(c->n ? c->n : 1, sizeof(uint32_t));
    if (c->internal == NULL) {
        return -1;
    }
    tgc_ptrcount inside = {&c->map, c->internal};
    for (uint32_t i = 0; i < c->n; i++) {
        PyObject *op = c->items[i];
        (void)Py_TYPE(op)->tp_traverse(op, tgc_ptrcount_visit, &inside);
    }
    return 0;
}

/* Whether member i's refcount is explained by the references from members plus `extra`
 * (references the caller holds), and it is tgc_young_plain. */
static inline int
island__member_ok(const island_ctx *c, uint32_t i, size_t extra)
{
    return (size_t)Py_REFCNT(c->items[i]) == c->internal[i] + extra &&
           tgc_young_plain(c->items[i]);
}

/* Whether the set is an island: island__count, then island__member_ok for every member. */
static int
island__exact(island_ctx *c, size_t extra)
{
    if (island__count(c) < 0) {
        return 0;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        if (!island__member_ok(c, i, extra)) {
            return 0;
        }
    }
    return 1;
}

int
tgc_young_island_exact(PyObject *list)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    island_ctx c;
    memset(&c, 0, sizeof(c));
    c.max = TGC_ISLAND_MAX;
    int exact = 0;
    if (n <= 0 || n > TGC_ISLAND_MAX || tgc_ptrmap_init(&c.map, (size_t)n) < 0) {
        return 0;
    }
    c.items = PySequence_Fast_ITEMS(list);  /* borrowed: the list owns them */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (tgc_ptrmap_put(&c.map, c.items[i], (uint32_t)i) != (uint32_t)i) {
            goto done;  /* tgc_young_island lists each member once */
        }
    }
    c.n = (uint32_t)n;
    exact = island__exact(&c, 1);
done:
    tgc_ptrmap_free(&c.map);
    free(c.internal);
    return exact;
}

/* A proof's context with room for its first members; -1 without memory (c is then still fine
 * to pass to island__ctx_free). */
static int
island__ctx_init(island_ctx *c, PyTypeObject *tensor, uint32_t max)
{
    memset(c, 0, sizeof(*c));
    c->y.tensor = tensor;
    c->max = max;
    return island__grow(c);
}

static void
island__ctx_free(island_ctx *c)
{
    tgc_ptrmap_free(&c->map);
    free(c->items);
    free(c->internal);
}

/* A proven island's answer: *island set to a new list of the members (one more reference each),
 * TGC_YOUNG_ISLAND; TGC_YOUNG_ARM (no exception) when the list cannot be made. Allocates, so it
 * comes after the walks. */
static int
island__take(const island_ctx *c, PyObject **island)
{
    PyObject *list = PyList_New(c->n);  /* new reference */
    if (list == NULL) {
        PyErr_Clear();
        return TGC_YOUNG_ARM;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        PyList_SET_ITEM(list, i, Py_NewRef(c->items[i]));
    }
    *island = list;
    return TGC_YOUNG_ISLAND;
}

/* The quick proof takes sets of at most this many members, and looks at most at this many
 * references while closing them: the islands it is for are a handful of objects, and a closure
 * that wanders into old objects (a function reaches its module's globals; an old list of a
 * million ints holds no tracked object but takes as long to traverse) must give up early. The
 * counts traverse the same members again, so they are bounded by the same budget. */
#define ISLAND_QUICK_MAX 16
#define ISLAND_QUICK_VISITS 256
enum { ISLAND_UNSURE = -1 };

/* tp_traverse visitor of the quick closure: tracked objects that are not classes join the set,
 * young or not (only a walk could tell; the counts, or island__list_ordered, sort them out). */
static int
island__reach_tracked(PyObject *o, void *arg)
{
    island_ctx *c = arg;
    if (++c->visits > ISLAND_QUICK_VISITS) {
        c->overflow = 1;
        return 1;
    }
    if (PyType_Check(o) || !PyObject_IS_GC(o) || !tgc_gc_tracked(o)) {
        return 0;
    }
    return island__add(c, o);
}

/* The island found without marking the young lists, for the common case: a few young objects
 * whose references out of the set all go to classes. Finishes the seed walk where
 * young__first_hit stopped (from `hit` to `last` in generation `last_gen`, then the later
 * generations), closes the seeds under references to tracked objects that are not classes, and
 * checks the counts. With no mark, youngness is known only for what a walk met: the seeds, and
 * the closure's other members once island__list_ordered finds them in the young lists. Leaving
 * classes out is right only when no class is young (y->saw_type and the seed walk say whether
 * the walks met one). Returns TGC_YOUNG_ISLAND (*island set as tgc_young_island sets it) or
 * TGC_YOUNG_ARM when the answer is certain (a seed's own counts fail: the marked proof, whose
 * sets are no larger, would fail on it too), and ISLAND_UNSURE when only the marked proof can
 * tell (an old object in the set, a young class, a larger set, no memory). Runs no Python code;
 * never leaves an exception set. */
static int
island__quick(young_ctx *y, int generation, tgc_gc_node *hit, tgc_gc_node *last, int last_k,
              PyObject **island)
{
    island_ctx c;
    int rc = ISLAND_UNSURE;
    young_cursor cur;
    young__cursor_init(&cur);
    PyTypeObject *plain_ref[2] = {NULL, NULL};
    uint32_t nseeds = 0;
    int others_ok = 1;
    if (island__ctx_init(&c, y->tensor, ISLAND_QUICK_MAX) < 0) {
        goto done;
    }
    c.y.saw_type = y->saw_type;
    /* 1. The seeds, among the objects young__first_hit did not test. */
    for (tgc_gc_node *g = hit; !c.overflow; g = tgc_gc_next(g)) {
        PyObject *op = tgc_gc_object(g);
        if (young__hit(&c.y, &cur, plain_ref, op)) {
            (void)island__add(&c, op);
        }
        if (g == last) {
            break;
        }
    }
    for (int pos = last_k + 1; pos <= generation && !c.overflow; pos++) {
        tgc_gc_node *head = young__head(young__gen_at(generation, pos));
        for (tgc_gc_node *g = tgc_gc_next(head); g != head && !c.overflow;
             g = tgc_gc_next(g)) {
            PyObject *op = tgc_gc_object(g);
            if (young__hit(&c.y, &cur, plain_ref, op)) {
                (void)island__add(&c, op);
            }
        }
    }
    if (c.overflow || c.y.saw_type) {
        goto done;
    }
    /* 2. The closure, old objects included (the counts below tell them). */
    nseeds = c.n;
    for (uint32_t i = 0; i < c.n && !c.overflow; i++) {
        PyObject *op = c.items[i];
        (void)Py_TYPE(op)->tp_traverse(op, island__reach_tracked, &c);
    }
    if (c.overflow || island__count(&c) < 0) {
        goto done;
    }
    /* 3. A seed whose references do not all come from the set is referenced from outside any
     *    set the marked walk would build (those hold no more objects than this one): no island.
     *    So is the instance whose own __dict__ is a seed (3.10's instances, whose dict is what
     *    references the tensor): inside the marked set it fails there, outside it it is a
     *    reference to the seed from outside. Any other member may be an old object the marked
     *    walk would leave out. */
    for (uint32_t i = 0; i < c.n; i++) {
        if (!island__member_ok(&c, i, 0)) {
            PyObject *d = tgc_compat_existing_dict(c.items[i]);  /* borrowed */
            if (i < nseeds || (d != NULL && tgc_ptrmap_get(&c.map, d) < nseeds)) {
                rc = TGC_YOUNG_ARM;
                goto done;
            }
            others_ok = 0;
        }
    }
    if (!others_ok) {
        goto done;
    }
    /* 4. Members beyond the seeds must be young, and placed in list order. */
    if (c.n > nseeds && island__list_ordered(generation, &c.map, c.items, 0) != c.n) {
        goto done;
    }
    rc = island__take(&c, island);
done:
    island__ctx_free(&c);
    return rc;
}

/* The island found by marking every young object first (the collector's own "being collected"
 * bit, see island__young): always right, at the cost of two more walks of the young lists. */
static int
island__marked(PyTypeObject *tensor, int generation, tgc_gc_node *hit, PyObject **island)
{
    island_ctx c;
    int rc = TGC_YOUNG_ARM;
    if (island__ctx_init(&c, tensor, TGC_ISLAND_MAX) < 0) {
        goto done;
    }
    /* 1. Mark every young object, and take the tensors and the objects referencing one as
     *    seeds; the first walk found none before `hit`. No Python code runs until
     *    island__unmark (tp_traverse runs none). */
    /* The seeds are tested as the pre-scan tests (young__hit, one lookup per run of a type):
     * when the pre-scan's backward end met the tensor, everything between its two ends is still
     * to be tested, three quarters of the list on average. */
    int seeking = 1;
    young_cursor cur;
    young__cursor_init(&cur);
    PyTypeObject *plain_ref[2] = {NULL, NULL};
    for (int pos = 0; pos <= generation; pos++) {
        tgc_gc_node *head = young__head(young__gen_at(generation, pos));
        for (tgc_gc_node *g = tgc_gc_next(head); g != head; g = tgc_gc_next(g)) {
            PyObject *op = tgc_gc_object(g);
            tgc_gc_mark(g);
            seeking &= g != hit;
            if (!seeking && !c.overflow && young__hit(&c.y, &cur, plain_ref, op)) {
                (void)island__add(&c, op);
            }
        }
    }
    /* 2. Close the seeds under references, within the young generations: the garbage a young
     *    collection can find that holds these tensors lies inside this set. */
    uint32_t nseeds = c.n;
    for (uint32_t i = 0; i < c.n && !c.overflow; i++) {
        PyObject *op = c.items[i];
        (void)Py_TYPE(op)->tp_traverse(op, island__reach, &c);
    }
    /* 3. The set is an island when every reference to every member comes from a member, as the
     *    collector's own test finds garbage: then it is unreachable, and so is nothing else's
     *    business. Anything else (a live tensor, garbage pointing in from outside) is the armed
     *    path's to sort out. */
    int is_island = !c.overflow && island__exact(&c, 0);
    /* Seeds were listed in list order; members the closure added need the walk to be placed. */
    if (is_island && c.n > nseeds) {
        is_island = island__list_ordered(generation, &c.map, c.items, 1) == c.n;
    }
    else {
        island__unmark(generation);
    }
    if (!is_island) {
        goto done;
    }
    rc = island__take(&c, island);
done:
    island__ctx_free(&c);
    return rc;
}

/* Whether an island list (or NULL: no island) holds exactly items[0..n), in that order. The items
 * are only compared, never dereferenced. */
static int
island__same(PyObject *list, PyObject *const *items, Py_ssize_t n)
{
    if (list == NULL) {
        return n == 0;
    }
    if (PyList_GET_SIZE(list) != n) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_ITEM(list, i) != items[i]) {
            return 0;
        }
    }
    return 1;
}

int
tgc_young_island(PyTypeObject *tensor, int generation, int crosscheck, PyObject **island,
                 tgc_island_info *info)
{
    tgc_island_info ignored;
    if (info == NULL) {
        info = &ignored;
    }
    memset(info, 0, sizeof(*info));
    *island = NULL;
    if (tensor == NULL) {
        return TGC_YOUNG_NONE;
    }
    if (generation < 0 || generation >= TGC_GC_GENERATIONS - 1) {
        return TGC_YOUNG_ARM;
    }
    young_ctx y;
    y.tensor = tensor;
    tgc_gc_node *last;
    int last_k;
    tgc_gc_node *hit = young__first_hit(&y, generation, &last, &last_k);
    if (hit == NULL) {
        return TGC_YOUNG_NONE;
    }
    int rc = island__quick(&y, generation, hit, last, last_k, island);
    if (rc == ISLAND_UNSURE) {
        info->marked = 1;
        return island__marked(tensor, generation, hit, island);
    }
    if (crosscheck) {
        /* The quick list's references would fail the marked proof's counts: let it go first.
         * Its members stay alive (each one's refcount is all references from members, at least
         * one), and are only compared below. The marked proof's answer is the one returned. */
        Py_ssize_t n = *island != NULL ? PyList_GET_SIZE(*island) : 0;
        PyObject **quick = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(PyObject *));
        if (quick == NULL) {
            return rc;  /* no memory: no check */
        }
        if (n > 0) {
            memcpy(quick, PySequence_Fast_ITEMS(*island), (size_t)n * sizeof(PyObject *));
        }
        Py_CLEAR(*island);
        int marked_rc = island__marked(tensor, generation, hit, island);
        info->checked = 1;
        info->mismatch = marked_rc != rc || !island__same(*island, quick, n);
        PyMem_Free(quick);
        return marked_rc;
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The sentinel: the collection's own garbage, looked at inside the collection                 */

/* The pair's type: sentinel.h. */

/* The live first sentinel of the collection under way, NULL when none: set by tgc_young_plant,
 * cleared when it is freed or uprooted; young_held says whether we own a reference to it (its
 * finalizer takes one). Protected by the GIL; collections do not nest. */
static young_sentinel *young_planted;
static int young_held;
/* Walks the tensor watch spared, and walks it cut short (tests); the GIL. */
static unsigned long long young_unwalked, young_cut, young_near;

unsigned long long
tgc_young_unwalked(unsigned long long *cut)
{
    *cut = young_cut;
    return young_unwalked;
}

unsigned long long
tgc_young_near(void)
{
    return young_near;
}

static int
sentinel__traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((young_sentinel *)self)->peer);
    return 0;
}

static int
sentinel__clear(PyObject *self)
{
    Py_CLEAR(((young_sentinel *)self)->peer);
    Py_CLEAR(((young_sentinel *)self)->hint);
    return 0;
}


static void
sentinel__dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    if (young_planted == (young_sentinel *)self) {
        young_planted = NULL;
    }
    Py_CLEAR(((young_sentinel *)self)->peer);
    Py_CLEAR(((young_sentinel *)self)->hint);
    PyObject_GC_Del(self);
}

/* Whether op is this collection's garbage, while it finalizes garbage: the collector's "being
 * collected" bit stays set on exactly the objects of its garbage list until the resurrection
 * check (it is cleared on survivors, and on legacy finalizers and what they reach, which are not
 * in the list). */
static inline int
sentinel__garbage(PyObject *op)
{
    return PyObject_IS_GC(op) && tgc_gc_marked(tgc_gc_node_of(op));
}

static int
sentinel__reach(PyObject *o, void *arg)
{
    return sentinel__garbage(o) ? island__add(arg, o) : 0;
}

/* The members of the garbage from `first` up to `head` (excluded) that `take` (NULL: all) holds,
 * as a new list in list order (one more reference each); *deferred a new list of those whose
 * tp_finalize is still due, marked as done so that finalize_garbage passes them by
 * (tgc_young_undefer gives them back). -1 without memory (no exception left set, nothing
 * marked). */
static int
sentinel__take(tgc_gc_node *first, tgc_gc_node *head, const tgc_ptrmap *take, PyObject **island,
               PyObject **deferred)
{
    Py_ssize_t n = 0, nfin = 0;
    for (tgc_gc_node *g = first; g != head; g = tgc_gc_next(g)) {
        PyObject *op = tgc_gc_object(g);
        if (take == NULL || tgc_ptrmap_get(take, op) != UINT32_MAX) {
            n++;
            nfin += Py_TYPE(op)->tp_finalize != NULL && !tgc_gc_finalized(g);
        }
    }
    PyObject *list = PyList_New(n);       /* new reference */
    PyObject *fin = PyList_New(nfin);     /* new reference */
    if (list == NULL || fin == NULL) {
        Py_XDECREF(list);
        Py_XDECREF(fin);
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t i = 0, j = 0;
    for (tgc_gc_node *g = first; g != head && i < n; g = tgc_gc_next(g)) {
        PyObject *op = tgc_gc_object(g);
        if (take != NULL && tgc_ptrmap_get(take, op) == UINT32_MAX) {
            continue;
        }
        PyList_SET_ITEM(list, i++, Py_NewRef(op));
        if (Py_TYPE(op)->tp_finalize != NULL && !tgc_gc_finalized(g) && j < nfin) {
            tgc_gc_set_finalized(g);
            PyList_SET_ITEM(fin, j++, Py_NewRef(op));
        }
    }
    *island = list;
    *deferred = fin;
    return 0;
}

/* tp_traverse visitor: counts the references to objects whose type carries the tensor watch. */
static int
sentinel__count_watched(PyObject *o, void *arg)
{
    *(size_t *)arg += (size_t)tgc_watch_on_type(Py_TYPE(o));
    return 0;
}

/* A hit of the walk: joins the island; 1 once the hits' own references to tensors add up to
 * budget (every reference the collector followed to a tensor is accounted for: no object left
 * to test can be a hit), -1 when the island overflows, else 0. */
static int
sentinel__hit(island_ctx *c, PyObject *op, size_t budget, size_t *found)
{
    if (island__add(c, op)) {
        return -1;
    }
    if (budget == 0) {
        return 0;
    }
    (void)Py_TYPE(op)->tp_traverse(op, sentinel__count_watched, found);
    return *found == budget;
}

/* The hits closed under references to garbage: 1 when that part is an island of the garbage (no
 * reference from the rest: every member's refcount explained by the members'), 0 when it is not,
 * is empty, or grows past TGC_ISLAND_MAX (or no memory). */
static int
sentinel__closed(island_ctx *c)
{
    for (uint32_t i = 0; i < c->n; i++) {  /* c->n grows as members join */
        PyObject *op = c->items[i];
        (void)Py_TYPE(op)->tp_traverse(op, sentinel__reach, c);
        if (c->overflow) {
            return 0;
        }
    }
    return c->n != 0 && island__exact(c, 0);
}

/* The part of the garbage (first..head) that holds its tensors, when it is an island of it: the
 * objects that are or reference a tensor (the walk's hits: none before `hit`, none after `last`,
 * which young__ring_hit tested clean), closed under references to garbage, with no reference
 * from the rest of the garbage (every member's refcount explained by the members'). Then only
 * that part outlives the collection and the collector frees the rest, as the pre-scan's islands
 * did; otherwise (other garbage points in, more than TGC_ISLAND_MAX objects, no memory) all of
 * the garbage is taken. budget: the references to tensors the collector followed in this
 * collection (watch.h; 0: unknown). Once the hits' own references to tensors add up to it, every
 * one of them is accounted for, and no object left to test can be a hit: the walk stops there.
 * Returns 1 with *island and *deferred set (as sentinel__take sets them), 0 when the part is no
 * island or is too large, -1 without memory. */
static int
sentinel__island(young_ctx *y, tgc_gc_node *first, tgc_gc_node *hit, tgc_gc_node *last,
                 tgc_gc_node *head, size_t budget, PyObject **island, PyObject **deferred)
{
    island_ctx c;
    int rc = 0;
    if (island__ctx_init(&c, y->tensor, TGC_ISLAND_MAX) < 0) {
        rc = -1;
        goto done;
    }
    young_cursor cur;
    young__cursor_init(&cur);
    PyTypeObject *plain_ref[2] = {NULL, NULL};
    size_t found = 0;
    for (tgc_gc_node *g = hit;; g = tgc_gc_next(g)) {
        PyObject *op = tgc_gc_object(g);
        int r = young__hit(y, &cur, plain_ref, op) ? sentinel__hit(&c, op, budget, &found) : 0;
        if (r < 0) {
            goto done;  /* overflow */
        }
        if (r > 0) {
            young_cut += g != last;
            break;
        }
        if (g == last) {
            break;
        }
    }
    if (!sentinel__closed(&c)) {
        goto done;
    }
    rc = sentinel__take(first, head, &c.map, island, deferred) < 0 ? -1 : 1;
done:
    island__ctx_free(&c);
    return rc;
}

/* sentinel__island, searching outward from `h` instead of from the ends: h is a garbage tensor
 * the collection followed a reference to (the resident pair's hint). Young garbage is made
 * together, so what holds a tensor mostly lies beside it in the list: the walk tests the objects
 * nearest h first, on both sides, and stops once the hits account for every reference to a
 * tensor the collector followed (budget, not 0), or when it tested the whole garbage. The
 * members are then listed from the stretch it tested when they all lie in it, so that neither
 * pass reads the rest of the garbage. Same returns as sentinel__island. */
static int
sentinel__near(young_ctx *y, tgc_gc_node *first, tgc_gc_node *h, tgc_gc_node *head,
               size_t budget, PyObject **island, PyObject **deferred)
{
    island_ctx c;
    int rc = 0;
    if (island__ctx_init(&c, y->tensor, TGC_ISLAND_MAX) < 0) {
        rc = -1;
        goto done;
    }
    young_cursor fc, bc;
    young__cursor_init(&fc);
    young__cursor_init(&bc);
    PyTypeObject *plain_ref[2] = {NULL, NULL};
    size_t found = 0;
    /* f: the next to test going forward (head: none left); b: going backward (NULL: none
     * left). lo..hi is what was tested, both included. */
    tgc_gc_node *f = h, *b = h == first ? NULL : tgc_gc_prev(h), *lo = h, *hi = h;
    int r = 0;
    while (r == 0 && (f != head || b != NULL)) {
        if (f != head) {
            PyObject *op = tgc_gc_object(f);
            hi = f;
            f = tgc_gc_next(f);
            if (young__hit(y, &fc, plain_ref, op)) {
                r = sentinel__hit(&c, op, budget, &found);
            }
        }
        if (r == 0 && b != NULL) {
            PyObject *op = tgc_gc_object(b);
            lo = b;
            b = b == first ? NULL : tgc_gc_prev(b);
            if (young__hit(y, &bc, plain_ref, op)) {
                r = sentinel__hit(&c, op, budget, &found);
            }
        }
    }
    if (r < 0) {
        goto done;  /* overflow */
    }
    young_cut += r > 0 && (f != head || b != NULL);
    young_near++;
    if (!sentinel__closed(&c)) {
        goto done;
    }
    uint32_t inside = 0;
    for (tgc_gc_node *g = lo;; g = tgc_gc_next(g)) {
        inside += tgc_ptrmap_get(&c.map, tgc_gc_object(g)) != UINT32_MAX;
        if (g == hi) {
            break;
        }
    }
    rc = (inside == c.n ? sentinel__take(lo, tgc_gc_next(hi), &c.map, island, deferred)
                        : sentinel__take(first, head, &c.map, island, deferred)) < 0 ? -1 : 1;
done:
    island__ctx_free(&c);
    return rc;
}

static void sentinel__look(PyObject *self, PyObject *hint);

#ifdef TGC_PHASE_TIMES
#  include <time.h>
static unsigned long long young_walk_n, young_walk_ns;  /* the GIL */

static unsigned long long
sentinel__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

void
tgc_young_walk_times(unsigned long long *n, unsigned long long *ns)
{
    *n += young_walk_n;
    *ns += young_walk_ns;
    young_walk_n = young_walk_ns = 0;
}

#endif

/* The first sentinel's finalizer: the walk (sentinel__look, timed when built with phase timers),
 * then a resident pair breaks itself up. The second one does nothing. */
static void
sentinel__finalize(PyObject *self)
{
    young_sentinel *s = (young_sentinel *)self;
    if (!s->first) {
        return;
    }
    /* The hint (a new reference): garbage now, it stays alive until the garbage is freed, and
     * the reference is given back at once; the collector reads refcounts again only after the
     * finalizers. Otherwise it is given back after the walk (it may be the last reference:
     * freeing a live object is what any finalizer may do). The test reads the collector's bit
     * directly: PyObject_IS_GC would call the watch, which would count it. */
    PyObject *hint = s->hint;
    s->hint = NULL;
    int hint_garbage = hint != NULL && tgc_gc_marked(tgc_gc_node_of(hint));
    if (hint_garbage) {
        Py_DECREF(hint);
    }
#ifdef TGC_PHASE_TIMES
    unsigned long long t0 = sentinel__now();
    sentinel__look(self, hint_garbage ? hint : NULL);
    young_walk_n++;
    young_walk_ns += sentinel__now() - t0;
#else
    sentinel__look(self, hint_garbage ? hint : NULL);
#endif
    if (!hint_garbage) {
        Py_XDECREF(hint);
    }
    if (s->done != NULL) {
        s->done(s);  /* resident.c: keeps the pair, makes the next spare */
    }
}

/* The first sentinel's finalizer: finalize_garbage has just moved it, alone, to its list of
 * finalized objects, and the second sentinel heads what is left, which is all the rest of this
 * collection's garbage. Walks it as the pre-scan walks the young lists; on a hit hands the part
 * that holds tensors to the catcher (sentinel__island), or all of it. Runs no Python code unless
 * the catcher does. */
static void
sentinel__look(PyObject *self, PyObject *hint)
{
    young_sentinel *s = (young_sentinel *)self;
    tgc_young_catch catch = s->catch;
    if (!s->first || catch == NULL || s->peer == NULL) {
        return;
    }
    s->catch = NULL;
    if (!s->resident && young_planted == s && !young_held) {
        /* The pair survives the collection (the collector's resurrection check sees this
         * reference), so that it is not counted as collected: gc.collect() and gc.get_stats()
         * count the program's garbage alone. "stop" breaks it up (tgc_young_uproot). */
        Py_INCREF(self);
        young_held = 1;
    }
    if (s->resident && tgc_gc_debug() != 0) {
        /* the program's debug flags: the collector must see all of this garbage (DEBUG_SAVEALL
         * keeps it, DEBUG_COLLECTABLE prints it), and the hook goes back to "start" */
        catch(s->arg, NULL, NULL);
        return;
    }
    if (!s->resident && tgc_watch_quiet(&s->watch)) {
        young_unwalked++;  /* the collector followed no reference to a tensor (watch.h) */
        return;
    }
    tgc_gc_node *n1 = tgc_gc_node_of(self), *n2 = tgc_gc_node_of(s->peer);
    tgc_gc_node *head = tgc_gc_prev(n2);
    if (tgc_gc_next(n1) != tgc_gc_prev(n1) || tgc_gc_next(head) != n2) {
        /* not the first garbage finalized, or the second one not next: objects were finalized
         * before this one, which the walk below cannot reach */
        catch(s->arg, NULL, NULL);
        return;
    }
    young_ctx y;
    y.tensor = s->tensor;
    memset(&y.types, 0, sizeof(y.types));
    y.saw_type = 0;
    PyTypeObject *plain_ref[2] = {NULL, NULL};
    young_cursor fc, bc;
    young__cursor_init(&fc);
    young__cursor_init(&bc);
    tgc_gc_node *first = tgc_gc_next(n2), *last;
    size_t budget = tgc_watch_visits(&s->watch);
    PyObject *island = NULL, *deferred = NULL;
    int rc;
    if (hint != NULL && budget != 0 && first != head) {
        /* a garbage tensor: the walk starts beside it (it is itself a hit) */
        rc = sentinel__near(&y, first, tgc_gc_node_of(hint), head, budget, &island, &deferred);
    }
    else {
        tgc_gc_node *hit = young__ring_hit(&y, &fc, &bc, plain_ref, first, head, &last);
        if (hit == NULL) {
            return;
        }
        rc = sentinel__island(&y, first, hit, last, head, budget, &island, &deferred);
    }
    if (rc == 0) {
        rc = sentinel__take(first, head, NULL, &island, &deferred);
    }
    if (rc < 0) {
        catch(s->arg, NULL, NULL);
    }
    else {
        catch(s->arg, island, deferred);
    }
}

static PyTypeObject young_sentinel_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorgc._sentinel",
    .tp_basicsize = sizeof(young_sentinel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = sentinel__traverse,
    .tp_clear = sentinel__clear,
    .tp_dealloc = sentinel__dealloc,
    .tp_finalize = sentinel__finalize,
    .tp_is_gc = tgc_watch_own_is_gc,
};

int
tgc_sentinel_type_ready(void)
{
    return (young_sentinel_type.tp_flags & Py_TPFLAGS_READY) != 0;
}

static young_sentinel *
sentinel__new(void)
{
    young_sentinel *s = PyObject_GC_New(young_sentinel, &young_sentinel_type);  /* new */
    if (s != NULL) {
        s->peer = NULL;
        s->first = 0;
        s->tensor = NULL;
        s->catch = NULL;
        s->arg = NULL;
        memset(&s->watch, 0, sizeof(s->watch));
        s->resident = 0;
        s->done = NULL;
        s->hint = NULL;
    }
    return s;
}

young_sentinel *
tgc_sentinel_pair_new(void)
{
    young_sentinel *a = sentinel__new(), *b = sentinel__new();  /* new references */
    if (a == NULL || b == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        PyErr_Clear();
        return NULL;
    }
    a->peer = (PyObject *)b;  /* b's reference moves here */
    b->peer = Py_NewRef((PyObject *)a);
    return a;
}

void
tgc_sentinel_break(young_sentinel *a)
{
    PyObject *b = a->peer;  /* take over a's reference */
    a->peer = NULL;
    if (b != NULL) {
        Py_CLEAR(((young_sentinel *)b)->peer);
        Py_DECREF(b);
    }
}


/* gc.DEBUG_STATS and gc.DEBUG_COLLECTABLE, fixed since Python 2: the collector prints the pair
 * among the collectable objects, or counts it among each generation's objects, before it can
 * resurrect itself. */
#define SENTINEL_SHOWN_BY (1 | 2)

int
tgc_young_plant(int generation, PyTypeObject *tensor, tgc_young_catch catch, void *arg)
{
    if (!young_layout_ok || !(young_sentinel_type.tp_flags & Py_TPFLAGS_READY) ||
        young_planted != NULL || tensor == NULL || generation < 0 ||
        generation >= TGC_GC_GENERATIONS || (tgc_gc_debug() & SENTINEL_SHOWN_BY) != 0) {
        return -1;
    }
    young_sentinel *a = tgc_sentinel_pair_new();  /* new reference */
    if (a == NULL) {
        return -1;
    }
    young_sentinel *b = (young_sentinel *)a->peer;  /* borrowed */
    a->first = 1;
    a->tensor = tensor;
    int watching = tgc_watch_on(tensor);
    a->catch = catch;
    a->arg = arg;
    PyObject_GC_Track(a);
    PyObject_GC_Track(b);
    /* from generation 0's tail to the front of the list the collection examines, a then b */
    tgc_gc_node *head = young__head(generation);
    tgc_gc_move_after(tgc_gc_node_of((PyObject *)b), head);
    tgc_gc_move_after(tgc_gc_node_of((PyObject *)a), head);
    young_planted = a;
    Py_DECREF(a);  /* the pair now lives by its cycle alone */
    tgc_watch_set_mark(&a->watch, watching);  /* last: nothing above counts */
    return 0;
}

int
tgc_young_uproot(void)
{
    young_sentinel *a = young_planted;
    if (a == NULL) {
        return 0;
    }
    /* Normally the pair survived because its finalizer held on to it. Otherwise the collection
     * never finalized it: a later "start" callback froze it (gc.freeze) or took a reference to
     * it, and this collection's garbage went unseen. Either way its cycle is broken here, and it
     * is left to whoever still holds it. */
    int lost = a->catch != NULL;
    young_planted = NULL;
    a->catch = NULL;
    if (!young_held) {
        Py_INCREF(a);
    }
    young_held = 0;
    PyObject *b = a->peer;  /* take over a's reference */
    a->peer = NULL;
    if (b != NULL) {
        Py_CLEAR(((young_sentinel *)b)->peer);
        Py_DECREF(b);
    }
    Py_DECREF(a);
    return lost;
}

int
tgc_young_planted(void)
{
    return young_planted != NULL;
}

void
tgc_young_undefer(PyObject *deferred)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(deferred); i++) {
        /* untracking keeps the bit, so it is cleared tracked or not */
        tgc_gc_unset_finalized(tgc_gc_node_of(PyList_GET_ITEM(deferred, i)));
    }
}

static int
sentinel__ready(void)
{
    if (PyType_Ready(&young_sentinel_type) < 0) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

#endif  /* TGC_HAVE_YOUNG_SCAN; the stubs for builds without it: young_portable.c */
