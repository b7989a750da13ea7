/* page.h: the contract of page.c, the self-contained HTML page of a cycle report: title, table,
 * summary text and the inlined SVG (drawn by the render worker: renderer.h), with a small pan/zoom
 * script. Plain C over tgc_buf; the C unit tests link it without an interpreter. */
#ifndef TGC_PAGE_H
#define TGC_PAGE_H

#include "tensorgc/buf.h"

typedef struct {
    const char *title;
    const char *text;          /* the plain-text summary */
    const char *table_html;    /* rows already escaped */
    const char *svg;           /* Graphviz output, or NULL */
    const char *svg_error;     /* why there is no picture */
} tgc_page;
/* Writes the page into out (out of memory shows in out->oom); title, text and svg_error are
 * escaped here, table_html and svg are written as they are. */
void tgc_html_page(tgc_buf *out, const tgc_page *p);

#endif /* TGC_PAGE_H */
