#!/usr/bin/env python
"""oom_autopsy: a loop that leaks until CUDA runs out of memory, and the autopsy tensorgc writes.

The story: each step builds a little graph of objects that refer to each other and to a large
tensor, and the program turned automatic garbage collection off "for speed". Nothing frees the
cycles, memory climbs, and the job dies with OutOfMemoryError. With tensorgc.on_oom() the death
leaves a directory: the snapshot, the timeline and the segment map at the OOM, the MemReporter
table, and the finding that a gc.collect() would have freed the memory, with the cycle drawn.

    python demos/oom_autopsy.py                 # needs CUDA; caps this process at ~2 GB more

Without CUDA there is no caching allocator to run out of: it says so on stderr and exits 2.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile

from _common import import_tensorgc, pick_device


NEEDS_CUDA = 2  # the exit status where it cannot run here (demos/run_all.py reads it)


class Step:
    def __init__(self, tensor):
        self.activations = tensor
        self.callback = lambda: self  # the cycle: a closure that captures self


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--directory", default=None)
    p.add_argument("--budget-gb", type=float, default=2.0, help="device memory allowed on top")
    args = p.parse_args(argv)

    import torch

    tensorgc = import_tensorgc()
    device = pick_device(args.device)
    if not device.startswith("cuda"):
        print(f"oom_autopsy: needs CUDA (the observer is the CUDA caching allocator's); "
              f"device {device!r} has none: nothing to show", file=sys.stderr)
        return NEEDS_CUDA
    directory = args.directory or tempfile.mkdtemp(prefix="tensorgc-oom-")
    os.makedirs(directory, exist_ok=True)
    free, total = torch.cuda.mem_get_info()
    torch.cuda.set_per_process_memory_fraction(
        min(1.0, (torch.cuda.memory_reserved() + args.budget_gb * (1 << 30)) / total))
    tensorgc.record_memory_history(max_entries=100000)
    off = tensorgc.on_oom(directory)
    gc.disable()  # the mistake
    steps = 0
    try:
        while True:
            Step(torch.empty(128 << 20, dtype=torch.uint8, device=device))
            steps += 1
    except torch.cuda.OutOfMemoryError:
        print(f"OutOfMemoryError after {steps} steps")
    finally:
        gc.enable()
        off()
        tensorgc.record_memory_history(enabled=None)
        torch.cuda.set_per_process_memory_fraction(1.0)
    autopsy = sorted(d for d in os.listdir(directory) if d.startswith("oom-"))
    if not autopsy:
        print(f"oom_autopsy: no autopsy written in {directory}", file=sys.stderr)
        return 1
    path = os.path.join(directory, autopsy[0])
    print(f"autopsy: {path}")
    for name in sorted(os.listdir(path)):
        print(f"  {name:20s} {os.path.getsize(os.path.join(path, name)):>12,} bytes")
    with open(os.path.join(path, "gc.txt")) as f:
        print("\n" + "".join(f.readlines()[:4]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
