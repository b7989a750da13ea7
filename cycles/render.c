/* render.c: DOT -> SVG with Graphviz's C library, and the self-contained HTML page around it.
 * No Python here: report.c hands in C strings and releases the GIL around tgc_render_svg.
 * Graphviz is not thread safe (global parser and error state), so one mutex serialises it. */
#include "tgc.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <strings.h>
#include <string.h>

#include <gvc.h>
#include <gvplugin.h>

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

/* Graphviz output we inline into HTML must be inert: no script, no javascript: URLs. The labels
 * were escaped on the way in; this is the belt to those braces. */
static int
render__inert(const char *s, size_t n)
{
    static const char *bad[] = {"<script", "javascript:", "<foreignobject", "<iframe"};
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            size_t m = strlen(bad[k]);
            if (i + m <= n && strncasecmp(s + i, bad[k], m) == 0) {
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

static const char page_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta name=\"generator\" content=\"tensorgc\">\n<title>";
static const char page_style[] =
    "</title>\n<style>\n"
    "body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;color:#222}\n"
    "header{padding:12px 20px;background:#263238;color:#fff}\n"
    "header h1{font-size:18px;margin:0}\n"
    "main{padding:12px 20px}\n"
    "table{border-collapse:collapse;margin:8px 0 12px}\n"
    "th,td{border:1px solid #cfd8dc;padding:4px 8px;text-align:left;vertical-align:top}\n"
    "th{background:#eceff1}td.num{text-align:right;font-variant-numeric:tabular-nums}\n"
    "pre{background:#f5f7f8;border:1px solid #e0e6e8;padding:8px;overflow:auto;white-space:pre-wrap}\n"
    "#wrap{display:flex;gap:12px;align-items:flex-start}\n"
    "#graph{flex:1;border:1px solid #cfd8dc;height:70vh;overflow:hidden;cursor:grab;background:#fff}\n"
    "#graph svg{width:100%;height:100%}\n"
    "#detail{width:28%;min-width:220px;height:70vh;margin:0}\n"
    ".err{color:#b71c1c}\n"
    "</style>\n</head>\n<body>\n<header><h1>";
/* Pan with the mouse, zoom with the wheel, hover a node for its details (the Graphviz tooltip). */
static const char page_script[] =
    "<script>\n(function(){\n"
    "var box=document.getElementById('graph');if(!box)return;var svg=box.querySelector('svg');"
    "if(!svg)return;\n"
    "var vb=svg.viewBox.baseVal;if(!vb||!vb.width){return;}\n"
    "svg.removeAttribute('width');svg.removeAttribute('height');\n"
    "var v={x:vb.x,y:vb.y,w:vb.width,h:vb.height},drag=null;\n"
    "function set(){svg.setAttribute('viewBox',v.x+' '+v.y+' '+v.w+' '+v.h);}\n"
    "box.addEventListener('wheel',function(e){e.preventDefault();var r=svg.getBoundingClientRect();"
    "var f=e.deltaY>0?1.15:1/1.15,mx=(e.clientX-r.left)/r.width,my=(e.clientY-r.top)/r.height;"
    "v.x+=(v.w-v.w*f)*mx;v.y+=(v.h-v.h*f)*my;v.w*=f;v.h*=f;set();},{passive:false});\n"
    "box.addEventListener('mousedown',function(e){drag={x:e.clientX,y:e.clientY};});\n"
    "window.addEventListener('mouseup',function(){drag=null;});\n"
    "box.addEventListener('mousemove',function(e){if(!drag)return;var r=svg.getBoundingClientRect();"
    "v.x-=(e.clientX-drag.x)*v.w/r.width;v.y-=(e.clientY-drag.y)*v.h/r.height;"
    "drag={x:e.clientX,y:e.clientY};set();});\n"
    "var out=document.getElementById('detail');\n"
    "svg.querySelectorAll('g.node').forEach(function(n){n.addEventListener('mouseenter',function(){"
    "var a=n.querySelector('a');var t=a?(a.getAttribute('xlink:title')||a.getAttribute('title')):null;"
    "if(!t){var ti=n.querySelector('title');t=ti?ti.textContent:'';}"
    "out.textContent=t;});});\n"
    "})();\n</script>\n";

void
tgc_html_page(tgc_buf *out, const tgc_page *p)
{
    tgc_buf_puts(out, page_head);
    tgc_buf_html(out, p->title, strlen(p->title));
    tgc_buf_puts(out, page_style);
    tgc_buf_html(out, p->title, strlen(p->title));
    tgc_buf_puts(out, "</h1></header>\n<main>\n");
    if (p->table_html != NULL) {
        tgc_buf_puts(out, p->table_html);
    }
    tgc_buf_puts(out, "<pre id=\"summary\">");
    tgc_buf_html(out, p->text, strlen(p->text));
    tgc_buf_puts(out, "</pre>\n<div id=\"wrap\">\n<div id=\"graph\">\n");
    if (p->svg != NULL) {
        tgc_buf_puts(out, p->svg);
    }
    else {
        tgc_buf_puts(out, "<p class=\"err\">No picture: ");
        tgc_buf_html(out, p->svg_error ? p->svg_error : "rendering failed",
                     strlen(p->svg_error ? p->svg_error : "rendering failed"));
        tgc_buf_puts(out, "</p>");
    }
    tgc_buf_puts(out, "\n</div>\n<pre id=\"detail\">Hover an object for its details; tensors "
                      "(red) show where they were allocated. Drag to pan, scroll to zoom.</pre>\n"
                      "</div>\n</main>\n");
    tgc_buf_puts(out, page_script);
    tgc_buf_puts(out, "</body>\n</html>\n");
}
