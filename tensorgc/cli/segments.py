"""``tensorgc segments SNAP -o out.html``: the segment map at an event (--at N) or an OOM (--oom).
"""
from __future__ import annotations

import argparse

from ..allocator._lean import action_counts
from .base import (SNAPSHOT_HELP, UsageError, add_device, add_max_bytes, check_output,
                   count_option, device_of, load, progress, write_page)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sg = sub.add_parser("segments", help="the segment map at an event or an OOM, as HTML",
                        description="Reconstruct the allocator's segments and live allocations "
                                    "at any trace entry (default: the end) or just before an OOM, "
                                    "and draw them: one row per segment, hover for stacks.")
    sg.add_argument("snapshot", help=SNAPSHOT_HELP)
    sg.add_argument("-o", "--output", required=True,
                    help="the HTML file to write (a regular file; - for standard output)")
    add_device(sg)
    sg.add_argument("--at", type=count_option("--at"), default=None, metavar="N",
                    help="the state after this many trace entries")
    sg.add_argument("--oom", type=int, nargs="?", const=0, default=None, metavar="N",
                    help="the state just before the N-th OOM (default the first; -1 the last)")
    add_max_bytes(sg)


def run(args: argparse.Namespace) -> int:
    from ..allocator.segmap import segments_html

    if args.at is not None and args.oom is not None:
        raise UsageError("give --at or --oom, not both")
    check_output(args.output, [args.snapshot])
    snap = load(args, args.snapshot)
    index = device_of(args, snap)
    traces = snap["device_traces"]
    trace = traces[index] if index < len(traces) else []
    if args.at is not None and args.at > len(trace):
        raise UsageError(f"--at {args.at} is outside the trace of cuda:{index}, which has "
                         f"{len(trace):,} entries (give 0 to {len(trace):,})")
    if args.oom is not None:
        n = action_counts(trace).get("oom", 0)
        if not n:
            raise UsageError(f"--oom: the trace of cuda:{index} has no OOM event")
        if not -n <= args.oom < n:
            raise UsageError(f"--oom {args.oom}: the trace of cuda:{index} has {n} OOM "
                             f"event(s) (give 0 to {n - 1}, or -1 for the last)")
    progress(args, "reconstructing the segments ...")
    page = segments_html(snap, device=index, at=args.at, oom=args.oom)
    return write_page(args.output, page, [args.snapshot])
