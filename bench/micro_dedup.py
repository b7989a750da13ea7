#!/usr/bin/env python
"""Micro: what warn_tensor_cycles costs per collection in a long job's steady state, where every
collection finds a repeat of a leak already reported (counted by its cycle signature: no page,
no text), and where collections find no tensor at all.

One young collection (gc.collect(0)) of ~760 garbage objects (380 pairs of __slots__ objects,
B1's), with or without one tensor self-cycle among them (the same shape every time), timed
alone. Modes, interleaved batch by batch in one process (so machine drift hits them alike):

* ``plain``   -- no detector;
* ``observe`` -- ``tensorgc.observe_cycles(cb)`` with a ``cb`` that does nothing: the detector
  and the report alone;
* ``warn``    -- ``tensorgc.warn_tensor_cycles()`` with its defaults (repeats counted), its
  page written before the first batch, so every report is a repeat;
* ``warn-nodedup`` (only with ``--modes``) -- ``warn_tensor_cycles(dedup=False,
  max_pages=None)``: a page for every collection, what the deduplication saves.

Prints, per garbage kind and mode, the minimum and median over batches of the per-collection
median, in microseconds, and the extra over plain (medians):

    python bench/micro_dedup.py --batches 15 --device cpu
"""
import argparse
import gc
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import tensorgc  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from b1_overhead import TensorCycle  # noqa: E402
from micro_collect import batch  # noqa: E402  (one young collection, timed the same way)

MODES = ("plain", "observe", "warn", "warn-nodedup")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=15)
    p.add_argument("--reps", type=int, default=100, help="collections per batch")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--modes", default="plain,observe,warn")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or modes[0] != "plain" or any(m not in MODES for m in modes):
        p.error(f"--modes: a comma-separated list from {MODES}, starting with plain")
    log = logging.getLogger("tensorgc")
    log.addHandler(logging.NullHandler())  # the first page's WARNING stays out of the table
    log.propagate = False
    gc.disable()
    gc.collect()
    gc.freeze()
    pages = tempfile.mkdtemp(prefix="tensorgc-micro-")
    counter = tensorgc.CycleDedup()  # shared by every batch of mode warn: the steady state
    with tensorgc.warn_tensor_cycles(device=args.device, directory=pages, dedup=counter):
        TensorCycle(torch.ones(4, device=args.device))
        gc.collect(0)
    assert counter.totals()["reports"] == 1
    reports = {m: 0 for m in modes}

    def noop(report):
        reports["observe"] += 1

    res = {}
    try:
        for b in range(args.batches):
            for mode in (modes if b % 2 == 0 else modes[::-1]):
                h = None
                if mode == "observe":
                    h = tensorgc.observe_cycles(noop, device=args.device)
                elif mode == "warn":
                    h = tensorgc.warn_tensor_cycles(device=args.device, directory=pages,
                                                    dedup=counter)
                elif mode == "warn-nodedup":
                    h = tensorgc.warn_tensor_cycles(device=args.device, directory=pages,
                                                    dedup=False, max_pages=None)
                for wt in (False, True):
                    res.setdefault((mode, wt), []).append(batch(wt, args.device, args.reps))
                if h is not None:
                    h()
    finally:
        written = len(os.listdir(pages))
        shutil.rmtree(pages, ignore_errors=True)
    totals = counter.totals()
    assert totals["reports"] == 1, totals  # repeats only, after the first page
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, device={args.device}, "
          f"batches={args.batches} x {args.reps} collections; warn: {totals['seen']:,} cycles "
          f"counted, {totals['reports']} page; pages written in all: {written}")
    print()
    print("| garbage per collection | mode | min / median (us) | extra over plain (median) |")
    print("| --- | --- | ---: | ---: |")
    rows = []
    for wt, name in ((False, "760 tensor-free objects"),
                     (True, "760 objects + 1 repeated tensor self-cycle")):
        base = statistics.median(res[("plain", wt)])
        for mode in modes:
            xs = res[(mode, wt)]
            med = statistics.median(xs)
            rows.append({"garbage": name, "mode": mode, "min_us": min(xs), "median_us": med,
                         "extra_us": med - base, "batches_us": xs})
            print(f"| {name} | {mode} | {min(xs):.1f} / {med:.1f} | "
                  f"{'' if mode == 'plain' else f'{med - base:+.1f}'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "micro-dedup", "config": vars(args), "results": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
