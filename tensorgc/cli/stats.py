"""``tensorgc stats SNAP``: what a snapshot file holds, per device (and by category at the peak);
``tensorgc stats DIR | SNAP SNAP...``: the ranks of a job side by side.
"""
from __future__ import annotations

import argparse
from collections import Counter

from ..allocator._lean import action_counts
from .._common.units import readable_size as R
from .base import (SNAPSHOTS_HELP, add_max_bytes, load, many_files, many_what, rank_rows,
                   shown_path)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("stats", help="what a snapshot file holds, per device",
                       description="Summarise a CUDA allocator snapshot (torch.cuda.memory."
                                   "_dump_snapshot or tensorgc.dump_snapshot): segments, "
                                   "allocated, fragmentation, trace actions, and the peak's "
                                   "bytes by category (parameter, grad, optimizer state, "
                                   "workspace, input, output, activation, temporary, other) "
                                   "when the snapshot has tensorgc.categorize's marks, torch's "
                                   "optimizer annotations or allocation stacks to infer them "
                                   "from. Given several files or a directory of them "
                                   "(one a rank): one table of the ranks side by side (peak, "
                                   "reserved, allocations, OOMs, the first OOM's time) that "
                                   "points at the rank that peaks highest and the one that "
                                   "runs out of memory first.")
    s.add_argument("snapshot", nargs="+", metavar="SNAPSHOT", help=SNAPSHOTS_HELP)
    add_max_bytes(s)


def run(args: argparse.Namespace) -> int:
    from .. import allocator
    from ..allocator.timeline import _text, categories_at_peak

    given = list(args.snapshot)
    files = many_files(args)
    if files is not None:
        from ..distributed.ranks_page import stats_text

        print(stats_text(rank_rows(args, files, None, 1), many_what(given)))
        return 0
    snap = load(args, args.snapshot)
    segs = snap["segments"]
    _, totals, unseen = allocator.attribute(segs, [])
    out = [f"snapshot {_text(shown_path(args.snapshot))}: {len(segs)} segments, "
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
