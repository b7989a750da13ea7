/* report_build.c: turns one collection's garbage into a CycleReport (contract in report.h): which
 * objects are tensors of interest (report_tensors.c), the reference graph restricted to the garbage
 * (edges.c, tp_traverse), the cycles that hold tensors (graph.c), identical leaks grouped, what
 * fits in a bounded drawing, and the text (report_text.c). The DOT waits in the report until it is
 * drawn (report_dot.c); the picture and page come on first use (report_page.c). */
#include "cycles.h"
#include "report_int.h"
static uint64_t
build__mix1(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ULL;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dULL;
    return x ^ (x >> 33);
}

static uint64_t
build__mix2(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int
build__cmp_sig(const void *a, const void *b)
{
    const tgc_group *x = a, *y = b;
#define CMP(f) if (x->f != y->f) return x->f < y->f ? -1 : 1
    CMP(nodes); CMP(edges); CMP(targets); CMP(h1); CMP(h2); CMP(group);
#undef CMP
    return 0;
}

static int
build__cmp_bytes(const void *a, const void *b)
{
    const tgc_group *x = a, *y = b;
    if (x->total_bytes != y->total_bytes) {
        return x->total_bytes > y->total_bytes ? -1 : 1;
    }
    return x->group < y->group ? -1 : x->group > y->group;
}

PyObject *
tgc_report_tname(tgc_builder *b, uint32_t v)
{
    if (b->tname[v] == NULL) {
        b->tname[v] = tgc_type_name(b->items[v]);
    }
    return b->tname[v];
}

static int
build__emit(tgc_builder *b, uint32_t s, uint32_t d, PyObject *label)
{
    if (b->nedges == b->cap_edges) {
        size_t cap = b->cap_edges ? b->cap_edges * 2 : 256;
        tgc_drawn_edge *p = PyMem_Realloc(b->edges, cap * sizeof(tgc_drawn_edge));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->edges = p;
        b->cap_edges = cap;
    }
    b->edges[b->nedges].src = s;
    b->edges[b->nedges].dst = d;
    b->edges[b->nedges].label = label;
    b->nedges++;
    return 0;
}

/* Decides which drawn containers are folded into their owner: the owner named it as its own
 * (instance dict, closure tuple and cells, frame locals) and nothing else drawn points at it. */
static void
build__fold(tgc_builder *b)
{
    for (uint32_t x = 0; x < b->n; x++) {
        if (!b->draw[x]) {
            continue;
        }
        tgc_names *ns = &b->names[x];
        for (int k = 0; k < ns->nfolds; k++) {
            PyObject *c_obj = ns->folds[k];
            uint32_t c = tgc_ptrmap_get(&b->map, c_obj);
            if (c == UINT32_MAX || c == x || !b->draw[c] || b->owner[c] != TGC_NONE) {
                continue;
            }
            int only_owner = 1;
            for (uint32_t e = b->g.in_off[c]; e < b->g.in_off[c + 1]; e++) {
                uint32_t r = b->g.in_src[e];
                if (!b->draw[r] || r == x) {
                    continue;
                }
                int is_fold = 0;
                for (int j = 0; j < ns->nfolds; j++) {
                    is_fold |= ns->folds[j] == b->items[r];
                }
                if (!is_fold) {
                    only_owner = 0;
                    break;
                }
            }
            if (only_owner) {
                b->owner[c] = x;
            }
        }
    }
}

/* Whether out-edge e (s -> d) is one the picture shows: both ends drawn, d not folded into its
 * owner. */
static inline int
build__drawable(const tgc_builder *b, uint32_t s, uint32_t d)
{
    return b->draw[s] && b->draw[d] && b->owner[d] == TGC_NONE;
}

/* The references drawn. Graphviz's time grows fast with edges per node (a mesh of 61 nodes and
 * 450 edges took 4.7 s, with 180 edges 0.16 s), so at most 2.5 per drawn node (between 60 and
 * TGC_DRAW_EDGES) are drawn. Over that cap they are chosen: the references to tensors first,
 * then one reference into each drawn object (so none floats alone), then the rest in order;
 * the others are counted (edges_dropped). */
static int
build__emit_all(tgc_builder *b)
{
    size_t nodes = 0, total = 0;
    for (uint32_t v = 0; v < b->n; v++) {
        nodes += b->draw[v] && b->owner[v] == TGC_NONE;
    }
    size_t cap = nodes * 5 / 2;
    cap = cap < 60 ? 60 : cap > TGC_DRAW_EDGES ? TGC_DRAW_EDGES : cap;
    for (uint32_t s = 0; s < b->n; s++) {
        for (uint32_t e = b->g.out_off[s]; e < b->g.out_off[s + 1]; e++) {
            total += build__drawable(b, s, b->g.out_dst[e]);
        }
    }
    uint8_t *chosen = NULL;
    if (total > cap) {
        chosen = calloc(b->g.m ? b->g.m : 1, 1);
        uint8_t *has_in = calloc(b->n, 1);
        if (chosen == NULL || has_in == NULL) {
            free(chosen);
            free(has_in);
            PyErr_NoMemory();
            return -1;
        }
        size_t k = 0;
        for (int pass = 0; pass < 3 && k < cap; pass++) {
            for (uint32_t s = 0; s < b->n && k < cap; s++) {
                for (uint32_t e = b->g.out_off[s]; e < b->g.out_off[s + 1] && k < cap; e++) {
                    uint32_t d = b->g.out_dst[e];
                    if (chosen[e] || !build__drawable(b, s, d) ||
                        (pass == 0 && !b->is_target[d]) || (pass == 1 && has_in[d])) {
                        continue;
                    }
                    chosen[e] = 1;
                    has_in[d] = 1;
                    k++;
                }
            }
        }
        free(has_in);
        b->edges_dropped = total - k;
    }
    for (uint32_t s = 0; s < b->n; s++) {
        if (!b->draw[s]) {
            continue;
        }
        uint32_t own = b->owner[s] != TGC_NONE ? b->owner[s] : s;
        PyObject *via = own != s ? b->items[s] : NULL;
        for (uint32_t e = b->g.out_off[s]; e < b->g.out_off[s + 1]; e++) {
            uint32_t d = b->g.out_dst[e];
            if (!build__drawable(b, s, d)) {
                continue;  /* not drawn, or drawn as part of its owner */
            }
            PyObject *label = tgc_names_take(&b->names[own], b->items[d], via);
            if (label == NULL && via != NULL) {
                label = tgc_names_take(&b->names[s], b->items[d], NULL);
            }
            if (chosen != NULL && !chosen[e]) {
                continue;  /* its label is taken all the same: parallel edges keep theirs */
            }
            if (label == NULL) {
                label = b->unknown;
            }
            if (build__emit(b, own, d, label) < 0) {
                free(chosen);
                return -1;
            }
        }
    }
    free(chosen);
    return 0;
}

void
tgc_report_builder_free(tgc_builder *b)
{
    if (b->names != NULL) {
        for (uint32_t v = 0; v < b->n; v++) {
            tgc_names_clear(&b->names[v]);
        }
    }
    if (b->ts != NULL) {
        for (uint32_t v = 0; v < b->n; v++) {
            tgc_report_tensor_clear(&b->ts[v]);
        }
    }
    for (uint32_t v = 0; v < b->n; v++) {
        if (b->tname != NULL) {
            Py_XDECREF(b->tname[v]);
        }
        if (b->desc != NULL) {
            Py_XDECREF(b->desc[v]);
        }
    }
    PyMem_Free(b->names);
    PyMem_Free(b->tname);
    PyMem_Free(b->desc);
    PyMem_Free(b->ts);
    PyMem_Free(b->edges);
    free(b->is_target);
    free(b->draw);
    free(b->skip);
    free(b->bridges);
    free(b->owner);
    free(b->groups);
    tgc_graph_free(&b->g);
    tgc_analysis_free(&b->a);
    tgc_ptrmap_free(&b->map);
    Py_XDECREF(b->unknown);
}

PyObject *
tgc_report_str(tgc_buf *o)
{
    if (o->oom) {
        return PyErr_NoMemory();
    }
    return PyUnicode_DecodeUTF8(o->data ? o->data : "", (Py_ssize_t)o->len, "replace");
}

static int
build__graph(tgc_builder *b)
{
    uint32_t *src, *dst, m;
    if (tgc_edges(b->items, b->n, &b->map, &src, &dst, &m) < 0) {
        return -1;
    }
    int rc = -1;
    if (tgc_graph_build(&b->g, b->n, m, src, dst) == 0 && tgc_analyze(&b->g, b->is_target, &b->a) == 0) {
        rc = 0;
    }
    else {
        PyErr_NoMemory();
    }
    free(src);
    free(dst);
    return rc;
}

static int
build__groups(tgc_builder *b)
{
    uint32_t ng = b->a.ngroups;
    b->ngroups = ng;
    b->groups = calloc(ng ? ng : 1, sizeof(tgc_group));
    if (b->groups == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t k = 0; k < ng; k++) {
        b->groups[k].group = k;
    }
    for (uint32_t v = 0; v < b->n; v++) {
        uint32_t k = b->a.group[v];
        if (k == TGC_NONE) {
            continue;
        }
        tgc_group *gi = &b->groups[k];
        uint64_t h = (uint64_t)(uintptr_t)Py_TYPE(b->items[v]);
        if (b->ts[v].info != NULL && (b->a.role[v] & TGC_ROLE_TARGET)) {
            Py_hash_t sh = PyObject_Hash(b->ts[v].shape);
            h ^= build__mix1((uint64_t)sh) ^ (uint64_t)b->ts[v].nbytes;
            gi->targets++;
            gi->nbytes += b->ts[v].nbytes;
        }
        gi->nodes++;
        gi->h1 += build__mix1(h);
        gi->h2 += build__mix2(h);
        for (uint32_t e = b->g.out_off[v]; e < b->g.out_off[v + 1]; e++) {
            uint32_t w = b->g.out_dst[e];
            if (b->a.group[w] != k) {
                continue;
            }
            uint64_t he = build__mix2((uint64_t)(uintptr_t)Py_TYPE(b->items[v])) ^
                          (uint64_t)(uintptr_t)Py_TYPE(b->items[w]) ^ (v == w ? 0x5bd1e995 : 0);
            gi->edges++;
            gi->h1 += build__mix1(he + 1);
            gi->h2 += build__mix2(he + 2);
        }
    }
    PyErr_Clear();
    /* Sort by signature, fold runs into their first member, then order by bytes. */
    qsort(b->groups, ng, sizeof(tgc_group), build__cmp_sig);
    uint32_t out = 0;
    for (uint32_t i = 0; i < ng;) {
        uint32_t j = i;
        tgc_group rep = b->groups[i];
        rep.count = 0;
        rep.total_bytes = 0;
        rep.total_targets = 0;
        while (j < ng && b->groups[j].nodes == rep.nodes && b->groups[j].edges == rep.edges &&
               b->groups[j].targets == rep.targets && b->groups[j].h1 == rep.h1 &&
               b->groups[j].h2 == rep.h2) {
            rep.count++;
            rep.total_bytes += b->groups[j].nbytes;
            rep.total_targets += b->groups[j].targets;
            j++;
        }
        b->groups[out++] = rep;
        i = j;
    }
    b->ngroups = out;
    qsort(b->groups, out, sizeof(tgc_group), build__cmp_bytes);
    return 0;
}

/* Sets class internals aside (skip[v] = 1) so that a large leak of many classes (type() in a
 * loop, dataclass or namedtuple factories) draws its instances, not each class's __dict__,
 * __mro__ and descriptors: a type object, and whatever only such objects refer to, three levels
 * down. Targets are never set aside. Groups of TGC_DRAW_SMALL nodes or fewer undo it (they are
 * drawn whole). 0, or -1 with an exception. */
static int
build__set_aside(tgc_builder *b)
{
    for (uint32_t v = 0; v < b->n; v++) {
        b->skip[v] = b->a.group[v] != TGC_NONE && PyType_Check(b->items[v]) && !b->is_target[v];
    }
    for (int level = 0; level < 3; level++) {
        for (uint32_t v = 0; v < b->n; v++) {
            if (b->skip[v] || b->a.group[v] == TGC_NONE || b->is_target[v] ||
                b->g.in_off[v] == b->g.in_off[v + 1]) {
                continue;
            }
            int only = 1;
            for (uint32_t e = b->g.in_off[v]; e < b->g.in_off[v + 1] && only; e++) {
                only = b->skip[b->g.in_src[e]] != 0;
            }
            b->skip[v] = (uint8_t)only;
        }
    }
    return 0;
}

/* Keeps the bridges of a group whose two ends are drawn (the DOT shows them as "... N more"
 * edges). 0, or -1 when out of memory. */
static int
build__keep_bridges(tgc_builder *b, const tgc_bridge *br, size_t nbr)
{
    for (size_t i = 0; i < nbr; i++) {
        if (!b->draw[br[i].from] || !b->draw[br[i].to]) {
            continue;
        }
        tgc_bridge *p = realloc(b->bridges, (b->nbridges + 1) * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        b->bridges = p;
        b->bridges[b->nbridges++] = br[i];
    }
    return 0;
}

PyObject *
tgc_report_build(tgc_cycles *c, PyObject *objs, const tgc_filter *f, int generation,
                 Py_ssize_t garbage_total)
{
    tgc_builder b;
    memset(&b, 0, sizeof(b));
    tgc_buf text = {0};
    tgc_report_row *rows = NULL;  /* the table's, one per group; its strings new references */
    PyObject *result = NULL, *tensors = NULL, *groups = NULL, *edges = NULL, *hints = NULL;
    PyObject *seen = NULL;
    uint32_t *elided = NULL;

    if (tgc_tensor_resolve(c->tensor) <= 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t n0 = PyList_GET_SIZE(objs);
    if (n0 <= 0 || n0 >= (Py_ssize_t)UINT32_MAX) {
        Py_RETURN_NONE;
    }
    b.c = c;
    b.objs = objs;
    b.n = (uint32_t)n0;
    /* The list may grow while we name objects (materialised dicts): snapshot the pointers. */
    b.items = PyMem_Malloc(b.n * sizeof(PyObject *));
    b.is_target = calloc(b.n, 1);
    b.ts = PyMem_Calloc(b.n, sizeof(tgc_rtensor));
    b.draw = calloc(b.n, 1);
    b.skip = calloc(b.n, 1);
    b.owner = malloc(b.n * sizeof(uint32_t));
    b.names = PyMem_Calloc(b.n, sizeof(tgc_names));
    b.tname = PyMem_Calloc(b.n, sizeof(PyObject *));
    b.desc = PyMem_Calloc(b.n, sizeof(PyObject *));
    b.unknown = PyUnicode_FromString("?");
    if (!b.items || !b.is_target || !b.ts || !b.draw || !b.skip || !b.owner || !b.names || !b.tname ||
        !b.desc || !b.unknown) {
        PyErr_NoMemory();
        goto error;
    }
    memcpy(b.items, PySequence_Fast_ITEMS(objs), b.n * sizeof(PyObject *));
    for (uint32_t v = 0; v < b.n; v++) {
        b.owner[v] = TGC_NONE;
    }

    if (!tgc_report_tensors(&b, f)) {
        tgc_report_builder_free(&b);
        PyMem_Free(b.items);
        Py_RETURN_NONE;
    }
    if (build__graph(&b) < 0) {
        goto error;
    }
    if (b.a.kept == 0) {
        tgc_report_builder_free(&b);
        PyMem_Free(b.items);
        Py_RETURN_NONE;
    }
    tgc_report_stacks(b.ts, b.n);
    if (build__groups(&b) < 0) {
        goto error;
    }

    /* What to draw: the largest groups first, within the node budget. */
    uint32_t budget = TGC_DRAW_BUDGET;
    elided = calloc(b.ngroups ? b.ngroups : 1, sizeof(uint32_t));
    if (elided == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    if (build__set_aside(&b) < 0) {
        goto error;
    }
    for (uint32_t k = 0; k < b.ngroups && k < TGC_DRAW_GROUPS && budget > 0; k++) {
        tgc_group *gi = &b.groups[k];
        long picked, aside = 0, chained = 0;
        tgc_bridge *br = NULL;
        size_t nbr = 0;
        if (gi->nodes > TGC_DRAW_SMALL) {
            for (uint32_t v = 0; v < b.n; v++) {
                aside += b.a.group[v] == gi->group && b.skip[v];
            }
            chained = tgc_chains(&b.g, &b.a, gi->group, TGC_CHAIN_KEEP, b.skip, &br, &nbr);
            if (chained < 0) {
                PyErr_NoMemory();
                goto error;
            }
            aside += chained;
        }
        else {
            for (uint32_t v = 0; v < b.n; v++) {
                if (b.a.group[v] == gi->group) {
                    b.skip[v] = 0;  /* small: drawn whole */
                }
            }
        }
        if (gi->nodes - (uint32_t)aside <= budget) {
            for (uint32_t v = 0; v < b.n; v++) {
                if (b.a.group[v] == gi->group && !b.skip[v]) {
                    b.draw[v] = 1;
                }
            }
            picked = gi->nodes - (uint32_t)aside;
        }
        else {
            picked = tgc_pick(&b.g, &b.a, gi->group, budget, b.skip, br, nbr, b.draw);
        }
        if (picked < 0 || build__keep_bridges(&b, br, nbr) < 0) {
            free(br);
            PyErr_NoMemory();
            goto error;
        }
        free(br);
        /* The "more" node counts what is left out, less the shortened chains (their edges say). */
        elided[k] = gi->nodes - (uint32_t)picked - (uint32_t)chained;
        budget -= (uint32_t)picked;
        gi->drawn = 1;
    }
    /* Names of drawn objects, then folding and the drawn edges. */
    for (uint32_t v = 0; v < b.n; v++) {
        b.names[v].labels = &c->labels;
        if (b.draw[v] && tgc_names_collect(b.items[v], &b.names[v], objs) < 0) {
            tgc_cycles_log(c, "naming references");
        }
    }
    build__fold(&b);
    if (build__emit_all(&b) < 0) {
        goto error;
    }
    /* The object nodes the DOT will show (drawn, not folded into an owner; draw is set in drawn
     * groups only), and what dot_node writes under their type names: the DOT itself is drawn
     * later, if at all. */
    Py_ssize_t objects_drawn = 0;
    for (uint32_t v = 0; v < b.n; v++) {
        if (!b.draw[v] || b.owner[v] != TGC_NONE) {
            continue;
        }
        objects_drawn++;
        b.ndrawn++;
        if (b.ts[v].info == NULL && (b.desc[v] = tgc_describe(b.items[v])) == NULL) {
            PyErr_Clear();
        }
    }

    /* Tensors of interest, largest first, and bytes counted once per storage. */
    tensors = PyList_New(0);
    seen = PySet_New(NULL);
    groups = PyList_New(0);
    edges = PyList_New(0);
    hints = PyList_New(0);
    if (!tensors || !seen || !groups || !edges || !hints) {
        goto error;
    }
    unsigned long long total = 0;
    uint32_t ntensors = 0;
    for (uint32_t v = 0; v < b.n; v++) {
        if (b.ts[v].info == NULL || !(b.a.role[v] & TGC_ROLE_TARGET)) {
            continue;
        }
        ntensors++;
        if (PyList_Append(tensors, b.ts[v].info) < 0) {
            goto error;
        }
        if (b.ts[v].multi) {
            /* the parts of a sparse tensor or a wrapper: each storage once, here and across */
            PyObject *parts = b.ts[v].storage_key;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts); i++) {
                PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(parts, i), 0);
                PyObject *nb = PyTuple_GET_ITEM(PyTuple_GET_ITEM(parts, i), 1);
                int known = key == Py_None ? 0 : PySet_Contains(seen, key);
                if (known < 0 || (known == 0 && key != Py_None && PySet_Add(seen, key) < 0)) {
                    goto error;
                }
                if (!known) {
                    total += PyLong_AsUnsignedLongLong(nb);  /* made from one: cannot fail */
                }
            }
            continue;
        }
        int known = PySet_Contains(seen, b.ts[v].storage_key);
        if (known < 0 || (known == 0 && PySet_Add(seen, b.ts[v].storage_key) < 0)) {
            goto error;
        }
        if (!known) {
            total += b.ts[v].nbytes;
        }
    }

    /* The text buffer starts at the size of a one-leak report (about 500 bytes; its DOT is twice
     * that, tgc_report_draw_dot), so the common case never regrows it. */
    tgc_buf_reserve(&text, 1000);
    rows = PyMem_Calloc(b.ngroups ? b.ngroups : 1, sizeof(tgc_report_row));
    if (rows == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (size_t e = 0; e < b.nedges; e++) {
        tgc_drawn_edge *de = &b.edges[e];
        PyObject *src_t = tgc_report_tname(&b, de->src);
        PyObject *dst_t = src_t ? tgc_report_tname(&b, de->dst) : NULL;
        PyObject *tup = dst_t ? PyTuple_Pack(3, src_t, de->label, dst_t) : NULL;
        if (tup == NULL || PyList_Append(edges, tup) < 0) {
            Py_XDECREF(tup);
            goto error;
        }
        Py_DECREF(tup);
    }

    if (tgc_report_text(&b, generation, ntensors, total, &text, rows, groups, hints) < 0) {
        goto error;
    }
    if (text.oom) {
        PyErr_NoMemory();
        goto error;
    }

    tgc_report *r = PyObject_GC_New(tgc_report, c->report_type);
    if (r == NULL) {
        goto error;
    }
    r->text = tgc_report_str(&text);
    r->dot = NULL;
    memset(&r->dot_src, 0, sizeof(r->dot_src));
    r->rows = rows;
    r->nrows = b.ngroups;
    rows = NULL;
    r->tensors = tensors;
    r->groups = groups;
    r->edges = edges;
    r->hints = hints;
    tensors = groups = edges = hints = NULL;
    r->svg = r->html = r->svg_error = NULL;
    r->nbytes = total;
    r->objects = objects_drawn;
    r->garbage = garbage_total > (Py_ssize_t)b.n ? garbage_total : (Py_ssize_t)b.n;
    r->generation = generation;
    /* The DOT waits: most reports are read for their text and freed with the garbage, never
     * drawn. The tgc_builder moves to the report, with the garbage list that keeps its objects
     * alive, until the DOT is asked for or tgc_report_settle decides (before the garbage goes). */
    r->pending = PyMem_Malloc(sizeof(tgc_pending));
    r->pending_objs = NULL;
    if (r->pending != NULL) {
        r->pending->b = b;  /* moves: the builder's arrays and references */
        r->pending->elided = elided;
        memset(&b, 0, sizeof(b));
        elided = NULL;
        r->pending_objs = Py_NewRef(objs);
    }
    else {
        tgc_report_draw_dot(&b, elided, &r->dot_src);  /* no memory to wait: draw it now */
    }
    PyObject_GC_Track((PyObject *)r);
    result = (PyObject *)r;
    if (r->text == NULL) {
        Py_CLEAR(result);
    }
error:
    tgc_report_builder_free(&b);
    PyMem_Free(b.items);
    free(elided);
    tgc_buf_free(&text);
    tgc_report_rows_free(rows, b.ngroups);
    Py_XDECREF(tensors);
    Py_XDECREF(groups);
    Py_XDECREF(edges);
    Py_XDECREF(hints);
    Py_XDECREF(seen);
    return result;
}
