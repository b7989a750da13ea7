"""What every subcommand of the tensorgc command uses: the option types, the snapshot files read
(standard input for ``-``, several files or a directory of them for the ranks), the page written
(atomically, or to standard output for ``-``), and the errors that give exit codes 2
(UsageError) and 1 (WriteFailed).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Union

from .._common.devices import SNAPSHOT_WHY, DeviceError, cuda_index, snapshot_device
from .._common.errors import OutputError, SnapshotError

Snapshot = Dict[str, Any]

STDIN = "-"  # the snapshot argument that reads standard input
STDOUT = "-"  # the --output that writes standard output
PROGRESS_BYTES = 32 << 20  # inputs larger than this report progress (on a terminal)


class UsageError(Exception):
    """Bad usage found after parsing (exit code 2): the message names the option."""


# ---------------------------------------------------------------------- option types


def count_option(option: str) -> Callable[[str], int]:
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


def size_option(text: str) -> int:
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


def device_option(text: str) -> str:
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


def progress(args: argparse.Namespace, msg: str) -> None:
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


def load(args: argparse.Namespace, path: str, lean: Optional[bool] = None) -> Snapshot:
    """The snapshot at ``path`` (standard input for "-"), checked; messages name --max-bytes.
    lean: as load_snapshot's (the timeline streams every file: it reads the trace's columns)."""
    from ..allocator.snapshot import _load as load_file, _parse_bytes, _read_stream

    progress(args, f"reading {path} ...")
    if path == STDIN:
        data = _read_stream(sys.stdin.buffer, "<stdin>", args.max_bytes, 0, _limit_hint(args))
        snap: Snapshot = _parse_bytes(data, "<stdin>")
    else:
        snap = load_file(path, args.max_bytes, _limit_hint(args),
                         "give - as the file to read standard input", lean=lean)
    progress(args, f"read {sum(len(t) for t in snap['device_traces']):,} trace entries")
    return snap


def shown_path(path: str) -> str:
    return "standard input" if path == STDIN else path


def device_of(args: argparse.Namespace, snap: Snapshot) -> int:
    """The device index --device names in this snapshot; UsageError when it holds no such
    device (the message lists those it holds)."""
    try:
        return snapshot_device(snap, args.device, "--device", shown_path(args.snapshot))
    except DeviceError as exc:
        raise UsageError(str(exc)) from None


def sources(inputs: Sequence[str]) -> List[Union[str, int]]:
    """The inputs as output_target compares them: standard input ("-") by its descriptor, so
    that ``-o snap.pickle < snap.pickle`` is refused as the input itself (it replaced the
    snapshot with the page)."""
    return [0 if p == STDIN else p for p in inputs]


def check_output(path: str, inputs: Sequence[str] = ()) -> str:
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
        output_target(path, sources(inputs))  # as given: "pages/" too
    except OutputError as exc:
        msg = str(exc)
        if "tensorgc writes only regular files" in msg:
            msg += " (-o - writes the page to standard output)"
        raise UsageError(msg) from None
    return out


class WriteFailed(Exception):
    """An output that could not be written (exit code 1), with the real path in its message."""


def write_page(path: str, page: str, inputs: Sequence[str] = ()) -> int:
    """Writes the page atomically (see snapshot.atomic_write), or to standard output for -."""
    from ..allocator.snapshot import atomic_write, write_failure

    out = check_output(path, inputs)
    if out == STDOUT:
        try:
            sys.stdout.buffer.write(page.encode())
            sys.stdout.flush()
        except OSError as exc:
            raise WriteFailed(f"cannot write the page to standard output: "
                              f"{exc.strerror or exc}") from None
        return 0
    try:
        atomic_write(out, lambda f: f.write(page), inputs=sources(inputs))
    except OutputError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        why = exc.strerror or write_failure(exc)
        left = getattr(exc, "_tensorgc_left", None)
        raise WriteFailed(f"cannot write {out}: {why}" + (f"; {left}" if left else "")) from None
    print(f"{out}: {len(page.encode()):,} bytes", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- many ranks


def _regular(entry: "os.DirEntry[str]") -> bool:
    """A directory entry that is a regular file (through a link). A link that loops or whose
    stat fails otherwise is skipped like any other entry that is not a file: is_file() raises
    for it (ELOOP), which would stop the whole directory for one bad link."""
    try:
        return entry.is_file()
    except OSError:
        return False


def many_files(args: argparse.Namespace) -> Optional[List[str]]:
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


def rank_rows(args: argparse.Namespace, files: List[str], device: Optional[int],
              columns: int, first: bool = False) -> List[Any]:
    """Each file loaded, reduced to its rows (distributed/ranks_page.py's RankSnapshot) and
    dropped."""
    from ..distributed.ranks_page import _label_text, rank_snapshots

    rows = []
    for path in files:
        args.snapshot = path  # for the progress line
        snap = load(args, path, lean=True)  # read through its columns
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


def many_what(given: List[str]) -> str:
    """The inputs of a multi-rank command for a page's title: the first four, escaped."""
    from ..distributed.ranks_page import _label_text

    return ", ".join(_label_text(g) for g in given[:4]) + (" ..." if len(given) > 4 else "")


def frame_lines(entry: Dict[str, Any], limit: int) -> List[str]:
    """A trace entry's top ``limit`` frames as text lines, as the timeline writes them."""
    from ..allocator.timeline import _frame_lines

    return _frame_lines(entry, limit)


def hex_text(v: object) -> str:
    """An address from the file in hex, or "?" where it is not an int."""
    return f"{v:#x}" if isinstance(v, int) else "?"


# ---------------------------------------------------------------------- options

SNAPSHOT_HELP = "the snapshot file (a pickle; read without running code); - for standard input"
SNAPSHOTS_HELP = ("the snapshot file (a pickle; read without running code; - for standard "
                  "input); or several, or a directory of them (its *.pickle files), one a rank: "
                  "the ranks side by side, ordered by the rank in the file names")
DEVICE_HELP = ("the CUDA device: an index (0), cuda:N, or cuda for the first device the "
               "snapshot holds (default)")
MAX_BYTES_HELP = "refuse larger files; bytes, or with a unit: 16G (default 8G)"


def add_max_bytes(sp: argparse.ArgumentParser) -> None:
    """--max-bytes, which every subcommand takes (None until main() gives the default)."""
    sp.add_argument("--max-bytes", type=size_option, default=None, metavar="N",
                    help=MAX_BYTES_HELP)


def add_device(sp: argparse.ArgumentParser) -> None:
    """--device of the single-device subcommands (default: the first CUDA device held)."""
    sp.add_argument("--device", type=device_option, default="cuda", metavar="DEVICE",
                    help=DEVICE_HELP)
