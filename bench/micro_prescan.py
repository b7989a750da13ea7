#!/usr/bin/env python
"""Micro: the young-generation pre-scan alone (cycles/young.c), per B1 shape: generation 0 is
filled with the garbage of --steps steps of a B1 shape (b1_overhead.py's --shape; automatic gc
off, so it stays there), then the pre-scan of a collection of generation 0 is timed --calls
times (``tensorgc._tensorgc_testing._young_prescan``, which finds nothing: no tensor is young).
Prints the least over --batches of the CPU time (time.thread_time) per call and per young object,
in one process (the least: on a shared machine, the batch that other processes disturbed least):

    python bench/micro_prescan.py --shapes slots,dict,list,dictobj,closure,method
    python bench/micro_prescan.py --variant old=/tmp/old/_tensorgc.so --variant new=tensorgc/_tensorgc.so

With --variant NAME=PATH (repeatable; a build with its _tensorgc_testing beside it) the builds are
timed instead of the installed one, batch by batch in turns, for an A/B of the pre-scan.
"""
import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
from b1_overhead import SHAPES  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(s for s in SHAPES if s != "mixed"))
    p.add_argument("--steps", type=int, default=175, help="steps of the shape in generation 0")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--batches", type=int, default=21)
    p.add_argument("--variant", action="append", default=[], metavar="NAME=PATH")
    args = p.parse_args()
    import torch  # noqa: F401 -- the pre-scan looks for its tensors

    if args.variant:
        from ab_variants import load
        builds = {}
        for v in args.variant:
            name, _, path = v.partition("=")
            builds[name] = load(name, path).testing
    else:
        builds = {"tensorgc": C.import_tensorgc()._tensorgc_testing}
    for testing in builds.values():
        if testing is None or testing._young_prescan(0) is None:
            raise SystemExit("a build without _young_prescan, or the pre-scan is not available")
    gc.disable()
    print("| shape | build | young objects | us per pre-scan | ns per object |")
    print("| --- | --- | ---: | ---: | ---: |")
    for shape in args.shapes.split(","):
        make = SHAPES[shape]
        gc.collect()
        before = gc.get_count()[0]
        for _ in range(args.steps):
            make()
        young = gc.get_count()[0] - before
        per = {name: [] for name in builds}
        for b in range(args.batches):
            for name, testing in (builds.items() if b % 2 == 0 else reversed(builds.items())):
                prescan = testing._young_prescan
                assert prescan(0) is False
                t0 = time.thread_time()
                for _ in range(args.calls):
                    prescan(0)
                per[name].append((time.thread_time() - t0) / args.calls)
        for name in builds:
            us = min(per[name]) * 1e6
            print(f"| {shape} | {name} | {young} | {us:.2f} | {us * 1e3 / max(young, 1):.1f} |")
    gc.enable()


if __name__ == "__main__":
    main()
