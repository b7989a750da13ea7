/* report_dot.c: a report's drawing in Graphviz's DOT (contract in report_write.h): the groups
 * chosen for drawing as clusters, summary nodes for what did not fit, the drawn references, all
 * read from the model. report.c asks for it when the DOT is wanted or the hook lets go of a
 * report someone kept; the opening is shared with report_objects_dot.c's drawings. */
#include "cycles.h"
#include "report_write.h"
/* s escaped for DOT into o; a string that cannot be written (no memory) is left out, with no
 * exception left behind: drawing has no caller to report to (oom shows in the buffer). */
static void
dot__str(tgc_buf *o, PyObject *s)
{
    if (tgc_buf_pystr(o, s, 'd') < 0) {
        PyErr_Clear();
    }
}

/* A tensor's tooltip starts with its class's full name ("torch.Tensor", a subclass's module
 * and qualified name) and its line. */
static void
dot__tensor_tip(tgc_buf *o, const tgc_report_model *m, uint32_t v, const tgc_buf *line)
{
    PyObject *qual = m->ts[v].type ? tgc_type_qualname(m->ts[v].type) : NULL;
    if (qual != NULL) {
        dot__str(o, qual);
        tgc_buf_puts(o, ": ");
        Py_DECREF(qual);
    }
    PyErr_Clear();
    tgc_buf_dot(o, line->data ? line->data : "", line->len);
    tgc_buf_dot(o, "\n", 1);
}

static void
dot__node(tgc_buf *o, const tgc_report_model *m, uint32_t v)
{
    tgc_buf_puts(o, "  n");
    tgc_buf_uint(o, v);
    tgc_buf_puts(o, " [label=\"");
    if (m->ts[v].info != NULL) {
        const tgc_buf *line = &m->ts[v].line;  /* made by the builder */
        tgc_buf_dot(o, line->data ? line->data : "", line->len);
        tgc_buf_dot(o, "\n", 1);
        /* Borrowed. Not read from info: that is the dict report.tensors hands out, and the DOT
         * may be drawn after the user's callback has changed it. */
        PyObject *stack = m->ts[v].stack;
        if (stack != NULL) {
            /* the first lines on the node, all of it in the tooltip */
            Py_ssize_t n;
            const char *s = PyUnicode_AsUTF8AndSize(stack, &n);
            if (s == NULL) {
                PyErr_Clear();  /* no memory: the node goes without its stack */
            }
            int lines = 0;
            for (Py_ssize_t i = 0; s && i < n && lines < TGC_STACK_LINES; lines++) {
                const char *nl = memchr(s + i, '\n', (size_t)(n - i));
                Py_ssize_t end = nl ? nl - s : n;
                tgc_buf_dot(o, s + i, (size_t)(end - i));
                tgc_buf_dot(o, "\n", 1);
                i = end + 1;
            }
            tgc_buf_puts(o, "\", tooltip=\"");
            dot__tensor_tip(o, m, v, line);
            if (s != NULL) {
                tgc_buf_puts(o, "allocated at:\\l");
                tgc_buf_dot(o, s, (size_t)n);
            }
        }
        else if (m->ts[v].is_cuda) {
            static const char msg[] = "no allocation stack: call torch.cuda.memory."
                                      "_record_memory_history()\nbefore allocating to see it here\n";
            tgc_buf_dot(o, msg, sizeof(msg) - 1);
            tgc_buf_puts(o, "\", tooltip=\"");
            dot__tensor_tip(o, m, v, line);
            tgc_buf_puts(o, "allocation stacks need torch.cuda.memory._record_memory_history()");
        }
        else {
            tgc_buf_puts(o, "(allocation stacks are recorded for CUDA tensors only)\\l\", "
                            "tooltip=\"");
            dot__tensor_tip(o, m, v, line);
            tgc_buf_puts(o, "allocation stacks come from "
                            "torch.cuda.memory._record_memory_history()");
        }
        tgc_buf_puts(o, "\", color=\"#c62828\", fillcolor=\"#ffcdd2\", fontcolor=\"#7f0000\", "
                        "penwidth=2];\n");
        return;
    }
    PyObject *tn = m->tname[v];    /* borrowed */
    PyObject *desc = m->desc[v];  /* borrowed; NULL when describing failed */
    if (tn != NULL) {
        dot__str(o, tn);
    }
    tgc_buf_dot(o, "\n", 1);
    if (desc != NULL && PyUnicode_GET_LENGTH(desc) > 0) {
        dot__str(o, desc);
        tgc_buf_dot(o, "\n", 1);
    }
    tgc_buf_puts(o, "\", tooltip=\"");
    if (tn != NULL) {
        dot__str(o, tn);
    }
    if (desc != NULL && PyUnicode_GET_LENGTH(desc) > 0) {
        tgc_buf_puts(o, ": ");
        dot__str(o, desc);
    }
    tgc_buf_puts(o, "\"");
    if (m->a.role[v] & TGC_ROLE_CYCLE) {
        tgc_buf_puts(o, ", color=\"#1565c0\"");
    }
    tgc_buf_puts(o, "];\n");
    PyErr_Clear();
}

/* A closure variable's edge (function -> value, its tuple and cell folded) says in its tooltip
 * where the reference sits: "closure x: __closure__[0].cell_contents" (which can be set to None
 * to break the cycle). */
static void
dot__closure_tip(tgc_buf *o, const tgc_drawn_edge *de)
{
    if (de->cell < 0) {
        return;
    }
    tgc_buf_puts(o, ", tooltip=\"");
    dot__str(o, de->label);
    tgc_buf_puts(o, ": __closure__[");
    tgc_buf_uint(o, (uint64_t)de->cell);
    tgc_buf_puts(o, "].cell_contents\"");
}

void
tgc_dot_open(tgc_buf *dot)
{
    tgc_buf_reserve(dot, 2000);  /* a one-leak report's DOT is about 1 KB */
    tgc_buf_puts(dot, "digraph tensorgc {\n"
                      "  graph [rankdir=LR, fontname=\"Helvetica\", fontsize=11, nodesep=0.25, "
                      "ranksep=0.45, bgcolor=\"white\"];\n"
                      "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#f7f7f7\", "
                      "color=\"#607d8b\", fontname=\"Helvetica\", fontsize=10];\n"
                      "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#455a64\"];\n");
}

/* The groups chosen for drawing as clusters (what did not fit as one summary node each), then
 * the drawn edges. Runs no user code and reads none of the garbage's objects: what it shows was
 * taken at build (report_model.h), so a callback that emptied the garbage's list before the
 * drawing changes nothing. A label it cannot write is left out. */
void
tgc_report_draw_dot(const tgc_report_model *m, tgc_buf *dot)
{
    tgc_buf scratch = {0};  /* a cluster's title */
    tgc_dot_open(dot);
    for (uint32_t k = 0; k < m->ngroups; k++) {
        const tgc_group *gi = &m->groups[k];
        if (!gi->drawn) {
            continue;
        }
        tgc_buf_puts(dot, "  subgraph cluster_");
        tgc_buf_uint(dot, k);
        tgc_buf_puts(dot, " {\n    label=\"");
        tgc_buf *title = &scratch;  /* written plain, then escaped into the label */
        tgc_buf_reset(title);
        tgc_buf_puts(title, "#");
        tgc_buf_uint(title, k + 1);
        tgc_buf_puts(title, ": ");
        if (gi->count > 1) {
            tgc_buf_count(title, gi->count);
            tgc_buf_puts(title, " identical leaks, one drawn; ");
        }
        tgc_buf_count(title, gi->nodes);
        tgc_buf_puts(title, gi->count > 1 ? " objects each, " : " objects, ");
        tgc_buf_bytes(title, gi->total_bytes);
        tgc_buf_puts(title, " held");
        tgc_buf_dot(dot, title->data ? title->data : "", title->len);
        tgc_buf_puts(dot, "\"; style=\"rounded,dashed\"; color=\"#90a4ae\"; fontcolor=\"#37474f\";\n");
        for (uint32_t v = 0; v < m->n; v++) {
            if (m->draw[v] && m->owner[v] == TGC_NONE && m->a.group[v] == gi->group) {
                tgc_buf_puts(dot, "  ");
                dot__node(dot, m, v);
            }
        }
        if (gi->elided > 0) {
            /* The rest of a large group, as one node with its type counts (taken at build). */
            tgc_buf_puts(dot, "    more");
            tgc_buf_uint(dot, k);
            tgc_buf_puts(dot, " [label=\"");
            if (gi->more != NULL) {
                dot__str(dot, gi->more);
            }
            tgc_buf_puts(dot, "\", style=\"rounded,dashed\", fillcolor=\"white\"];\n");
        }
        tgc_buf_puts(dot, "  }\n");
        if (gi->elided > 0) {
            /* Dashed links from drawn objects to the ones left out for the budget (not to class
             * internals or shortened chains, which the "more" node counts): a few show where the
             * rest hangs off; hundreds only slow the layout. */
            int outs = 0, ins = 0;
            for (uint32_t v = 0; v < m->n && (outs < TGC_DRAW_STUBS || ins < TGC_DRAW_STUBS); v++) {
                if (!m->draw[v] || m->owner[v] != TGC_NONE || m->a.group[v] != gi->group) {
                    continue;
                }
                int out = 0, in = 0;
                for (uint32_t e = m->g.out_off[v]; e < m->g.out_off[v + 1]; e++) {
                    uint32_t w = m->g.out_dst[e];
                    out |= !m->draw[w] && !m->skip[w] && m->a.group[w] == gi->group;
                }
                for (uint32_t e = m->g.in_off[v]; e < m->g.in_off[v + 1]; e++) {
                    uint32_t w = m->g.in_src[e];
                    in |= !m->draw[w] && !m->skip[w] && m->a.group[w] == gi->group;
                }
                if (out && outs < TGC_DRAW_STUBS) {
                    outs++;
                    tgc_buf_puts(dot, "  n");
                    tgc_buf_uint(dot, v);
                    tgc_buf_puts(dot, " -> more");
                    tgc_buf_uint(dot, k);
                    tgc_buf_puts(dot, " [style=dashed];\n");
                }
                if (in && ins < TGC_DRAW_STUBS) {
                    ins++;
                    tgc_buf_puts(dot, "  more");
                    tgc_buf_uint(dot, k);
                    tgc_buf_puts(dot, " -> n");
                    tgc_buf_uint(dot, v);
                    tgc_buf_puts(dot, " [style=dashed];\n");
                }
            }
        }
    }
    for (size_t i = 0; i < m->nbridges; i++) {
        const tgc_bridge *br = &m->bridges[i];
        uint32_t from = m->owner[br->from] != TGC_NONE ? m->owner[br->from] : br->from;
        uint32_t to = m->owner[br->to] != TGC_NONE ? m->owner[br->to] : br->to;
        tgc_buf_puts(dot, "  n");
        tgc_buf_uint(dot, from);
        tgc_buf_puts(dot, " -> n");
        tgc_buf_uint(dot, to);
        tgc_buf_puts(dot, " [label=\"\xe2\x80\xa6 ");
        tgc_buf_count(dot, br->count);
        tgc_buf_puts(dot, br->count == 1 ? " more object\"" : " more objects\"");
        tgc_buf_puts(dot, ", style=dashed, color=\"#90a4ae\", fontcolor=\"#546e7a\"];\n");
    }
    if (m->edges_dropped > 0) {
        tgc_buf_puts(dot, "  graph [labelloc=b, label=\"");
        tgc_buf_count(dot, m->edges_dropped);
        tgc_buf_puts(dot, " more references between the drawn objects are not drawn\"];\n");
    }
    if (m->nedges + m->nbridges > TGC_DRAW_BIG || m->ndrawn > TGC_DRAW_BIG) {
        /* A big drawing: fewer crossing-minimisation and network-simplex passes (a random mesh
         * of 300 nodes and 600 edges took over 10 s with the defaults, 1.7 s with these). */
        tgc_buf_puts(dot, "  graph [mclimit=0.2, nslimit=2, nslimit1=2];\n");
    }
    for (size_t e = 0; e < m->nedges; e++) {
        const tgc_drawn_edge *de = &m->edges[e];
        tgc_buf_puts(dot, "  n");
        tgc_buf_uint(dot, de->src);
        tgc_buf_puts(dot, " -> n");
        tgc_buf_uint(dot, de->dst);
        tgc_buf_puts(dot, " [label=\"");
        dot__str(dot, de->label);
        tgc_buf_puts(dot, "\"");
        dot__closure_tip(dot, de);
        if (m->is_target[de->dst]) {
            tgc_buf_puts(dot, ", color=\"#c62828\", fontcolor=\"#c62828\"");
        }
        tgc_buf_puts(dot, "];\n");
    }
    tgc_buf_puts(dot, "}\n");
    tgc_buf_free(&scratch);
}
