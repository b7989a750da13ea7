"""The ``tensorgc`` command (console script; also ``python -m tensorgc``).

    tensorgc stats SNAP                      what a snapshot file holds, per device (and by
                                             category at the peak, with categorize's marks)
    tensorgc timeline SNAP -o out.html       the Active Memory Timeline, self-contained HTML
    tensorgc segments SNAP -o out.html       the segment map at an event (--at N) or OOM (--oom)
    tensorgc trace SNAP                      the allocator trace as text, with stacks
    tensorgc compare A B                     segments and blocks only in A or only in B

Snapshot files are read with tensorgc.load_snapshot (no code from the file runs). Exit codes:
0 success, 1 an unreadable or invalid input (the message says why), 2 bad usage.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from .reporter import readable_size as R


def _stats(args) -> int:
    from . import allocator
    from .timeline import _text, categories_at_peak

    snap = _load(args, args.snapshot)
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
            actions = Counter(_text(e.get("action")) for e in trace)
            out.append(f"trace cuda:{dev}: " + ", ".join(f"{a} {n}" for a, n in actions.most_common()))
            line = categories_at_peak(snap, dev)
            if line:
                out.append(f"  categories {line}")
    print("\n".join(out))
    return 0


PROGRESS_BYTES = 32 << 20  # inputs larger than this report progress (on a terminal)


def _progress(args, msg):
    """A progress line on stderr, only for large inputs and only when stderr is a terminal."""
    paths = [getattr(args, k) for k in ("snapshot", "a", "b") if getattr(args, k, None)]
    try:
        large = any(os.path.getsize(p) > PROGRESS_BYTES for p in paths)
    except OSError:
        large = False
    if large and sys.stderr.isatty():
        print(f"tensorgc {args.command}: {msg}", file=sys.stderr, flush=True)


def _load(args, path):
    from .snapshot import load_snapshot

    _progress(args, f"reading {path} ...")
    snap = load_snapshot(path, max_bytes=args.max_bytes)
    _progress(args, f"read {sum(len(t) for t in snap['device_traces']):,} trace entries")
    return snap


def _write_page(path, page) -> int:
    """Writes the page atomically (see snapshot.atomic_write)."""
    from .snapshot import atomic_write

    out = os.path.abspath(path)
    atomic_write(out, lambda f: f.write(page))
    print(f"{out}: {len(page.encode()):,} bytes", file=sys.stderr)
    return 0


def _timeline(args) -> int:
    from .timeline import _text, timeline_html

    snap = _load(args, args.snapshot)
    _progress(args, "replaying the trace and drawing ...")
    # _text: a file name that is not UTF-8 decodes to surrogates, which the page cannot hold
    page = timeline_html(snap, device=args.device, detail=args.detail,
                         title=f"Active memory timeline of "
                               f"{_text(os.path.basename(args.snapshot))}, cuda:{args.device}")
    return _write_page(args.output, page)


def _segments(args) -> int:
    from .segments import segments_html

    if args.at is not None and args.oom is not None:
        raise ValueError("give --at or --oom, not both")
    snap = _load(args, args.snapshot)
    _progress(args, "reconstructing the segments ...")
    page = segments_html(snap, device=args.device, at=args.at, oom=args.oom)
    return _write_page(args.output, page)


def _frames(entry, limit):
    from .timeline import _frame_lines

    return _frame_lines(entry, limit)


def _hex(v):
    return f"{v:#x}" if isinstance(v, int) else "?"


def _trace(args) -> int:
    from .timeline import _text

    if args.device < 0:  # traces[-1] would be the last device's, printed as cuda:-1
        raise ValueError(f"device must be an int >= 0, not {args.device}")
    snap = _load(args, args.snapshot)
    traces = snap["device_traces"]
    if args.device >= len(traces) or not traces[args.device]:
        print(f"no trace for cuda:{args.device} in {args.snapshot} (recording was off, or "
              "another device)", file=sys.stderr)
        return 1
    out = sys.stdout
    active = 0
    for i, e in enumerate(traces[args.device]):
        if args.limit and i >= args.limit:
            print(f"... {len(traces[args.device]) - i:,} more entries (--limit 0 for all)", file=out)
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
        for fr in _frames(e, args.frames):
            print(f"{'':>10s}    {fr}", file=out)
    return 0


def _compare(args) -> int:
    from .timeline import _text

    a = _load(args, args.a)
    b = _load(args, args.b)

    def segs(s):
        return {(g.get("device"), g.get("address"), g.get("total_size")): g for g in s["segments"]}

    def blocks(s):
        out = {}
        for g in s["segments"]:
            for k in g.get("blocks", []):
                if k.get("state") == "active_allocated":
                    out[(g.get("device"), k.get("address"), k.get("size"))] = k
        return out

    sa, sb, ba, bb = segs(a), segs(b), blocks(a), blocks(b)
    lines = []
    for title, x, y in (("only in A", sa, sb), ("only in B", sb, sa)):
        only = [k for k in x if k not in y]
        lines.append(f"segments {title} ({args.a if title.endswith('A') else args.b}): {len(only)}, "
                     f"{R(sum(k[2] or 0 for k in only))}")
        for k in sorted(only, key=lambda k: -(k[2] or 0))[: args.top]:
            lines.append(f"  cuda:{k[0]} {_hex(k[1])} {R(k[2] or 0)} "
                         f"({_text(x[k].get('segment_type', '?'))} pool)")
    for title, x, y in (("only in A", ba, bb), ("only in B", bb, ba)):
        only = [k for k in x if k not in y]
        lines.append(f"allocated blocks {title}: {len(only)}, {R(sum(k[2] or 0 for k in only))}")
        for k in sorted(only, key=lambda k: -(k[2] or 0))[: args.top]:
            lines.append(f"  cuda:{k[0]} {_hex(k[1])} {R(k[2] or 0)}")
            for fr in _frames(x[k], args.frames):
                lines.append(f"      {fr}")
    print("\n".join(lines))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tensorgc", description="tensorgc: where your GPU memory is.")
    from ._version import __version__
    p.add_argument("--version", action="version", version=f"tensorgc {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    s = sub.add_parser("stats", help="what a snapshot file holds, per device",
                       description="Summarise a CUDA allocator snapshot (torch.cuda.memory."
                                   "_dump_snapshot or tensorgc.dump_snapshot): segments, "
                                   "allocated, fragmentation, trace actions, and the peak's "
                                   "bytes by category (parameter, grad, optimizer state, "
                                   "activation, temporary, other) when the snapshot has "
                                   "tensorgc.categorize's marks or torch's optimizer "
                                   "annotations.")
    s.add_argument("snapshot", help="the snapshot file (a pickle; read without running code)")
    s.add_argument("--max-bytes", type=int, default=None,
                   help="refuse larger files (default 8 GiB)")
    t = sub.add_parser("timeline", help="the Active Memory Timeline as a self-contained HTML page",
                       description="Replay a snapshot's allocator trace into the Active Memory "
                                   "Timeline: the largest allocations as bands (hover: size and "
                                   "stack), the rest summarized, OOMs marked; with "
                                   "tensorgc.categorize's marks in the file, bands coloured by "
                                   "category and the categories over time. Opens offline.")
    t.add_argument("snapshot", help="the snapshot file (a pickle; read without running code)")
    t.add_argument("-o", "--output", required=True, help="the HTML file to write")
    t.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    t.add_argument("--detail", type=int, default=300,
                   help="how many of the largest allocations get their own band (default 300)")
    t.add_argument("--max-bytes", type=int, default=None, help="refuse larger files (default 8 GiB)")
    sg = sub.add_parser("segments", help="the segment map at an event or an OOM, as HTML",
                        description="Reconstruct the allocator's segments and live allocations "
                                    "at any trace entry (default: the end) or just before an OOM, "
                                    "and draw them: one row per segment, hover for stacks.")
    sg.add_argument("snapshot", help="the snapshot file (a pickle; read without running code)")
    sg.add_argument("-o", "--output", required=True, help="the HTML file to write")
    sg.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    sg.add_argument("--at", type=int, default=None, help="the state after this many trace entries")
    sg.add_argument("--oom", type=int, nargs="?", const=0, default=None,
                    help="the state just before the N-th OOM (default the first; -1 the last)")
    sg.add_argument("--max-bytes", type=int, default=None, help="refuse larger files (default 8 GiB)")
    tr = sub.add_parser("trace", help="the allocator trace as text, with stacks",
                        description="Print one device's trace entries in order: action, size, "
                                    "address, the active bytes after it, and the top frames.")
    tr.add_argument("snapshot", help="the snapshot file (a pickle; read without running code)")
    tr.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    tr.add_argument("--frames", type=int, default=3, help="frames per entry (default 3)")
    tr.add_argument("--limit", type=int, default=10000, help="entries to print (0: all)")
    tr.add_argument("--max-bytes", type=int, default=None, help="refuse larger files (default 8 GiB)")
    c = sub.add_parser("compare", help="segments and blocks only in A or only in B",
                       description="Compare two snapshots: the segments and the allocated blocks "
                                   "found in only one of them, largest first, with stacks.")
    c.add_argument("a", help="the first snapshot")
    c.add_argument("b", help="the second snapshot")
    c.add_argument("--top", type=int, default=20, help="rows per section (default 20)")
    c.add_argument("--frames", type=int, default=3, help="frames per block (default 3)")
    c.add_argument("--max-bytes", type=int, default=None, help="refuse larger files (default 8 GiB)")
    args = p.parse_args(argv)
    if args.command is None:
        p.print_help(sys.stderr)
        return 2
    from .snapshot import DEFAULT_MAX_BYTES, SnapshotError

    if getattr(args, "max_bytes", 0) is None:
        args.max_bytes = DEFAULT_MAX_BYTES
    try:
        return {"stats": _stats, "timeline": _timeline, "segments": _segments, "trace": _trace,
                "compare": _compare}[args.command](args)
    except (SnapshotError, ValueError, TypeError, OSError) as exc:
        print(f"tensorgc {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
