/* log.c: what tensorgc does with an exception it must not raise (contract in
 * include/tensorgc/log.h): logged with its traceback on logger "tensorgc", else written as
 * unraisable; a KeyboardInterrupt handed back to the program instead. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "tensorgc/log.h"

int
tgc_log_keep_interrupt(int *held)
{
    if (!PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        return 0;
    }
    /* Logged and dropped, a Ctrl-C that hit a repr, torch's metadata or an observer would leave
     * the program going on as if never interrupted: it is the program's. */
    PyErr_Clear();
    if (held != NULL) {
        *held = 1;  /* the caller gives it back once it may */
    }
    else {
        PyErr_SetInterrupt();
    }
    return 1;
}

void
tgc_log_exception(PyObject **logger, int *held, const char *what)
{
    if (tgc_log_keep_interrupt(held)) {
        return;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) {
        return;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) {
        PyException_SetTraceback(value, tb);
    }
    if (*logger == NULL && !tgc_compat_is_finalizing()) {
        PyObject *logging = PyImport_ImportModule("logging");
        *logger = logging ? PyObject_CallMethod(logging, "getLogger", "s", "tensorgc") : NULL;
        Py_XDECREF(logging);
        PyErr_Clear();
    }
    PyObject *ok = NULL;
    if (*logger != NULL && value != NULL) {
        PyObject *meth = PyObject_GetAttrString(*logger, "error");
        PyObject *args = meth ? Py_BuildValue("(ss)", "tensorgc: %s raised", what) : NULL;
        PyObject *kw = args ? Py_BuildValue("{s:O}", "exc_info", value) : NULL;
        ok = kw ? PyObject_Call(meth, args, kw) : NULL;
        Py_XDECREF(meth);
        Py_XDECREF(args);
        Py_XDECREF(kw);
    }
    if (ok == NULL) {
        /* logging itself failed (or is gone at shutdown): fall back to sys.unraisablehook */
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        PyErr_WriteUnraisable(NULL);
        return;
    }
    Py_DECREF(ok);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}
