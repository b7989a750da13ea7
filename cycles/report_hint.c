/* report_hint.c: the part of the build that puts each group of leaks into words (contract in
 * report_build.h): the shortest drawn cycle of the group, and the fix hint that names the
 * reference most likely meant to be weak. The text, the table and .groups show them. */
#include "cycles.h"
#include "report_build.h"

/* "Node.other" or "<lambda> closure self": how an edge reads in prose. */
static void
hint__edge_name(tgc_buf *o, const tgc_report_model *m, const tgc_drawn_edge *e)
{
    PyObject *tn = m->tname[e->src];  /* borrowed */
    if (tn != NULL) {
        tgc_buf_pystr(o, tn, 0);
    }
    PyErr_Clear();
    Py_ssize_t n;
    const char *l = PyUnicode_AsUTF8AndSize(e->label, &n);
    if (l == NULL) {
        PyErr_Clear();
        return;
    }
    if (l[0] != '.' && l[0] != '[') {
        tgc_buf_puts(o, " ");
    }
    tgc_buf_add(o, l, (size_t)n);
}

/* The shortest cycle, in drawn edges, through a cycle node of group `grp`. Writes edge indices
 * into path (at most cap), returns the length, 0 when none (the cycle is not fully drawn). */
static size_t
hint__cycle(const tgc_report_model *m, uint32_t grp, size_t *path, size_t cap)
{
    size_t *via_edge = PyMem_Malloc((m->n ? m->n : 1) * sizeof(size_t));
    uint32_t *queue = PyMem_Malloc((m->n ? m->n : 1) * sizeof(uint32_t));
    size_t len = 0;
    if (via_edge == NULL || queue == NULL) {
        goto done;
    }
    int tries = 0;
    for (uint32_t s = 0; s < m->n && len == 0 && tries < 8; s++) {
        if (!m->draw[s] || m->owner[s] != TGC_NONE || m->a.group[s] != grp ||
            !(m->a.role[s] & TGC_ROLE_CYCLE)) {
            continue;
        }
        tries++;
        for (uint32_t v = 0; v < m->n; v++) {
            via_edge[v] = SIZE_MAX;
        }
        uint32_t head = 0, tail = 0;
        queue[tail++] = s;
        size_t closing = SIZE_MAX;
        while (head < tail && closing == SIZE_MAX) {
            uint32_t v = queue[head++];
            for (size_t e = 0; e < m->nedges; e++) {
                if (m->edges[e].src != v) {
                    continue;
                }
                uint32_t w = m->edges[e].dst;
                if (w == s) {
                    closing = e;
                    break;
                }
                if (via_edge[w] == SIZE_MAX) {
                    via_edge[w] = e;
                    queue[tail++] = w;
                }
            }
        }
        if (closing == SIZE_MAX) {
            continue;
        }
        /* walk back from the closing edge to s */
        size_t rev[64];
        size_t k = 0;
        rev[k++] = closing;
        uint32_t v = m->edges[closing].src;
        while (v != s && k < 64) {
            rev[k++] = via_edge[v];
            v = m->edges[via_edge[v]].src;
        }
        for (size_t i = 0; i < k && i < cap; i++) {
            path[i] = rev[k - 1 - i];
        }
        len = k < cap ? k : cap;
    }
done:
    PyMem_Free(via_edge);
    PyMem_Free(queue);
    return len;
}

static int
hint__label_is(PyObject *label, const char *prefix)
{
    const char *l = PyUnicode_AsUTF8(label);
    if (l == NULL) {
        PyErr_Clear();
        return 0;
    }
    return strncmp(l, prefix, strlen(prefix)) == 0;
}

/* Picks the reference most likely meant to be weak or cleared, and says how. */
static void
hint__hint(const tgc_report_model *m, const size_t *path, size_t len, tgc_buf *cyc,
           tgc_buf *hint)
{
    if (len == 0) {
        tgc_buf_puts(hint, "the cycle is too large to draw whole; look for an attribute that "
                           "points back to an owner and make it a weakref.ref");
        return;
    }
    PyObject *t0 = m->tname[m->edges[path[0]].src];  /* borrowed */
    if (t0 != NULL) {
        tgc_buf_pystr(cyc, t0, 0);
    }
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &m->edges[path[i]];
        PyObject *tn = m->tname[e->dst];  /* borrowed */
        tgc_buf_puts(cyc, " -");
        tgc_buf_pystr(cyc, e->label, 0);
        tgc_buf_puts(cyc, "-> ");
        if (tn != NULL) {
            tgc_buf_pystr(cyc, tn, 0);
        }
    }
    PyErr_Clear();
    const tgc_drawn_edge *pick = NULL;
    /* 1. a self-reference */
    for (size_t i = 0; i < len && !pick; i++) {
        if (m->edges[path[i]].src == m->edges[path[i]].dst) {
            pick = &m->edges[path[i]];
            hint__edge_name(hint, m, pick);
            tgc_buf_puts(hint, " refers to the object itself: drop that reference (del it or set "
                               "it to None) once done, or hold a weakref.ref instead");
            return;
        }
    }
    /* 2. a suspended generator or coroutine whose frame holds the object that keeps it: its
     *    finalizer (close()) would break the cycle, but only once the collector runs it */
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &m->edges[path[i]];
        PyObject *gen = m->items[e->src];
        if (tgc_is_generator(gen) && hint__label_is(e->label, "local ")) {
            const tgc_drawn_edge *in = &m->edges[path[(i + len - 1) % len]];
            int agen = PyAsyncGen_CheckExact(gen);
            tgc_buf_puts(hint, PyCoro_CheckExact(gen) ? "the coroutine "
                               : agen ? "the async generator " : "the generator ");
            if (m->desc[e->src] != NULL) {
                tgc_buf_pystr(hint, m->desc[e->src], 0);
            }
            tgc_buf_puts(hint, ", stored at ");
            hint__edge_name(hint, m, in);
            tgc_buf_puts(hint, ", holds ");
            Py_ssize_t ln;
            const char *l = PyUnicode_AsUTF8AndSize(e->label, &ln);
            if (l != NULL && ln > 6) {
                tgc_buf_puts(hint, "'");
                tgc_buf_add(hint, l + 6, (size_t)(ln - 6));  /* after "local " */
                tgc_buf_puts(hint, "' ");
            }
            PyErr_Clear();
            tgc_buf_puts(hint, agen ? "in its suspended frame: await its aclose() when done "
                                      "(its finalizer breaks the cycle, but only once the "
                                      "collector runs), or do not keep it on that object"
                                    : "in its suspended frame: call its close() when done (its "
                                      "finalizer does, but only once the collector runs), or do "
                                      "not keep it on that object");
            return;
        }
    }
    /* 3. an exception's traceback kept alive: frames hold the locals that hold the owner */
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &m->edges[path[i]];
        if (hint__label_is(e->label, "__traceback__") || hint__label_is(e->label, "tb_frame") ||
            PyFrame_Check(m->items[e->src])) {
            const tgc_drawn_edge *in = &m->edges[path[(i + len - 1) % len]];
            hint__edge_name(hint, m, in);
            tgc_buf_puts(hint, " keeps an exception whose traceback holds the frames (and their "
                               "locals) that refer back to it: store the exception without its "
                               "traceback (exc.with_traceback(None)), or del it once handled");
            return;
        }
    }
    /* 4. a lambda or closure capturing its owner */
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &m->edges[path[i]];
        if (PyFunction_Check(m->items[e->src]) && hint__label_is(e->label, "closure ")) {
            const tgc_drawn_edge *in = &m->edges[path[(i + len - 1) % len]];
            PyObject *q = ((PyFunctionObject *)m->items[e->src])->func_qualname;
            tgc_buf_puts(hint, "the closure ");
            if (q != NULL) {
                tgc_buf_pystr(hint, q, 0);
            }
            tgc_buf_puts(hint, " stored at ");
            hint__edge_name(hint, m, in);
            tgc_buf_puts(hint, " captures '");
            Py_ssize_t ln;
            const char *l = PyUnicode_AsUTF8AndSize(e->label, &ln);
            if (l != NULL && ln > 8) {
                tgc_buf_add(hint, l + 8, (size_t)(ln - 8));  /* after "closure " */
            }
            PyErr_Clear();
            tgc_buf_puts(hint, "': capture a weakref.ref(...) to it instead of the object, "
                               "or clear the stored callback when done");
            return;
        }
    }
    /* 5. a bound method stored on its own instance */
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &m->edges[path[i]];
        if (PyMethod_Check(m->items[e->src]) && hint__label_is(e->label, "__self__")) {
            const tgc_drawn_edge *in = &m->edges[path[(i + len - 1) % len]];
            tgc_buf_puts(hint, "the bound method stored at ");
            hint__edge_name(hint, m, in);
            tgc_buf_puts(hint, " holds its __self__: store weakref.WeakMethod(obj.method) "
                               "instead, or clear it when done");
            return;
        }
    }
    /* 6. otherwise the back-reference: an attribute (containers holding their items is normal)
     * pointing at an object whose next step in the cycle is a collection, i.e. an item that
     * points back at the owner of the collection it sits in. */
    int best = -1;
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &m->edges[path[i]];
        int score = hint__label_is(e->label, ".") ? 2 : hint__label_is(e->label, "[") ? 1 : 0;
        PyObject *next = m->items[m->edges[path[(i + 1) % len]].dst];
        if (score == 2 && (PyList_Check(next) || PyDict_Check(next) || PyAnySet_Check(next) ||
                           PyTuple_Check(next))) {
            score = 3;
        }
        if (score >= best) {
            best = score;
            pick = e;
        }
    }
    hint__edge_name(hint, m, pick);
    tgc_buf_puts(hint, " closes the cycle: make it a weakref.ref (back-references to an owner "
                       "usually are) or set it to None when done");
}

int
tgc_report_hints(tgc_report_model *m)
{
    tgc_buf cyc = {0}, hint = {0};  /* reused: a group's cycle and hint */
    int rc = -1;
    for (uint32_t k = 0; k < m->ngroups; k++) {
        tgc_group *gi = &m->groups[k];
        tgc_buf_reset(&cyc);
        tgc_buf_reset(&hint);
        size_t path[64];
        size_t len = gi->drawn ? hint__cycle(m, gi->group, path, 64) : 0;
        if (gi->drawn) {
            hint__hint(m, path, len, &cyc, &hint);
        }
        else {
            tgc_buf_puts(&hint, "not drawn (the page shows the largest leaks first)");
        }
        if ((gi->hint = tgc_report_str(&hint)) == NULL ||
            (gi->cycle = tgc_report_str(&cyc)) == NULL) {
            goto done;
        }
    }
    rc = 0;
done:
    tgc_buf_free(&cyc);
    tgc_buf_free(&hint);
    return rc;
}
