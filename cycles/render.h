/* render.h: Graphviz's dot layout and SVG output, in plain C (render.c). Only the render worker
 * (render_main.c, the executable tensorgc/_tgc_render) and the C unit tests link it: the extension
 * never runs Graphviz in the user's process; it asks the worker through renderer.h. */
#ifndef TGC_RENDER_H
#define TGC_RENDER_H

#include <stddef.h>

/* Lays out a NUL-terminated DOT graph and returns 0 with a malloc'd, inert SVG (from "<svg" on,
 * NUL-terminated; *svg_len without the NUL), or -1 with a message in err. Serialised by one mutex
 * (Graphviz is not thread safe); no time bound of its own: the worker's parent enforces one. */
int tgc_render_svg(const char *dot, size_t dot_len, char **svg, size_t *svg_len,
                   char *err, size_t err_len);
/* Frees Graphviz's context; the next render makes a new one. */
void tgc_render_shutdown(void);

#endif /* TGC_RENDER_H */
