/* render_py.h: the render worker (renderer.h) called from Python code, with Ctrl-C. Used by
 * render_svg (binding.c) and a report's .svg (report_page.c). */
#ifndef TGC_RENDER_PY_H
#define TGC_RENDER_PY_H

#include <Python.h>

#include "renderer.h"

/* Renders dot (n bytes, NUL-terminated) as tgc_renderer_svg does; the GIL is held on entry and
 * on return. keep_gil: the caller is inside our gc callback and keeps the GIL while it waits (no
 * other thread may run mid-collection); otherwise the GIL is released while the worker lays out.
 *
 * A Ctrl-C (SIGINT with Python's handler installed) in the main thread stops the layout within
 * TGC_RENDERER_POLL_MS plus the wait for the GIL, and returns TGC_RENDER_INTERRUPTED. The
 * interrupt is never lost: it is given back to the program (PyErr_SetInterrupt), so that
 * PyErr_CheckSignals, or the interpreter's next check, runs the program's SIGINT handler
 * (KeyboardInterrupt by default). With keep_gil, the caller decides when (cycles.h's
 * `interrupted`: at the end of our gc callback, after the observers ran). Never raises. */
int tgc_render_py(const char *dot, size_t n, char **svg, size_t *svg_len, char *err,
                  size_t err_len, int keep_gil);

#endif /* TGC_RENDER_PY_H */
