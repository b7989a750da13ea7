/* report_build.c: makes one collection's garbage into a report's model (contract in
 * report_build.h; the model's in report_model.h): which objects are tensors of interest
 * (report_tensors.c), the reference graph restricted to the garbage (edges.c, tp_traverse), the
 * cycles that hold tensors (graph.c), identical leaks grouped, what fits in a bounded drawing,
 * the names and descriptions it shows, the totals, and each group's cycle and fix
 * (report_hint.c). Writes nothing: the writers read the model afterwards (report_write.h). */
#include "cycles.h"
#include "report_build.h"
#include "shapes.h"

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

static int
build__emit(tgc_report_model *m, uint32_t s, uint32_t d, PyObject *label)
{
    if (m->nedges == m->cap_edges) {
        size_t cap = m->cap_edges ? m->cap_edges * 2 : 256;
        tgc_drawn_edge *p = PyMem_Realloc(m->edges, cap * sizeof(tgc_drawn_edge));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        m->edges = p;
        m->cap_edges = cap;
    }
    m->edges[m->nedges].src = s;
    m->edges[m->nedges].dst = d;
    m->edges[m->nedges].label = label;
    m->edges[m->nedges].cell = -1;
    /* A closure variable's cell, taken now: the DOT is drawn from the model alone. */
    PyObject *f = m->items[s];
    PyObject *closure = PyFunction_Check(f) ? ((PyFunctionObject *)f)->func_closure : NULL;
    Py_ssize_t ncells = closure != NULL && PyTuple_Check(closure) ? PyTuple_GET_SIZE(closure) : 0;
    for (Py_ssize_t i = 0; i < ncells && i < INT32_MAX; i++) {
        PyObject *cell = PyTuple_GET_ITEM(closure, i);
        if (PyCell_Check(cell) && PyCell_GET(cell) == m->items[d]) {
            m->edges[m->nedges].cell = (int32_t)i;
            break;
        }
    }
    m->nedges++;
    return 0;
}

/* Decides which drawn containers are folded into their owner: the owner named it as its own
 * (instance dict, closure tuple and cells, frame locals) and nothing else drawn points at it. */
static void
build__fold(tgc_report_model *m)
{
    for (uint32_t x = 0; x < m->n; x++) {
        if (!m->draw[x]) {
            continue;
        }
        tgc_names *ns = &m->names[x];
        for (int k = 0; k < ns->nfolds; k++) {
            PyObject *c_obj = ns->folds[k];
            uint32_t c = tgc_ptrmap_get(&m->map, c_obj);
            if (c == UINT32_MAX || c == x || !m->draw[c] || m->owner[c] != TGC_NONE) {
                continue;
            }
            int only_owner = 1;
            for (uint32_t e = m->g.in_off[c]; e < m->g.in_off[c + 1]; e++) {
                uint32_t r = m->g.in_src[e];
                if (!m->draw[r] || r == x) {
                    continue;
                }
                int is_fold = 0;
                for (int j = 0; j < ns->nfolds; j++) {
                    is_fold |= ns->folds[j] == m->items[r];
                }
                if (!is_fold) {
                    only_owner = 0;
                    break;
                }
            }
            if (only_owner) {
                m->owner[c] = x;
            }
        }
    }
}

/* Whether out-edge e (s -> d) is one the picture shows: both ends drawn, d not folded into its
 * owner. */
static inline int
build__drawable(const tgc_report_model *m, uint32_t s, uint32_t d)
{
    return m->draw[s] && m->draw[d] && m->owner[d] == TGC_NONE;
}

/* The references drawn. Graphviz's time grows fast with edges per node (a mesh of 61 nodes and
 * 450 edges took 4.7 s, with 180 edges 0.16 s), so at most 2.5 per drawn node (between 60 and
 * TGC_DRAW_EDGES) are drawn. Over that cap they are chosen: the references to tensors first,
 * then one reference into each drawn object (so none floats alone), then the rest in order;
 * the others are counted (edges_dropped). */
static int
build__emit_all(tgc_report_model *m)
{
    size_t nodes = 0, total = 0;
    for (uint32_t v = 0; v < m->n; v++) {
        nodes += m->draw[v] && m->owner[v] == TGC_NONE;
    }
    size_t cap = nodes * 5 / 2;
    cap = cap < 60 ? 60 : cap > TGC_DRAW_EDGES ? TGC_DRAW_EDGES : cap;
    for (uint32_t s = 0; s < m->n; s++) {
        for (uint32_t e = m->g.out_off[s]; e < m->g.out_off[s + 1]; e++) {
            total += build__drawable(m, s, m->g.out_dst[e]);
        }
    }
    uint8_t *chosen = NULL;
    if (total > cap) {
        chosen = calloc(m->g.m ? m->g.m : 1, 1);
        uint8_t *has_in = calloc(m->n, 1);
        if (chosen == NULL || has_in == NULL) {
            free(chosen);
            free(has_in);
            PyErr_NoMemory();
            return -1;
        }
        size_t k = 0;
        for (int pass = 0; pass < 3 && k < cap; pass++) {
            for (uint32_t s = 0; s < m->n && k < cap; s++) {
                for (uint32_t e = m->g.out_off[s]; e < m->g.out_off[s + 1] && k < cap; e++) {
                    uint32_t d = m->g.out_dst[e];
                    if (chosen[e] || !build__drawable(m, s, d) ||
                        (pass == 0 && !m->is_target[d]) || (pass == 1 && has_in[d])) {
                        continue;
                    }
                    chosen[e] = 1;
                    has_in[d] = 1;
                    k++;
                }
            }
        }
        free(has_in);
        m->edges_dropped = total - k;
    }
    for (uint32_t s = 0; s < m->n; s++) {
        if (!m->draw[s]) {
            continue;
        }
        uint32_t own = m->owner[s] != TGC_NONE ? m->owner[s] : s;
        PyObject *via = own != s ? m->items[s] : NULL;
        for (uint32_t e = m->g.out_off[s]; e < m->g.out_off[s + 1]; e++) {
            uint32_t d = m->g.out_dst[e];
            if (!build__drawable(m, s, d)) {
                continue;  /* not drawn, or drawn as part of its owner */
            }
            PyObject *label = tgc_names_take(&m->names[own], m->items[d], via);
            if (label == NULL && via != NULL) {
                label = tgc_names_take(&m->names[s], m->items[d], NULL);
            }
            if (chosen != NULL && !chosen[e]) {
                continue;  /* its label is taken all the same: parallel edges keep theirs */
            }
            if (label == NULL) {
                label = m->unknown;
            }
            if (build__emit(m, own, d, label) < 0) {
                free(chosen);
                return -1;
            }
        }
    }
    free(chosen);
    return 0;
}

/* An instance's own __dict__, where it is an object of its own in the garbage that only its
 * instance references (every instance's on 3.10; on 3.11+ a managed one once made, by vars() or
 * by an earlier report's naming, which appends it to the garbage: another observer's filter must
 * not change how this one groups), is seen through: instance -> dict -> x reads
 * instance -> x, as 3.11+'s instances reference their attributes, and the dict is left with no
 * edge (so neither kept nor drawn nor counted: a ring of instances is one ring, whatever the
 * version). In place: edges are only dropped or given another source. */
static void
build__see_through_dicts(tgc_report_model *m, uint32_t *src, uint32_t *dst, uint32_t *nrefs)
{
    uint32_t *owner = malloc((m->n ? m->n : 1) * sizeof(uint32_t));
    uint32_t *indeg = calloc(m->n ? m->n : 1, sizeof(uint32_t));
    int any = 0;
    if (owner == NULL || indeg == NULL) {
        free(owner);
        free(indeg);
        return;  /* drawn with its dicts, as the references are */
    }
    for (uint32_t e = 0; e < *nrefs; e++) {
        indeg[dst[e]]++;
    }
    for (uint32_t v = 0; v < m->n; v++) {
        owner[v] = TGC_NONE;
    }
    tgc_shapes shapes;
    memset(&shapes, 0, sizeof(shapes));
    for (uint32_t v = 0; v < m->n; v++) {
        PyObject *d = tgc_shapes_own_dict(&shapes, m->items[v]);  /* borrowed */
        uint32_t j = d != NULL ? tgc_ptrmap_get(&m->map, d) : UINT32_MAX;
        if (j != UINT32_MAX && j != v && indeg[j] == 1 && owner[j] == TGC_NONE &&
            !m->is_target[j]) {
            owner[j] = v;
            any = 1;
        }
    }
    uint32_t k = 0;
    for (uint32_t e = 0; any && e < *nrefs; e++) {
        uint32_t s = src[e], d = dst[e];
        if (owner[d] != TGC_NONE) {
            continue;  /* its one in-edge: from its instance */
        }
        src[k] = owner[s] != TGC_NONE ? owner[s] : s;
        dst[k++] = d;
    }
    if (any) {
        *nrefs = k;
    }
    free(owner);
    free(indeg);
}

static int
build__graph(tgc_report_model *m)
{
    uint32_t *src, *dst, nrefs;
    if (tgc_edges(m->items, m->n, &m->map, &src, &dst, &nrefs) < 0) {
        return -1;
    }
    build__see_through_dicts(m, src, dst, &nrefs);
    int rc = -1;
    if (tgc_graph_build(&m->g, m->n, nrefs, src, dst) == 0 &&
        tgc_analyze(&m->g, m->is_target, &m->a) == 0) {
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
build__groups(tgc_report_model *m)
{
    uint32_t ng = m->a.ngroups;
    m->ngroups = ng;
    m->groups = calloc(ng ? ng : 1, sizeof(tgc_group));
    if (m->groups == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t k = 0; k < ng; k++) {
        m->groups[k].group = k;
    }
    for (uint32_t v = 0; v < m->n; v++) {
        uint32_t k = m->a.group[v];
        if (k == TGC_NONE) {
            continue;
        }
        tgc_group *gi = &m->groups[k];
        uint64_t h = (uint64_t)(uintptr_t)Py_TYPE(m->items[v]);
        if (m->ts[v].info != NULL && (m->a.role[v] & TGC_ROLE_TARGET)) {
            Py_hash_t sh = PyObject_Hash(m->ts[v].shape);
            h ^= build__mix1((uint64_t)sh) ^ (uint64_t)m->ts[v].nbytes;
            gi->targets++;
            gi->nbytes += m->ts[v].nbytes;
        }
        gi->nodes++;
        gi->h1 += build__mix1(h);
        gi->h2 += build__mix2(h);
        for (uint32_t e = m->g.out_off[v]; e < m->g.out_off[v + 1]; e++) {
            uint32_t w = m->g.out_dst[e];
            if (m->a.group[w] != k) {
                continue;
            }
            uint64_t he = build__mix2((uint64_t)(uintptr_t)Py_TYPE(m->items[v])) ^
                          (uint64_t)(uintptr_t)Py_TYPE(m->items[w]) ^ (v == w ? 0x5bd1e995 : 0);
            gi->edges++;
            gi->h1 += build__mix1(he + 1);
            gi->h2 += build__mix2(he + 2);
        }
    }
    PyErr_Clear();
    /* Sort by signature, fold runs into their first member, then order by bytes. */
    qsort(m->groups, ng, sizeof(tgc_group), build__cmp_sig);
    uint32_t out = 0;
    for (uint32_t i = 0; i < ng;) {
        uint32_t j = i;
        tgc_group rep = m->groups[i];
        rep.count = 0;
        rep.total_bytes = 0;
        rep.total_targets = 0;
        while (j < ng && m->groups[j].nodes == rep.nodes && m->groups[j].edges == rep.edges &&
               m->groups[j].targets == rep.targets && m->groups[j].h1 == rep.h1 &&
               m->groups[j].h2 == rep.h2) {
            rep.count++;
            rep.total_bytes += m->groups[j].nbytes;
            rep.total_targets += m->groups[j].targets;
            j++;
        }
        m->groups[out++] = rep;
        i = j;
    }
    m->ngroups = out;
    qsort(m->groups, out, sizeof(tgc_group), build__cmp_bytes);
    return 0;
}

/* Sets class internals aside (skip[v] = 1) so that a large leak of many classes (type() in a
 * loop, dataclass or namedtuple factories) draws its instances, not each class's __dict__,
 * __mro__ and descriptors: a type object, and whatever only such objects refer to, three levels
 * down. Targets are never set aside. Groups of TGC_DRAW_SMALL nodes or fewer undo it (they are
 * drawn whole). 0, or -1 with an exception. */
static int
build__set_aside(tgc_report_model *m)
{
    for (uint32_t v = 0; v < m->n; v++) {
        m->skip[v] = m->a.group[v] != TGC_NONE && PyType_Check(m->items[v]) && !m->is_target[v];
    }
    for (int level = 0; level < 3; level++) {
        for (uint32_t v = 0; v < m->n; v++) {
            if (m->skip[v] || m->a.group[v] == TGC_NONE || m->is_target[v] ||
                m->g.in_off[v] == m->g.in_off[v + 1]) {
                continue;
            }
            int only = 1;
            for (uint32_t e = m->g.in_off[v]; e < m->g.in_off[v + 1] && only; e++) {
                only = m->skip[m->g.in_src[e]] != 0;
            }
            m->skip[v] = (uint8_t)only;
        }
    }
    return 0;
}

/* Keeps the bridges of a group whose two ends are drawn (the DOT shows them as "... N more"
 * edges). 0, or -1 when out of memory. */
static int
build__keep_bridges(tgc_report_model *m, const tgc_bridge *br, size_t nbr)
{
    for (size_t i = 0; i < nbr; i++) {
        if (!m->draw[br[i].from] || !m->draw[br[i].to]) {
            continue;
        }
        tgc_bridge *p = realloc(m->bridges, (m->nbridges + 1) * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        m->bridges = p;
        m->bridges[m->nbridges++] = br[i];
    }
    return 0;
}

/* The "more" node's text of a group drawn in part: how many objects were left out, and the
 * counts of their first six types. NULL with an exception. */
static PyObject *
build__more(const tgc_report_model *m, const tgc_group *gi)
{
    PyObject *counts = PyDict_New(), *result = NULL;
    tgc_buf more = {0};
    if (counts == NULL) {
        return NULL;
    }
    for (uint32_t v = 0; v < m->n; v++) {
        if (m->a.group[v] != gi->group || m->draw[v] || m->skip[v] == 2) {
            continue;
        }
        PyObject *tn = tgc_type_name(m->items[v]);
        PyObject *c = tn ? PyDict_GetItemWithError(counts, tn) : NULL;  /* borrowed */
        PyObject *c1 = tn && !PyErr_Occurred() ? PyLong_FromLong(c ? PyLong_AsLong(c) + 1 : 1)
                                               : NULL;
        int rc = c1 != NULL ? PyDict_SetItem(counts, tn, c1) : -1;
        Py_XDECREF(tn);
        Py_XDECREF(c1);
        if (rc < 0) {
            goto error;
        }
    }
    tgc_buf_puts(&more, "\xe2\x80\xa6 ");
    tgc_buf_count(&more, gi->elided);
    tgc_buf_puts(&more, " more objects in this leak\n");
    Py_ssize_t pos = 0;
    PyObject *key, *val;  /* borrowed */
    for (int shown = 0; shown < 6 && PyDict_Next(counts, &pos, &key, &val); shown++) {
        if (tgc_buf_pystr(&more, key, 0) < 0) {
            goto error;
        }
        tgc_buf_puts(&more, " \xc3\x97");
        tgc_buf_count(&more, (uint64_t)PyLong_AsLong(val));
        tgc_buf_puts(&more, "\n");
    }
    result = tgc_report_str(&more);
error:
    Py_DECREF(counts);
    tgc_buf_free(&more);
    return result;
}

/* What the writers show of the drawn objects, made here so that they only read: each drawn
 * node's type name, each drawn object's description (tgc_describe may run a user __repr__),
 * the line of each drawn tensor and of each group's largest. 0, or -1 with an exception. */
static int
build__shown(tgc_report_model *m)
{
    for (uint32_t v = 0; v < m->n; v++) {
        if (!m->draw[v]) {
            continue;
        }
        if ((m->tname[v] = tgc_type_name(m->items[v])) == NULL) {
            return -1;
        }
        if (m->ts[v].info != NULL) {
            tgc_report_tensor_line(&m->ts[v]);
            m->ts[v].type = (PyTypeObject *)Py_NewRef(Py_TYPE(m->items[v]));
        }
        if (m->owner[v] != TGC_NONE) {
            continue;  /* drawn as part of its owner */
        }
        m->ndrawn++;
        if (m->ts[v].info == NULL && (m->desc[v] = tgc_describe(m->items[v])) == NULL) {
            PyErr_Clear();
        }
    }
    /* Each group's largest tensor of interest, the one its line in the text names. */
    uint32_t *best_of = malloc((m->a.ngroups ? m->a.ngroups : 1) * sizeof(uint32_t));
    if (best_of == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t g = 0; g < m->a.ngroups; g++) {
        best_of[g] = TGC_NONE;
    }
    for (uint32_t v = 0; v < m->n; v++) {
        uint32_t g = m->a.group[v];
        if (g != TGC_NONE && m->ts[v].info && (m->a.role[v] & TGC_ROLE_TARGET) &&
            (best_of[g] == TGC_NONE || m->ts[v].nbytes > m->ts[best_of[g]].nbytes)) {
            best_of[g] = v;
        }
    }
    for (uint32_t k = 0; k < m->ngroups; k++) {
        if (m->groups[k].drawn && m->groups[k].elided > 0 &&
            (m->groups[k].more = build__more(m, &m->groups[k])) == NULL) {
            free(best_of);
            return -1;
        }
        uint32_t best = best_of[m->groups[k].group];
        m->groups[k].best = best;
        if (best != TGC_NONE) {
            tgc_report_tensor_line(&m->ts[best]);
        }
    }
    free(best_of);
    return 0;
}

/* Whether a storage's key was seen before, remembering it. The first key is held aside
 * (borrowed: the model owns it) and the set made only for a second: most reports hold one
 * tensor. 1, 0, or -1 with an exception. */
static int
build__seen(PyObject **seen, PyObject **first, PyObject *key)
{
    if (*first == NULL) {
        *first = key;
        return 0;
    }
    if (*seen == NULL && ((*seen = PySet_New(NULL)) == NULL || PySet_Add(*seen, *first) < 0)) {
        return -1;
    }
    int known = PySet_Contains(*seen, key);
    return known == 0 && PySet_Add(*seen, key) < 0 ? -1 : known;
}

/* The tensors of interest held by cycles, and their bytes counted once per storage. 0, or -1
 * with an exception. */
static int
build__totals(tgc_report_model *m)
{
    PyObject *seen = NULL, *first = NULL;
    for (uint32_t v = 0; v < m->n; v++) {
        if (m->ts[v].info == NULL || !(m->a.role[v] & TGC_ROLE_TARGET)) {
            continue;
        }
        m->ntensors++;
        if (m->ts[v].multi) {
            /* the parts of a sparse tensor or a wrapper: each storage once, here and across */
            PyObject *parts = m->ts[v].storage_key;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts); i++) {
                PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(parts, i), 0);
                PyObject *nb = PyTuple_GET_ITEM(PyTuple_GET_ITEM(parts, i), 1);
                int known = key == Py_None ? 0 : build__seen(&seen, &first, key);
                if (known < 0) {
                    goto error;
                }
                if (!known) {
                    m->total += PyLong_AsUnsignedLongLong(nb);  /* made from one: cannot fail */
                }
            }
            continue;
        }
        int known = build__seen(&seen, &first, m->ts[v].storage_key);
        if (known < 0) {
            goto error;
        }
        if (!known) {
            m->total += m->ts[v].nbytes;
        }
    }
    Py_XDECREF(seen);
    return 0;
error:
    Py_XDECREF(seen);
    return -1;
}

int
tgc_report_model_build(tgc_cycles *c, PyObject *objs, const tgc_filter *f, tgc_report_model *m)
{
    if (tgc_tensor_resolve(c->tensor) <= 0) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t n0 = PyList_GET_SIZE(objs);
    if (n0 <= 0 || n0 >= (Py_ssize_t)UINT32_MAX) {
        return 0;
    }
    m->c = c;
    m->objs = objs;
    m->n = (uint32_t)n0;
    /* The list may grow while we name objects (materialised dicts): snapshot the pointers. */
    m->items = PyMem_Malloc(m->n * sizeof(PyObject *));
    m->is_target = calloc(m->n, 1);
    m->ts = PyMem_Calloc(m->n, sizeof(tgc_rtensor));
    m->draw = calloc(m->n, 1);
    m->skip = calloc(m->n, 1);
    m->owner = malloc(m->n * sizeof(uint32_t));
    m->names = PyMem_Calloc(m->n, sizeof(tgc_names));
    m->tname = PyMem_Calloc(m->n, sizeof(PyObject *));
    m->desc = PyMem_Calloc(m->n, sizeof(PyObject *));
    m->unknown = PyUnicode_FromString("?");
    if (!m->items || !m->is_target || !m->ts || !m->draw || !m->skip || !m->owner || !m->names ||
        !m->tname || !m->desc || !m->unknown) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(m->items, PySequence_Fast_ITEMS(objs), m->n * sizeof(PyObject *));
    for (uint32_t v = 0; v < m->n; v++) {
        m->owner[v] = TGC_NONE;
    }

    if (!tgc_report_tensors(m, f)) {
        return 0;
    }
    if (build__graph(m) < 0) {
        return -1;
    }
    if (m->a.kept == 0) {
        return 0;
    }
    tgc_report_stacks(m->ts, m->n);
    if (build__groups(m) < 0) {
        return -1;
    }

    /* What to draw: the largest groups first, within the node budget. */
    uint32_t budget = TGC_DRAW_BUDGET;
    if (build__set_aside(m) < 0) {
        return -1;
    }
    for (uint32_t k = 0; k < m->ngroups && k < TGC_DRAW_GROUPS && budget > 0; k++) {
        tgc_group *gi = &m->groups[k];
        long picked, aside = 0, chained = 0;
        tgc_bridge *br = NULL;
        size_t nbr = 0;
        if (gi->nodes > TGC_DRAW_SMALL) {
            for (uint32_t v = 0; v < m->n; v++) {
                aside += m->a.group[v] == gi->group && m->skip[v];
            }
            chained = tgc_chains(&m->g, &m->a, gi->group, TGC_CHAIN_KEEP, m->skip, &br, &nbr);
            if (chained < 0) {
                PyErr_NoMemory();
                return -1;
            }
            aside += chained;
        }
        else {
            for (uint32_t v = 0; v < m->n; v++) {
                if (m->a.group[v] == gi->group) {
                    m->skip[v] = 0;  /* small: drawn whole */
                }
            }
        }
        if (gi->nodes - (uint32_t)aside <= budget) {
            for (uint32_t v = 0; v < m->n; v++) {
                if (m->a.group[v] == gi->group && !m->skip[v]) {
                    m->draw[v] = 1;
                }
            }
            picked = gi->nodes - (uint32_t)aside;
        }
        else {
            picked = tgc_pick(&m->g, &m->a, gi->group, budget, m->skip, br, nbr, m->draw);
        }
        if (picked < 0 || build__keep_bridges(m, br, nbr) < 0) {
            free(br);
            PyErr_NoMemory();
            return -1;
        }
        free(br);
        /* The "more" node counts what is left out, less the shortened chains (their edges say). */
        gi->elided = gi->nodes - (uint32_t)picked - (uint32_t)chained;
        budget -= (uint32_t)picked;
        gi->drawn = 1;
    }
    /* Names of drawn objects, then folding and the drawn edges. */
    for (uint32_t v = 0; v < m->n; v++) {
        m->names[v].labels = &c->labels;
        if (m->draw[v] && tgc_names_collect(m->items[v], &m->names[v], objs) < 0) {
            tgc_cycles_log(c, "naming references");
        }
    }
    build__fold(m);
    if (build__emit_all(m) < 0 || build__shown(m) < 0 || build__totals(m) < 0 ||
        tgc_report_hints(m) < 0) {
        return -1;
    }
    return 1;
}
