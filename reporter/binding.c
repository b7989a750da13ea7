/* binding.c: the Python binding of reporter/: the MemReporter's walk and rows (walk.c), the index
 * of live tensors and its holds (index.c), the storage keys of checkpoint() and growth()
 * (storages.c), the _LineProfiler heap type (the line profiler's engine, lineprof.c,
 * with its memory source: lineprof_events.c), and the reporter part of the module state, made here
 * at module exec. It only converts arguments and results. The line profiler's event sources are
 * lineprof_monitoring.c and lineprof_trace.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "tensorgc/internals.h"
#include "module/state.h"
#include "reporter.h"
#include "binding.h"

/* ------------------------------------------------------------------------------------------ */
/* Live tensors                                                                                */

PyDoc_STRVAR(live_tensors_doc,
"_live_tensors($module, /)\n--\n\n"
"Every tensor object the collector tracks (frozen objects excepted), as a list.");

static PyObject *
live_tensors(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_reporter *r = tgc_state_of(module)->reporter;
    return r->index != NULL ? tgc_index_tensors(r) : tgc_walk_tensors(r);
}

PyDoc_STRVAR(track_tensors_doc,
"_track_tensors($module, enabled, /)\n--\n\n"
"Turns the index of live tensors on or off (see reporter/index.c): the user's switch, which "
"the holds' releases leave as set; returns whether it is on (False where the collector has no "
"generations).");

static PyObject *
track_tensors(PyObject *module, PyObject *arg)
{
    tgc_reporter *r = tgc_state_of(module)->reporter;
    int on = PyObject_IsTrue(arg);
    if (on < 0 || (on ? tgc_index_enable(r) : tgc_index_disable(r)) < 0) {
        return NULL;
    }
    return PyBool_FromLong(r->index != NULL);
}

PyDoc_STRVAR(index_hold_doc,
"_index_hold($module, /)\n--\n\n"
"Holds the index of live tensors on until the matching _index_release(), turning it on (one "
"walk of the heap) if it is off; a hold that turned it on has the last release turn it off. "
"Returns whether it is on (False where the collector has no generations).");

static PyObject *
index_hold(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    int on = tgc_index_hold(tgc_state_of(module)->reporter);
    return on < 0 ? NULL : PyBool_FromLong(on);
}

PyDoc_STRVAR(index_release_doc,
"_index_release($module, /)\n--\n\n"
"Ends one _index_hold(); releases beyond the holds are ignored.");

static PyObject *
index_release(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    if (tgc_index_release(tgc_state_of(module)->reporter) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(storage_keys_doc,
"_storage_keys($module, tensors, device, before, /)\n--\n\n"
"The storages the tensors of the list hold, each once, as MemReporter rows count them: "
"(keys, where, matched, nbytes, table). keys: (device, data address, bytes) of each storage on "
"the devices device keeps (None: every device, or (type, index or None)), leaving out those in "
"before and counting them in matched; before: None, a set or frozenset of keys, or the table "
"of an earlier call; where: the index in tensors of the tensor that claims each key (None "
"without before); nbytes: the keys' bytes; table: without before, the keys' table for a later "
"call's before (else None). See reporter/storages.c.");

static PyObject *
storage_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "_storage_keys() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *tensors = args[0], *device = args[1], *before = args[2];
    tgc_reporter *r = tgc_state_of(module)->reporter;
    tgc_device_filter f = {NULL, -1};
    if (!PyList_Check(tensors)) {
        PyErr_SetString(PyExc_TypeError, "_storage_keys() takes a list of tensors");
        return NULL;
    }
    if (device != Py_None) {
        PyObject *idx = PyTuple_Check(device) && PyTuple_GET_SIZE(device) == 2
                            ? PyTuple_GET_ITEM(device, 1) : NULL;  /* borrowed */
        if (idx == NULL || !PyUnicode_Check(PyTuple_GET_ITEM(device, 0)) ||
            (idx != Py_None && !PyLong_Check(idx))) {
            PyErr_SetString(PyExc_TypeError,
                            "_storage_keys(): device must be None or (type, index or None)");
            return NULL;
        }
        f.type = PyTuple_GET_ITEM(device, 0);
        if (idx != Py_None) {
            f.index = PyLong_AsLong(idx);
            if (f.index < 0) {
                if (!PyErr_Occurred()) {
                    PyErr_SetString(PyExc_ValueError, "_storage_keys(): a device index is >= 0");
                }
                return NULL;
            }
        }
    }
    if (before != Py_None && !PyAnySet_Check(before) && !PyTuple_Check(before)) {
        PyErr_SetString(PyExc_TypeError,
                        "_storage_keys(): before must be None, a set, a frozenset or a table");
        return NULL;
    }
    if (tgc_tensor_resolve(r->tensor) <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "tensorgc: torch is not imported");
        }
        return NULL;
    }
    tgc_storage_keys_result res;
    if (tgc_storage_keys(r, tensors, &f, before == Py_None ? NULL : before, &res) < 0) {
        return NULL;
    }
    if (res.where == NULL) {
        res.where = Py_NewRef(Py_None);
    }
    if (res.table == NULL) {
        res.table = Py_NewRef(Py_None);
    }
    return Py_BuildValue("(NNnKN)", res.keys, res.where, res.matched, res.nbytes,
                         res.table);  /* N: steals keys, where and table */
}

PyDoc_STRVAR(is_tensor_doc,
"_is_tensor($module, obj, /)\n--\n\nWhether obj is a tensor: a type check in C (no isinstance, "
"no __class__).");

static PyObject *
is_tensor(PyObject *module, PyObject *obj)
{
    tgc_tensor_state *tn = tgc_state_of(module)->tensor;
    (void)tgc_tensor_resolve(tn);  /* before torch is imported nothing is a tensor */
    return PyBool_FromLong(tgc_tensor_check(tn, obj));
}

PyDoc_STRVAR(tensor_rows_doc,
"_tensor_rows($module, tensors, /)\n--\n\n"
"For each tensor of the list: (storage_ptr, storage_nbytes, device, device_type, device_index, "
"shape, dtype, numel, is_sparse, storage, parts, nbytes, no_storage); see reporter/walk.c.");

static PyObject *
tensor_rows(PyObject *module, PyObject *tensors)
{
    tgc_reporter *r = tgc_state_of(module)->reporter;
    if (!PyList_Check(tensors)) {
        PyErr_SetString(PyExc_TypeError, "_tensor_rows() takes a list of tensors");
        return NULL;
    }
    if (tgc_tensor_resolve(r->tensor) <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "tensorgc: torch is not imported");
        }
        return NULL;
    }
    return tgc_walk_rows(r, tensors);
}

PyMethodDef tgc_reporter_methods[] = {
    {"_live_tensors", (PyCFunction)live_tensors, METH_NOARGS, live_tensors_doc},
    {"_track_tensors", (PyCFunction)track_tensors, METH_O, track_tensors_doc},
    {"_index_hold", (PyCFunction)index_hold, METH_NOARGS, index_hold_doc},
    {"_index_release", (PyCFunction)index_release, METH_NOARGS, index_release_doc},
    {"_storage_keys", (PyCFunction)(void (*)(void))storage_keys, METH_FASTCALL, storage_keys_doc},
    {"_tensor_rows", (PyCFunction)tensor_rows, METH_O, tensor_rows_doc},
    {"_is_tensor", (PyCFunction)is_tensor, METH_O, is_tensor_doc},
    {NULL, NULL, 0, NULL},
};

/* The index's gc.callbacks entry, bound to the module so it finds the state. */
static PyObject *
index_hook(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {  /* the collector always passes (phase, info) */
        PyErr_Format(PyExc_TypeError, "_index_hook() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    tgc_state *st = tgc_state_of(module);
    if (st != NULL && st->reporter != NULL) {
        tgc_index_callback(st->reporter, args[0], args[1]);
    }
    Py_RETURN_NONE;
}

static PyMethodDef index_hook_def = {
    "_index_hook", (PyCFunction)(void (*)(void))index_hook, METH_FASTCALL,
    "_index_hook($module, phase, info, /)\n--\n\ntensorgc's tensor-index gc callback (internal).",
};

/* ------------------------------------------------------------------------------------------ */
/* The _LineProfiler type                                                                      */

/* The line profiler's part of the state of p's module, or NULL with an exception. */
static tgc_lineprof *
lp__state(tgc_lineprof_object *p)
{
    tgc_state *st = tgc_state_of(PyType_GetModule(Py_TYPE(p)));
    if (st == NULL || st->reporter == NULL || st->reporter->lineprof.enabled == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "tensorgc has been shut down");
        }
        return NULL;
    }
    return &st->reporter->lineprof;
}
static int
lp_traverse(tgc_lineprof_object *p, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(p));
    Py_VISIT(p->codes);
    Py_VISIT(p->keys);
    Py_VISIT(p->stats_fn);
    Py_VISIT(p->reset_fn);
    Py_VISIT(p->device_obj);
    return 0;
}

static int
lp_clear(tgc_lineprof_object *p)
{
    Py_CLEAR(p->codes);
    Py_CLEAR(p->keys);
    Py_CLEAR(p->stats_fn);
    Py_CLEAR(p->reset_fn);
    Py_CLEAR(p->device_obj);
    return 0;
}

static void
lp_dealloc(tgc_lineprof_object *p)
{
    PyTypeObject *tp = Py_TYPE(p);
    PyObject_GC_UnTrack(p);
    lp_clear(p);
    tgc_lp_free(&p->engine);
    PyMem_Free(p->reading);
    tp->tp_free(p);
    Py_DECREF(tp);
}

static PyObject *
lp_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "_LineProfiler() takes no arguments");
        return NULL;
    }
    tgc_lineprof_object *p = (tgc_lineprof_object *)tp->tp_alloc(tp, 0);
    if (p == NULL) {
        return NULL;
    }
    p->codes = PyList_New(0);
    p->reading = PyMem_Calloc(LP_MAX_KEYS, sizeof(int64_t));
    if (p->codes == NULL || p->reading == NULL) {
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    p->source = LP_SRC_RSS;
    p->rss_resettable = 1;
    return (PyObject *)p;
}

static PyObject *
lp_add_code(tgc_lineprof_object *p, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "add_code() takes a code object, not %.100s",
                     Py_TYPE(code)->tp_name);
        return NULL;
    }
    int has = PySequence_Contains(p->codes, code);
    if (has < 0 || (!has && PyList_Append(p->codes, code) < 0)) {
        return NULL;
    }
    if (p->keys != NULL &&
        tgc_lp_add_code(&p->engine, code, ((PyCodeObject *)code)->co_firstlineno) < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* set_source("rss") or set_source("cuda", device, stats_fn, reset_fn) */
static PyObject *
lp_set_source(tgc_lineprof_object *p, PyObject *args)
{
    const char *kind;
    int device = 0;
    PyObject *stats = NULL, *reset = NULL;
    if (!PyArg_ParseTuple(args, "s|iOO:set_source", &kind, &device, &stats, &reset)) {
        return NULL;
    }
    if (strcmp(kind, "rss") == 0) {
        p->source = LP_SRC_RSS;
        p->device = 0;
        Py_CLEAR(p->stats_fn);
        Py_CLEAR(p->reset_fn);
        Py_RETURN_NONE;
    }
    if (strcmp(kind, "cuda") != 0 || device < 0 || stats == NULL || reset == NULL ||
        !PyCallable_Check(stats) || !PyCallable_Check(reset)) {
        PyErr_SetString(PyExc_ValueError,
                        "set_source takes 'rss', or 'cuda', a device >= 0 and two callables");
        return NULL;
    }
    PyObject *dev = PyLong_FromLong(device);
    if (dev == NULL) {
        return NULL;
    }
    Py_XSETREF(p->device_obj, dev);
    Py_XSETREF(p->stats_fn, Py_NewRef(stats));
    Py_XSETREF(p->reset_fn, Py_NewRef(reset));
    p->source = LP_SRC_CUDA;
    p->device = device;
    Py_RETURN_NONE;
}

static PyObject *
lp_enable(tgc_lineprof_object *p, PyObject *Py_UNUSED(ignored))
{
    tgc_lineprof *lp = lp__state(p);
    if (lp == NULL) {
        return NULL;
    }
    if (p->enabled) {
        Py_RETURN_NONE;
    }
    if (tgc_lineprof_start(p) < 0) {
        return NULL;
    }
    if (p->enabled) {
        Py_RETURN_NONE;  /* the reading (Python code) enabled it already: listed once */
    }
    if (PyList_Append(lp->enabled, (PyObject *)p) < 0) {
        return NULL;
    }
    p->enabled = 1;
    Py_RETURN_NONE;
}

static PyObject *
lp_disable(tgc_lineprof_object *p, PyObject *Py_UNUSED(ignored))
{
    tgc_lineprof *lp = lp__state(p);
    if (lp == NULL) {
        return NULL;
    }
    p->read_ok = 0;  /* no later profiler of this event shares its reading (or its layout) */
    if (p->enabled) {
        Py_ssize_t n = PyList_GET_SIZE(lp->enabled);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyList_GET_ITEM(lp->enabled, i) == (PyObject *)p) {
                p->enabled = 0;
                tgc_lp_drop_frames(&p->engine);
                if (PySequence_DelItem(lp->enabled, i) < 0) {
                    return NULL;
                }
                break;
            }
        }
        p->enabled = 0;
    }
    Py_RETURN_NONE;
}

/* clear(forget_codes): drops the records (and the registered code objects when asked) */
static PyObject *
lp_clear_records(tgc_lineprof_object *p, PyObject *arg)
{
    int forget = PyObject_IsTrue(arg);
    if (forget < 0) {
        return NULL;
    }
    if (forget) {
        if (p->enabled) {
            PyErr_SetString(PyExc_RuntimeError, "disable the profiler before forgetting its functions");
            return NULL;
        }
        tgc_lp_free(&p->engine);
        Py_CLEAR(p->keys);
        if (PyList_SetSlice(p->codes, 0, PyList_GET_SIZE(p->codes), NULL) < 0) {
            return NULL;
        }
    }
    else if (p->keys != NULL) {
        tgc_lp_reset(&p->engine);
    }
    Py_RETURN_NONE;
}

/* records() -> [(code, line, hits, a: tuple, b: tuple)] for every line that ran */
static PyObject *
lp_records(tgc_lineprof_object *p, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    if (out == NULL || p->keys == NULL) {
        return out;
    }
    size_t nk = p->engine.nkeys;
    for (uint32_t c = 0; c < p->engine.ncodes; c++) {
        const tgc_lp_code *code = &p->engine.codes[c];
        for (uint32_t i = 0; i < code->nlines; i++) {
            int32_t line = code->lines[i];
            const int64_t *s = tgc_lp_slot(&p->engine, c, line);
            if (s == NULL) {
                continue;
            }
            PyObject *a = PyTuple_New((Py_ssize_t)nk), *b = PyTuple_New((Py_ssize_t)nk);
            if (a == NULL || b == NULL) {
                Py_XDECREF(a);
                Py_XDECREF(b);
                goto error;
            }
            for (size_t k = 0; k < nk; k++) {
                PyObject *x = PyLong_FromLongLong(s[1 + k]);
                PyObject *y = PyLong_FromLongLong(s[1 + nk + k]);
                if (x == NULL || y == NULL) {
                    Py_XDECREF(x);
                    Py_XDECREF(y);
                    Py_DECREF(a);
                    Py_DECREF(b);
                    goto error;
                }
                PyTuple_SET_ITEM(a, (Py_ssize_t)k, x);  /* stolen */
                PyTuple_SET_ITEM(b, (Py_ssize_t)k, y);
            }
            /* the code object: engine identities are the entries of p->codes */
            PyObject *row = Py_BuildValue("(OiLNN)", (PyObject *)code->code, line,
                                          (long long)s[0], a, b);  /* a, b stolen */
            if (row == NULL || PyList_Append(out, row) < 0) {
                Py_XDECREF(row);
                goto error;
            }
            Py_DECREF(row);
        }
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
lp_get_keys(tgc_lineprof_object *p, void *Py_UNUSED(closure))
{
    return p->keys ? Py_NewRef(p->keys) : PyTuple_New(0);
}

static PyObject *
lp_get_stat(tgc_lineprof_object *p, void *closure)
{
    switch ((int)(intptr_t)closure) {
    case 0: return PyBool_FromLong(p->enabled);
    case 1: return PyUnicode_FromString(p->source == LP_SRC_CUDA ? "cuda" : "rss");
    case 2: return PyLong_FromLong(p->device);
    case 3: return PyLong_FromUnsignedLongLong(p->engine.lines);
    case 4: return PyLong_FromSsize_t(p->errors);
    case 5: return PyBool_FromLong(p->rss_resettable);
    default: return PyLong_FromUnsignedLong(p->engine.nframes);
    }
}

static PyMethodDef lp_methods[] = {
    {"add_code", (PyCFunction)lp_add_code, METH_O,
     "add_code($self, code, /)\n--\n\nProfile this code object."},
    {"set_source", (PyCFunction)lp_set_source, METH_VARARGS,
     "set_source($self, kind, device=0, stats_fn=None, reset_fn=None, /)\n--\n\n"
     "The memory source: kind 'rss', the process's resident memory, or kind 'cuda', the caching "
     "allocator's counters of device, read with stats_fn(device) and reset with "
     "reset_fn(device)."},
    {"enable", (PyCFunction)lp_enable, METH_NOARGS,
     "enable($self, /)\n--\n\nStart folding events (takes a reading)."},
    {"disable", (PyCFunction)lp_disable, METH_NOARGS,
     "disable($self, /)\n--\n\nStop; open lines are dropped."},
    {"clear", (PyCFunction)lp_clear_records, METH_O,
     "clear($self, forget_codes, /)\n--\n\n"
     "Drop the records, and the registered code objects when forget_codes is true."},
    {"records", (PyCFunction)lp_records, METH_NOARGS,
     "records($self, /)\n--\n\n[(code, line, hits, maxes, sums)] of every line that ran."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef lp_getset[] = {
    {"keys", (getter)lp_get_keys, NULL, "the reading's layout (tuple of str)", NULL},
    {"enabled", (getter)lp_get_stat, NULL, NULL, (void *)0},
    {"source", (getter)lp_get_stat, NULL, "'cuda' or 'rss'", (void *)1},
    {"device", (getter)lp_get_stat, NULL, NULL, (void *)2},
    {"lines", (getter)lp_get_stat, NULL, "line records folded so far", (void *)3},
    {"errors", (getter)lp_get_stat, NULL, "failed readings", (void *)4},
    {"peak_resettable", (getter)lp_get_stat, NULL, "the RSS peak resets per line", (void *)5},
    {"open_frames", (getter)lp_get_stat, NULL, NULL, (void *)6},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot lp_slots[] = {
    {Py_tp_doc, "_LineProfiler()\n--\n\n"
                "The line profiler's C core: code objects, a memory source and the folded "
                "records. Use tensorgc.LineProfiler."},
    {Py_tp_new, lp_new},
    {Py_tp_dealloc, lp_dealloc},
    {Py_tp_traverse, lp_traverse},
    {Py_tp_clear, lp_clear},
    {Py_tp_methods, lp_methods},
    {Py_tp_getset, lp_getset},
    {0, NULL},
};

static PyType_Spec lp_spec = {
    .name = "tensorgc._tensorgc._LineProfiler",
    .basicsize = sizeof(tgc_lineprof_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = lp_slots,
};


/* ------------------------------------------------------------------------------------------ */
/* The reporter part of the module state                                                       */

int
tgc_reporter_exec(PyObject *module, tgc_state *st)
{
    tgc_reporter *r = st->reporter = PyMem_Calloc(1, sizeof(tgc_reporter));
    if (r == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    r->tensor = st->tensor;
    r->gc_module = PyImport_ImportModule("gc");
    r->gc_callbacks = r->gc_module ? PyObject_GetAttrString(r->gc_module, "callbacks") : NULL;
    r->index_hook = PyCFunction_NewEx(&index_hook_def, module, NULL);
    if (r->gc_callbacks == NULL || r->index_hook == NULL) {
        return -1;
    }
    if (!PyList_Check(r->gc_callbacks)) {
        PyErr_SetString(PyExc_ImportError, "tensorgc: gc.callbacks must be a list");
        return -1;
    }
    tgc_lineprof *lp = &r->lineprof;
    lp->type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &lp_spec, NULL);
    if (lp->type == NULL || PyModule_AddType(module, lp->type) < 0) {
        return -1;
    }
    lp->enabled = PyList_New(0);
    if (lp->enabled == NULL || tgc_lineprof_trace_exec(module, lp) < 0) {
        return -1;
    }
    return 0;
}

int
tgc_reporter_features(const tgc_reporter *r, PyObject *features)
{
    (void)r;
    int on = TGC_HAVE_GEN_INDEX && tgc_internals_ok();
    PyObject *v = on ? Py_NewRef(Py_None) : PyUnicode_FromString(tgc_internals_why());  /* new */
    int rc = v != NULL ? PyDict_SetItemString(features, "tensor_index", v) : -1;
    Py_XDECREF(v);
    return rc;
}

int
tgc_reporter_shutdown(tgc_reporter *r)
{
    return r != NULL ? tgc_index_disable(r) : 0;
}

int
tgc_reporter_traverse(tgc_reporter *r, visitproc visit, void *arg)
{
    if (r == NULL) {
        return 0;
    }
    Py_VISIT(r->gc_module);
    Py_VISIT(r->gc_callbacks);
    Py_VISIT(r->index);
    Py_VISIT(r->index_hook);
    Py_VISIT(r->lineprof.type);
    Py_VISIT(r->lineprof.enabled);
    Py_VISIT(r->lineprof.hook);
    Py_VISIT(r->lineprof.saved_key);
    return 0;
}

void
tgc_reporter_clear(tgc_reporter *r)
{
    if (r == NULL) {
        return;
    }
    Py_CLEAR(r->gc_module);
    Py_CLEAR(r->gc_callbacks);
    Py_CLEAR(r->index);
    Py_CLEAR(r->index_hook);
    Py_CLEAR(r->lineprof.type);
    Py_CLEAR(r->lineprof.enabled);
    Py_CLEAR(r->lineprof.hook);
    Py_CLEAR(r->lineprof.saved_key);
}

void
tgc_reporter_free(tgc_reporter *r)
{
    tgc_reporter_clear(r);
    PyMem_Free(r);
}
