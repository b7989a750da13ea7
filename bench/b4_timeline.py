#!/usr/bin/env python
"""B4 -- the Active Memory Timeline of a large snapshot: tensorgc vs torch's memory_viz.

Input: ``--snapshot PATH``, or a synthetic trace of ``--events`` entries (default 1M: allocations
of 0.25-16 MB from a few call sites, about half of them freed, a few OOM events, one distinct
frame dict per entry as in real dumps), or with ``--record`` (CUDA) a real one recorded from a
synthetic workload with tensorgc.record_memory_history(max_entries=events). ``--free-completed``
follows each synthetic free_requested with its free_completed, as CUDA's caching allocator does.

Measured, each in a fresh process (``--repeat`` times, median):
* ``tensorgc timeline SNAP -o out.html`` (the streamed load, the C engines, the page's data);
* ``python -m torch.cuda._memory_viz trace_plot SNAP -o out.html`` (plain pickle.load);
* page size, and whether the page needs the network (an external script or module URL);
* with ``--categories``: the same trace with tensorgc_categories marks, so the
  replay classifies every allocation and the page draws the categories chart;
* with ``--chromium``: wall time of ``chromium --headless --screenshot`` of each page, and of
  an empty page as the browser's own start-up baseline;
* with ``--interactive`` (playwright, driving the same chromium): tensorgc's page loaded in a
  running browser, its own performance marks read: first paint (the "tgc-ready" mark: what the
  first picture needs decoded, the picture painted), everything decoded ("tgc-full": the steps
  start there) and each zoom, pan and hover step (the page's own time, as it writes it to
  data-zoom-ms and data-hover-ms), over zoom levels from the whole trace down to a few events;
  and the same things measured from outside the page's code, by one method for both pages
  (below);
* with ``--interactive --memory-viz-js PATH --d3 PATH``: memory_viz's page in the same chromium,
  timed by that method, side by side with tensorgc's.

    python bench/b4_timeline.py --events 1000000 --repeat 3 --chromium

The method for both pages (an init script, installed before the page's own scripts; times are
``performance.now()`` in the page, from navigation start):
* first paint: a MutationObserver notes when the timeline is in the DOM (memory_viz: the first
  ``svg polygon``, which its trace view appends in the same task as all the others; tensorgc:
  ``#tgc-plot[data-ready]``, set once its canvas is painted); from there, a
  ``requestAnimationFrame`` callback posts a message, and the message's arrival (the end of that
  frame's style, layout and paint on the main thread; rasterization runs on other threads and
  is not counted) is the first paint;
* steps, each one input event from playwright's mouse: 40 wheel steps (deltaY -200, at 47% of
  the plot's width; tensorgc zooms x alone, 1.25x a step, at mid-height; memory_viz's d3 zoom
  scales both axes, 1.32x a step, so there at 97% of the height, to stay in what is drawn), 20
  drag moves of 12 pixels after the first 10 wheel steps (a pan), and 2 x 30 moves across the
  plot without a button (hover), before the zoom and after it. A capture listener on window
  takes t0 as the event arrives and watches the DOM; the step ends at the end of the last frame
  (rAF, then a message) that followed a DOM change, once two frames in a row have passed without
  one. "handler" is t0 to the observer's first callback: the page's own JavaScript for the event
  (for tensorgc's hover, which waits for the next frame, t0 to its first change).

memory_viz's page imports MemoryViz.js from a CDN, which imports d3 from another; offline it is
blank. ``--memory-viz-js`` and ``--d3`` serve those imports from local files through
playwright's ``route`` (every other request off the machine is aborted and reported). Neither
file belongs to this repository; get them with::

    # MemoryViz.js of PyTorch's repository (github.com/pytorch/pytorch) at commit c4b5ac72: it
    # imports d3@5, d3-axis@1, d3-scale@1, d3-zoom@1 and d3-brush@1 and reads d3.event (d3 v5)
    git -C pytorch show c4b5ac720f8359f20813826d66b5e880bfdf07ca:torch/utils/viz/MemoryViz.js > MemoryViz.js
    # d3 5.16.0, Debian 12's node-d3 5.16.0-10: /usr/share/nodejs/d3/dist/d3.min.js
    apt-get install node-d3
    # or, without installing it: apt-get download node-d3 && dpkg-deb -x node-d3_*.deb d3
    # for a MemoryViz.js that imports d3@7: d3.v7.min.js of PyPI's d3blocks wheel
    pip download --no-deps d3blocks && unzip -j d3blocks-*.whl d3blocks/_shared/d3js/d3.v7.min.js

Synthetic traces have no free_completed unless ``--free-completed``: memory_viz then counts
nothing freed and draws every allocation alive to the end (tensorgc frees at free_requested).

d3's bundle is UMD; the bench serves it as an ES module that it writes at run time: the
bundle's text, run through an AMD ``define`` that hands it an object, then one named export for
each key the bundle makes (listed by running the bundle in a blank page first; each through a
local name of the bench's, so that an export named ``window`` does not shadow the global inside
the bundle), with ``event`` a live binding (d3 up to v5 assigns ``exports.event`` around each
listener). The first d3 URL that MemoryViz.js imports gets that module, the others a re-export
of it, so that d3.event, zoom and brush share one d3-selection as they do from the CDN.
"""
from __future__ import annotations

import argparse
import os
import pickle
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1 << 20


def with_categories(snap, seed=0):
    """Adds what tensorgc.categorize records to a snapshot: phase spans of 1,000
    entries each (forward, backward, optimizer in turn), a grad mark on every 20th allocation
    and the reporter's names of every 10th block alive at the end -- the replay's classifying
    path, at full size."""
    rnd = random.Random(seed)
    trace = snap["device_traces"][0]
    times = [e["time_us"] for e in trace]
    spans = [[("forward", "backward", "optimizer")[k % 3], times[i],
              times[min(i + 999, len(times) - 1)]] for k, i in enumerate(range(0, len(times), 1000))]
    grads, live = [], {}
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            if rnd.random() < 0.05:
                grads.append([0, e["addr"], e["time_us"] + 1])
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    kinds = ("parameter", "optimizer_state", "grad", "activation", "buffer")
    named = {a: kinds[i % len(kinds)] for i, a in enumerate(list(live)[::10])}
    snap["tensorgc_categories"] = {"version": 1, "spans": spans, "grads": grads,
                                   "named": {0: named}}
    return snap


def synthetic(n, seed=0, free_completed=False):
    """n trace entries; with free_completed, each free_requested is followed by its
    free_completed (as CUDA's caching allocator records a free with no stream use pending), the
    pair counting as two of the n."""
    rnd = random.Random(seed)
    sites = [("/w/model.py", 10, "forward"), ("/w/train.py", 42, "step"),
             ("/w/data.py", 7, "load"), ("/w/opt.py", 88, "adam_step"), ("/w/loss.py", 3, "ce")]
    trace, live, addr = [], [], 0x7F0000000000
    for i in range(n):
        if free_completed and len(trace) >= n:
            break
        if i and i % (n // 4 + 1) == 0:
            trace.append({"action": "oom", "addr": 0, "size": 0, "stream": 0, "time_us": i,
                          "device_free": 0, "frames": []})
            continue
        if live and rnd.random() < 0.5:
            a, s = live.pop(rnd.randrange(len(live)))
            f = rnd.choice(sites)
            trace.append({"action": "free_requested", "addr": a, "size": s, "stream": 0,
                          "time_us": i, "frames": [{"filename": f[0], "line": f[1], "name": f[2]}]})
            if free_completed:
                trace.append({"action": "free_completed", "addr": a, "size": s, "stream": 0,
                              "time_us": i, "frames": [{"filename": f[0], "line": f[1],
                                                        "name": f[2]}]})
        else:
            s = rnd.choice((1, 2, 4, 8, 16, 64)) * MB // 4
            addr += 0x4000000
            f = rnd.choice(sites)
            live.append((addr, s))
            trace.append({"action": "alloc", "addr": addr, "size": s, "stream": 0, "time_us": i,
                          "frames": [{"filename": f[0], "line": f[1], "name": f[2]}]})
    return {"segments": [], "device_traces": [trace]}


def training(n):
    """n entries of tests/_traces.py's training run: 6 layers of d_model 512, AdamW, torch's
    stacks (Python and C++ frames), a side stream for the inputs, the run going on until its
    trace holds n entries (the blocks alive before them in the segments, as in a long run's
    file)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from _traces import make_trace

    return make_trace(layers=6, steps=None, d_model=512, max_entries=n, stacks="all", seed=0,
                      side_stream=True).snapshot


def record(n):
    import torch

    sys.path.insert(0, ROOT)
    import tensorgc

    tensorgc.record_memory_history(max_entries=n, stacks="python")
    keep = []
    rnd = random.Random(0)
    events = 0  # trace entries: an alloc is one, a free two (free_requested, free_completed)
    while events < n:
        if keep and rnd.random() < 0.5:
            keep.pop(rnd.randrange(len(keep)))
            events += 2
        else:
            keep.append(torch.empty(rnd.choice((1, 2, 4, 8)) * MB // 4, dtype=torch.uint8,
                                    device="cuda"))
            events += 1
        if len(keep) > 400:
            del keep[:200]
            events += 400
    snap = tensorgc.snapshot()
    tensorgc.record_memory_history(enabled=None)
    return snap


def timed(cmd, env=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    return time.perf_counter() - t0, r


def needs_network(path):
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        text = f.read()
    return bool(re.search(r"""(?:src=|from\s+|import\s*\(?\s*)["']https?://""", text))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--snapshot")
    p.add_argument("--record", action="store_true")
    p.add_argument("--training", action="store_true",
                   help="a training-like trace of --events entries (tests/_traces.py: a "
                        "TransformerEncoder trained with AdamW, torch's stacks with Python and "
                        "C++ frames, categories inferred from them) instead of the synthetic one")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--chromium", action="store_true")
    p.add_argument("--interactive", action="store_true",
                   help="first paint and zoom steps of tensorgc's page (playwright)")
    p.add_argument("--categories", action="store_true",
                   help="add tensorgc_categories marks (spans, grad marks, names) to the trace")
    p.add_argument("--free-completed", action="store_true",
                   help="synthetic trace: follow each free_requested with its free_completed "
                        "(memory_viz counts a block freed only there: without it, its page draws "
                        "every allocation alive to the end)")
    p.add_argument("--keep", help="directory to keep the snapshot and pages in")
    p.add_argument("--memory-viz-js", metavar="PATH",
                   help="a local copy of torch/utils/viz/MemoryViz.js: with --interactive and "
                        "--d3, memory_viz's page is timed too (its CDN imports served from these "
                        "files)")
    p.add_argument("--d3", metavar="PATH",
                   help="a local d3 bundle (UMD, the version MemoryViz.js imports: d3.min.js)")
    p.add_argument("--page-timeout", type=float, default=120, metavar="S",
                   help="how long to wait for a page's first paint (default 120 s)")
    args = p.parse_args()
    if bool(args.memory_viz_js) != bool(args.d3):
        p.error("--memory-viz-js and --d3 go together")
    if args.memory_viz_js and not args.interactive:
        p.error("--memory-viz-js and --d3 time memory_viz's page: they need --interactive")
    work = args.keep or tempfile.mkdtemp(prefix="tensorgc-b4-")
    os.makedirs(work, exist_ok=True)
    snap_path = args.snapshot
    source = f"file {args.snapshot}"
    if snap_path is None:
        t0 = time.perf_counter()
        snap = (record(args.events) if args.record else training(args.events) if args.training
                else synthetic(args.events, free_completed=args.free_completed))
        if args.categories:
            snap = with_categories(snap)
        source = ("recorded on CUDA" if args.record else "training-like (tests/_traces.py)"
                  if args.training else "synthetic") + \
            (" with categories" if args.categories else "") + \
            (" with free_completed" if args.free_completed and not args.record else "") + \
            f" ({sum(len(t) for t in snap['device_traces']):,} trace entries, made in " \
            f"{time.perf_counter() - t0:.1f} s)"
        snap_path = os.path.join(work, "snapshot.pickle")
        with open(snap_path, "wb") as f:
            pickle.dump(snap, f, protocol=4)
        del snap
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ours = os.path.join(work, "tensorgc-timeline.html")
    theirs = os.path.join(work, "memory_viz-trace_plot.html")
    tools = {
        "tensorgc timeline": [sys.executable, "-m", "tensorgc", "timeline", snap_path, "-o", ours],
        "torch memory_viz trace_plot": [sys.executable, "-m", "torch.cuda._memory_viz",
                                        "trace_plot", snap_path, "-o", theirs],
    }
    res = {k: [] for k in tools}
    err = {}
    for _ in range(args.repeat):
        for k, cmd in tools.items():
            dt, r = timed(cmd, env)
            if r.returncode != 0:
                err[k] = (r.stderr or r.stdout)[-500:]
                continue
            res[k].append(dt)
    size = os.path.getsize(snap_path)
    print(f"### B4 timeline: {source}, snapshot {size / MB:.1f} MB\n")
    print("| tool | median wall (s) | runs (s) | page size | needs the network |")
    print("| --- | ---: | --- | ---: | --- |")
    for k, out in (("tensorgc timeline", ours), ("torch memory_viz trace_plot", theirs)):
        if not res[k]:
            print(f"| {k} | failed | {err.get(k, '')!r} | | |")
            continue
        print(f"| {k} | {statistics.median(res[k]):.2f} | "
              f"{', '.join(f'{x:.2f}' for x in res[k])} | {os.path.getsize(out) / MB:.2f} MB | "
              f"{'yes (blank offline)' if needs_network(out) else 'no'} |")
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    if args.chromium and chrome:
        blank = os.path.join(work, "blank.html")
        with open(blank, "w") as f:
            f.write("<!DOCTYPE html><html><body></body></html>")
        print("\n| page | headless chromium --screenshot wall (s), median | runs |")
        print("| --- | ---: | --- |")
        for name, page in (("empty page (browser start-up)", blank), ("tensorgc timeline", ours),
                           ("memory_viz trace_plot", theirs)):
            if not os.path.exists(page):
                continue
            ts = []
            for _ in range(args.repeat):
                shot = os.path.join(work, "shot.png")
                dt, r = timed([chrome, "--headless", "--no-sandbox", "--disable-gpu",
                               f"--screenshot={shot}", "--window-size=1300,600",
                               "file://" + os.path.abspath(page)])
                ts.append(dt)
            print(f"| {name} | {statistics.median(ts):.2f} | {', '.join(f'{x:.2f}' for x in ts)} |")
    if args.interactive and chrome:
        interactive(ours, chrome, args.repeat, theirs if os.path.exists(theirs) else None,
                    args.memory_viz_js, args.d3,
                    args.page_timeout, work)
    print(f"\nfiles in {work}")


# The in-page half of the method described at the top: installed before the page's own scripts.
PROBE = r"""
(() => {
  const SEL = %(sel)s, QUIET_FRAMES = 2;
  const b4 = window.__b4 = {};
  function afterFrame(cb) {  // the end of the next frame's main-thread work
    requestAnimationFrame(() => {
      const ch = new MessageChannel();
      ch.port1.onmessage = () => cb(performance.now());
      ch.port2.postMessage(0);
    });
  }
  const ready = new MutationObserver(() => {
    if (b4.built === undefined && document.querySelector(SEL)) {
      b4.built = performance.now();
      ready.disconnect();
      afterFrame(t => { b4.painted = t; });
    }
  });
  ready.observe(document, {childList: true, subtree: true, attributes: true,
                           attributeFilter: ["data-ready"]});
  const start = (kind) => () => {
    const st = b4.step;
    if (!st || st.kind !== kind || st.t0 !== undefined) return;
    st.t0 = performance.now();
    let dirty = false, quiet = 0, first;
    const mo = new MutationObserver(() => {
      if (st.handler === undefined) st.handler = performance.now() - st.t0;
      dirty = true;
    });
    mo.observe(document, {childList: true, subtree: true, attributes: true, characterData: true});
    const frame = () => afterFrame(t => {
      if (first === undefined) first = t;
      if (dirty) { st.last = t; dirty = false; quiet = 0; frame(); }
      else if (++quiet < QUIET_FRAMES) frame();
      else { mo.disconnect(); st.done = (st.last === undefined ? first : st.last) - st.t0; }
    });
    frame();
  };
  window.addEventListener("wheel", start("wheel"), {capture: true, passive: true});
  window.addEventListener("mousemove", start("mousemove"), {capture: true, passive: true});
})();
"""

D3_MODULE = """// written by tensorgc's bench/b4_timeline.py: %(name)s (UMD) served as an ES module
let __b4_event = null;
const __b4_d3 = {};
Object.defineProperty(__b4_d3, "event", {configurable: true, enumerable: true,
  get() { return __b4_event; }, set(v) { __b4_event = v; }});
const define = (deps, factory) => factory(__b4_d3);
define.amd = true;
%(bundle)s
;
%(exports)s
export {__b4_event as event};
export default __b4_d3;
"""


def module_urls(text):
    """The URLs of a script's ES-module imports from the network, in order."""
    return list(dict.fromkeys(re.findall(r"""\b(?:from|import)\s*\(?\s*["'](https?://[^"']+)["']""",
                                         text)))


def d3_modules(browser, bundle_path, urls):
    """{url: ES module source} for d3's URLs: the bundle wrapped for the first, re-exports of it
    for the rest. The export list is the keys the bundle makes, read by running it in a blank
    page first."""
    with open(bundle_path, encoding="utf-8") as f:
        bundle = f.read()
    pg = browser.new_page()
    try:
        pg.set_content("<!DOCTYPE html><html><body></body></html>")
        pg.add_script_tag(content=bundle)
        keys = pg.evaluate("Object.keys(window.d3 || {})")
        version = pg.evaluate("window.d3 && window.d3.version")
    finally:
        pg.close()
    names = [k for k in keys
             if re.fullmatch(r"[A-Za-z_$][\w$]*", k) and k not in ("event", "default")]
    if not names:
        raise SystemExit(f"{bundle_path}: not a d3 bundle (no window.d3 after running it)")
    main, *rest = urls
    out = {main: D3_MODULE % {"name": os.path.basename(bundle_path), "bundle": bundle,
                              "exports": "\n".join(
                                  f"const __b4_{i} = __b4_d3.{k}; export {{__b4_{i} as {k}}};"
                                  for i, k in enumerate(names))}}
    for u in rest:
        out[u] = f'export * from "{main}";\nexport {{default}} from "{main}";\n'
    return out, version


def serve(context, files):
    """Answers the page's requests off the machine from `files` ({url: text}); aborts the rest
    and returns the list of what it aborted."""
    blocked = []

    def handler(route):
        url = route.request.url
        if url in files:
            route.fulfill(status=200, body=files[url],
                          headers={"Content-Type": "text/javascript; charset=utf-8",
                                   "Access-Control-Allow-Origin": "*"})
        elif url.startswith(("http:", "https:")):
            blocked.append(url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", handler)
    return blocked


def open_page(context, path, sel, timeout_s):
    """Loads a page with the probe; returns (page, marks in s, wall s) or (page, None, wall)
    when the timeline was not painted within timeout_s."""
    pg = context.new_page()
    pg.add_init_script(PROBE % {"sel": repr(sel)})
    t0 = time.perf_counter()
    pg.goto("file://" + os.path.abspath(path), wait_until="commit", timeout=timeout_s * 1000)
    try:
        pg.wait_for_function("window.__b4 && window.__b4.painted !== undefined",
                             timeout=timeout_s * 1000, polling=50)
    except Exception:  # noqa: BLE001 (playwright's TimeoutError, or the page crashed)
        return pg, None, time.perf_counter() - t0
    wall = time.perf_counter() - t0
    m = pg.evaluate("""() => {
        const nav = performance.getEntriesByType('navigation')[0];
        return {parsed: nav ? nav.domInteractive : null, built: window.__b4.built,
                painted: window.__b4.painted};
    }""")
    return pg, {k: (v / 1000 if v is not None else None) for k, v in m.items()}, wall


def _step(pg, kind, act):
    """One input step measured by the probe: (to the end of the last frame that changed the
    DOM, the page's handler) in ms."""
    pg.evaluate(f"window.__b4.step = {{kind: '{kind}'}}")
    act()
    pg.wait_for_function("window.__b4.step.done !== undefined", timeout=120_000, polling=20)
    st = pg.evaluate("window.__b4.step")
    return st["done"], st.get("handler")


def wheel_steps(pg, box, steps, on_step=None, height=0.5):
    """`steps` wheel steps at 47% of box's width and `height` of its height; the probe's figures
    for each (ms)."""
    pg.mouse.move(box["x"] + box["width"] * 0.47, box["y"] + box["height"] * height)
    out = []
    for _ in range(steps):
        out.append(_step(pg, "wheel", lambda: pg.mouse.wheel(0, -200)))
        if on_step:
            on_step()
    return out


def pan_steps(pg, box, steps, on_step=None, height=0.5, dx=12):
    """A drag across the plot, `steps` moves of dx pixels with the button held; each move
    measured."""
    x, y = box["x"] + box["width"] * 0.7, box["y"] + box["height"] * height
    pg.mouse.move(x, y)
    pg.mouse.down()
    out = []
    try:
        for k in range(steps):
            out.append(_step(pg, "mousemove", lambda k=k: pg.mouse.move(x - (k + 1) * dx, y)))
            if on_step:
                on_step()
    finally:
        pg.mouse.up()
    return out


def hover_steps(pg, box, steps, on_step=None, heights=(0.55, 0.8, 0.95)):
    """`steps` mouse moves across the plot (no button): each measured."""
    out = []
    for k in range(steps):
        fx = 0.1 + 0.8 * k / max(steps - 1, 1)
        fy = heights[k % len(heights)]
        out.append(_step(pg, "mousemove", lambda fx=fx, fy=fy: pg.mouse.move(
            box["x"] + box["width"] * fx, box["y"] + box["height"] * fy)))
        if on_step:
            on_step()
    return out


def _row(label, xs, fmt):
    xs = [x for x in xs if x is not None]
    if not xs:
        return f"| {label} | – | – | |"
    return (f"| {label} | {statistics.median(xs):{fmt}} | {max(xs):{fmt}} | "
            f"{', '.join(f'{x:{fmt}}' for x in xs) if len(xs) <= 10 else ''} |")


def interactive(page, chrome, repeat, theirs=None, viz_js=None, d3=None, timeout_s=120, work=None):
    """First paint, zoom, pan and hover steps of tensorgc's page in a running chromium
    (playwright), by its own marks and by the probe; with viz_js and d3, memory_viz's page by the
    probe too."""
    from playwright.sync_api import sync_playwright

    steps_n, pan_n, hover_n = 40, 20, 30
    ready, ext, full = [], [], []
    own = {"zoom": [], "pan": [], "hover": []}
    probe = {"zoom": [], "pan": [], "hover": []}
    modes = {}
    mv, mv_probe, mv_note, blocked, d3_version = [], {"zoom": [], "pan": [], "hover": []}, None, [], None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chrome, args=["--no-sandbox"])
        version = browser.version
        try:
            ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
            blocked = serve(ctx, {})
            for i in range(repeat):
                pg, marks, load = open_page(ctx, page, "#tgc-plot[data-ready]", timeout_s)
                if marks is None:
                    raise SystemExit(f"tensorgc's page did not paint within {timeout_s} s")
                ready.append((pg.evaluate("performance.getEntriesByName('tgc-ready')[0].startTime")
                              / 1000, load))
                # the steps start once the rest is decoded (before it, a hover shows nothing)
                pg.wait_for_selector("#tgc-plot[data-full]", timeout=timeout_s * 1000)
                full.append(pg.evaluate("performance.getEntriesByName('tgc-full')[0]"
                                        ".startTime") / 1000)
                ext.append(marks)
                if i == 0 and work:
                    pg.screenshot(path=os.path.join(work, "tensorgc-timeline.png"))
                box = pg.evaluate("tgc.plotBox()")

                def mark(kind, attr):
                    def f():
                        own[kind].append(float(pg.get_attribute("#tgc-plot", attr) or "nan"))
                        if kind == "zoom":
                            modes.setdefault(pg.get_attribute("#tgc-plot", "data-mode"),
                                             []).append(own[kind][-1])
                    return f

                pg.mouse.move(box["x"] + box["width"] * 0.5, box["y"] - 30)  # off the plot
                probe["hover"] += hover_steps(pg, box, hover_n, mark("hover", "data-hover-ms"))
                probe["zoom"] += wheel_steps(pg, box, 10, mark("zoom", "data-zoom-ms"))
                probe["pan"] += pan_steps(pg, box, pan_n, mark("pan", "data-zoom-ms"))
                probe["zoom"] += wheel_steps(pg, box, steps_n - 10, mark("zoom", "data-zoom-ms"))
                probe["hover"] += hover_steps(pg, box, hover_n, mark("hover", "data-hover-ms"))
                if i == 0 and work:
                    pg.screenshot(path=os.path.join(work, "tensorgc-timeline-zoomed.png"))
                pg.close()
            ctx.close()
            if theirs and viz_js and d3:
                with open(theirs, encoding="utf-8", errors="replace") as f:
                    head = f.read(4096)
                viz_url = module_urls(head)
                with open(viz_js, encoding="utf-8") as f:
                    viz_text = f.read()
                d3_urls = module_urls(viz_text)
                if not viz_url or not d3_urls:
                    raise SystemExit("memory_viz's page or MemoryViz.js imports nothing from "
                                     "the network")
                files, d3_version = d3_modules(browser, d3, d3_urls)
                files[viz_url[0]] = viz_text
                ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
                blocked = serve(ctx, files)
                for i in range(repeat):
                    pg, marks, load = open_page(ctx, theirs, "svg polygon", timeout_s)
                    if marks is None:
                        mv_note = f"did not paint within {timeout_s} s"
                        if work:
                            pg.screenshot(path=os.path.join(work, "memory_viz-trace_plot.png"))
                        pg.close()
                        break
                    mv.append((marks, load))
                    if i == 0 and work:
                        pg.screenshot(path=os.path.join(work, "memory_viz-trace_plot.png"))
                    box = pg.locator("svg g[clip-path] > rect").first.bounding_box()
                    # its zoom scales both axes: near the bottom, it stays in what is drawn
                    pg.mouse.move(box["x"] + box["width"] * 0.5, box["y"] - 30)
                    mv_probe["hover"] += hover_steps(pg, box, hover_n, heights=(0.97, 0.9, 0.99))
                    mv_probe["zoom"] += wheel_steps(pg, box, 10, height=0.97)
                    mv_probe["pan"] += pan_steps(pg, box, pan_n, height=0.97)
                    mv_probe["zoom"] += wheel_steps(pg, box, steps_n - 10, height=0.97)
                    mv_probe["hover"] += hover_steps(pg, box, hover_n, heights=(0.97, 0.9, 0.99))
                    if i == 0 and work:
                        pg.screenshot(path=os.path.join(work, "memory_viz-trace_plot-zoomed.png"))
                    pg.close()
                ctx.close()
        finally:
            browser.close()
    print(f"\n| tensorgc page in chromium {version} (playwright) | median | max | runs |")
    print("| --- | ---: | ---: | --- |")
    print(_row("first paint: the page's tgc-ready mark (s)", [r for r, _ in ready], ".2f"))
    print(_row("load to first paint (probe), wall (s)", [w for _, w in ready], ".2f"))
    print(_row("everything decoded, where the steps start: the page's tgc-full mark (s)", full,
               ".2f"))
    for kind, attr in (("zoom", "data-zoom-ms"), ("pan", "data-zoom-ms"), ("hover", "data-hover-ms")):
        print(_row(f"{kind} step, the page's own time ({attr}; ms; {len(own[kind])} steps)",
                   own[kind], ".1f"))
    for mode, ms in sorted(modes.items()):
        print(_row(f"zoom step, {mode} view, the page's own time (ms; {len(ms)} steps)", ms, ".1f"))
    print(_row("first paint, probe: end of the first frame with the timeline (s)",
               [m["painted"] for m in ext], ".2f"))
    for kind in ("zoom", "pan", "hover"):
        print(_row(f"{kind} step, probe: input to the end of the last frame that changed the "
                   f"DOM (ms; {len(probe[kind])} steps)", [d for d, _ in probe[kind]], ".1f"))
        print(_row(f"{kind} step, probe: the page's handler (ms)",
                   [h for _, h in probe[kind]], ".1f"))
    if not (theirs and viz_js and d3):
        return
    print(f"\nmemory_viz's page: {os.path.basename(viz_js)} and d3 {d3_version} "
          f"({os.path.basename(d3)}) served locally; requests aborted: "
          f"{', '.join(sorted(set(blocked))) or 'none'}\n")
    print("| the probe, both pages (chromium, playwright) | tensorgc median | max | "
          "memory_viz median | max |")
    print("| --- | ---: | ---: | ---: | ---: |")

    def both(label, a, b, fmt):
        a = [x for x in a if x is not None]
        b = [x for x in b if x is not None]
        fa = f"{statistics.median(a):{fmt}} | {max(a):{fmt}}" if a else "– | –"
        fb = f"{statistics.median(b):{fmt}} | {max(b):{fmt}}" if b else f"{mv_note or '–'} | –"
        print(f"| {label} | {fa} | {fb} |")

    both("HTML parsed: domInteractive (s)", [m["parsed"] for m in ext],
         [m["parsed"] for m, _ in mv], ".2f")
    both("timeline in the DOM (s)", [m["built"] for m in ext], [m["built"] for m, _ in mv], ".2f")
    both("first paint: end of the frame after it (s)", [m["painted"] for m in ext],
         [m["painted"] for m, _ in mv], ".2f")
    both("load to first paint, wall (s)", [w for _, w in ready], [w for _, w in mv], ".2f")
    for kind, what in (("zoom", f"{steps_n} wheel steps"), ("pan", f"{pan_n} drag moves"),
                       ("hover", f"{2 * hover_n} mouse moves")):
        both(f"{kind} step: input to the last frame that changed the DOM (ms; {what} x runs)",
             [d for d, _ in probe[kind]], [d for d, _ in mv_probe[kind]], ".1f")
        both(f"{kind} step: the page's handler (ms)", [h for _, h in probe[kind]],
             [h for _, h in mv_probe[kind]], ".1f")


if __name__ == "__main__":
    main()
