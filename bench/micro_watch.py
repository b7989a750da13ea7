#!/usr/bin/env python
"""Micro: what the tensor watch (cycles/watch.c) costs, once and per collection.

1. ``first plant`` -- the first young collection after ``observe_cycles`` on a heap of ``--heap``
   live objects (``_common.build_heap``, as B1's), with the watch reset before it
   (``_tensorgc_testing._tensor_watch_reset()``): it finds every tensor type, one pass over every
   object the collector tracks; next to it, the collection after it (the watch already on).
   Medians of ``--repeat`` resets.
2. ``per collection`` -- ``gc.collect(0)`` right after a list holding a tensor was made and
   dropped (freed by refcounting: the collection meets no tensor), or after a tensor self-cycle
   was dropped, without a detector (``plain``) and with ``observe_cycles(cb)`` whose ``cb`` does
   nothing; the median of ``--collections`` collections per mode, interleaved mode by mode
   ``--repeat`` times: the watch's quiet path (plant, no walk, uproot) and one report.

    python bench/micro_watch.py --heap 1000000 --repeat 5
"""
import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


class TensorCycle:
    def __init__(self, tensor):
        self.tensor = tensor
        self.me = self


def first_plant(tensorgc, testing, repeat):
    first, after = [], []
    for _ in range(repeat):
        testing._tensor_watch_reset()
        handle = tensorgc.observe_cycles(lambda r: None, device="cpu")
        try:
            t0 = time.perf_counter()
            gc.collect(0)
            t1 = time.perf_counter()
            gc.collect(0)
            t2 = time.perf_counter()
        finally:
            handle.remove()
        first.append((t1 - t0) * 1e3)
        after.append((t2 - t1) * 1e3)
    return statistics.median(first), statistics.median(after)


def per_collection(tensorgc, torch, observe, cycle, n):
    handle = tensorgc.observe_cycles(lambda r: None, device="cpu") if observe else None
    try:
        gc.collect()
        times = []
        for _ in range(n):
            x = TensorCycle(torch.ones(4)) if cycle else [torch.ones(4)]
            del x
            t0 = time.perf_counter_ns()
            gc.collect(0)
            times.append(time.perf_counter_ns() - t0)
    finally:
        if handle is not None:
            handle.remove()
    return statistics.median(times) / 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heap", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--collections", type=int, default=2000)
    a = p.parse_args()
    import torch

    tensorgc = C.import_tensorgc()
    testing = tensorgc._tensorgc_testing
    if not testing._sentinel()["enabled"]:
        sys.exit("micro_watch: the sentinel is not available on this interpreter")
    heap = C.build_heap(a.heap)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        tracked = len(gc.get_objects())
        first, after = first_plant(tensorgc, testing, a.repeat)
        rows = {}
        for _ in range(a.repeat):
            for observe in (False, True):
                for cycle in (False, True):
                    rows.setdefault((observe, cycle), []).append(
                        per_collection(tensorgc, torch, observe, cycle, a.collections))
    finally:
        if was:
            gc.enable()
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {tracked:,} tracked objects")
    print()
    print("| what | ms |")
    print("| --- | ---: |")
    print(f"| first plant (finds every tensor type) | {first:.2f} |")
    print(f"| the collection after it | {after:.3f} |")
    print()
    print("| the collection | plain (µs) | observe_cycles (µs) |")
    print("| --- | ---: | ---: |")
    for cycle, what in ((False, "no tensor met (the quiet path)"),
                        (True, "a tensor self-cycle (one report)")):
        plain = statistics.median(rows[(False, cycle)])
        obs = statistics.median(rows[(True, cycle)])
        print(f"| {what} | {plain:.2f} | {obs:.2f} |")
    del heap


if __name__ == "__main__":
    main()
