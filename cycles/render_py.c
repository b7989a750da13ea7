/* render_py.c: the render worker called from Python code (contract in render_py.h): the
 * interrupt check that lets a Ctrl-C stop a layout. */
#include "render_py.h"

#include "tensorgc/compat.h"

/* Renders in progress that keep the GIL (inside a gc callback), counted so that a render
 * without the GIL does not take the GIL back for its interrupt check while one of them holds it
 * waiting for the layout lock: that wait would last the other's whole budget. Atomic: read
 * without the GIL. */
static int render_py__keeping;

typedef struct {
    PyThreadState *tstate;  /* the caller's, while the GIL is released */
    int keep_gil;
    int main;               /* the main thread: the only one Python's signal handlers run in */
    int hit;
} render_py__ctx;

static int
render_py__stop(void *arg)
{
    render_py__ctx *ctx = arg;
    if (!ctx->main) {
        return 0;
    }
    if (ctx->keep_gil) {
        ctx->hit = PyOS_InterruptOccurred();
        return ctx->hit;
    }
    if (__atomic_load_n(&render_py__keeping, __ATOMIC_RELAXED) != 0) {
        return 0;
    }
    PyEval_RestoreThread(ctx->tstate);
    if (PyOS_InterruptOccurred()) {  /* consumes the Ctrl-C: given back at once */
        /* The program's SIGINT handler runs here and now, as during time.sleep: the layout stops
         * only when it raises (KeyboardInterrupt by default), and its exception is the call's. A
         * handler that only takes note (a "stop after this step" flag) lets the layout go on:
         * stopping it anyway raised GraphvizError into a program that had asked for nothing. */
        PyErr_SetInterrupt();
        ctx->hit = PyErr_CheckSignals() < 0;
    }
    ctx->tstate = PyEval_SaveThread();
    return ctx->hit;
}

/* Whether this is the main thread (GIL held, no exception pending); never raises. Where threading was never imported,
 * no other Python thread was started through it: the main thread, most likely, and
 * PyOS_InterruptOccurred answers 0 elsewhere anyway. */
static int
render_py__is_main(void)
{
    int main = 1;
    PyObject *name = PyUnicode_FromString("threading");  /* new reference */
    PyObject *threading = name != NULL ? PyImport_GetModule(name) : NULL;  /* new reference */
    PyObject *thread = threading != NULL ? PyObject_CallMethod(threading, "main_thread", NULL)
                                         : NULL;  /* new reference */
    PyObject *ident = thread != NULL ? PyObject_GetAttrString(thread, "ident") : NULL;
    if (ident != NULL && PyLong_Check(ident)) {
        unsigned long id = PyLong_AsUnsignedLong(ident);
        main = PyErr_Occurred() != NULL || id == PyThread_get_thread_ident();
    }
    Py_XDECREF(ident);
    Py_XDECREF(thread);
    Py_XDECREF(threading);
    Py_XDECREF(name);
    PyErr_Clear();  /* called with no exception pending (render_py.h): any is one of ours */
    return main;
}

int
tgc_render_py(const char *dot, size_t n, char **svg, size_t *svg_len, char *err,
              size_t err_len, int keep_gil)
{
    render_py__ctx ctx = {NULL, keep_gil, 1, 0};
    tgc_renderer_interrupt intr = {render_py__stop, &ctx};
    int rc;
    if (keep_gil) {
        __atomic_add_fetch(&render_py__keeping, 1, __ATOMIC_RELAXED);
        rc = tgc_renderer_svg(dot, n, svg, svg_len, err, err_len, &intr);
        __atomic_sub_fetch(&render_py__keeping, 1, __ATOMIC_RELAXED);
    }
    else {
        /* A signal that came while C code ran before this call (a report's DOT being built) has
         * not run its handler yet: it runs now, and when it raises, no layout starts. Left for
         * later, it ran inside render_py__is_main's call into threading, whose exception that
         * function clears: the Ctrl-C was lost, and the layout waited out its budget. */
        if (PyErr_CheckSignals() < 0) {
            snprintf(err, err_len, "the layout was interrupted");
            return TGC_RENDER_INTERRUPTED;
        }
        ctx.main = render_py__is_main();
        ctx.tstate = PyEval_SaveThread();
        rc = tgc_renderer_svg(dot, n, svg, svg_len, err, err_len, &intr);
        PyEval_RestoreThread(ctx.tstate);
    }
    /* Without keep_gil, an exception is pending only when the program's signal handler raised
     * (render_py__stop), and then rc is TGC_RENDER_INTERRUPTED. */
    return rc;
}
