/* page.c: the self-contained HTML page of a cycle report (contract in page.h): title, table,
 * summary text and the inlined SVG, with a small pan/zoom script. Plain C over tgc_buf. */
#include "page.h"

#include <string.h>

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
