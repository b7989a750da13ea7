/* render.c: DOT -> SVG with Graphviz's C library (contract in render.h). No Python here: it runs
 * in the render worker (render_main.c), never in the user's process. Graphviz is not thread safe
 * (global parser and error state), so one mutex serialises it. */
#include "render.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <gvc.h>
#include <gvplugin.h>

#include "tensorgc/compat.h"

/* The two plugins we need, linked in, so no plugin config file or directory is read at run
 * time. Anything else (other layouts, PNG) is deliberately unavailable. */
extern gvplugin_library_t gvplugin_dot_layout_LTX_library;
extern gvplugin_library_t gvplugin_core_LTX_library;
static lt_symlist_t render__builtins[] = {
    {"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
    {"gvplugin_core_LTX_library", &gvplugin_core_LTX_library},
    {0, 0},
};

/* All protected by render__lock. */
static pthread_mutex_t render__lock = PTHREAD_MUTEX_INITIALIZER;
static GVC_t *render__gvc;
static char render__errmsg[512];
static pthread_once_t render__atfork_once = PTHREAD_ONCE_INIT;

/* A fork while another thread renders would hand the child a lock held forever and Graphviz's
 * global parser state mid-parse: fork waits for the render in progress instead (prepare takes
 * the lock; parent and child release it), so the child inherits a quiet Graphviz. */
static void
render__before_fork(void)
{
    pthread_mutex_lock(&render__lock);
}

static void
render__after_fork(void)
{
    pthread_mutex_unlock(&render__lock);
}

static void
render__register_atfork(void)
{
    (void)pthread_atfork(render__before_fork, render__after_fork, render__after_fork);
}

static int
render__on_error(char *msg)
{
    size_t used = strlen(render__errmsg);
    if (used < sizeof(render__errmsg) - 1) {
        snprintf(render__errmsg + used, sizeof(render__errmsg) - used, "%s", msg);
    }
    return 0;
}

/* Graphviz output we inline into HTML must be inert: no script, no link. The labels were escaped
 * on the way in, so a user's string is text (between tags, where '<' is always &lt;); this is
 * the belt to those braces. Inside tags: no script, iframe or foreignObject element and no href
 * at all (the DOT we draw has no URL attributes; a "javascript:" in a label is text). */
static int
render__inert(const char *s, size_t n)
{
    static const char *bad[] = {"<script", "<foreignobject", "<iframe"};
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '<') {
            continue;
        }
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            size_t m = strlen(bad[k]);
            if (i + m <= n && strncasecmp(s + i, bad[k], m) == 0) {
                return 0;
            }
        }
        for (size_t j = i + 1; j < n && s[j] != '>'; j++) {  /* the tag's attributes */
            if (j + 4 <= n && strncasecmp(s + j, "href", 4) == 0) {
                return 0;
            }
        }
    }
    return 1;
}

int
tgc_render_svg(const char *dot, size_t dot_len, char **svg, size_t *svg_len,
               char *err, size_t err_len)
{
    Agraph_t *g;
    char *data = NULL;
    tgc_gv_len_t len = 0;
    int rc = -1;

    *svg = NULL;
    *svg_len = 0;
    (void)dot_len;  /* agmemread reads up to the NUL */
    pthread_once(&render__atfork_once, render__register_atfork);
    pthread_mutex_lock(&render__lock);
    render__errmsg[0] = '\0';
    if (render__gvc == NULL) {
        render__gvc = gvContextPlugins(render__builtins, 0);
        if (render__gvc == NULL) {
            snprintf(err, err_len, "Graphviz: could not create a context");
            goto fail_context;
        }
        agseterrf(render__on_error);
        agseterr(AGERR);  /* errors only; warnings (e.g. fonts) are not ours to report */
    }
    g = agmemread(dot);
    if (g == NULL) {
        snprintf(err, err_len, "Graphviz could not parse the graph: %s",
                 render__errmsg[0] ? render__errmsg : "syntax error");
        goto fail_parse;
    }
    if (gvLayout(render__gvc, g, "dot") != 0) {
        snprintf(err, err_len, "Graphviz layout failed: %s",
                 render__errmsg[0] ? render__errmsg : "unknown error");
        goto fail_layout;
    }
    if (gvRenderData(render__gvc, g, "svg", &data, &len) != 0 || data == NULL) {
        snprintf(err, err_len, "Graphviz SVG rendering failed: %s",
                 render__errmsg[0] ? render__errmsg : "unknown error");
        goto fail_render;
    }
    /* Keep from <svg on: the XML prolog and DOCTYPE do not belong inside HTML. */
    const char *start = strstr(data, "<svg");
    if (start == NULL || !render__inert(start, (size_t)len - (size_t)(start - data))) {
        snprintf(err, err_len, "Graphviz output was not an inert SVG document; not inlined");
        goto fail_output;
    }
    size_t n = (size_t)len - (size_t)(start - data);
    *svg = malloc(n + 1);
    if (*svg == NULL) {
        snprintf(err, err_len, "out of memory");
        goto fail_output;
    }
    memcpy(*svg, start, n);
    (*svg)[n] = '\0';
    *svg_len = n;
    rc = 0;

fail_output:
    gvFreeRenderData(data);
fail_render:
    gvFreeLayout(render__gvc, g);
fail_layout:
    agclose(g);
fail_parse:
fail_context:
    pthread_mutex_unlock(&render__lock);
    return rc;
}

void
tgc_render_shutdown(void)
{
    pthread_mutex_lock(&render__lock);
    if (render__gvc != NULL) {
        gvFreeContext(render__gvc);
        render__gvc = NULL;
    }
    pthread_mutex_unlock(&render__lock);
}
