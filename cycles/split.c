/* split.c: which part of a collection's garbage holds tensors (contract in hook_int.h). One pass
 * over the garbage finds whether it holds a tensor, the legacy finalizers the collector would have
 * kept, and the tensors each object references (old tensors only the garbage holds join it,
 * tgc_held); then, while no Python code has run since the collector's check, the split frees at
 * once whatever neither reaches a tensor nor is reached from one: found from the tensors and their
 * referrers alone when the set is small (seeded), else from the whole reference graph. */
#include "cycles.h"
#include "hook_int.h"
void
tgc_hook_held_init(tgc_held *h, PyTypeObject *tensor)
{
    h->tensor = tensor;
    memset(h->keys_inline, 0, sizeof(h->keys_inline));
    h->counts.keys = h->keys_inline;
    h->counts.vals = h->vals_inline;
    h->counts.mask = 2 * HELD_INLINE - 1;
    h->tensors = h->tensors_inline;
    h->refs = h->refs_inline;
    h->n = 0;
    h->cap = HELD_INLINE;
    h->full = 0;
    memset(&h->types, 0, sizeof(h->types));
    h->cur_hit = h->lost = 0;
    h->ntargets = h->nseeds = 0;
}

static void
held__note(tgc_held *h, uint32_t *list, uint32_t *n, Py_ssize_t pos)
{
    if (*n == HELD_INLINE) {
        h->lost = 1;
        return;
    }
    list[(*n)++] = (uint32_t)pos;
}

static int
held__visit(PyObject *o, void *arg)
{
    tgc_held *h = arg;
    /* only used once torch is resolved (want_held in hook__deliver), so h->tensor is set */
    if (h->full || !tgc_tensor_typecache_check(&h->types, h->tensor, o)) {
        return 0;
    }
    h->cur_hit = 1;
    uint32_t slot = tgc_ptrmap_get(&h->counts, o);
    if (slot == UINT32_MAX) {
        if (h->n == h->cap) {
            h->full = 1;  /* more distinct tensors than we made room for: retry bigger */
            return 0;
        }
        slot = tgc_ptrmap_put(&h->counts, o, h->n);
        h->tensors[h->n] = o;
        h->refs[h->n] = 0;
        h->n++;
    }
    h->refs[slot]++;
    return 0;
}

int
tgc_hook_held_join(tgc_held *h, PyObject *objs)
{
    int joined = 0;
    for (uint32_t k = 0; k < h->n; k++) {
        /* Every reference is one from the garbage: nothing else keeps it. (A tensor that is
         * itself garbage has one more, from objs, so it is not added twice.) */
        if (Py_REFCNT(h->tensors[k]) == h->refs[k]) {
            if (PyList_Append(objs, h->tensors[k]) < 0) {
                PyErr_Clear();
                break;
            }
            joined = 1;
        }
    }
    return joined;
}

int
tgc_hook_held_more(PyTypeObject *tensor, PyObject *objs, Py_ssize_t n)
{
    int joined = 0;
    for (uint32_t cap = 8 * HELD_INLINE; cap != 0 && cap <= (1u << 24); cap *= 8) {
        tgc_held *h = malloc(sizeof(tgc_held));
        if (h == NULL) {
            return 0;
        }
        tgc_hook_held_init(h, tensor);
        h->tensors = malloc(cap * sizeof(PyObject *));
        h->refs = malloc(cap * sizeof(Py_ssize_t));
        h->cap = cap;
        if (h->tensors == NULL || h->refs == NULL || tgc_ptrmap_init(&h->counts, cap) < 0) {
            free(h->tensors);
            free(h->refs);
            free(h);
            return 0;
        }
        for (Py_ssize_t i = 0; i < n && !h->full; i++) {
            hook__traverse(PyList_GET_ITEM(objs, i), held__visit, h);
        }
        int retry = h->full;
        if (!retry) {
            joined = tgc_hook_held_join(h, objs);
        }
        tgc_ptrmap_free(&h->counts);
        free(h->tensors);
        free(h->refs);
        free(h);
        if (!retry) {
            break;
        }
    }
    return joined;
}

/* The tensors' part of the garbage without the whole reference graph. What tgc_hook_split keeps is
 * the set A of objects that reach a tensor (tensors included) plus everything A reaches. A starts
 * as the tensors and the objects referencing one of them (both found by tgc_hook_scan; a referrer of
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
hook__seeded_keep(const tgc_held *held, PyObject *const *items, uint32_t n, uint32_t scanned,
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
        /* old tensors only the garbage held (tgc_hook_held_join) */
        over |= seeded__add(c, items, pos) < 0;
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
Py_ssize_t
tgc_hook_split(tgc_cycles *c, PyObject **objs_p, const tgc_held *held, Py_ssize_t scanned)
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
    if (keep != NULL && held != NULL && c->seeded_on) {
        /* without the scan's complete lists of tensors and their referrers: the full split */
        if (!held->full && !held->lost && scanned <= n) {
            seeded = hook__seeded_keep(held, items, (uint32_t)n, (uint32_t)scanned, keep);
        }
        c->counters.seeded_used += seeded == 1;
        c->counters.seeded_fallback += seeded != 1;
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
    const tgc_tensor_state *tn = c->tensor;
    for (Py_ssize_t i = 0; i < n; i++) {
        target[i] = (uint8_t)tgc_tensor_check(tn, items[i]);
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

/* One pass over this collection's garbage: whether it holds a tensor, and (when `garbage` is
 * given) objects with a legacy tp_del put back into gc.garbage, where the collector leaves them
 * as uncollectable. With `held`, the same pass also traverses each object for the tensors it
 * references (see tgc_held), so the garbage is walked once while it is in cache. Types repeat a
 * lot in garbage, so their answers are cached for this pass; the objects keep their types alive
 * meanwhile. */
int
tgc_hook_scan(tgc_cycles *c, PyObject *objs, PyObject *garbage, tgc_held *held)
{
    enum { CACHE = 8, TENSOR = 1, LEGACY = 2 };
    PyTypeObject *types[CACHE] = {NULL};
    int flags[CACHE] = {0};
    int any_tensor = 0, next = 0;
    int torch_known = tgc_tensor_resolve(c->tensor) == 1;
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
            for (int k = 0; k < CACHE; k++) {
                if (types[k] == tp) {
                    f = flags[k];
                    break;
                }
            }
            if (f < 0) {
                f = (torch_known && tgc_tensor_check(c->tensor, op) ? TENSOR : 0) |
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
            PyErr_WriteUnraisable(c->hook);
        }
    }
    return any_tensor;
}
