/* testing.c: the extension module tensorgc._tensorgc_testing, the switches and counters of the
 * detector for tests and benchmarks (cycles/testing.c writes them). Its exec imports its sibling
 * _tensorgc (the same package: a copy of the extension loaded under another package name gets its
 * own), takes the testing API from its capsule (testing.h) and adds each function bound to that
 * module, so they read and turn that module's state. This file is the whole of the extension:
 * nothing of the main extension is compiled in twice. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "module/testing.h"

/* The main module beside this one: "pkg._tensorgc_testing" -> "pkg._tensorgc". New reference,
 * or NULL with an exception. */
static PyObject *
testing__sibling(PyObject *module)
{
    PyObject *name = PyModule_GetNameObject(module);  /* new reference */
    if (name == NULL) {
        return NULL;
    }
    Py_ssize_t dot = PyUnicode_FindChar(name, '.', 0, PyUnicode_GET_LENGTH(name), -1);
    PyObject *pkg = dot >= 0 ? PyUnicode_Substring(name, 0, dot + 1) : PyUnicode_FromString("");
    PyObject *main = pkg ? PyUnicode_FromFormat("%U_tensorgc", pkg) : NULL;
    PyObject *mod = main ? PyImport_Import(main) : NULL;
    Py_DECREF(name);
    Py_XDECREF(pkg);
    Py_XDECREF(main);
    return mod;
}

static int
testing_exec(PyObject *module)
{
    PyObject *main = testing__sibling(module);  /* new reference */
    if (main == NULL) {
        return -1;
    }
    int rc = -1;
    PyObject *name = PyModule_GetNameObject(module);  /* new reference: the functions' module */
    PyObject *cap = name ? PyObject_GetAttrString(main, "_testing") : NULL;
    const tgc_testing_api *api = cap ? PyCapsule_GetPointer(cap, TGC_TESTING_CAPSULE) : NULL;
    if (api == NULL) {
        goto done;
    }
    if (api->version != TGC_TESTING_API_VERSION) {
        PyErr_Format(PyExc_ImportError, "%U: built from other sources than %R", name, main);
        goto done;
    }
    for (PyMethodDef *const *t = api->tables; *t != NULL; t++) {
        for (PyMethodDef *ml = *t; ml->ml_name != NULL; ml++) {
            PyObject *fn = PyCFunction_NewEx(ml, main, name);  /* new reference */
            if (fn == NULL || PyModule_AddObjectRef(module, ml->ml_name, fn) < 0) {
                Py_XDECREF(fn);
                goto done;
            }
            Py_DECREF(fn);
        }
    }
    rc = 0;
done:
    Py_XDECREF(cap);
    Py_XDECREF(name);
    Py_DECREF(main);
    return rc;
}

static PyModuleDef_Slot testing_slots[] = {
    {Py_mod_exec, testing_exec},
    {0, NULL},
};

static struct PyModuleDef testing_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tensorgc._tensorgc_testing",
    .m_doc = "The cycle detector's switches and counters, for tensorgc's tests and benchmarks "
             "only; not an API.",
    .m_size = 0,
    .m_slots = testing_slots,
};

PyMODINIT_FUNC
PyInit__tensorgc_testing(void)
{
    return PyModuleDef_Init(&testing_def);
}
