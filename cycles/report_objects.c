/* report_objects.c: the graph of any list of objects, and its drawing (contract in report.h):
 * torch's create_graph, to_dot and to_html (tensorgc/object_graph.py), made of a report's parts.
 * The tensors are read by report_tensors.c, the references found by edges.c (tp_traverse), what
 * reaches a root and what to draw decided by the graph engine (graph.c), references named and
 * objects described by names.c; the drawing keeps a report's bounds (report_int.h) and
 * escapers, and its page is page.c's, laid out by the render worker. */
#include "cycles.h"
#include "page.h"
#include "render_py.h"
#include "report_int.h"

/* A node's label: a tensor's line ("Tensor float32[4] on cpu (16 B)"), else its type's name and
 * its one-line description. New reference. */
static PyObject *
objects__label(tgc_builder *b, uint32_t v)
{
    if (b->ts[v].info != NULL) {
        const tgc_buf *line = tgc_report_line(&b->ts[v]);
        if (line->oom) {
            return PyErr_NoMemory();
        }
        return PyUnicode_DecodeUTF8(line->data ? line->data : "", (Py_ssize_t)line->len,
                                    "replace");
    }
    PyObject *tn = tgc_report_tname(b, v);  /* borrowed */
    PyObject *desc = tn ? tgc_describe(b->items[v]) : NULL;
    if (desc == NULL) {
        PyErr_Clear();  /* a description is a bonus */
        return tn ? Py_NewRef(tn) : NULL;
    }
    PyObject *label = PyUnicode_GET_LENGTH(desc) > 0 ? PyUnicode_FromFormat("%U\n%U", tn, desc)
                                                    : Py_NewRef(tn);
    Py_DECREF(desc);
    return label;
}

PyObject *
tgc_objects_graph(tgc_cycles *c, PyObject *objs, PyObject *roots)
{
    tgc_builder b;
    memset(&b, 0, sizeof(b));
    PyObject *owned = NULL, *labels = NULL, *refs = NULL, *kept = NULL, *result = NULL;
    uint32_t *src = NULL, *dst = NULL, *newidx = NULL, m = 0;
    uint8_t *anc = NULL;
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
    b.tname = PyMem_Calloc(b.n ? b.n : 1, sizeof(PyObject *));
    anc = calloc(b.n ? b.n : 1, 1);
    newidx = malloc((b.n ? b.n : 1) * sizeof(uint32_t));
    b.unknown = PyUnicode_FromString("?");
    if (!b.items || !b.is_target || !b.ts || !b.names || !b.tname || !anc || !newidx ||
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
    if (tgc_edges(b.items, b.n, &b.map, &src, &dst, &m) < 0) {
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
    tgc_report_builder_free(&b);
    PyMem_Free(b.items);
    Py_DECREF(owned);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* The drawing of a graph of nodes: bounded as a report's                                     */

typedef struct {
    uint32_t src, dst;
    PyObject *label;  /* borrowed from the caller's edges */
} objects__edge;

/* s cut to limit characters (a node's label, an edge's), escaped for DOT. */
static void
objects__dot_cut(tgc_buf *o, PyObject *s, Py_ssize_t limit)
{
    PyObject *cut = tgc_cut(Py_NewRef(s), limit);  /* new reference */
    if (cut == NULL || tgc_buf_pystr(o, cut, 'd') < 0) {
        PyErr_Clear();  /* left out; no memory shows in o->oom */
    }
    Py_XDECREF(cut);
}

/* The first `lines` lines of s, each cut, escaped for DOT. */
static void
objects__dot_lines(tgc_buf *o, PyObject *s, int lines)
{
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL) {
        PyErr_Clear();
        return;
    }
    tgc_buf cut = {0};
    for (Py_ssize_t i = 0; i < n && lines > 0; lines--) {
        const char *nl = memchr(u + i, '\n', (size_t)(n - i));
        Py_ssize_t end = nl ? nl - u : n;
        tgc_buf_reset(&cut);
        tgc_report_add_cut(&cut, u + i, (size_t)(end - i), TGC_TEXT_PART);
        tgc_buf_dot(o, cut.data ? cut.data : "", cut.len);
        tgc_buf_dot(o, "\n", 1);
        i = end + 1;
    }
    tgc_buf_free(&cut);
}

int
tgc_objects_dot(PyObject *labels, PyObject *contexts, PyObject *roots, PyObject *edges,
                tgc_buf *dot, tgc_buf *text)
{
    Py_ssize_t nn = PyList_GET_SIZE(labels), ne = PyList_GET_SIZE(edges);
    if (nn >= (Py_ssize_t)UINT32_MAX || ne >= (Py_ssize_t)UINT32_MAX ||
        PyList_GET_SIZE(contexts) != nn || PyList_GET_SIZE(roots) != nn) {
        PyErr_SetString(PyExc_ValueError, "labels, contexts and roots differ in length");
        return -1;
    }
    uint32_t n = (uint32_t)nn, m = (uint32_t)ne;
    int rc = -1;
    tgc_graph g = {0};
    tgc_analysis a;
    memset(&a, 0, sizeof(a));
    objects__edge *es = PyMem_Malloc((m ? m : 1) * sizeof(objects__edge));
    uint32_t *src = malloc((m ? m : 1) * sizeof(uint32_t));
    uint32_t *dst = malloc((m ? m : 1) * sizeof(uint32_t));
    uint8_t *draw = calloc(n ? n : 1, 1), *is_root = calloc(n ? n : 1, 1);
    uint8_t *chosen = calloc(m ? m : 1, 1), *has_in = calloc(n ? n : 1, 1);
    a.group = calloc(n ? n : 1, sizeof(uint32_t));  /* one group: every node */
    a.role = calloc(n ? n : 1, 1);
    if (!es || !src || !dst || !draw || !is_root || !chosen || !has_in || !a.group || !a.role) {
        PyErr_NoMemory();
        goto done;
    }
    for (uint32_t e = 0; e < m; e++) {
        PyObject *t = PyList_GET_ITEM(edges, e);  /* (src, dst, label), checked by the binding */
        es[e].src = src[e] = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(t, 0));
        es[e].dst = dst[e] = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(t, 1));
        es[e].label = PyTuple_GET_ITEM(t, 2);
    }
    uint32_t nroots = 0;
    for (uint32_t v = 0; v < n; v++) {
        is_root[v] = PyList_GET_ITEM(roots, v) == Py_True;
        a.role[v] = is_root[v] ? TGC_ROLE_TARGET : 0;
        nroots += is_root[v];
    }
    if (tgc_graph_build(&g, n, m, src, dst) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    /* What to draw: as a report's largest leak, its roots first, then breadth first from them;
     * room left goes to the rest in order (nodes that reach no root, in a graph made by hand). */
    long picked = tgc_pick(&g, &a, 0, TGC_DRAW_BUDGET, NULL, NULL, 0, draw);
    if (picked < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (uint32_t v = 0; v < n && picked < TGC_DRAW_BUDGET; v++) {
        if (!draw[v]) {
            draw[v] = 1;
            picked++;
        }
    }
    /* The references drawn, as a report's (build__emit_all): 2.5 per drawn node, between 60 and
     * TGC_DRAW_EDGES; those into roots first, then one into each drawn node, then the rest. */
    size_t cap = (size_t)picked * 5 / 2, total = 0, k = 0;
    cap = cap < 60 ? 60 : cap > TGC_DRAW_EDGES ? TGC_DRAW_EDGES : cap;
    for (uint32_t e = 0; e < m; e++) {
        total += draw[es[e].src] && draw[es[e].dst];
    }
    for (int pass = 0; pass < 3 && k < cap; pass++) {
        for (uint32_t e = 0; e < m && k < cap; e++) {
            uint32_t s = es[e].src, d = es[e].dst;
            if (chosen[e] || !draw[s] || !draw[d] || (pass == 0 && !is_root[d]) ||
                (pass == 1 && has_in[d])) {
                continue;
            }
            chosen[e] = 1;
            has_in[d] = 1;
            k++;
        }
    }

    tgc_buf_reserve(dot, 2000);
    tgc_buf_puts(dot, "digraph tensorgc {\n"
                      "  graph [rankdir=LR, fontname=\"Helvetica\", fontsize=11, nodesep=0.25, "
                      "ranksep=0.45, bgcolor=\"white\"];\n"
                      "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#f7f7f7\", "
                      "color=\"#607d8b\", fontname=\"Helvetica\", fontsize=10];\n"
                      "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#455a64\"];\n");
    for (uint32_t v = 0; v < n; v++) {
        if (!draw[v]) {
            continue;
        }
        PyObject *label = PyList_GET_ITEM(labels, v), *ctx = PyList_GET_ITEM(contexts, v);
        tgc_buf_puts(dot, "  n");
        tgc_buf_uint(dot, v);
        tgc_buf_puts(dot, " [label=\"");
        objects__dot_cut(dot, label, 2 * TGC_NAME_MAX);
        tgc_buf_dot(dot, "\n", 1);
        if (ctx != Py_None) {
            objects__dot_lines(dot, ctx, TGC_STACK_LINES);  /* the first lines on the node */
        }
        tgc_buf_puts(dot, "\", tooltip=\"");
        objects__dot_cut(dot, label, 2 * TGC_NAME_MAX);
        if (ctx != Py_None) {
            tgc_buf_dot(dot, "\n", 1);
            if (tgc_buf_pystr(dot, ctx, 'd') < 0) {  /* all of it, cut at TGC_PYSTR_MAX */
                PyErr_Clear();
            }
        }
        tgc_buf_puts(dot, is_root[v] ? "\", color=\"#c62828\", fillcolor=\"#ffcdd2\", "
                                       "fontcolor=\"#7f0000\", penwidth=2];\n"
                                     : "\"];\n");
    }
    if ((uint32_t)picked < n || k < total) {
        tgc_buf_puts(dot, "  graph [labelloc=b, label=\"");
        tgc_buf_count(dot, n - (uint32_t)picked);
        tgc_buf_puts(dot, " more objects and ");
        tgc_buf_count(dot, m - k);
        tgc_buf_puts(dot, " more references are not drawn (at most ");
        tgc_buf_count(dot, TGC_DRAW_BUDGET);
        tgc_buf_puts(dot, " objects and ");
        tgc_buf_count(dot, TGC_DRAW_EDGES);
        tgc_buf_puts(dot, " references)\"];\n");
    }
    if (k > TGC_DRAW_BIG || (uint32_t)picked > TGC_DRAW_BIG) {
        tgc_buf_puts(dot, "  graph [mclimit=0.2, nslimit=2, nslimit1=2];\n");
    }
    for (uint32_t e = 0; e < m; e++) {
        if (!chosen[e]) {
            continue;
        }
        tgc_buf_puts(dot, "  n");
        tgc_buf_uint(dot, es[e].src);
        tgc_buf_puts(dot, " -> n");
        tgc_buf_uint(dot, es[e].dst);
        tgc_buf_puts(dot, " [label=\"");
        objects__dot_cut(dot, es[e].label, TGC_NAME_MAX);
        tgc_buf_puts(dot, is_root[es[e].dst] ? "\", color=\"#c62828\", fontcolor=\"#c62828\"];\n"
                                             : "\"];\n");
    }
    tgc_buf_puts(dot, "}\n");

    /* The text: what the graph holds, then its roots (at most TGC_TEXT_GROUPS) with the first
     * line of their context, within TGC_TEXT_MAX bytes. */
    tgc_buf_puts(text, "tensorgc: ");
    tgc_buf_count(text, n);
    tgc_buf_puts(text, n == 1 ? " object, " : " objects, ");
    tgc_buf_count(text, nroots);
    tgc_buf_puts(text, nroots == 1 ? " root (red), " : " roots (red), ");
    tgc_buf_count(text, m);
    tgc_buf_puts(text, m == 1 ? " reference" : " references");
    if ((uint32_t)picked < n || k < m) {
        tgc_buf_puts(text, "; drawn: ");
        tgc_buf_count(text, (uint64_t)picked);
        tgc_buf_puts(text, " objects, ");
        tgc_buf_count(text, k);
        tgc_buf_puts(text, " references");
    }
    tgc_buf_puts(text, ".\n");
    uint32_t told = 0;
    for (uint32_t v = 0; v < n && told < TGC_TEXT_GROUPS && text->len < TGC_TEXT_MAX / 2; v++) {
        if (!is_root[v]) {
            continue;
        }
        told++;
        PyObject *label = PyList_GET_ITEM(labels, v), *ctx = PyList_GET_ITEM(contexts, v);
        Py_ssize_t ln, cn = 0;
        const char *l = PyUnicode_AsUTF8AndSize(label, &ln);
        const char *cx = ctx != Py_None ? PyUnicode_AsUTF8AndSize(ctx, &cn) : NULL;
        if (l == NULL || (ctx != Py_None && cx == NULL)) {
            PyErr_Clear();
            continue;
        }
        const char *nl = memchr(l, '\n', (size_t)ln);
        tgc_buf_puts(text, "  ");
        tgc_report_add_cut(text, l, nl ? (size_t)(nl - l) : (size_t)ln, TGC_TEXT_PART);
        if (nl != NULL) {
            tgc_buf_puts(text, " ");
            tgc_report_add_cut(text, nl + 1, (size_t)(l + ln - nl - 1), TGC_TEXT_PART);
        }
        if (cx != NULL && cn > 0) {
            const char *cnl = memchr(cx, '\n', (size_t)cn);
            tgc_buf_puts(text, "\n      ");
            tgc_report_add_cut(text, cx, cnl ? (size_t)(cnl - cx) : (size_t)cn, TGC_TEXT_PART);
        }
        tgc_buf_puts(text, "\n");
    }
    if (told < nroots) {
        tgc_buf_puts(text, "  \xe2\x80\xa6 ");
        tgc_buf_count(text, nroots - told);
        tgc_buf_puts(text, " more roots\n");
    }
    if (dot->oom || text->oom) {
        PyErr_NoMemory();
        goto done;
    }
    rc = 0;
done:
    PyMem_Free(es);
    free(src);
    free(dst);
    free(draw);
    free(is_root);
    free(chosen);
    free(has_in);
    free(a.group);
    free(a.role);
    tgc_graph_free(&g);
    return rc;
}

PyObject *
tgc_objects_page(tgc_cycles *c, PyObject *title, PyObject *text, PyObject *dot)
{
    Py_ssize_t n;
    const char *dot_s = PyUnicode_AsUTF8AndSize(dot, &n);
    const char *title_s = dot_s ? PyUnicode_AsUTF8(title) : NULL;
    const char *text_s = title_s ? PyUnicode_AsUTF8(text) : NULL;
    if (text_s == NULL) {
        return NULL;
    }
    if ((Py_ssize_t)strlen(dot_s) != n) {
        PyErr_SetString(PyExc_ValueError, "dot contains a NUL character");
        return NULL;
    }
    char *svg = NULL, err[640] = "";
    size_t len = 0;
    int rc = tgc_render_py(dot_s, (size_t)n, &svg, &len, err, sizeof(err), c->busy);
    if (rc == TGC_RENDER_INTERRUPTED && PyErr_Occurred()) {
        return NULL;  /* the program's SIGINT handler raised (KeyboardInterrupt) */
    }
    if (rc == TGC_RENDER_INTERRUPTED && c->busy) {
        c->interrupted = 1;  /* inside our gc callback: given back when it ends */
    }
    char too_big[200];
    const char *why = rc < 0 ? err : NULL;
    if (svg != NULL && len + strlen(text_s) * 6 + 16384 > TGC_PAGE_MAX) {
        snprintf(too_big, sizeof(too_big), "the drawing (%zu bytes) would make the page larger "
                 "than its %u MiB bound, so it is left out", len, TGC_PAGE_MAX >> 20);
        why = too_big;
        free(svg);
        svg = NULL;
    }
    tgc_buf page = {0};
    tgc_page p = {title_s, text_s, NULL, svg, why};
    tgc_html_page(&page, &p);
    free(svg);
    PyObject *r = tgc_report_str(&page);
    tgc_buf_free(&page);
    return r;
}
