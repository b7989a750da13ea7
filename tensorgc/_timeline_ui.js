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
  var detailG = document.getElementById("tgc-detail");
  var areas = document.getElementById("tgc-areas");
  var data = JSON.parse(document.getElementById("tgc-data").textContent);
  var L = data.left, W = data.width, T = data.top, H = data.height;
  var EV = Math.max(data.events, 1), COLS = data.columns;
  var view = { a: 0, b: COLS };   // the columns in view
  var NS = "http://www.w3.org/2000/svg";
  // The detail view: every allocation alive in the range is drawn on its own, stacked in the
  // order of allocation (a free lets the ones above it drop), once at most LIMIT are in view.
  var DD = data.detail, D = null, N = DD ? DD.n : 0, LIMIT = 3000;
  var detailOn = false;
  var YS = H / Math.max(data.max, 1);

  // The detail data: six varint streams in base64 (include/tensorgc/detail.h says how they are
  // made), decoded once, on the first need or just after the first paint.
  function varints(b64, n) {
    var bin = atob(b64), out = new Float64Array(n), p = 0;
    for (var j = 0; j < n; j++) {
      var v = 0, m = 1, b;
      do { b = bin.charCodeAt(p++); v += (b & 127) * m; m *= 128; } while (b & 128);
      out[j] = v;
    }
    return out;
  }
  function unzig(v) { return v % 2 ? -(v + 1) / 2 : v / 2; }
  function detail() {
    if (D || !DD) return D;
    var t0 = performance.now(), s = DD.streams, n = N;
    var A = varints(s[0], n), F = varints(s[1], n), S = varints(s[2], n), E = varints(s[3], n),
        K = varints(s[4], n), X = varints(s[5], n), a = 0, e = -1, x = 0;
    for (var j = 0; j < n; j++) {
      a += A[j]; A[j] = a;
      F[j] = F[j] ? a + F[j] - 1 : -1;
      S[j] *= DD.unit;
      e += unzig(E[j]); E[j] = e;
      x += unzig(X[j]) * DD.xunit; X[j] = x;
    }
    D = { A: A, F: F, E: E, X: X, S: S, K: K, stacks: DD.stacks, segs: DD.segments || [],
          tree: aliveTree(A, F, n) };
    window.tgcDetail = D;  // for tests and the curious: the decoded allocations
    svg.setAttribute("data-decode-ms", (performance.now() - t0).toFixed(2));
    return D;
  }
  // A max-tree over the allocations' ends (alive at the end: +inf), in allocation order: the
  // allocations alive in a range are found in O(k log n), not by a scan of all n.
  function aliveTree(A, F, n) {
    var P = 1;
    while (P < n) P *= 2;
    var t = new Float64Array(2 * P).fill(-1);
    for (var j = 0; j < n; j++) t[P + j] = F[j] < 0 ? Infinity : F[j];
    for (var i = P - 1; i >= 1; i--) t[i] = Math.max(t[2 * i], t[2 * i + 1]);
    return { t: t, P: P };
  }
  // the allocations j with A[j] < e1 and (alive at the end or F[j] > e0), in allocation order;
  // null once more than max are found
  function aliveIn(e0, e1, max) {
    var A = D.A, lo = 0, hi = N;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (A[mid] < e1) lo = mid + 1; else hi = mid; }
    var t = D.tree.t, P = D.tree.P, out = [], stack = [1], spans = [[0, P]];
    while (stack.length) {
      var node = stack.pop(), sp = spans.pop();
      if (sp[0] >= lo || t[node] <= e0) continue;
      if (node >= P) {
        out.push(node - P);
        if (out.length > max) return null;
        continue;
      }
      var m = (sp[0] + sp[1]) >> 1;
      stack.push(2 * node + 1, 2 * node); spans.push([m, sp[1]], [sp[0], m]);
    }
    return out;
  }
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
  function visible(e0, e1) { return aliveIn(e0, e1, LIMIT); }
  // a band's own colour (its category, or its site's) where the overview drew it; else the
  // allocation site's
  var look = data.look || {}, names = data.names || {};
  function color(j) {
    var b = look[D.E[j]];
    if (b) return b[0];
    var k = D.K[j];
    return "hsl(" + ((k * 137) % 360) + ",55%," + (50 + (k * 7) % 20) + "%)";
  }
  // one step of a path: across (H), down or up (V), or both (L)
  function seg(dx, dy, x, y) {
    return dx && dy ? "L" + Math.round(x) + " " + Math.round(y) : dy ? "V" + Math.round(y)
      : dx ? "H" + Math.round(x) : "";
  }
  function drawDetail(vis, e0, e1) {
    // local index i of vis[i]; typed arrays: the inner loop below runs allocations x frees times
    var V = vis.length, off = new Float64Array(V), shown = new Float64Array(V),
        lastPx = new Int32Array(V).fill(-1), size = new Float64Array(V), pts = new Array(V),
        live = new Int32Array(V), nLive = 0, cum = 0, evs = [], k, i, q;
    for (i = 0; i < V; i++) {
      var j = vis[i];
      size[i] = D.S[j];
      if (D.A[j] <= e0) { live[nLive++] = i; cum += size[i]; }
      else evs.push([D.A[j], 0, i]);
      if (D.F[j] >= 0 && D.F[j] < e1) evs.push([D.F[j], 1, i]);
    }
    evs.sort(function (x, y) { return x[0] - y[0] || x[1] - y[1]; });
    // the peak in range first: the y axis fits it (round ticks), so one step's allocations fill
    // the plot, and a drop too small to see on that scale can wait to be drawn
    var peakW = cum, c = cum;
    for (k = 0; k < evs.length; k++) {
      c += evs[k][1] === 0 ? size[evs[k][2]] : -size[evs[k][2]];
      if (c > peakW) peakW = c;
    }
    // The quantum: half a pixel, coarser in proportion past 150 allocations in the plot's 420
    // pixels (each is then a few pixels tall or less: the steps of a crowded range are texture,
    // their points would grow as allocations x frees, and the browser's paint with them); the
    // status line says how coarse.
    var quantum = 0.5 * Math.max(1, V / 150);
    svg.setAttribute("data-quantum", quantum.toFixed(2));
    var ys = H / Math.max(peakW * 1.05, 1), minDrop = quantum / ys;  // bytes in one quantum
    var hx = W / quantum / Math.max(e1 - e0, 1e-9);  // quanta per event
    cum = 0;
    for (k = 0; k < nLive; k++) {
      i = live[k]; off[i] = shown[i] = cum; pts[i] = [e0, cum]; cum += size[i];
    }
    for (k = 0; k < evs.length; k++) {
      var t = evs[k][0];
      i = evs[k][2];
      if (evs[k][1] === 0) {
        off[i] = shown[i] = cum; pts[i] = [t, cum]; live[nLive++] = i; cum += size[i];
        continue;
      }
      var p = -1;
      for (q = 0; q < nLive; q++) if (live[q] === i) { p = q; break; }
      if (p < 0) continue;
      pts[i].push(t, off[i]);
      // The ones above drop. Drops within one quantum of x are one step, and a drop is drawn
      // once it adds up to one quantum of y: nothing is ever more than a quantum off.
      var px = Math.round((t - e0) * hx), s = size[i];
      for (q = p + 1; q < nLive; q++) {
        var u = live[q], o = off[u] - s;
        off[u] = o;
        if (lastPx[u] === px) { pts[u][pts[u].length - 1] = o; shown[u] = o; }
        else if (shown[u] - o >= minDrop) {
          pts[u].push(t, shown[u], t, o); lastPx[u] = px; shown[u] = o;
        }
      }
      live.copyWithin(p, p + 1, nLive);
      nLive--;
      cum -= s;
    }
    for (k = 0; k < nLive; k++) { i = live[k]; pts[i].push(e1, off[i]); }
    drawYAxis(peakW * 1.05);
    var sx = W / Math.max(e1 - e0, 1e-9), q0 = search.value.trim().toLowerCase(), html = [];
    for (i = 0; i < V; i++) {
      j = vis[i];
      var P = pts[i];
      if (!P || P.length < 4) continue;
      // A path in tenths of a unit as integers (the group is scaled by 0.1: integers print
      // faster than fractions): the top edge left to right, each step as H x V y, then the
      // bottom edge back; about half the numbers of a polygon's points.
      var yTop = (T + H - size[i] * ys) * 10, yBot = (T + H) * 10,
          x0 = (L - e0 * sx) * 10, sx10 = sx * 10, ys10 = ys * 10, n = P.length;
      var d = "M" + Math.round(x0 + P[0] * sx10) + " " + Math.round(yTop - P[1] * ys10);
      for (q = 2; q < n; q += 2) d += seg(P[q] !== P[q - 2], P[q + 1] !== P[q - 1],
                                          x0 + P[q] * sx10, yTop - P[q + 1] * ys10);
      d += "V" + Math.round(yBot - P[n - 1] * ys10);
      for (q = n - 4; q >= 0; q -= 2) d += seg(P[q] !== P[q + 2], P[q + 1] !== P[q + 3],
                                               x0 + P[q] * sx10, yBot - P[q + 1] * ys10);
      var hit = q0 && stackText(D.K[j]).toLowerCase().indexOf(q0) >= 0;
      html.push('<path class="b d' + (hit ? " hit" : "") + '" data-j="' + j + '" fill="' +
                color(j) + '" d="' + d + 'Z"/>');
    }
    detailG.innerHTML = html.join("");
  }
  var yaxis = document.getElementById("tgc-yaxis"), yaxis0 = yaxis.innerHTML;
  // round ticks for a y range: 1, 2 or 5 times a power of ten in the unit of the top value
  function drawYAxis(top) {
    var unit = 1, u = ["B", "K", "M", "G", "T"], ui = 0;
    while (top / unit >= 1024 && ui < u.length - 1) { unit *= 1024; ui++; }
    var step = niceStep(top / unit, 5) * unit, html = [];
    for (var v = 0; v <= top; v += step) {
      var y = (T + H - v * H / top).toFixed(1);
      html.push('<text x="' + (L - 6) + '" y="' + y + '" class="ax">' + fmtBytes(v) + '</text>' +
                '<line x1="' + L + '" x2="' + (L + W) + '" y1="' + y + '" y2="' + y + '" class="grid"/>');
    }
    yaxis.innerHTML = html.join("");
  }
  function stackText(k) { return (D.stacks[k] || []).join("\n"); }
  function apply() {
    var t0 = performance.now();
    var sx = COLS / (view.b - view.a);
    // plot coordinates: x = L + c * W / COLS; shown: L + (c - a) * W / (b - a)
    var tf = "translate(" + (L - L * sx - view.a * W / COLS * sx).toFixed(4) + ",0) scale(" +
      sx.toFixed(6) + ",1)";
    plot.setAttribute("transform", tf);
    if (areas) areas.setAttribute("transform", tf);  // the categories chart follows the zoom
    var e0 = colToEvent(view.a), e1 = colToEvent(view.b);
    var vis = DD && view.b - view.a < COLS && detail() ? visible(e0, e1) : null;
    detailOn = vis !== null;
    if (detailOn) drawDetail(vis, e0, e1);
    else { detailG.innerHTML = ""; yaxis.innerHTML = yaxis0; }
    plot.style.display = detailOn ? "none" : "";
    drawAxis();
    status.textContent += detailOn ? " \u2014 every allocation drawn (" + vis.length +
      (+svg.getAttribute("data-quantum") > 0.5 ? "; steps to within " +
       svg.getAttribute("data-quantum") + " px" : "") + ")" :
      " \u2014 overview: the largest drawn, the rest summarized; zoom in to draw each";
    performance.mark("tgc-zoom");
    svg.setAttribute("data-zoom-ms", (performance.now() - t0).toFixed(2));
    svg.setAttribute("data-mode", detailOn ? "detail" : "overview");
    svg.setAttribute("data-range", e0 + " " + e1);
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

  function showDetail(j) {
    show(-1, {size: D.S[j], addr: "0x" + D.X[j].toString(16),
              alloc: D.E[j] >= 0 ? D.A[j] : -1, free: D.F[j],
              cat: look[D.E[j]] ? look[D.E[j]][1] : "",
              name: D.F[j] < 0 ? names[String(D.X[j])] || "" : "",
              entry: D.E[j], frames: D.stacks[D.K[j]] || []}, '[data-j="' + j + '"]');
  }
  function show(i, d, sel) {
    d = d || data.allocs[i];
    sel = sel || '[data-i="' + i + '"]';
    var rows = [
      ["size", fmtBytes(d.size) + " (" + d.size.toLocaleString("en-US") + " bytes)"],
      ["address", d.addr],
      ["allocated", d.alloc >= 0 ? "event " + d.alloc.toLocaleString("en-US") : "before the trace"],
      ["freed", d.free >= 0 ? "event " + d.free.toLocaleString("en-US") : "alive at the end"],
      ["category", d.cat || "unknown"]];
    if (d.name) rows.unshift(["name", d.name]);
    if (d.entry !== undefined) rows.push(["trace entry", d.entry >= 0 ? "" + d.entry : "none"]);
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
    var old = svg.querySelector(".pinned");
    if (old) old.classList.remove("pinned");
    var el = svg.querySelector(sel);
    if (el) el.classList.add("pinned");
  }
  plot.addEventListener("click", function (ev) {
    var i = ev.target.getAttribute && ev.target.getAttribute("data-i");
    if (i !== null && i !== undefined && !(drag && drag.moved)) show(+i);
  });
  detailG.addEventListener("click", function (ev) {
    var j = ev.target.getAttribute && ev.target.getAttribute("data-j");
    if (j !== null && j !== undefined) showDetail(+j);
  });

  search.addEventListener("input", function () {
    var q = search.value.trim().toLowerCase(), hits = 0;
    var els = (detailOn ? detailG : plot).querySelectorAll("[data-i],[data-j]");
    for (var k = 0; k < els.length; k++) {
      var i = els[k].getAttribute("data-i");
      var text = i !== null ? data.allocs[+i].frames.join("\n") : stackText(D.K[+els[k].getAttribute("data-j")]);
      var hit = q && text.toLowerCase().indexOf(q) >= 0;
      els[k].classList.toggle("hit", !!hit);
      hits += hit ? 1 : 0;
    }
    plot.classList.toggle("searching", !!q);
    detailG.classList.toggle("searching", !!q);
    document.getElementById("tgc-hits").textContent = q ? hits + " match" + (hits === 1 ? "" : "es") : "";
  });
  // The allocator at one event: its segments side by side, each as wide as its share of the
  // bytes reserved then, the blocks alive in it drawn where they sit.
  var stateSvg = document.getElementById("tgc-state"), stateText = document.getElementById("tgc-state-text");
  var statePending = null;
  function drawState(e) {
    if (!DD || !stateSvg || !detail()) return;
    var segs = D.segs.filter(function (g) { return g[0] <= e && (g[1] < 0 || g[1] > e); });
    var total = 0, k, j;
    segs.forEach(function (g) { total += g[2]; });
    var html = [], x = 0, gap = 2, width = 1280 - gap * segs.length, blocks = 0, used = 0;
    var sorted = segs.slice().sort(function (a, b) { return a[3] - b[3]; }), left = [];
    for (k = 0; k < sorted.length; k++) {
      var g = sorted[k], w = total > 0 ? g[2] / total * width : 0;
      left.push([x, w]);
      html.push('<rect class="seg" x="' + x.toFixed(2) + '" y="4" width="' + w.toFixed(2) + '" height="32"/>');
      x += w + gap;
    }
    // the allocations alive at e, each finds its segment by binary search
    var alive = aliveIn(e, e + 1e-9, Infinity).filter(function (j) { return D.A[j] <= e; });
    for (var q = 0; q < alive.length; q++) {
      j = alive[q];
      var lo = 0, hi = sorted.length - 1, at = -1, a = D.X[j];
      while (lo <= hi) {
        var mid = (lo + hi) >> 1;
        if (sorted[mid][3] <= a) { at = mid; lo = mid + 1; } else hi = mid - 1;
      }
      if (at < 0 || a >= sorted[at][3] + sorted[at][2]) continue;
      var sg = sorted[at], bx = left[at][0] + (a - sg[3]) / sg[2] * left[at][1];
      var bw = Math.max(D.S[j] / sg[2] * left[at][1], 0.5);
      html.push('<rect data-j="' + j + '" x="' + bx.toFixed(2) + '" y="5" width="' + bw.toFixed(2) +
                '" height="30" fill="' + color(j) + '"/>');
      blocks++; used += D.S[j];
    }
    stateSvg.innerHTML = html.join("");
    stateText.textContent = "Allocator at event " + Math.round(e).toLocaleString("en-US") + ": " +
      segs.length + " segment" + (segs.length === 1 ? "" : "s") + ", " + fmtBytes(total) +
      " reserved, " + blocks + " block" + (blocks === 1 ? "" : "s") + " allocated (" +
      fmtBytes(used) + ")";
    stateSvg.setAttribute("data-event", "" + Math.round(e));
  }
  svg.addEventListener("mousemove", function (ev) {
    if (drag || !DD || !DD.segments.length) return;
    var e = colToEvent(Math.max(view.a, Math.min(view.b, colAt(ev.clientX))));
    if (statePending === null) {
      statePending = requestAnimationFrame(function () { statePending = null; drawState(e); });
    }
  });
  stateSvg && stateSvg.addEventListener("click", function (ev) {
    var j = ev.target.getAttribute && ev.target.getAttribute("data-j");
    if (j !== null && j !== undefined) showDetail(+j);
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
  if (DD) setTimeout(detail, 0);  // decoded after the first paint, before the first zoom in
})();
