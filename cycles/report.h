/* report.h: the contract of a CycleReport, what one collection's garbage held (report.c): its
 * model built once (report_model.h, by the builder of report_build.h), its text written from
 * the model when it is made, its lists (with the groups' signatures) and DOT on first use or when
 * the hook lets go of a report someone kept, and its picture and page rendered on first use (the
 * writers of report_write.h). cycles/binding.c exposes it as the tensorgc.CycleReport heap type;
 * the hook (observers.c) builds, delivers and settles reports. Also the graph of any list of
 * objects, made of the same parts (report_objects.c, report_objects_dot.c). Python.h comes
 * first; everything here needs the GIL. */
#ifndef TGC_REPORT_H
#define TGC_REPORT_H

#include "tensorgc/buf.h"
#include "hook.h"

/* One row of the page's summary table: a group of identical leaks. */
typedef struct {
    uint32_t count, nodes, tensors;
    unsigned long long nbytes;
    PyObject *cycle, *hint;  /* new references (str), shared with the group's dict */
} tgc_report_row;

typedef struct tgc_report_model tgc_report_model;  /* report_model.h */

typedef struct {
    PyObject_HEAD
    /* New references. text: set at build. The lists: made from the model on first use, or when
     * the hook lets go of a report someone kept; NULL until then and once cleared. groups: a
     * dict per group of identical leaks (count, objects, tensors, nbytes, hint, cycle, drawn,
     * and signature: 16 hex digits, report_write.h's tgc_report_signatures), so a repeated leak
     * is told by reading it, without the page. */
    PyObject *text, *tensors, *groups, *edges, *hints;
    /* Made on first use: most reports are read for their text and never drawn. */
    PyObject *dot;         /* new reference, decoded from dot_src by tgc_report_dot */
    tgc_buf dot_src;       /* the DOT as drawn (UTF-8); freed once decoded */
    /* Until the DOT is drawn: the model it and the lists are made from (owned; report_model.h),
     * which borrows the garbage's objects, and the garbage list that keeps them alive (a new
     * reference). Only while the hook delivers the report: tgc_report_settle ends it before the
     * garbage is freed. */
    tgc_report_model *pending;
    PyObject *pending_objs;
    /* Per group of the model: its signature, taken at build with the text (it reads the
     * objects' types), for the lists; freed with the model (malloc). */
    uint64_t *sigs;
    int lists_lost;        /* the lists could not be made before the model went (no memory) */
    PyObject *svg, *html;  /* new references, NULL until first asked for (rendering is lazy) */
    PyObject *svg_error;   /* str when rendering failed, so the page can say why */
    tgc_report_row *rows;  /* the summary table's rows, made into HTML with the page */
    Py_ssize_t nrows;
    unsigned long long nbytes;
    Py_ssize_t objects, garbage;
    int generation;
} tgc_report;

/* A report (new reference) of the garbage objs (a list owning it) for observers with filter f,
 * None (a new reference) when it holds no tensor of interest in a cycle, NULL with an exception.
 * garbage_total: how many objects the collection found in all (objs may be the tensors' part
 * only). Runs the user's reprs and the filter's predicate. */
PyObject *tgc_report_build(tgc_cycles *c, PyObject *objs, const tgc_filter *f, int generation,
                           Py_ssize_t garbage_total);
PyObject *tgc_report_dot(tgc_report *r);                  /* new reference */
/* Makes the report's lists from its model if they are not made yet (its getters, its repr): 0,
 * or -1 with an exception. A cleared report's lists stay NULL (0 returned). */
int tgc_report_lists_made(tgc_report *r);
/* Before the garbage a report was built from is freed: draws the report's DOT if anyone besides
 * the caller's `own` references holds the report, else forgets what it would be drawn from. */
int tgc_report_settle(PyObject *report, Py_ssize_t own);  /* 1 drawn, 0 forgotten, -1 neither */
void tgc_report_forget(tgc_report *r);  /* frees the model the DOT would be drawn from (tp_clear) */
/* Releases n rows (strings NULL where a row was never filled) and the array; NULL is fine. */
void tgc_report_rows_free(tgc_report_row *rows, Py_ssize_t n);
/* The drawing as SVG and the page, rendered on first use (new references; NULL with an
 * exception: c->error_type when the picture could not be made, for the SVG). */
PyObject *tgc_report_svg(tgc_cycles *c, tgc_report *r);
PyObject *tgc_report_html(tgc_cycles *c, tgc_report *r);

/* torch's create_graph (report_objects.c), to_dot and to_html (report_objects_dot.c) over any
 * list of objects. */
/* The graph of objs (a list) whose roots[i] (a list of as many truth values) are the roots: the
 * objects that reach a root (roots included), in list order, as (labels, referrents, kept): a
 * label per kept object (str), its references to kept objects as a list of (label, index into
 * the kept ones), and its index in objs. One entry per reference (tp_traverse), named as a
 * report's edges; labels cut as a report's. Runs reprs (names.c's tgc_describe). New reference,
 * or NULL with an exception. */
PyObject *tgc_objects_graph(tgc_cycles *c, PyObject *objs, PyObject *roots);
/* The bounded drawing of a graph of nodes into dot, and its summary into text: labels (str),
 * contexts (str or None), roots (True or False) per node, edges a list of (src, dst, label)
 * tuples with indices below the number of nodes and a str label (the caller checks all of it).
 * At most TGC_DRAW_BUDGET nodes (the roots first, then breadth first from them) and the
 * references a report would draw among them; every string cut and escaped. 0, or -1 with an
 * exception. */
int tgc_objects_dot(PyObject *labels, PyObject *contexts, PyObject *roots, PyObject *edges,
                    tgc_buf *dot, tgc_buf *text);
/* The page of a drawing: dot laid out by the render worker (within its budget), in page.c's page
 * with title and text; when there is no picture the page says why. New reference, or NULL with
 * an exception (a KeyboardInterrupt from the program's handler; no memory). */
PyObject *tgc_objects_page(tgc_cycles *c, PyObject *title, PyObject *text, PyObject *dot);

#endif /* TGC_REPORT_H */
