/* report_objects.c: the graph of any list of objects (contract in report.h): torch's
 * create_graph (tensorgc/cycles/object_graph.py), built of a report's parts into a model of its own
 * (report_model.h). The tensors are read by report_tensors.c, the references found by edges.c
 * (tp_traverse), what reaches a root decided by the graph engine (graph.c), references named and
 * objects described by names.c. Its drawing and page are report_objects_dot.c's. */
#include "cycles.h"
#include "shapes.h"
#include "report_build.h"

/* A node's label: a tensor's line ("Tensor float32[4] on cpu (16 B)"), else its type's name and
 * its one-line description. New reference. */
static PyObject *
objects__label(tgc_report_model *m, uint32_t v)
{
    if (m->ts[v].info != NULL) {
        tgc_report_tensor_line(&m->ts[v]);
        return tgc_report_str(&m->ts[v].line);
    }
    PyObject *tn = tgc_type_name(m->items[v]);  /* new reference */
    if (tn == NULL) {
        return NULL;
    }
    PyObject *desc = tgc_describe(m->items[v]);
    if (desc == NULL) {
        PyErr_Clear();  /* a description is a bonus */
        return tn;
    }
    PyObject *label = PyUnicode_GET_LENGTH(desc) > 0 ? PyUnicode_FromFormat("%U\n%U", tn, desc)
                                                    : Py_NewRef(tn);
    Py_DECREF(desc);
    Py_DECREF(tn);
    return label;
}

/* The references among items[0:n], with an item's own __dict__ seen through where it is an
 * object of its own that the list leaves out (every instance's on 3.10: a caller lists the
 * instances, not their dicts): item -> dict -> x reads item -> x. dicts[v] is the dict seen
 * through for item v, or NULL. Fills m->map (over the items and those dicts) and malloc'd edge
 * arrays, as tgc_edges does. 0, or -1 with an exception. */
static int
objects__edges(tgc_report_model *b, PyObject **dicts, uint32_t **src, uint32_t **dst,
               uint32_t *nedges)
{
    uint32_t n = b->n, k = 0, m0 = 0;
    uint32_t *s0 = NULL, *d0 = NULL, *owner = NULL, *off = NULL, *fill = NULL, *out = NULL;
    PyObject **all = PyMem_Malloc((2 * (size_t)n + 1) * sizeof(PyObject *));  /* borrowed items */
    tgc_ptrmap listed;
    int rc = -1;
    *src = *dst = NULL;
    *nedges = 0;
    owner = malloc(((size_t)n + 1) * sizeof(uint32_t));
    if (all == NULL || owner == NULL || tgc_ptrmap_init(&listed, 2 * (size_t)n + 1) < 0) {
        PyMem_Free(all);
        free(owner);
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t v = 0; v < n; v++) {
        all[v] = b->items[v];
        tgc_ptrmap_put(&listed, b->items[v], v);
    }
    tgc_shapes shapes;
    memset(&shapes, 0, sizeof(shapes));
    for (uint32_t v = 0; v < n; v++) {
        PyObject *d = tgc_shapes_own_dict(&shapes, b->items[v]);  /* borrowed */
        dicts[v] = NULL;
        if (d != NULL && tgc_ptrmap_get(&listed, d) == UINT32_MAX) {
            tgc_ptrmap_put(&listed, d, n + k);  /* an item listed twice sees it through once */
            dicts[v] = d;
            owner[k] = v;
            all[n + k++] = d;
        }
    }
    tgc_ptrmap_free(&listed);
    if (tgc_edges(all, n + k, &b->map, &s0, &d0, &m0) < 0) {
        goto done;
    }
    /* The dicts' references to items, grouped by dict (off: counts, then starts). */
    off = calloc((size_t)k + 2, sizeof(uint32_t));
    if (off == NULL) {
        goto nomem;
    }
    size_t total = 0;
    for (uint32_t e = 0; e < m0; e++) {
        if (s0[e] >= n && d0[e] < n) {
            off[s0[e] - n + 2]++;
        }
    }
    for (uint32_t j = 0; j < k; j++) {
        off[j + 2] += off[j + 1];
    }
    fill = malloc(((size_t)k + 1) * sizeof(uint32_t));
    out = malloc(((size_t)off[k + 1] + 1) * sizeof(uint32_t));
    if (fill == NULL || out == NULL) {
        goto nomem;
    }
    memcpy(fill, off + 1, (size_t)k * sizeof(uint32_t));
    for (uint32_t e = 0; e < m0; e++) {
        if (s0[e] >= n && d0[e] < n) {
            out[fill[s0[e] - n]++] = d0[e];
        }
    }
    for (uint32_t e = 0; e < m0; e++) {
        uint32_t s = s0[e], d = d0[e];
        if (s < n && d < n) {
            total++;
        }
        else if (s < n && d >= n && owner[d - n] == s) {
            total += off[d - n + 2] - off[d - n + 1];
        }
    }
    if (total >= UINT32_MAX) {
        goto nomem;
    }
    *src = malloc((total + 1) * sizeof(uint32_t));
    *dst = malloc((total + 1) * sizeof(uint32_t));
    if (*src == NULL || *dst == NULL) {
        goto nomem;
    }
    for (uint32_t e = 0; e < m0; e++) {
        uint32_t s = s0[e], d = d0[e];
        if (s < n && d < n) {
            (*src)[*nedges] = s;
            (*dst)[(*nedges)++] = d;
        }
        else if (s < n && d >= n && owner[d - n] == s) {
            for (uint32_t i = off[d - n + 1]; i < off[d - n + 2]; i++) {
                (*src)[*nedges] = s;
                (*dst)[(*nedges)++] = out[i];
            }
        }
    }
    rc = 0;
    goto done;
nomem:
    PyErr_NoMemory();
    free(*src);
    free(*dst);
    *src = *dst = NULL;
    *nedges = 0;
done:
    free(s0);
    free(d0);
    free(off);
    free(fill);
    free(out);
    free(owner);
    PyMem_Free(all);
    return rc;
}

PyObject *
tgc_objects_graph(tgc_cycles *c, PyObject *objs, PyObject *roots)
{
    tgc_report_model b;  /* the graph's model, freed below */
    memset(&b, 0, sizeof(b));
    PyObject *owned = NULL, *labels = NULL, *refs = NULL, *kept = NULL, *result = NULL;
    uint32_t *src = NULL, *dst = NULL, *newidx = NULL, m = 0;
    uint8_t *anc = NULL;
    PyObject **dicts = NULL;  /* borrowed: each item's dict seen through, or NULL */
    Py_ssize_t n0 = PyList_GET_SIZE(objs);
    if (n0 >= (Py_ssize_t)UINT32_MAX || PyList_GET_SIZE(roots) != n0) {
        PyErr_SetString(PyExc_ValueError, "objects and roots differ in length");
        return NULL;
    }
    /* Our own list: what reading and naming materialise joins it, never the caller's. */
    owned = PyList_GetSlice(objs, 0, n0);
    if (owned == NULL) {
        return NULL;
    }
    b.c = c;
    b.objs = owned;
    b.n = (uint32_t)n0;
    b.items = PyMem_Malloc((b.n ? b.n : 1) * sizeof(PyObject *));
    b.is_target = calloc(b.n ? b.n : 1, 1);
    b.ts = PyMem_Calloc(b.n ? b.n : 1, sizeof(tgc_rtensor));
    b.names = PyMem_Calloc(b.n ? b.n : 1, sizeof(tgc_names));
    anc = calloc(b.n ? b.n : 1, 1);
    newidx = malloc((b.n ? b.n : 1) * sizeof(uint32_t));
    dicts = PyMem_Malloc((b.n ? b.n : 1) * sizeof(PyObject *));
    b.unknown = PyUnicode_FromString("?");
    if (!b.items || !b.is_target || !b.ts || !b.names || !anc || !newidx || !dicts ||
        !b.unknown) {
        PyErr_NoMemory();
        goto done;
    }
    if (b.n > 0) {  /* an empty list has no item array */
        memcpy(b.items, PySequence_Fast_ITEMS(owned), b.n * sizeof(PyObject *));
    }
    /* The tensors' metadata, for their labels (every tensor; it marks them all as targets,
     * which the caller's roots then replace). */
    tgc_filter any;
    memset(&any, 0, sizeof(any));
    any.kind = TGC_DEV_ANY;
    if (tgc_tensor_resolve(c->tensor) > 0) {
        tgc_report_tensors(&b, &any);
    }
    PyErr_Clear();
    for (uint32_t v = 0; v < b.n; v++) {
        int r = PyObject_IsTrue(PyList_GET_ITEM(roots, v));
        if (r < 0) {
            goto done;
        }
        b.is_target[v] = (uint8_t)r;
    }
    if (objects__edges(&b, dicts, &src, &dst, &m) < 0) {
        goto done;
    }
    if (tgc_graph_build(&b.g, b.n, m, src, dst) < 0 || tgc_ancestors(&b.g, b.is_target, anc) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t nkept = 0;
    for (uint32_t v = 0; v < b.n; v++) {
        newidx[v] = anc[v] ? nkept++ : TGC_NONE;
    }
    labels = PyList_New(nkept);
    refs = PyList_New(nkept);
    kept = PyList_New(nkept);
    if (labels == NULL || refs == NULL || kept == NULL) {
        goto done;
    }
    for (uint32_t v = 0; v < b.n; v++) {
        if (!anc[v]) {
            continue;
        }
        uint32_t i = newidx[v];
        PyObject *label = objects__label(&b, v);
        PyObject *index = PyLong_FromUnsignedLong(v);
        PyObject *out = PyList_New(0);
        if (label == NULL || index == NULL || out == NULL) {
            Py_XDECREF(label);
            Py_XDECREF(index);
            Py_XDECREF(out);
            goto done;
        }
        PyList_SET_ITEM(labels, i, label);  /* steals */
        PyList_SET_ITEM(kept, i, index);
        PyList_SET_ITEM(refs, i, out);
        b.names[v].labels = &c->labels;
        if (tgc_names_collect(b.items[v], &b.names[v], owned) < 0) {
            tgc_cycles_log(c, "naming references");
        }
        /* One entry per reference, named by the referrer; "?" where it cannot say. */
        for (uint32_t e = b.g.out_off[v]; e < b.g.out_off[v + 1]; e++) {
            uint32_t w = b.g.out_dst[e];
            if (!anc[w]) {
                continue;
            }
            PyObject *name = tgc_names_take(&b.names[v], b.items[w], NULL);
            if (name == NULL && dicts[v] != NULL) {
                name = tgc_names_take(&b.names[v], b.items[w], dicts[v]);
            }
            PyObject *pair = Py_BuildValue("(OI)", name ? name : b.unknown, newidx[w]);
            if (pair == NULL || PyList_Append(out, pair) < 0) {
                Py_XDECREF(pair);
                goto done;
            }
            Py_DECREF(pair);
        }
    }
    result = PyTuple_Pack(3, labels, refs, kept);
done:
    Py_XDECREF(labels);
    Py_XDECREF(refs);
    Py_XDECREF(kept);
    free(src);
    free(dst);
    free(anc);
    free(newidx);
    PyMem_Free(dicts);
    tgc_report_model_free(&b);
    Py_DECREF(owned);
    return result;
}
