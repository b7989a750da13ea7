"""The ``tensorgc`` command (console script; also ``python -m tensorgc``).

    tensorgc stats SNAP          what a snapshot file holds, per device

Snapshot files are read with tensorgc.load_snapshot (no code from the file runs). Exit codes:
0 success, 1 an unreadable or invalid input (the message says why), 2 bad usage.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter

from .reporter import readable_size as R


def _stats(args) -> int:
    from . import allocator
    from .snapshot import load_snapshot

    snap = load_snapshot(args.snapshot, max_bytes=args.max_bytes)
    segs = snap["segments"]
    _, totals, unseen = allocator.attribute(segs, [])
    out = [f"snapshot {args.snapshot}: {len(segs)} segments, "
           f"{sum(len(s.get('blocks', ())) for s in segs)} blocks, "
           f"{sum(len(t) for t in snap['device_traces'])} trace entries"]
    for dev in sorted(totals):
        t = totals[dev]
        out.append(f"cuda:{dev}")
        out.append(f"  reserved        {R(t['reserved']):>10s} in {t['segments']} segments")
        out.append(f"  allocated       {R(t['allocated']):>10s} in {t['allocated_blocks']} blocks "
                   f"(requested {R(t['requested'])}, rounding +{R(t['allocated'] - t['requested'])})")
        out.append(f"  inactive split  {R(t['inactive_split']):>10s} (fragmentation)")
        out.append(f"  free segments   {R(t['inactive_whole']):>10s} (releasable)")
        out.append(f"  pending free    {R(t['pending_free']):>10s}")
        out.append(f"  with a stack    {R(t['stack_attributed']):>10s} of the allocated bytes")
    for dev, trace in enumerate(snap["device_traces"]):
        if trace:
            actions = Counter(str(e.get("action")) for e in trace)
            out.append(f"trace cuda:{dev}: " + ", ".join(f"{a} {n}" for a, n in actions.most_common()))
    print("\n".join(out))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tensorgc", description="tensorgc: where your GPU memory is.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    s = sub.add_parser("stats", help="what a snapshot file holds, per device",
                       description="Summarise a CUDA allocator snapshot (torch.cuda.memory."
                                   "_dump_snapshot or tensorgc.dump_snapshot): segments, "
                                   "allocated, fragmentation, trace actions.")
    s.add_argument("snapshot", help="the snapshot file (a pickle; read without running code)")
    s.add_argument("--max-bytes", type=int, default=None,
                   help="refuse larger files (default 8 GiB)")
    args = p.parse_args(argv)
    if args.command is None:
        p.print_help(sys.stderr)
        return 2
    from .snapshot import DEFAULT_MAX_BYTES, SnapshotError

    if getattr(args, "max_bytes", 0) is None:
        args.max_bytes = DEFAULT_MAX_BYTES
    try:
        return {"stats": _stats}[args.command](args)
    except (SnapshotError, ValueError, TypeError) as exc:
        print(f"tensorgc {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
