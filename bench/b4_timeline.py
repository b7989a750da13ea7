#!/usr/bin/env python
"""B4 -- the Active Memory Timeline of a large snapshot: tensorgc vs torch's memory_viz.

Input: ``--snapshot PATH``, or a synthetic trace of ``--events`` entries (default 1M: allocations
of 0.25-16 MB from a few call sites, about half of them freed, a few OOM events, one distinct
frame dict per entry as in real dumps), or with ``--record`` (CUDA) a real one recorded from a
synthetic workload with tensorgc.record_memory_history(max_entries=events).

Measured, each in a fresh process (``--repeat`` times, median):
* ``tensorgc timeline SNAP -o out.html`` (load with the restricted unpickler, C replay, SVG);
* ``python -m torch.cuda._memory_viz trace_plot SNAP -o out.html`` (plain pickle.load);
* page size, and whether the page needs the network (an external script or module URL);
* with ``--categories``: the same trace with tensorgc_categories marks, so the
  replay classifies every allocation and the page draws the categories chart;
* with ``--chromium``: wall time of ``chromium --headless --screenshot`` of each page, and of
  an empty page as the browser's own start-up baseline;
* with ``--interactive`` (playwright, driving the same chromium): tensorgc's page loaded in a
  running browser, its own performance marks read: first paint (the "tgc-ready" mark: data
  parsed, axes drawn) and each zoom step (the page's own time for one wheel step, as it writes
  it to data-zoom-ms), over zoom levels from the whole trace down to the detail view.

    python bench/b4_timeline.py --events 1000000 --repeat 3 --chromium
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


def synthetic(n, seed=0):
    rnd = random.Random(seed)
    sites = [("/w/model.py", 10, "forward"), ("/w/train.py", 42, "step"),
             ("/w/data.py", 7, "load"), ("/w/opt.py", 88, "adam_step"), ("/w/loss.py", 3, "ce")]
    trace, live, addr = [], [], 0x7F0000000000
    for i in range(n):
        if i and i % (n // 4 + 1) == 0:
            trace.append({"action": "oom", "addr": 0, "size": 0, "stream": 0, "time_us": i,
                          "device_free": 0, "frames": []})
            continue
        if live and rnd.random() < 0.5:
            a, s = live.pop(rnd.randrange(len(live)))
            f = rnd.choice(sites)
            trace.append({"action": "free_requested", "addr": a, "size": s, "stream": 0,
                          "time_us": i, "frames": [{"filename": f[0], "line": f[1], "name": f[2]}]})
        else:
            s = rnd.choice((1, 2, 4, 8, 16, 64)) * MB // 4
            addr += 0x4000000
            f = rnd.choice(sites)
            live.append((addr, s))
            trace.append({"action": "alloc", "addr": addr, "size": s, "stream": 0, "time_us": i,
                          "frames": [{"filename": f[0], "line": f[1], "name": f[2]}]})
    return {"segments": [], "device_traces": [trace]}


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
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--chromium", action="store_true")
    p.add_argument("--interactive", action="store_true",
                   help="first paint and zoom steps of tensorgc's page (playwright)")
    p.add_argument("--categories", action="store_true",
                   help="add tensorgc_categories marks (spans, grad marks, names) to the trace")
    p.add_argument("--keep", help="directory to keep the snapshot and pages in")
    args = p.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="tensorgc-b4-")
    os.makedirs(work, exist_ok=True)
    snap_path = args.snapshot
    source = f"file {args.snapshot}"
    if snap_path is None:
        t0 = time.perf_counter()
        snap = record(args.events) if args.record else synthetic(args.events)
        if args.categories:
            snap = with_categories(snap)
        source = ("recorded on CUDA" if args.record else "synthetic") + \
            (" with categories" if args.categories else "") + \
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
        interactive(ours, chrome, args.repeat)
    print(f"\nfiles in {work}")


def interactive(page, chrome, repeat):
    """First paint and zoom steps of tensorgc's page in a running chromium (playwright)."""
    from playwright.sync_api import sync_playwright

    ready, steps, modes = [], [], {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chrome, args=["--no-sandbox"])
        try:
            for _ in range(repeat):
                pg = browser.new_page(viewport={"width": 1500, "height": 900})
                t0 = time.perf_counter()
                pg.goto("file://" + os.path.abspath(page))
                pg.wait_for_selector("#tgc-svg[data-ready]", timeout=120_000)
                load = time.perf_counter() - t0
                ready.append((pg.evaluate("performance.getEntriesByName('tgc-ready')[0].startTime")
                              / 1000, load))
                box = pg.locator("#tgc-svg rect.bg").bounding_box()
                pg.mouse.move(box["x"] + box["width"] * 0.47, box["y"] + box["height"] / 2)
                for _ in range(40):  # 0.8x per step: the whole trace down to a few events
                    pg.mouse.wheel(0, -200)
                    pg.wait_for_function("document.getElementById('tgc-svg')"
                                         ".getAttribute('data-zoom-ms') !== null")
                    ms = float(pg.get_attribute("#tgc-svg", "data-zoom-ms"))
                    mode = pg.get_attribute("#tgc-svg", "data-mode")
                    steps.append(ms)
                    modes.setdefault(mode, []).append(ms)
                pg.close()
        finally:
            browser.close()
    print("\n| tensorgc page in chromium (playwright) | median | max | runs |")
    print("| --- | ---: | ---: | --- |")
    fp = [r for r, _ in ready]
    print(f"| first paint: the page's tgc-ready mark (s) | {statistics.median(fp):.2f} | "
          f"{max(fp):.2f} | {', '.join(f'{x:.2f}' for x in fp)} |")
    ld = [w for _, w in ready]
    print(f"| load to ready, wall (s) | {statistics.median(ld):.2f} | {max(ld):.2f} | "
          f"{', '.join(f'{x:.2f}' for x in ld)} |")
    for mode, ms in sorted(modes.items()):
        print(f"| zoom step, {mode} view (ms; {len(ms)} steps) | {statistics.median(ms):.1f} | "
              f"{max(ms):.1f} | |")


if __name__ == "__main__":
    main()
