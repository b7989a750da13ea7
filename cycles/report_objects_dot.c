/* report_objects_dot.c: the drawing of a graph of nodes and its page (contract in report.h):
 * torch's to_dot and to_html (tensorgc/cycles/object_graph.py) over create_graph's nodes, bounded
 * as a report's drawing (report_model.h), with its opening and escapers; the page is page.c's, laid
 * out by the render worker. Reads the caller's lists only. */
#include "cycles.h"
#include "page.h"
#include "render_py.h"
#include "report_write.h"

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

    tgc_dot_open(dot);
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
