#!/usr/bin/env python
"""B2 -- cost of ONE collection that finds tensor cycles and reports them.

Setup (per run, in a fresh interpreter, with ``gc.disable()`` so that nothing else
collects): a heap of ``--heap`` (1,000,000) live gc-tracked objects, pushed to the
oldest generation; the detector is installed; then ``--cycles`` (100) tensor cycles
are made garbage (``a.other = b; b.other = a; a.tensor = <tensor of the device>``;
``--extra-pairs`` tensor-free pairs can be added).  The measured section is ONE
explicit ``gc.collect()`` (plus a few no-op calls, see below), timed with
``time.perf_counter``.

Modes (each run in its own subprocess, ``--repeat`` times, median reported):

* ``plain``         -- no detector: the bare collection of the same garbage.
* ``tensorgc-text`` -- ``tensorgc.observe_cycles(cb, device=<dev>)``; ``cb`` reads
  ``report.text``.
* ``tensorgc-html`` -- same, ``cb`` reads ``report.html`` (so graph layout/rendering,
  i.e. Graphviz, is included).
* ``torch``         -- PyTorch's detector.  On CUDA exactly
  ``torch.utils.viz._cycles.observe_tensor_cycles(cb)``; on CPU (where that function
  cannot work: it is CUDA-only) torch's ``observe_garbage`` with an observer doing what
  ``observe_tensor_cycles``'s does for the right device (``create_graph`` +
  ``to_html`` when the garbage holds a tensor of the device).  torch's HTML embeds the
  DOT source and lays it out in the browser with viz.js from a CDN, so its "render"
  costs nothing here; ``tensorgc-text`` is the closer comparison for that part.
  torch's observer does its work from a ``sys.setprofile`` hook on the calls that
  follow the collection; the measured section ends with a few no-op Python calls so
  that this deferred work (its extra full collection included) is inside it.

Each run is capped by ``--timeout`` (``>T s``).  After each run the worker checks
that every tensor of the garbage was freed (``freed`` column).

Output: markdown table on stdout (median, ratio vs ``plain`` of the same invocation,
every run), JSON to ``--json``, progress on stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import weakref

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

MODES = ("plain", "tensorgc-text", "tensorgc-html", "torch")


class Node:
    def __init__(self):
        self.other = None
        self.tensor = None


def worker(cfg: dict) -> None:
    import torch

    device = cfg["device"]
    mode = cfg["mode"]
    numel = cfg["tensor_numel"]
    gc.disable()
    heap = C.build_heap(cfg["heap"])
    torch.ones(numel, device=device)  # first device allocation outside the measurement
    gc.collect()
    C.settle()
    tracked = len(gc.get_objects())  # heap + everything torch & co. keep alive

    stats = {"reports": 0, "report_tensors": 0, "report_nbytes": 0, "report_garbage": None,
             "html_chars": 0, "text_chars": 0, "callback_errors": 0, "first_error": None, "groups": None}

    def tensorgc_cb(report):
        try:
            stats["reports"] += 1
            stats["report_tensors"] += len(report.tensors)
            stats["report_nbytes"] += report.nbytes
            stats["report_garbage"] = report.garbage
            stats["groups"] = [(g["count"], g["cycle"]) for g in report.groups]
            if mode == "tensorgc-html":
                stats["html_chars"] += len(report.html)
            else:
                stats["text_chars"] += len(report.text)
        except Exception as exc:  # noqa: BLE001
            stats["callback_errors"] += 1
            stats["first_error"] = stats["first_error"] or repr(exc)

    def torch_cb(html):
        stats["reports"] += 1
        stats["html_chars"] += len(html)

    remove = None
    detector = "none"
    if mode.startswith("tensorgc"):
        tensorgc = C.import_tensorgc()
        remove = tensorgc.observe_cycles(tensorgc_cb, device=device)
        detector = f"tensorgc.observe_cycles(cb, device={device!r}), cb reads report.{mode.split('-')[1]}"
    elif mode == "torch":
        remove, detector = C.install_torch_detector(device, torch_cb)
    elif mode != "plain":
        raise SystemExit(f"unknown mode {mode}")

    refs = []
    a = b = None
    for _ in range(cfg["cycles"]):
        a, b = Node(), Node()
        a.other, b.other = b, a
        a.tensor = torch.ones(numel, device=device)
        refs.append(weakref.ref(a.tensor))
    for _ in range(cfg["extra_pairs"]):
        a, b = Node(), Node()
        a.other, b.other = b, a
    del a, b
    if device.startswith("cuda"):
        torch.cuda.synchronize()

    extra = {"mode": mode, "heap": cfg["heap"], "detector": detector}
    t0 = C.arm_timeout(cfg["timeout"], [0], 0, extra)
    collected = gc.collect()
    C.settle()
    seconds = time.perf_counter() - t0
    C.disarm_timeout()
    alive = sum(r() is not None for r in refs)
    result = {**extra, "timed_out": False, "seconds": seconds, "collected": collected,
              "tensors_alive_after": alive, "freed": alive == 0,
              "tracked_objects": tracked, **stats}
    if remove is not None:
        remove()
    C.emit_result(result)
    del heap


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="B2: cost of one gc.collect() that finds and reports tensor cycles on a big heap.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--heap", type=int, default=1_000_000, help="live heap size (gc-tracked objects)")
    p.add_argument("--cycles", type=int, default=100, help="tensor cycles in the garbage")
    p.add_argument("--extra-pairs", type=int, default=0, help="extra tensor-free garbage pairs")
    p.add_argument("--tensor-numel", type=int, default=1024, help="elements (float32) of each cycle's tensor")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {','.join(MODES)}")
    p.add_argument("--repeat", type=int, default=5, help="runs per mode, each a fresh subprocess")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds allowed for one measured collection")
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, ...")
    p.add_argument("--json", default=None, help="write all results as JSON to this path")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0

    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r}; choose from {MODES}")
    if "plain" not in modes:
        modes.insert(0, "plain")
    device = C.resolve_device(args.device)
    env = C.environment(device)
    C.log(f"[B2] device={device} heap={args.heap:,} cycles={args.cycles} modes={modes} "
          f"repeat={args.repeat} timeout={args.timeout:g}s")

    runs = {m: [] for m in modes}
    skipped = set()
    script = os.path.abspath(__file__)
    for r in range(args.repeat):
        for m in modes:
            if m in skipped:
                continue
            cfg = {"mode": m, "heap": args.heap, "cycles": args.cycles, "extra_pairs": args.extra_pairs,
                   "tensor_numel": args.tensor_numel, "device": device, "timeout": args.timeout}
            res = C.run_worker(script, cfg, args.timeout)
            runs[m].append(res)
            msg = C.fmt_run(res, args.timeout)
            if res.get("error"):
                msg += f" ERROR {res['error']}"
            C.log(f"[B2] mode={m:<13} run {r + 1}/{args.repeat}: {msg} s  reports={res.get('reports')} "
                  f"freed={res.get('freed')} collected={res.get('collected')}")
            if res.get("stderr_tail"):
                C.log("     stderr: " + res["stderr_tail"].strip().replace("\n", "\n     "))
            if res.get("timed_out"):
                skipped.add(m)

    print(f"### B2 report cost: one gc.collect() with {args.cycles} tensor cycles on a "
          f"{args.heap:,}-object heap, device={device}")
    print()
    print(f"python {env['python']}, torch {env.get('torch')}, {env.get('cpu_count')} CPUs, "
          f"repeat={args.repeat}, timeout={args.timeout:g}s")
    print()
    tracked = next((r["tracked_objects"] for rs in runs.values() for r in rs if r.get("tracked_objects")), None)
    if tracked:
        print(f"gc-tracked objects alive at the collection: {tracked:,} (heap + interpreter + torch)")
        print()
    print("| mode | median (s) | vs plain | runs (s) | reports | tensors reported | output chars | all freed |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |")
    base = C.median_of(runs["plain"])
    results = []
    for m in modes:
        rs = runs[m]
        med = C.median_of(rs)
        ok = [r for r in rs if not r.get("timed_out") and r.get("seconds") is not None]
        first = ok[0] if ok else {}
        chars = (first.get("html_chars") or 0) + (first.get("text_chars") or 0)
        freed = all(r.get("freed") for r in ok) if ok else None
        print(f"| {m} | {C.fmt_seconds(med, args.timeout)} | {C.fmt_ratio(med, base, args.timeout)} | "
              f"{', '.join(C.fmt_run(r, args.timeout) for r in rs)} | {first.get('reports', '-')} | "
              f"{first.get('report_tensors', '-') if m.startswith('tensorgc') else '-'} | "
              f"{chars if m != 'plain' else '-'} | {freed if freed is not None else '-'} |")
        results.append({"mode": m, "median_s": med,
                        "ratio_vs_plain": (med / base) if (med is not None and base) else None, "runs": rs})
    sys.stdout.flush()
    C.write_json(args.json, {"benchmark": "B2", "config": {k: v for k, v in vars(args).items() if k != "worker"},
                             "modes": modes, "env": env, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
