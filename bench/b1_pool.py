#!/usr/bin/env python
"""Pool several sets of B1 runs (the JSON files of ``b1_overhead.py --json``) into one reading.

One set of B1 (nine runs a mode) moves by about ±0.7% from set to set on a 2-core VM, as much as
the margin under the 1.05x budget, so a reading against it rests on many sets: this prints each set's medians
and ratio, the median over all runs of all sets for each mode, and a cluster bootstrap of the
pooled ratio (resample the sets, then the runs inside each, ``--draws`` times), whose interval
and share of draws over ``--target`` say how sure the pooled ratio is.

    python bench/b1_pool.py docs/results/b1-cpu/set*.json

``--per-set``: each set's runs are first divided by that set's plain median, so that sets taken
while a shared host ran at different speeds (the H200 machine's plain loop read 0.09 s in one
set and 0.17 s in the next) pool as ratios instead of as mixed times.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys


def load(path: str, heap: int | None) -> dict:
    """mode -> the run times (s) of one set; runs that timed out or failed are left out."""
    with open(path) as f:
        data = json.load(f)
    runs: dict = {}
    for row in data.get("results", []):
        if heap is not None and row.get("heap") != heap:
            continue
        times = [r["seconds"] for r in row.get("runs", [])
                 if isinstance(r.get("seconds"), (int, float)) and not r.get("timed_out")]
        runs.setdefault(row["mode"], []).extend(times)
    return runs


def pooled(sets: list, mode: str) -> float:
    return statistics.median([t for s in sets for t in s[mode]])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="+", help="B1 JSON files, one per set")
    p.add_argument("--heap", type=int, default=1_000_000, help="the heap size to read (default 1M)")
    p.add_argument("--mode", default="tensorgc", help="the mode compared with plain")
    p.add_argument("--target", type=float, default=1.05)
    p.add_argument("--draws", type=int, default=5000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--per-set", action="store_true",
                   help="divide each set's runs by its own plain median before pooling")
    args = p.parse_args(argv)

    sets = []
    for path in args.json:
        s = load(path, args.heap)
        if not s.get("plain") or not s.get(args.mode):
            print(f"{path}: no plain or {args.mode} runs for heap {args.heap}", file=sys.stderr)
            return 2
        sets.append((path, s))
    modes = [m for m in sets[0][1] if all(m in s and s[m] for _, s in sets)]

    print("| set | runs | " + " | ".join(modes) + f" | {args.mode} / plain |")
    print("| --- | ---: | " + " | ".join("---:" for _ in modes) + " | ---: |")
    for path, s in sets:
        med = {m: statistics.median(s[m]) for m in modes}
        cells = " | ".join(f"{med[m]:.5f} s" for m in modes)
        print(f"| {path} | {len(s['plain'])} | {cells} | {med[args.mode] / med['plain']:.4f}x |")
    only = [s for _, s in sets]
    unit = " s"
    if args.per_set:
        only = [{m: [t / statistics.median(s["plain"]) for t in s[m]] for m in modes} for s in only]
        unit = "x"
    med = {m: pooled(only, m) for m in modes}
    cells = " | ".join(f"{med[m]:.5f}{unit}" for m in modes)
    total = sum(len(s["plain"]) for s in only)
    ratio = med[args.mode] / med["plain"]
    print(f"| pooled{' (per set)' if args.per_set else ''} | {total} | {cells} | **{ratio:.4f}x** |")

    rng = random.Random(args.seed)
    draws = []
    for _ in range(args.draws):
        pick = [rng.choice(only) for _ in only]
        pick = [{m: [rng.choice(s[m]) for _ in s[m]] for m in ("plain", args.mode)} for s in pick]
        draws.append(pooled(pick, args.mode) / pooled(pick, "plain"))
    draws.sort()
    lo, hi = draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]
    over = sum(d > args.target for d in draws) / len(draws)
    within = sum(s_ratio <= args.target for s_ratio in
                 (statistics.median(s[args.mode]) / statistics.median(s["plain"]) for s in only))
    print()
    print(f"{len(only)} sets, {total} runs a mode: pooled {ratio:.4f}x; cluster bootstrap "
          f"({args.draws} draws) 95% interval {lo:.4f}-{hi:.4f}x, over {args.target}x in "
          f"{100 * over:.1f}% of draws; {within} of {len(only)} sets at or under {args.target}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
