/* owners.c: the shortest chain of references from the roots to each target, in one breadth-first
 * pass, then a pass over the tracked objects the first did not reach (contract in
 * include/tensorgc/owners.h). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "tensorgc/owners.h"
#include "tensorgc/ptrmap.h"

typedef struct {
    tgc_owners *o;
    /* Visited: a gc object carries the caller's mark (no lookup, no memory) where one is lent
     * and usable; the map holds the rest (targets without gc support), or everything without
     * it. NULL: no mark. */
    const tgc_heapmark *mark;
    tgc_ptrmap seen;       /* visited object -> index in o->objs; grows with them */
    size_t seen_used;
    tgc_ptrmap targets;    /* target -> index in the caller's targets */
    tgc_ptrmap exclude;    /* the caller's own objects: never entered */
    uint32_t cur;          /* the object being traversed */
    /* objs[late_from:late_to] were reached from the late roots only; a reference from one of
     * them is not counted for a target found before them. NONE until set. */
    uint32_t late_from, late_to;
    uint32_t max_objects;
    int stop_when_found;   /* end the pass as soon as every target is found */
    int failed;            /* MemoryError set */
} owners_ctx;

/* Doubles the visited map; keys are addresses, so they rehash without dereferencing. */
static int
owners__grow(owners_ctx *c)
{
    tgc_ptrmap old = c->seen, m;
    if (tgc_ptrmap_init(&m, (old.mask + 1)) < 0) {  /* init doubles: capacity >= 2n */
        return -1;
    }
    for (size_t i = 0; i <= old.mask; i++) {
        if (old.keys[i] != NULL) {
            tgc_ptrmap_put(&m, old.keys[i], old.vals[i]);
        }
    }
    tgc_ptrmap_free(&old);
    c->seen = m;
    return 0;
}

static int
owners__reserve(tgc_owners *o, size_t cap)
{
    if (cap <= o->cap || cap >= UINT32_MAX) {
        return 0;
    }
    PyObject **objs = realloc(o->objs, cap * sizeof(PyObject *));
    if (objs == NULL) {
        return -1;
    }
    o->objs = objs;
    uint32_t *p = realloc(o->parent, cap * sizeof(uint32_t));
    if (p == NULL) {
        return -1;
    }
    o->parent = p;
    uint32_t *a = realloc(o->aux, cap * sizeof(uint32_t));
    if (a == NULL) {
        return -1;
    }
    o->aux = a;
    o->cap = (uint32_t)cap;
    return 0;
}

static int
owners__append(owners_ctx *c, PyObject *op, uint32_t parent, uint32_t aux)
{
    tgc_owners *o = c->o;
    if (o->n == o->cap &&
        owners__reserve(o, o->cap ? (o->cap > UINT32_MAX / 4 ? UINT32_MAX - 1 : (size_t)o->cap * 2)
                                  : 4096) < 0) {
        return -1;
    }
    if (o->n >= o->cap) {
        return -1;  /* 32-bit indices exhausted; max_objects keeps the pass below this */
    }
    int mark = c->mark != NULL && PyObject_IS_GC(op);
    if (!mark && (c->seen_used + 1) * 2 > c->seen.mask + 1 && owners__grow(c) < 0) {
        return -1;
    }
    uint32_t i = o->n++;
    o->objs[i] = op;
    o->parent[i] = parent;
    o->aux[i] = aux;
    if (mark) {
        (void)c->mark->test_and_set(op);  /* cleared by owners__unmark before returning */
    }
    else {
        tgc_ptrmap_put(&c->seen, op, i);
        c->seen_used++;
    }
    return 0;
}

static inline int
owners__visited(const owners_ctx *c, PyObject *op)
{
    if (c->mark != NULL && PyObject_IS_GC(op)) {
        return c->mark->test(op);
    }
    return tgc_ptrmap_get(&c->seen, op) != UINT32_MAX;
}

/* Every mark set is on an object in objs (marked only once appended). */
static void
owners__unmark(const owners_ctx *c)
{
    if (c->mark == NULL) {
        return;
    }
    const tgc_owners *o = c->o;
    for (uint32_t i = 0; i < o->n; i++) {
        if (PyObject_IS_GC(o->objs[i])) {
            c->mark->clear(o->objs[i]);
        }
    }
}

/* Counts a reference from c->cur to a target, and marks the target found when first reached. */
static inline void
owners__target_ref(owners_ctx *c, PyObject *op, uint32_t idx)
{
    uint32_t j = tgc_ptrmap_get(&c->targets, op);
    if (j == UINT32_MAX) {
        return;
    }
    tgc_owners *o = c->o;
    int late_ref = c->cur >= c->late_from && c->cur < c->late_to &&
                   o->found[j] != TGC_OWNERS_NONE && o->found[j] < c->late_from;
    if (c->cur != TGC_OWNERS_NONE && o->last[j] != c->cur && !late_ref) {
        o->last[j] = c->cur;
        o->referrers[j]++;
    }
    if (o->found[j] == TGC_OWNERS_NONE && idx != TGC_OWNERS_NONE) {
        o->found[j] = idx;
        o->unfound--;
    }
}

/* tp_traverse's visitor: each reference of c->cur. Objects without GC support are leaves and are
 * not stored (most references are to str and int), unless they are targets: for them the one
 * hash probe is the small targets map, not the visited map (which misses the cache on a large
 * heap, and is most of the pass's time). */
static int
owners__visit(PyObject *op, void *arg)
{
    owners_ctx *c = arg;
    if (op == NULL) {
        return 0;
    }
    int gc = PyObject_IS_GC(op);
    if (!gc && tgc_ptrmap_get(&c->targets, op) == UINT32_MAX) {
        return 0;
    }
    if (c->mark != NULL && gc ? c->mark->test(op) : tgc_ptrmap_get(&c->seen, op) != UINT32_MAX) {
        owners__target_ref(c, op, TGC_OWNERS_NONE);  /* found when first appended */
        return 0;
    }
    if (tgc_ptrmap_get(&c->exclude, op) != UINT32_MAX) {
        return 0;
    }
    if (c->o->n >= c->max_objects) {
        c->o->truncated = 1;
        return 1;  /* stop this traverse; the loop stops too */
    }
    if (owners__append(c, op, c->cur, 0) < 0) {
        c->failed = 1;
        return 1;
    }
    owners__target_ref(c, op, c->o->n - 1);
    return 0;
}

/* Breadth-first from objs[from:]; objs grows as it goes, so the array is the queue. */
static void
owners__bfs(owners_ctx *c, uint32_t from)
{
    tgc_owners *o = c->o;
    for (uint32_t i = from; i < o->n && !c->failed && !o->truncated; i++) {
        if (c->stop_when_found && o->unfound == 0) {
            o->stopped = 1;  /* every target has its shortest chain: the rest is not needed */
            break;
        }
        PyObject *op = o->objs[i];
        traverseproc trav = Py_TYPE(op)->tp_traverse;
        if (trav == NULL || !PyObject_IS_GC(op)) {
            continue;
        }
        c->cur = i;
        (void)trav(op, owners__visit, c);
    }
    c->cur = TGC_OWNERS_NONE;
}

typedef struct {
    const tgc_ptrmap *map;
    Py_ssize_t *refs;
} owners_sub;

static int
owners__subtract(PyObject *op, void *arg)
{
    owners_sub *s = arg;
    uint32_t j = tgc_ptrmap_get(s->map, op);
    if (j != UINT32_MAX) {
        s->refs[j]--;
    }
    return 0;
}

/* The second pass: the tracked objects not reached, their references from one another (and from
 * the caller's excluded objects) subtracted; those with references left over become roots. */
static int
owners__dark(owners_ctx *c, PyObject *const *tracked, size_t n_tracked, Py_ssize_t extra,
             PyObject *const *exclude, uint32_t n_exclude, uint32_t n_twice)
{
    tgc_owners *o = c->o;
    size_t nd = 0;
    for (size_t i = 0; i < n_tracked; i++) {
        PyObject *op = tracked[i];
        nd += !owners__visited(c, op) && tgc_ptrmap_get(&c->exclude, op) == UINT32_MAX;
    }
    if (nd == 0 || nd >= UINT32_MAX) {
        return 0;
    }
    tgc_ptrmap dmap;
    PyObject **dobj = malloc(nd * sizeof(PyObject *));
    Py_ssize_t *refs = malloc(nd * sizeof(Py_ssize_t));
    if (dobj == NULL || refs == NULL || tgc_ptrmap_init(&dmap, nd) < 0) {
        free(dobj);
        free(refs);
        return -1;
    }
    uint32_t k = 0;
    for (size_t i = 0; i < n_tracked; i++) {
        PyObject *op = tracked[i];
        if (!owners__visited(c, op) && tgc_ptrmap_get(&c->exclude, op) == UINT32_MAX &&
            tgc_ptrmap_put(&dmap, op, k) == k) {
            dobj[k] = op;
            refs[k] = Py_REFCNT(op) - extra;
            k++;
        }
    }
    owners_sub s = {&dmap, refs};
    for (uint32_t i = 0; i < k; i++) {
        traverseproc trav = Py_TYPE(dobj[i])->tp_traverse;
        if (trav != NULL) {
            (void)trav(dobj[i], owners__subtract, &s);
        }
    }
    for (uint32_t i = 0; i < n_exclude; i++) {
        if (tgc_ptrmap_get(&c->exclude, exclude[i]) != i) {
            continue;  /* listed before: its references are subtracted once, not per listing */
        }
        traverseproc trav = Py_TYPE(exclude[i])->tp_traverse;
        if (trav != NULL && PyObject_IS_GC(exclude[i])) {
            (void)trav(exclude[i], owners__subtract, &s);
            if (i >= n_exclude - n_twice) {
                (void)trav(exclude[i], owners__subtract, &s);
            }
        }
    }
    o->first_dark = o->n;
    o->dark_pass = 1;
    int rc = 0;
    for (uint32_t i = 0; i < k && rc == 0; i++) {
        if (refs[i] > 0 && !owners__visited(c, dobj[i])) {
            if (o->n >= c->max_objects) {
                o->truncated = 1;
                break;
            }
            Py_ssize_t r = refs[i] < (Py_ssize_t)0x3fffffff ? refs[i] : (Py_ssize_t)0x3fffffff;
            rc = owners__append(c, dobj[i], TGC_OWNERS_NONE, TGC_OWNERS_DARK | (uint32_t)r);
            if (rc == 0) {
                c->cur = TGC_OWNERS_NONE;
                owners__target_ref(c, dobj[i], o->n - 1);
                /* Each dark root's own reach comes before the next root: a target is charged to
                 * the first holder that leads to it, as the collector's order lists them. */
                owners__bfs(c, o->n - 1);
                rc = c->failed ? -1 : 0;
            }
        }
    }
    /* What is left is garbage; searching from it tells a target kept by a cycle (or by
     * what a cycle holds) from one held by something the collector does not track. */
    for (uint32_t i = 0; i < k && rc == 0 && o->unfound > 0; i++) {
        if (owners__visited(c, dobj[i])) {
            continue;
        }
        if (o->n >= c->max_objects) {
            o->truncated = 1;
            break;
        }
        rc = owners__append(c, dobj[i], TGC_OWNERS_NONE, TGC_OWNERS_GARBAGE);
        if (rc == 0) {
            c->cur = TGC_OWNERS_NONE;
            owners__target_ref(c, dobj[i], o->n - 1);
            owners__bfs(c, o->n - 1);
            rc = c->failed ? -1 : 0;
        }
    }
    tgc_ptrmap_free(&dmap);
    free(dobj);
    free(refs);
    return rc;
}

static int
owners__map_of(tgc_ptrmap *m, PyObject *const *items, uint32_t n)
{
    if (tgc_ptrmap_init(m, n ? n : 1) < 0) {
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        tgc_ptrmap_put(m, items[i], i);
    }
    return 0;
}

/* Appends roots[from:to] (each its own index in roots as aux); a root already visited or
 * excluded keeps its first place. 0, or -1 when out of memory; max_objects reached stops it. */
static int
owners__roots(owners_ctx *c, PyObject *const *roots, uint32_t from, uint32_t to)
{
    tgc_owners *o = c->o;
    for (uint32_t i = from; i < to; i++) {
        PyObject *op = roots[i];
        if (owners__visited(c, op) || tgc_ptrmap_get(&c->exclude, op) != UINT32_MAX) {
            continue;
        }
        if (o->n >= c->max_objects) {
            o->truncated = 1;
            break;
        }
        if (owners__append(c, op, TGC_OWNERS_NONE, i) < 0) {
            return -1;
        }
        owners__target_ref(c, op, o->n - 1);
    }
    return 0;
}

int
tgc_owners_search(tgc_owners *o, const tgc_heapmark *mark,
                  PyObject *const *roots, uint32_t n_roots, uint32_t n_late,
                  PyObject *const *targets, uint32_t n_targets,
                  PyObject *const *exclude, uint32_t n_exclude, uint32_t n_twice,
                  PyObject *const *tracked, size_t n_tracked, Py_ssize_t tracked_extra,
                  uint32_t max_objects, int stop_when_found)
{
    memset(o, 0, sizeof(*o));
    owners_ctx c = {0};
    c.o = o;
    c.cur = TGC_OWNERS_NONE;
    c.late_from = c.late_to = TGC_OWNERS_NONE;
    c.max_objects = max_objects ? max_objects : 1;
    c.stop_when_found = stop_when_found;
    o->ntargets = n_targets;
    o->unfound = n_targets;
    o->first_dark = TGC_OWNERS_NONE;
    size_t nt = n_targets ? n_targets : 1;
    o->found = malloc(nt * sizeof(uint32_t));
    o->referrers = calloc(nt, sizeof(uint32_t));
    o->last = malloc(nt * sizeof(uint32_t));
    /* Sized for every tracked object at once (the pass reaches most of them): no rehash on
     * the way. Capped by max_objects, which bounds what the pass may visit. */
    c.mark = mark != NULL && mark->usable() ? mark : NULL;
    size_t hint = n_tracked + n_roots + 4096;
    if (hint > c.max_objects) {
        hint = c.max_objects;
    }
    if (o->found == NULL || o->referrers == NULL || o->last == NULL ||
        tgc_ptrmap_init(&c.seen, c.mark != NULL ? 4096 : hint) < 0 || owners__reserve(o, hint) < 0) {
        goto nomem;
    }
    c.seen_used = 0;
    memset(o->found, 0xff, nt * sizeof(uint32_t));
    memset(o->last, 0xff, nt * sizeof(uint32_t));
    if (owners__map_of(&c.targets, targets, n_targets) < 0 ||
        owners__map_of(&c.exclude, exclude, n_exclude) < 0) {
        goto nomem;
    }
    if (n_late > n_roots) {
        n_late = n_roots;
    }
    if (owners__roots(&c, roots, 0, n_roots - n_late) < 0) {
        goto nomem;
    }
    owners__bfs(&c, 0);
    if (!c.failed && !o->truncated && n_late > 0 && o->unfound > 0) {
        c.late_from = o->n;
        if (owners__roots(&c, roots, n_roots - n_late, n_roots) < 0) {
            goto nomem;
        }
        owners__bfs(&c, c.late_from);
        c.late_to = o->n;
    }
    if (c.failed) {
        goto nomem;
    }
    if (o->unfound > 0 && tracked != NULL && !o->truncated &&
        owners__dark(&c, tracked, n_tracked, tracked_extra, exclude, n_exclude, n_twice) < 0) {
        goto nomem;
    }
    owners__unmark(&c);
    tgc_ptrmap_free(&c.seen);
    tgc_ptrmap_free(&c.targets);
    tgc_ptrmap_free(&c.exclude);
    return 0;

nomem:
    owners__unmark(&c);
    tgc_ptrmap_free(&c.seen);
    tgc_ptrmap_free(&c.targets);
    tgc_ptrmap_free(&c.exclude);
    PyErr_NoMemory();
    return -1;
}

void
tgc_owners_free(tgc_owners *o)
{
    free(o->objs);
    free(o->parent);
    free(o->aux);
    free(o->found);
    free(o->referrers);
    free(o->last);
    memset(o, 0, sizeof(*o));
}
