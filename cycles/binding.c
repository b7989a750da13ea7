/* binding.c: the Python binding of cycles/, the cycle detector: the tensorgc.Handle and
 * tensorgc.CycleReport heap types, tensorgc.GraphvizError, observe_*, render_svg and the render
 * timeout, and the cycles part of the module state (made here at module exec). It only converts
 * arguments and results; the work is in the hook (hook.h: hook.c, observers.c, split.c, free.c),
 * the reports (report.h: report_*.c), the render worker's client (renderer.c) and the graph engine
 * (graph.c). module/module.c adds these to the module; the switches for tests are testing.c's. */
#include "cycles.h"
#include "module/state.h"
#include "binding.h"
#include "render_py.h"

/* ------------------------------------------------------------------------------------------ */
/* Handle                                                                                      */

static int
handle_traverse(tgc_handle *h, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(h));
    Py_VISIT(h->module);
    Py_VISIT(h->callback);
    Py_VISIT(h->filter.predicate);
    Py_VISIT(h->on_remove);
    return 0;
}

static int
handle_clear(tgc_handle *h)
{
    Py_CLEAR(h->module);
    Py_CLEAR(h->callback);
    Py_CLEAR(h->on_remove);
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
    {"remove", (PyCFunction)handle_remove, METH_NOARGS,
     "remove($self, /)\n--\n\nUnregister; harmless when repeated."},
    {"__enter__", (PyCFunction)handle_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nThe handle itself."},
    {"__exit__", (PyCFunction)handle_exit, METH_VARARGS,
     "__exit__($self, /, *exc_info)\n--\n\nUnregister; exceptions propagate."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef handle_getset[] = {
    {"active", (getter)handle_get_active, NULL, "True until removed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot handle_slots[] = {
    {Py_tp_doc, "Handle()\n--\n\n"
                "A registered observer. Call it, or use it as a context manager, to remove it."},
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

/* The cycles part of the module's state, or NULL with RuntimeError once the module is torn
 * down. */
static tgc_cycles *
live_cycles(tgc_report *r)
{
    tgc_state *st = tgc_state_of(PyType_GetModule(Py_TYPE(r)));
    if (st == NULL || st->cycles == NULL || st->cycles->error_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tensorgc has been shut down");
        return NULL;
    }
    return st->cycles;
}

static PyObject *
report_get_dot(tgc_report *r, void *Py_UNUSED(closure))
{
    return tgc_report_dot(r);
}

static PyObject *
report_get_svg(tgc_report *r, void *Py_UNUSED(closure))
{
    tgc_cycles *c = live_cycles(r);
    return c ? tgc_report_svg(c, r) : NULL;
}

static PyObject *
report_get_html(tgc_report *r, void *Py_UNUSED(closure))
{
    tgc_cycles *c = live_cycles(r);
    return c ? tgc_report_html(c, r) : NULL;
}

/* For Jupyter: the page as the srcdoc of a sandboxed iframe (its script runs in an origin of its
 * own and reaches nothing of the notebook). The page's own escaping keeps the user's strings
 * text; this one keeps the page inside the attribute (& < > " ' as entities; newlines kept, the
 * summary is preformatted). */
static PyObject *
report_repr_html(tgc_report *r, PyObject *Py_UNUSED(ignored))
{
    PyObject *page = report_get_html(r, NULL);   /* new reference */
    if (page == NULL) {
        return NULL;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(page, &n);
    if (s == NULL) {
        Py_DECREF(page);
        return NULL;
    }
    tgc_buf b = {0};
    tgc_buf_puts(&b, "<iframe sandbox=\"allow-scripts\" style=\"width:100%;height:600px;border:1px solid #ccc\" "
                     "title=\"tensorgc cycle report\" srcdoc=\"");
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *ent;
        switch (s[i]) {
        case '&': ent = "&amp;"; break;
        case '<': ent = "&lt;"; break;
        case '>': ent = "&gt;"; break;
        case '"': ent = "&quot;"; break;
        case '\'': ent = "&#39;"; break;
        default: continue;
        }
        tgc_buf_add(&b, s + start, (size_t)(i - start));
        tgc_buf_puts(&b, ent);
        start = i + 1;
    }
    tgc_buf_add(&b, s + start, (size_t)(n - start));
    tgc_buf_puts(&b, "\"></iframe>");
    Py_DECREF(page);
    if (b.oom) {
        tgc_buf_free(&b);
        return PyErr_NoMemory();
    }
    PyObject *out = PyUnicode_DecodeUTF8(b.data, (Py_ssize_t)b.len, "strict");
    tgc_buf_free(&b);
    return out;
}

static PyObject *
report_get_field(tgc_report *r, void *closure)
{
    PyObject *v = *(PyObject **)((char *)r + (Py_ssize_t)closure);
    return v ? Py_NewRef(v) : Py_NewRef(Py_None);
}

/* tensors, groups, edges, hints: made on first use (report.c) */
static PyObject *
report_get_list(tgc_report *r, void *closure)
{
    if (tgc_report_lists_made(r) < 0) {
        return NULL;
    }
    return report_get_field(r, closure);
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
    if (tgc_report_lists_made(r) < 0) {
        PyErr_Clear();  /* a repr never raises for them (the unraisable hook calls it): no counts */
    }
    tgc_buf b = {0};
    tgc_buf_printf(&b, "<tensorgc.CycleReport: generation %d, ", r->generation);
    if (r->tensors != NULL && r->groups != NULL) {
        tgc_buf_printf(&b, "%zd tensors, ", PyList_GET_SIZE(r->tensors));
    }
    tgc_buf_bytes(&b, r->nbytes);
    if (r->tensors != NULL && r->groups != NULL) {
        tgc_buf_printf(&b, ", %zd leak groups", PyList_GET_SIZE(r->groups));
    }
    tgc_buf_puts(&b, ">");
    PyObject *s = b.oom ? PyErr_NoMemory() : PyUnicode_FromStringAndSize(b.data, (Py_ssize_t)b.len);
    tgc_buf_free(&b);
    return s;
}

#define FIELD(name, doc) \
    {#name, (getter)report_get_field, NULL, doc, (void *)offsetof(tgc_report, name)}
#define LIST(name, doc) \
    {#name, (getter)report_get_list, NULL, doc, (void *)offsetof(tgc_report, name)}
static PyGetSetDef report_getset[] = {
    FIELD(text, "Plain-text summary with one line and one fix hint per group of leaks."),
    {"dot", (getter)report_get_dot, NULL, "Graphviz DOT source of the drawing.", NULL},
    LIST(tensors, "One dict per tensor kept alive: shape, dtype, device, nbytes, data_ptr, stack, type."),
    LIST(groups, "One dict per group of identical leaks: count, objects, tensors, nbytes, cycle, hint, drawn."),
    LIST(edges, "Drawn references as (source type, label, target type)."),
    LIST(hints, "The fix hint of each group."),
    {"svg", (getter)report_get_svg, NULL, "The drawing as SVG (rendered on first access).", NULL},
    {"html", (getter)report_get_html, NULL, "A self-contained HTML page: table, text, picture.", NULL},
    {"nbytes", (getter)report_get_nbytes, NULL, "Bytes held, each storage counted once.", NULL},
    {"objects", (getter)report_get_objects, NULL, "Objects drawn.", NULL},
    {"garbage", (getter)report_get_garbage, NULL, "Objects in the collection's garbage.", NULL},
    {"generation", (getter)report_get_generation, NULL, "The generation collected.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
#undef FIELD
#undef LIST

static PyMethodDef report_methods[] = {
    {"_repr_html_", (PyCFunction)report_repr_html, METH_NOARGS,
     "_repr_html_($self, /)\n--\n\nThe page, for Jupyter: .html in a sandboxed iframe's srcdoc."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
report_new(PyTypeObject *Py_UNUSED(tp), PyObject *Py_UNUSED(a), PyObject *Py_UNUSED(k))
{
    PyErr_SetString(PyExc_TypeError, "CycleReport objects are made by the collector hook");
    return NULL;
}

static PyType_Slot report_slots[] = {
    {Py_tp_doc, "CycleReport()\n--\n\n"
                "What one garbage collection found: reference cycles that kept tensors alive.\n"
                "Made by the collector hook only."},
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
    tgc_cycles *c = tgc_state_of(module)->cycles;
    if (!PyCallable_Check(callback)) {
        PyErr_Format(PyExc_TypeError, "the callback must be callable, not %.100s",
                     Py_TYPE(callback)->tp_name);
        return NULL;
    }
    tgc_handle *h = PyObject_GC_New(tgc_handle, c->handle_type);
    if (h == NULL) {
        return NULL;
    }
    h->module = NULL;
    h->cycles = NULL;
    h->callback = Py_NewRef(callback);
    h->on_remove = NULL;
    h->kind = kind;
    memset(&h->filter, 0, sizeof(h->filter));
    PyObject_GC_Track((PyObject *)h);
    if (kind != TGC_OBS_GARBAGE && convert_device(device, &h->filter) < 0) {
        Py_DECREF(h);
        return NULL;
    }
    if (tgc_hook_add(c, module, h) < 0) {
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

PyDoc_STRVAR(observe_garbage_doc,
"observe_garbage($module, observer, /)\n--\n\n"
"Call observer(list_of_objects) for every collection that found cyclic garbage. The objects\n"
"are freed afterwards unless the observer keeps them reachable. Returns a Handle.");

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
"observe_cycles($module, /, callback, *, device='cuda')\n--\n\n"
"Call callback(CycleReport) once per collection whose garbage keeps tensors of `device` alive.\n"
"device: 'cuda', 'cpu', 'any', a device string, a torch.device, or predicate(tensor) -> bool.\n"
"Returns a Handle.");

static PyObject *
observe_cycles(PyObject *module, PyObject *args, PyObject *kwargs)
{
    return observe_common(module, args, kwargs, TGC_OBS_REPORT, "O|$O:observe_cycles");
}

PyDoc_STRVAR(observe_tensor_cycles_doc,
"observe_tensor_cycles($module, /, callback, *, device='cuda')\n--\n\n"
"Drop-in for torch.utils.viz._cycles.observe_tensor_cycles: callback(html) for each such\n"
"collection; the page is self-contained and works offline. Returns a Handle.");

static PyObject *
observe_tensor_cycles(PyObject *module, PyObject *args, PyObject *kwargs)
{
    return observe_common(module, args, kwargs, TGC_OBS_HTML, "O|$O:observe_tensor_cycles");
}

PyDoc_STRVAR(render_svg_doc,
"render_svg($module, dot, /)\n--\n\n"
"Lay out a DOT graph with Graphviz's dot engine, in the render worker process, and return SVG.\n"
"Raises GraphvizError, also when the layout overruns the render timeout (set_render_timeout).");

static PyObject *
render_svg(PyObject *module, PyObject *arg)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
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
    rc = tgc_render_py(dot, (size_t)n, &svg, &len, err, sizeof(err), 0);
    if (rc == TGC_RENDER_INTERRUPTED && PyErr_Occurred()) {
        return NULL;  /* the program's SIGINT handler raised (KeyboardInterrupt) */
    }
    if (rc < 0) {
        PyErr_SetString(c->error_type, err);
        return NULL;
    }
    PyObject *r = PyUnicode_DecodeUTF8(svg, (Py_ssize_t)len, "replace");
    free(svg);
    return r;
}

PyDoc_STRVAR(set_render_timeout_doc,
"set_render_timeout($module, seconds, /)\n--\n\n"
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
"get_render_timeout($module, /)\n--\n\nHow long one picture's layout may take, in seconds.");

static PyObject *
get_render_timeout(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyFloat_FromDouble(tgc_renderer_timeout());
}

PyDoc_STRVAR(set_observer_errors_doc,
"set_observer_errors($module, mode, /)\n--\n\n"
"What becomes of an exception an observer raises: 'log' (the default) logs it on logger\n"
"'tensorgc'; 'raise' raises it in the program at its next Python call after the collection, in\n"
"the thread that collected, as torch's observers do. Returns the previous mode.");

static PyObject *
set_observer_errors(PyObject *module, PyObject *arg)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    int mode;
    if (PyUnicode_Check(arg) && PyUnicode_CompareWithASCIIString(arg, "log") == 0) {
        mode = 0;
    }
    else if (PyUnicode_Check(arg) && PyUnicode_CompareWithASCIIString(arg, "raise") == 0) {
        mode = 1;
    }
    else {
        PyErr_Format(PyExc_ValueError, "observer errors: mode must be 'log' or 'raise', not %R",
                     arg);
        return NULL;
    }
    int old = c->raise_errors;
    c->raise_errors = mode;
    return PyUnicode_FromString(old ? "raise" : "log");
}

PyDoc_STRVAR(on_remove_doc,
"_on_remove($module, handle, then, /)\n--\n\n"
"then() is called once when handle is removed (at once when it is removed already). Internal:\n"
"observe_tensor_cycles stops the allocator history it started.");

static PyObject *
on_remove(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    if (nargs != 2 || !PyObject_TypeCheck(args[0], c->handle_type) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_on_remove(handle, then): a Handle and a callable");
        return NULL;
    }
    tgc_handle *h = (tgc_handle *)args[0];
    if (h->module == NULL) {
        PyObject *r = PyObject_CallNoArgs(args[1]);
        if (r == NULL) {
            return NULL;
        }
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    Py_XSETREF(h->on_remove, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

PyDoc_STRVAR(object_graph_doc,
"_object_graph($module, objects, roots, /)\n--\n\n"
"(labels, referrents, kept): the objects that reach a root, for tensorgc.create_graph.");

static PyObject *
object_graph(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_object_graph(objects, roots): two lists");
        return NULL;
    }
    return tgc_objects_graph(tgc_state_of(module)->cycles, args[0], args[1]);
}

/* labels (str), contexts (str or None), roots (bool) per node; edges (int, int, str) tuples
 * whose ints are node indices. 0, or -1 with TypeError or ValueError. */
static int
graph__check(PyObject *labels, PyObject *contexts, PyObject *roots, PyObject *edges)
{
    if (!PyList_Check(labels) || !PyList_Check(contexts) || !PyList_Check(roots) ||
        !PyList_Check(edges)) {
        PyErr_SetString(PyExc_TypeError, "_graph_dot(labels, contexts, roots, edges): four lists");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(labels);
    if (PyList_GET_SIZE(contexts) != n || PyList_GET_SIZE(roots) != n) {
        PyErr_SetString(PyExc_ValueError, "labels, contexts and roots differ in length");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyList_GET_ITEM(contexts, i);
        if (!PyUnicode_Check(PyList_GET_ITEM(labels, i)) || !PyBool_Check(PyList_GET_ITEM(roots, i)) ||
            (c != Py_None && !PyUnicode_Check(c))) {
            PyErr_Format(PyExc_TypeError, "node %zd: a str label, a bool root and a str or None "
                         "context", i);
            return -1;
        }
    }
    for (Py_ssize_t e = 0; e < PyList_GET_SIZE(edges); e++) {
        PyObject *t = PyList_GET_ITEM(edges, e);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3 || !PyLong_Check(PyTuple_GET_ITEM(t, 0)) ||
            !PyLong_Check(PyTuple_GET_ITEM(t, 1)) || !PyUnicode_Check(PyTuple_GET_ITEM(t, 2))) {
            PyErr_Format(PyExc_TypeError, "edge %zd: a (source, target, label) tuple", e);
            return -1;
        }
        for (int k = 0; k < 2; k++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, k));
            if (i == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                i = -1;
            }
            if (i < 0 || i >= n) {
                PyErr_Format(PyExc_ValueError, "edge %zd: node %R is out of range (%zd nodes)",
                             e, PyTuple_GET_ITEM(t, k), n);
                return -1;
            }
        }
    }
    return 0;
}

PyDoc_STRVAR(graph_dot_doc,
"_graph_dot($module, labels, contexts, roots, edges, /)\n--\n\n"
"(dot, text): the bounded drawing of a graph of nodes, for tensorgc.to_dot and to_html.");

static PyObject *
graph_dot(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_graph_dot(labels, contexts, roots, edges): four lists");
        return NULL;
    }
    if (graph__check(args[0], args[1], args[2], args[3]) < 0) {
        return NULL;
    }
    tgc_buf dot = {0}, text = {0};
    PyObject *r = NULL;
    if (tgc_objects_dot(args[0], args[1], args[2], args[3], &dot, &text) == 0) {
        PyObject *d = dot.oom ? PyErr_NoMemory()
                              : PyUnicode_DecodeUTF8(dot.data ? dot.data : "",
                                                     (Py_ssize_t)dot.len, "replace");
        PyObject *t = d == NULL ? NULL : text.oom ? PyErr_NoMemory()
                                : PyUnicode_DecodeUTF8(text.data ? text.data : "",
                                                       (Py_ssize_t)text.len, "replace");
        r = t ? PyTuple_Pack(2, d, t) : NULL;
        Py_XDECREF(d);
        Py_XDECREF(t);
    }
    tgc_buf_free(&dot);
    tgc_buf_free(&text);
    return r;
}

PyDoc_STRVAR(graph_page_doc,
"_graph_page($module, title, text, dot, /)\n--\n\n"
"The self-contained page of a drawing (laid out in the render worker), for tensorgc.to_html.");

static PyObject *
graph_page(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1]) ||
        !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "_graph_page(title, text, dot): three str");
        return NULL;
    }
    return tgc_objects_page(tgc_state_of(module)->cycles, args[0], args[1], args[2]);
}

PyMethodDef tgc_cycles_methods[] = {
    {"observe_garbage", (PyCFunction)observe_garbage, METH_O, observe_garbage_doc},
    {"observe_cycles", (PyCFunction)(void (*)(void))observe_cycles, METH_VARARGS | METH_KEYWORDS,
     observe_cycles_doc},
    {"observe_tensor_cycles", (PyCFunction)(void (*)(void))observe_tensor_cycles,
     METH_VARARGS | METH_KEYWORDS, observe_tensor_cycles_doc},
    {"set_observer_errors", (PyCFunction)set_observer_errors, METH_O, set_observer_errors_doc},
    {"_on_remove", (PyCFunction)(void (*)(void))on_remove, METH_FASTCALL, on_remove_doc},
    {"_object_graph", (PyCFunction)(void (*)(void))object_graph, METH_FASTCALL, object_graph_doc},
    {"_graph_dot", (PyCFunction)(void (*)(void))graph_dot, METH_FASTCALL, graph_dot_doc},
    {"_graph_page", (PyCFunction)(void (*)(void))graph_page, METH_FASTCALL, graph_page_doc},
    {"render_svg", (PyCFunction)render_svg, METH_O, render_svg_doc},
    {"set_render_timeout", (PyCFunction)set_render_timeout, METH_O, set_render_timeout_doc},
    {"get_render_timeout", (PyCFunction)get_render_timeout, METH_NOARGS, get_render_timeout_doc},
    {NULL, NULL, 0, NULL},
};

/* The gc.callbacks entry, bound to the module so it finds the state. */
static PyObject *
gc_hook(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {  /* the collector always passes (phase, info) */
        PyErr_Format(PyExc_TypeError, "_gc_hook() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    tgc_state *st = tgc_state_of(module);
    if (st != NULL && st->cycles != NULL) {
        tgc_hook_callback(st->cycles, args[0], args[1]);
    }
    Py_RETURN_NONE;
}

static PyMethodDef gc_hook_def = {
    "_gc_hook", (PyCFunction)(void (*)(void))gc_hook, METH_FASTCALL,
    "_gc_hook($module, phase, info, /)\n--\n\ntensorgc's gc callback (internal).",
};

/* The entry the hook appends to gc.callbacks to act after the program's callbacks of a phase. */
static PyObject *
gc_hook_tail(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_gc_hook_tail() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    (void)args;  /* it acts on where it stands in gc.callbacks, not on the phase */
    tgc_state *st = tgc_state_of(module);
    if (st != NULL && st->cycles != NULL) {
        tgc_hook_tail(st->cycles);
    }
    Py_RETURN_NONE;
}

static PyMethodDef gc_hook_tail_def = {
    "_gc_hook_tail", (PyCFunction)(void (*)(void))gc_hook_tail, METH_FASTCALL,
    "_gc_hook_tail($module, phase, info, /)\n--\n\ntensorgc's gc callback, after the program's "
    "(internal).",
};

/* ------------------------------------------------------------------------------------------ */
/* The cycles part of the module state                                                         */

/* The render worker is the executable _tgc_render beside this module's file (setup.py builds
 * it there). A module without a file (embedded, frozen) renders nothing and says why. */
static int
binding__find_worker(PyObject *module)
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

int
tgc_cycles_exec(PyObject *module, tgc_state *st)
{
    tgc_cycles *c = st->cycles = PyMem_Calloc(1, sizeof(tgc_cycles));
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->tensor = st->tensor;
    c->report_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &report_spec, NULL);
    if (c->report_type == NULL || PyModule_AddType(module, c->report_type) < 0) {
        return -1;
    }
    c->handle_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &handle_spec, NULL);
    if (c->handle_type == NULL || PyModule_AddType(module, c->handle_type) < 0) {
        return -1;
    }
    c->error_type = PyErr_NewExceptionWithDoc(
        "tensorgc.GraphvizError", "Graphviz could not lay out or render a graph.",
        PyExc_RuntimeError, NULL);
    if (c->error_type == NULL || PyModule_AddObjectRef(module, "GraphvizError", c->error_type) < 0) {
        return -1;
    }
    PyObject *gc = PyImport_ImportModule("gc");  /* new reference */
    if (gc == NULL) {
        return -1;
    }
    c->gc_get_debug = PyObject_GetAttrString(gc, "get_debug");
    c->gc_set_debug = PyObject_GetAttrString(gc, "set_debug");
    c->gc_callbacks = PyObject_GetAttrString(gc, "callbacks");
    c->gc_garbage = PyObject_GetAttrString(gc, "garbage");
    Py_DECREF(gc);
    c->observers = PyList_New(0);
    c->hook = PyCFunction_NewEx(&gc_hook_def, module, NULL);
    c->tail = PyCFunction_NewEx(&gc_hook_tail_def, module, NULL);
    c->str_generation = PyUnicode_InternFromString("generation");
    if (!c->gc_get_debug || !c->gc_set_debug || !c->gc_callbacks || !c->gc_garbage ||
        !c->observers || !c->hook || !c->tail || !c->str_generation) {
        return -1;
    }
    if (!PyList_Check(c->gc_callbacks) || !PyList_Check(c->gc_garbage)) {
        PyErr_SetString(PyExc_ImportError, "tensorgc: gc.callbacks and gc.garbage must be lists");
        return -1;
    }
    static const char *const key_names[TGC_KEY_COUNT] = TGC_KEY_NAMES;
    for (int i = 0; i < TGC_KEY_COUNT; i++) {
        if ((c->keys[i] = PyUnicode_InternFromString(key_names[i])) == NULL) {
            return -1;
        }
    }
    if (binding__find_worker(module) < 0) {
        return -1;
    }
    /* The defaults users get: every shortcut the interpreter allows. */
    c->young_ok = tgc_young_selfcheck(&c->young_why);
    c->young_scan = c->young_ok;
    c->seeded_on = 1;
    c->island_on = c->young_ok;
    c->sentinel_on = c->young_ok;
    c->resident_on = c->young_ok;
    return 0;
}

/* features[name] = None, or why as a str. */
static int
binding__feature(PyObject *features, const char *name, int on, const char *why)
{
    PyObject *v = on ? Py_NewRef(Py_None) : PyUnicode_FromString(why);  /* new reference */
    int rc = v != NULL ? PyDict_SetItemString(features, name, v) : -1;
    Py_XDECREF(v);
    return rc;
}

int
tgc_cycles_features(const tgc_cycles *c, PyObject *features)
{
    /* All three stand on the pre-scan's reading of the collector's lists (young.c). */
    if (binding__feature(features, "young_prescan", c->young_ok, c->young_why) < 0 ||
        binding__feature(features, "finalizer_cycles", c->young_ok, c->young_why) < 0 ||
        binding__feature(features, "owner_marks", c->young_ok, c->young_why) < 0) {
        return -1;
    }
    return 0;
}

const tgc_heapmark *
tgc_cycles_heapmark(void)
{
    return &tgc_young_mark;
}

int
tgc_cycles_shutdown(tgc_cycles *c)
{
    if (c != NULL && tgc_hook_remove_all(c) < 0) {
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS  /* waits for a render in progress, at most its deadline */
    tgc_renderer_shutdown();
    Py_END_ALLOW_THREADS
    return 0;
}

int
tgc_cycles_traverse(tgc_cycles *c, visitproc visit, void *arg)
{
    if (c == NULL) {
        return 0;
    }
    Py_VISIT(c->report_type);
    Py_VISIT(c->handle_type);
    Py_VISIT(c->error_type);
    Py_VISIT(c->gc_get_debug);
    Py_VISIT(c->gc_set_debug);
    Py_VISIT(c->gc_callbacks);
    Py_VISIT(c->gc_garbage);
    Py_VISIT(c->hook);
    Py_VISIT(c->tail);
    Py_VISIT(c->observers);
    Py_VISIT(c->logger);
    Py_VISIT(c->str_generation);
    for (int i = 0; i < TGC_KEY_COUNT; i++) {
        Py_VISIT(c->keys[i]);
    }
    Py_VISIT(c->labels.attrs);  /* the fixed labels are str: nothing to traverse */
    Py_VISIT(c->garbage);
    Py_VISIT(c->island);
    Py_VISIT(c->island_deferred);
    Py_VISIT(c->deferred);
    return 0;
}

void
tgc_cycles_clear(tgc_cycles *c)
{
    if (c == NULL) {
        return;
    }
    Py_CLEAR(c->report_type);
    Py_CLEAR(c->handle_type);
    Py_CLEAR(c->error_type);
    Py_CLEAR(c->gc_get_debug);
    Py_CLEAR(c->gc_set_debug);
    Py_CLEAR(c->gc_callbacks);
    Py_CLEAR(c->gc_garbage);
    Py_CLEAR(c->hook);
    Py_CLEAR(c->tail);
    Py_CLEAR(c->observers);
    Py_CLEAR(c->logger);
    Py_CLEAR(c->str_generation);
    for (int i = 0; i < TGC_KEY_COUNT; i++) {
        Py_CLEAR(c->keys[i]);
    }
    tgc_labels_clear(&c->labels);
    Py_CLEAR(c->garbage);
    tgc_hook_drop_island(c);
    (void)tgc_young_uproot();  /* a pair whose "stop" never came (the hook left mid-collection) */
    Py_CLEAR(c->deferred);
}

void
tgc_cycles_free(tgc_cycles *c)
{
    tgc_cycles_clear(c);
    PyMem_Free(c);
}
