// The timeline page's script, first half (decoding, text, the views' models, layout, paint and
// axes; timeline_views.js, inlined right after it, draws the views and handles the interaction
// and closes the function opened here), inlined into the page by tensorgc/allocator/timeline.py
// (no network, no library). The data block #tgc-data holds every allocation of one device's
// trace on the trace's own clock (event N: the N-th trace entry) as varint streams (include/tensorgc/detail.h), the
// stacks as frame ids, the segments and the other entries. This script decodes them once and
// draws three views on one time axis with one selection: the Active Memory Timeline and the
// Active Cached Segment Timeline on a canvas (each pixel column shows the state at the entry of
// its range where the most bytes are alive, so no peak is lost between pixels), and the Allocator
// State History (an event list and the segments after the selected event). Strings from the file
// reach the DOM through textContent only. window.tgc exposes the layout for tests and benchmarks;
// performance marks "tgc-ready" and "tgc-zoom" time the first paint and each step.
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  performance.mark("tgc-script");
  var data = JSON.parse($("tgc-data").textContent);
  performance.mark("tgc-parsed");
  var plotEl = $("tgc-plot"), canvas = $("tgc-canvas"), overlay = $("tgc-overlay");
  var axes = $("tgc-axes"), xaxis = $("tgc-xaxis"), yaxis = $("tgc-yaxis");
  var panel = $("tgc-panel"), tip = $("tgc-tip"), status = $("tgc-status");
  var search = $("tgc-search"), hitsEl = $("tgc-hits");
  var NS = "http://www.w3.org/2000/svg";
  var NC = 16, NONE = 15, ALIVE = Infinity, ZOOM_ALL = 3000;
  var M = null;  // the decoded model
  // one time axis and one selection for every view
  var S = { view: "mem", e0: 0, e1: 1, sel: -1, cur: -1, K: data.detail, q: "", match: null,
            filt: { native: false, torch: false, fold: true, noise: true } };
  var L = null;  // the current plot's layout
  var ready = false;  // painted once: what the first paint waits for no more

  // ---------------------------------------------------------------- decoding
  // the data's bytes: base64 decoded (by the browser's own decoder where it has one), then
  // inflated by its DecompressionStream
  function b64bytes(s) {
    if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(s);
    var bin = atob(s), n = bin.length, out = new Uint8Array(n);
    for (var i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  // -> {first: a promise of the bytes once the first paint's parts are in, all: of all of them}
  function inflate(blob) {
    var bytes = b64bytes(blob.b64);
    if (!blob.z) return { first: Promise.resolve(bytes), all: Promise.resolve(bytes) };
    if (typeof DecompressionStream === "undefined") {
      var no = Promise.reject(new Error("this browser cannot inflate the page's data " +
                                        "(DecompressionStream): use a current browser"));
      return { first: no, all: no };
    }
    var total = 0, need = 0;
    blob.parts.forEach(function (p) {
      total += p[2];
      if (FIRST.indexOf(p[0]) >= 0) need = total;
    });
    var out = new Uint8Array(total), filled = 0, firstDone = null, firstFail = null;
    var first = new Promise(function (res, rej) { firstDone = res; firstFail = rej; });
    var reader = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate")).getReader();
    var all = new Promise(function (res, rej) {
      function pump() {
        reader.read().then(function (r) {
          if (r.done) { firstDone(out); res(out); return; }
          out.set(r.value.subarray(0, Math.max(0, total - filled)), filled);
          filled += r.value.length;
          if (filled >= need) firstDone(out);
          pump();
        }).catch(function (e) { firstFail(e); rej(e); });
      }
      pump();
    });
    return { first: first, all: all };
  }
  var FIRST = ["A", "D", "S", "CT"];  // the first paint's parts (timeline.py's FIRST_PARTS)
  // n LEB128 varints into a Float64Array (values past 2**28 through multiplication)
  function varints(bytes, n) {
    var out = new Float64Array(n), p = 0, len = bytes.length;
    for (var j = 0; j < n && p < len; j++) {
      var b = bytes[p++];
      if (b < 128) { out[j] = b; continue; }
      var v = b & 127, sh = 7;
      do { b = bytes[p++]; v |= (b & 127) << sh; sh += 7; } while (b & 128 && sh < 28 && p < len);
      if (b & 128) {
        var m = 268435456;
        do { b = bytes[p++]; v += (b & 127) * m; m *= 128; } while (b & 128 && p < len);
      }
      out[j] = v;
    }
    return out;
  }
  function unzig(v) { return v % 2 ? -(v + 1) / 2 : v / 2; }
  function u32(bytes) {
    var c = new Uint8Array(bytes.length - bytes.length % 4);
    c.set(bytes.subarray(0, c.length));
    return new Uint32Array(c.buffer);
  }

  function decode(bytes) {
    var t0 = performance.now(), parts = {}, off = 0;
    data.blob.parts.forEach(function (p) { parts[p[0]] = bytes.subarray(off, off + p[2]); off += p[2]; });
    // what the first paint needs: when each allocation lives, its size and category; the rest
    // (stacks, addresses, completions, versions, streams) right after it, or at first need
    var N = data.allocs, n = data.n, j, a = 0, u = data.unit;
    var A = varints(parts.A, N), F = varints(parts.D, N), Sz = varints(parts.S, N);
    for (j = 0; j < N; j++) {
      a += A[j]; A[j] = a;
      var d = F[j];
      F[j] = d ? a + d - 1 : ALIVE;
      Sz[j] *= u;
    }
    var C = parts.CT && parts.CT.length === N ? parts.CT : null;
    var cat = new Uint8Array(N), rule = new Uint8Array(N), ncat = data.cats.names.length;
    // a label: the category in its low four bits, why in the high four (0: of no category)
    if (C) for (j = 0; j < N; j++) { var c = C[j] & 15; rule[j] = C[j] >> 4; cat[j] = c < ncat && rule[j] ? c : NONE; }
    else cat.fill(NONE);
    var fi = u32(parts.FI || new Uint8Array(0)), fl = u32(parts.FL || new Uint8Array(0)),
        ff = u32(parts.FF || new Uint8Array(0)), starts = new Uint32Array(fl.length + 1);
    for (j = 0; j < fl.length; j++) starts[j + 1] = starts[j] + fl[j];
    M = { n: n, N: N, A: A, F: F, Fc: null, S: Sz, K: null, X: null, R: null, V: null, W: null, cat: cat,
          parts: parts,
          rule: rule, T: null, Tbytes: data.timed ? parts.T : null, fi: fi, fl: fl, ff: ff,
          fs: starts, frames: data.frames,
          NI: parts.NI ? u32(parts.NI) : null, names: data.names || [],
          namesAt: data.names_at || {}, segs: data.segs || [], events: data.events || [],
          freeKind: data.free === "free_requested" ? 2 : 3, order: null };
    buildTotals();
    M.decodeMs = performance.now() - t0;
    window.tgcModel = M;  // for tests and the curious (tgc.model() decodes it all first)
  }
  function full() {  // the streams the first paint did without, once they are in
    if (!M || M.K || !M.complete) return;
    var N = M.N, p = M.parts, j, x = 0, xu = data.xunit;
    var K = varints(p.K, N), X = varints(p.X, N), Fc = varints(p.C, N), R = varints(p.R, N),
        V = varints(p.V, N), W = varints(p.W, N), F = M.F;
    for (j = 0; j < N; j++) {
      var z = X[j];
      x += (z % 2 ? -(z + 1) / 2 : z / 2) * xu; X[j] = x;
      Fc[j] = Fc[j] && F[j] !== ALIVE ? F[j] + Fc[j] : -1;
      if (W[j]) W[j] = unzig(W[j]);
    }
    M.K = K; M.X = X; M.Fc = Fc; M.R = R; M.V = V; M.W = W;
  }
  function times(later) {  // the trace's times (µs), decoded on first need (not for the first paint)
    if (later && !M.T) return null;
    if (!M.T && M.Tbytes && M.Tbytes.length) {
      var T = varints(M.Tbytes, M.n), t = data.t0;
      for (var i = 0; i < M.n; i++) { t += unzig(T[i]); T[i] = t; }
      M.T = T;
    }
    return M.T;
  }

  // per trace entry: the allocation it makes, frees or completes (EJ >= 0), or -2 - the row of
  // data.events it is, or -1 when the page does not carry it; its kind (EK). Made on first need.
  function entries() {
    if (M.EJ) return;
    full();
    var n = M.n, N = M.N, EJ = new Int32Array(n).fill(-1), EK = new Uint8Array(n), j, a, f, fc;
    var A = M.A, F = M.F, Fc = M.Fc, fk = M.freeKind;
    for (j = data.npre; j < N; j++) { a = A[j]; if (a < n) { EJ[a] = j; EK[a] = 1; } }
    for (j = 0; j < N; j++) {
      f = F[j]; fc = Fc[j];
      if (f < n) { EJ[f] = j; EK[f] = fk; }
      if (fc >= 0 && fc < n) { EJ[fc] = j; EK[fc] = 3; }
    }
    M.events.forEach(function (e, r) { if (e[0] < n) { EJ[e[0]] = -2 - r; EK[e[0]] = e[1]; } });
    M.EJ = EJ; M.EK = EK;
  }

  // the bytes each entry adds (ED) to its category (EC), the bytes alive after each entry (tot),
  // by category every CK entries (ck), and the argmax of tot by blocks (rmax)
  var CK = 64;
  function buildTotals() {
    var n = M.n, N = M.N, nn = Math.max(n, 1), ED = new Float64Array(nn), EC = new Uint8Array(nn),
        tot = new Float64Array(nn), cur = new Float64Array(NC), nb = Math.ceil(n / CK) + 1,
        ck = new Float64Array(nb * NC), j, i, c, A = M.A, F = M.F, Sz = M.S, cat = M.cat;
    for (j = 0; j < N; j++) {
      c = cat[j];
      if (j < data.npre) cur[c] += Sz[j];
      else if (A[j] < n) { ED[A[j]] = Sz[j]; EC[A[j]] = c; }
      if (F[j] < n) { ED[F[j]] = -Sz[j]; EC[F[j]] = c; }
    }
    var s = 0, bmax = new Int32Array(nb), best = 0;
    for (c = 0; c < NC; c++) s += cur[c];
    for (i = 0; i < n; i++) {
      if ((i & (CK - 1)) === 0) {
        var b = i >> 6;
        for (c = 0; c < NC; c++) ck[b * NC + c] = cur[c];
        if (i) bmax[b - 1] = best;
        best = i;
      }
      var d = ED[i];
      if (d !== 0) { s += d; cur[EC[i]] += d; }
      tot[i] = s;
      if (s > tot[best]) best = i;
    }
    if (n) bmax[(n - 1) >> 6] = best;
    M.ED = ED; M.EC = EC; M.tot = tot; M.ck = ck;
    M.rmax = rangeMax(tot, n, bmax);
  }
  function catAt(t, out) {
    var b = t >> 6, ck = M.ck, ED = M.ED, EC = M.EC;
    for (var c = 0; c < NC; c++) out[c] = ck[b * NC + c];
    for (var i = b * CK; i <= t; i++) if (ED[i] !== 0) out[EC[i]] += ED[i];
  }
  // argmax of vals over [i0, i1] in O(1) blocks (a sparse table over blocks of 64)
  function rangeMax(vals, n, first) {
    var B = 64, nb = Math.max(1, Math.ceil(n / B)), lv = [first], k, i;
    if (!first) {
      lv[0] = new Int32Array(nb);
      for (k = 0; k < nb; k++) {
        var best = k * B;
        for (i = k * B + 1; i < Math.min(n, (k + 1) * B); i++) if (vals[i] > vals[best]) best = i;
        lv[0][k] = best;
      }
    }
    for (var w = 1; (1 << w) <= nb; w++) {
      var prev = lv[w - 1], cur = new Int32Array(nb - (1 << w) + 1), h = 1 << (w - 1);
      for (k = 0; k < cur.length; k++) {
        var x = prev[k], y = prev[k + h];
        cur[k] = vals[y] > vals[x] ? y : x;
      }
      lv.push(cur);
    }
    function scan(a, b, best) {
      for (var i = a; i <= b; i++) if (best < 0 || vals[i] > vals[best]) best = i;
      return best;
    }
    return function (i0, i1) {
      if (n === 0) return 0;
      i0 = Math.max(0, i0); i1 = Math.min(n - 1, i1);
      if (i1 < i0) i1 = i0;
      var b0 = Math.ceil(i0 / B), b1 = Math.floor((i1 + 1) / B) - 1;
      if (b1 < b0) return scan(i0, i1, -1);
      var best = scan(i0, b0 * B - 1, -1);
      var w = 31 - Math.clz32(b1 - b0 + 1), x = lv[w][b0], y = lv[w][b1 - (1 << w) + 1];
      var m = vals[y] > vals[x] ? y : x;
      if (best < 0 || vals[m] > vals[best] || (vals[m] === vals[best] && m < best)) best = m;
      return scan((b1 + 1) * B, i1, best);
    };
  }
  // allocation indexes by size, largest first (equal sizes: the earlier first)
  function sizeOrder(Sz, N, unit) {
    var maxu = 0, j;
    for (j = 0; j < N; j++) if (Sz[j] / unit > maxu) maxu = Sz[j] / unit;
    var out = new Uint32Array(N);
    if (maxu * 4194304 < 9e15 && N < 4194304) {
      var key = new Float64Array(N);
      for (j = 0; j < N; j++) key[j] = -(Sz[j] / unit * 4194304 + (4194303 - j));
      key.sort();
      for (j = 0; j < N; j++) out[j] = 4194303 - (-key[j] % 4194304);
    } else {
      for (j = 0; j < N; j++) out[j] = j;
      out.sort(function (x, y) { return Sz[y] - Sz[x] || x - y; });
    }
    return out;
  }

  // ---------------------------------------------------------------- text
  function fmtBytes(v) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(2) : String(v)) + " " + u[i];
  }
  function fmtSize(v) { return fmtBytes(v) + " (" + num(v) + " bytes)"; }
  function num(v) {  // 1234567 -> "1,234,567"
    var s = String(Math.round(Math.abs(v))), out = "";
    while (s.length > 3) { out = "," + s.slice(-3) + out; s = s.slice(0, -3); }
    return (v < 0 ? "-" : "") + s + out;
  }
  function hex(v) { return v >= 0 && isFinite(v) ? Math.round(v).toString(16) : "?"; }
  function version(j) { return "b" + hex(M.X[j]) + "_" + M.V[j]; }
  function timeText(e) {
    var T = times();
    if (!T || e < 0 || e >= M.n) return "";
    return "+" + ((T[Math.floor(e)] - T[0]) / 1e6).toFixed(6) + " s";
  }
  function when(e) {
    var t = timeText(e);
    return "event " + num(e) + (t ? " (" + t + ")" : "");
  }
  function catName(c) { return c < data.cats.names.length ? data.cats.names[c] : "no category"; }
  function catText(j) {  // "activation (inferred from the stacks: ...)", or the name alone
    if (M.cat[j] === NONE) return "no category";
    return data.cats.labels[String(M.cat[j] | M.rule[j] << 4)] || catName(M.cat[j]);
  }
  function nameOf(j) {
    if (M.NI) { var k = M.NI[j]; return k > 0 && k < M.names.length ? M.names[k] : ""; }
    return M.F[j] === ALIVE ? M.namesAt[hex(M.X[j])] || "" : "";
  }
  // the frames of stack k (1-based dense id), filtered as the toggles say
  function stackLines(k, limit) {
    if (!k || k > M.fl.length) return { lines: [], hidden: 0, cut: 0 };
    var a = M.fs[k - 1], b = a + M.fl[k - 1], out = [], hidden = 0, f = S.filt;
    for (var i = a; i < b; i++) {
      var fr = M.frames[M.fi[i]], fl = fr[2];
      if ((f.native && fl & 1) || (f.torch && fl & 2) || (f.noise && fl & 4)) { hidden++; continue; }
      out.push(fr[0] + " " + fr[1]);
    }
    if (f.fold) out = fold(out);
    var cut = M.ff[k - 1] - M.fl[k - 1];
    if (limit && out.length > limit) { cut += out.length - limit; out = out.slice(0, limit); }
    return { lines: out, hidden: hidden, cut: cut };
  }
  function fold(lines) {
    var out = [];
    for (var i = 0; i < lines.length;) {
      var k = i + 1;
      while (k < lines.length && lines[k] === lines[i]) k++;
      out.push(lines[i]);
      if (k - i === 2) out.push(lines[i]);
      else if (k - i > 2) out.push("<repeats " + (k - i - 1) + " times>");
      i = k;
    }
    return out;
  }
  function stackText(k) {  // every frame, for the search
    if (!M.stackText) M.stackText = [];
    if (M.stackText[k] === undefined) {
      var a = M.fs[k - 1], b = a + M.fl[k - 1], s = [];
      for (var i = a; i < b; i++) { var fr = M.frames[M.fi[i]]; s.push(fr[0] + " " + fr[1]); }
      M.stackText[k] = s.join("\n").toLowerCase();
    }
    return M.stackText[k];
  }
  // the first frame of the user's own code (not native, not torch's, not the interpreter's)
  function userFrame(k) {
    if (!k || k > M.fl.length) return "";
    var a = M.fs[k - 1], b = a + M.fl[k - 1];
    for (var i = a; i < b; i++) {
      var fr = M.frames[M.fi[i]];
      if (!(fr[2] & 7)) return fr[0] + " " + fr[1];
    }
    return "";
  }
  function fromLine(el, k) {
    var u = userFrame(k);
    if (!u) return;
    var d = document.createElement("div");
    d.className = "from";
    d.textContent = "from " + u;
    el.appendChild(d);
  }
  function stackPre(k, limit, title) {
    var pre = document.createElement("pre");
    pre.className = "stack";
    var st = stackLines(k, limit);
    if (title) { var t = document.createElement("span"); t.className = "t"; t.textContent = title + "\n"; pre.appendChild(t); }
    if (!k) { pre.appendChild(document.createTextNode("no stack recorded")); return pre; }
    pre.appendChild(document.createTextNode(st.lines.join("\n") || "(every frame hidden by the filters)"));
    var notes = [];
    if (st.hidden) notes.push(st.hidden + " frame" + (st.hidden === 1 ? "" : "s") + " hidden by the filters");
    if (st.cut) notes.push(st.cut + " more frame" + (st.cut === 1 ? "" : "s") + " not shown");
    if (notes.length) { var r = document.createElement("span"); r.className = "r"; r.textContent = "\n(" + notes.join("; ") + ")"; pre.appendChild(r); }
    return pre;
  }
  // the rows that describe allocation j
  function allocRows(j) {
    var rows = [["size", fmtSize(M.S[j])], ["address", "0x" + hex(M.X[j]) + "  (" + version(j) + ")"]];
    var nm = nameOf(j);
    if (nm) rows.unshift(["name", nm]);
    rows.push(["category", catText(j)]);
    rows.push(["allocated", j < data.npre ? "before the trace" : when(M.A[j])]);
    rows.push(["freed", M.F[j] === ALIVE ? "alive at the end" : when(M.F[j]) +
               (M.Fc[j] >= 0 ? ", completed at event " + num(M.Fc[j]) : "")]);
    if (M.W[j]) rows.push(["stream", String(M.W[j])]);
    return rows;
  }
  function dl(rows) {
    var d = document.createElement("dl");
    rows.forEach(function (r) {
      var dt = document.createElement("dt"); dt.textContent = r[0];
      var dd = document.createElement("dd"); dd.textContent = r[1];
      d.appendChild(dt); d.appendChild(dd);
    });
    return d;
  }
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }
  function h3(text) { var h = document.createElement("h3"); h.textContent = text; return h; }

  // ---------------------------------------------------------------- the views' models
  // A plot model: N items (allocations, or segments) alive in [A, F), their size, colour
  // index, stacking order = index order; tot(t), argmax(i0, i1), rest(t, out): the bytes per
  // colour of the items not drawn one by one.
  var colors = [], hatch = [0xffeae6e3, 0xffa5988d];
  function rgba(h) {
    var v = parseInt(h.slice(1), 16);
    return (0xff000000 | ((v & 255) << 16) | (v & 0xff00) | (v >> 16)) >>> 0;
  }
  function memModel() {
    return { N: M.N, A: M.A, F: M.F, S: M.S, col: M.cat, order: M.order, unit: data.unit,
             tot: M.tot, argmax: M.rmax, rest: catAt, colors: colors, items: "allocations",
             hatchNone: true };
  }
  var segModelCache = null;
  function segModel() {
    if (segModelCache) return segModelCache;
    var segs = M.segs, N = segs.length, n = M.n, A = new Float64Array(N), F = new Float64Array(N),
        Sz = new Float64Array(N), col = new Uint8Array(N), groups = {}, names = [], j;
    var idx = [];
    for (j = 0; j < N; j++) idx.push(j);
    idx.sort(function (x, y) { return segs[x][0] - segs[y][0] || x - y; });
    var order = [];
    for (var q = 0; q < N; q++) {
      var g = segs[idx[q]];
      A[q] = g[0]; F[q] = g[1] < 0 ? ALIVE : g[1]; Sz[q] = g[2];
      var key = "stream " + g[4] + ", " + g[5] + " pool";  // inferred or known: one group
      if (groups[key] === undefined) { groups[key] = names.length; names.push(key); }
      col[q] = Math.min(groups[key], 14);
      order.push(q);
    }
    order.sort(function (x, y) { return Sz[y] - Sz[x] || x - y; });
    var d = new Float64Array(n + 1), tot = new Float64Array(Math.max(n, 1)), s = 0;
    for (j = 0; j < N; j++) { d[Math.min(n, A[j])] += Sz[j]; if (F[j] < n) d[F[j]] -= Sz[j]; }
    for (var i = 0; i < n; i++) { s += d[i]; tot[i] = s; }
    var palette = ["#4e79a7", "#f28e2c", "#59a14f", "#e15759", "#76b7b2", "#edc949", "#af7aa1",
                   "#ff9da7", "#9c755f", "#bab0ab", "#86bcb6", "#d37295", "#fabfd2", "#b6992d", "#499894"];
    segModelCache = { N: N, A: A, F: F, S: Sz, col: col, order: new Uint32Array(order), tot: tot,
                      argmax: rangeMax(tot, n), rest: null, idx: idx, groups: names,
                      colors: palette.map(rgba), palette: palette, items: "segments", unit: 1,
                      hatchNone: false };
    return segModelCache;
  }
  function model() { return S.view === "segs" ? segModel() : memModel(); }
  function segLegend() {  // the segment timeline's colours: stream and pool
    var el = $("tgc-seglegend"), md = segModel();
    if (el.firstChild) return;
    el.appendChild(document.createTextNode("segments by stream and pool:"));
    md.groups.forEach(function (g, i) {
      var sw = document.createElement("span"); sw.className = "sw";
      sw.style.background = md.palette[Math.min(i, 14)];
      el.appendChild(sw);
      el.appendChild(document.createTextNode(g));
    });
    el.appendChild(document.createTextNode(" — the line: the allocated bytes"));
  }

  // ---------------------------------------------------------------- layout and paint
  var dpr = 1, W = 0, H = 0, PL = 64, PR = 8, PT = 8, PB = 34;  // CSS px: plot area margins
  function size() {
    dpr = window.devicePixelRatio || 1;
    var w = plotEl.clientWidth, h = plotEl.clientHeight;
    W = Math.max(50, w - PL - PR); H = Math.max(50, h - PT - PB);
    [canvas, overlay].forEach(function (c) {
      c.width = Math.round(W * dpr); c.height = Math.round(H * dpr);
      c.style.width = W + "px"; c.style.height = H + "px";
      c.style.left = PL + "px"; c.style.top = PT + "px";
    });
    axes.setAttribute("width", w); axes.setAttribute("height", h);
  }
  // the layout of [e0, e1) in P device columns: each column's entry (tp: the first where the
  // most bytes are alive), the items drawn one by one (the K largest alive in range; all of
  // them once at most ZOOM_ALL are), each one's columns and its offsets where they change
  function layout(md, e0, e1, K) {
    var P = canvas.width, n = M.n, span = e1 - e0, tp = new Float64Array(P),
        top = new Float64Array(P), p, i, j, q;
    for (p = 0; p < P; p++) {
      var lo = e0 + p * span / P, hi = e0 + (p + 1) * span / P;
      var i0 = Math.floor(lo), i1 = Math.max(i0, Math.ceil(hi) - 1);
      tp[p] = n ? md.argmax(i0, i1) : 0;
      top[p] = n ? md.tot[tp[p]] : 0;
    }
    var lo0 = Math.max(0, Math.floor(e0)), hi0 = Math.min(n - 1, Math.ceil(e1) - 1);
    // alive somewhere in range: A <= hi0 and F > lo0; as many as start by hi0, less those
    // that ended by lo0 (they started before it)
    var N = md.N, A = md.A, F = md.F, upto = upperBound(A, N, hi0), inView = 0, ix = null;
    if (ready || md === segModelCache) {
      ix = rangeIndex(md);
      inView = upto - upperBound(ix.fs, N, lo0);
    } else {  // the first paint does without the index (made right after it)
      for (j = 0; j < upto; j++) if (F[j] > lo0) inView++;
    }
    var all = inView <= Math.max(K, ZOOM_ALL) && e1 - e0 < n - 1e-9 || inView <= K;
    var want = all ? inView : K, drawn = [];
    if (all && !ix) { for (j = 0; j < upto; j++) if (F[j] > lo0) drawn.push(j); }
    else if (all) {  // by the max-tree of their ends: O(found log N)
      var t = ix.tree, PT2 = ix.P, stack = [1, 0, PT2];
      while (stack.length) {
        var b = stack.pop(), a = stack.pop(), node = stack.pop();
        if (a >= upto || t[node] <= lo0) continue;
        if (node >= PT2) { drawn.push(node - PT2); continue; }
        var m = (a + b) >> 1;
        stack.push(2 * node + 1, m, b, 2 * node, a, m);
      }
    } else if (md.order) {
      for (q = 0; q < N && drawn.length < want; q++) {
        j = md.order[q];
        if (A[j] <= hi0 && F[j] > lo0) drawn.push(j);
      }
      drawn.sort(function (x, y) { return x - y; });
    } else {
      // the first paint: the largest of the whole trace came with the page
      if (!ready && md.N === M.N && data.top && K === data.detail && e0 === 0 && e1 >= n) {
        drawn = data.top.filter(function (j) { return A[j] <= hi0 && F[j] > lo0; });
        if (drawn.length !== Math.min(want, inView)) drawn = null;
      } else drawn = null;
      if (!drawn) drawn = largest(md, lo0, hi0, inView, want);
    }
    var nd = drawn.length, p0 = new Int32Array(nd), p1 = new Int32Array(nd);
    for (q = 0; q < nd; q++) {
      j = drawn[q];
      p0[q] = firstAtLeast(tp, A[j]);
      p1[q] = F[j] === ALIVE ? P : firstAtLeast(tp, F[j]);
    }
    var ymax = 0;
    for (p = 0; p < P; p++) if (top[p] > ymax) ymax = top[p];
    return { md: md, e0: e0, e1: e1, P: P, tp: tp, top: top, drawn: drawn, p0: p0, p1: p1,
             ymax: ymax > 0 ? ymax * 1.05 : 1, inView: inView, all: nd === inView, vhead: null };
  }
  function upperBound(arr, n, v) {  // how many of the sorted arr[0:n] are <= v
    var lo = 0, hi = n;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (arr[mid] <= v) lo = mid + 1; else hi = mid; }
    return lo;
  }
  // a model's ends, sorted, and a max-tree over them in index order (made once a model)
  function rangeIndex(md) {
    var holder = md === segModelCache ? md : M;
    if (holder.rix) return holder.rix;
    var N = md.N, fs = new Float64Array(N), P = 1, j;
    fs.set(md.F.subarray ? md.F.subarray(0, N) : md.F);
    fs.sort();
    while (P < N) P *= 2;
    var tree = new Float64Array(2 * P).fill(-1);
    for (j = 0; j < N; j++) tree[P + j] = md.F[j];
    for (j = P - 1; j >= 1; j--) tree[j] = Math.max(tree[2 * j], tree[2 * j + 1]);
    holder.rix = { fs: fs, tree: tree, P: P };
    return holder.rix;
  }
  // the `want` largest items alive in [lo, hi] (equal sizes: the earlier first), in index
  // order, by a selection over their keys (no sort of them all)
  function largest(md, lo, hi, count, want) {
    var key = new Float64Array(count), A = md.A, F = md.F, Sz = md.S, k = 0, j, u = md.unit;
    var big = 4194304;
    for (j = 0; j < md.N; j++) if (A[j] <= hi && F[j] > lo) key[k++] = -(Sz[j] / u * big + (big - 1 - j));
    var l = 0, r = count - 1, m = want - 1;
    while (l < r) {  // quickselect: key[m] the want-th smallest
      var pv = key[(l + r) >> 1], i = l, q = r;
      while (i <= q) {
        while (key[i] < pv) i++;
        while (key[q] > pv) q--;
        if (i <= q) { var t = key[i]; key[i] = key[q]; key[q] = t; i++; q--; }
      }
      if (m <= q) r = q; else if (m >= i) l = i; else break;
    }
    var thr = key[m], out = [];
    for (j = 0; j < md.N; j++) if (A[j] <= hi && F[j] > lo && -(Sz[j] / u * big + (big - 1 - j)) <= thr) out.push(j);
    return out;
  }
  function firstAtLeast(arr, v) {
    var lo = 0, hi = arr.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (arr[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function bucket(P, idx, at) {  // items by the column they enter/leave at
    var start = new Int32Array(P + 2), q;
    for (q = 0; q < idx.length; q++) if (at[q] <= P) start[at[q] + 1]++;
    for (q = 0; q <= P; q++) start[q + 1] += start[q];
    var fill = start.slice(), out = new Int32Array(idx.length);
    for (q = 0; q < idx.length; q++) if (at[q] <= P) out[fill[at[q]]++] = q;
    return { start: start, items: out };
  }
  // Sweeps the columns once: stacks the drawn items and paints them, then the rest by colour
  // above them, into an ImageData. An item's offset changes only where one below it leaves (a
  // newcomer goes on top), so each column repaints from the lowest item that moved or came
  // there upward and takes the rows below it from the column before: one pass over the pixels
  // whatever the number of items (a band per run of columns cost a call per item that moved,
  // every column, once thousands are drawn). Where each item's offset changes, (column, bytes)
  // goes to flat typed arrays chained per item (vertsOf reads them), not to an array per item.
  var imgCache = null, VMAIN = { p: new Int32Array(4096), y: new Float64Array(4096), next: new Int32Array(4096) };
  function paint(Lt, dry) {
    var md = Lt.md, P = Lt.P, Hd = canvas.height, ys = Hd / Lt.ymax;
    if (!imgCache || imgCache.width !== P || imgCache.height !== Hd) imgCache = ctx.createImageData(P, Hd);
    var img = imgCache, buf = new Uint32Array(img.data.buffer);
    buf.fill(0xffffffff);
    var nd = Lt.drawn.length, enter = bucket(P, Lt.drawn, Lt.p0), leave = bucket(P, Lt.drawn, Lt.p1);
    var live = new Int32Array(nd), pos = new Int32Array(nd), nlive = 0, off = new Float64Array(nd),
        dead = new Uint8Array(nd), head = new Int32Array(nd).fill(-1),
        dc = new Float64Array(NC), rest = new Float64Array(NC), S2 = md.S, col = md.col, D = Lt.drawn;
    var V = dry ? { p: new Int32Array(4096), y: new Float64Array(4096), next: new Int32Array(4096) } : VMAIN;
    var vp = V.p, vy = V.y, vn = V.next, nv = 0;
    var cols = md.colors, sep = cols.map(function (c) { return mix(c); }), hatchNone = md.hatchNone;
    var p, k, b, q, c, y, top = 0, r, r0, r1, colr, low, cc, s, hatched = 0;
    for (p = 0; p < P; p++) {
      low = nlive;  // the lowest position whose item left, moved or came in this column
      for (k = leave.start[p]; k < leave.start[p + 1]; k++) {
        b = leave.items[k];
        if (dead[b] || Lt.p0[b] >= p) { dead[b] = 1; continue; }  // never shown
        dead[b] = 1;
        dc[col[D[b]]] -= S2[D[b]];
        if (col[D[b]] === NONE && hatchNone) hatched--;
        if (pos[b] < low) low = pos[b];
      }
      if (low < nlive) {  // close the gaps
        var w = low;
        for (q = low; q < nlive; q++) { b = live[q]; if (!dead[b]) { live[w] = b; pos[b] = w; w++; } }
        nlive = w;
      }
      for (k = enter.start[p]; k < enter.start[p + 1]; k++) {  // newcomers on top
        b = enter.items[k];
        if (Lt.p1[b] <= p) continue;
        if (nlive < low) low = nlive;
        live[nlive] = b; pos[b] = nlive++; off[b] = -1;
        dc[col[D[b]]] += S2[D[b]];
        if (col[D[b]] === NONE && hatchNone) hatched++;
      }
      // the rows under the lowest that changed: the column before's
      y = low > 0 ? off[live[low - 1]] + S2[D[live[low - 1]]] : 0;
      r1 = Math.ceil(Hd - y * ys - 0.5);
      if (r1 > Hd) r1 = Hd;
      if (p > 0 && hatched > 0) {  // hatching runs diagonally: redone, not copied
        for (r = r1 < 0 ? 0 : r1; r < Hd; r++) {
          colr = buf[r * P + p - 1];
          buf[r * P + p] = colr === hatch[0] || colr === hatch[1] ? hatch[(p + r) % 6 < 2 ? 1 : 0] : colr;
        }
      } else if (p > 0) for (r = r1 < 0 ? 0 : r1; r < Hd; r++) buf[r * P + p] = buf[r * P + p - 1];
      // from there up: each one's offset (where it changes, noted) and its rows
      for (q = low; q < nlive; q++) {
        b = live[q]; s = S2[D[b]];
        if (off[b] !== y) {
          off[b] = y;
          if (nv === vp.length) {
            var m2 = nv * 2, np = new Int32Array(m2), ny = new Float64Array(m2), nn = new Int32Array(m2);
            np.set(vp); ny.set(vy); nn.set(vn); vp = np; vy = ny; vn = nn;
          }
          vp[nv] = p; vy[nv] = y; vn[nv] = head[b]; head[b] = nv++;
        }
        y += s;
        r0 = Math.ceil(Hd - y * ys - 0.5);
        if (r0 < 0) r0 = 0;
        if (r1 > r0) {
          cc = col[D[b]];
          if (cc === NONE && hatchNone) for (r = r0; r < r1; r++) buf[r * P + p] = hatch[(p + r) % 6 < 2 ? 1 : 0];
          else {
            colr = cols[cc] || cols[0];
            buf[r0 * P + p] = r1 - r0 >= 4 ? sep[cc] || colr : colr;
            for (r = r0 + 1; r < r1; r++) buf[r * P + p] = colr;
          }
          r1 = r0;
        }
      }
      top = y;
      if (md.rest) {  // the rest, by colour, above the drawn ones
        md.rest(Lt.tp[p], rest);
        y = top;
        for (c = 0; c < NC; c++) {
          var v = rest[c] - dc[c];
          if (v <= 0) continue;
          r0 = Math.ceil(Hd - (y + v) * ys - 0.5); r1 = Math.ceil(Hd - y * ys - 0.5);
          if (r0 < 0) r0 = 0;
          if (c === NONE) for (r = r0; r < r1; r++) buf[r * P + p] = hatch[(p + r) % 6 < 2 ? 1 : 0];
          else { colr = cols[c] || cols[0]; for (r = r0; r < r1; r++) buf[r * P + p] = colr; }
          y += v;
        }
      }
    }
    if (dry) return;
    VMAIN = { p: vp, y: vy, next: vn };
    Lt.vhead = head; Lt.vp = vp; Lt.vy = vy; Lt.vn = vn;
    ctx.putImageData(img, 0, 0);
  }
  // [column, offset bytes, ...] where drawn item q's offset changes, in column order
  function vertsOf(q) {
    var out = [];
    for (var v = L.vhead[q]; v >= 0; v = L.vn[v]) out.push(L.vy[v], L.vp[v]);
    return out.reverse();
  }
  // the layout and the paint of a few ranges, thrown away: the browser compiles them before the
  // first zoom rather than during it
  function warm() {
    if (!M || !M.n || S.view !== "mem") return;
    var md = model(), n = M.n;
    // the whole trace, two zoomed-out ranges and one of a thousand entries (the detail view)
    [[0, n], [n * 0.3, n * 0.6], [n * 0.45, n * 0.47], [Math.max(0, n / 2 - 500), n / 2 + 500]].forEach(function (r) {
      paint(layout(md, r[0], Math.max(r[1], r[0] + 2), S.K), true);
    });
  }
  function mix(c) {  // a band's top row: its colour, a little lighter
    var r = c & 255, g = (c >> 8) & 255, b2 = (c >> 16) & 255;
    r = r + (255 - r) * 0.45; g = g + (255 - g) * 0.45; b2 = b2 + (255 - b2) * 0.45;
    return (0xff000000 | (Math.round(b2) << 16) | (Math.round(g) << 8) | Math.round(r)) >>> 0;
  }
  var ctx = canvas.getContext("2d"), octx = overlay.getContext("2d");

  // ---------------------------------------------------------------- axes
  function niceStep(span, n) {
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9)))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function svgText(parent, x, y, cls, text, anchor) {
    var t = document.createElementNS(NS, "text");
    t.setAttribute("x", x.toFixed(1)); t.setAttribute("y", y.toFixed(1));
    t.setAttribute("class", cls);
    if (anchor) t.setAttribute("text-anchor", anchor);
    t.textContent = text;
    parent.appendChild(t);
    return t;
  }
  function svgLine(parent, x1, y1, x2, y2, stroke) {
    var l = document.createElementNS(NS, "line");
    l.setAttribute("x1", x1); l.setAttribute("y1", y1); l.setAttribute("x2", x2); l.setAttribute("y2", y2);
    l.setAttribute("stroke", stroke);
    parent.appendChild(l);
  }
  var measure = document.createElement("canvas").getContext("2d");
  function textWidth(s) {  // the width of a tick's label (11px sans-serif), without a layout
    measure.font = "11px sans-serif";
    return measure.measureText(s).width;
  }
  function drawAxes() {
    clear(xaxis); clear(yaxis);
    var e0 = S.e0, e1 = S.e1, step = Math.max(1, niceStep(e1 - e0, Math.max(2, Math.floor(W / 170))));
    var ticks = [];
    for (var e = Math.ceil(e0 / step) * step; e <= e1 + 1e-9; e += step) ticks.push(e);
    // seconds: enough decimals that neighbours differ; a time equal to the previous one's is
    // written once
    var T = times(!ready);
    var secs = ticks.map(function (e) { return T && e < M.n ? (T[Math.min(M.n - 1, Math.floor(e))] - T[0]) / 1e6 : null; });
    var dmin = Infinity;
    for (var i = 1; i < secs.length; i++) if (secs[i] !== null && secs[i - 1] !== null && secs[i] !== secs[i - 1])
      dmin = Math.min(dmin, Math.abs(secs[i] - secs[i - 1]));
    var dec = isFinite(dmin) ? Math.min(6, Math.max(0, Math.ceil(-Math.log10(dmin)) + 1)) : 3;
    var prevLabel = null;
    ticks.forEach(function (e, k) {
      var x = PL + (e - e0) / (e1 - e0) * W, label = "event " + num(e);
      if (secs[k] !== null) {
        var tl = "+" + secs[k].toFixed(dec) + " s";
        if (tl !== prevLabel) label += " (" + tl + ")";
        prevLabel = tl;
      }
      var t = svgText(xaxis, x, PT + H + 16, "tick", label), tw = textWidth(label);
      var right = PL + W + PR, cx = Math.max(tw / 2 + 1, Math.min(right - tw / 2 - 1, x));
      if (cx !== x) t.setAttribute("x", cx.toFixed(1));  // kept whole inside the plot's box
      svgLine(xaxis, x, PT + H, x, PT + H + 4, "#888");
    });
    var top = L ? L.ymax : 1, unit = 1, ui = 0;
    while (top / unit >= 1024 && ui < 5) { unit *= 1024; ui++; }
    var ystep = niceStep(top / unit, 5) * unit;
    for (var v = 0; v <= top; v += ystep) {
      var y = PT + H - v / top * H;
      svgText(yaxis, PL - 6, y, "ytick", fmtBytes(v).replace(".00", ""));
      svgLine(yaxis, PL, y, PL + W, y, "#eee");
    }
  }
