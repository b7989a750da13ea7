#!/usr/bin/env python
"""awaitable_leak: a lambda that captures ``self`` keeps every result tensor alive.

The leak story
--------------
A small "future"/"Awaitable" class stores the result of an asynchronous
computation and offers a ``callback`` that returns it::

    class Awaitable:
        def __init__(self, result):
            self.result = result
            self.callback = lambda: self.result   # <- captures self

The lambda closes over ``self``: the instance references the function
(``.callback``), the function references its closure cell, and the cell
references the instance again.  That is a reference cycle, so when the caller
drops the Awaitable (after ``wait()``), the result tensor is *not* freed; it
waits for the cyclic garbage collector, which may run much later.

tensorgc reports the cycle with the closure edge spelled out::

    Awaitable --.callback--> function --closure self--> Awaitable
    Awaitable --.result--> Tensor

and a fix hint.  The demo then runs the fixed class (the lambda captures a
``weakref`` to self instead) and shows that its results are freed the moment
the Awaitable is dropped, with no collector and no report.

Runs on CUDA when available, else on CPU with smaller tensors.
"""

from __future__ import annotations

import argparse
import gc
import sys
import weakref

from _common import import_tensorgc, is_cuda, memory_line, mib, pick_device, print_report


class Awaitable:
    """Leaky: the callback lambda captures ``self`` -> Awaitable <-> function cycle."""

    def __init__(self, result):
        self.result = result
        self.done = True
        self.callback = lambda: self.result

    def wait(self):
        return self.callback()


class FixedAwaitable:
    """Fixed: the lambda captures a weak reference, so there is no cycle."""

    def __init__(self, result):
        self.result = result
        self.done = True
        ref = weakref.ref(self)
        self.callback = lambda: ref().result

    def wait(self):
        return self.callback()


def launch(cls, x, w):
    """Pretend to launch an async op; return an awaitable holding the (large) result."""
    return cls(x @ w)


def run(cls, count, x, w, results):
    """Launch and await ``count`` ops; keep only a weakref to each result tensor."""
    total = 0.0
    for _ in range(count):
        fut = launch(cls, x, w)
        out = fut.wait()
        total += float(out[0, 0])
        results.append(weakref.ref(out))
        del fut, out  # the caller is done with it
    return total


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="A lambda capturing self (Awaitable.callback) leaks result tensors; tensorgc shows the closure edge.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, ...")
    p.add_argument("--count", type=int, default=20, help="how many awaitables to launch and drop")
    p.add_argument("--size", type=int, default=None,
                   help="result is size x size float32 (default: 2048 on CUDA, 256 on CPU)")
    p.add_argument("--directory", default=None, help="where the HTML page goes (default: the temp dir)")
    p.add_argument("--skip-fixed", action="store_true", help="do not run the fixed variant")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    tensorgc = import_tensorgc()
    import torch

    device = pick_device(args.device)
    size = args.size or (2048 if is_cuda(device) else 256)
    x = torch.randn(size, size, device=device)
    w = torch.randn(size, size, device=device)
    result_bytes = size * size * 4
    print(f"awaitable_leak: device={device} count={args.count} result={mib(result_bytes)} each")

    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=device)
    gc.disable()  # so that the explicit gc.collect() below is the one that finds them
    try:
        # ---- leaky variant -------------------------------------------------------
        gc.collect()
        reports.clear()
        results = []
        run(Awaitable, args.count, x, w, results)
        alive = sum(r() is not None for r in results)
        print(f"\n[leaky]  awaitables dropped; result tensors still alive: {alive}/{args.count} "
              f"({mib(alive * result_bytes)}) -- waiting for the cyclic collector")
        if is_cuda(device):
            print(f"[leaky]  {memory_line(device)}")
        gc.collect()
        alive_after = sum(r() is not None for r in results)
        print(f"[leaky]  after gc.collect(): alive {alive_after}/{args.count}; "
              f"tensorgc reports: {len(reports)}")
        leaky_reports = list(reports)

        # ---- fixed variant -------------------------------------------------------
        fixed_alive = fixed_reports = None
        if not args.skip_fixed:
            reports.clear()
            results = []
            run(FixedAwaitable, args.count, x, w, results)
            fixed_alive = sum(r() is not None for r in results)
            print(f"\n[fixed]  awaitables dropped; result tensors still alive: {fixed_alive}/{args.count} "
                  f"(freed by reference counting, no collector needed)")
            gc.collect()
            fixed_reports = len(reports)
            print(f"[fixed]  tensorgc reports after gc.collect(): {fixed_reports}")
    finally:
        gc.enable()
        handle.remove()

    print()
    if not leaky_reports:
        print("PROBLEM: tensorgc produced no report for the leaky Awaitable cycles")
        return 1
    report = leaky_reports[0]
    print_report(report, args.directory, title="report (leaky Awaitable)")
    closure_edges = [e for e in report.edges if str(e[1]).startswith("closure")]
    print("closure edges:", ", ".join(f"{s} --{lbl}--> {d}" for s, lbl, d in closure_edges) or "NONE (unexpected)")
    for g in report.groups:
        print(f"group: {g['count']} x [{g['cycle']}] holding {mib(g['nbytes'])}")
        print(f"  hint: {g['hint']}")
    if fixed_alive is not None:
        print(f"\nfixed variant: {fixed_alive} tensors waiting, {fixed_reports} reports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
