/* torch.c: torch seen from C (contract in include/tensorgc/tensor.h): resolving TensorBase and
 * the descriptors every reader calls directly, the str() cache of dtypes and devices, and the
 * switch that keeps a tensor subclass's __torch_function__ from running while we read. The bytes
 * a tensor holds and its shape are layout.c's. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "tensorgc/tensor.h"

#define TGC_TA_NAMES {"layout", "is_nested", "is_quantized", "is_meta", "_python_dispatch", \
                      "nbytes", "_indices", "_values", "crow_indices", "col_indices", \
                      "ccol_indices", "row_indices", "values", "dim", "size", "numel"}
#define TGC_HOW_NAMES {"strided: untyped_storage", "quantized: its integer storage", \
    "nested (strided): its buffer", "sparse_coo: indices + values", \
    "sparse_csr: crow_indices + col_indices + values", \
    "sparse_csc: ccol_indices + row_indices + values", \
    "sparse_bsr: crow_indices + col_indices + values", \
    "sparse_bsc: ccol_indices + row_indices + values", \
    "mkldnn: element_size * numel (opaque, no storage to read)", \
    "estimated: element_size * numel (storage not readable)", \
    "wrapper subclass: its inner tensors", "nested (jagged): its inner tensors", \
    "none (meta tensor)", "none (wrapper subclass without inner tensors)", \
    "none (storage not readable)"}

int
tgc_tensor_init(tgc_tensor_state *tn)
{
    static const char *const how_names[TGC_HOW_COUNT] = TGC_HOW_NAMES;
    for (int i = 0; i < TGC_HOW_COUNT; i++) {
        if ((tn->how[i] = PyUnicode_InternFromString(how_names[i])) == NULL) {
            return -1;
        }
    }
    tn->str_torch = PyUnicode_InternFromString("torch");
    tn->str_torch_dot = PyUnicode_InternFromString("torch.");
    tn->str_type = PyUnicode_InternFromString("type");
    tn->str_index = PyUnicode_InternFromString("index");
    tn->str_nbytes = PyUnicode_InternFromString("nbytes");
    tn->str_data_ptr = PyUnicode_InternFromString("data_ptr");
    tn->str_flatten = PyUnicode_InternFromString("__tensor_flatten__");
    tn->str_device = PyUnicode_InternFromString("device");
    if (!tn->str_device || !tn->str_torch || !tn->str_torch_dot || !tn->str_type || !tn->str_index ||
        !tn->str_nbytes || !tn->str_data_ptr || !tn->str_flatten) {
        return -1;
    }
    return 0;
}

int
tgc_tensor_traverse(tgc_tensor_state *tn, visitproc visit, void *arg)
{
    Py_VISIT(tn->type);
    Py_VISIT(tn->get_shape);
    Py_VISIT(tn->get_dtype);
    Py_VISIT(tn->get_device);
    Py_VISIT(tn->get_is_sparse);
    Py_VISIT(tn->untyped_storage);
    Py_VISIT(tn->no_subclass_dispatch);
    Py_VISIT(tn->disabled_tf);
    for (int i = 0; i < TGC_TA_COUNT; i++) {
        Py_VISIT(tn->attr[i]);
    }
    Py_VISIT(tn->strs);
    Py_VISIT(tn->tensor_cls);
    for (int i = 0; i < TGC_HOW_COUNT; i++) {
        Py_VISIT(tn->how[i]);
    }
    Py_VISIT(tn->str_torch);
    Py_VISIT(tn->str_torch_dot);
    Py_VISIT(tn->str_type);
    Py_VISIT(tn->str_index);
    Py_VISIT(tn->str_nbytes);
    Py_VISIT(tn->str_data_ptr);
    Py_VISIT(tn->str_device);
    Py_VISIT(tn->str_flatten);
    return 0;
}

void
tgc_tensor_clear(tgc_tensor_state *tn)
{
    Py_CLEAR(tn->type);
    Py_CLEAR(tn->get_shape);
    Py_CLEAR(tn->get_dtype);
    Py_CLEAR(tn->get_device);
    Py_CLEAR(tn->get_is_sparse);
    Py_CLEAR(tn->untyped_storage);
    Py_CLEAR(tn->no_subclass_dispatch);
    Py_CLEAR(tn->disabled_tf);
    for (int i = 0; i < TGC_TA_COUNT; i++) {
        Py_CLEAR(tn->attr[i]);
    }
    Py_CLEAR(tn->strs);
    Py_CLEAR(tn->tensor_cls);
    for (int i = 0; i < TGC_HOW_COUNT; i++) {
        Py_CLEAR(tn->how[i]);
    }
    Py_CLEAR(tn->str_torch);
    Py_CLEAR(tn->str_torch_dot);
    Py_CLEAR(tn->str_type);
    Py_CLEAR(tn->str_index);
    Py_CLEAR(tn->str_nbytes);
    Py_CLEAR(tn->str_data_ptr);
    Py_CLEAR(tn->str_device);
    Py_CLEAR(tn->str_flatten);
}

int
tgc_tensor_resolve(tgc_tensor_state *tn)
{
    if (tn->type != NULL) {
        return 1;
    }
    PyObject *name = PyUnicode_FromString("torch._C");
    PyObject *C = name ? PyImport_GetModule(name) : NULL;  /* new reference, NULL if absent */
    Py_XDECREF(name);
    if (C == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *tb = PyObject_GetAttrString(C, "TensorBase");
    if (tb == NULL) {
        PyErr_Clear();
        tb = PyObject_GetAttrString(C, "_TensorBase");  /* torch < 2.2 */
    }
    if (tb == NULL || !PyType_Check(tb)) {
        PyErr_Clear();
        Py_XDECREF(tb);
        Py_DECREF(C);
        return 0;  /* torch._C is still initialising */
    }
    /* Attributes of the C base class: getset descriptors and method descriptors, called
     * directly so that a subclass's Python properties never run. */
    PyObject *shape = PyObject_GetAttrString(tb, "shape");
    PyObject *dtype = PyObject_GetAttrString(tb, "dtype");
    PyObject *device = PyObject_GetAttrString(tb, "device");
    PyObject *storage = PyObject_GetAttrString(tb, "untyped_storage");
    PyObject *sparse = PyObject_GetAttrString(tb, "is_sparse");
    if (!shape || !dtype || !device || !storage || !sparse ||
        !Py_TYPE(shape)->tp_descr_get || !Py_TYPE(dtype)->tp_descr_get ||
        !Py_TYPE(device)->tp_descr_get || !Py_TYPE(sparse)->tp_descr_get) {
        PyErr_Clear();
        Py_XDECREF(shape); Py_XDECREF(dtype); Py_XDECREF(device); Py_XDECREF(storage);
        Py_XDECREF(sparse); Py_DECREF(tb); Py_DECREF(C);
        return 0;
    }
    PyObject *nosub = PyObject_GetAttrString(C, "DisableTorchFunctionSubclass");
    if (nosub == NULL) {
        PyErr_Clear();  /* older torch: subclasses with __torch_function__ may dispatch */
    }
    Py_XSETREF(tn->disabled_tf, PyObject_GetAttrString(C, "_disabled_torch_function_impl"));
    PyErr_Clear();
    Py_XSETREF(tn->strs, PyDict_New());
    Py_DECREF(C);
    if (tn->strs == NULL) {
        PyErr_Clear();
    }
    /* What layout.c reads, each optional: a torch without one measures a little less. */
    static const char *const attr_names[TGC_TA_COUNT] = TGC_TA_NAMES;
    for (int i = 0; i < TGC_TA_COUNT; i++) {
        PyObject *a = PyObject_GetAttrString(tb, attr_names[i]);  /* new reference or NULL */
        if (a != NULL && i < TGC_TA_GETTERS && Py_TYPE(a)->tp_descr_get == NULL) {
            Py_CLEAR(a);
        }
        PyErr_Clear();
        Py_XSETREF(tn->attr[i], a);
    }
    tn->type = tb;
    Py_XSETREF(tn->get_shape, shape);
    Py_XSETREF(tn->get_dtype, dtype);
    Py_XSETREF(tn->get_device, device);
    Py_XSETREF(tn->untyped_storage, storage);
    Py_XSETREF(tn->get_is_sparse, sparse);
    Py_XSETREF(tn->no_subclass_dispatch, nosub);
    return 1;
}

PyObject *
tgc_tensor_str(tgc_tensor_state *tn, PyObject *v)
{
    /* borrowed */
    PyObject *s = tn->strs ? PyDict_GetItemWithError(tn->strs, v) : NULL;
    if (s != NULL) {
        return Py_NewRef(s);
    }
    PyErr_Clear();  /* an unhashable value from a subclass: just not cached */
    s = PyObject_Str(v);
    if (s != NULL && tn->strs != NULL && PyDict_GET_SIZE(tn->strs) < 256 &&
        PyDict_SetItem(tn->strs, v, s) < 0) {
        PyErr_Clear();
    }
    return s;
}

int
tgc_tensor_may_dispatch(tgc_tensor_state *tn, PyTypeObject *tp)
{
    if ((PyObject *)tp == tn->type) {
        return 0;
    }
    if (tn->tensor_cls == NULL) {
        /* torch.Tensor, looked up once torch has finished importing */
        PyObject *torch = PyImport_GetModule(tn->str_torch);  /* new reference or NULL */
        PyObject *cls = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
        if (cls != NULL && PyType_Check(cls)) {
            tn->tensor_cls = Py_NewRef(cls);
        }
        Py_XDECREF(cls);
        Py_XDECREF(torch);
        PyErr_Clear();
    }
    if ((PyObject *)tp == tn->tensor_cls) {
        /* torch only dispatches .shape & co. of exact torch.Tensor to a TorchFunctionMode, which
         * DisableTorchFunctionSubclass does not stop either: nothing to guard against */
        return 0;
    }
    PyObject *tf = PyObject_GetAttrString((PyObject *)tp, "__torch_function__");
    PyObject *fn = tf && PyMethod_Check(tf) ? PyMethod_GET_FUNCTION(tf) : tf;
    int disabled = fn != NULL && fn == tn->disabled_tf;
    Py_XDECREF(tf);
    PyErr_Clear();
    return !disabled;
}

void
tgc_tensor_nodispatch_enter(tgc_tensor_state *tn, tgc_tensor_nodispatch *g)
{
    g->ctx = g->entered = NULL;
    if (tn->no_subclass_dispatch == NULL) {
        return;
    }
    g->ctx = PyObject_CallNoArgs(tn->no_subclass_dispatch);
    g->entered = g->ctx ? PyObject_CallMethod(g->ctx, "__enter__", NULL) : NULL;
    if (g->entered == NULL) {
        PyErr_Clear();  /* dispatch stays on: subclass code may run, nothing worse */
        Py_CLEAR(g->ctx);
    }
}

void
tgc_tensor_nodispatch_exit(tgc_tensor_nodispatch *g)
{
    if (g->ctx == NULL) {
        return;
    }
    PyObject *exc, *val, *tb;
    PyErr_Fetch(&exc, &val, &tb);  /* a reader's error survives __exit__ */
    PyObject *r = PyObject_CallMethod(g->ctx, "__exit__", "OOO", Py_None, Py_None, Py_None);
    if (r == NULL) {
        PyErr_Clear();
    }
    Py_XDECREF(r);
    PyErr_Restore(exc, val, tb);
    Py_CLEAR(g->ctx);
    Py_CLEAR(g->entered);
}
