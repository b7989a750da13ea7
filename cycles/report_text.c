/* report_text.c: the words of a report (contract in report_int.h): a tensor's line, the shortest
 * drawn cycle of each group of leaks, the fix hint that names the reference most likely meant to
 * be weak, and the text that puts them together with the report's .groups and .hints. */
#include "cycles.h"
#include "report_int.h"


/* A shape as the text shows it: str() of the tuple in brackets, (3, 4) -> [3, 4], (4,) -> [4],
 * () -> []. Plain int dimensions, the usual case, are written directly; anything else (None for
 * a ragged dimension, a huge int) goes through str(), which gives the same for plain ints. */
static void
text__shape(tgc_buf *o, PyObject *shape)
{
    if (!PyTuple_Check(shape)) {
        tgc_buf_puts(o, "[?]");  /* not even the number of dimensions could be read */
        return;
    }
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    int plain = 1;
    for (Py_ssize_t i = 0; i < nd && plain; i++) {
        PyObject *d = PyTuple_GET_ITEM(shape, i);
        int overflow = 0;
        plain = PyLong_CheckExact(d) && (PyLong_AsLongLongAndOverflow(d, &overflow), !overflow);
    }
    if (plain) {
        tgc_buf_puts(o, "[");
        for (Py_ssize_t i = 0; i < nd; i++) {
            if (i > 0) {
                tgc_buf_puts(o, ", ");
            }
            tgc_buf_int(o, PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i)));
        }
        tgc_buf_puts(o, "]");
        return;
    }
    PyObject *s = PyObject_Str(shape);
    if (s != NULL) {
        Py_ssize_t n;
        const char *u = PyUnicode_AsUTF8AndSize(s, &n);
        if (u != NULL && n >= 2) {
            tgc_buf_puts(o, "[");
            tgc_buf_add(o, u + 1, (size_t)(n - 2 - (n >= 3 && u[n - 2] == ',')));
            tgc_buf_puts(o, "]");
        }
        Py_DECREF(s);
    }
    PyErr_Clear();
}

const tgc_buf *
tgc_report_line(tgc_rtensor *rt)
{
    tgc_buf *o = &rt->line;
    if (o->len > 0 || o->oom) {
        return o;
    }
    tgc_buf_pystr(o, rt->type_name, 0);
    tgc_buf_puts(o, " ");
    tgc_buf_pystr(o, rt->dtype_s, 0);
    text__shape(o, rt->shape);
    tgc_buf_puts(o, " on ");
    tgc_buf_pystr(o, rt->device_s, 0);
    if (rt->none != NULL) {
        tgc_buf_printf(o, " (no storage: %s)", rt->none);
    }
    else {
        tgc_buf_puts(o, " (");
        tgc_buf_bytes(o, rt->nbytes);
        tgc_buf_puts(o, ")");
    }
    PyErr_Clear();
    return o;
}

/* "Node.other" or "<lambda> closure self": how an edge reads in prose. */
static void
text__edge_name(tgc_buf *o, tgc_builder *b, const tgc_drawn_edge *e)
{
    PyObject *tn = tgc_report_tname(b, e->src);
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
text__cycle(tgc_builder *b, uint32_t grp, size_t *path, size_t cap)
{
    size_t *via_edge = PyMem_Malloc((b->n ? b->n : 1) * sizeof(size_t));
    uint32_t *queue = PyMem_Malloc((b->n ? b->n : 1) * sizeof(uint32_t));
    size_t len = 0;
    if (via_edge == NULL || queue == NULL) {
        goto done;
    }
    int tries = 0;
    for (uint32_t s = 0; s < b->n && len == 0 && tries < 8; s++) {
        if (!b->draw[s] || b->owner[s] != TGC_NONE || b->a.group[s] != grp ||
            !(b->a.role[s] & TGC_ROLE_CYCLE)) {
            continue;
        }
        tries++;
        for (uint32_t v = 0; v < b->n; v++) {
            via_edge[v] = SIZE_MAX;
        }
        uint32_t head = 0, tail = 0;
        queue[tail++] = s;
        size_t closing = SIZE_MAX;
        while (head < tail && closing == SIZE_MAX) {
            uint32_t v = queue[head++];
            for (size_t e = 0; e < b->nedges; e++) {
                if (b->edges[e].src != v) {
                    continue;
                }
                uint32_t w = b->edges[e].dst;
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
        uint32_t v = b->edges[closing].src;
        while (v != s && k < 64) {
            rev[k++] = via_edge[v];
            v = b->edges[via_edge[v]].src;
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
text__label_is(PyObject *label, const char *prefix)
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
text__hint(tgc_builder *b, const size_t *path, size_t len, tgc_buf *cyc, tgc_buf *hint)
{
    if (len == 0) {
        tgc_buf_puts(hint, "the cycle is too large to draw whole; look for an attribute that "
                           "points back to an owner and make it a weakref.ref");
        return;
    }
    PyObject *t0 = tgc_report_tname(b, b->edges[path[0]].src);
    if (t0 != NULL) {
        tgc_buf_pystr(cyc, t0, 0);
    }
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &b->edges[path[i]];
        PyObject *tn = tgc_report_tname(b, e->dst);
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
        if (b->edges[path[i]].src == b->edges[path[i]].dst) {
            pick = &b->edges[path[i]];
            text__edge_name(hint, b, pick);
            tgc_buf_puts(hint, " refers to the object itself: drop that reference (del it or set "
                               "it to None) once done, or hold a weakref.ref instead");
            return;
        }
    }
    /* 2. a suspended generator or coroutine whose frame holds the object that keeps it: its
     *    finalizer (close()) would break the cycle, but only once the collector runs it */
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &b->edges[path[i]];
        PyObject *gen = b->items[e->src];
        if (tgc_is_generator(gen) && text__label_is(e->label, "local ")) {
            const tgc_drawn_edge *in = &b->edges[path[(i + len - 1) % len]];
            int agen = PyAsyncGen_CheckExact(gen);
            tgc_buf_puts(hint, PyCoro_CheckExact(gen) ? "the coroutine "
                               : agen ? "the async generator " : "the generator ");
            if (b->desc[e->src] != NULL) {
                tgc_buf_pystr(hint, b->desc[e->src], 0);
            }
            tgc_buf_puts(hint, ", stored at ");
            text__edge_name(hint, b, in);
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
        const tgc_drawn_edge *e = &b->edges[path[i]];
        if (text__label_is(e->label, "__traceback__") || text__label_is(e->label, "tb_frame") ||
            PyFrame_Check(b->items[e->src])) {
            const tgc_drawn_edge *in = &b->edges[path[(i + len - 1) % len]];
            text__edge_name(hint, b, in);
            tgc_buf_puts(hint, " keeps an exception whose traceback holds the frames (and their "
                               "locals) that refer back to it: store the exception without its "
                               "traceback (exc.with_traceback(None)), or del it once handled");
            return;
        }
    }
    /* 4. a lambda or closure capturing its owner */
    for (size_t i = 0; i < len; i++) {
        const tgc_drawn_edge *e = &b->edges[path[i]];
        if (PyFunction_Check(b->items[e->src]) && text__label_is(e->label, "closure ")) {
            const tgc_drawn_edge *in = &b->edges[path[(i + len - 1) % len]];
            PyObject *q = ((PyFunctionObject *)b->items[e->src])->func_qualname;
            tgc_buf_puts(hint, "the closure ");
            if (q != NULL) {
                tgc_buf_pystr(hint, q, 0);
            }
            tgc_buf_puts(hint, " stored at ");
            text__edge_name(hint, b, in);
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
        const tgc_drawn_edge *e = &b->edges[path[i]];
        if (PyMethod_Check(b->items[e->src]) && text__label_is(e->label, "__self__")) {
            const tgc_drawn_edge *in = &b->edges[path[(i + len - 1) % len]];
            tgc_buf_puts(hint, "the bound method stored at ");
            text__edge_name(hint, b, in);
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
        const tgc_drawn_edge *e = &b->edges[path[i]];
        int score = text__label_is(e->label, ".") ? 2 : text__label_is(e->label, "[") ? 1 : 0;
        PyObject *next = b->items[b->edges[path[(i + 1) % len]].dst];
        if (score == 2 && (PyList_Check(next) || PyDict_Check(next) || PyAnySet_Check(next) ||
                           PyTuple_Check(next))) {
            score = 3;
        }
        if (score >= best) {
            best = score;
            pick = e;
        }
    }
    text__edge_name(hint, b, pick);
    tgc_buf_puts(hint, " closes the cycle: make it a weakref.ref (back-references to an owner "
                       "usually are) or set it to None when done");
}

void
tgc_report_add_cut(tgc_buf *o, const char *s, size_t n, size_t max)
{
    if (n <= max) {
        tgc_buf_add(o, s, n);
        return;
    }
    size_t k = max;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) {
        k--;
    }
    tgc_buf_add(o, s, k);
    tgc_buf_printf(o, "\xe2\x80\xa6 (%zu bytes)", n);
}

int
tgc_report_text(tgc_builder *b, int generation, uint32_t ntensors, unsigned long long total,
                tgc_buf *text, tgc_report_row *rows, PyObject *groups, PyObject *hints)
{
    tgc_cycles *c = b->c;
    tgc_buf cyc = {0}, hint = {0};  /* reused: a group's cycle and hint */
    tgc_buf spare = {0};            /* the lines of shapes past TGC_TEXT_GROUPS, not kept */
    uint32_t *best_of = NULL;       /* per group: its largest tensor (one pass, not one a group) */
    uint64_t *sigs = NULL;          /* per b->groups[k]: its signature (report_sig.c) */
    uint64_t unlisted_bytes = 0, unlisted_tensors = 0;
    int rc = -1;
    best_of = malloc((b->a.ngroups ? b->a.ngroups : 1) * sizeof(uint32_t));
    sigs = malloc((b->ngroups ? b->ngroups : 1) * sizeof(uint64_t));
    if (best_of == NULL || sigs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (tgc_report_signatures(b, sigs) < 0) {
        goto done;
    }
    for (uint32_t g = 0; g < b->a.ngroups; g++) {
        best_of[g] = TGC_NONE;
    }
    for (uint32_t v = 0; v < b->n; v++) {
        uint32_t g = b->a.group[v];
        if (g != TGC_NONE && b->ts[v].info && (b->a.role[v] & TGC_ROLE_TARGET) &&
            (best_of[g] == TGC_NONE || b->ts[v].nbytes > b->ts[best_of[g]].nbytes)) {
            best_of[g] = v;
        }
    }

    tgc_buf_puts(text, "tensorgc: garbage collection (generation ");
    tgc_buf_int(text, generation);
    tgc_buf_puts(text, ") found ");
    tgc_buf_count(text, b->a.kept);
    tgc_buf_puts(text, " objects in reference cycles keeping ");
    tgc_buf_count(text, ntensors);
    tgc_buf_puts(text, ntensors == 1 ? " tensor (" : " tensors (");
    tgc_buf_bytes(text, total);
    tgc_buf_puts(text, ") alive until the collector ran; they are freed now.\n");
    for (uint32_t k = 0; k < b->ngroups; k++) {
        tgc_group *gi = &b->groups[k];
        /* the group's lines go straight into the text, up to TGC_TEXT_GROUPS shapes */
        tgc_buf *line = k < TGC_TEXT_GROUPS ? text : &spare;
        tgc_buf_reset(&spare);
        if (k >= TGC_TEXT_GROUPS) {
            unlisted_bytes += gi->total_bytes;
            unlisted_tensors += gi->total_targets;
        }
        tgc_buf_reset(&cyc);
        tgc_buf_reset(&hint);
        size_t path[64];
        size_t len = gi->drawn ? text__cycle(b, gi->group, path, 64) : 0;
        if (gi->drawn) {
            text__hint(b, path, len, &cyc, &hint);
        }
        else {
            tgc_buf_puts(&hint, "not drawn (the page shows the largest leaks first)");
        }
        tgc_buf_puts(line, "  #");
        tgc_buf_uint(line, k + 1);
        tgc_buf_puts(line, " ");
        if (gi->count > 1) {
            tgc_buf_puts(line, "\xc3\x97");
            tgc_buf_count(line, gi->count);
            tgc_buf_puts(line, " ");
        }
        tgc_buf_puts(line, "cycle ");
        if (cyc.len > 0) {
            tgc_report_add_cut(line, cyc.data, cyc.len, TGC_TEXT_PART);
        }
        else {
            tgc_buf_puts(line, "(too large to spell out)");
        }
        tgc_buf_puts(line, " (");
        tgc_buf_count(line, gi->nodes);
        tgc_buf_puts(line, gi->count > 1 ? " objects each) holds " : " objects) holds ");
        tgc_buf_count(line, gi->targets);
        tgc_buf_puts(line, gi->targets == 1 ? " tensor" : " tensors");
        if (gi->count > 1) {
            tgc_buf_puts(line, " each");
        }
        /* the largest tensor of the representative */
        uint32_t best = best_of[gi->group];
        if (best != TGC_NONE) {
            tgc_buf_puts(line, gi->targets > 1 ? ", largest " : ": ");
            tgc_buf_append(line, tgc_report_line(&b->ts[best]));
        }
        tgc_buf_puts(line, "; ");
        tgc_buf_bytes(line, gi->total_bytes);
        tgc_buf_puts(line, " in all\n      fix: ");
        tgc_report_add_cut(line, hint.data ? hint.data : "", hint.len, TGC_TEXT_PART);
        tgc_buf_puts(line, "\n");
        PyObject *hint_s = tgc_report_str(&hint);
        PyObject *cyc_s = hint_s ? tgc_report_str(&cyc) : NULL;
        PyObject *gd = NULL;
        if (cyc_s != NULL) {
            PyObject *const keys[] = {c->keys[TGC_KEY_COUNT_], c->keys[TGC_KEY_OBJECTS],
                                      c->keys[TGC_KEY_TENSORS], c->keys[TGC_KEY_NBYTES],
                                      c->keys[TGC_KEY_HINT], c->keys[TGC_KEY_CYCLE],
                                      c->keys[TGC_KEY_DRAWN], c->keys[TGC_KEY_SIGNATURE]};
            PyObject *vals[] = {PyLong_FromUnsignedLong(gi->count),
                                PyLong_FromUnsignedLong(gi->nodes),
                                PyLong_FromUnsignedLong(gi->total_targets),
                                PyLong_FromUnsignedLongLong(gi->total_bytes), Py_NewRef(hint_s),
                                Py_NewRef(cyc_s), Py_NewRef(gi->drawn ? Py_True : Py_False),
                                tgc_report_signature_str(sigs[k])};
            gd = tgc_report_dict(keys, vals, 8);
        }
        if (gd == NULL || PyList_Append(groups, gd) < 0 || PyList_Append(hints, hint_s) < 0) {
            Py_XDECREF(gd);
            Py_XDECREF(hint_s);
            Py_XDECREF(cyc_s);
            goto done;
        }
        Py_DECREF(gd);
        rows[k].count = gi->count;
        rows[k].nodes = gi->nodes;
        rows[k].tensors = gi->total_targets;
        rows[k].nbytes = gi->total_bytes;
        rows[k].cycle = cyc_s;  /* the references move to the row */
        rows[k].hint = hint_s;
    }
    if (b->ngroups > TGC_TEXT_GROUPS) {
        tgc_buf_puts(text, "  \xe2\x80\xa6 ");
        tgc_buf_count(text, b->ngroups - TGC_TEXT_GROUPS);
        tgc_buf_puts(text, " more leak shapes holding ");
        tgc_buf_count(text, unlisted_tensors);
        tgc_buf_puts(text, unlisted_tensors == 1 ? " tensor (" : " tensors (");
        tgc_buf_bytes(text, unlisted_bytes);
        tgc_buf_puts(text, ") are not listed here; report.groups has every one\n");
    }
    if (text->len > TGC_TEXT_MAX - 128) {
        size_t n = TGC_TEXT_MAX - 128;
        while (n > 0 && ((unsigned char)text->data[n] & 0xC0) == 0x80) {
            n--;
        }
        text->len = n;
        text->data[n] = '\0';
        tgc_buf_puts(text, "\n  \xe2\x80\xa6 the text is cut at 64 KiB; report.groups has every leak\n");
    }
    rc = 0;
done:
    free(best_of);
    free(sigs);
    tgc_buf_free(&spare);
    tgc_buf_free(&cyc);
    tgc_buf_free(&hint);
    return rc;
}
