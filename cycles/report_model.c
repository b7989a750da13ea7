/* report_model.c: the helpers of a report's model (contract in report_model.h), used by the
 * builder, the writers and the CycleReport alike: freeing a model in one place, a buffer as a
 * str, a string cut to a bound, a dict of interned keys. Calls nothing else of a report. */
#include "cycles.h"
#include "report_model.h"

void
tgc_report_tensor_clear(tgc_rtensor *rt)
{
    Py_CLEAR(rt->info);
    Py_CLEAR(rt->storage_key);
    Py_CLEAR(rt->shape);
    Py_CLEAR(rt->dtype_s);
    Py_CLEAR(rt->device_s);
    Py_CLEAR(rt->type_name);
    Py_CLEAR(rt->stack);
    Py_CLEAR(rt->type);
    tgc_buf_free(&rt->line);
}

void
tgc_report_model_free(tgc_report_model *m)
{
    for (uint32_t v = 0; v < m->n; v++) {
        if (m->names != NULL) {
            tgc_names_clear(&m->names[v]);
        }
        if (m->ts != NULL) {
            tgc_report_tensor_clear(&m->ts[v]);
        }
        if (m->tname != NULL) {
            Py_XDECREF(m->tname[v]);
        }
        if (m->desc != NULL) {
            Py_XDECREF(m->desc[v]);
        }
    }
    for (uint32_t k = 0; m->groups != NULL && k < m->ngroups; k++) {
        Py_XDECREF(m->groups[k].cycle);
        Py_XDECREF(m->groups[k].hint);
        Py_XDECREF(m->groups[k].more);
    }
    PyMem_Free(m->items);
    PyMem_Free(m->names);
    PyMem_Free(m->tname);
    PyMem_Free(m->desc);
    PyMem_Free(m->ts);
    PyMem_Free(m->edges);
    free(m->is_target);
    free(m->draw);
    free(m->skip);
    free(m->bridges);
    free(m->owner);
    free(m->groups);
    tgc_graph_free(&m->g);
    tgc_analysis_free(&m->a);
    tgc_ptrmap_free(&m->map);
    Py_XDECREF(m->unknown);
    memset(m, 0, sizeof(*m));
}

PyObject *
tgc_report_str(const tgc_buf *o)
{
    if (o->oom) {
        return PyErr_NoMemory();
    }
    return PyUnicode_DecodeUTF8(o->data ? o->data : "", (Py_ssize_t)o->len, "replace");
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

PyObject *
tgc_report_dict(PyObject *const *keys, PyObject **vals, int n)
{
    PyObject *d = NULL;
    for (int i = 0; i < n; i++) {
        if (vals[i] == NULL) {
            goto done;
        }
    }
    d = tgc_compat_dict_presized(n);
    for (int i = 0; d != NULL && i < n; i++) {
        if (PyDict_SetItem(d, keys[i], vals[i]) < 0) {
            Py_CLEAR(d);
        }
    }
done:
    for (int i = 0; i < n; i++) {
        Py_XDECREF(vals[i]);
    }
    return d;
}
