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

This package is the parser and main(); each subcommand is a module of it (add_parser, run), over
base.py's option types, inputs and outputs.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Dict, Optional, Sequence

from .._common.errors import SnapshotError
from . import compare, flamegraph, segments, stats, timeline, trace
from .base import UsageError, WriteFailed

__all__ = ["main"]

# in the order of the help
COMMANDS: Dict[str, Callable[[argparse.Namespace], int]] = {
    "stats": stats.run, "timeline": timeline.run, "segments": segments.run,
    "flamegraph": flamegraph.run, "trace": trace.run, "compare": compare.run,
}


def _parser() -> argparse.ArgumentParser:
    from .._version import __version__

    p = argparse.ArgumentParser(prog="tensorgc", description="tensorgc: where your GPU memory is.")
    p.add_argument("--version", action="version", version=f"tensorgc {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for module in (stats, timeline, segments, flamegraph, trace, compare):
        module.add_parser(sub)
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
    except (WriteFailed, SnapshotError, ValueError, TypeError, OSError) as exc:
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

