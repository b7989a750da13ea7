"""``tensorgc timeline SNAP -o out.html``: memory_viz's three views in one self-contained page;
``--compare A B``: B's page with A's curve; several files or a directory: every rank's curve on
the same axes.
"""
from __future__ import annotations

import argparse
import os

from .._common.devices import SNAPSHOT_WHY, cuda_index
from .base import (SNAPSHOTS_HELP, STDIN, UsageError, add_device, add_max_bytes, check_output,
                   count_option, device_of, load, many_files, many_what, progress, rank_rows,
                   write_page)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    add_device(t)
    t.add_argument("--detail", type=count_option("--detail"), default=300, metavar="N",
                   help="how many of the largest allocations in view are drawn one by one "
                        "(default 300; the page has a slider for it)")
    t.add_argument("--compare", action="store_true",
                   help="two snapshots A B: the page of B with A's curve on the same axis, and "
                        "what is alive at the end of B and not of A, by category, name and "
                        "allocation site")
    add_max_bytes(t)


def run(args: argparse.Namespace) -> int:
    from ..allocator.timeline import _text, timeline_html

    if args.compare:
        return _compare(args)
    given = list(args.snapshot)
    files = many_files(args)
    inputs = files if files is not None else [args.snapshot]
    check_output(args.output, inputs)  # before reading what may be gigabytes
    if files is not None:
        from ..distributed.ranks_page import COLUMNS, _label_text, ranks_html

        # "cuda" (the default): each file's first device; an index: that device in every file
        index = cuda_index(args.device, "--device", SNAPSHOT_WHY)
        rows = rank_rows(args, files, index, COLUMNS if len(files) <= 64 else COLUMNS // 2,
                         first=True)
        if not any(r.device is not None for r in rows):
            # as for one file: a device no snapshot holds is a usage error, not an empty page
            what = "a CUDA device" if index is None else f"cuda:{index}"
            notes = "; ".join(f"{_label_text(os.path.basename(r.path), 60)}: {r.note}"
                              for r in rows[:4] if r.note)
            raise UsageError(f"--device {args.device}: none of the {len(files)} snapshots holds "
                             f"{what} ({notes}{' ...' if len(rows) > 4 else ''})")
        live = len({r.path for r in rows})
        page = ranks_html(rows, f"Active memory of {live} rank snapshot(s): {many_what(given)}")
        return write_page(args.output, page, inputs)
    snap = load(args, args.snapshot, lean=True)
    index = device_of(args, snap)
    progress(args, "replaying the trace and drawing ...")
    name = "standard input" if args.snapshot == STDIN else os.path.basename(args.snapshot)
    # _text: a file name that is not UTF-8 decodes to surrogates, which the page cannot hold
    page = timeline_html(snap, device=index, detail=args.detail,
                         title=f"Active memory timeline of {_text(name)}, cuda:{index}")
    return write_page(args.output, page, inputs)


def _compare(args: argparse.Namespace) -> int:
    """``tensorgc timeline A B --compare``: B's page, A's curve on its axis, and what is alive
    at the end of B and not of A."""
    from ..allocator.timeline import _text, timeline_html

    given = list(args.snapshot)
    if len(given) != 2 or any(os.path.isdir(g) for g in given):
        raise UsageError("--compare takes two snapshot files: the baseline A, then B")
    if given[0] == STDIN and given[1] == STDIN:
        raise UsageError("standard input (-) can be read once: give it for A or for B")
    check_output(args.output, given)
    args.snapshot = given[0]
    a = load(args, given[0], lean=True)
    args.snapshot = given[1]
    b = load(args, given[1], lean=True)
    index = device_of(args, b)
    progress(args, "replaying both traces and drawing ...")
    names = ["standard input" if g == STDIN else os.path.basename(g) for g in given]
    page = timeline_html(b, device=index, detail=args.detail, baseline=a,
                         title=f"{_text(names[1])} compared with {_text(names[0])}, "
                               f"cuda:{index}")
    return write_page(args.output, page, given)
