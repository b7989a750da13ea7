"""The ``tensorgc`` command (console script; also ``python -m tensorgc``).

    tensorgc stats SNAP                      what a snapshot file holds, per device (and by
                                             category at the peak, with categorize's marks)
    tensorgc stats DIR | SNAP SNAP...        the ranks of a job side by side: peak, reserved,
                                             allocations, OOMs; who peaks highest, who OOMs first
    tensorgc timeline SNAP -o out.html       memory_viz's three views in one self-contained page
    tensorgc timeline A B --compare -o out   B's page with A's curve, and what is alive in B only
    tensorgc timeline DIR -o out.html        one page with every rank's curve on the same axes
    tensorgc segments SNAP -o out.html       the segment map at an event (--at N) or OOM (--oom)
    tensorgc flamegraph SNAP -o out.svg      the segments' blocks by allocation stack, as a
                                             flame graph (SVG, or HTML for .html; --by memory,
                                             --compare OTHER), drawn offline
    tensorgc trace SNAP                      the allocator trace as text, with stacks
    tensorgc compare A B                     segments and blocks only in A or only in B

Snapshot files are read with tensorgc.load_snapshot (no code from the file runs; regular files
only, ``-`` for standard input). ``--device`` takes what the Python API takes: ``0``, ``cuda:0``
or ``cuda`` (the first device the snapshot holds). Exit codes: 0 success, 1 an unreadable or
invalid input or an output that cannot be written (the message says why), 2 bad usage (an option
out of range, a device the snapshot does not hold, an output directory that does not exist).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from .._common.devices import SNAPSHOT_WHY, DeviceError, cuda_index, snapshot_device
from .._common.errors import OutputError, SnapshotError
from ..allocator._lean import action_counts
from .._common.units import readable_size as R

__all__ = ["main"]

Snapshot = Dict[str, Any]

STDIN = "-"  # the snapshot argument that reads standard input
STDOUT = "-"  # the --output that writes standard output
PROGRESS_BYTES = 32 << 20  # inputs larger than this report progress (on a terminal)


class UsageError(Exception):
    """Bad usage found after parsing (exit code 2): the message names the option."""


# ---------------------------------------------------------------------- option types


def _count(option: str) -> Callable[[str], int]:
    """argparse type: an int >= 0 (argparse's message names the option)."""
    def count(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"{text} is negative; {option} takes a number >= 0")
        return v
    count.__name__ = "count"
    return count


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def _size(text: str) -> int:
    """argparse type of --max-bytes: bytes, with an optional binary unit (16G, 512MiB)."""
    t = text.strip().lower()
    digits = len(t) - len(t.lstrip("0123456789"))
    unit = t[digits:].strip()
    if not digits or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes, e.g. 1000000, "
                                         "or a number with a unit K, M, G or T (16G)")
    v = int(t[:digits]) * _UNITS[unit]
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text}: the limit must be at least 1 byte")
    return v


def _device_option(text: str) -> str:
    """argparse type of --device: checked now (0, cuda:0, cuda), resolved against the file
    once it is read. The message names the option (argparse adds it)."""
    try:
        cuda_index(text, "--device", SNAPSHOT_WHY)
    except DeviceError as exc:
        msg = str(exc)
        raise argparse.ArgumentTypeError(msg[len("--device "):] if msg.startswith("--device ")
                                         else msg) from None
    return text


# ---------------------------------------------------------------------- input and output


def _progress(args: argparse.Namespace, msg: str) -> None:
    """A progress line on stderr, only for large inputs and only when stderr is a terminal."""
    paths = [getattr(args, k) for k in ("snapshot", "a", "b") if getattr(args, k, None)]
    try:
        large = any(os.path.getsize(p) > PROGRESS_BYTES for p in paths if p != STDIN)
    except OSError:
        large = False
    if large and sys.stderr.isatty():
        print(f"tensorgc {args.command}: {msg}", file=sys.stderr, flush=True)


def _limit_hint(args: argparse.Namespace) -> str:
    return "give a larger --max-bytes to read it"


def _load(args: argparse.Namespace, path: str, lean: Optional[bool] = None) -> Snapshot:
    """The snapshot at ``path`` (standard input for "-"), checked; messages name --max-bytes.
    lean: as load_snapshot's (the timeline streams every file: it reads the trace's columns)."""
    from ..allocator.snapshot import _load as load_file, _parse_bytes, _read_stream

    _progress(args, f"reading {path} ...")
    if path == STDIN:
        data = _read_stream(sys.stdin.buffer, "<stdin>", args.max_bytes, 0, _limit_hint(args))
        snap: Snapshot = _parse_bytes(data, "<stdin>")
    else:
        snap = load_file(path, args.max_bytes, _limit_hint(args),
                         "give - as the file to read standard input", lean=lean)
    _progress(args, f"read {sum(len(t) for t in snap['device_traces']):,} trace entries")
    return snap


def _shown_path(path: str) -> str:
    return "standard input" if path == STDIN else path


def _device(args: argparse.Namespace, snap: Snapshot) -> int:
    """The device index --device names in this snapshot; UsageError when it holds no such
    device (the message lists those it holds)."""
    try:
        return snapshot_device(snap, args.device, "--device", _shown_path(args.snapshot))
    except DeviceError as exc:
        raise UsageError(str(exc)) from None


def _sources(inputs: Sequence[str]) -> List[Union[str, int]]:
    """The inputs as output_target compares them: standard input ("-") by its descriptor, so
    that ``-o snap.pickle < snap.pickle`` is refused as the input itself (it replaced the
    snapshot with the page)."""
    return [0 if p == STDIN else p for p in inputs]


def _output(path: str, inputs: Sequence[str] = ()) -> str:
    """The absolute output path, checked before any work: its directory exists, and it is a
    file that may be replaced (snapshot.output_target: never a device, FIFO, socket, directory
    or one of the inputs). ``-``: standard output."""
    from ..allocator.snapshot import output_target

    if path == STDOUT:
        return path
    out = os.path.abspath(path)
    directory = os.path.dirname(out)
    if not os.path.exists(directory):
        raise UsageError(f"cannot write {out}: directory {directory} does not exist")
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {out}: {directory} is not a directory")
    try:
        output_target(path, _sources(inputs))  # as given: "pages/" too
    except OutputError as exc:
        msg = str(exc)
        if "tensorgc writes only regular files" in msg:
            msg += " (-o - writes the page to standard output)"
        raise UsageError(msg) from None
    return out


class _WriteFailed(Exception):
    """An output that could not be written (exit code 1), with the real path in its message."""


def _write_page(path: str, page: str, inputs: Sequence[str] = ()) -> int:
    """Writes the page atomically (see snapshot.atomic_write), or to standard output for -."""
    from ..allocator.snapshot import atomic_write, write_failure

    out = _output(path, inputs)
    if out == STDOUT:
        try:
            sys.stdout.buffer.write(page.encode())
            sys.stdout.flush()
        except OSError as exc:
            raise _WriteFailed(f"cannot write the page to standard output: "
                               f"{exc.strerror or exc}") from None
        return 0
    try:
        atomic_write(out, lambda f: f.write(page), inputs=_sources(inputs))
    except OutputError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        why = exc.strerror or write_failure(exc)
        left = getattr(exc, "_tensorgc_left", None)
        raise _WriteFailed(f"cannot write {out}: {why}" + (f"; {left}" if left else "")) from None
    print(f"{out}: {len(page.encode()):,} bytes", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- commands


# ---------------------------------------------------------------------- many ranks


def _regular(entry: "os.DirEntry[str]") -> bool:
    """A directory entry that is a regular file (through a link). A link that loops or whose
    stat fails otherwise is skipped like any other entry that is not a file: is_file() raises
    for it (ELOOP), which would stop the whole directory for one bad link."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _many(args: argparse.Namespace) -> Optional[List[str]]:
    """The snapshot files of a multi-rank command (several files, or a directory of them),
    ordered by the rank in their names; None for one file (the single-file command). A
    directory contributes its regular files named *.pickle (not hidden ones: atomic_write's
    temp files). SnapshotError for a directory without snapshots; UsageError for standard input
    among several, or more than MAX_FILES files."""
    from ..distributed.ranks_page import MAX_FILES, SCAN_MAX, order_files

    given: List[str] = args.snapshot
    if len(given) == 1 and (given[0] == STDIN or not os.path.isdir(given[0])):
        args.snapshot = given[0]
        return None
    if STDIN in given:
        raise UsageError("standard input (-) is read alone, not among several snapshots")
    files: List[str] = []
    seen = set()
    for path in given:
        if os.path.isdir(path):
            found = []
            try:
                with os.scandir(path) as it:
                    for n, entry in enumerate(it):
                        if n >= SCAN_MAX:
                            raise UsageError(f"{path} holds more than {SCAN_MAX:,} entries: give "
                                             "the snapshot files, or a directory of them")
                        if entry.name.endswith(".pickle") and not entry.name.startswith(".") \
                                and _regular(entry):
                            found.append(os.path.join(path, entry.name))
                        if len(found) > MAX_FILES:
                            break
            except OSError as exc:
                raise UsageError(f"cannot list {path}: {exc.strerror or exc}") from None
            if not found:  # exit code 1, as for any input that cannot be read
                raise SnapshotError(f"{path}: is a directory, not a regular file, and holds no "
                                    "snapshot files (*.pickle) to read side by side")
        else:
            found = [path]  # a missing or unreadable file is the loader's to report
        for f in found:
            key = os.path.realpath(f)
            if key not in seen:
                seen.add(key)
                files.append(f)
        if len(files) > MAX_FILES:
            raise UsageError(f"more than {MAX_FILES} snapshot files: give fewer (one a rank)")
    return order_files(files)


def _rank_rows(args: argparse.Namespace, files: List[str], device: Optional[int],
               columns: int, first: bool = False) -> List[Any]:
    """Each file loaded, reduced to its rows (tensorgc.ranks_page.RankSnapshot) and dropped."""
    from ..distributed.ranks_page import _label_text, rank_snapshots

    rows = []
    for path in files:
        args.snapshot = path  # for the progress line
        snap = _load(args, path, lean=True)  # read through its columns
        rows.extend(rank_snapshots(snap, path, device, columns, first))
        del snap
    # two files with the same rank in their names (a rerun's beside the old one) would be two
    # rows called "rank 1" that the pointers cannot tell apart: each such label gets its file
    paths: Dict[str, Set[str]] = {}
    for r in rows:
        paths.setdefault(r.label, set()).add(r.path)
    for r in rows:
        if len(paths[r.label]) > 1:
            r.label = f"{r.label} ({_label_text(os.path.basename(r.path), 60)})"
    return rows


def _many_what(given: List[str]) -> str:
    from ..distributed.ranks_page import _label_text

    return ", ".join(_label_text(g) for g in given[:4]) + (" ..." if len(given) > 4 else "")


def _stats(args: argparse.Namespace) -> int:
    from .. import allocator
    from ..allocator.timeline import _text, categories_at_peak

    given = list(args.snapshot)
    files = _many(args)
    if files is not None:
        from ..distributed.ranks_page import stats_text

        print(stats_text(_rank_rows(args, files, None, 1), _many_what(given)))
        return 0
    snap = _load(args, args.snapshot)
    segs = snap["segments"]
    _, totals, unseen = allocator.attribute(segs, [])
    out = [f"snapshot {_text(_shown_path(args.snapshot))}: {len(segs)} segments, "
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
            actions: Counter[str] = Counter()
            for action, n in action_counts(trace).items():  # a LeanTrace counts its column
                actions[_text(action)] += n
            out.append(f"trace cuda:{dev}: " + ", ".join(f"{a} {n}" for a, n in actions.most_common()))
            line = categories_at_peak(snap, dev)
            if line:
                out.append(f"  categories {line}")
    print("\n".join(out))
    return 0


def _timeline(args: argparse.Namespace) -> int:
    from ..allocator.timeline import _text, timeline_html

    if args.compare:
        return _timeline_compare(args)
    given = list(args.snapshot)
    files = _many(args)
    inputs = files if files is not None else [args.snapshot]
    _output(args.output, inputs)  # before reading what may be gigabytes
    if files is not None:
        from ..distributed.ranks_page import COLUMNS, _label_text, ranks_html

        # "cuda" (the default): each file's first device; an index: that device in every file
        index = cuda_index(args.device, "--device", SNAPSHOT_WHY)
        rows = _rank_rows(args, files, index, COLUMNS if len(files) <= 64 else COLUMNS // 2,
                          first=True)
        if not any(r.device is not None for r in rows):
            # as for one file: a device no snapshot holds is a usage error, not an empty page
            what = "a CUDA device" if index is None else f"cuda:{index}"
            notes = "; ".join(f"{_label_text(os.path.basename(r.path), 60)}: {r.note}"
                              for r in rows[:4] if r.note)
            raise UsageError(f"--device {args.device}: none of the {len(files)} snapshots holds "
                             f"{what} ({notes}{' ...' if len(rows) > 4 else ''})")
        live = len({r.path for r in rows})
        page = ranks_html(rows, f"Active memory of {live} rank snapshot(s): {_many_what(given)}")
        return _write_page(args.output, page, inputs)
    snap = _load(args, args.snapshot, lean=True)
    index = _device(args, snap)
    _progress(args, "replaying the trace and drawing ...")
    name = "standard input" if args.snapshot == STDIN else os.path.basename(args.snapshot)
    # _text: a file name that is not UTF-8 decodes to surrogates, which the page cannot hold
    page = timeline_html(snap, device=index, detail=args.detail,
                         title=f"Active memory timeline of {_text(name)}, cuda:{index}")
    return _write_page(args.output, page, inputs)


def _timeline_compare(args: argparse.Namespace) -> int:
    """``tensorgc timeline A B --compare``: B's page, A's curve on its axis, and what is alive
    at the end of B and not of A."""
    from ..allocator.timeline import _text, timeline_html

    given = list(args.snapshot)
    if len(given) != 2 or any(os.path.isdir(g) for g in given):
        raise UsageError("--compare takes two snapshot files: the baseline A, then B")
    if given[0] == STDIN and given[1] == STDIN:
        raise UsageError("standard input (-) can be read once: give it for A or for B")
    _output(args.output, given)
    args.snapshot = given[0]
    a = _load(args, given[0], lean=True)
    args.snapshot = given[1]
    b = _load(args, given[1], lean=True)
    index = _device(args, b)
    _progress(args, "replaying both traces and drawing ...")
    names = ["standard input" if g == STDIN else os.path.basename(g) for g in given]
    page = timeline_html(b, device=index, detail=args.detail, baseline=a,
                         title=f"{_text(names[1])} compared with {_text(names[0])}, "
                               f"cuda:{index}")
    return _write_page(args.output, page, given)


def _segments(args: argparse.Namespace) -> int:
    from ..allocator.segmap import segments_html

    if args.at is not None and args.oom is not None:
        raise UsageError("give --at or --oom, not both")
    _output(args.output, [args.snapshot])
    snap = _load(args, args.snapshot)
    index = _device(args, snap)
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
    _progress(args, "reconstructing the segments ...")
    page = segments_html(snap, device=index, at=args.at, oom=args.oom)
    return _write_page(args.output, page, [args.snapshot])


def _flamegraph(args: argparse.Namespace) -> int:
    from ..allocator import flamegraph as fg
    from ..allocator.timeline import _text

    inputs = [args.snapshot] + ([args.compare] if args.compare is not None else [])
    _output(args.output, inputs)
    fmt = args.format or ("html" if args.output.lower().endswith((".html", ".htm")) else "svg")
    snap = _load(args, args.snapshot)
    name = _text(_shown_path(args.snapshot))
    if args.compare is not None:
        if args.by != "segments" or args.device is not None:
            raise UsageError("--compare draws every segment of both files: no --by, no --device")
        other = _load(args, args.compare)
        page = fg.compare(snap, other, format=fmt, title=f"Segments only in {name} or only in "
                                                         f"{_text(_shown_path(args.compare))}")
    else:
        index = None if args.device is None else _device(args, snap)
        where = "every device" if index is None else f"cuda:{index}"
        draw = fg.segments if args.by == "segments" else fg.memory
        what = "Allocator segments" if args.by == "segments" else "CUDA memory"
        page = draw(snap, device=index, format=fmt,
                    title=f"{what} of {name} ({where}) by allocation stack")
    return _write_page(args.output, page, inputs)


def _frames(entry: Dict[str, Any], limit: int) -> List[str]:
    from ..allocator.timeline import _frame_lines

    return _frame_lines(entry, limit)


def _hex(v: object) -> str:
    return f"{v:#x}" if isinstance(v, int) else "?"


def _trace(args: argparse.Namespace) -> int:
    from ..allocator.timeline import _text

    snap = _load(args, args.snapshot)
    index = _device(args, snap)
    traces = snap["device_traces"]
    if index >= len(traces) or not traces[index]:
        print(f"tensorgc trace: no trace for cuda:{index} in {_shown_path(args.snapshot)} "
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
        for fr in _frames(e, args.frames):
            print(f"{'':>10s}    {fr}", file=out)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from ..allocator.timeline import _text

    if args.a == STDIN and args.b == STDIN:
        raise UsageError("standard input (-) can be read once: give it for A or for B")
    a = _load(args, args.a)
    b = _load(args, args.b)
    Key = Tuple[Any, Any, Any]

    def segs(s: Snapshot) -> Dict[Key, Dict[str, Any]]:
        return {(g.get("device"), g.get("address"), g.get("total_size")): g for g in s["segments"]}

    def blocks(s: Snapshot) -> Dict[Key, Dict[str, Any]]:
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
        name = _text(_shown_path(args.a if title.endswith("A") else args.b))
        lines.append(f"segments {title} ({name}): {len(only)}, "
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


COMMANDS: Dict[str, Callable[[argparse.Namespace], int]] = {
    "stats": _stats, "timeline": _timeline, "segments": _segments, "trace": _trace,
    "compare": _compare, "flamegraph": _flamegraph,
}


# ---------------------------------------------------------------------- parser

SNAPSHOT_HELP = "the snapshot file (a pickle; read without running code); - for standard input"
SNAPSHOTS_HELP = ("the snapshot file (a pickle; read without running code; - for standard "
                  "input); or several, or a directory of them (its *.pickle files), one a rank: "
                  "the ranks side by side, ordered by the rank in the file names")
DEVICE_HELP = ("the CUDA device: an index (0), cuda:N, or cuda for the first device the "
               "snapshot holds (default)")
MAX_BYTES_HELP = "refuse larger files; bytes, or with a unit: 16G (default 8G)"


def _parser() -> argparse.ArgumentParser:
    from .._version import __version__

    p = argparse.ArgumentParser(prog="tensorgc", description="tensorgc: where your GPU memory is.")
    p.add_argument("--version", action="version", version=f"tensorgc {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def max_bytes(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--max-bytes", type=_size, default=None, metavar="N", help=MAX_BYTES_HELP)

    def device(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--device", type=_device_option, default="cuda", metavar="DEVICE",
                        help=DEVICE_HELP)

    s = sub.add_parser("stats", help="what a snapshot file holds, per device",
                       description="Summarise a CUDA allocator snapshot (torch.cuda.memory."
                                   "_dump_snapshot or tensorgc.dump_snapshot): segments, "
                                   "allocated, fragmentation, trace actions, and the peak's "
                                   "bytes by category (parameter, grad, optimizer state, "
                                   "activation, temporary, other) when the snapshot has "
                                   "tensorgc.categorize's marks or torch's optimizer "
                                   "annotations. Given several files or a directory of them "
                                   "(one a rank): one table of the ranks side by side (peak, "
                                   "reserved, allocations, OOMs, the first OOM's time) that "
                                   "points at the rank that peaks highest and the one that "
                                   "runs out of memory first.")
    s.add_argument("snapshot", nargs="+", metavar="SNAPSHOT", help=SNAPSHOTS_HELP)
    max_bytes(s)
    t = sub.add_parser("timeline", help="the timeline page (memory_viz's three views) as one "
                                        "self-contained HTML file",
                       description="Replay a snapshot's allocator trace into one page with "
                                   "memory_viz's three views on one time axis: the Active Memory "
                                   "Timeline (the largest allocations one by one, the rest as an "
                                   "area per category; hover for the stack), the Allocator State "
                                   "History (the segments and blocks after any event) and the "
                                   "Active Cached Segment Timeline. Every allocation coloured by "
                                   "its category where the file tells (tensorgc.categorize's "
                                   "marks, torch's optimizer annotations, the reporter's names). "
                                   "Opens offline. With --compare A B: B's page, A's curve and "
                                   "what is alive in B and not in A. "
                                   "Given several files or a directory of them (one a rank): "
                                   "one page with each rank's active memory on the same axes "
                                   "(wall clock where every trace has times), its peak and "
                                   "OOMs, and a table that points at the rank that peaks "
                                   "highest and the one that runs out of memory first.")
    t.add_argument("snapshot", nargs="+", metavar="SNAPSHOT", help=SNAPSHOTS_HELP)
    t.add_argument("-o", "--output", required=True,
                   help="the HTML file to write (a regular file; - for standard output)")
    device(t)
    t.add_argument("--detail", type=_count("--detail"), default=300, metavar="N",
                   help="how many of the largest allocations in view are drawn one by one "
                        "(default 300; the page has a slider for it)")
    t.add_argument("--compare", action="store_true",
                   help="two snapshots A B: the page of B with A's curve on the same axis, and "
                        "what is alive at the end of B and not of A, by category, name and "
                        "allocation site")
    max_bytes(t)
    sg = sub.add_parser("segments", help="the segment map at an event or an OOM, as HTML",
                        description="Reconstruct the allocator's segments and live allocations "
                                    "at any trace entry (default: the end) or just before an OOM, "
                                    "and draw them: one row per segment, hover for stacks.")
    sg.add_argument("snapshot", help=SNAPSHOT_HELP)
    sg.add_argument("-o", "--output", required=True,
                    help="the HTML file to write (a regular file; - for standard output)")
    device(sg)
    sg.add_argument("--at", type=_count("--at"), default=None, metavar="N",
                    help="the state after this many trace entries")
    sg.add_argument("--oom", type=int, nargs="?", const=0, default=None, metavar="N",
                    help="the state just before the N-th OOM (default the first; -1 the last)")
    max_bytes(sg)
    fl = sub.add_parser("flamegraph", help="the segments' blocks by allocation stack, as a "
                                           "flame graph (SVG or HTML), offline",
                        description="Draw what torch.cuda._memory_viz's segments and memory "
                                    "draw, without downloading flamegraph.pl: the allocator's "
                                    "blocks by the stack that allocated them (stream, segment, "
                                    "block state, frames), self-contained. SVG, or an HTML page "
                                    "where a click on a frame zooms into it (for an output "
                                    "ending with .html, or --format html).")
    fl.add_argument("snapshot", help=SNAPSHOT_HELP)
    fl.add_argument("-o", "--output", required=True,
                    help="the SVG or HTML file to write (a regular file; - for standard output)")
    fl.add_argument("--by", choices=("segments", "memory"), default="segments",
                    help="segments: stream, segment, state, stack (default); memory: every "
                         "segment together, by stream, state, stack")
    fl.add_argument("--format", choices=("svg", "html"), default=None,
                    help="default: html for an output ending with .html, else svg")
    fl.add_argument("--device", type=_device_option, default=None, metavar="DEVICE",
                    help="only this CUDA device's segments (an index, cuda:N); default every "
                         "device's")
    fl.add_argument("--compare", default=None, metavar="OTHER",
                    help="draw the segments only in SNAPSHOT (only_before) or only in OTHER "
                         "(only_after) instead")
    max_bytes(fl)
    tr = sub.add_parser("trace", help="the allocator trace as text, with stacks",
                        description="Print one device's trace entries in order: action, size, "
                                    "address, the active bytes after it, and the top frames.")
    tr.add_argument("snapshot", help=SNAPSHOT_HELP)
    device(tr)
    tr.add_argument("--frames", type=_count("--frames"), default=3, metavar="N",
                    help="frames per entry (default 3)")
    tr.add_argument("--limit", type=_count("--limit"), default=10000, metavar="N",
                    help="entries to print (0: all)")
    max_bytes(tr)
    c = sub.add_parser("compare", help="segments and blocks only in A or only in B",
                       description="Compare two snapshots: the segments and the allocated blocks "
                                   "found in only one of them, largest first, with stacks.")
    c.add_argument("a", help="the first snapshot (- for standard input)")
    c.add_argument("b", help="the second snapshot (- for standard input)")
    c.add_argument("--top", type=_count("--top"), default=20, metavar="N",
                   help="rows per section (default 20)")
    c.add_argument("--frames", type=_count("--frames"), default=3, metavar="N",
                   help="frames per block (default 3)")
    max_bytes(c)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line ``argv`` (default: sys.argv[1:]); returns the exit code. Bad usage
    that argparse finds exits with code 2 through SystemExit, as argparse does."""
    p = _parser()
    args = p.parse_args(argv)
    if args.command is None:
        p.print_help(sys.stderr)
        return 2
    from ..allocator.snapshot import DEFAULT_MAX_BYTES

    if getattr(args, "max_bytes", 0) is None:
        args.max_bytes = DEFAULT_MAX_BYTES
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"tensorgc {args.command}: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (| head): say nothing more, and let no flush at exit fail
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        return 1
    except (_WriteFailed, SnapshotError, ValueError, TypeError, OSError) as exc:
        print(f"tensorgc {args.command}: {_one_line(str(exc))}", file=sys.stderr)
        return 1


MESSAGE_MAX = 4000  # characters of one error message on the terminal


def _one_line(msg: str) -> str:
    """An error message as one line of plain text: a control character from a file or a path
    (a newline, an escape sequence) is written as its escape, lone surrogates too, and a very
    long message is cut. One line per error, whatever the input held."""
    if len(msg) > MESSAGE_MAX:
        msg = msg[:MESSAGE_MAX] + f"... ({len(msg) - MESSAGE_MAX:,} more characters)"
    return "".join(c if c.isprintable() or c == " " else
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
                   for c in msg)


if __name__ == "__main__":
    sys.exit(main())
