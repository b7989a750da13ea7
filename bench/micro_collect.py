#!/usr/bin/env python
"""Micro: the cost of one young collection (gc.collect(0)) of ~760 garbage objects (380 pairs
of __slots__ objects), with and without one tensor self-cycle among them, plain vs tensorgc.

Interleaves plain and tensorgc batches in one process (so machine drift hits both alike) and
prints the minimum and median over batches of the per-collection median, in microseconds:

    python bench/micro_collect.py --batches 15 --device cpu
"""
import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import tensorgc  # noqa: E402


# The same workload objects as B1, so the micro numbers explain B1's.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from b1_overhead import TensorCycle, make_pair  # noqa: E402


def batch(with_tensor, device, reps):
    times = []
    for _ in range(reps):
        for _ in range(380):
            make_pair()
        if with_tensor:
            TensorCycle(torch.ones(4, device=device))
        t0 = time.perf_counter()
        gc.collect(0)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=15)
    p.add_argument("--reps", type=int, default=100, help="collections per batch")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    gc.disable()
    gc.collect()
    gc.freeze()
    reports = [0]
    res = {}
    for _ in range(args.batches):
        for mode in ("plain", "tensorgc"):
            h = None
            if mode == "tensorgc":
                h = tensorgc.observe_cycles(lambda r: reports.__setitem__(0, reports[0] + 1),
                                            device=args.device)
            for wt in (False, True):
                res.setdefault((mode, wt), []).append(batch(wt, args.device, args.reps))
            if h is not None:
                h()
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, device={args.device}, "
          f"batches={args.batches} x {args.reps} collections, reports={reports[0]}")
    print("| garbage | plain min / median (us) | tensorgc min / median (us) | extra (median) |")
    print("| --- | ---: | ---: | ---: |")
    for wt, name in ((False, "760 tensor-free objects"), (True, "760 objects + 1 tensor self-cycle")):
        p_ = res[("plain", wt)]
        t_ = res[("tensorgc", wt)]
        print(f"| {name} | {min(p_):.1f} / {statistics.median(p_):.1f} | {min(t_):.1f} / "
              f"{statistics.median(t_):.1f} | {statistics.median(t_) - statistics.median(p_):+.1f} |")


if __name__ == "__main__":
    main()
