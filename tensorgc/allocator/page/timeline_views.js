// The timeline page's script, second half: drawing each view, the panels and every interaction
// (zoom, pan, hover, search, selection, keys). tensorgc/allocator/timeline.py inlines it right
// after timeline_ui.js, whose closure (opened there, closed at the end of this file) it shares:
// the decoded data, the layout and the paint.
  // ---------------------------------------------------------------- drawing a plot view
  function apply() {
    if (!M) return;
    var t0 = performance.now();
    if (S.view === "mem" || S.view === "segs") {
      var md = model();
      L = layout(md, S.e0, S.e1, S.view === "segs" ? md.N : S.K);
      paint(L);
      drawAxes();
      drawOverlay();
      var mode = L.all ? "detail" : "overview";
      status.textContent = "events " + num(S.e0) + " to " + num(S.e1) + " of " + num(M.n) + " \u2014 " +
        (L.all ? "every one of the " + num(L.inView) + " " + md.items + " in view drawn one by one"
               : num(L.drawn.length) + " largest of the " + num(L.inView) + " " + md.items +
                 " in view drawn one by one, the rest as one area per " +
                 (S.view === "segs" ? "group" : "category"));
      plotEl.setAttribute("data-mode", mode);
    } else if (S.view === "state") {
      drawState();
      status.textContent = "events " + num(S.e0) + " to " + num(S.e1) + " of " + num(M.n);
    }
    drawNav();
    updateHits();
    plotEl.setAttribute("data-range", S.e0 + " " + S.e1);
    plotEl.setAttribute("data-zoom-ms", (performance.now() - t0).toFixed(2));
    performance.mark("tgc-zoom");
  }
  function xOf(e) { return (e - S.e0) / (S.e1 - S.e0) * W; }  // CSS px in the plot
  function eOf(x) { return S.e0 + x / W * (S.e1 - S.e0); }
  // the overlay: OOMs, the selected event, the pinned and hovered items' outlines, search
  function drawOverlay() {
    octx.setTransform(dpr, 0, 0, dpr, 0, 0);
    octx.clearRect(0, 0, W, H);
    if (!L) return;
    if (S.match && S.view === "mem") {
      octx.fillStyle = "rgba(255,255,255,0.6)";
      octx.fillRect(0, 0, W, H);
      octx.globalCompositeOperation = "destination-out";
      octx.fillStyle = "#000";
      forDrawn(function (q, j) { if (S.match[j]) { bandPath(q); octx.fill(); } });
      octx.globalCompositeOperation = "source-over";
      octx.strokeStyle = "#e000c0"; octx.lineWidth = 1.6;
      forDrawn(function (q, j) { if (S.match[j]) { bandPath(q); octx.stroke(); } });
    }
    if (S.view === "mem" && data.compare) drawBaseline();
    if (S.view === "segs") {  // the allocated bytes over the reserved segments
      octx.strokeStyle = "#222"; octx.lineWidth = 1; octx.beginPath();
      var ys = H / L.ymax;
      for (var p = 0; p < L.P; p += Math.max(1, Math.round(dpr))) {
        var y = H - M.tot[L.tp[p]] * ys, x = p / dpr;
        if (p === 0) octx.moveTo(x, y); else octx.lineTo(x, y);
      }
      octx.stroke();
    }
    if (S.cur >= 0 && S.cur >= S.e0 && S.cur <= S.e1) {
      octx.setLineDash([4, 3]); octx.strokeStyle = "#333"; octx.lineWidth = 1;
      var cx = xOf(S.cur + 0.5);
      octx.beginPath(); octx.moveTo(cx, 0); octx.lineTo(cx, H); octx.stroke();
      octx.setLineDash([]);
    }
    if (S.view === "mem" || S.view === "segs") {  // the OOMs, over everything
      M.events.forEach(function (ev) {
        if (ev[1] !== 4 || ev[0] < S.e0 - 1 || ev[0] > S.e1) return;
        var x = xOf(ev[0] + 0.5);
        octx.strokeStyle = "#d00"; octx.lineWidth = 2;
        octx.beginPath(); octx.moveTo(x, 0); octx.lineTo(x, H); octx.stroke();
      });
    }
    var pinned = drawnIndex(S.view === "segs" ? S.selSeg : S.sel);
    if (pinned >= 0) {
      octx.strokeStyle = "#000"; octx.lineWidth = 2.5; bandPath(pinned); octx.stroke();
      octx.strokeStyle = "#fff"; octx.lineWidth = 1; bandPath(pinned); octx.stroke();
    }
    if (hover && hover.q >= 0) {
      octx.strokeStyle = "#000"; octx.lineWidth = 1.5; bandPath(hover.q); octx.stroke();
    }
    if (brush) {
      octx.fillStyle = "rgba(58,143,217,0.15)"; octx.strokeStyle = "#3a8fd9";
      var bx = Math.min(brush.x0, brush.x1), bw = Math.abs(brush.x1 - brush.x0);
      octx.fillRect(bx, 0, bw, H); octx.strokeRect(bx, 0, bw, H);
    }
  }
  function drawBaseline() {  // the baseline snapshot's curve, on its own trace positions
    var c = data.compare.a, cols = c.max.length;
    if (!cols || !L) return;
    var ys = H / L.ymax;
    octx.strokeStyle = "#555"; octx.setLineDash([5, 3]); octx.lineWidth = 1.2; octx.beginPath();
    var started = false;
    for (var x = 0; x <= W; x += 2) {
      var e = eOf(x);
      if (e >= c.n) break;
      var col = Math.min(cols - 1, Math.floor(e / c.n * cols)), y = H - c.max[col] * ys;
      if (!started) { octx.moveTo(x, y); started = true; } else octx.lineTo(x, y);
    }
    octx.stroke(); octx.setLineDash([]);
  }
  function forDrawn(fn) { for (var q = 0; q < L.drawn.length; q++) fn(q, L.drawn[q]); }
  function drawnIndex(j) {
    if (j === undefined || j < 0 || !L) return -1;
    var lo = 0, hi = L.drawn.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (L.drawn[mid] < j) lo = mid + 1; else hi = mid; }
    return lo < L.drawn.length && L.drawn[lo] === j && L.p1[lo] > L.p0[lo] ? lo : -1;
  }
  // the outline of drawn item q, in CSS px
  function bandPath(q) {
    var v = vertsOf(q), s = L.md.S[L.drawn[q]], ys = H / L.ymax, x1 = L.p1[q] / dpr;
    octx.beginPath();
    if (!v || !v.length) return;
    var i, x, xn;
    octx.moveTo(v[0] / dpr, H - (v[1] + s) * ys);
    for (i = 0; i < v.length; i += 2) {
      x = v[i] / dpr; xn = i + 2 < v.length ? v[i + 2] / dpr : x1;
      octx.lineTo(x, H - (v[i + 1] + s) * ys); octx.lineTo(xn, H - (v[i + 1] + s) * ys);
    }
    for (i = v.length - 2; i >= 0; i -= 2) {
      x = v[i] / dpr; xn = i + 2 < v.length ? v[i + 2] / dpr : x1;
      octx.lineTo(xn, H - v[i + 1] * ys); octx.lineTo(x, H - v[i + 1] * ys);
    }
    octx.closePath();
  }
  // what is under (x, y), CSS px in the plot: {q, j} a drawn item, {area: colour, t} the rest,
  // {oom: row}, or null
  function hitAt(x, y) {
    if (!L || x < 0 || y < 0 || x >= W || y >= H) return null;
    if (S.view === "mem" || S.view === "segs") {
      for (var r = 0; r < M.events.length; r++) {
        var ev = M.events[r];
        if (ev[1] === 4 && Math.abs(xOf(ev[0] + 0.5) - x) <= 3) return { oom: r, t: ev[0] };
      }
    }
    var p = Math.min(L.P - 1, Math.max(0, Math.floor(x * dpr))), t = L.tp[p], md = L.md;
    var bytes = (H - y) / H * L.ymax, acc = 0, q, j, dc = new Float64Array(NC);
    for (q = 0; q < L.drawn.length; q++) {
      if (L.p0[q] > p || L.p1[q] <= p) continue;
      j = L.drawn[q];
      var s = md.S[j];
      if (bytes >= acc && bytes < acc + s) return { q: q, j: j, t: t };
      acc += s; dc[md.col[j]] += s;
    }
    if (!md.rest) return null;
    var rest = new Float64Array(NC);
    md.rest(t, rest);
    for (var c = 0; c < NC; c++) {
      var v = rest[c] - dc[c];
      if (v <= 0) continue;
      if (bytes >= acc && bytes < acc + v) return { area: c, t: t, bytes: v };
      acc += v;
    }
    return null;
  }

  // ---------------------------------------------------------------- tooltip and panel
  var hover = null, tipKey = null, tipW = 0, tipH = 0;
  // the tooltip at the pointer; built again only for another item (key), else moved: its
  // size is known without a layout
  function showTip(ev, build, key) {
    if (key === undefined || key !== tipKey || tip.hidden) {
      clear(tip);
      build(tip);
      tip.hidden = false;
      tipW = tip.offsetWidth; tipH = tip.offsetHeight;
      tipKey = key;
    }
    var w = tipW, h = tipH, x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  function hideTip() { tip.hidden = true; tipKey = null; }
  function tipAlloc(el, j) {  // a few lines: the panel (a click) has it all
    var lines = [version(j) + " \u00b7 " + fmtBytes(M.S[j]) + " \u00b7 " + catText(j)];
    if (nameOf(j)) lines.push(nameOf(j));
    lines.push((j < data.npre ? "allocated before the trace" : "allocated at " + when(M.A[j])) +
               (M.F[j] === ALIVE ? ", alive at the end" : ", freed at " + when(M.F[j])) +
               (M.W[j] ? ", stream " + M.W[j] : ""));
    lines.forEach(function (t) { var d = document.createElement("div"); d.textContent = t; el.appendChild(d); });
    var k = M.K[j], title = null;
    if (!k && M.R[j]) { k = M.R[j]; title = "alloc not recorded, stack trace for free:"; }
    fromLine(el, k);
    el.appendChild(stackPre(k, 6, title));
  }
  function tipArea(el, h, pinned) {
    var head = document.createElement("div");
    head.textContent = (S.view === "segs" ? segModel().groups[h.area] : catName(h.area)) + ": " +
      fmtSize(h.bytes) + " at " + when(h.t) + ", in allocations not drawn one by one" +
      (h.area === NONE ? " (of no category: hatched)" : "");
    el.appendChild(head);
    var big = largestOf(h.area, h.t, !!pinned);
    if (big.j >= 0) {
      var d = document.createElement("div");
      d.textContent = (pinned ? big.count + " allocation" + (big.count === 1 ? "" : "s") + "; " : "") +
        "the largest, " + version(big.j) + " " + fmtBytes(M.S[big.j]) +
        (nameOf(big.j) ? " (" + nameOf(big.j) + ")" : "") + ":";
      el.appendChild(d);
      fromLine(el, M.K[big.j]);
      el.appendChild(stackPre(M.K[big.j], 10));
    }
    var note = document.createElement("div");
    note.className = "r"; note.textContent = "Raise Detail, or zoom in, to draw them one by one.";
    el.appendChild(note);
  }
  // the largest allocation of category c alive at t that is not drawn (by the size order:
  // the first found is the largest), and, when asked, how many there are
  function largestOf(c, t, counting) {
    var best = -1, count = 0, drawn = {}, A = M.A, F = M.F, cat = M.cat;
    if (L) L.drawn.forEach(function (j) { drawn[j] = 1; });
    if (!M.order) M.order = sizeOrder(M.S, M.N, data.unit);
    for (var q = 0; q < M.N; q++) {
      var j = M.order[q];
      if (cat[j] !== c || A[j] > t || F[j] <= t || drawn[j]) continue;
      if (best < 0) best = j;
      if (!counting) break;
      count++;
    }
    return { j: best, count: count };
  }
  function tipOom(el, r) {
    var ev = M.events[r], d = document.createElement("div");
    d.textContent = "OOM at " + when(ev[0]) + ": requested " + fmtSize(ev[3]) + ", the device had " +
      fmtSize(ev[6]) + " free" + (ev[4] ? " (stream " + ev[4] + ")" : "");
    el.appendChild(d);
    fromLine(el, ev[5]);
    el.appendChild(stackPre(ev[5], 14));
  }
  function tipSeg(el, q) {
    var md = segModel(), g = M.segs[md.idx[q]], d = document.createElement("div");
    d.textContent = "s" + g[3] + "_" + g[7] + ": segment " + fmtSize(g[2]) + ", stream " + g[4] +
      ", " + g[5] + " pool" + (g[9] ? " (by its size: the snapshot no longer holds it)" : "") +
      (g[8] ? ", expandable" : "");
    el.appendChild(d);
    el.appendChild(dl([["made", g[0] === 0 && g[6] === 0 ? "before the trace or at event 0" : when(g[0])],
                       ["freed", g[1] < 0 ? "alive at the end" : when(g[1])]]));
    fromLine(el, g[6]);
    el.appendChild(stackPre(g[6], 14));
  }
  function pinAlloc(j) {
    full();
    S.sel = j;
    clear(panel);
    panel.removeAttribute("data-j");
    if (j < 0) return;
    panel.appendChild(h3("Allocation " + fmtBytes(M.S[j])));
    panel.appendChild(dl(allocRows(j)));
    fromLine(panel, M.K[j] || M.R[j]);
    panel.appendChild(stackPre(M.K[j], 0, M.K[j] ? "allocated at:" : "alloc not recorded"));
    if (M.R[j]) panel.appendChild(stackPre(M.R[j], 0, "freed at:"));
    panel.setAttribute("data-j", String(j));
  }
  function pinSeg(q) {
    S.selSeg = q;
    clear(panel);
    panel.appendChild(h3("Segment"));
    tipSeg(panel, q);
  }
  function pinArea(h) {
    clear(panel);
    panel.appendChild(h3("Summarized: " + catName(h.area)));
    tipArea(panel, h, true);
  }

  // ---------------------------------------------------------------- range and input
  function setRange(a, b) {
    var n = Math.max(M.n, 1), span = Math.max(b - a, Math.min(n, 2));
    a = Math.max(0, Math.min(a, n - span));
    S.e0 = a; S.e1 = Math.min(n, a + span);
    apply();
  }
  var lastXY = { ev: null, pt: null };
  function plotXY(ev) {  // the same event asked again (a wheel step's hover): no second layout
    if (lastXY.ev === ev) return lastXY.pt;
    var r = canvas.getBoundingClientRect();
    lastXY = { ev: ev, pt: { x: ev.clientX - r.left, y: ev.clientY - r.top } };
    return lastXY.pt;
  }
  var drag = null, brush = null, pending = null;
  plotEl.addEventListener("wheel", function (ev) {
    if (!M) return;
    ev.preventDefault();
    var pt = plotXY(ev), e = eOf(Math.max(0, Math.min(W, pt.x)));
    var f = ev.deltaY > 0 ? 1.25 : 0.8;
    setRange(e - (e - S.e0) * f, e + (S.e1 - e) * f);
    hoverAt(ev);
  }, { passive: false });
  plotEl.addEventListener("mousedown", function (ev) {
    if (!M || ev.button !== 0) return;
    var pt = plotXY(ev);
    drag = { x: ev.clientX, px: pt.x, e0: S.e0, e1: S.e1, shift: ev.shiftKey, moved: false };
    ev.preventDefault();
  });
  window.addEventListener("mousemove", function (ev) {
    if (!M) return;
    if (drag) {
      if (Math.abs(ev.clientX - drag.x) > 3) drag.moved = true;
      if (!drag.moved) return;
      var pt = plotXY(ev);
      if (drag.shift) { brush = { x0: drag.px, x1: Math.max(0, Math.min(W, pt.x)) }; drawOverlay(); }
      else {
        var de = (ev.clientX - drag.x) / W * (drag.e1 - drag.e0);
        setRange(drag.e0 - de, drag.e1 - de);
      }
      return;
    }
    if (ev.target === overlay || ev.target === canvas) {
      if (pending === null) pending = requestAnimationFrame(function () { pending = null; hoverAt(lastMove); });
      lastMove = ev;
    } else if (hover && !plotEl.contains(ev.target)) { hover = null; hideTip(); drawOverlay(); }
  });
  var lastMove = null;
  window.addEventListener("mouseup", function (ev) {
    if (!drag) return;
    var d = drag;
    drag = null;
    if (d.shift && d.moved && brush) {
      var a = eOf(Math.min(brush.x0, brush.x1)), b = eOf(Math.max(brush.x0, brush.x1));
      brush = null;
      setRange(a, b);
      return;
    }
    brush = null;
    if (!d.moved) clickAt(ev);
  });
  function hoverAt(ev) {
    if (!ev || !L || (S.view !== "mem" && S.view !== "segs") || !M.K && (full(), !M.K)) return;
    var t0 = performance.now(), pt = plotXY(ev), h = hitAt(pt.x, pt.y);
    hoverDone(h, ev, t0);
  }
  function hoverDone(h, ev, t0) {
    hover = h;
    if (!h) {
      hideTip(); drawOverlay(); plotEl.removeAttribute("data-hover");
      plotEl.setAttribute("data-hover-ms", (performance.now() - t0).toFixed(2));
      return;
    }
    if (h.oom !== undefined) showTip(ev, function (el) { tipOom(el, h.oom); }, "o" + h.oom);
    else if (h.area !== undefined) showTip(ev, function (el) { tipArea(el, h); });
    else if (S.view === "segs") showTip(ev, function (el) { tipSeg(el, h.j); }, "s" + h.j);
    else showTip(ev, function (el) { tipAlloc(el, h.j); }, "j" + h.j);
    plotEl.setAttribute("data-hover", h.j !== undefined ? "j" + h.j : h.area !== undefined ? "c" + h.area : "oom");
    drawOverlay();
    plotEl.setAttribute("data-hover-ms", (performance.now() - t0).toFixed(2));
  }
  function clickAt(ev) {
    if (!M.K && (full(), !M.K)) return;
    var pt = plotXY(ev), h = hitAt(pt.x, pt.y);
    if (!h) {  // a click on nothing lets go of the pinned one
      S.sel = -1; S.selSeg = -1;
      clear(panel);
      panel.removeAttribute("data-j");
      panel.appendChild(document.createTextNode("Click an allocation, a block or an event to pin it here."));
      drawOverlay();
      return;
    }
    if (h.oom !== undefined) { zoomTo(M.events[h.oom][0]); return; }
    S.cur = h.t;
    if (h.area !== undefined) pinArea(h);
    else if (S.view === "segs") pinSeg(h.j);
    else pinAlloc(h.j);
    drawOverlay(); drawNav();
  }
  function zoomTo(e) {
    var half = Math.max(10, M.n / 40);
    S.cur = e;
    setRange(e - half, e + half);
  }
  $("tgc-reset").addEventListener("click", function () { setRange(0, M.n); });
  document.querySelectorAll(".oom").forEach(function (b) {
    b.addEventListener("click", function () { if (M) zoomTo(+b.getAttribute("data-event")); });
  });
  var slider = $("tgc-detail-n");
  slider.addEventListener("input", function () {
    S.K = +slider.value; $("tgc-detail-v").textContent = slider.value; apply();
  });
  ["native", "torch", "fold", "noise"].forEach(function (k) {
    var box = $("tgc-f-" + k);
    S.filt[k] = box.checked;
    box.addEventListener("change", function () {
      S.filt[k] = box.checked;
      tipKey = null;  // the next tooltip with the frames the filters leave
      if (S.sel >= 0 && S.view !== "segs") pinAlloc(S.sel);
      if (S.view === "state") showInfo();
    });
  });
  window.addEventListener("resize", function () { if (M) { size(); navBase = null; navSize = null; navc.width = 0; apply(); } });

  // ---------------------------------------------------------------- search
  var searchTimer = null;
  search.addEventListener("input", function () {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(runSearch, 60);
  });
  function runSearch() {
    if (M && !M.K && (full(), !M.K)) { searchTimer = setTimeout(runSearch, 100); return; }
    var q = search.value.trim().toLowerCase();
    S.q = q;
    if (!q || !M) { S.match = null; apply(); return; }
    var N = M.N, match = new Uint8Array(N), j, k, byStack = new Int8Array(M.fl.length + 1);
    for (k = 1; k <= M.fl.length; k++) byStack[k] = stackText(k).indexOf(q) >= 0 ? 1 : 0;
    var vq = /^(b|0x)?[0-9a-f]+(_\d*)?$/.test(q) ? q.replace(/^0x/, "") : null;
    var namesHit = {};
    for (j = 0; j < N; j++) {
      if (byStack[M.K[j]]) { match[j] = 1; continue; }
      var nm = nameOf(j);
      if (nm) {
        if (namesHit[nm] === undefined) namesHit[nm] = nm.toLowerCase().indexOf(q) >= 0;
        if (namesHit[nm]) { match[j] = 1; continue; }
      }
      if (vq !== null) {
        var hx = hex(M.X[j]), vs = "b" + hx + "_" + M.V[j];
        if (vs.indexOf(vq) >= 0 || (vq[0] !== "b" && hx.indexOf(vq) >= 0)) match[j] = 1;
      }
    }
    S.match = match;
    apply();
  }
  // the count follows the range in view
  function updateHits() {
    if (!S.match) { hitsEl.textContent = ""; hitsEl.removeAttribute("data-count"); return; }
    var lo = Math.max(0, Math.floor(S.e0)), hi = Math.min(M.n - 1, Math.ceil(S.e1) - 1), inView = 0, all = 0;
    for (var j = 0; j < M.N; j++) {
      if (!S.match[j]) continue;
      all++;
      if (M.A[j] <= hi && M.F[j] > lo) inView++;
    }
    hitsEl.textContent = inView + " match" + (inView === 1 ? "" : "es") + " in view" +
      (all !== inView ? " (" + all + " in the trace)" : "");
    hitsEl.setAttribute("data-count", String(inView));
  }

  // ---------------------------------------------------------------- allocations alive at t
  var alive = null;  // a max-tree of the allocations' ends (freed or completed), by index
  function aliveAt(t, fn) {
    full();
    if (!alive) {
      var P = 1, N = M.N;
      while (P < N) P *= 2;
      var tr = new Float64Array(2 * P).fill(-1);
      for (var j = 0; j < N; j++) tr[P + j] = Math.max(M.F[j], M.Fc[j]);
      for (var i = P - 1; i >= 1; i--) tr[i] = Math.max(tr[2 * i], tr[2 * i + 1]);
      alive = { t: tr, P: P };
    }
    var lo = 0, hi = M.N;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (M.A[mid] <= t) lo = mid + 1; else hi = mid; }
    var tr2 = alive.t, P2 = alive.P, stack = [1, 0, P2];
    while (stack.length) {
      var b = stack.pop(), a = stack.pop(), node = stack.pop();
      if (a >= lo || tr2[node] <= t) continue;
      if (node >= P2) { fn(node - P2); continue; }
      var m = (a + b) >> 1;
      stack.push(2 * node + 1, m, b, 2 * node, a, m);
    }
  }

  // ---------------------------------------------------------------- Allocator State History
  var evBox = $("tgc-events"), evIn = $("tgc-events-in"), segc = $("tgc-segc"), info = $("tgc-info");
  var ROW = 16, segLayout = null, stateHover = null;
  var KIND = ["", "alloc", "free_requested", "free_completed", "oom", "segment_alloc",
              "segment_free", "segment_map", "segment_unmap"];
  function rangeRows() {
    var lo = Math.max(0, Math.floor(S.e0)), hi = Math.min(M.n, Math.ceil(S.e1));
    return { lo: lo, count: Math.max(0, hi - lo) };
  }
  function pad(s, w) { while (s.length < w) s += " "; return s; }
  function eventText(i) {
    var k = M.EK[i], j = M.EJ[i], idx = pad(String(i), 8);
    if (j >= 0) {
      var pre = k === 1 ? "" : "";
      return idx + pre + pad(KIND[k], 15) + pad(version(j), 20) + fmtSize(M.S[j]) + (M.W[j] ? "  (stream " + M.W[j] + ")" : "");
    }
    if (j <= -2) {
      var ev = M.events[-2 - j];
      if (ev[1] === 4) return idx + "OOM (requested " + fmtSize(ev[3]) + ", CUDA has " + fmtSize(ev[6]) + " memory free)" + (ev[4] ? "  (stream " + ev[4] + ")" : "");
      if (ev[1] === 0) return idx + pad(ev[7] || "(no action)", 15);
      var sv = segVersion(ev);
      return idx + pad(KIND[ev[1]], 15) + pad("s" + ev[2] + "_" + sv, 20) + fmtSize(ev[3]) + (ev[4] ? "  (stream " + ev[4] + ")" : "");
    }
    return idx + "(an entry the page does not carry)";
  }
  function segVersion(ev) {
    for (var g = 0; g < M.segs.length; g++) {
      var s = M.segs[g];
      if (s[3] === ev[2] && (s[0] === ev[0] || s[1] === ev[0])) return s[7];
    }
    return 0;
  }
  function renderRows() {
    entries();
    var rr = rangeRows(), top = evBox.scrollTop, h = evBox.clientHeight;
    evIn.style.height = rr.count * ROW + "px";
    var a = Math.max(0, Math.floor(top / ROW) - 5), b = Math.min(rr.count, Math.ceil((top + h) / ROW) + 5);
    clear(evIn);
    for (var r = a; r < b; r++) {
      var i = rr.lo + r, d = document.createElement("div");
      d.className = "row" + (i === S.cur ? " sel" : "") + (M.EK[i] === 4 ? " oomrow" : "");
      d.style.top = r * ROW + "px";
      d.setAttribute("data-event", String(i));
      d.textContent = eventText(i);
      evIn.appendChild(d);
    }
  }
  evBox.addEventListener("scroll", function () { renderRows(); });
  evBox.addEventListener("click", function (ev) {
    var row = ev.target.closest && ev.target.closest(".row");
    if (row) selectEvent(+row.getAttribute("data-event"));
    evBox.focus();
  });
  evBox.addEventListener("mousemove", function (ev) {
    var row = ev.target.closest && ev.target.closest(".row");
    if (!row) return;
    var i = +row.getAttribute("data-event");
    if (stateHover === "e" + i) return;
    stateHover = "e" + i;
    showEventInfo(i);
  });
  evBox.addEventListener("mouseleave", function () { stateHover = null; showInfo(); });
  document.addEventListener("keydown", function (ev) {
    if (S.view !== "state" || !M || ev.target === search) return;
    var d = { ArrowDown: 1, ArrowUp: -1 }[ev.key];
    if (!d) return;
    ev.preventDefault();
    var rr = rangeRows();
    var i = S.cur < 0 ? rr.lo + rr.count - 1 : S.cur + d;
    selectEvent(Math.max(rr.lo, Math.min(rr.lo + rr.count - 1, i)));
  });
  function selectEvent(i, keepSel) {
    if (i < 0 || i >= M.n) return;
    entries();
    S.cur = i;
    var j = M.EJ[i];
    if (j >= 0 && !keepSel) S.sel = j;  // an event of an allocation pins it
    var rr = rangeRows(), r = i - rr.lo;
    if (r * ROW < evBox.scrollTop) evBox.scrollTop = r * ROW;
    else if ((r + 1) * ROW > evBox.scrollTop + evBox.clientHeight) evBox.scrollTop = (r + 1) * ROW - evBox.clientHeight;
    renderRows();
    drawState();
    drawNav();
    showInfo();
  }
  function eventStack(i) {
    var j = M.EJ[i], k = M.EK[i];
    if (j >= 0) return k === 1 ? M.K[j] : M.R[j] || M.K[j];
    if (j <= -2) return M.events[-2 - j][5];
    return 0;
  }
  function showEventInfo(i) {
    entries();
    clear(info);
    info.appendChild(document.createTextNode(eventText(i).replace(/^\d+\s+/, "event " + num(i) + ": ")));
    var j = M.EJ[i];
    if (j >= 0) {
      var nm = nameOf(j);
      info.appendChild(document.createTextNode("\n" + catName(M.cat[j]) + (nm ? ", " + nm : "") +
        (M.EK[i] !== 1 ? (M.K[j] ? "" : "\nalloc not recorded, stack trace for free:") : "")));
    }
    var k = eventStack(i);
    fromLine(info, k);
    info.appendChild(stackPre(k, 0, M.EK[i] === 1 || M.EK[i] >= 5 ? null : "the free's stack:"));
  }
  function showInfo() {  // the selected event, memory_viz's way: allocated / reserved, then it
    if (S.cur < 0 || !segLayout) { return; }
    clear(info);
    info.appendChild(document.createTextNode("(" + fmtSize(segLayout.allocated) + " allocated / " +
      fmtSize(segLayout.reserved) + " reserved)\n"));
    var keep = info.firstChild;
    showEventInfo(S.cur);
    info.insertBefore(keep, info.firstChild);
  }
  // the segments alive after event t, memory_viz's way: by size, packed into rows
  function drawState() {
    var pane = $("tgc-segpane"), w = pane.clientWidth, h = pane.clientHeight;
    segc.width = Math.round(w * dpr); segc.height = Math.round(h * dpr);
    segc.style.width = w + "px"; segc.style.height = h + "px";
    var c = segc.getContext("2d");
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    c.clearRect(0, 0, w, h);
    var t = S.cur >= 0 ? S.cur : Math.max(0, Math.min(M.n - 1, Math.ceil(S.e1) - 1));
    if (S.cur < 0) S.cur = t;
    var segs = [];
    M.segs.forEach(function (g, gi) {
      if (g[0] <= t && (g[1] < 0 || g[1] > t)) segs.push({ g: g, gi: gi, addr: parseInt(g[3], 16), size: g[2] });
    });
    segs.sort(function (x, y) { return x.addr - y.addr; });
    // expandable segments: neighbouring mapped pieces of one stream are one segment
    var merged = [];
    segs.forEach(function (s) {
      var p = merged[merged.length - 1];
      if (p && s.g[8] && p.g[8] && p.addr + p.size === s.addr && p.g[4] === s.g[4]) { p.size += s.size; p.parts.push(s); }
      else { s.parts = [s]; merged.push(s); }
    });
    var byAddr = merged.slice();
    var bySize = merged.slice().sort(function (x, y) { return x.size - y.size || x.addr - y.addr; });
    var maxs = bySize.length ? bySize[bySize.length - 1].size : 1, pad2 = maxs / Math.max(w, 1) * 2;
    var row = 0, used = 0;
    bySize.forEach(function (s) {
      if (used + s.size > maxs && used > 0) { row++; used = 0; }
      s.off = used; s.row = row; used += s.size + pad2; s.blocks = 0; s.used = 0;
    });
    var rows = row + 1, rh = Math.min(40, Math.max(6, (h - 4) / rows)), xs = (w - 4) / maxs;
    var blocks = [], outside = 0, allocated = 0, reserved = 0;
    merged.forEach(function (s) { reserved += s.size; });
    aliveAt(t, function (j) {
      var lo = 0, hi = byAddr.length - 1, at = -1, a = M.X[j];
      while (lo <= hi) { var mid = (lo + hi) >> 1; if (byAddr[mid].addr <= a) { at = mid; lo = mid + 1; } else hi = mid - 1; }
      var pendingFree = M.F[j] <= t;
      if (at < 0 || a >= byAddr[at].addr + byAddr[at].size) { outside++; return; }
      var s = byAddr[at];
      s.blocks++; s.used += M.S[j];
      if (!pendingFree) allocated += M.S[j];
      blocks.push({ j: j, s: s, pend: pendingFree });
    });
    c.lineWidth = 1;
    merged.forEach(function (s) {
      c.fillStyle = "#fff"; c.strokeStyle = "#000";
      c.fillRect(2 + s.off * xs, 2 + s.row * rh, s.size * xs, rh * 0.8);
      c.strokeRect(2 + s.off * xs + 0.5, 2 + s.row * rh + 0.5, Math.max(1, s.size * xs - 1), rh * 0.8 - 1);
    });
    blocks.forEach(function (b) {
      var x = 2 + (b.s.off + (M.X[b.j] - b.s.addr)) * xs, bw = Math.max(M.S[b.j] * xs, 0.75);
      var cc = M.cat[b.j];
      c.fillStyle = b.pend ? "#e00" : cc === NONE ? hatchFill(c) : data.cats.colors[cc];
      c.fillRect(x, 2 + b.s.row * rh, bw, rh * 0.8);
      b.x = x; b.w = bw;
    });
    var sel = blocks.filter(function (b) { return b.j === S.sel; })[0];
    if (sel) { c.strokeStyle = "#000"; c.lineWidth = 2; c.strokeRect(sel.x, 2 + sel.s.row * rh, Math.max(sel.w, 3), rh * 0.8); }
    if (S.match) {
      c.strokeStyle = "#e000c0"; c.lineWidth = 1.5;
      blocks.forEach(function (b) { if (S.match[b.j]) c.strokeRect(b.x, 2 + b.s.row * rh, Math.max(b.w, 2), rh * 0.8); });
    }
    segLayout = { t: t, merged: merged, blocks: blocks, rh: rh, xs: xs, allocated: allocated,
                  reserved: reserved, outside: outside };
    segc.setAttribute("data-event", String(t));
    segc.setAttribute("data-segments", String(merged.length));
    segc.setAttribute("data-blocks", String(blocks.length));
    segc.setAttribute("data-allocated", String(allocated));
    segc.setAttribute("data-reserved", String(reserved));
    renderRows();
  }
  var hatchPattern = null;
  function hatchFill(c) {
    if (!hatchPattern) {
      var p = document.createElement("canvas"); p.width = p.height = 6;
      var pc = p.getContext("2d");
      pc.fillStyle = "#e3e6ea"; pc.fillRect(0, 0, 6, 6);
      pc.strokeStyle = "#8d98a5"; pc.lineWidth = 2; pc.beginPath(); pc.moveTo(0, 6); pc.lineTo(6, 0); pc.stroke();
      hatchPattern = c.createPattern(p, "repeat");
    }
    return hatchPattern;
  }
  function stateHit(x, y) {
    if (!segLayout) return null;
    var sl = segLayout;
    for (var k = sl.blocks.length - 1; k >= 0; k--) {
      var b = sl.blocks[k], by = 2 + b.s.row * sl.rh;
      if (x >= b.x && x < b.x + Math.max(b.w, 1.5) && y >= by && y < by + sl.rh * 0.8) return { block: b };
    }
    for (var q = 0; q < sl.merged.length; q++) {
      var s = sl.merged[q], sx = 2 + s.off * sl.xs, sy = 2 + s.row * sl.rh;
      if (x >= sx && x < sx + s.size * sl.xs && y >= sy && y < sy + sl.rh * 0.8) return { seg: s };
    }
    return null;
  }
  segc.addEventListener("mousemove", function (ev) {
    var r = segc.getBoundingClientRect(), h = stateHit(ev.clientX - r.left, ev.clientY - r.top);
    var key = h ? (h.block ? "b" + h.block.j : "s" + h.seg.gi) : null;
    if (key === stateHover) return;
    stateHover = key;
    if (!h) { showInfo(); return; }
    clear(info);
    if (h.block) {
      var j = h.block.j;
      info.appendChild(document.createTextNode(version(j) + " " + fmtSize(M.S[j]) + " allocation" +
        (h.block.pend ? " (freed, waiting for its stream to be done with it)" : "") +
        (M.W[j] ? " (stream " + M.W[j] + ")" : "") + "\n" + catName(M.cat[j]) +
        (nameOf(j) ? ", " + nameOf(j) : "") + "\n"));
      fromLine(info, M.K[j] || M.R[j]);
      info.appendChild(stackPre(M.K[j] || M.R[j], 0, M.K[j] ? null : "alloc not recorded, stack trace for free:"));
      segc.setAttribute("data-hover", "b" + j);
    } else {
      var s = h.seg, free = s.size - s.used;
      info.appendChild(document.createTextNode("s" + s.g[3] + "_" + s.g[7] + ": segment " + fmtSize(s.size) +
        " allocated, " + fmtSize(free) + " free in its gaps (stream " + s.g[4] + ", " + s.g[5] + " pool), " +
        s.blocks + " block" + (s.blocks === 1 ? "" : "s") + "\n"));
      fromLine(info, s.g[6]);
      info.appendChild(stackPre(s.g[6], 0));
      segc.setAttribute("data-hover", "s" + s.gi);
    }
  });
  segc.addEventListener("mouseleave", function () { stateHover = null; showInfo(); });
  segc.addEventListener("click", function (ev) {
    var r = segc.getBoundingClientRect(), h = stateHit(ev.clientX - r.left, ev.clientY - r.top);
    if (h && h.block) { pinAlloc(h.block.j); drawState(); }
  });

  // ---------------------------------------------------------------- the navigator
  var navEl = $("tgc-nav"), navc = $("tgc-navc"), navo = $("tgc-navo"), navBase = null, navDrag = null;
  var navSize = null;  // read once (and on resize): reading it after the axes change would lay
                      // the page out again on every step
  function drawNav() {
    if (!navSize) navSize = { w: navEl.clientWidth, h: navEl.clientHeight };
    var w = navSize.w, h = navSize.h;
    if (navc.width !== Math.round(w * dpr)) {
      [navc, navo].forEach(function (c) {
        c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
        c.style.width = w + "px"; c.style.height = h + "px";
      });
      navBase = null;
    }
    var c = navc.getContext("2d"), P = navc.width, Hd = navc.height;
    if (!navBase && L && S.view === "mem" && S.e0 === 0 && S.e1 === M.n) {
      // the plot shows the whole trace: the navigator is that picture, smaller
      c.setTransform(1, 0, 0, 1, 0, 0);
      c.clearRect(0, 0, P, Hd);
      c.drawImage(canvas, 0, 0, P, Hd);
      navBase = true;
    }
    if (!navBase) {  // the whole trace by category (or its total), once
      var img = c.createImageData(P, Hd), buf = new Uint32Array(img.data.buffer), n = M.n, ymax = 1;
      buf.fill(0xfff7f7f7);
      var tp = new Float64Array(P), p;
      for (p = 0; p < P; p++) {
        var i0 = Math.floor(p * n / P), i1 = Math.max(i0, Math.ceil((p + 1) * n / P) - 1);
        tp[p] = n ? M.rmax(i0, i1) : 0;
        if (n && M.tot[tp[p]] > ymax) ymax = M.tot[tp[p]];
      }
      var rest = new Float64Array(NC), ys = Hd / (ymax * 1.05);
      for (p = 0; p < P && n; p++) {
        catAt(tp[p], rest);
        var y = 0;
        for (var cc = 0; cc < NC; cc++) {
          if (rest[cc] <= 0) continue;
          var r0 = Math.max(0, Math.ceil(Hd - (y + rest[cc]) * ys - 0.5)), r1 = Math.ceil(Hd - y * ys - 0.5);
          for (var r = r0; r < r1; r++) buf[r * P + p] = cc === NONE ? hatch[(p + r) % 6 < 2 ? 1 : 0] : colors[cc];
          y += rest[cc];
        }
      }
      c.putImageData(img, 0, 0);
      navBase = true;
    }
    var o = navo.getContext("2d");
    o.setTransform(dpr, 0, 0, dpr, 0, 0);
    o.clearRect(0, 0, w, h);
    var x0 = S.e0 / Math.max(M.n, 1) * w, x1 = S.e1 / Math.max(M.n, 1) * w;
    o.fillStyle = "rgba(0,0,0,0.18)";
    o.fillRect(0, 0, x0, h); o.fillRect(x1, 0, w - x1, h);
    o.strokeStyle = "#3a8fd9"; o.lineWidth = 1.5; o.strokeRect(x0 + 0.5, 0.5, Math.max(1, x1 - x0 - 1), h - 1);
    if (S.cur >= 0) {
      var cx = (S.cur + 0.5) / Math.max(M.n, 1) * w;
      o.strokeStyle = "#333"; o.setLineDash([3, 2]); o.beginPath(); o.moveTo(cx, 0); o.lineTo(cx, h); o.stroke(); o.setLineDash([]);
    }
  }
  navEl.addEventListener("mousedown", function (ev) {
    if (!M) return;
    var r = navc.getBoundingClientRect(), e = (ev.clientX - r.left) / r.width * M.n;
    var whole = S.e1 - S.e0 >= M.n;
    navDrag = !whole && e >= S.e0 && e <= S.e1 ? { pan: true, x: ev.clientX, e0: S.e0, e1: S.e1 }
                                               : { pan: false, start: e };
    ev.preventDefault();
  });
  window.addEventListener("mousemove", function (ev) {
    if (!navDrag) return;
    var r = navc.getBoundingClientRect(), e = (ev.clientX - r.left) / r.width * M.n;
    if (navDrag.pan) { var de = (ev.clientX - navDrag.x) / r.width * M.n; setRange(navDrag.e0 + de, navDrag.e1 + de); }
    else if (Math.abs(e - navDrag.start) / M.n * r.width > 3) setRange(Math.min(e, navDrag.start), Math.max(e, navDrag.start));
  });
  window.addEventListener("mouseup", function () { navDrag = null; });

  // ---------------------------------------------------------------- views
  function setView(v) {
    if (!M || !document.getElementById("tgc-tab-" + v)) return;
    if (!M.K && (full(), !M.K)) return;
    S.view = v;
    document.querySelectorAll(".tabs button").forEach(function (b) {
      b.setAttribute("aria-selected", b.getAttribute("data-view") === v ? "true" : "false");
    });
    $("tgc-view-plot").hidden = !(v === "mem" || v === "segs");
    $("tgc-view-state").hidden = v !== "state";
    $("tgc-view-cmp").hidden = v !== "cmp";
    hideTip(); hover = null;
    document.body.setAttribute("data-view", v);
    $("tgc-legend").style.display = v === "segs" ? "none" : "";
    $("tgc-seglegend").hidden = v !== "segs";
    if (v === "segs") segLegend();
    if (v === "state") {
      if (S.cur < 0 && S.sel >= 0) S.cur = Math.max(0, Math.min(M.n - 1, M.A[S.sel]));
      if (S.cur >= 0 && (S.cur < S.e0 || S.cur >= S.e1)) S.cur = Math.max(0, Math.floor(S.e0));
      apply();
      selectEvent(S.cur >= 0 ? S.cur : Math.max(0, Math.ceil(S.e1) - 1), true);
      evBox.focus();
    } else if (v === "cmp") {
      drawCompare(); drawNav();
      status.textContent = "alive at the end of this snapshot and not of the baseline";
    }
    else { size(); apply(); if (v === "mem" && S.sel >= 0) pinAlloc(S.sel); }
  }
  document.querySelectorAll(".tabs button").forEach(function (b) {
    b.addEventListener("click", function () { setView(b.getAttribute("data-view")); });
  });

  // ---------------------------------------------------------------- compare
  function drawCompare() {
    var cmp = data.compare, box = $("tgc-cmp");
    if (!cmp) return;
    var cv = $("tgc-cmpc"), pl = $("tgc-cmpplot"), w = pl.clientWidth, h = pl.clientHeight;
    cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
    cv.style.width = w + "px"; cv.style.height = h + "px";
    var c = cv.getContext("2d");
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    c.clearRect(0, 0, w, h);
    var n = Math.max(cmp.a.n, cmp.b.n, 1), ymax = Math.max(cmp.a.peak, cmp.b.peak, 1) * 1.05;
    var L0 = 70, Wd = w - L0 - 10, Hd = h - 30;
    [["a", "#555", [5, 3]], ["b", "#d9480f", []]].forEach(function (s) {
      var cu = cmp[s[0]], cols = cu.max.length;
      c.strokeStyle = s[1]; c.setLineDash(s[2]); c.lineWidth = 1.5; c.beginPath();
      for (var k = 0; k < cols; k++) {
        var x = L0 + (k + 0.5) / cols * cu.n / n * Wd, y = 5 + Hd - cu.max[k] / ymax * Hd;
        if (k === 0) c.moveTo(x, y); else c.lineTo(x, y);
      }
      c.stroke();
    });
    c.setLineDash([]);
    c.fillStyle = "#333"; c.font = "11px sans-serif";
    c.fillText("baseline (dashed): peak " + fmtBytes(cmp.a.peak) + "; this snapshot: peak " + fmtBytes(cmp.b.peak), L0, h - 6);
    c.fillText(fmtBytes(ymax / 1.05), 2, 12);
    c.fillText("event " + num(n), w - 90, h - 18);
    if (box.firstChild) return;
    var p = document.createElement("p");
    p.textContent = "Alive at the end: " + fmtBytes(cmp.alive_b) + " here, " + fmtBytes(cmp.alive_a) +
      " in the baseline (" + (cmp.delta >= 0 ? "+" : "") + fmtBytes(cmp.delta) + "). Allocations are " +
      "matched by category, name and allocation site; click a row to search for it.";
    box.appendChild(p);
    [["by_category", "By category"], ["by_name", "By name"], ["by_site", "By allocation site"]].forEach(function (tdef) {
      var t = document.createElement("table"); t.className = "cmp"; t.setAttribute("data-table", tdef[0]);
      var cap = document.createElement("caption"); cap.textContent = tdef[1] + ": alive here and not in the baseline";
      t.appendChild(cap);
      var hr = document.createElement("tr");
      ["", "here", "bytes here", "baseline", "bytes in baseline", "more here"].forEach(function (x) {
        var th = document.createElement("th"); th.textContent = x; hr.appendChild(th);
      });
      t.appendChild(hr);
      cmp[tdef[0]].forEach(function (r) {
        var tr = document.createElement("tr"); tr.className = "row";
        [r[0] || "(none)", num(r[1]), fmtBytes(r[2]), num(r[3]), fmtBytes(r[4]), (r[2] - r[4] >= 0 ? "+" : "") + fmtBytes(r[2] - r[4])]
          .forEach(function (x, i) { var td = document.createElement("td"); td.textContent = x; if (i) td.className = "b"; tr.appendChild(td); });
        tr.addEventListener("click", function () {
          if (tdef[0] === "by_category") return;
          search.value = tdef[0] === "by_site" ? r[0].replace(/ .*$/, "") : r[0];
          setView("mem"); runSearch();
        });
        t.appendChild(tr);
      });
      box.appendChild(t);
    });
  }

  // ---------------------------------------------------------------- for tests and benchmarks
  window.tgc = {
    state: function () { return { view: S.view, e0: S.e0, e1: S.e1, sel: S.sel, cur: S.cur, K: S.K,
                                  drawn: L ? L.drawn.length : 0, inView: L ? L.inView : 0,
                                  ymax: L ? L.ymax : 0 }; },
    view: setView,
    range: function (a, b) { setRange(a, b); },
    // a point (client coordinates) inside drawn item j of the current plot (where it is 3
    // pixels tall or more), or null
    pointOf: function (j) {
      var q = drawnIndex(j);
      if (q < 0) return null;
      var v = vertsOf(q), best = null, s = L.md.S[j], ys = H / L.ymax;
      for (var i = 0; i < v.length; i += 2) {
        var xa = v[i], xb = i + 2 < v.length ? v[i + 2] : L.p1[q], hpx = s * ys;
        if (hpx >= 3 && (!best || (xb - xa) * hpx > best.area)) best = { area: (xb - xa) * hpx, x: (xa + xb) / 2 / dpr, y: H - (v[i + 1] + s / 2) * ys };
      }
      var r = canvas.getBoundingClientRect();
      return best ? { x: r.left + best.x, y: r.top + best.y } : null;
    },
    hit: function (cx, cy) { var r = canvas.getBoundingClientRect(); return hitAt(cx - r.left, cy - r.top); },
    drawn: function () { return L ? Array.prototype.slice.call(L.drawn) : []; },
    offsets: function (j) {  // [column, offset bytes] where the offset of drawn item j changes
      var q = drawnIndex(j);
      return q < 0 ? null : { p0: L.p0[q], p1: L.p1[q], verts: vertsOf(q), dpr: dpr };
    },
    pixel: function (cx, cy) {
      var r = canvas.getBoundingClientRect(), d = ctx.getImageData(Math.floor((cx - r.left) * dpr), Math.floor((cy - r.top) * dpr), 1, 1).data;
      return [d[0], d[1], d[2]];
    },
    overlayPixel: function (cx, cy) {
      var r = overlay.getBoundingClientRect(), d = octx.getImageData(Math.floor((cx - r.left) * dpr), Math.floor((cy - r.top) * dpr), 1, 1).data;
      return [d[0], d[1], d[2], d[3]];
    },
    statePixel: function (cx, cy) {
      var r = segc.getBoundingClientRect(), d = segc.getContext("2d").getImageData(Math.floor((cx - r.left) * dpr), Math.floor((cy - r.top) * dpr), 1, 1).data;
      return [d[0], d[1], d[2]];
    },
    // a point (client coordinates) inside the block of allocation j in the state view, or null
    blockPoint: function (j) {
      if (!segLayout) return null;
      var b = segLayout.blocks.filter(function (x) { return x.j === j; })[0], r = segc.getBoundingClientRect();
      return b ? { x: r.left + b.x + Math.max(b.w, 1) / 2, y: r.top + 2 + b.s.row * segLayout.rh + segLayout.rh * 0.4 } : null;
    },
    blocks: function () { return segLayout ? segLayout.blocks.map(function (b) { return b.j; }) : []; },
    // a point (client coordinates) in the widest free gap of a segment of the state view
    gapPoint: function () {
      if (!segLayout) return null;
      var r = segc.getBoundingClientRect(), best = null;
      segLayout.merged.forEach(function (s) {
        var xs = segLayout.xs, x0 = 2 + s.off * xs, x1 = x0 + s.size * xs, used = [];
        segLayout.blocks.forEach(function (b) { if (b.s === s) used.push([b.x, b.x + Math.max(b.w, 1)]); });
        used.sort(function (p, q) { return p[0] - q[0]; });
        var at = x0;
        used.concat([[x1, x1]]).forEach(function (u) {
          if (u[0] - at > (best ? best.w : 4)) best = { w: u[0] - at, x: (at + u[0]) / 2, y: 2 + s.row * segLayout.rh + segLayout.rh * 0.4 };
          at = Math.max(at, u[1]);
        });
      });
      return best ? { x: r.left + best.x, y: r.top + best.y } : null;
    },
    xOfEvent: function (e) { var r = canvas.getBoundingClientRect(); return r.left + xOf(e); },
    version: function (j) { return version(j); },
    name: function (j) { return nameOf(j); },
    model: function () { full(); return M; },
    stack: function (k) { return stackLines(k, 0).lines; },
    plotBox: function () { var r = canvas.getBoundingClientRect(); return { x: r.left, y: r.top, width: r.width, height: r.height }; },
  };

  // ---------------------------------------------------------------- start
  colors = data.cats.colors.map(rgba);
  while (colors.length < NC) colors.push(rgba("#888888"));
  var got = inflate(data.blob);
  got.first.then(function (bytes) {
    performance.mark("tgc-inflated");
    decode(bytes);
    performance.mark("tgc-decoded");
    S.e1 = Math.max(M.n, 1);
    size();
    apply();
    performance.mark("tgc-ready");
    plotEl.setAttribute("data-decode-ms", M.decodeMs.toFixed(1));
    plotEl.setAttribute("data-ready", "1");
    ready = true;
    return got.all;
  }).then(function () {
    // the rest, one task a part, so that input in between waits for one part at most
    var steps = [function () { M.complete = true; full(); },
                 function () { if (times()) drawAxes(); },
                 function () { if (!M.order) M.order = sizeOrder(M.S, M.N, data.unit); },
                 function () { rangeIndex(memModel()); },
                 warm,
                 function () {
                   performance.mark("tgc-full");
                   plotEl.setAttribute("data-full", "1");  // everything decoded
                 }];
    setTimeout(function next() { steps.shift()(); if (steps.length) setTimeout(next, 0); }, 0);
  }).catch(function (err) {
    status.textContent = "The page could not read its data: " + err.message;
    plotEl.setAttribute("data-error", String(err.message));
    throw err;
  });
})();
