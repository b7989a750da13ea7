#!/usr/bin/env python
"""Micro: what tensorgc.track_tensors() costs the collector. The index works only in collections
of generation >= 1 (one in ten with default thresholds); this times gc.collect(0) and
gc.collect(1) on B1's garbage (380 pairs made before each collection), index off vs on,
interleaved batches, and prints the minimum and median over batches of the per-collection median
in microseconds:

    python bench/micro_index.py --batches 15
"""
import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import tensorgc  # noqa: E402
from b1_overhead import make_pair  # noqa: E402


def batch(gen, reps, device):
    keep = [torch.ones(4, device=device) for _ in range(100)]  # live tensors to index
    times = []
    for _ in range(reps):
        for _ in range(380):
            make_pair()
        t0 = time.perf_counter()
        gc.collect(gen)
        times.append(time.perf_counter() - t0)
    del keep
    return statistics.median(times) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=15)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    gc.disable()
    gc.collect()
    gc.freeze()
    res = {}
    for _ in range(args.batches):
        for on in (False, True):
            tensorgc.track_tensors(on)
            for gen in (0, 1):
                res.setdefault((on, gen), []).append(batch(gen, args.reps, args.device))
    tensorgc.track_tensors(False)
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, device={args.device}, "
          f"batches={args.batches} x {args.reps} collections")
    print("| collection | index off min / median (us) | index on min / median (us) | extra (median) |")
    print("| --- | ---: | ---: | ---: |")
    for gen in (0, 1):
        a, b = res[(False, gen)], res[(True, gen)]
        print(f"| gc.collect({gen}) of 760 garbage objects | {min(a):.1f} / {statistics.median(a):.1f} | "
              f"{min(b):.1f} / {statistics.median(b):.1f} | {statistics.median(b) - statistics.median(a):+.1f} |")


if __name__ == "__main__":
    main()
