#!/usr/bin/env python
"""B1 in one process, with paired differences: where B1's overhead budget goes.

B1 (b1_overhead.py) runs every mode in fresh interpreters and compares medians across runs; on a
shared machine the run-to-run spread of plain alone (a few %) is as large as the 5% target. This
script runs B1's loop (``--pairs`` pairs of tensor-free cyclic garbage through ``make_pair()``,
or the ``--shape`` b1_overhead.py's option names, ``--tensor-cycles`` tensor self-cycles
interleaved, automatic gc on, a heap of ``--heap`` live objects) in ONE process, alternating the
modes loop by loop (the order reversed every round), and
reports each mode's median loop time and the median of its per-round difference to plain:

* ``plain``    -- no gc callback;
* ``floor``    -- a C no-op on ``gc.callbacks`` (``operator.is_``): what CPython itself spends to
  call any gc callback twice per collection (it builds an info dict and the phase string for each
  call), which no detector registered there can avoid;
* ``tensorgc`` -- ``tensorgc.observe_cycles(cb, device=...)``, ``cb`` reads ``.tensors``,
  ``.nbytes`` and ``.text`` as B1's does;
* ``tensorgc-callbacks`` -- the same with the resident sentinel off: the detector's hook stays on
  ``gc.callbacks`` and plants its sentinel at every "start" (as when the resident one does not
  fit: the program's gc debug flags on, an ``observe_garbage`` observer);
* ``tensorgc-prescan`` -- the same with the sentinel off (the pre-scan and islands decide, as
  where no sentinel can be planted);
* ``tensorgc+callback``, ``tensorgc-prescan+callback`` -- either, with another gc callback (the
  floor's no-op) registered after the detector's, as a program's own gc timer would be;
* ``tensorgc-noisland`` -- the pre-scan path with islands off;
* ``tensorgc-warn`` -- ``tensorgc.warn_tensor_cycles(device=...)`` as a long job leaves it on:
  repeats counted by cycle signature (one CycleDedup shared by every loop, its page written
  before the first round), so every report of the loop is a repeat: counted, no page, no text.

With ``--variant NAME=PATH`` (repeatable) a built copy of the extension joins as mode NAME (loaded
as in ab_variants.py), for an A/B of builds on B1's own loop:

    python bench/b1_inprocess.py --rounds 12
    python bench/b1_inprocess.py --rounds 16 --modes plain --variant old=/tmp/old.so --variant new=tensorgc/_tensorgc.so

Where the time goes: a mode whose extension was built with phase timers (``make phases`` builds
one into build/phases-lib and runs this script with it as a variant) also gets a table of the
detector's phases per loop (pre-scan, island, report build, callback, freeing), next to its paired
difference; whatever the phases do not cover is CPython calling the callback (the floor) and the
interpreter running slower around it.

Not a replacement for B1 (one interpreter, warm caches): a second opinion on the same loop,
with the floor measured next to it.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import operator
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
from b1_overhead import SHAPES, TensorCycle  # noqa: E402

MODES = ("plain", "floor", "tensorgc", "tensorgc-callbacks", "tensorgc-prescan", "tensorgc+callback",
         "tensorgc-prescan+callback", "tensorgc-noisland", "tensorgc-warn")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=12, help="loops per mode, interleaved")
    p.add_argument("--heap", type=int, default=1_000_000)
    p.add_argument("--pairs", type=int, default=300_000)
    p.add_argument("--tensor-cycles", type=int, default=100)
    p.add_argument("--shape", choices=sorted(SHAPES), default="slots",
                   help="the garbage one step makes, as b1_overhead.py's --shape")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--device", default="auto")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall (time.perf_counter) or cpu (time.thread_time: the main thread's CPU "
                        "time, which leaves out the time other processes had the core)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=PATH",
                   help="a built _tensorgc to time as mode NAME (repeatable)")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    variants = {}
    for v in args.variant:
        name, sep, path = v.partition("=")
        if not sep or not name or name in MODES or name in variants or not os.path.exists(path):
            p.error(f"--variant {v!r}: expected NAME=PATH of a built _tensorgc, NAME new")
        variants[name] = path
    if unknown or not modes or modes[0] != "plain":
        p.error(f"--modes: a comma-separated list from {MODES}, starting with plain")
    if args.rounds < 1 or args.pairs < 1 or args.heap < 0 or args.tensor_cycles < 0:
        p.error("--rounds and --pairs must be positive, --heap and --tensor-cycles not negative")

    import torch

    tensorgc = C.import_tensorgc()
    if variants:
        from ab_variants import load
        variants = {name: load(name, path) for name, path in variants.items()}
        modes += list(variants)
    device = C.resolve_device(args.device)
    heap = C.build_heap(args.heap)
    TensorCycle(torch.ones(4, device=device))  # warm the tensor path
    gc.collect()
    every = max(1, args.pairs // args.tensor_cycles) if args.tensor_cycles else 0
    stats = {"reports": 0}

    def cb(report):
        stats["reports"] += 1
        len(report.tensors)
        report.nbytes
        len(report.text)

    make = SHAPES[args.shape]
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    def loop() -> float:
        t0 = clock()
        for i in range(args.pairs):
            make()
            if every and i % every == every // 2:
                TensorCycle(torch.ones(4, device=device))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return clock() - t0

    testing = importlib.import_module("tensorgc._tensorgc_testing")
    island = testing._young_island()["enabled"]
    pages = tempfile.mkdtemp(prefix="tensorgc-b1-")
    counter = tensorgc.CycleDedup()  # the steady state: one page, then repeats only
    if "tensorgc-warn" in modes:
        with tensorgc.warn_tensor_cycles(device=device, directory=pages, dedup=counter):
            TensorCycle(torch.ones(4, device=device))
            gc.collect()
        assert counter.totals()["reports"] == 1, counter.totals()

    def module_of(m):
        """The module holding the phase timers of the build a mode runs, when that build has them
        (a build of -DTGC_PHASE_TIMES); None otherwise. An older variant keeps them in _tensorgc."""
        if m in variants:
            cands = (getattr(variants[m], "testing", None), variants[m])
        else:
            cands = (testing,) if m.startswith("tensorgc") else ()
        for mod in cands:
            timer = getattr(mod, "_phase_times", None)
            if timer is not None and timer() is not None:
                return mod
        return None

    timed = {m: mod for m in modes if (mod := module_of(m)) is not None}  # m -> its module
    phases = {m: {} for m in timed}
    times = {m: [] for m in modes}
    reports = {m: 0 for m in modes}
    try:
        for r in range(args.rounds):
            for m in (modes if r % 2 == 0 else modes[::-1]):
                remove = None
                testing._young_island(m != "tensorgc-noisland" and island)
                testing._sentinel(not m.startswith(("tensorgc-prescan", "tensorgc-noisland")))
                testing._resident(m != "tensorgc-callbacks")
                if m == "floor":
                    gc.callbacks.append(operator.is_)
                elif m == "tensorgc-warn":
                    remove = tensorgc.warn_tensor_cycles(device=device, directory=pages,
                                                         dedup=counter)
                    before = counter.totals()["seen"]
                elif m.startswith("tensorgc"):
                    remove = tensorgc.observe_cycles(cb, device=device)
                    if m.endswith("+callback"):
                        gc.callbacks.append(operator.is_)
                elif m in variants:
                    remove = variants[m].observe_cycles(cb, device=device)
                stats["reports"] = 0
                if m in timed:
                    timed[m]._phase_times(True)
                try:
                    times[m].append(loop())
                    if m in timed:
                        for name, (n, secs) in timed[m]._phase_times(True).items():
                            phases[m].setdefault(name, []).append((n, secs))
                finally:
                    if m == "floor" or m.endswith("+callback"):
                        gc.callbacks.remove(operator.is_)
                    if remove is not None:
                        remove()
                reports[m] = stats["reports"]
                if m == "tensorgc-warn":
                    reports[m] = counter.totals()["seen"] - before  # cycles counted
                C.log(f"[B1-inprocess] round {r + 1}/{args.rounds} {m:18s} {times[m][-1]:.4f} s")
    finally:
        testing._young_island(island)
        testing._resident(True)
        shutil.rmtree(pages, ignore_errors=True)
    del heap
    if "tensorgc-warn" in modes:
        assert counter.totals()["reports"] == 1, counter.totals()  # no page after the first

    plain = times["plain"]
    med_plain = statistics.median(plain)
    rows = []
    for m in modes:
        diffs = [a - b for a, b in zip(times[m], plain)]
        rows.append({"mode": m, "median_s": statistics.median(times[m]),
                     "ratio_vs_plain": statistics.median(times[m]) / med_plain,
                     "paired_diff_ms": statistics.median(diffs) * 1e3,
                     "paired_ratio": 1 + statistics.median(diffs) / med_plain,
                     "loops_s": times[m], "reports_per_loop": reports[m]})
    env = C.environment(device)
    print(f"### B1 in one process: {args.pairs:,} garbage pairs ({args.shape}) + {args.tensor_cycles} tensor "
          f"self-cycles, heap {args.heap:,}, device={device}\n")
    print(f"python {env.get('python', '?')}, torch {env.get('torch', '?')}, {args.rounds} rounds, "
          f"modes alternating loop by loop, clock={args.clock}\n")
    print("| mode | median loop (s) | vs plain | median paired difference | as a ratio | reports per loop |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['mode']} | {row['median_s']:.4f} | {row['ratio_vs_plain']:.3f}x | "
              f"{row['paired_diff_ms']:+.2f} ms | {row['paired_ratio']:.3f}x | {row['reports_per_loop']} |")
    floor = next((r["paired_diff_ms"] for r in rows if r["mode"] == "floor"), None)
    for m, per in phases.items():
        row = next(r for r in rows if r["mode"] == m)
        print(f"\n#### where {m}'s time goes (phase timers; medians over loops)\n")
        print("| phase | events per loop | us per event | ms per loop |")
        print("| --- | ---: | ---: | ---: |")
        total = 0.0
        for name, samples in per.items():
            n = statistics.median(x[0] for x in samples)
            ms = statistics.median(x[1] for x in samples) * 1e3
            total += ms
            each = ms * 1e3 / n if n else 0.0
            print(f"| {name} | {n:g} | {each:.2f} | {ms:.3f} |")
        print(f"| all phases | | | {total:.3f} |")
        print(f"| paired difference to plain | | | {row['paired_diff_ms']:.3f} |")
        if floor is not None:
            print(f"| of which CPython's callback floor (mode floor) | | | {floor:.3f} |")
            print(f"| not in a phase nor the floor | | | {row['paired_diff_ms'] - floor - total:.3f} |")
        row["phases"] = {name: samples for name, samples in per.items()}
    if args.json:
        C.write_json(args.json, {"benchmark": "B1-inprocess", "config": vars(args), "env": env,
                                 "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
