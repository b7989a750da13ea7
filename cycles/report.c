/* report.c: the CycleReport (contract in report.h), one collection's garbage made into a model
 * once by the builder (report_build.h), its text written from it at once, and its lists, DOT,
 * picture and page on first use by the writers (report_write.h). Until then the report keeps
 * the model, which borrows the garbage, with the list that owns it; the hook lets go of it
 * (tgc_report_settle) before the garbage is freed, making the lists and drawing the DOT first if
 * someone kept the report. A report's model is freed here only. */
#include "cycles.h"
#include "render_py.h"
#include "report_build.h"
#include "report_write.h"

/* Frees a model and the struct: the one place a model goes. */
static void
report__model_free(tgc_report_model *m)
{
    if (m != NULL) {
        tgc_report_model_free(m);
        PyMem_Free(m);
    }
}

void
tgc_report_rows_free(tgc_report_row *rows, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; rows != NULL && k < n; k++) {
        Py_XDECREF(rows[k].cycle);
        Py_XDECREF(rows[k].hint);
    }
    PyMem_Free(rows);
}

PyObject *
tgc_report_build(tgc_cycles *c, PyObject *objs, const tgc_filter *f, int generation,
                 Py_ssize_t garbage_total)
{
    tgc_buf text = {0};
    tgc_report_row *rows = NULL;  /* the table's, one per group; its strings new references */
    PyObject *result = NULL;
    uint64_t *sigs = NULL;        /* per model group: its signature */
    tgc_report_model *m = PyMem_Calloc(1, sizeof(tgc_report_model));
    if (m == NULL) {
        return PyErr_NoMemory();
    }
    int built = tgc_report_model_build(c, objs, f, m);
    if (built <= 0) {
        report__model_free(m);
        return built == 0 ? Py_NewRef(Py_None) : NULL;
    }
    rows = PyMem_Calloc(m->ngroups ? m->ngroups : 1, sizeof(tgc_report_row));
    sigs = malloc((m->ngroups ? m->ngroups : 1) * sizeof(uint64_t));
    if (rows == NULL || sigs == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    /* The text buffer starts at the size of a one-leak report (about 500 bytes; its DOT is twice
     * that, tgc_dot_open), so the common case never regrows it. */
    tgc_buf_reserve(&text, 1000);
    if (tgc_report_signatures(m, sigs) < 0 || tgc_report_write_text(m, generation, &text) < 0) {
        goto error;
    }
    if (text.oom) {
        PyErr_NoMemory();
        goto error;
    }
    for (uint32_t k = 0; k < m->ngroups; k++) {
        const tgc_group *gi = &m->groups[k];
        rows[k].count = gi->count;
        rows[k].nodes = gi->nodes;
        rows[k].tensors = gi->total_targets;
        rows[k].nbytes = gi->total_bytes;
        rows[k].cycle = Py_NewRef(gi->cycle);
        rows[k].hint = Py_NewRef(gi->hint);
    }

    tgc_report *r = PyObject_GC_New(tgc_report, c->report_type);
    if (r == NULL) {
        goto error;
    }
    r->text = tgc_report_str(&text);
    r->dot = NULL;
    memset(&r->dot_src, 0, sizeof(r->dot_src));
    r->rows = rows;
    r->nrows = m->ngroups;
    rows = NULL;
    r->tensors = r->groups = r->edges = r->hints = NULL;  /* made on first use */
    r->svg = r->html = r->svg_error = NULL;
    r->nbytes = m->total;
    r->objects = (Py_ssize_t)m->ndrawn;
    r->garbage = garbage_total > (Py_ssize_t)m->n ? garbage_total : (Py_ssize_t)m->n;
    r->generation = generation;
    /* The lists and the DOT wait: most reports are read for their text and freed with the
     * garbage, never drawn nor listed. The model moves to the report, with the garbage list
     * that keeps its objects alive, until the DOT is asked for or tgc_report_settle decides
     * (before the garbage goes). */
    r->pending = m;
    r->pending_objs = Py_NewRef(objs);
    r->sigs = sigs;
    r->lists_lost = 0;
    m = NULL;
    sigs = NULL;
    PyObject_GC_Track((PyObject *)r);
    result = (PyObject *)r;
    if (r->text == NULL) {
        Py_CLEAR(result);
    }
error:
    if (m != NULL) {
        tgc_report_rows_free(rows, m->ngroups);
    }
    report__model_free(m);
    free(sigs);
    tgc_buf_free(&text);
    return result;
}

/* Makes the lists (tensors, groups, edges, hints) from the waiting model, once: from what the
 * model owns (names, descriptions, the tensors' dicts, the signatures taken at build), never
 * from the garbage's objects, which a callback may have changed since. 0 when they exist (or the
 * model is gone: a report the collector cleared, whose fields read None), -1 with an exception.
 * Making them can start a collection (3.10, 3.11), whose hook never settles a report of another
 * delivery: the model stays. */
int
tgc_report_lists_made(tgc_report *r)
{
    tgc_report_model *m = r->pending;
    if (r->tensors == NULL && m == NULL && r->lists_lost && r->text != NULL) {
        PyErr_SetString(PyExc_MemoryError,
                        "tensorgc: this CycleReport's lists could not be made: memory ran out "
                        "before its collection's garbage was freed");
        return -1;
    }
    if (r->tensors != NULL || m == NULL) {
        return 0;
    }
    PyObject *tensors = NULL, *groups = NULL, *edges = NULL, *hints = NULL;
    int rc = tgc_report_lists(m, r->sigs, &tensors, &edges, &groups, &hints);
    if (rc == 0 && r->tensors == NULL) {
        m->c->counters.lists_made++;
        r->tensors = tensors;
        r->groups = groups;
        r->edges = edges;
        r->hints = hints;
        tensors = groups = edges = hints = NULL;
    }
    Py_XDECREF(tensors);
    Py_XDECREF(groups);
    Py_XDECREF(edges);
    Py_XDECREF(hints);
    return rc;
}

/* Ends the wait, making the lists and drawing the DOT into dot_src first when `draw`. The
 * report's fields are detached before anything else: drawing runs no Python code and freeing the
 * model only releases strings, but this also serves tp_clear, and a re-entrant call must find
 * nothing. Lists that could not be made (no memory) raise MemoryError when read: the report's
 * owner reads them later, outside any call that could raise it. */
static void
report__end_wait(tgc_report *r, int draw)
{
    if (draw && r->pending != NULL && tgc_report_lists_made(r) < 0) {
        r->lists_lost = 1;
        PyErr_Clear();
    }
    tgc_report_model *m = r->pending;
    PyObject *objs = r->pending_objs;  /* keeps the model's objects alive until the end */
    r->pending = NULL;
    r->pending_objs = NULL;
    free(r->sigs);
    r->sigs = NULL;
    if (m != NULL && draw) {
        tgc_buf dot = {0};
        tgc_report_draw_dot(m, &dot);
        tgc_buf_free(&r->dot_src);
        r->dot_src = dot;
    }
    report__model_free(m);
    Py_XDECREF(objs);
}

void
tgc_report_forget(tgc_report *r)
{
    report__end_wait(r, 0);
}

int
tgc_report_settle(PyObject *report, Py_ssize_t own)
{
    if (report == NULL || report == Py_None || ((tgc_report *)report)->pending == NULL) {
        return -1;  /* drawn already (the DOT was asked for), or no report */
    }
    int kept = Py_REFCNT(report) > own;  /* kept by someone: draw while the objects live */
    report__end_wait((tgc_report *)report, kept);
    return kept;
}

PyObject *
tgc_report_dot(tgc_report *r)
{
    if (r->dot == NULL) {
        /* Drawing and decoding run no Python code (the reprs on the DOT were taken at build), so
         * nothing reads the report in between: one drawing, one decoding. */
        report__end_wait(r, 1);
        r->dot = tgc_report_str(&r->dot_src);
        if (r->dot != NULL) {
            tgc_buf_free(&r->dot_src);
        }
    }
    return Py_XNewRef(r->dot);
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
    if (tgc_report_lists_made(r) < 0) {
        return NULL;
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
    tgc_buf page = {0};
    PyObject *why = r->svg_error != NULL ? r->svg_error : passing;  /* borrowed */
    PyObject *result = NULL;
    if (tgc_report_write_page(r, svg, why, &page) == 0) {
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
    Py_XDECREF(svg);
    Py_XDECREF(passing);
    tgc_buf_free(&page);
    return result;
}
