// The timeline page's interaction, inlined into the page by tensorgc/timeline.py (no network, no
// library). The page's SVG draws the allocations in plot coordinates inside <g id="tgc-plot">;
// this script zooms and pans that group along x (wheel, drag, shift-drag brush, Reset), keeps
// the axes' ticks round for the range in view, pins an allocation's details in the side panel on
// click, and highlights the allocations whose stack matches the search box. The data of each
// allocation is in the JSON block #tgc-data (escaped for HTML). Performance marks
// ("tgc-ready", "tgc-zoom") let benchmarks time the first paint and each zoom step.
(function () {
  "use strict";
  var svg = document.getElementById("tgc-svg");
  var plot = document.getElementById("tgc-plot");
  var axis = document.getElementById("tgc-xaxis");
  var brush = document.getElementById("tgc-brush");
  var panel = document.getElementById("tgc-panel");
  var search = document.getElementById("tgc-search");
  var status = document.getElementById("tgc-status");
  if (!svg || !plot) return;
  var data = JSON.parse(document.getElementById("tgc-data").textContent);
  var L = data.left, W = data.width, T = data.top, H = data.height;
  var EV = Math.max(data.events, 1), COLS = data.columns;
  var view = { a: 0, b: COLS };   // the columns in view
  var NS = "http://www.w3.org/2000/svg";

  function fmtBytes(v) {
    var u = ["B", "K", "M", "G", "T"], i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (Math.round(v * 100) / 100) + u[i];
  }
  function colToEvent(c) { return c / COLS * EV; }
  // round steps: 1, 2, 5 times a power of ten
  function niceStep(span, n) {
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9))));
    var m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function timeAt(ev) {
    if (!data.times || !data.times.length) return null;
    var k = Math.min(data.times.length - 1, Math.max(0, Math.round(ev / EV * (data.times.length - 1))));
    return data.times[k];
  }
  function drawAxis() {
    while (axis.firstChild) axis.removeChild(axis.firstChild);
    var e0 = colToEvent(view.a), e1 = colToEvent(view.b);
    var step = Math.max(1, niceStep(e1 - e0, 8));
    for (var e = Math.ceil(e0 / step) * step; e <= e1; e += step) {
      var x = L + (e / EV * COLS - view.a) / (view.b - view.a) * W;
      var t = document.createElementNS(NS, "text");
      t.setAttribute("x", x.toFixed(1));
      t.setAttribute("y", T + H + 16);
      t.setAttribute("class", "tick");
      var label = "event " + Math.round(e).toLocaleString("en-US");
      var us = timeAt(e);
      if (us !== null) label += " (+" + ((us - data.times[0]) / 1e6).toFixed(3) + " s)";
      t.textContent = label;
      axis.appendChild(t);
      var l = document.createElementNS(NS, "line");
      l.setAttribute("x1", x.toFixed(1)); l.setAttribute("x2", x.toFixed(1));
      l.setAttribute("y1", T + H); l.setAttribute("y2", T + H + 4);
      l.setAttribute("class", "tickl");
      axis.appendChild(l);
    }
    status.textContent = "events " + Math.round(e0).toLocaleString("en-US") + " to " +
      Math.round(e1).toLocaleString("en-US") + " of " + EV.toLocaleString("en-US");
  }
  function apply() {
    var t0 = performance.now();
    var sx = COLS / (view.b - view.a);
    // plot coordinates: x = L + c * W / COLS; shown: L + (c - a) * W / (b - a)
    plot.setAttribute("transform", "translate(" + (L - L * sx - view.a * W / COLS * sx).toFixed(4) +
      ",0) scale(" + sx.toFixed(6) + ",1)");
    drawAxis();
    performance.mark("tgc-zoom");
    svg.setAttribute("data-zoom-ms", (performance.now() - t0).toFixed(2));
  }
  function setView(a, b) {
    var span = Math.max(b - a, Math.min(COLS, 2));
    a = Math.max(0, Math.min(a, COLS - span));
    view.a = a; view.b = Math.min(COLS, a + span);
    apply();
  }
  function colAt(clientX) {
    var r = svg.getBoundingClientRect();
    var vb = svg.viewBox.baseVal;
    var x = (clientX - r.left) / r.width * vb.width;
    return view.a + (x - L) / W * (view.b - view.a);
  }
  svg.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var c = Math.max(view.a, Math.min(view.b, colAt(ev.clientX)));
    var f = ev.deltaY > 0 ? 1.25 : 0.8;
    setView(c - (c - view.a) * f, c + (view.b - c) * f);
  }, { passive: false });
  var drag = null;
  svg.addEventListener("mousedown", function (ev) {
    drag = { x: ev.clientX, c: colAt(ev.clientX), a: view.a, b: view.b, brush: ev.shiftKey,
             moved: false };
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) return;
    if (Math.abs(ev.clientX - drag.x) > 3) drag.moved = true;
    if (drag.brush) {
      var c = colAt(ev.clientX), lo = Math.min(c, drag.c), hi = Math.max(c, drag.c);
      brush.setAttribute("x", (L + (lo - view.a) / (view.b - view.a) * W).toFixed(1));
      brush.setAttribute("width", ((hi - lo) / (view.b - view.a) * W).toFixed(1));
      brush.setAttribute("visibility", "visible");
    } else {
      var dc = colAt(drag.x) - colAt(ev.clientX);
      setView(drag.a + dc, drag.b + dc);
      drag.x = ev.clientX; drag.a = view.a; drag.b = view.b;
    }
  });
  window.addEventListener("mouseup", function (ev) {
    if (!drag) return;
    if (drag.brush && drag.moved) {
      var c = colAt(ev.clientX);
      brush.setAttribute("visibility", "hidden");
      setView(Math.min(c, drag.c), Math.max(c, drag.c));
    }
    drag = null;
  });
  document.getElementById("tgc-reset").addEventListener("click", function () { setView(0, COLS); });

  function show(i) {
    var d = data.allocs[i];
    var rows = [
      ["size", fmtBytes(d.size) + " (" + d.size.toLocaleString("en-US") + " bytes)"],
      ["address", d.addr],
      ["allocated", d.alloc >= 0 ? "event " + d.alloc.toLocaleString("en-US") : "before the trace"],
      ["freed", d.free >= 0 ? "event " + d.free.toLocaleString("en-US") : "alive at the end"],
      ["category", d.cat || "unknown"]];
    while (panel.firstChild) panel.removeChild(panel.firstChild);
    var h = document.createElement("h3"); h.textContent = "Allocation " + fmtBytes(d.size);
    panel.appendChild(h);
    var dl = document.createElement("dl");
    rows.forEach(function (r) {
      var dt = document.createElement("dt"); dt.textContent = r[0];
      var dd = document.createElement("dd"); dd.textContent = r[1];
      dl.appendChild(dt); dl.appendChild(dd);
    });
    panel.appendChild(dl);
    var pre = document.createElement("pre");
    pre.textContent = d.frames.length ? d.frames.join("\n") : "no stack recorded";
    panel.appendChild(pre);
    var old = plot.querySelector(".pinned");
    if (old) old.classList.remove("pinned");
    var el = plot.querySelector('[data-i="' + i + '"]');
    if (el) el.classList.add("pinned");
  }
  plot.addEventListener("click", function (ev) {
    var i = ev.target.getAttribute && ev.target.getAttribute("data-i");
    if (i !== null && i !== undefined && !(drag && drag.moved)) show(+i);
  });

  search.addEventListener("input", function () {
    var q = search.value.trim().toLowerCase(), hits = 0;
    var els = plot.querySelectorAll("[data-i]");
    for (var k = 0; k < els.length; k++) {
      var d = data.allocs[+els[k].getAttribute("data-i")];
      var hit = q && d.frames.join("\n").toLowerCase().indexOf(q) >= 0;
      els[k].classList.toggle("hit", !!hit);
      hits += hit ? 1 : 0;
    }
    plot.classList.toggle("searching", !!q);
    document.getElementById("tgc-hits").textContent = q ? hits + " match" + (hits === 1 ? "" : "es") : "";
  });
  document.querySelectorAll(".oom").forEach(function (o) {
    o.addEventListener("click", function () {
      var c = +o.getAttribute("data-col");
      setView(c - COLS / 40, c + COLS / 40);
    });
  });
  apply();
  performance.mark("tgc-ready");
  svg.setAttribute("data-ready", "1");
})();
