#!/usr/bin/env python
"""simple_leak: two objects that point at each other keep a big tensor alive.

The leak story
--------------
Each iteration of the loop builds a pair of ``Node`` objects that reference
each other (``a.other = b; b.other = a``), and each node holds a large tensor.
When the iteration ends, the pair is unreachable -- but it is a reference
*cycle*, so the reference counts never reach zero and CPython does not free it
right away.  Only the cyclic garbage collector can free it, and that collector
is triggered by *the number of Python object allocations*, not by how many
bytes of GPU memory the garbage holds.  So device memory grows by
hundreds of tensors before the collector runs, peaks, drops, and grows again:
higher peak memory, fragmentation, and at worst an out-of-memory error that
looks random.

tensorgc hooks the collector: whenever a collection finds garbage that keeps
tensors of the chosen device alive, it hands you a ``CycleReport`` (text
summary, Graphviz graph, self-contained HTML page) that shows the cycle
``Node -.other-> Node`` and the tensor hanging off it, plus a fix hint (break
the back-reference with ``weakref``, or ``del``/``None`` it when done).

Modes
-----
* default: ``tensorgc.observe_cycles`` prints ``report.text`` and writes
  ``report.html`` to a private temp file (``HTML: <path>``).
* ``--warn-tensor-cycles``: ``tensorgc.warn_tensor_cycles`` writes the page
  itself and logs a WARNING (logger ``tensorgc``) with its path and summary.
* ``--gc-interval N``: call ``gc.collect()`` every N iterations (otherwise the
  automatic collector decides when).  A final ``gc.collect()`` always runs.

Runs on CUDA when available, else on CPU with smaller tensors.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
import weakref

from _common import import_tensorgc, is_cuda, memory_line, mib, pick_device, print_report


class Node:
    """A node of a doubly linked pair; ``other`` is the back-reference that makes the cycle."""

    def __init__(self, name: str, tensor):
        self.name = name
        self.tensor = tensor
        self.other = None


def make_pair(i: int, numel: int, device: str, live: weakref.WeakSet):
    import torch

    a = Node(f"a{i}", torch.ones(numel, device=device))
    b = Node(f"b{i}", torch.ones(numel, device=device))
    a.other = b  # a -> b
    b.other = a  # b -> a: the cycle
    live.add(a.tensor)
    live.add(b.tensor)
    return a.tensor.sum()  # do "work" with it; the pair becomes garbage on return


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Leak tensors through Node<->Node reference cycles and let tensorgc report them.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, cuda:1, ...")
    p.add_argument("--iterations", type=int, default=None,
                   help="loop iterations (default: 500 on CUDA, 300 on CPU)")
    p.add_argument("--tensor-mib", type=float, default=None,
                   help="size of each node's tensor in MiB (default: 16 on CUDA, 1 on CPU)")
    p.add_argument("--gc-interval", type=int, default=0, metavar="N",
                   help="call gc.collect() every N iterations (0: rely on automatic gc)")
    p.add_argument("--no-auto-gc", action="store_true",
                   help="gc.disable() during the loop (only --gc-interval and the final collect run)")
    p.add_argument("--warn-tensor-cycles", action="store_true",
                   help="use tensorgc.warn_tensor_cycles (logs a WARNING with the HTML path) "
                        "instead of observe_cycles")
    p.add_argument("--directory", default=None,
                   help="where HTML pages go (default: the temp dir)")
    p.add_argument("--max-reports", type=int, default=1,
                   help="print full text + write HTML for the first K reports; later ones get one line")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    tensorgc = import_tensorgc()
    import torch

    device = pick_device(args.device)
    cuda = is_cuda(device)
    iterations = args.iterations if args.iterations is not None else (500 if cuda else 300)
    tensor_mib = args.tensor_mib if args.tensor_mib is not None else (16.0 if cuda else 1.0)
    numel = max(1, int(tensor_mib * 2**20) // 4)  # float32
    pair_bytes = 2 * numel * 4

    print(f"simple_leak: device={device} iterations={iterations} tensor={mib(numel * 4)} "
          f"gc_interval={args.gc_interval or 'automatic'} gc_threshold={gc.get_threshold()}")

    reports = []
    html_paths = []

    if args.warn_tensor_cycles:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        handle = tensorgc.warn_tensor_cycles(device=device, directory=args.directory)
    else:
        def on_report(report):
            reports.append(report)
            n = len(reports)
            if n <= args.max_reports:
                html_paths.append(print_report(report, args.directory, title=f"report #{n}"))
            else:
                print(f"tensorgc report #{n}: generation={report.generation} garbage={report.garbage} "
                      f"tensors={len(report.tensors)} holding {mib(report.nbytes)}")

        handle = tensorgc.observe_cycles(on_report, device=device)

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        print(f"before: {memory_line(device)}")

    live = weakref.WeakSet()  # tensors that are still alive (waiting for the collector)
    peak_live = 0
    was_enabled = gc.isenabled()
    if args.no_auto_gc:
        gc.disable()
    t0 = time.perf_counter()
    try:
        for i in range(iterations):
            make_pair(i, numel, device, live)
            peak_live = max(peak_live, len(live))
            if args.gc_interval and (i + 1) % args.gc_interval == 0:
                gc.collect()
        if cuda:
            torch.cuda.synchronize()
        loop_s = time.perf_counter() - t0
        waiting = len(live)
        print(f"loop done in {loop_s:.2f}s; tensors still waiting for the collector: {waiting} "
              f"({mib(waiting * numel * 4)})")
        if cuda:
            print(f"after loop: {memory_line(device)}")
        gc.collect()  # flush: report whatever is still pending
    finally:
        if args.no_auto_gc and was_enabled:
            gc.enable()
        handle.remove()

    print()
    print("summary:")
    print(f"  peak tensors kept alive only by cycles: {peak_live} "
          f"({mib(peak_live * numel * 4)}; one leaked pair = {mib(pair_bytes)})")
    print(f"  tensors alive after final gc.collect(): {len(live)}")
    if args.warn_tensor_cycles:
        print("  reports: logged as WARNINGs above (logger 'tensorgc'), each with its HTML path")
    else:
        print(f"  tensorgc reports: {len(reports)}")
        for path in html_paths:
            print(f"  HTML: {path}")
        if not reports:
            print("  (no report: no collection found tensor cycles -- unexpected)")
    print(f"  memory: {memory_line(device)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
