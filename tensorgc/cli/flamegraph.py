"""``tensorgc flamegraph SNAP -o out.svg``: the segments' blocks by allocation stack as a flame
graph (SVG, or HTML for .html; --by memory, --compare OTHER), drawn offline.
"""
from __future__ import annotations

import argparse

from .base import (SNAPSHOT_HELP, UsageError, add_max_bytes, check_output, device_of,
                   device_option, load, shown_path, write_page)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    fl.add_argument("--device", type=device_option, default=None, metavar="DEVICE",
                    help="only this CUDA device's segments (an index, cuda:N); default every "
                         "device's")
    fl.add_argument("--compare", default=None, metavar="OTHER",
                    help="draw the segments only in SNAPSHOT (only_before) or only in OTHER "
                         "(only_after) instead")
    add_max_bytes(fl)


def run(args: argparse.Namespace) -> int:
    from ..allocator import flamegraph as fg
    from ..allocator.timeline import _text

    inputs = [args.snapshot] + ([args.compare] if args.compare is not None else [])
    check_output(args.output, inputs)
    fmt = args.format or ("html" if args.output.lower().endswith((".html", ".htm")) else "svg")
    snap = load(args, args.snapshot)
    name = _text(shown_path(args.snapshot))
    if args.compare is not None:
        if args.by != "segments" or args.device is not None:
            raise UsageError("--compare draws every segment of both files: no --by, no --device")
        other = load(args, args.compare)
        page = fg.compare(snap, other, format=fmt, title=f"Segments only in {name} or only in "
                                                         f"{_text(shown_path(args.compare))}")
    else:
        index = None if args.device is None else device_of(args, snap)
        where = "every device" if index is None else f"cuda:{index}"
        draw = fg.segments if args.by == "segments" else fg.memory
        what = "Allocator segments" if args.by == "segments" else "CUDA memory"
        page = draw(snap, device=index, format=fmt,
                    title=f"{what} of {name} ({where}) by allocation stack")
    return write_page(args.output, page, inputs)
