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
 * A Ctrl-C (SIGINT with Python's handler installed) in the main thread is noticed within
 * TGC_RENDERER_POLL_MS plus the wait for the GIL. Without keep_gil, the program's SIGINT handler
 * runs then (with the GIL, as during time.sleep): when it raises, the layout stops and
 * TGC_RENDER_INTERRUPTED is returned with that exception set (the only exception this raises);
 * when it returns, the layout goes on. A signal already pending at the call runs its handler
 * first (PyErr_CheckSignals): when it raises, no layout starts. With keep_gil (inside our gc callback, where no handler
 * may run), the layout stops and TGC_RENDER_INTERRUPTED is returned without an exception: the
 * interrupt is given back to the program (PyErr_SetInterrupt) when the caller decides (cycles.h's
 * `interrupted`: at the end of our gc callback, after the observers ran). */
int tgc_render_py(const char *dot, size_t n, char **svg, size_t *svg_len, char *err,
                  size_t err_len, int keep_gil);

#endif /* TGC_RENDER_PY_H */
