#!/usr/bin/env python
"""A/B of built variants of the extension in ONE process: the micro-benchmark's young collection
(760 objects of garbage, optionally one tensor self-cycle) timed with no detector and with each
variant's observe_cycles in turn, batch by batch, the order reversed every batch, so that drift on
a shared machine hits every variant alike. Prints medians and median paired differences.

    python bench/ab_variants.py --batches 60 old=/tmp/old/_tensorgc.so new=tensorgc/_tensorgc.so

Each variant is loaded under its own package name (the init function is the file's, so any built
copy of _tensorgc loads). Only for comparing builds of this project while working on it.
"""
import argparse
import gc
import importlib.util
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from b1_overhead import TensorCycle, make_pair  # noqa: E402


def load(name, path):
    """The built _tensorgc at `path` under its own package; its private testing module, when one
    was built beside it, becomes the attribute `testing` (None otherwise). The testing module binds
    to the _tensorgc of its own package, so that one is registered first."""
    pkg = "tgc_variant_" + name
    sys.modules[pkg] = types.ModuleType(pkg)
    sys.modules[pkg].__path__ = []
    mods = []
    base = os.path.basename(path)
    sibling = os.path.join(os.path.dirname(path), base.replace("_tensorgc", "_tensorgc_testing", 1))
    for mname, mpath in (("_tensorgc", path), ("_tensorgc_testing", sibling)):
        if mname != "_tensorgc" and (sibling == path or not os.path.exists(sibling)):
            mods.append(None)
            continue
        spec = importlib.util.spec_from_file_location(f"{pkg}.{mname}", mpath)
        if spec is None:
            raise SystemExit(f"{mpath}: not an extension module")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        mods.append(mod)
    mods[0].testing = mods[1]
    return mods[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", metavar="NAME=PATH")
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--reps", type=int, default=100, help="collections per batch")
    p.add_argument("--tensor", action="store_true", help="one tensor self-cycle per collection")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    import torch

    mods = {}
    for v in args.variants:
        name, sep, path = v.partition("=")
        if not sep or not name or not os.path.exists(path):
            p.error(f"{v!r}: expected NAME=PATH of a built _tensorgc")
        mods[name] = load(name, path)

    def batch():
        times = []
        for _ in range(args.reps):
            for _ in range(380):
                make_pair()
            if args.tensor:
                TensorCycle(torch.ones(4, device=args.device))
            t0 = time.perf_counter()
            gc.collect(0)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e6

    gc.disable()
    gc.collect()
    gc.freeze()
    order = ["plain"] + list(mods)
    res = {m: [] for m in order}
    seen = {m: [0] for m in mods}
    for b in range(args.batches):
        for m in (order if b % 2 == 0 else order[::-1]):
            remove = None
            if m != "plain":
                c = seen[m]
                remove = mods[m].observe_cycles(lambda r, c=c: c.__setitem__(0, c[0] + 1),
                                                device=args.device)
            try:
                res[m].append(batch())
            finally:
                if remove is not None:
                    remove()
    print(f"{args.batches} batches x {args.reps} young collections, tensor={args.tensor}, "
          f"python {sys.version.split()[0]}, torch {torch.__version__}")
    print("| variant | median (us) | paired difference to plain (us) | reports |")
    print("| --- | ---: | ---: | ---: |")
    for m in order:
        d = [a - b for a, b in zip(res[m], res["plain"])]
        print(f"| {m} | {statistics.median(res[m]):.2f} | {statistics.median(d):+.2f} | "
              f"{seen[m][0] if m in seen else 0} |")
    names = list(mods)
    for m in names[1:]:
        d = [a - b for a, b in zip(res[m], res[names[0]])]
        print(f"{m} - {names[0]}: median {statistics.median(d):+.2f} us, mean {statistics.mean(d):+.2f} us")


if __name__ == "__main__":
    main()
