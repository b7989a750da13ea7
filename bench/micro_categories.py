#!/usr/bin/env python
"""Micro: what classifying costs the replay. On a generated training trace (tests/_traces.py:
6 layers of d_model 512, AdamW, torch's Python and C++ stacks, the run going on until its trace
holds --events entries), times the C replay (1200 columns, 300 bands) without categories, and
with them: the classifier's inputs (the stacks' hints) and the replay with its rules. Prints
the minimum and median over --repeat runs of each, in seconds:

    python bench/micro_categories.py --events 1000000 --repeat 9
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from tensorgc import _tensorgc  # noqa: E402
from tensorgc.categories import inputs  # noqa: E402
from tensorgc.timeline import _alive_blocks, trace_columns  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--json", action="store_true", help="print the raw times as JSON too")
    args = p.parse_args()
    from _traces import make_trace

    snap = make_trace(layers=6, steps=None, d_model=512, max_entries=args.events, stacks="all",
                      seed=0).snapshot
    trace = snap["device_traces"][0]
    cols = trace_columns(trace)
    blocks = _alive_blocks(snap, 0)
    pre = [(b["address"], b["size"]) for b in blocks]
    frames = [b.get("frames") for b in blocks]
    use_req = bytes([2]) in cols[0]
    gc.disable()  # the trace's million dicts: the collector would walk them between runs
    plain, cats = [], []
    for _ in range(args.repeat):  # interleaved: a load that comes and goes hits both
        t = time.perf_counter()
        _tensorgc._timeline(cols, pre, 1200, 300, use_req, None)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        got = inputs(snap, 0, None, cols=cols, pre_frames=frames)
        tl = _tensorgc._timeline(cols, pre, 1200, 300, use_req, got.classify)
        cats.append(time.perf_counter() - t)
    print(f"{len(trace):,} entries, {sum(tl['rules']):,} allocations, {args.repeat} runs")
    for name, v in (("replay without categories", plain), ("with categories inferred", cats)):
        print(f"  {name}: min {min(v):.3f} s, median {statistics.median(v):.3f} s")
    if args.json:
        print(json.dumps({"plain": plain, "categories": cats}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
