/* module.c: the Python binding of tensorgc's cycle detector (module tensorgc._tensorgc). It only
 * converts arguments and results; the work is in hook.c (gc callback), report.c (analysis),
 * names.c (labels), render.c (Graphviz, HTML) and graph.c (the graph engine).
 * Multi-phase init, per-module state, heap types with GC support. */
#include "tgc.h"
#include "tensorgc/device.h"

static struct PyModuleDef module_def;

tgc_state *
tgc_state_of(PyObject *module)
{
    return module ? (tgc_state *)PyModule_GetState(module) : NULL;
}

static tgc_state *
state_of_type(PyTypeObject *tp)
{
    return tgc_state_of(PyType_GetModule(tp));
}

/* ------------------------------------------------------------------------------------------ */
/* Handle                                                                                      */

static int
handle_traverse(tgc_handle *h, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(h));
    Py_VISIT(h->module);
    Py_VISIT(h->callback);
    Py_VISIT(h->filter.predicate);
    return 0;
}

static int
handle_clear(tgc_handle *h)
{
    Py_CLEAR(h->module);
    Py_CLEAR(h->callback);
    tgc_filter_clear(&h->filter);
    return 0;
}

static void
handle_dealloc(tgc_handle *h)
{
    PyTypeObject *tp = Py_TYPE(h);
    PyObject_GC_UnTrack(h);
    handle_clear(h);
    tp->tp_free(h);
    Py_DECREF(tp);
}

static PyObject *
handle_remove(tgc_handle *h, PyObject *Py_UNUSED(ignored))
{
    if (tgc_hook_remove(h) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
handle_call(tgc_handle *h, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "remove() takes no arguments");
        return NULL;
    }
    return handle_remove(h, NULL);
}

static PyObject *
handle_enter(tgc_handle *h, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(h);
}

static PyObject *
handle_exit(tgc_handle *h, PyObject *Py_UNUSED(args))
{
    if (tgc_hook_remove(h) < 0) {
        return NULL;
    }
    Py_RETURN_FALSE;
}

static PyObject *
handle_get_active(tgc_handle *h, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(h->module != NULL);
}

static PyObject *
handle_repr(tgc_handle *h)
{
    static const char *kinds[] = {"observe_garbage", "observe_cycles", "observe_tensor_cycles"};
    return PyUnicode_FromFormat("<tensorgc.Handle %s %R%s>", kinds[h->kind], h->callback,
                                h->module ? "" : " (removed)");
}

static PyMethodDef handle_methods[] = {
    {"remove", (PyCFunction)handle_remove, METH_NOARGS, "Unregister; harmless when repeated."},
    {"__enter__", (PyCFunction)handle_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)handle_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef handle_getset[] = {
    {"active", (getter)handle_get_active, NULL, "True until removed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot handle_slots[] = {
    {Py_tp_doc, "A registered observer. Call it, or use it as a context manager, to remove it."},
    {Py_tp_traverse, handle_traverse},
    {Py_tp_clear, handle_clear},
    {Py_tp_dealloc, handle_dealloc},
    {Py_tp_call, handle_call},
    {Py_tp_repr, handle_repr},
    {Py_tp_methods, handle_methods},
    {Py_tp_getset, handle_getset},
    {0, NULL},
};

static PyType_Spec handle_spec = {
    .name = "tensorgc.Handle",
    .basicsize = sizeof(tgc_handle),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = handle_slots,
};

/* ------------------------------------------------------------------------------------------ */
/* CycleReport                                                                                 */

static int
report_traverse(tgc_report *r, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(r));
    Py_VISIT(r->text);
    Py_VISIT(r->dot);
    Py_VISIT(r->tensors);
    Py_VISIT(r->groups);
    Py_VISIT(r->edges);
    Py_VISIT(r->hints);
    Py_VISIT(r->svg);
    Py_VISIT(r->html);
    Py_VISIT(r->svg_error);
    Py_VISIT(r->pending_objs);
    return 0;
}

static int
report_clear(tgc_report *r)
{
    Py_CLEAR(r->text);
    Py_CLEAR(r->dot);
    Py_CLEAR(r->tensors);
    Py_CLEAR(r->groups);
    Py_CLEAR(r->edges);
    Py_CLEAR(r->hints);
    Py_CLEAR(r->svg);
    Py_CLEAR(r->html);
    Py_CLEAR(r->svg_error);
    tgc_report_forget(r);
    tgc_buf_free(&r->dot_src);
    tgc_report_row *rows = r->rows;  /* detached first: clear may run again from dealloc */
    Py_ssize_t n = r->nrows;
    r->rows = NULL;
    r->nrows = 0;
    tgc_report_rows_free(rows, n);
    return 0;
}

static void
report_dealloc(tgc_report *r)
{
    PyTypeObject *tp = Py_TYPE(r);
    PyObject_GC_UnTrack(r);
    report_clear(r);
    tp->tp_free(r);
    Py_DECREF(tp);
}

/* The module's state, or NULL with RuntimeError once the module is torn down. */
static tgc_state *
live_state(tgc_report *r)
{
    tgc_state *st = state_of_type(Py_TYPE(r));
    if (st == NULL || st->error_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tensorgc has been shut down");
        return NULL;
    }
    return st;
}

static PyObject *
report_get_dot(tgc_report *r, void *Py_UNUSED(closure))
{
    return tgc_report_dot(r);
}

static PyObject *
report_get_svg(tgc_report *r, void *Py_UNUSED(closure))
{
    tgc_state *st = live_state(r);
    return st ? tgc_report_svg(st, r) : NULL;
}

static PyObject *
report_get_html(tgc_report *r, void *Py_UNUSED(closure))
{
    tgc_state *st = live_state(r);
    return st ? tgc_report_html(st, r) : NULL;
}

static PyObject *
report_repr_html(tgc_report *r, PyObject *Py_UNUSED(ignored))
{
    return report_get_html(r, NULL);
}

static PyObject *
report_get_field(tgc_report *r, void *closure)
{
    PyObject *v = *(PyObject **)((char *)r + (Py_ssize_t)closure);
    return v ? Py_NewRef(v) : Py_NewRef(Py_None);
}

static PyObject *
report_get_nbytes(tgc_report *r, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(r->nbytes);
}

static PyObject *
report_get_objects(tgc_report *r, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(r->objects);
}

static PyObject *
report_get_garbage(tgc_report *r, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(r->garbage);
}

static PyObject *
report_get_generation(tgc_report *r, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(r->generation);
}

static PyObject *
report_repr(tgc_report *r)
{
    tgc_buf b = {0};
    tgc_buf_printf(&b, "<tensorgc.CycleReport: generation %d, %zd tensors, ", r->generation,
                   r->tensors ? PyList_GET_SIZE(r->tensors) : 0);
    tgc_buf_bytes(&b, r->nbytes);
    tgc_buf_printf(&b, ", %zd leak groups>", r->groups ? PyList_GET_SIZE(r->groups) : 0);
    PyObject *s = b.oom ? PyErr_NoMemory() : PyUnicode_FromStringAndSize(b.data, (Py_ssize_t)b.len);
    tgc_buf_free(&b);
    return s;
}

#define FIELD(name, doc) \
    {#name, (getter)report_get_field, NULL, doc, (void *)offsetof(tgc_report, name)}
static PyGetSetDef report_getset[] = {
    FIELD(text, "Plain-text summary with one line and one fix hint per group of leaks."),
    {"dot", (getter)report_get_dot, NULL, "Graphviz DOT source of the drawing.", NULL},
    FIELD(tensors, "One dict per tensor kept alive: shape, dtype, device, nbytes, data_ptr, stack, type."),
    FIELD(groups, "One dict per group of identical leaks: count, objects, tensors, nbytes, cycle, hint, drawn."),
    FIELD(edges, "Drawn references as (source type, label, target type)."),
    FIELD(hints, "The fix hint of each group."),
    {"svg", (getter)report_get_svg, NULL, "The drawing as SVG (rendered on first access).", NULL},
    {"html", (getter)report_get_html, NULL, "A self-contained HTML page: table, text, picture.", NULL},
    {"nbytes", (getter)report_get_nbytes, NULL, "Bytes held, each storage counted once.", NULL},
    {"objects", (getter)report_get_objects, NULL, "Objects drawn.", NULL},
    {"garbage", (getter)report_get_garbage, NULL, "Objects in the collection's garbage.", NULL},
    {"generation", (getter)report_get_generation, NULL, "The generation collected.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
#undef FIELD

static PyMethodDef report_methods[] = {
    {"_repr_html_", (PyCFunction)report_repr_html, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyObject *
report_new(PyTypeObject *Py_UNUSED(tp), PyObject *Py_UNUSED(a), PyObject *Py_UNUSED(k))
{
    PyErr_SetString(PyExc_TypeError, "CycleReport objects are made by the collector hook");
    return NULL;
}

static PyType_Slot report_slots[] = {
    {Py_tp_doc, "What one garbage collection found: reference cycles that kept tensors alive."},
    {Py_tp_new, report_new},
    {Py_tp_traverse, report_traverse},
    {Py_tp_clear, report_clear},
    {Py_tp_dealloc, report_dealloc},
    {Py_tp_repr, report_repr},
    {Py_tp_getset, report_getset},
    {Py_tp_methods, report_methods},
    {0, NULL},
};

static PyType_Spec report_spec = {
    .name = "tensorgc.CycleReport",
    .basicsize = sizeof(tgc_report),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = report_slots,
};

/* ------------------------------------------------------------------------------------------ */
/* Arguments                                                                                   */

/* "cuda", "cpu:0", "any", a torch.device, or a predicate -> *f. */
static int
convert_device(PyObject *device, tgc_filter *f)
{
    memset(f, 0, sizeof(*f));
    f->index = -1;
    PyObject *type = NULL, *index = NULL, *dev = NULL;
    if (PyUnicode_Check(device)) {
        if (PyUnicode_CompareWithASCIIString(device, "any") == 0) {
            f->kind = TGC_DEV_ANY;
            return 0;
        }
        PyObject *torch = PyImport_ImportModule("torch");
        if (torch == NULL) {
            return -1;
        }
        dev = PyObject_CallMethod(torch, "device", "O", device);
        Py_DECREF(torch);
        if (dev == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "device must be 'cuda', 'cpu', 'any', a device string such as 'cuda:1', "
                         "a torch.device or a predicate; got %R", device);
            return -1;
        }
    }
    else if (strcmp(Py_TYPE(device)->tp_name, "torch.device") == 0) {
        dev = Py_NewRef(device);
    }
    else if (PyCallable_Check(device)) {
        f->kind = TGC_DEV_PREDICATE;
        f->predicate = Py_NewRef(device);
        return 0;
    }
    else {
        PyErr_Format(PyExc_TypeError,
                     "device must be a str, a torch.device or a callable, not %.100s",
                     Py_TYPE(device)->tp_name);
        return -1;
    }
    type = PyObject_GetAttrString(dev, "type");
    index = type ? PyObject_GetAttrString(dev, "index") : NULL;
    const char *t = index ? PyUnicode_AsUTF8(type) : NULL;
    int rc = -1;
    if (t != NULL) {
        if (strlen(t) >= sizeof(f->type)) {
            PyErr_Format(PyExc_ValueError, "device type %R is too long", type);
        }
        else {
            f->kind = TGC_DEV_TYPE;
            snprintf(f->type, sizeof(f->type), "%s", t);
            f->index = index == Py_None ? -1 : (int)PyLong_AsLong(index);
            rc = PyErr_Occurred() ? -1 : 0;
        }
    }
    Py_XDECREF(dev);
    Py_XDECREF(type);
    Py_XDECREF(index);
    return rc;
}

static PyObject *
register_observer(PyObject *module, PyObject *callback, PyObject *device, int kind)
{
    tgc_state *st = tgc_state_of(module);
    if (!PyCallable_Check(callback)) {
        PyErr_Format(PyExc_TypeError, "the callback must be callable, not %.100s",
                     Py_TYPE(callback)->tp_name);
        return NULL;
    }
    tgc_handle *h = PyObject_GC_New(tgc_handle, st->handle_type);
    if (h == NULL) {
        return NULL;
    }
    h->module = NULL;
    h->callback = Py_NewRef(callback);
    h->kind = kind;
    memset(&h->filter, 0, sizeof(h->filter));
    PyObject_GC_Track((PyObject *)h);
    if (kind != TGC_OBS_GARBAGE && convert_device(device, &h->filter) < 0) {
        Py_DECREF(h);
        return NULL;
    }
    if (tgc_hook_add(st, module, h) < 0) {
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

PyDoc_STRVAR(observe_garbage_doc,
"observe_garbage(observer) -> Handle\n--\n\n"
"Call observer(list_of_objects) for every collection that found cyclic garbage. The objects\n"
"are freed afterwards unless the observer keeps them reachable.");

static PyObject *
observe_garbage(PyObject *module, PyObject *observer)
{
    return register_observer(module, observer, NULL, TGC_OBS_GARBAGE);
}

static PyObject *
observe_common(PyObject *module, PyObject *args, PyObject *kwargs, int kind, const char *fmt)
{
    static char *kwlist[] = {"callback", "device", NULL};
    PyObject *callback, *device = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, fmt, kwlist, &callback, &device)) {
        return NULL;
    }
    PyObject *dflt = NULL;
    if (device == NULL) {
        dflt = device = PyUnicode_FromString("cuda");
        if (dflt == NULL) {
            return NULL;
        }
    }
    PyObject *h = register_observer(module, callback, device, kind);
    Py_XDECREF(dflt);
    return h;
}

PyDoc_STRVAR(observe_cycles_doc,
"observe_cycles(callback, *, device='cuda') -> Handle\n--\n\n"
"Call callback(CycleReport) once per collection whose garbage keeps tensors of `device` alive.\n"
"device: 'cuda', 'cpu', 'any', a device string, a torch.device, or predicate(tensor) -> bool.");

static PyObject *
observe_cycles(PyObject *module, PyObject *args, PyObject *kwargs)
{
    return observe_common(module, args, kwargs, TGC_OBS_REPORT, "O|$O:observe_cycles");
}

PyDoc_STRVAR(observe_tensor_cycles_doc,
"observe_tensor_cycles(callback, *, device='cuda') -> Handle\n--\n\n"
"Drop-in for torch.utils.viz._cycles.observe_tensor_cycles: callback(html) for each such\n"
"collection; the page is self-contained and works offline.");

static PyObject *
observe_tensor_cycles(PyObject *module, PyObject *args, PyObject *kwargs)
{
    return observe_common(module, args, kwargs, TGC_OBS_HTML, "O|$O:observe_tensor_cycles");
}

PyDoc_STRVAR(render_svg_doc,
"render_svg(dot) -> str\n--\n\n"
"Lay out a DOT graph with Graphviz's dot engine, in the render worker process, and return SVG.\n"
"Raises GraphvizError, also when the layout overruns the render timeout (set_render_timeout).");

static PyObject *
render_svg(PyObject *module, PyObject *arg)
{
    tgc_state *st = tgc_state_of(module);
    Py_ssize_t n;
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "dot must be str, not %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    const char *dot = PyUnicode_AsUTF8AndSize(arg, &n);
    if (dot == NULL) {
        return NULL;
    }
    if ((Py_ssize_t)strlen(dot) != n) {
        PyErr_SetString(PyExc_ValueError, "dot contains a NUL character");
        return NULL;
    }
    char *svg = NULL, err[640] = "";
    size_t len = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tgc_renderer_svg(dot, (size_t)n, &svg, &len, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetString(st->error_type, err);
        return NULL;
    }
    PyObject *r = PyUnicode_DecodeUTF8(svg, (Py_ssize_t)len, "replace");
    free(svg);
    return r;
}

PyDoc_STRVAR(set_render_timeout_doc,
"set_render_timeout(seconds) -> float\n--\n\n"
"Set how long one picture's layout may take (default 2.0 s) and return the previous value. A\n"
"layout that overruns is stopped (its worker process killed) and the page says so.");

static PyObject *
set_render_timeout(PyObject *Py_UNUSED(module), PyObject *arg)
{
    double t = PyFloat_AsDouble(arg);
    if (t == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (!(t > 0.0 && t <= 3600.0)) {  /* also refuses NaN */
        PyErr_Format(PyExc_ValueError, "render timeout must be in (0, 3600] seconds, not %R", arg);
        return NULL;
    }
    double old = tgc_renderer_timeout();
    tgc_renderer_set_timeout(t);
    return PyFloat_FromDouble(old);
}

PyDoc_STRVAR(get_render_timeout_doc,
"get_render_timeout() -> float\n--\n\nHow long one picture's layout may take, in seconds.");

static PyObject *
get_render_timeout(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyFloat_FromDouble(tgc_renderer_timeout());
}

PyDoc_STRVAR(renderer_stats_doc,
"_renderer_stats() -> dict\n--\n\n"
"The render worker's counters: started, killed (at the deadline), retired, renders, pid.");

static PyObject *
renderer_stats(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    tgc_renderer_stats s;
    tgc_renderer_get_stats(&s);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:l}", "started", (unsigned long long)s.started,
                         "killed", (unsigned long long)s.killed, "retired",
                         (unsigned long long)s.retired, "renders", (unsigned long long)s.renders,
                         "pid", s.pid);
}

PyDoc_STRVAR(shutdown_doc,
"_shutdown()\n--\n\nRemove every observer, the gc hook and the tensor index (registered with atexit).");

static PyObject *
shutdown(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_state *st = tgc_state_of(module);
    while (st->observers != NULL && PyList_GET_SIZE(st->observers) > 0) {
        tgc_handle *h = (tgc_handle *)PyList_GET_ITEM(st->observers, 0);
        Py_INCREF(h);
        int rc = tgc_hook_remove(h);
        Py_DECREF(h);
        if (rc < 0) {
            return NULL;
        }
    }
    if (tgc_index_disable(st) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS  /* waits for a render in progress, at most its deadline */
    tgc_renderer_shutdown();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *
observer_count(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_state *st = tgc_state_of(module);
    return PyLong_FromSsize_t(st->observers ? PyList_GET_SIZE(st->observers) : 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Reporter and allocator bindings: argument conversion only; the work is in reporter/walk.c,
 * allocator/binding.c (blocks.c) and allocator/device.c. */

PyDoc_STRVAR(live_tensors_doc,
"_live_tensors() -> list\n\nEvery tensor object the collector tracks (frozen objects excepted).");

static PyObject *
live_tensors(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_state *st = tgc_state_of(module);
    return st->index != NULL ? tgc_index_tensors(st) : tgc_walk_tensors(st);
}

PyDoc_STRVAR(track_tensors_doc,
"_track_tensors(enabled) -> bool\n\nTurns the index of live tensors on or off (see "
"reporter/index.c); returns whether it is on (False where the collector has no generations).");

static PyObject *
track_tensors(PyObject *module, PyObject *arg)
{
    tgc_state *st = tgc_state_of(module);
    int on = PyObject_IsTrue(arg);
    if (on < 0 || (on ? tgc_index_enable(st) : tgc_index_disable(st)) < 0) {
        return NULL;
    }
    return PyBool_FromLong(st->index != NULL);
}

PyDoc_STRVAR(is_tensor_doc, "_is_tensor(obj) -> bool\n\nA type check in C (no isinstance, no __class__).");

static PyObject *
is_tensor(PyObject *module, PyObject *obj)
{
    tgc_state *st = tgc_state_of(module);
    if (tgc_torch_resolve(st) < 0) {
        return NULL;
    }
    return PyBool_FromLong(tgc_is_tensor(st, obj));
}

PyDoc_STRVAR(tensor_rows_doc,
"_tensor_rows(tensors) -> list\n\nFor each tensor: (storage_ptr, storage_nbytes, device, "
"device_type, device_index, shape, dtype, numel, is_sparse, storage, parts, nbytes, "
"no_storage); see reporter/walk.c.");

static PyObject *
tensor_rows(PyObject *module, PyObject *tensors)
{
    tgc_state *st = tgc_state_of(module);
    if (!PyList_Check(tensors)) {
        PyErr_SetString(PyExc_TypeError, "_tensor_rows() takes a list of tensors");
        return NULL;
    }
    if (tgc_torch_resolve(st) <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "tensorgc: torch is not imported");
        }
        return NULL;
    }
    return tgc_tensor_rows(st, tensors);
}

PyDoc_STRVAR(alloc_attribute_doc,
"_alloc_attribute(segments, storages) -> (per_storage, totals, unseen)\n\n"
"Maps storages (device, data_ptr, named) to the allocator blocks of a snapshot's segments.");

static PyObject *
alloc_attribute(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_alloc_attribute() takes (segments, storages)");
        return NULL;
    }
    return tgc_alloc_attribute(args[0], args[1]);
}

PyDoc_STRVAR(timeline_doc,
"_timeline(trace, pre, columns, detail, use_free_requested, classify=None) -> dict\n\n"
"Replays one device's allocator trace into the Active Memory Timeline (allocator/timeline.c);\n"
"classify=(spans, grads, named) also gives each allocation a category.");

static PyObject *
timeline(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *trace, *pre, *classify = Py_None;
    unsigned int columns, detail;
    int use_req;
    if (!PyArg_ParseTuple(args, "O!O!IIp|O:_timeline", &PyList_Type, &trace, &PyList_Type, &pre,
                          &columns, &detail, &use_req, &classify)) {
        return NULL;
    }
    return tgc_alloc_timeline(trace, pre, columns, detail, use_req, classify);
}

PyDoc_STRVAR(segmap_doc,
"_segmap(trace, segments, device, upto, use_free_requested) -> list\n\n"
"Segments (kind 0) and allocations (kind 1) after trace[:upto] (allocator/segmap.c).");

static PyObject *
segmap(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *trace, *segs;
    int device, use_req;
    Py_ssize_t upto;
    if (!PyArg_ParseTuple(args, "O!O!inp:_segmap", &PyList_Type, &trace, &PyList_Type, &segs,
                          &device, &upto, &use_req)) {
        return NULL;
    }
    return tgc_alloc_segmap(trace, segs, device, upto, use_req);
}

PyDoc_STRVAR(check_trace_doc,
"_check_trace(trace, start, seen) -> int\n\nThe first index >= start whose entry is not of "
"torch's plain shape (allocator/binding.c); len(trace) when all are.");

static PyObject *
check_trace(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *trace, *seen;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!nO!:_check_trace", &PyList_Type, &trace, &start,
                          &PySet_Type, &seen)) {
        return NULL;
    }
    return tgc_alloc_check_trace(trace, start, seen);
}

PyDoc_STRVAR(pickle_scan_doc,
"_pickle_scan(data) -> (code, pos, a, b, c)\n\nThe pre-scan of an untrusted pickle "
"(allocator/pickscan.c).");

static PyObject *
pickle_scan(PyObject *Py_UNUSED(module), PyObject *data)
{
    return tgc_alloc_pickle_scan(data);
}

PyDoc_STRVAR(device_memory_doc,
"_device_memory(ordinal) -> dict\n\nThe CUDA driver's and NVML's view of one device, loaded at "
"run time; {'ok': False, 'error': ...} without a driver.");

static PyObject *
device_memory(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long v = PyLong_Check(arg) ? PyLong_AsLong(arg) : -1;
    int ordinal = v > INT_MAX ? -1 : (int)v;  /* not truncated: 2**32 + 1 is no device 1 */
    if (ordinal < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_device_memory() takes a device ordinal >= 0");
        }
        return NULL;
    }
    tgc_device_mem m;
    int rc;
    Py_BEGIN_ALLOW_THREADS  /* the first call loads libcuda and NVML */
    rc = tgc_device_query(ordinal, &m);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("{s:O,s:i,s:K,s:L,s:L,s:L,s:O,s:s,s:s,s:s}",
                         "ok", rc == 0 ? Py_True : Py_False, "ordinal", ordinal,
                         "total", m.total, "free", m.free, "device_used", m.device_used,
                         "process_used", m.process_used, "nvml", m.nvml ? Py_True : Py_False,
                         "name", m.name, "source", m.source, "error", m.error);
}

/* The optional on/off argument of the private switches below: 1 with *on set when one was given,
 * 0 when absent or None, -1 with an exception. */
static int
module__switch(const char *name, PyObject *const *args, Py_ssize_t nargs, int *on)
{
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most one argument", name);
        return -1;
    }
    if (nargs == 0 || args[0] == Py_None) {
        return 0;
    }
    *on = PyObject_IsTrue(args[0]);
    return *on < 0 ? -1 : 1;
}

/* A counter a private switch reports, by name. */
typedef struct {
    const char *name;
    unsigned long long value;
} module_count;

/* What every private switch does: applies its argument (if any) to *field, where with
 * needs_prescan turning it on is refused if the pre-scan's layout check failed; then returns
 * {'enabled': bool, <counter>: int...} as a new dict, or NULL with an exception set. */
static PyObject *
module__switch_call(tgc_state *st, const char *name, PyObject *const *args, Py_ssize_t nargs,
                    int *field, int needs_prescan, const module_count *counts, int ncounts)
{
    int on = 0, given = module__switch(name, args, nargs, &on);
    if (given < 0) {
        return NULL;
    }
    if (given) {
        if (on && needs_prescan && !st->young_ok) {
            PyErr_Format(PyExc_RuntimeError,
                         "%s: the young-generation pre-scan is not available on this interpreter",
                         name);
            return NULL;
        }
        *field = on;
    }
    PyObject *d = PyDict_New();  /* new reference */
    if (d == NULL || PyDict_SetItemString(d, "enabled", *field ? Py_True : Py_False) < 0) {
        goto error;
    }
    for (int i = 0; i < ncounts; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(counts[i].value);  /* new reference */
        int rc = v != NULL ? PyDict_SetItemString(d, counts[i].name, v) : -1;
        Py_XDECREF(v);
        if (rc < 0) {
            goto error;
        }
    }
    return d;
error:
    Py_XDECREF(d);
    return NULL;
}

PyDoc_STRVAR(young_scan_doc,
"_young_scan(enabled=None) -> dict\n\nThe young-generation pre-scan (cycles/young.c): with "
"enabled, switch it on or off (on is refused where the interpreter's collector is not the one it "
"was built for). Returns {'available', 'enabled', 'skipped', 'armed'}: the last two count the "
"collections that ran without the detector and those it armed since import.");

static PyObject *
young_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_state *st = tgc_state_of(module);
    /* the counters are read before the switch is applied: switching changes none of them */
    PyObject *d = module__switch_call(st, "_young_scan", args, nargs, &st->young_scan, 1,
                                      (module_count[]){{"skipped", st->young_skipped},
                                                       {"armed", st->young_armed}}, 2);
    if (d != NULL &&
        PyDict_SetItemString(d, "available", st->young_ok ? Py_True : Py_False) < 0) {
        Py_CLEAR(d);
    }
    return d;
}

PyDoc_STRVAR(report_dots_doc,
"_report_dots() -> dict\n\nA report's DOT is drawn on first use of .dot, .svg or .html, or when the "
"detector lets go of a report someone kept, since the garbage is freed then. Returns {'kept', "
"'skipped'}: reports drawn at that moment, and reports nobody asked for nor kept, never drawn.");

static PyObject *
report_dots(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_state *st = tgc_state_of(module);
    return Py_BuildValue("{s:K,s:K}", "kept", st->dots_kept, "skipped", st->dots_skipped);
}

PyDoc_STRVAR(young_island_doc,
"_young_island(enabled=None) -> dict\n\nIslands (cycles/young.c): when a young collection could "
"hold tensors, prove before it runs that they sit in garbage nothing else references, and let "
"the collector free the rest alone. With enabled, switch it on or off (off: such collections are "
"armed; on is refused where the pre-scan is not available). Returns {'enabled', 'used', "
"'fallback', 'marked', 'finalized', 'early', 'finalizers'}: collections that took the path, young "
"ones that could hold tensors but were armed, proofs that needed the young lists marked (an old "
"object or a class in reach, a large set), islands with a pending finalizer (__del__, a suspended "
"generator or coroutine), those of them reported at the start of a full collection, and the "
"finalizers the detector ran for them after the report.");

static PyObject *
young_island(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_state *st = tgc_state_of(module);
    return module__switch_call(st, "_young_island", args, nargs, &st->island_on, 1,
                               (module_count[]){{"used", st->island_used},
                                                {"fallback", st->island_fallback},
                                                {"marked", st->island_marked},
                                                {"finalized", st->island_finalized},
                                                {"early", st->island_early},
                                                {"finalizers", st->island_finalizers}}, 6);
}

PyDoc_STRVAR(island_crosscheck_doc,
"_island_crosscheck(enabled=None) -> dict\n\nFor tests: with enabled, switch on or off checking "
"every island proof that came without marking the young lists against the marked proof (verdict, "
"members, order). Returns {'enabled', 'checked', 'mismatched'}.");

static PyObject *
island_crosscheck(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_state *st = tgc_state_of(module);
    return module__switch_call(st, "_island_crosscheck", args, nargs, &st->island_crosscheck, 0,
                               (module_count[]){{"checked", st->island_checked},
                                                {"mismatched", st->island_mismatched}}, 2);
}

PyDoc_STRVAR(seeded_split_doc,
"_seeded_split(enabled=None) -> dict\n\nThe seeded split (cycles/hook.c): with enabled, switch it "
"on or off (off: every report's garbage goes through the full reference graph). Returns "
"{'enabled', 'used', 'fallback'}: splits it decided, and those it handed to the full split.");

static PyObject *
seeded_split(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_state *st = tgc_state_of(module);
    return module__switch_call(st, "_seeded_split", args, nargs, &st->seeded_on, 0,
                               (module_count[]){{"used", st->seeded_used},
                                                {"fallback", st->seeded_fallback}}, 2);
}

PyDoc_STRVAR(phase_times_doc,
"_phase_times(reset=False) -> dict or None\n\nWhere the detector's time goes, per phase: "
"{phase: (count, seconds)} since import or the last reset; None unless the extension was built "
"with -DTGC_PHASE_TIMES (make phases). For benchmarks (bench/b1_inprocess.py).");

static PyObject *
phase_times(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_state *st = tgc_state_of(module);
    int reset = 0;
    if (module__switch("_phase_times", args, nargs, &reset) < 0) {
        return NULL;
    }
#ifdef TGC_PHASE_TIMES
    static const char *const names[TGC_PHASE_COUNT] = {"scan", "island", "exact", "build",
                                                         "callback", "free"};
    PyObject *d = PyDict_New();  /* new reference */
    for (int i = 0; d != NULL && i < TGC_PHASE_COUNT; i++) {
        PyObject *v = Py_BuildValue("(Kd)", st->phases[i].n, (double)st->phases[i].ns / 1e9);
        if (v == NULL || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_CLEAR(d);
        }
        Py_XDECREF(v);
    }
    if (d != NULL && reset) {
        memset(st->phases, 0, sizeof(st->phases));
    }
    return d;
#else
    (void)st;
    (void)reset;
    Py_RETURN_NONE;
#endif
}

static PyMethodDef module_methods[] = {
    {"_phase_times", (PyCFunction)(void (*)(void))phase_times, METH_FASTCALL, phase_times_doc},
    {"_seeded_split", (PyCFunction)(void (*)(void))seeded_split, METH_FASTCALL, seeded_split_doc},
    {"_young_island", (PyCFunction)(void (*)(void))young_island, METH_FASTCALL, young_island_doc},
    {"_island_crosscheck", (PyCFunction)(void (*)(void))island_crosscheck, METH_FASTCALL,
     island_crosscheck_doc},
    {"_young_scan", (PyCFunction)(void (*)(void))young_scan, METH_FASTCALL, young_scan_doc},
    {"_report_dots", (PyCFunction)report_dots, METH_NOARGS, report_dots_doc},
    {"observe_garbage", (PyCFunction)observe_garbage, METH_O, observe_garbage_doc},
    {"observe_cycles", (PyCFunction)(void (*)(void))observe_cycles, METH_VARARGS | METH_KEYWORDS,
     observe_cycles_doc},
    {"observe_tensor_cycles", (PyCFunction)(void (*)(void))observe_tensor_cycles,
     METH_VARARGS | METH_KEYWORDS, observe_tensor_cycles_doc},
    {"render_svg", (PyCFunction)render_svg, METH_O, render_svg_doc},
    {"set_render_timeout", (PyCFunction)set_render_timeout, METH_O, set_render_timeout_doc},
    {"get_render_timeout", (PyCFunction)get_render_timeout, METH_NOARGS, get_render_timeout_doc},
    {"_renderer_stats", (PyCFunction)renderer_stats, METH_NOARGS, renderer_stats_doc},
    {"_shutdown", (PyCFunction)shutdown, METH_NOARGS, shutdown_doc},
    {"_observer_count", (PyCFunction)observer_count, METH_NOARGS, NULL},
    {"_live_tensors", (PyCFunction)live_tensors, METH_NOARGS, live_tensors_doc},
    {"_track_tensors", (PyCFunction)track_tensors, METH_O, track_tensors_doc},
    {"_tensor_rows", (PyCFunction)tensor_rows, METH_O, tensor_rows_doc},
    {"_is_tensor", (PyCFunction)is_tensor, METH_O, is_tensor_doc},
    {"_alloc_attribute", (PyCFunction)(void (*)(void))alloc_attribute, METH_FASTCALL,
     alloc_attribute_doc},
    {"_device_memory", (PyCFunction)device_memory, METH_O, device_memory_doc},
    {"_timeline", (PyCFunction)timeline, METH_VARARGS, timeline_doc},
    {"_segmap", (PyCFunction)segmap, METH_VARARGS, segmap_doc},
    {"_pickle_scan", (PyCFunction)pickle_scan, METH_O, pickle_scan_doc},
    {"_check_trace", (PyCFunction)check_trace, METH_VARARGS, check_trace_doc},
    {NULL, NULL, 0, NULL},
};

/* The gc.callbacks entry, bound to the module so it finds the state. */
static PyMethodDef index_hook_def = {
    "_index_hook", (PyCFunction)(void (*)(void))tgc_index_callback, METH_FASTCALL,
    "tensorgc's tensor-index gc callback (internal).",
};

static PyMethodDef hook_def = {
    "_gc_hook", (PyCFunction)(void (*)(void))tgc_hook_callback, METH_FASTCALL,
    "tensorgc's gc callback (internal).",
};

/* ------------------------------------------------------------------------------------------ */
/* Module                                                                                      */

/* The render worker is the executable _tgc_render beside this module's file (setup.py builds
 * it there). A module without a file (embedded, frozen) renders nothing and says why. */
static int
module__find_worker(PyObject *module)
{
    PyObject *file = PyModule_GetFilenameObject(module);  /* new reference */
    if (file == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *bytes = PyUnicode_EncodeFSDefault(file);  /* new reference */
    Py_DECREF(file);
    if (bytes == NULL) {
        return -1;
    }
    const char *f = PyBytes_AS_STRING(bytes);
    const char *slash = strrchr(f, '/');
    size_t dir = slash ? (size_t)(slash - f) + 1 : 0;
    static const char exe[] = "_tgc_render";
    char *path = PyMem_Malloc(dir + sizeof(exe));
    if (path == NULL) {
        Py_DECREF(bytes);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(path, f, dir);
    memcpy(path + dir, exe, sizeof(exe));
    int rc = tgc_renderer_set_path(path);
    PyMem_Free(path);
    Py_DECREF(bytes);
    if (rc < 0) {
        PyErr_NoMemory();
    }
    return rc;
}

static int
module_exec(PyObject *module)
{
    tgc_state *st = tgc_state_of(module);
    st->report_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &report_spec, NULL);
    if (st->report_type == NULL || PyModule_AddType(module, st->report_type) < 0) {
        return -1;
    }
    st->handle_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &handle_spec, NULL);
    if (st->handle_type == NULL || PyModule_AddType(module, st->handle_type) < 0) {
        return -1;
    }
    st->error_type = PyErr_NewExceptionWithDoc(
        "tensorgc.GraphvizError", "Graphviz could not lay out or render a graph.",
        PyExc_RuntimeError, NULL);
    if (st->error_type == NULL || PyModule_AddObjectRef(module, "GraphvizError", st->error_type) < 0) {
        return -1;
    }
    st->gc_module = PyImport_ImportModule("gc");
    if (st->gc_module == NULL) {
        return -1;
    }
    st->gc_get_debug = PyObject_GetAttrString(st->gc_module, "get_debug");
    st->gc_set_debug = PyObject_GetAttrString(st->gc_module, "set_debug");
    st->gc_callbacks = PyObject_GetAttrString(st->gc_module, "callbacks");
    st->gc_garbage = PyObject_GetAttrString(st->gc_module, "garbage");
    st->observers = PyList_New(0);
    st->hook = PyCFunction_NewEx(&hook_def, module, NULL);
    st->index_hook = PyCFunction_NewEx(&index_hook_def, module, NULL);
    if (st->index_hook == NULL) {
        return -1;
    }
    if (!st->gc_get_debug || !st->gc_set_debug || !st->gc_callbacks || !st->gc_garbage ||
        !st->observers || !st->hook) {
        return -1;
    }
    st->str_generation = PyUnicode_InternFromString("generation");
    st->str_torch = PyUnicode_InternFromString("torch");
    st->str_torch_dot = PyUnicode_InternFromString("torch.");
    st->str_type = PyUnicode_InternFromString("type");
    st->str_index = PyUnicode_InternFromString("index");
    st->str_nbytes = PyUnicode_InternFromString("nbytes");
    st->str_data_ptr = PyUnicode_InternFromString("data_ptr");
    if (!st->str_generation || !st->str_torch || !st->str_torch_dot || !st->str_type || !st->str_index || !st->str_nbytes ||
        !st->str_data_ptr) {
        return -1;
    }
    static const char *const key_names[TGC_KEY_COUNT] = TGC_KEY_NAMES;
    for (int i = 0; i < TGC_KEY_COUNT; i++) {
        if ((st->keys[i] = PyUnicode_InternFromString(key_names[i])) == NULL) {
            return -1;
        }
    }
    static const char *const how_names[TGC_HOW_COUNT] = TGC_HOW_NAMES;
    for (int i = 0; i < TGC_HOW_COUNT; i++) {
        if ((st->how[i] = PyUnicode_InternFromString(how_names[i])) == NULL) {
            return -1;
        }
    }
    if ((st->str_flatten = PyUnicode_InternFromString("__tensor_flatten__")) == NULL) {
        return -1;
    }
    if (tgc_lineprof_exec(module, st) < 0 ||
        PyModule_AddFunctions(module, tgc_lineprof_methods) < 0) {
        return -1;
    }
    if (module__find_worker(module) < 0) {
        return -1;
    }
    st->young_ok = tgc_young_selfcheck();
    st->young_scan = st->young_ok;
    st->seeded_on = 1;
    st->island_on = st->young_ok;
    if (!PyList_Check(st->gc_callbacks) || !PyList_Check(st->gc_garbage)) {
        PyErr_SetString(PyExc_ImportError, "tensorgc: gc.callbacks and gc.garbage must be lists");
        return -1;
    }
    return 0;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    tgc_state *st = tgc_state_of(module);
    Py_VISIT(st->report_type);
    Py_VISIT(st->handle_type);
    Py_VISIT(st->error_type);
    Py_VISIT(st->gc_module);
    Py_VISIT(st->gc_get_debug);
    Py_VISIT(st->gc_set_debug);
    Py_VISIT(st->gc_callbacks);
    Py_VISIT(st->gc_garbage);
    Py_VISIT(st->observers);
    Py_VISIT(st->hook);
    Py_VISIT(st->logger);
    Py_VISIT(st->tensor_type);
    Py_VISIT(st->torch_get_shape);
    Py_VISIT(st->torch_get_dtype);
    Py_VISIT(st->torch_get_device);
    Py_VISIT(st->torch_untyped_storage);
    Py_VISIT(st->torch_is_sparse_getter);
    Py_VISIT(st->torch_no_subclass_dispatch);
    Py_VISIT(st->torch_disabled_tf);
    Py_VISIT(st->torch_tensor_cls);
    Py_VISIT(st->torch_strs);
    Py_VISIT(st->garbage);
    Py_VISIT(st->island);
    Py_VISIT(st->index);
    Py_VISIT(st->index_hook);
    Py_VISIT(st->str_generation);
    Py_VISIT(st->str_torch);
    Py_VISIT(st->str_torch_dot);
    Py_VISIT(st->str_type);
    Py_VISIT(st->str_index);
    Py_VISIT(st->str_nbytes);
    for (int i = 0; i < TGC_KEY_COUNT; i++) {
        Py_VISIT(st->keys[i]);
    }
    for (int i = 0; i < TGC_TA_COUNT; i++) {
        Py_VISIT(st->torch_attr[i]);
    }
    for (int i = 0; i < TGC_HOW_COUNT; i++) {
        Py_VISIT(st->how[i]);
    }
    Py_VISIT(st->str_flatten);
    Py_VISIT(st->labels.attrs);  /* the fixed labels are str: nothing to traverse */
    Py_VISIT(st->str_data_ptr);
    return tgc_lineprof_traverse(st, visit, arg);
}

static int
module_clear(PyObject *module)
{
    tgc_state *st = tgc_state_of(module);
    Py_CLEAR(st->report_type);
    Py_CLEAR(st->handle_type);
    Py_CLEAR(st->error_type);
    Py_CLEAR(st->gc_module);
    Py_CLEAR(st->gc_get_debug);
    Py_CLEAR(st->gc_set_debug);
    Py_CLEAR(st->gc_callbacks);
    Py_CLEAR(st->gc_garbage);
    Py_CLEAR(st->observers);
    Py_CLEAR(st->hook);
    Py_CLEAR(st->logger);
    Py_CLEAR(st->tensor_type);
    Py_CLEAR(st->torch_get_shape);
    Py_CLEAR(st->torch_get_dtype);
    Py_CLEAR(st->torch_get_device);
    Py_CLEAR(st->torch_untyped_storage);
    Py_CLEAR(st->torch_is_sparse_getter);
    Py_CLEAR(st->torch_no_subclass_dispatch);
    Py_CLEAR(st->torch_disabled_tf);
    Py_CLEAR(st->torch_tensor_cls);
    Py_CLEAR(st->torch_strs);
    Py_CLEAR(st->garbage);
    Py_CLEAR(st->island);
    Py_CLEAR(st->index);
    Py_CLEAR(st->index_hook);
    Py_CLEAR(st->str_generation);
    Py_CLEAR(st->str_torch);
    Py_CLEAR(st->str_torch_dot);
    Py_CLEAR(st->str_type);
    Py_CLEAR(st->str_index);
    Py_CLEAR(st->str_nbytes);
    Py_CLEAR(st->str_data_ptr);
    for (int i = 0; i < TGC_KEY_COUNT; i++) {
        Py_CLEAR(st->keys[i]);
    }
    for (int i = 0; i < TGC_TA_COUNT; i++) {
        Py_CLEAR(st->torch_attr[i]);
    }
    for (int i = 0; i < TGC_HOW_COUNT; i++) {
        Py_CLEAR(st->how[i]);
    }
    Py_CLEAR(st->str_flatten);
    tgc_labels_clear(&st->labels);
    tgc_lineprof_clear(st);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tensorgc._tensorgc",
    .m_doc = "tensorgc's C core: a cheap reference-cycle detector for tensors.",
    .m_size = sizeof(tgc_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__tensorgc(void)
{
    return PyModuleDef_Init(&module_def);
}
