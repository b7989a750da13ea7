#!/usr/bin/env python
"""B6 -- the page of one report for adversarial garbage, and RSS over many rendered reports.

Part 1, page time and size.  For each shape below (every one holds CPU tensors) a fresh
interpreter (``python b6_pages.py --worker <json>``, see _common) imports torch and the
detector, freezes what is alive (``gc.freeze()``, so that each collection only walks the shape),
makes and collects one small tensor cycle first (so the render worker is started and torch's
code paths are warm: the measurement is of the layout, not of ``posix_spawn``), builds the shape
as garbage and runs ONE ``gc.collect()`` (+ a few no-op calls, ``_common.settle``).  Measured:

* ``page ms``: from just before ``gc.collect()`` to the moment the callback holds the finished
  page -- tensorgc: ``observe_cycles(cb, device="cpu")``, ``cb`` reads ``report.html`` (text,
  table and the SVG laid out by Graphviz in the render worker); torch: its detector as
  ``_common.install_torch_detector`` installs it on CPU (``observe_garbage`` + ``create_graph`` +
  ``to_html``, what ``observe_tensor_cycles`` does minus the CUDA-only allocation context), whose
  callback gets the page.  torch's page embeds the DOT source and lays it out in the browser
  (viz.js from a CDN), so its time has no layout in it; tensorgc's has.  The whole collection
  (freeing included) is in the JSON as ``collect_s``.
* ``page KB``: the page's UTF-8 bytes (summed if a collection gives several pages).
* ``render killed?``: whether ``_renderer_stats()["killed"]`` moved during the collection
  (a layout overran ``set_render_timeout``'s budget and the worker was SIGKILLed).

tensorgc: ``--repeat`` fresh processes per shape, median.  torch: ``--torch-repeat`` (1) per
shape, each capped at ``--torch-timeout`` seconds (the worker stops itself at the cap; the parent
kills it 15 s later): "> T s (stopped)".

Part 2, RSS over many rendered reports (one process each): a loop that makes one small tensor
cycle (``a.b = b; b.a = a; a.t = torch.zeros(4)``), runs ``gc.collect()``, and reads the page
(tensorgc: ``report.html`` in the ``observe_cycles`` callback; torch: the html its callback
gets).  RSS (``/proc/self/statm``) after ``--rss-warmup`` (200) reports and at the end; growth in
MB (target for tensorgc: < 2 MB over 10,000) and time per report.  For tensorgc also the render
worker's RSS (its pid from ``_renderer_stats()``, sampled every 8 reports; the worker is retired
every 256 layouts, so the max over all workers seen is reported).  torch: ``--torch-rss-reports``
(1,000).

    python bench/b6_pages.py --json /tmp/b6.json
    python bench/b6_pages.py --quick            # small sizes, 1 repeat, RSS loop of 1,000
    python bench/b6_pages.py --quick --no-torch # tensorgc only (tests/test_bench_pages.py)

Markdown on stdout, progress on stderr, raw numbers with ``--json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

# name -> (description, full size, quick size)
SHAPES = {
    "ring-classes-300": ("ring of {n:,} objects, each of its own class", 300, 50),
    "ring-classes-1000": ("ring of {n:,} objects, each of its own class", 1000, 100),
    "ring-plain": ("ring of {n:,} plain objects", 10_000, 1_000),
    "fan": ("fan of {n:,} spokes pointing back at a hub", 5_000, 500),
    "mesh": ("mesh of {n:,} objects, each referring to all others", 150, 60),
    # not in the brief: found by a sweep (n = 10..150), the mesh size whose drawing (61 objects,
    # 450 references: under the 300-node bound, at the 450-reference one) Graphviz finds hardest
    "mesh-30": ("mesh of {n:,} objects, each referring to all others", 30, 30),
    "deep-chain": ("chain of {n:,} links from a 2-cycle to its tensor", 20_000, 2_000),
    "many-shapes": ("{n:,} distinct leak shapes", 1_500, 150),
    "huge-attr-name": ("attribute name of {mb} MB", 10 << 20, 1 << 20),
    "hostile-strings": ("{n} hostile strings (names, keys, reprs)", 7, 7),
}

HOSTILE = [
    '</script><script>alert(1)</script>',
    '"]; evil -> x [label="',
    "<img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "\u202eevil\u202c\x00\x1b[31m",
    "\ud800 lone surrogate",
    "\\N\\G\\l&amp;&#60;",
]

MB = 1 << 20
TORCH_NODE = re.compile(r"\\n\d+ \[label=")
TORCH_EDGE = re.compile(r"\\n\d+ -> \d+ \[label = ")


def describe(shape: str, n: int) -> str:
    return SHAPES[shape][0].format(n=n, mb=f"{n / MB:g}")


# --------------------------------------------------------------------------- shapes (worker)

def _T(torch):
    return lambda *shape: torch.zeros(*(shape or (4,)))


def build_shape(shape: str, n: int, torch) -> None:
    """Make ``shape`` of size ``n`` and drop every reference to it: garbage for the next collection."""
    T = _T(torch)

    def ring(objs):
        for a, b in zip(objs, objs[1:] + objs[:1]):
            a.next = b
        objs[0].t = T(4)

    if shape.startswith("ring-classes"):
        ring([type(f"C{i}", (), {})() for i in range(n)])
    elif shape == "ring-plain":
        Plain = type("Plain", (), {})
        ring([Plain() for _ in range(n)])
    elif shape == "fan":
        Hub, Spoke = type("Hub", (), {}), type("Spoke", (), {})
        hub = Hub()
        hub.spokes = []
        for _ in range(n):
            s = Spoke()
            s.hub = hub
            s.t = T(2)
            hub.spokes.append(s)
    elif shape.startswith("mesh"):
        Node = type("Node", (), {})
        nodes = [Node() for _ in range(n)]
        for x in nodes:
            x.peers = list(nodes)
        nodes[0].t = T(4)
    elif shape == "deep-chain":
        Link = type("Link", (), {})
        a, b = Link(), Link()
        a.b, b.a = b, a
        cur = b
        for _ in range(n):
            nxt = Link()
            cur.down = nxt
            cur = nxt
        cur.t = T(4)
    elif shape == "many-shapes":
        for i in range(n):
            cls = type(f"Shape{i}", (), {})
            x, y = cls(), cls()
            x.y, y.x = y, x
            setattr(x, "t" * (1 + i % 7), T(1))
            y.depth = [[x]] * (i % 5)
    elif shape == "huge-attr-name":
        Node = type("Node", (), {})
        a, b = Node(), Node()
        setattr(a, "x" * n, b)
        b.a, b.t = a, T(4)
    elif shape == "hostile-strings":
        for s in HOSTILE[:n]:
            name = "Evil" + s.replace("\x00", "")
            if "\ud800" in name:
                name = "Evil"  # a class name must encode to UTF-8; attributes and reprs need not
            Evil = type(name, (), {"__repr__": (lambda s: lambda self: s)(s)})
            a, b = Evil(), Evil()
            setattr(a, s, b)
            b.link = {s: a}
            b.t = T(4)
    else:
        raise SystemExit(f"unknown shape {shape!r}")


class Pair:
    pass


def small_cycle(torch) -> None:
    a, b = Pair(), Pair()
    a.b, b.a = b, a
    a.t = torch.zeros(4)


def page_bytes(html: str) -> int:
    return len(html.encode("utf-8", "surrogatepass"))


def rss_bytes(pid="self") -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------- worker side

def install(detector: str, pages: list, torch):
    """Install ``detector``; each finished page is appended to ``pages`` as (perf_counter, bytes, info)."""
    if detector == "tensorgc":
        tensorgc = C.import_tensorgc()

        def cb(report):
            try:
                t = time.perf_counter()
                html = report.html
                done = time.perf_counter()
                pages.append((done, page_bytes(html), {
                    "html_s": done - t, "objects": report.objects, "garbage": report.garbage,
                    "groups": len(report.groups), "svg": "<svg" in html,
                    "no_picture": "No picture" in html}))
            except Exception as exc:  # noqa: BLE001 -- recorded, never raised into gc
                pages.append((time.perf_counter(), 0, {"error": repr(exc)}))

        return tensorgc.observe_cycles(cb, device="cpu"), "tensorgc.observe_cycles(cb, device='cpu'), cb reads report.html"
    if detector == "torch-dicts":
        return install_torch_with_dicts(cb_torch(pages)), ("torch observe_garbage + create_graph/to_html "
                                                           "(cpu), instance __dict__s added to the objects")
    if detector == "torch":
        return C.install_torch_detector("cpu", cb_torch(pages))
    raise SystemExit(f"unknown detector {detector!r}")


def cb_torch(pages: list):
    def cb(html):
        done = time.perf_counter()
        # the DOT is embedded as a Python repr: lines are joined by a literal backslash-n
        pages.append((done, page_bytes(html), {"nodes": len(TORCH_NODE.findall(html)),
                                               "edges": len(TORCH_EDGE.findall(html))}))
    return cb


def install_torch_with_dicts(callback):
    """torch's CPU detector (as _common installs it), with the garbage's instance dicts added.

    On Python >= 3.11 an instance's attributes live in the object (a "managed dict") until
    something asks for ``__dict__``: the collector's garbage has no dict objects for them.
    torch's ``create_graph`` asks (``annotated_references`` reads ``obj.__dict__``), which makes
    the dict, and ``gc.get_referents(obj)`` then returns that new dict, not in the garbage: the
    edge is dropped, so a plain ``a.b = b; b.a = a; a.t = tensor`` is drawn as a lone tensor.
    Adding those dicts to the objects is what torch would have seen on Python <= 3.10: this
    variant measures torch's method on the graph it means to draw.
    """
    import torch
    from torch.utils.viz import _cycles

    fake = getattr(getattr(torch, "_subclasses", None), "FakeTensor", ())

    def is_cpu_tensor(obj):
        return isinstance(obj, torch.Tensor) and obj.device.type == "cpu" and not isinstance(obj, fake)

    def observer(garbage):
        if not garbage or not any(is_cpu_tensor(o) for o in garbage):
            return
        objs = list(garbage)
        seen = {id(o) for o in objs}
        for o in garbage:
            if isinstance(o, type):
                continue
            try:
                d = object.__getattribute__(o, "__dict__")
            except Exception:  # noqa: BLE001 -- no __dict__
                continue
            if type(d) is dict and id(d) not in seen:
                seen.add(id(d))
                objs.append(d)
        callback(_cycles.to_html(_cycles.create_graph(objs, context=lambda obj: None, filter=is_cpu_tensor)))

    return _cycles.observe_garbage(observer)


def renderer_stats() -> dict:
    try:
        tensorgc = C.import_tensorgc()
        return dict(tensorgc._tensorgc_testing._renderer_stats())
    except Exception:  # noqa: BLE001 -- torch-only worker, or no such stats
        return {}


def prepare(detector: str):
    import torch

    gc.disable()
    pages: list = []
    remove, desc = install(detector, pages, torch)
    small_cycle(torch)  # warm-up: starts the render worker, runs torch's page code once
    gc.collect()
    C.settle()
    gc.collect()
    gc.freeze()  # torch & co. out of the collections' way
    del pages[:]
    return torch, pages, remove, desc


def worker_page(cfg: dict) -> None:
    detector, shape, n = cfg["detector"], cfg["shape"], cfg["n"]
    torch, pages, remove, desc = prepare(detector)
    build_shape(shape, n, torch)
    extra = {"detector": detector, "shape": shape, "n": n, "desc": desc}
    before = renderer_stats() if detector == "tensorgc" else {}
    t0 = C.arm_timeout(cfg["timeout"], [0], 0, extra)
    collected = gc.collect()
    C.settle()
    collect_s = time.perf_counter() - t0
    C.disarm_timeout()
    after = renderer_stats() if detector == "tensorgc" else {}
    result = {**extra, "timed_out": False, "collected": collected, "collect_s": collect_s,
              "pages": len(pages), "page_bytes": sum(p[1] for p in pages),
              "seconds": (max(p[0] for p in pages) - t0) if pages else None,
              "info": pages[0][2] if pages else None,
              "killed": (after.get("killed", 0) - before.get("killed", 0)) if before else None,
              "renders": (after.get("renders", 0) - before.get("renders", 0)) if before else None}
    if not pages:
        result["error"] = "no page"
    remove()
    C.emit_result(result)


def worker_rss(cfg: dict) -> None:
    detector, n, warmup = cfg["detector"], cfg["n"], cfg["warmup"]
    torch, pages, remove, desc = prepare(detector)
    count = [0, 0]  # pages seen, bytes of the last one

    def on_page():
        count[0] += len(pages)
        if pages:
            count[1] = pages[-1][1]
        del pages[:]

    stats0 = renderer_stats() if detector == "tensorgc" else {}
    total = warmup + n
    progress = [0]
    extra = {"detector": detector, "n": n, "warmup": warmup, "desc": desc}
    worker_rss_max, worker_pids = 0, set()
    rss0 = t_warm = None
    start = C.arm_timeout(cfg["timeout"], progress, total, extra)
    for i in range(total):
        small_cycle(torch)
        gc.collect()
        C.settle()
        on_page()
        progress[0] = i + 1
        if i == warmup - 1:
            rss0, t_warm = rss_bytes(), time.perf_counter()
        if detector == "tensorgc" and i % 8 == 0:
            pid = renderer_stats().get("pid")
            if pid:
                worker_pids.add(pid)
                r = rss_bytes(pid)
                if r:
                    worker_rss_max = max(worker_rss_max, r)
    end = time.perf_counter()
    C.disarm_timeout()
    rss1 = rss_bytes()
    stats1 = renderer_stats() if detector == "tensorgc" else {}
    if t_warm is None:
        rss0, t_warm = rss1, end
    result = {**extra, "timed_out": False, "seconds": end - start, "reports": count[0],
              "page_bytes": count[1], "rss_after_warmup": rss0, "rss_end": rss1,
              "rss_growth_mb": (rss1 - rss0) / MB if rss0 and rss1 else None,
              "per_report_s": (end - t_warm) / n if n else None}
    if detector == "tensorgc":
        result.update({"worker_rss_max": worker_rss_max or None, "worker_pids_seen": len(worker_pids),
                       "renderer_before": stats0, "renderer_after": stats1})
    remove()
    C.emit_result(result)


# --------------------------------------------------------------------------- parent side

def fmt_ms(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "error"
    return f"{1000 * v:,.1f}"


def fmt_kb(b) -> str:
    return "error" if not b else f"{b / 1024:,.1f}"


def fmt_failed(run: dict, cap: float) -> str | None:
    """How a run failed, or None when it has a page."""
    if run.get("timed_out"):
        return f"> {cap:g} s (stopped)"
    rc = run.get("returncode")
    if rc is not None and rc < 0:
        return f"crashed (signal {-rc})"
    if run.get("seconds") is None:
        return f"error (exit {rc})" if rc else "error"
    return None


def summarize(runs: list) -> dict:
    ok = [r for r in runs if fmt_failed(r, 0) is None]
    vals = [r["seconds"] for r in ok]
    return {"median_page_s": statistics.median(vals) if vals else None,
            "median_collect_s": statistics.median([r["collect_s"] for r in ok]) if ok else None,
            "page_bytes": max((r.get("page_bytes") or 0) for r in ok) if ok else None,
            "killed_runs": sum(1 for r in ok if r.get("killed")),
            "ok_runs": len(ok), "runs": runs}


def run_pages(args, script, shapes) -> list:
    rows = []
    for shape in shapes:
        n = SHAPES[shape][2] if args.quick else SHAPES[shape][1]
        row = {"shape": shape, "n": n, "desc": describe(shape, n)}
        runs = []
        for r in range(args.repeat):
            cfg = {"mode": "page", "detector": "tensorgc", "shape": shape, "n": n, "timeout": args.timeout}
            res = C.run_worker(script, cfg, args.timeout, grace=60.0)
            runs.append(res)
            C.log(f"[B6] {shape:<18} tensorgc run {r + 1}/{args.repeat}: "
                  f"{fmt_failed(res, args.timeout) or fmt_ms(res['seconds']) + ' ms'} "
                  f"{fmt_kb(res.get('page_bytes'))} KB killed={res.get('killed')}")
            if res.get("stderr_tail"):
                C.log("     stderr: " + res["stderr_tail"].strip().replace("\n", "\n     "))
        row["tensorgc"] = summarize(runs)
        for variant in ([] if args.no_torch else args.torch_variants):
            truns = []
            for r in range(args.torch_repeat):
                cfg = {"mode": "page", "detector": variant, "shape": shape, "n": n, "timeout": args.torch_timeout}
                res = C.run_worker(script, cfg, args.torch_timeout, grace=15.0)
                truns.append(res)
                C.log(f"[B6] {shape:<18} {variant:<11} run {r + 1}/{args.torch_repeat}: "
                      f"{fmt_failed(res, args.torch_timeout) or fmt_ms(res['seconds']) + ' ms'} "
                      f"{fmt_kb(res.get('page_bytes'))} KB {res.get('info') or ''}")
                if res.get("stderr_tail"):
                    C.log("     stderr: " + res["stderr_tail"].strip().replace("\n", "\n     "))
                if fmt_failed(res, 0):
                    break  # a stopped or crashed shape is not run again
            row[variant] = summarize(truns)
        rows.append(row)
    return rows


def torch_cell(t: dict | None, cap: float, what: str) -> str:
    if t is None:
        return "not run"
    if not t["ok_runs"]:
        return fmt_failed(t["runs"][-1], cap) or "error"
    return fmt_ms(t["median_page_s"]) if what == "ms" else fmt_kb(t["page_bytes"])


def first_info(t: dict | None) -> dict:
    for r in (t or {}).get("runs", []):
        if fmt_failed(r, 0) is None and r.get("info"):
            return r["info"]
    return {}


def run_rss(args, script) -> dict:
    out = {}
    jobs = [("tensorgc", args.rss_reports)]
    if not args.no_torch and args.torch_rss_reports > 0:
        jobs.append(("torch", args.torch_rss_reports))
    for det, n in jobs:
        cfg = {"mode": "rss", "detector": det, "n": n, "warmup": args.rss_warmup, "timeout": args.rss_timeout}
        res = C.run_worker(script, cfg, args.rss_timeout, grace=60.0)
        out[det] = res
        C.log(f"[B6] rss {det}: {fmt_failed(res, args.rss_timeout) or 'ok'} reports={res.get('reports')} "
              f"growth={res.get('rss_growth_mb')} MB per_report={res.get('per_report_s')}")
        if res.get("stderr_tail"):
            C.log("     stderr: " + res["stderr_tail"].strip().replace("\n", "\n     "))
    return out


def print_rss(args, rss: dict) -> None:
    print(f"#### RSS over rendered reports (one small tensor cycle per gc.collect(), page read each time; "
          f"RSS after {args.rss_warmup} warm-up reports and at the end)")
    print()
    print("| detector | reports measured | RSS after warm-up (MB) | RSS at end (MB) | growth (MB) | "
          "ms per report | page KB | render worker RSS, max (MB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    notes = []
    for det, res in rss.items():
        failed = fmt_failed(res, args.rss_timeout)
        if failed:
            p = res.get("progress")
            done = f" ({100 * p:.0f}% done)" if p is not None else ""
            print(f"| {det} | {failed}{done} | - | - | - | - | - | - |")
            notes.append(f"{det}: the loop did not finish: {failed}{done}.")
            continue
        wmax = res.get("worker_rss_max")
        print(f"| {det} | {res['n']:,} | {res['rss_after_warmup'] / MB:.1f} | {res['rss_end'] / MB:.1f} | "
              f"{res['rss_growth_mb']:+.2f} | {1000 * res['per_report_s']:.2f} | {fmt_kb(res['page_bytes'])} | "
              f"{f'{wmax / MB:.1f}' if wmax else '-'} |")
        if det == "tensorgc":
            b, a = res.get("renderer_before") or {}, res.get("renderer_after") or {}
            outcome = "meets" if res["rss_growth_mb"] < 2 else "MISSES"
            notes.append(f"tensorgc: growth {res['rss_growth_mb']:+.2f} MB over {res['n']:,} reports "
                         f"({outcome} the < 2 MB target); render worker: {res.get('worker_pids_seen')} pids seen, "
                         f"{a.get('retired', 0) - b.get('retired', 0)} retired, "
                         f"{a.get('killed', 0) - b.get('killed', 0)} killed, "
                         f"{a.get('renders', 0) - b.get('renders', 0)} layouts.")
            if res["reports"] != res["n"] + res["warmup"]:
                notes.append(f"tensorgc: {res['reports']} reports for {res['n'] + res['warmup']} collections!")
        else:
            g = res["rss_growth_mb"]
            per_kb = 1024 * g / res["n"]
            leak = (f"torch LEAKS: {g:+.2f} MB over {res['n']:,} reports ({per_kb:.2f} KB per report)"
                    if g >= 2 else f"torch: growth {g:+.2f} MB over {res['n']:,} reports (no leak seen)")
            notes.append(leak + f"; {1000 * res['per_report_s']:.2f} ms per report.")
    if "torch" not in rss:
        notes.append("torch: not run (--no-torch or --torch-rss-reports 0).")
    print()
    for line in notes:
        print(f"- {line}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="B6: page time/size for adversarial garbage, and RSS over many rendered reports.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--repeat", type=int, default=5, help="tensorgc runs per shape, each a fresh subprocess")
    p.add_argument("--torch-repeat", type=int, default=1, help="torch runs per shape")
    p.add_argument("--torch-timeout", type=float, default=60.0, help="cap (s) on one torch page")
    p.add_argument("--timeout", type=float, default=120.0, help="cap (s) on one tensorgc page")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset")
    p.add_argument("--rss-reports", type=int, default=argparse.SUPPRESS,
                   help="tensorgc reports in the RSS loop (10,000; --quick: 1,000)")
    p.add_argument("--torch-rss-reports", type=int, default=1_000, help="torch reports in the RSS loop (0: skip)")
    p.add_argument("--rss-warmup", type=int, default=200, help="reports before the first RSS reading")
    p.add_argument("--rss-timeout", type=float, default=300.0, help="cap (s) on one RSS loop")
    p.add_argument("--no-torch", action="store_true", help="tensorgc only")
    p.add_argument("--torch-variants", default="torch,torch-dicts",
                   help="torch: its detector as shipped; torch-dicts: the same with the garbage's instance "
                        "__dict__s added to its objects (the graph it draws on Python <= 3.10)")
    p.add_argument("--no-rss", action="store_true", help="skip the RSS loops")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: small shapes, --repeat 1, RSS loop of 1,000 unless --rss-reports says "
                        "(torch's 200)")
    p.add_argument("--json", default=None, help="write all results as JSON to this path")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.torch_variants = [v for v in args.torch_variants.split(",") if v]
    for v in args.torch_variants:
        if v not in ("torch", "torch-dicts"):
            p.error(f"unknown torch variant {v!r}")
    if args.quick:
        args.repeat, args.torch_repeat = 1, 1
        args.torch_rss_reports = min(args.torch_rss_reports, 200)
    if not hasattr(args, "rss_reports"):
        args.rss_reports = 1_000 if args.quick else 10_000
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        cfg = json.loads(args.worker)
        (worker_page if cfg["mode"] == "page" else worker_rss)(cfg)
        return 0

    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            raise SystemExit(f"unknown shape {s!r}; choose from {', '.join(SHAPES)}")
    env = C.environment("cpu")
    script = os.path.abspath(__file__)
    C.log(f"[B6] shapes={shapes} repeat={args.repeat} quick={args.quick} torch={not args.no_torch} "
          f"torch_timeout={args.torch_timeout:g}s")
    t_all = time.perf_counter()
    load0 = os.getloadavg()
    rows = run_pages(args, script, shapes)
    rss = {} if args.no_rss else run_rss(args, script)

    print(f"### B6 report pages for adversarial garbage, device=cpu{' (--quick sizes)' if args.quick else ''}")
    print()
    print(f"python {env['python']}, torch {env.get('torch')}, {env.get('cpu_count')} CPUs; tensorgc: median of "
          f"{args.repeat} fresh processes per shape, render budget 2 s; torch: {args.torch_repeat} run(s), "
          f"cap {args.torch_timeout:g} s. Page ms = gc.collect() start to the finished page in the callback. "
          f"torch's page has no layout (viz.js in the browser, from a CDN); tensorgc's includes Graphviz's. "
          f"\"torch + dicts\": torch's detector with the garbage's instance __dict__s added to its objects "
          f"(on Python >= 3.11 torch's create_graph drops every edge through an instance's attributes: "
          f"it materializes __dict__, a new object outside the garbage); the graph it draws on Python <= 3.10.")
    print()
    variants = [] if args.no_torch else args.torch_variants
    names = {"torch": "torch", "torch-dicts": "torch + dicts"}
    head = ["shape", "tensorgc page ms (median)", "tensorgc page KB", "render killed?"]
    for v in variants:
        head += [f"{names[v]} page ms", f"{names[v]} page KB"]
    head.append("drawn: tensorgc objects" + "".join(f" / {names[v]} nodes" for v in variants))
    print("| " + " | ".join(head) + " |")
    print("| --- | ---: | ---: | --- |" + " ---: | ---: |" * len(variants) + " --- |")
    notes = []
    for row in rows:
        t = row["tensorgc"]
        if t["ok_runs"]:
            killed = f"yes ({t['killed_runs']} of {t['ok_runs']} runs)" if t["killed_runs"] else "no"
        else:
            killed = "-"
        tg_ms = fmt_ms(t["median_page_s"]) if t["ok_runs"] else (fmt_failed(t["runs"][-1], args.timeout) or "error")
        cells = [row["desc"], tg_ms, fmt_kb(t["page_bytes"]) if t["ok_runs"] else "-", killed]
        drawn = [str(first_info(t).get("objects", "-"))]
        for v in variants:
            tt = row.get(v)
            cells += [torch_cell(tt, args.torch_timeout, "ms"), torch_cell(tt, args.torch_timeout, "kb")]
            i = first_info(tt)
            drawn.append(f"{i['nodes']:,}" if "nodes" in i else "-")
        cells.append(" / ".join(drawn))
        print("| " + " | ".join(cells) + " |")
        infos = [r.get("info") or {} for r in t["runs"] if fmt_failed(r, 0) is None]
        if any(i.get("no_picture") or not i.get("svg", True) for i in infos):
            notes.append(f"{row['shape']}: tensorgc's page has no picture (it says why).")
        if any(i.get("error") for i in infos):
            notes.append(f"{row['shape']}: tensorgc callback error {next(i['error'] for i in infos if i.get('error'))}.")
        if t["ok_runs"] < len(t["runs"]):
            notes.append(f"{row['shape']}: {len(t['runs']) - t['ok_runs']} tensorgc run(s) failed.")
    print()
    for line in notes:
        print(f"- {line}")
    if notes:
        print()
    if rss:
        print_rss(args, rss)
        print()
    load1 = os.getloadavg()
    env["loadavg_start"], env["loadavg_end"] = load0, load1
    print(f"(total wall {time.perf_counter() - t_all:.0f} s; 1-min load average {load0[0]:.2f} at the start, "
          f"{load1[0]:.2f} at the end, on {os.cpu_count()} CPUs)")
    sys.stdout.flush()
    C.write_json(args.json, {"benchmark": "B6", "config": {k: v for k, v in vars(args).items() if k != "worker"},
                             "env": env, "shapes": rows, "rss": rss})
    return 0


if __name__ == "__main__":
    sys.exit(main())
