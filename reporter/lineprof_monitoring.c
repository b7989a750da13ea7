/* lineprof_monitoring.c: the line profiler's event source on Python 3.12+ (contract in
 * lineprof_py.h): the sys.monitoring callbacks that tensorgc/lineprof/__init__.py registers for the
 * profiled code objects only, so no other code raises an event. Each converts its arguments and
 * hands the event to lineprof_events.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "module/state.h"
#include "reporter.h"

/* The arguments sys.monitoring passes: a code object, then `more` of them (at most max). */
static int
lp__code_arg(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t more, Py_ssize_t max,
             const char *fn)
{
    if (nargs < 1 + more || nargs > 1 + max || !PyCode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s() takes a code object and %zd more argument(s)", fn,
                     more);
        return -1;
    }
    return 0;
}

/* The line profiler's part of the state of the module a callback is bound to. */
static tgc_lineprof *
lp__of(PyObject *module)
{
    return &tgc_state_of(module)->reporter->lineprof;
}

/* sys.monitoring's PY_START: (code, offset). The offset is not 0 for closures (their cells are
 * copied first), so only the event says whether a frame starts or resumes. */
static PyObject *
lp_mon_start(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (lp__code_arg(args, nargs, 1, 1, "_lp_start") < 0) {
        return NULL;
    }
    tgc_lineprof_dispatch(lp__of(module), LP_EV_ENTER, args[0],
                 ((PyCodeObject *)args[0])->co_firstlineno);
    Py_RETURN_NONE;
}

/* sys.monitoring's PY_RESUME / PY_THROW: (code, offset): a generator or coroutine goes on, on
 * the line of that offset */
static PyObject *
lp_mon_resume(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (lp__code_arg(args, nargs, 1, 2, "_lp_resume") < 0) {
        return NULL;
    }
    PyCodeObject *code = (PyCodeObject *)args[0];
    int line = code->co_firstlineno;
    long off = PyLong_Check(args[1]) ? PyLong_AsLong(args[1]) : -1;
    if (off >= 0 && off < INT_MAX) {
        int l = PyCode_Addr2Line(code, (int)off);
        line = l > 0 ? l : line;
    }
    PyErr_Clear();
    tgc_lineprof_dispatch(lp__of(module), LP_EV_RESUME, args[0], line);
    Py_RETURN_NONE;
}

/* sys.monitoring's LINE: (code, line) */
static PyObject *
lp_mon_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (lp__code_arg(args, nargs, 1, 1, "_lp_line") < 0) {
        return NULL;
    }
    long line = PyLong_Check(args[1]) ? PyLong_AsLong(args[1]) : -1;
    if (line < 0 || line > INT_MAX) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    tgc_lineprof_dispatch(lp__of(module), LP_EV_LINE, args[0], (int)line);
    Py_RETURN_NONE;
}

/* sys.monitoring's PY_RETURN / PY_YIELD / PY_UNWIND: (code, offset, value) */
static PyObject *
lp_mon_leave(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (lp__code_arg(args, nargs, 2, 2, "_lp_leave") < 0) {
        return NULL;
    }
    tgc_lineprof_dispatch(lp__of(module), LP_EV_LEAVE, args[0], 0);
    Py_RETURN_NONE;
}

PyMethodDef tgc_lineprof_monitoring_methods[] = {
    {"_lp_start", (PyCFunction)(void (*)(void))lp_mon_start, METH_FASTCALL,
     "_lp_start($module, code, offset, /)\n--\n\n"
     "sys.monitoring PY_START callback of the line profiler."},
    {"_lp_resume", (PyCFunction)(void (*)(void))lp_mon_resume, METH_FASTCALL,
     "_lp_resume($module, code, offset, exception=None, /)\n--\n\n"
     "sys.monitoring PY_RESUME and PY_THROW callback of the line profiler."},
    {"_lp_line", (PyCFunction)(void (*)(void))lp_mon_line, METH_FASTCALL,
     "_lp_line($module, code, line, /)\n--\n\n"
     "sys.monitoring LINE callback of the line profiler."},
    {"_lp_leave", (PyCFunction)(void (*)(void))lp_mon_leave, METH_FASTCALL,
     "_lp_leave($module, code, offset, value, /)\n--\n\n"
     "sys.monitoring PY_RETURN, PY_YIELD and PY_UNWIND callback of the line profiler."},
    {NULL, NULL, 0, NULL},
};
