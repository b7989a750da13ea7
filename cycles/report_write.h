/* report_write.h: the contract of the writers, which turn a built model (report_model.h) into
 * what a CycleReport shows: the text (report_text.c), each group's signature (report_sig.c),
 * the Python lists .tensors, .edges, .groups and .hints (report_lists.c), the DOT
 * (report_dot.c) and the page around the picture (report_page.c); report_objects_dot.c draws
 * the graph of any objects the same way. They only read the model: they never call the
 * builder, and never change or free what the model holds. report.c calls them after the build.
 * Python.h and cycles.h come first; everything here needs the GIL. */
#ifndef TGC_REPORT_WRITE_H
#define TGC_REPORT_WRITE_H

#include "report_model.h"

/* report_text.c */
/* The text: a header line (the collection's generation), then a line and a fix per group of
 * leaks, at most TGC_TEXT_GROUPS of them and TGC_TEXT_MAX bytes in all, into text. 0, or -1
 * with an exception (no memory shows in text->oom). */
int tgc_report_write_text(const tgc_report_model *m, int generation, tgc_buf *text);

/* report_sig.c */
/* The signature of each group m->groups[k], into sig[k] (m->ngroups of them): the shape of its
 * leak, independent of addresses, ids, tensor sizes, the number of instances and the order the
 * collector found them in. It hashes the set of distinct references between the objects of the
 * group's representative, each as (referrer's type name, label, referent's type name): for a
 * drawn group the references drawn (containers folded into their owner; in keys and indices
 * every run of digits and every 0x-number counts as one '#'), for a group not drawn every
 * reference, labelled "?" (so a shape has another signature on the rare report that does not
 * draw it). Type names are tp_name (a class's __name__), never addresses. Costs one pass over the
 * drawn edges, and over the edges of groups not drawn, and a sort. 0, or -1 with MemoryError. */
int tgc_report_signatures(const tgc_report_model *m, uint64_t *sig);
/* A signature as CycleReport.groups shows it: 16 lowercase hex digits (new reference). */
PyObject *tgc_report_signature_str(uint64_t sig);

/* report_lists.c */
/* The report's lists, new references into *tensors (the tensors of interest held by cycles:
 * their dicts, shared with the model), *edges ((type, label, type) per drawn reference),
 * *groups (a dict per group of leaks, with its signature sig[k]) and *hints (each group's fix,
 * the str its dict holds). 0, or -1 with an exception and the four left NULL. */
int tgc_report_lists(const tgc_report_model *m, const uint64_t *sig, PyObject **tensors,
                     PyObject **edges, PyObject **groups, PyObject **hints);

/* report_dot.c */
/* The opening of every drawing tensorgc makes (graph, node and edge defaults), with room for a
 * small drawing reserved. */
void tgc_dot_open(tgc_buf *dot);
/* Draws the model's DOT into dot: the groups chosen for drawing as clusters, summary nodes for
 * what did not fit, the drawn references. Runs no user code; leaves no exception set (running
 * out of memory shows in dot->oom). */
void tgc_report_draw_dot(const tgc_report_model *m, tgc_buf *dot);

/* report_page.c */
/* The report's page into page: title, text, the table of groups (at most TGC_TABLE_ROWS rows,
 * each cell cut) and the picture svg, or why there is none (why; NULL when there is a
 * picture); a picture that would pass TGC_PAGE_MAX is left out and the page says so. svg and why
 * are strs or NULL, borrowed. 0, or -1 with an exception. */
int tgc_report_write_page(const tgc_report *r, PyObject *svg, PyObject *why, tgc_buf *page);

#endif /* TGC_REPORT_WRITE_H */
