"""``tensorgc trace SNAP``: one device's allocator trace as text, with stacks.
"""
from __future__ import annotations

import argparse
import sys

from .._common.units import readable_size as R
from .base import (SNAPSHOT_HELP, add_device, add_max_bytes, count_option, device_of,
                   frame_lines, load, shown_path)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tr = sub.add_parser("trace", help="the allocator trace as text, with stacks",
                        description="Print one device's trace entries in order: action, size, "
                                    "address, the active bytes after it, and the top frames.")
    tr.add_argument("snapshot", help=SNAPSHOT_HELP)
    add_device(tr)
    tr.add_argument("--frames", type=count_option("--frames"), default=3, metavar="N",
                    help="frames per entry (default 3)")
    tr.add_argument("--limit", type=count_option("--limit"), default=10000, metavar="N",
                    help="entries to print (0: all)")
    add_max_bytes(tr)


def run(args: argparse.Namespace) -> int:
    from ..allocator.timeline import _text

    snap = load(args, args.snapshot)
    index = device_of(args, snap)
    traces = snap["device_traces"]
    if index >= len(traces) or not traces[index]:
        print(f"tensorgc trace: no trace for cuda:{index} in {shown_path(args.snapshot)} "
              "(recording was off: tensorgc.record_memory_history() records one)",
              file=sys.stderr)
        return 1
    trace = traces[index]
    out = sys.stdout
    active = 0
    for i, e in enumerate(trace):
        if args.limit and i >= args.limit:
            print(f"... {len(trace) - i:,} more entries (--limit 0 for all)", file=out)
            break
        a = _text(e.get("action"))
        size = int(e.get("size", 0) or 0)
        if a == "alloc":
            active += size
        elif a == "free_requested":
            active -= size
        line = f"{i:>9,} {a:<15s} {R(size):>10s} at {int(e.get('addr', 0) or 0):#x}  active {R(max(active, 0))}"
        if a == "oom":
            line = f"{i:>9,} OOM            device free {R(e.get('device_free', 0) or 0)}"
        print(line, file=out)
        for fr in frame_lines(e, args.frames):
            print(f"{'':>10s}    {fr}", file=out)
    return 0
