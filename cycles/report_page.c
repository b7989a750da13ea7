/* report_page.c: a report's page (contract in report_write.h): its title, the summary table of
 * groups, and the self-contained HTML page around them and the picture (page.c), each within its
 * bound. Reads what the report kept of its model (report.h: text, rows, totals); the picture is
 * rendered, and the page kept, by report.c. */
#include "cycles.h"
#include "page.h"
#include "report_write.h"

/* A table cell: at most TGC_TEXT_PART bytes of s, HTML-escaped (so the table stays within the
 * page's bound however the strings escape). 0, or -1 with an exception. */
static int
page__cell(tgc_buf *o, PyObject *s)
{
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL) {
        return -1;
    }
    tgc_buf cut = {0};
    tgc_report_add_cut(&cut, u, (size_t)n, TGC_TEXT_PART);
    tgc_buf_html(o, cut.data ? cut.data : "", cut.len);
    int oom = cut.oom;
    tgc_buf_free(&cut);
    return oom ? (PyErr_NoMemory(), -1) : 0;
}

/* The page's summary table, one row per group of leaks. 0, or -1 with an exception set. */
static int
page__table(tgc_buf *o, const tgc_report *r)
{
    tgc_buf_puts(o, "<table id=\"groups\">\n<tr><th>#</th><th>leaks</th><th>objects each</th>"
                    "<th>tensors</th><th>held</th><th>cycle</th><th>fix</th></tr>\n");
    for (Py_ssize_t k = 0; k < r->nrows && k < TGC_TABLE_ROWS; k++) {
        const tgc_report_row *row = &r->rows[k];
        tgc_buf_puts(o, "<tr><td class=\"num\">");
        tgc_buf_uint(o, (uint64_t)k + 1);
        tgc_buf_puts(o, "</td><td class=\"num\">");
        tgc_buf_count(o, row->count);
        tgc_buf_puts(o, "</td><td class=\"num\">");
        tgc_buf_count(o, row->nodes);
        tgc_buf_puts(o, "</td><td class=\"num\">");
        tgc_buf_count(o, row->tensors);
        tgc_buf_puts(o, "</td><td class=\"num\">");
        tgc_buf_bytes(o, row->nbytes);
        tgc_buf_puts(o, "</td><td>");
        if (page__cell(o, row->cycle) < 0) {
            return -1;
        }
        tgc_buf_puts(o, "</td><td>");
        if (page__cell(o, row->hint) < 0) {
            return -1;
        }
        tgc_buf_puts(o, "</td></tr>\n");
    }
    if (r->nrows > TGC_TABLE_ROWS) {
        tgc_buf_puts(o, "<tr><td colspan=\"7\">\xe2\x80\xa6 ");
        tgc_buf_count(o, (uint64_t)(r->nrows - TGC_TABLE_ROWS));
        tgc_buf_puts(o, " more leak shapes, smaller ones (report.groups has every one)</td></tr>\n");
    }
    tgc_buf_puts(o, "</table>\n");
    return o->oom ? (PyErr_NoMemory(), -1) : 0;
}

int
tgc_report_write_page(const tgc_report *r, PyObject *svg, PyObject *why, tgc_buf *page)
{
    tgc_buf title = {0}, table = {0};
    tgc_buf_puts(&title, "tensorgc: reference cycles kept ");
    tgc_buf_count(&title, (uint64_t)PyList_GET_SIZE(r->tensors));
    tgc_buf_puts(&title, PyList_GET_SIZE(r->tensors) == 1 ? " tensor (" : " tensors (");
    tgc_buf_bytes(&title, r->nbytes);
    tgc_buf_printf(&title, ") alive until gc generation %d ran", r->generation);

    const char *text = PyUnicode_AsUTF8(r->text);
    const char *svg_s = text && svg ? PyUnicode_AsUTF8(svg) : NULL;
    const char *svg_err = text && why ? PyUnicode_AsUTF8(why) : NULL;
    int ok = text != NULL && (svg == NULL || svg_s != NULL) &&
             (why == NULL || svg_err != NULL) && page__table(&table, r) == 0;
    char too_big[200];
    if (ok && svg_s != NULL && strlen(svg_s) + table.len + 6 * strlen(text) + 16384 > TGC_PAGE_MAX) {
        /* The page has a bound whatever the garbage: a drawing that would pass it is left out. */
        snprintf(too_big, sizeof(too_big), "the drawing (%zu bytes) would make the page larger "
                 "than its %u MiB bound, so it is left out; the text and table are complete",
                 strlen(svg_s), TGC_PAGE_MAX >> 20);
        svg_s = NULL;
        svg_err = too_big;
    }
    int rc = -1;
    if (ok && !title.oom) {
        tgc_page p = {title.data, text, table.data, svg_s, svg_err};
        tgc_html_page(page, &p);
        rc = 0;
    }
    else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    tgc_buf_free(&title);
    tgc_buf_free(&table);
    return rc;
}
