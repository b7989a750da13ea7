/* trace.c: reads a caching allocator's trace (one device's entries of the memory history, trusted
 * or read from an untrusted file) into the timeline and segment-map engines (timeline.c,
 * segmap.c), and checks an untrusted trace's fields in the common case (contract in convert.h).
 * Every field is type-checked: a malformed trace is a ValueError, never a crash. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/alloc.h"
#include "tensorgc/detail.h"
#include "tensorgc/ptrmap.h"
#include "tensorgc/segmap.h"
#include "tensorgc/timeline.h"
#include "convert.h"

static PyObject *
conv__u64_list(const uint64_t *v, uint32_t n)
{
    PyObject *l = PyList_New(n);
    for (uint32_t i = 0; l != NULL && i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[i]);
        if (x == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

/* An exact int as int64; ValueError naming `what` otherwise. Only int and its subclasses are
 * taken, so no Python code (__index__) runs while the caller walks a borrowed sequence. */
static int
conv__i64(PyObject *v, int64_t *out, const char *what)
{
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_ValueError, "%s must be an int, not %.50s", what, Py_TYPE(v)->tp_name);
        return -1;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s out of range", what);
        return -1;
    }
    *out = x;
    return 0;
}

/* An address: an int in [0, 2**64 - 2] (2**64 - 1 cannot be a key of the address table). */
static int
conv__addr(PyObject *v, uint64_t *out, const char *what)
{
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_ValueError, "%s must be an int, not %.50s", what, Py_TYPE(v)->tp_name);
        return -1;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if ((x == (unsigned long long)-1 && PyErr_Occurred()) || x == UINT64_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s out of range", what);
        return -1;
    }
    *out = x;
    return 0;
}

/* Item i of tuple t as a tuple of exactly `n` items, or ValueError. Borrowed. */
static PyObject *
conv__row(PyObject *t, Py_ssize_t i, Py_ssize_t n, const char *what)
{
    PyObject *r = PyTuple_GET_ITEM(t, i);
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != n) {
        PyErr_Format(PyExc_ValueError, "%s %zd must be a tuple of %zd ints", what, i, n);
        return NULL;
    }
    return r;
}

/* The stacks' hints of a classify tuple: hints (per stack id) and pre_hints (per block of
 * `pre`), borrowed from bytes objects the tuple holds, or NULL. */
typedef struct {
    const uint8_t *hints, *pre_hints;
    size_t nhints, npre_hints;
} conv_hints;

/* The classification's inputs: cl is (spans, grads, named) or (spans, grads, named, hints,
 * pre_hints, names): lists of (phase, t0, t1), (addr, time) and (addr, category) tuples of ints;
 * hints: bytes, one hint (infer.h) per stack id of the columns, or None (no inference);
 * pre_hints: bytes, one per block of `pre`, or None; names: a list of (addr, time, name index)
 * tuples (time None: at the end). Arrays are malloc'd into *c (the caller frees c->spans,
 * c->grads, c->named, c->names). */
static int
conv__classify(PyObject *cl, tgc_classify *c, conv_hints *h)
{
    PyObject *sp = NULL, *gr = NULL, *nm = NULL, *na = NULL;  /* new: fixed copies of the lists */
    tgc_span *spans = NULL;
    tgc_grad_mark *grads = NULL;
    tgc_named *named = NULL;
    tgc_name_mark *names = NULL;
    int rc = -1;
    memset(c, 0, sizeof(*c));
    memset(h, 0, sizeof(*h));
    Py_ssize_t size = PyTuple_Check(cl) ? PyTuple_GET_SIZE(cl) : 0;
    if ((size != 3 && size != 6) || !PyList_Check(PyTuple_GET_ITEM(cl, 0)) ||
        !PyList_Check(PyTuple_GET_ITEM(cl, 1)) || !PyList_Check(PyTuple_GET_ITEM(cl, 2)) ||
        (size == 6 && ((PyTuple_GET_ITEM(cl, 3) != Py_None && !PyBytes_Check(PyTuple_GET_ITEM(cl, 3))) ||
                       (PyTuple_GET_ITEM(cl, 4) != Py_None && !PyBytes_Check(PyTuple_GET_ITEM(cl, 4))) ||
                       !PyList_Check(PyTuple_GET_ITEM(cl, 5))))) {
        PyErr_SetString(PyExc_TypeError, "classify must be (spans: list, grads: list, named: list"
                        "[, hints: bytes | None, pre_hints: bytes | None, names: list])");
        return -1;
    }
    if (size == 6) {
        PyObject *hb = PyTuple_GET_ITEM(cl, 3), *pb = PyTuple_GET_ITEM(cl, 4);
        if (hb != Py_None) {
            h->hints = (const uint8_t *)PyBytes_AS_STRING(hb);
            h->nhints = (size_t)PyBytes_GET_SIZE(hb);
            c->infer = 1;
        }
        if (pb != Py_None) {
            h->pre_hints = (const uint8_t *)PyBytes_AS_STRING(pb);
            h->npre_hints = (size_t)PyBytes_GET_SIZE(pb);
        }
    }
    sp = PyList_AsTuple(PyTuple_GET_ITEM(cl, 0));
    gr = sp ? PyList_AsTuple(PyTuple_GET_ITEM(cl, 1)) : NULL;
    nm = gr ? PyList_AsTuple(PyTuple_GET_ITEM(cl, 2)) : NULL;
    na = nm == NULL ? NULL : size == 6 ? PyList_AsTuple(PyTuple_GET_ITEM(cl, 5)) : PyTuple_New(0);
    if (na == NULL) {
        goto done;
    }
    Py_ssize_t ns = PyTuple_GET_SIZE(sp), ng = PyTuple_GET_SIZE(gr), nn = PyTuple_GET_SIZE(nm);
    Py_ssize_t nna = PyTuple_GET_SIZE(na);
    spans = malloc((size_t)(ns ? ns : 1) * sizeof(tgc_span));
    grads = malloc((size_t)(ng ? ng : 1) * sizeof(tgc_grad_mark));
    named = malloc((size_t)(nn ? nn : 1) * sizeof(tgc_named));
    names = malloc((size_t)(nna ? nna : 1) * sizeof(tgc_name_mark));
    if (spans == NULL || grads == NULL || named == NULL || names == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < ns; i++) {
        PyObject *r = conv__row(sp, i, 3, "span");
        int64_t ph, t0, t1;
        if (r == NULL || conv__i64(PyTuple_GET_ITEM(r, 0), &ph, "a span's phase") < 0 ||
            conv__i64(PyTuple_GET_ITEM(r, 1), &t0, "a span's start") < 0 ||
            conv__i64(PyTuple_GET_ITEM(r, 2), &t1, "a span's end") < 0) {
            goto done;
        }
        if (ph < 0 || ph >= TGC_NPHASE || t0 > t1) {
            PyErr_Format(PyExc_ValueError, "span %zd: phase must be 0..%d and start <= end", i,
                         TGC_NPHASE - 1);
            goto done;
        }
        spans[i] = (tgc_span){t0, t1, (uint8_t)ph};
    }
    for (Py_ssize_t i = 0; i < ng; i++) {
        PyObject *r = conv__row(gr, i, 2, "grad mark");
        if (r == NULL || conv__addr(PyTuple_GET_ITEM(r, 0), &grads[i].addr, "a grad's address") < 0 ||
            conv__i64(PyTuple_GET_ITEM(r, 1), &grads[i].time, "a grad's time") < 0) {
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *r = conv__row(nm, i, 2, "named block");
        int64_t cat;
        if (r == NULL || conv__addr(PyTuple_GET_ITEM(r, 0), &named[i].addr, "a block's address") < 0 ||
            conv__i64(PyTuple_GET_ITEM(r, 1), &cat, "a block's category") < 0) {
            goto done;
        }
        if (cat < 0 || cat >= TGC_NCAT) {
            PyErr_Format(PyExc_ValueError, "named block %zd: category must be 0..%d", i,
                         TGC_NCAT - 1);
            goto done;
        }
        named[i].category = (uint8_t)cat;
    }
    for (Py_ssize_t i = 0; i < nna; i++) {
        PyObject *r = conv__row(na, i, 3, "name mark");
        int64_t index;
        if (r == NULL || conv__addr(PyTuple_GET_ITEM(r, 0), &names[i].addr, "a name's address") < 0) {
            goto done;
        }
        if (PyTuple_GET_ITEM(r, 1) == Py_None) {
            names[i].time = INT64_MAX;  /* alive at the end */
        }
        else if (conv__i64(PyTuple_GET_ITEM(r, 1), &names[i].time, "a name's time") < 0) {
            goto done;
        }
        if (conv__i64(PyTuple_GET_ITEM(r, 2), &index, "a name's index") < 0) {
            goto done;
        }
        if (index < 0 || index > UINT32_MAX) {
            PyErr_Format(PyExc_ValueError, "name mark %zd: index out of range", i);
            goto done;
        }
        names[i].name = (uint32_t)index;
    }
    c->spans = spans;
    c->nspans = (size_t)ns;
    c->grads = grads;
    c->ngrads = (size_t)ng;
    c->named = named;
    c->nnamed = (size_t)nn;
    c->names = names;
    c->nnames = (size_t)nna;
    spans = NULL;
    grads = NULL;
    named = NULL;
    names = NULL;
    rc = 0;
done:
    free(spans);
    free(grads);
    free(named);
    free(names);
    Py_XDECREF(sp);
    Py_XDECREF(gr);
    Py_XDECREF(nm);
    Py_XDECREF(na);
    return rc;
}

/* bytes of n native uint32 values */
static PyObject *
conv__u32_bytes(const uint32_t *v, size_t n)
{
    return PyBytes_FromStringAndSize((const char *)v, (Py_ssize_t)(n * sizeof(uint32_t)));
}

static PyObject *
conv__categories(const uint64_t *v, size_t stride, uint32_t n)
{
    PyObject *l = PyList_New(TGC_NCAT);
    for (int k = 0; l != NULL && k < TGC_NCAT; k++) {
        PyObject *col = PyList_New(n);
        for (uint32_t c = 0; col != NULL && c < n; c++) {
            PyObject *x = PyLong_FromUnsignedLongLong(v[(size_t)c * stride + (size_t)k]);
            if (x == NULL) {
                Py_CLEAR(col);
                break;
            }
            PyList_SET_ITEM(col, c, x);
        }
        if (col == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, k, col);
    }
    return l;
}

/* _timeline(trace, pre, columns, detail, use_free_requested, classify=None) -> dict
 *   trace: one device's trace entries (dicts with action, addr, size); pre: [(addr, size)]
 *   of blocks alive at the end: those whose address the trace never allocates were alive
 *   before it. Event indices in the result are positions in trace
 *   (pre-existing ones: -1); oom_at pairs each OOM's trace position with its event position
 *   (the replay's clock, which places it in a column). classify: None, or (spans, grads,
 *   named[, hints, pre_hints, names]) for categories over time (see conv__classify and
 *   timeline.h); each band then ends with its category and rule, and cat_active (per category,
 *   per column), at_peak, peak_event (trace position, -1: before the trace) are filled, and
 *   labels (bytes, per trace entry: the TGC_LABEL of the allocation its alloc entry makes, or
 *   its free frees when that one began before the trace; 0 elsewhere), pre_labels (per block
 *   of pre; 0 for those the trace allocates), name_index and pre_name_index (the same, native
 *   uint32: the name marks' indices), inferred_spans [(phase, t0, t1)], rules (allocations per
 *   rule, 16 counts). */
PyObject *
tgc_alloc_timeline(PyObject *cols, PyObject *pre, unsigned columns, unsigned detail,
                   int use_free_requested, PyObject *classify)
{
    if (!PyList_Check(pre)) {
        PyErr_SetString(PyExc_TypeError, "_timeline(columns: tuple, pre: list, ...)");
        return NULL;
    }
    if (columns == 0 || columns > 100000 || detail > 100000) {
        PyErr_SetString(PyExc_ValueError, "columns must be 1..100000 and detail 0..100000");
        return NULL;
    }
    tgc_tcols c;
    if (tgc_alloc_cols(cols, &c) < 0) {
        return NULL;
    }
    PyObject *pres = PyList_AsTuple(pre);  /* new: a fixed copy */
    PyObject *result = NULL, *oom_at = NULL, *ooms = NULL, *bands = NULL;
    PyObject *names = NULL, *cats = NULL, *at_peak = NULL;
    PyObject *labels = NULL, *pre_labels = NULL, *name_index = NULL, *pre_name_index = NULL;
    PyObject *inferred = NULL, *rules = NULL;
    tgc_event *ev = NULL;
    uint32_t *pre_of = NULL;  /* the PRE events' blocks: their positions in pre */
    uint8_t *lab = NULL, *pre_lab = NULL;
    uint32_t *nam = NULL, *pre_nam = NULL;
    tgc_timeline tl = {0};
    tgc_classify cls = {0};
    conv_hints hints = {0};
    tgc_ptrmap allocs = {0};  /* addresses the trace allocates (+1: 0 is the empty key) */
    int built = 0, with_cls = classify != NULL && classify != Py_None;
    uint8_t free_kind = use_free_requested ? TGC_TK_FREE_REQUESTED : TGC_TK_FREE_COMPLETED;
    if (pres == NULL) {
        goto done;
    }
    if (with_cls && conv__classify(classify, &cls, &hints) < 0) {
        goto done;
    }
    /* times are read only to classify: a bad one the columns noted is an error then */
    Py_ssize_t bad = PyTuple_GET_SIZE(cols) >= 8 ? PyLong_AsSsize_t(PyTuple_GET_ITEM(cols, 6)) : -1;
    if (bad == -1 && PyErr_Occurred()) {
        goto done;
    }
    if (with_cls && bad >= 0) {
        PyErr_Format(PyExc_ValueError, "trace entry %zd: time_us %s", bad,
                     PyObject_IsTrue(PyTuple_GET_ITEM(cols, 7)) ? "out of range"
                                                                : "must be an int");
        goto done;
    }
    size_t nt = c.n;
    Py_ssize_t np = PyTuple_GET_SIZE(pres);
    if (nt + (size_t)np >= (size_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "trace too long");
        goto done;
    }
    if (hints.pre_hints != NULL && hints.npre_hints != (size_t)np) {
        PyErr_SetString(PyExc_ValueError, "classify: pre_hints must hold one hint per block of pre");
        goto done;
    }
    ev = malloc((nt + (size_t)np + 1) * sizeof(tgc_event));
    pre_of = malloc(((size_t)np + 1) * sizeof(uint32_t));
    oom_at = PyList_New(0);
    if (ev == NULL || pre_of == NULL || oom_at == NULL) {
        if (oom_at != NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    /* A block alive at the end was there before the trace only if the trace never allocates
     * its address: the trace's allocations first (a set of addresses; the caller may pass every
     * live block) */
    if (np > 0 && tgc_ptrmap_init(&allocs, nt + 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < nt && np > 0; i++) {
        if (c.kind[i] == TGC_TK_ALLOC) {
            (void)tgc_ptrmap_put(&allocs, (const void *)(uintptr_t)(c.addr[i] + 1), 0);
        }
    }
    size_t n = 0;
    for (Py_ssize_t i = 0; i < np; i++) {
        unsigned long long addr, size;
        PyObject *t = PyTuple_GET_ITEM(pres, i);
        if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "KK", &addr, &size)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "pre: expected (addr, size) tuples");
            }
            goto done;
        }
        if (tgc_ptrmap_get(&allocs, (const void *)(uintptr_t)(addr + 1)) != UINT32_MAX) {
            continue;  /* allocated in the trace: that allocation is it */
        }
        pre_of[n] = (uint32_t)i;
        ev[n++] = (tgc_event){addr, size, TGC_TIME_NONE, UINT32_MAX, TGC_EV_PRE,
                              hints.pre_hints != NULL ? hints.pre_hints[i] : 0};
    }
    size_t npre = n;
    /* an entry without a time takes the previous entry's */
    int64_t time = TGC_TIME_NONE;
    for (size_t i = 0; i < nt; i++) {
        uint8_t k = c.kind[i];
        if (c.time[i] != INT64_MIN) {
            time = c.time[i];
        }
        int kind = k == TGC_TK_ALLOC ? TGC_EV_ALLOC : k == free_kind ? TGC_EV_FREE
                   : k == TGC_TK_OOM ? TGC_EV_OOM : -1;
        if (kind < 0) {
            continue;
        }
        if (kind == TGC_EV_OOM) {
            /* (trace position, event position: the replay's column clock, pre-existing first) */
            PyObject *ix = Py_BuildValue("(nn)", (Py_ssize_t)i, (Py_ssize_t)n);
            int rc = ix ? PyList_Append(oom_at, ix) : -1;
            Py_XDECREF(ix);
            if (rc < 0) {
                goto done;
            }
        }
        uint32_t sid = c.stack[i];
        ev[n++] = (tgc_event){kind == TGC_EV_OOM ? 0 : c.addr[i], kind == TGC_EV_OOM ? 0 : c.size[i],
                              time, (uint32_t)i, (uint8_t)kind,
                              hints.hints != NULL && sid < hints.nhints ? hints.hints[sid] : 0};
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS  /* plain C over our own arrays */
    rc = tgc_timeline_build(ev, n, columns, detail, with_cls ? &cls : NULL, &tl);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    built = 1;
    bands = PyList_New(tl.nbands);
    for (uint32_t b = 0; bands != NULL && b < tl.nbands; b++) {
        const tgc_band *bd = &tl.bands[b];
        PyObject *offs = conv__u64_list(bd->offset, bd->col1 - bd->col0);
        PyObject *item = offs ? Py_BuildValue(
            "(nnKIINKii)", bd->alloc_event == UINT32_MAX ? (Py_ssize_t)-1 : (Py_ssize_t)bd->alloc_event,
            bd->free_event == UINT32_MAX ? (Py_ssize_t)-1 : (Py_ssize_t)bd->free_event,
            (unsigned long long)bd->size, bd->col0, bd->col1, offs,
            (unsigned long long)bd->addr, (int)bd->category, (int)bd->rule) : NULL;
        if (item == NULL) {
            Py_CLEAR(bands);
            break;
        }
        PyList_SET_ITEM(bands, b, item);
    }
    if (bands == NULL) {
        goto done;
    }
    ooms = PyList_New(PyList_GET_SIZE(oom_at));
    for (Py_ssize_t k = 0; ooms != NULL && k < PyList_GET_SIZE(oom_at); k++) {
        PyObject *pos = PyTuple_GET_ITEM(PyList_GET_ITEM(oom_at, k), 0);
        PyList_SET_ITEM(ooms, k, Py_NewRef(pos));
    }
    if (ooms == NULL) {
        goto done;
    }
    names = PyTuple_New(TGC_NCAT);
    for (int k = 0; names != NULL && k < TGC_NCAT; k++) {
        PyObject *x = PyUnicode_FromString(tgc_category_names[k]);
        if (x == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, k, x);
    }
    if (names == NULL) {
        goto done;
    }
    if (with_cls) {
        cats = conv__categories(tl.cat_active, TGC_NCAT, tl.columns);
        at_peak = conv__u64_list(tl.at_peak, TGC_NCAT);
        rules = conv__u64_list(tl.rule_allocs, 16);
        inferred = PyList_New((Py_ssize_t)tl.ninferred);
        if (cats == NULL || at_peak == NULL || rules == NULL || inferred == NULL) {
            goto done;
        }
        for (size_t k = 0; k < tl.ninferred; k++) {
            PyObject *sp = Py_BuildValue("(iLL)", (int)tl.inferred[k].phase,
                                         (long long)tl.inferred[k].t0, (long long)tl.inferred[k].t1);
            if (sp == NULL) {
                goto done;
            }
            PyList_SET_ITEM(inferred, (Py_ssize_t)k, sp);  /* stolen */
        }
        /* the labels by trace entry and by block of pre, from the events' */
        lab = calloc(nt + 1, 1);
        pre_lab = calloc((size_t)np + 1, 1);
        nam = calloc(nt + 1, sizeof(uint32_t));
        pre_nam = calloc((size_t)np + 1, sizeof(uint32_t));
        if (lab == NULL || pre_lab == NULL || nam == NULL || pre_nam == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            if (i < npre) {
                pre_lab[pre_of[i]] = tl.label[i];
                pre_nam[pre_of[i]] = tl.name[i];
            }
            else if (ev[i].index < nt) {
                lab[ev[i].index] = tl.label[i];
                nam[ev[i].index] = tl.name[i];
            }
        }
        labels = PyBytes_FromStringAndSize((const char *)lab, (Py_ssize_t)nt);
        pre_labels = PyBytes_FromStringAndSize((const char *)pre_lab, np);
        name_index = conv__u32_bytes(nam, nt);
        pre_name_index = conv__u32_bytes(pre_nam, (size_t)np);
        if (labels == NULL || pre_labels == NULL || name_index == NULL || pre_name_index == NULL) {
            goto done;
        }
    }
    Py_ssize_t peak_event = tl.peak_pos == SIZE_MAX || ev[tl.peak_pos].index == UINT32_MAX
                            ? -1 : (Py_ssize_t)ev[tl.peak_pos].index;
    result = Py_BuildValue("{s:N,s:N,s:N,s:K,s:n,s:O,s:O,s:O,s:n,s:O,s:O,s:O,s:n,s:n,"
                           "s:O,s:O,s:O,s:O,s:O,s:O}",
                           "active", conv__u64_list(tl.active, tl.columns),
                           "peak", conv__u64_list(tl.peak, tl.columns),
                           "small", conv__u64_list(tl.small, tl.columns),
                           "max", (unsigned long long)tl.max_active,
                           "allocs", (Py_ssize_t)tl.nallocs, "bands", bands, "ooms", ooms,
                           "oom_at", oom_at, "events", (Py_ssize_t)n, "categories", names,
                           "cat_active", cats ? cats : Py_None,
                           "at_peak", at_peak ? at_peak : Py_None, "peak_event", peak_event,
                           "peak_pos", tl.peak_pos == SIZE_MAX ? (Py_ssize_t)-1
                                                               : (Py_ssize_t)tl.peak_pos,
                           "labels", labels ? labels : Py_None,
                           "pre_labels", pre_labels ? pre_labels : Py_None,
                           "name_index", name_index ? name_index : Py_None,
                           "pre_name_index", pre_name_index ? pre_name_index : Py_None,
                           "inferred_spans", inferred ? inferred : Py_None,
                           "rules", rules ? rules : Py_None);
done:
    if (built) {
        tgc_timeline_free(&tl);
    }
    free(ev);
    free(pre_of);
    free(lab);
    free(pre_lab);
    free(nam);
    free(pre_nam);
    free((void *)cls.spans);
    free((void *)cls.grads);
    free((void *)cls.named);
    free((void *)cls.names);
    tgc_ptrmap_free(&allocs);
    Py_XDECREF(labels);
    Py_XDECREF(pre_labels);
    Py_XDECREF(name_index);
    Py_XDECREF(pre_name_index);
    Py_XDECREF(inferred);
    Py_XDECREF(rules);
    Py_XDECREF(pres);
    Py_XDECREF(oom_at);
    Py_XDECREF(ooms);
    Py_XDECREF(bands);
    Py_XDECREF(names);
    Py_XDECREF(cats);
    Py_XDECREF(at_peak);
    return result;
}

/* _segmap(trace, segments, device, upto, use_free_requested) -> [(kind, addr, size, event)]
 *   The segments (kind 0) and allocations (kind 1) of one device after trace[0:upto] (trace
 *   positions), from the snapshot's final segments. event: the trace position that made it,
 *   -1 when it predates what the trace shows. */
PyObject *
tgc_alloc_segmap(PyObject *trace, PyObject *segments, int device, Py_ssize_t upto,
                 int use_free_requested)
{
    if (!PyList_Check(trace) || !PyList_Check(segments)) {
        PyErr_SetString(PyExc_TypeError, "_segmap(trace: list, segments: list, ...)");
        return NULL;
    }
    PyObject *items = PyList_AsTuple(trace);  /* new: a fixed copy */
    tgc_sm_event *ev = NULL;
    tgc_sm_item *fin = NULL, *out = NULL;
    tgc_alloc a;  /* freed on every path: tgc_alloc_free is safe on a partial load */
    size_t n = 0, nfin = 0, nout = 0, upto_ev = 0;
    PyObject *result = NULL;
    tgc_alloc_init(&a);
    if (items == NULL) {
        goto done;
    }
    Py_ssize_t nt = PyTuple_GET_SIZE(items);
    if (upto < 0 || upto > nt) {
        PyErr_Format(PyExc_ValueError, "event %zd is outside the trace (0..%zd)", upto, nt);
        goto done;
    }
    ev = malloc((size_t)(nt ? nt : 1) * sizeof(tgc_sm_event));
    if (ev == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nt; i++) {
        PyObject *e = PyTuple_GET_ITEM(items, i);  /* borrowed; the tuple keeps it */
        if (i == upto) {
            upto_ev = n;
        }
        if (!PyDict_Check(e)) {
            PyErr_Format(PyExc_ValueError, "trace entry %zd is not a dict", i);
            goto done;
        }
        PyObject *action = PyDict_GetItemString(e, "action");  /* borrowed */
        if (action == NULL || !PyUnicode_Check(action)) {
            PyErr_Format(PyExc_ValueError, "trace entry %zd has no str 'action'", i);
            goto done;
        }
        int act;
        if (PyUnicode_CompareWithASCIIString(action, "alloc") == 0) {
            act = TGC_SM_ALLOC;
        }
        else if (PyUnicode_CompareWithASCIIString(
                     action, use_free_requested ? "free_requested" : "free_completed") == 0) {
            act = TGC_SM_FREE;
        }
        else if (PyUnicode_CompareWithASCIIString(action, "segment_alloc") == 0 ||
                 PyUnicode_CompareWithASCIIString(action, "segment_map") == 0) {
            act = TGC_SM_SEG_ADD;
        }
        else if (PyUnicode_CompareWithASCIIString(action, "segment_free") == 0 ||
                 PyUnicode_CompareWithASCIIString(action, "segment_unmap") == 0) {
            act = TGC_SM_SEG_DEL;
        }
        else {
            continue;
        }
        uint64_t addr, size;
        if (tgc_alloc_u64(e, "addr", &addr, 0, 0) < 0 || tgc_alloc_u64(e, "size", &size, 0, 0) < 0) {
            goto done;
        }
        if (addr == UINT64_MAX) {
            PyErr_Format(PyExc_ValueError, "trace entry %zd: address out of range", i);
            goto done;
        }
        ev[n++] = (tgc_sm_event){addr, size, (uint32_t)i, (uint8_t)act};
    }
    if (upto == nt) {
        upto_ev = n;
    }
    /* The final state: the snapshot's segments of this device and their allocated blocks,
     * read (and validated) by the same loader as block attribution. */
    if (tgc_alloc_load(segments, &a) < 0) {
        goto done;
    }
    fin = malloc((a.nseg + a.nblk + 1) * sizeof(tgc_sm_item));
    if (fin == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < a.nseg; i++) {
        if (a.segs[i].device == device) {
            fin[nfin++] = (tgc_sm_item){a.segs[i].addr, a.segs[i].size, UINT32_MAX,
                                        TGC_SM_SEGMENT};
        }
    }
    for (size_t i = 0; i < a.nblk; i++) {
        if (a.blocks[i].device == device && a.blocks[i].state == TGC_BLOCK_ALLOCATED) {
            fin[nfin++] = (tgc_sm_item){a.blocks[i].addr, a.blocks[i].size, UINT32_MAX,
                                        TGC_SM_ALLOCATION};
        }
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tgc_segmap_at(ev, n, fin, nfin, upto_ev, &out, &nout);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyList_New((Py_ssize_t)nout);
    for (size_t i = 0; result != NULL && i < nout; i++) {
        PyObject *t = Py_BuildValue("(iKKn)", out[i].kind, (unsigned long long)out[i].addr,
                                    (unsigned long long)out[i].size,
                                    out[i].event == UINT32_MAX ? (Py_ssize_t)-1
                                                               : (Py_ssize_t)out[i].event);
        if (t == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, t);
    }
done:
    free(ev);
    free(fin);
    free(out);
    Py_XDECREF(items);
    tgc_alloc_free(&a);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* The field check of an untrusted trace, the common case                                      */

/* An exact int in [-2**63, 2**64), or absent (NULL). */
static int
conv__int_ok(PyObject *v)
{
    if (v == NULL) {
        return 1;
    }
    if (!PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow;
    (void)PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow < 0) {
        return 0;
    }
    if (overflow > 0) {
        (void)PyLong_AsUnsignedLongLong(v);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* The first index >= start of `trace` whose entry is not of the plain shape torch writes --
 * exact dicts with a str 'action'; 'addr', 'size', 'device_free', 'time_us' exact ints in
 * range when present; 'frames' absent, None or a list of dicts with str 'filename' and 'name'
 * and an int 'line' -- or len(trace). snapshot.check_snapshot looks at that entry carefully
 * (and says what is wrong, or goes on). Frames lists are checked once: torch shares one list
 * among the entries of a stack, so `seen` (a set of ids, shared across calls) remembers them.
 * Borrowed references only; no Python code runs (exact types). */
PyObject *
tgc_alloc_check_trace(PyObject *trace, Py_ssize_t start, PyObject *seen)
{
    static const char *const ints[] = {"addr", "size", "device_free", "time_us"};
    PyObject *keys[4] = {NULL}, *k_action = NULL, *k_frames = NULL, *k_filename = NULL,
             *k_name = NULL, *k_line = NULL;
    Py_ssize_t j = start < 0 ? 0 : start;
    int rc = -1;
    for (int i = 0; i < 4; i++) {
        if ((keys[i] = PyUnicode_InternFromString(ints[i])) == NULL) {
            goto done;
        }
    }
    k_action = PyUnicode_InternFromString("action");
    k_frames = PyUnicode_InternFromString("frames");
    k_filename = PyUnicode_InternFromString("filename");
    k_name = PyUnicode_InternFromString("name");
    k_line = PyUnicode_InternFromString("line");
    if (!k_action || !k_frames || !k_filename || !k_name || !k_line) {
        goto done;
    }
    for (; j < PyList_GET_SIZE(trace); j++) {  /* the list cannot change: no Python code runs */
        PyObject *e = PyList_GET_ITEM(trace, j);  /* borrowed */
        if (!PyDict_CheckExact(e)) {
            break;
        }
        PyObject *a = PyDict_GetItemWithError(e, k_action);
        if (a == NULL || !PyUnicode_CheckExact(a)) {
            break;
        }
        int ok = 1;
        for (int i = 0; i < 4 && ok; i++) {
            ok = conv__int_ok(PyDict_GetItemWithError(e, keys[i]));
        }
        if (!ok) {
            break;
        }
        PyObject *f = PyDict_GetItemWithError(e, k_frames);
        if (f == NULL || f == Py_None) {
            continue;
        }
        if (!PyList_CheckExact(f)) {
            break;
        }
        PyObject *id = PyLong_FromVoidPtr(f);  /* new reference */
        if (id == NULL) {
            goto done;
        }
        int known = PySet_Contains(seen, id);
        if (known == 0) {
            for (Py_ssize_t m = 0; m < PyList_GET_SIZE(f) && ok; m++) {
                PyObject *fr = PyList_GET_ITEM(f, m);
                if (!PyDict_CheckExact(fr)) {
                    ok = 0;
                    break;
                }
                PyObject *fn = PyDict_GetItemWithError(fr, k_filename);
                PyObject *nm = PyDict_GetItemWithError(fr, k_name);
                ok = (fn == NULL || PyUnicode_CheckExact(fn)) &&
                     (nm == NULL || PyUnicode_CheckExact(nm)) &&
                     conv__int_ok(PyDict_GetItemWithError(fr, k_line));
            }
            if (ok) {
                known = PySet_Add(seen, id) < 0 ? -1 : 1;
            }
        }
        Py_DECREF(id);
        if (known < 0) {
            goto done;
        }
        if (!ok) {
            break;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < 4; i++) {
        Py_XDECREF(keys[i]);
    }
    Py_XDECREF(k_action);
    Py_XDECREF(k_frames);
    Py_XDECREF(k_filename);
    Py_XDECREF(k_name);
    Py_XDECREF(k_line);
    if (rc < 0 || PyErr_Occurred()) {
        return NULL;
    }
    return PyLong_FromSsize_t(j);
}