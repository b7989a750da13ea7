#!/usr/bin/env python
"""B1's loop for a sampling profiler: which share of the loop's CPU time is the detector's own code.

Paired timings (b1_inprocess.py) give the detector's whole cost, noise included; a profiler's
samples split one run by library and function, so the share of tensorgc's own code is read
inside a single process, whatever the machine's noise. The script builds B1's heap, prints
``ready`` on stderr, then runs ``--loops`` loops of ``--pairs`` garbage pairs of ``--shape``
(``--tensor-cycles`` tensor self-cycles interleaved) with ``tensorgc.observe_cycles`` on (or off
with ``--plain``), and prints the loops' CPU time on stderr. Start the profiler's recording after
the set-up, e.g. with Linux perf:

    perf record -D 5000 -F 2000 -o b1.data -- python bench/b1_samples.py --shape dict --loops 40
    perf report -i b1.data --stdio --sort dso        # the _tensorgc row: the detector's code
    perf report -i b1.data --stdio --sort symbol     # young__ring_hit: the walk of the garbage

What the samples cannot show is the collector and the interpreter running slower around the
detector (a cache the walk evicted): that part is the paired difference less this share.
"""
import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
from b1_overhead import SHAPES, TensorCycle  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="slots")
    p.add_argument("--loops", type=int, default=40)
    p.add_argument("--pairs", type=int, default=300_000)
    p.add_argument("--heap", type=int, default=1_000_000)
    p.add_argument("--tensor-cycles", type=int, default=100)
    p.add_argument("--plain", action="store_true", help="no detector: the profile to compare with")
    p.add_argument("--device", default="auto")
    args = p.parse_args(argv)
    if args.loops < 0 or args.pairs < 1 or args.heap < 0 or args.tensor_cycles < 0:
        p.error("--loops, --heap and --tensor-cycles must not be negative, --pairs positive")
    import torch

    tensorgc = C.import_tensorgc()
    device = C.resolve_device(args.device)
    heap = C.build_heap(args.heap)
    TensorCycle(torch.ones(4, device=device))
    gc.collect()
    every = max(1, args.pairs // args.tensor_cycles) if args.tensor_cycles else 0
    reports = []
    remove = None if args.plain else tensorgc.observe_cycles(
        lambda r: reports.append(len(r.tensors)), device=device)
    make = SHAPES[args.shape]
    print("ready", file=sys.stderr, flush=True)
    t0 = time.thread_time()
    try:
        for _ in range(args.loops):
            for i in range(args.pairs):
                make()
                if every and i % every == every // 2:
                    TensorCycle(torch.ones(4, device=device))
    finally:
        if remove is not None:
            remove()
    secs = time.thread_time() - t0
    print(f"{args.shape}: {args.loops} loops in {secs:.2f} s of CPU, {len(reports)} reports, "
          f"heap of {len(heap):,}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
