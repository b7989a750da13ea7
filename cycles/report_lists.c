/* report_lists.c: the lists a CycleReport hands to Python (contract in report_write.h):
 * .tensors, .edges, .groups and .hints, made from the model once, when the report is made.
 * Reads the model only. */
#include "cycles.h"
#include "report_write.h"

/* The dict of group k: count, objects, tensors, nbytes, hint, cycle, drawn, signature. New
 * reference, or NULL with an exception. */
static PyObject *
lists__group(const tgc_report_model *m, uint32_t k, uint64_t sig)
{
    tgc_cycles *c = m->c;
    const tgc_group *gi = &m->groups[k];
    PyObject *const keys[] = {c->keys[TGC_KEY_COUNT_], c->keys[TGC_KEY_OBJECTS],
                              c->keys[TGC_KEY_TENSORS], c->keys[TGC_KEY_NBYTES],
                              c->keys[TGC_KEY_HINT], c->keys[TGC_KEY_CYCLE],
                              c->keys[TGC_KEY_DRAWN], c->keys[TGC_KEY_SIGNATURE]};
    PyObject *vals[] = {PyLong_FromUnsignedLong(gi->count), PyLong_FromUnsignedLong(gi->nodes),
                        PyLong_FromUnsignedLong(gi->total_targets),
                        PyLong_FromUnsignedLongLong(gi->total_bytes), Py_NewRef(gi->hint),
                        Py_NewRef(gi->cycle), Py_NewRef(gi->drawn ? Py_True : Py_False),
                        tgc_report_signature_str(sig)};
    return tgc_report_dict(keys, vals, 8);
}

int
tgc_report_lists(const tgc_report_model *m, const uint64_t *sig, PyObject **tensors,
                 PyObject **edges, PyObject **groups, PyObject **hints)
{
    PyObject *ts = PyList_New(0), *es = PyList_New(0), *gs = PyList_New(0), *hs = PyList_New(0);
    if (!ts || !es || !gs || !hs) {
        goto error;
    }
    /* The tensors of interest held by cycles, in the garbage's order. */
    for (uint32_t v = 0; v < m->n; v++) {
        if (m->ts[v].info != NULL && (m->a.role[v] & TGC_ROLE_TARGET) &&
            PyList_Append(ts, m->ts[v].info) < 0) {
            goto error;
        }
    }
    /* Each drawn reference as (referrer's type name, label, referent's type name). */
    for (size_t e = 0; e < m->nedges; e++) {
        const tgc_drawn_edge *de = &m->edges[e];
        PyObject *tup = PyTuple_Pack(3, m->tname[de->src], de->label, m->tname[de->dst]);
        if (tup == NULL || PyList_Append(es, tup) < 0) {
            Py_XDECREF(tup);
            goto error;
        }
        Py_DECREF(tup);
    }
    for (uint32_t k = 0; k < m->ngroups; k++) {
        PyObject *gd = lists__group(m, k, sig[k]);
        if (gd == NULL || PyList_Append(gs, gd) < 0 || PyList_Append(hs, m->groups[k].hint) < 0) {
            Py_XDECREF(gd);
            goto error;
        }
        Py_DECREF(gd);
    }
    *tensors = ts;
    *edges = es;
    *groups = gs;
    *hints = hs;
    return 0;
error:
    Py_XDECREF(ts);
    Py_XDECREF(es);
    Py_XDECREF(gs);
    Py_XDECREF(hs);
    *tensors = *edges = *groups = *hints = NULL;
    return -1;
}
