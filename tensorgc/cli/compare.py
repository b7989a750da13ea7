"""``tensorgc compare A B``: the segments and allocated blocks only in A or only in B.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, Tuple

from .._common.units import readable_size as R
from .base import (STDIN, Snapshot, UsageError, add_max_bytes, count_option, frame_lines,
                   hex_text, load, shown_path)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("compare", help="segments and blocks only in A or only in B",
                       description="Compare two snapshots: the segments and the allocated blocks "
                                   "found in only one of them, largest first, with stacks.")
    c.add_argument("a", help="the first snapshot (- for standard input)")
    c.add_argument("b", help="the second snapshot (- for standard input)")
    c.add_argument("--top", type=count_option("--top"), default=20, metavar="N",
                   help="rows per section (default 20)")
    c.add_argument("--frames", type=count_option("--frames"), default=3, metavar="N",
                   help="frames per block (default 3)")
    add_max_bytes(c)


def run(args: argparse.Namespace) -> int:
    from ..allocator.timeline import _text

    if args.a == STDIN and args.b == STDIN:
        raise UsageError("standard input (-) can be read once: give it for A or for B")
    a = load(args, args.a)
    b = load(args, args.b)
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
        name = _text(shown_path(args.a if title.endswith("A") else args.b))
        lines.append(f"segments {title} ({name}): {len(only)}, "
                     f"{R(sum(k[2] or 0 for k in only))}")
        for k in sorted(only, key=lambda k: -(k[2] or 0))[: args.top]:
            lines.append(f"  cuda:{k[0]} {hex_text(k[1])} {R(k[2] or 0)} "
                         f"({_text(x[k].get('segment_type', '?'))} pool)")
    for title, x, y in (("only in A", ba, bb), ("only in B", bb, ba)):
        only = [k for k in x if k not in y]
        lines.append(f"allocated blocks {title}: {len(only)}, {R(sum(k[2] or 0 for k in only))}")
        for k in sorted(only, key=lambda k: -(k[2] or 0))[: args.top]:
            lines.append(f"  cuda:{k[0]} {hex_text(k[1])} {R(k[2] or 0)}")
            for fr in frame_lines(x[k], args.frames):
                lines.append(f"      {fr}")
    print("\n".join(lines))
    return 0
