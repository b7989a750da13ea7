/* report_page.c: a report's picture and page, made on first use (contract in report.h): the SVG
 * from the render worker (renderer.h; its deadline bounds the wait), the summary table, and the
 * self-contained HTML page around them (page.c), each within its bound. */
#include "cycles.h"
#include "page.h"
#include "report_int.h"
#include "render_py.h"
void
tgc_report_rows_free(tgc_report_row *rows, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; rows != NULL && k < n; k++) {
        Py_XDECREF(rows[k].cycle);
        Py_XDECREF(rows[k].hint);
    }
    PyMem_Free(rows);
}

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

PyObject *
tgc_report_svg(tgc_cycles *c, tgc_report *r)
{
    if (r->svg != NULL) {
        return Py_NewRef(r->svg);
    }
    if (r->svg_error != NULL) {
        PyErr_SetObject(c->error_type, r->svg_error);
        return NULL;
    }
    PyObject *dot_s = tgc_report_dot(r);  /* new reference */
    if (dot_s == NULL) {
        return NULL;
    }
    Py_ssize_t n;
    const char *dot = PyUnicode_AsUTF8AndSize(dot_s, &n);  /* lives as long as dot_s */
    if (dot == NULL) {
        Py_DECREF(dot_s);
        return NULL;
    }
    char *svg = NULL, err[640] = "";
    size_t len = 0;
    int rc;
    if (c->busy && c->interrupted) {
        /* A Ctrl-C stopped a layout earlier in this callback: no more until the program had it */
        snprintf(err, sizeof(err), "the layout was interrupted");
        rc = TGC_RENDER_INTERRUPTED;
    }
    else {
        /* Inside our gc callback (busy) the GIL stays held, so no other thread runs while the
         * collector is mid-collection (the worker's deadline bounds the wait); dot_s, ours,
         * outlives the unlocked section otherwise. */
        rc = tgc_render_py(dot, (size_t)n, &svg, &len, err, sizeof(err), c->busy);
    }
    Py_DECREF(dot_s);
    if (rc == TGC_RENDER_INTERRUPTED) {
        /* Not kept as this report's answer: a later read may draw it. */
        if (c->busy) {
            c->interrupted = 1;  /* given back to the program when the callback ends (hook.c) */
        }
        else if (PyErr_Occurred()) {
            return NULL;  /* the program's SIGINT handler raised (KeyboardInterrupt) */
        }
        PyErr_SetString(c->error_type, err);
        return NULL;
    }
    /* Another thread may have rendered the same report while the GIL was released. */
    if (rc < 0) {
        if (r->svg_error == NULL) {
            r->svg_error = PyUnicode_DecodeUTF8(err, (Py_ssize_t)strlen(err), "replace");
        }
        if (r->svg_error != NULL) {
            PyErr_SetObject(c->error_type, r->svg_error);
        }
        return NULL;
    }
    if (r->svg == NULL) {
        r->svg = PyUnicode_DecodeUTF8(svg, (Py_ssize_t)len, "replace");
    }
    free(svg);
    return Py_XNewRef(r->svg);
}

PyObject *
tgc_report_html(tgc_cycles *c, tgc_report *r)
{
    if (r->html != NULL) {
        return Py_NewRef(r->html);
    }
    if (r->text == NULL || r->tensors == NULL) {
        /* only reachable from a finalizer that ran while the collector cleared the report */
        PyErr_SetString(PyExc_ValueError, "this CycleReport was cleared by the collector");
        return NULL;
    }
    PyObject *svg = tgc_report_svg(c, r);
    PyObject *passing = NULL;  /* why there is no picture this time only (an interrupted layout):
                                  the page says so and is not kept, so a later read draws it */
    if (svg == NULL) {
        if (!PyErr_ExceptionMatches(c->error_type)) {
            return NULL;
        }
        if (r->svg_error == NULL) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            passing = value != NULL ? PyObject_Str(value) : NULL;  /* new reference */
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            if (passing == NULL) {
                return NULL;
            }
        }
        PyErr_Clear();  /* the page says why there is no picture */
    }
    tgc_buf title = {0}, page = {0};
    tgc_buf_puts(&title, "tensorgc: reference cycles kept ");
    tgc_buf_count(&title, (uint64_t)PyList_GET_SIZE(r->tensors));
    tgc_buf_puts(&title, PyList_GET_SIZE(r->tensors) == 1 ? " tensor (" : " tensors (");
    tgc_buf_bytes(&title, r->nbytes);
    tgc_buf_printf(&title, ") alive until gc generation %d ran", r->generation);

    tgc_buf table = {0};
    const char *text = PyUnicode_AsUTF8(r->text);
    const char *svg_s = text && svg ? PyUnicode_AsUTF8(svg) : NULL;
    PyObject *why = r->svg_error != NULL ? r->svg_error : passing;  /* borrowed */
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
    PyObject *result = NULL;
    if (ok && !title.oom) {
        tgc_page p = {title.data, text, table.data, svg_s, svg_err};
        tgc_html_page(&page, &p);
        if (passing != NULL) {
            result = tgc_report_str(&page);
        }
        else {
            if (r->html == NULL) {
                r->html = tgc_report_str(&page);
            }
            result = Py_XNewRef(r->html);
        }
    }
    else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    Py_XDECREF(svg);
    Py_XDECREF(passing);
    tgc_buf_free(&title);
    tgc_buf_free(&table);
    tgc_buf_free(&page);
    return result;
}

