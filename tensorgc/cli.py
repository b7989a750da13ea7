"""The ``tensorgc`` command (console script; also ``python -m tensorgc``).

    tensorgc stats SNAP                      what a snapshot file holds, per device
    tensorgc timeline SNAP -o out.html       the Active Memory Timeline, self-contained HTML

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


def _timeline(args) -> int:
    import os
    import tempfile

    from .snapshot import load_snapshot
    from .timeline import timeline_html

    snap = load_snapshot(args.snapshot, max_bytes=args.max_bytes)
    page = timeline_html(snap, device=args.device, detail=args.detail,
                         title=f"Active memory timeline of {os.path.basename(args.snapshot)}, "
                               f"cuda:{args.device}")
    out = os.path.abspath(args.output)
    fd, tmp = tempfile.mkstemp(prefix=".tensorgc-", suffix=".html", dir=os.path.dirname(out))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, out)
    print(f"{out}: {len(page.encode()):,} bytes", file=sys.stderr)
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
    t = sub.add_parser("timeline", help="the Active Memory Timeline as a self-contained HTML page",
                       description="Replay a snapshot's allocator trace into the Active Memory "
                                   "Timeline: the largest allocations as bands (hover: size and "
                                   "stack), the rest summarized, OOMs marked. Opens offline.")
    t.add_argument("snapshot", help="the snapshot file (a pickle; read without running code)")
    t.add_argument("-o", "--output", required=True, help="the HTML file to write")
    t.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    t.add_argument("--detail", type=int, default=300,
                   help="how many of the largest allocations get their own band (default 300)")
    t.add_argument("--max-bytes", type=int, default=None, help="refuse larger files (default 8 GiB)")
    args = p.parse_args(argv)
    if args.command is None:
        p.print_help(sys.stderr)
        return 2
    from .snapshot import DEFAULT_MAX_BYTES, SnapshotError

    if getattr(args, "max_bytes", 0) is None:
        args.max_bytes = DEFAULT_MAX_BYTES
    try:
        return {"stats": _stats, "timeline": _timeline}[args.command](args)
    except (SnapshotError, ValueError, TypeError, OSError) as exc:
        print(f"tensorgc {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
