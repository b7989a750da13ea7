/* module.c: assembles the extension module tensorgc._tensorgc from its subsystems: the module
 * definition (multi-phase init), the module state (state.h: one part per subsystem), and each
 * subsystem's method table and types, added by its own binding (cycles/binding.c,
 * reporter/binding.c, graph/binding.c, allocator/binding.c). Data flows one way: this file -> the
 * bindings -> the engines (cycles/, reporter/, allocator/, graph/) -> tensor/ and common/, and
 * cycles/ -> graph/ (the reference-graph engine: edges, names, graph algorithms); no engine calls
 * a binding, cycles/ and reporter/ know nothing of each other, and graph/ knows neither: the
 * visited mark the detector lends the owner search passes through here (module_exec).
 *
 * The functions that exist for tests and benchmarks only (the detector's switches and counters,
 * the owner search's mark switch) are not added here: module/testing.c builds tensorgc._tensorgc_testing from the table this
 * module hands out in its _testing capsule. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/internals.h"
#include "tensorgc/owners.h"
#include "tensorgc/tensor.h"
#include "module/state.h"
#include "module/testing.h"
#include "cycles/binding.h"
#include "graph/binding.h"
#include "reporter/binding.h"
#include "allocator/binding.h"

PyDoc_STRVAR(shutdown_doc,
"_shutdown($module, /)\n--\n\n"
"Remove every observer, the gc hook and the tensor index, and stop the render worker "
"(registered with atexit).");

static PyObject *
shutdown(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_state *st = tgc_state_of(module);
    if (tgc_cycles_shutdown(st->cycles) < 0 || tgc_reporter_shutdown(st->reporter) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(features_doc,
"_features($module, /)\n--\n\n"
"{name: None where on, or why it is off} for each feature that depends on the interpreter: "
"what reads the collector's internals, and what relies on its generations.");

static PyObject *
features(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_state *st = tgc_state_of(module);
    PyObject *d = PyDict_New();  /* new reference */
    if (d == NULL || tgc_cycles_features(st->cycles, d) < 0 ||
        tgc_reporter_features(st->reporter, d) < 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

static PyMethodDef module_methods[] = {
    {"_shutdown", (PyCFunction)shutdown, METH_NOARGS, shutdown_doc},
    {"_features", (PyCFunction)features, METH_NOARGS, features_doc},
    {NULL, NULL, 0, NULL},
};

/* Every subsystem's public table, added at exec. */
static PyMethodDef *const module_tables[] = {
    tgc_cycles_methods, tgc_owners_methods, tgc_reporter_methods, tgc_lineprof_monitoring_methods,
    tgc_lineprof_trace_methods, tgc_alloc_methods, NULL,
};

/* What the testing module exposes, bound to this module (module/testing.h). */
static PyMethodDef *const testing_tables[] = {tgc_cycles_testing_methods,
                                               tgc_owners_testing_methods, NULL};
static const tgc_testing_api testing_api = {TGC_TESTING_API_VERSION, testing_tables};

static int
module_exec(PyObject *module)
{
    tgc_state *st = tgc_state_of(module);
    (void)tgc_internals_decide();  /* before any part asks (include/tensorgc/internals.h) */
    st->tensor = PyMem_Calloc(1, sizeof(tgc_tensor_state));
    if (st->tensor == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (tgc_tensor_init(st->tensor) < 0 || tgc_cycles_exec(module, st) < 0 ||
        tgc_reporter_exec(module, st) < 0) {
        return -1;
    }
    tgc_owners_lend_mark(tgc_cycles_heapmark());
    for (int i = 0; module_tables[i] != NULL; i++) {
        if (PyModule_AddFunctions(module, module_tables[i]) < 0) {
            return -1;
        }
    }
    PyObject *api = PyCapsule_New((void *)&testing_api, TGC_TESTING_CAPSULE, NULL);  /* new */
    int rc = api != NULL ? PyModule_AddObjectRef(module, "_testing", api) : -1;
    Py_XDECREF(api);
    return rc;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    tgc_state *st = tgc_state_of(module);
    if (st->tensor != NULL) {
        int rc = tgc_tensor_traverse(st->tensor, visit, arg);
        if (rc != 0) {
            return rc;
        }
    }
    int rc = tgc_cycles_traverse(st->cycles, visit, arg);
    return rc != 0 ? rc : tgc_reporter_traverse(st->reporter, visit, arg);
}

/* Clears every part's references and keeps the parts: objects that outlive the clear (a
 * report, a handle, a thread's tracer) find them empty, not freed. */
static int
module_clear(PyObject *module)
{
    tgc_state *st = tgc_state_of(module);
    tgc_cycles_clear(st->cycles);
    tgc_reporter_clear(st->reporter);
    if (st->tensor != NULL) {
        tgc_tensor_clear(st->tensor);
    }
    return 0;
}

static void
module_free(void *module)
{
    tgc_state *st = tgc_state_of((PyObject *)module);
    if (st == NULL) {
        return;
    }
    tgc_cycles_free(st->cycles);
    tgc_reporter_free(st->reporter);
    if (st->tensor != NULL) {
        tgc_tensor_clear(st->tensor);
    }
    PyMem_Free(st->tensor);
    st->cycles = NULL;
    st->reporter = NULL;
    st->tensor = NULL;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tensorgc._tensorgc",
    .m_doc = "tensorgc's C core: a cheap reference-cycle detector for tensors, the MemReporter's "
             "walk, the line profiler and the allocator's readers.",
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
