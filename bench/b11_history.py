#!/usr/bin/env python
"""B11 -- what the CUDA allocator's history costs, as observe_tensor_cycles / warn_tensor_cycles
start it (tensorgc: enabled="state", context="state", stacks="python") and as torch's
observe_tensor_cycles starts it (enabled="all", context="all", stacks="all",
max_entries=100000), against no history.

With CUDA (``torch.cuda.is_available()``), in one process, the modes taking turns round by round
(``--rounds``, default 7; medians reported):

* ``alloc``: one ``torch.empty(256, device="cuda")`` allocated and freed, per pair, averaged over
  ``--allocs`` (20,000) pairs made ``--depth`` (30) Python frames deep, as a training step's
  allocations are; the caching allocator serves them from its cache, so this is the allocator's
  own path plus what the history adds (the stack gathered at every allocation);
* ``snapshot``: one ``torch.cuda.memory._snapshot()`` with ``--live`` (10,000) tensors alive,
  each allocated from its own line: what a cycle report pays for its stacks, once per report
  (cycles/report_tensors.c reads them from it) -- stacks are turned into text here.

Without CUDA, what the history does on every allocation is measured alone: gathering the stack
(``torch._C._profiler.gather_traceback``, the recorder the allocator calls, with Python frames
only as tensorgc asks, and with C++ frames as torch's "all" asks), and turning stacks into
frames (``symbolize_tracebacks``, which ``_snapshot()`` does for each stack). The CUDA figures
come from a CUDA machine:

    python3 bench/b11_history.py --json docs/results/b11-h100.json

Output: a markdown table on stdout, JSON to ``--json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable, Dict, List

MODES: Dict[str, Dict[str, Any]] = {
    "none": {},
    "tensorgc": {"enabled": "state", "context": "state", "stacks": "python"},
    "torch": {"enabled": "all", "context": "all", "stacks": "all", "max_entries": 100_000},
}


def _deep(depth: int, fn: Callable[[], float]) -> float:
    if depth <= 0:
        return fn()
    return _deep(depth - 1, fn)


def _set_mode(torch: Any, mode: str) -> None:
    torch.cuda.memory._record_memory_history(None)
    if MODES[mode]:
        torch.cuda.memory._record_memory_history(**MODES[mode])


def cuda_rounds(args: argparse.Namespace) -> Dict[str, Dict[str, List[float]]]:
    import torch

    torch.empty(256, device="cuda")  # CUDA's start, and the cache's first block
    out: Dict[str, Dict[str, List[float]]] = {m: {"alloc_us": [], "snapshot_ms": []}
                                               for m in MODES}

    def alloc_loop() -> float:
        t0 = time.perf_counter()
        for _ in range(args.allocs):
            x = torch.empty(256, device="cuda")
            del x
        return (time.perf_counter() - t0) / args.allocs * 1e6

    for _ in range(args.rounds):
        for mode in MODES:
            _set_mode(torch, mode)
            out[mode]["alloc_us"].append(_deep(args.depth, alloc_loop))
            live = [torch.empty(256, device="cuda") for _ in range(args.live)]
            t0 = time.perf_counter()
            torch.cuda.memory._snapshot()
            out[mode]["snapshot_ms"].append((time.perf_counter() - t0) * 1e3)
            del live
            torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(None)
    return out


def cpu_rounds(args: argparse.Namespace) -> Dict[str, List[float]]:
    from torch._C._profiler import gather_traceback, symbolize_tracebacks

    out: Dict[str, List[float]] = {"gather_python_us": [], "gather_cpp_us": [],
                                   "symbolize_us": [], "symbolize_cpp_us": []}
    n = args.allocs

    def gather(cpp: bool) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                gather_traceback(True, True, cpp)
            return (time.perf_counter() - t0) / n * 1e6
        return run

    for _ in range(args.rounds):
        out["gather_python_us"].append(_deep(args.depth, gather(False)))
        out["gather_cpp_us"].append(_deep(args.depth, gather(True)) if args.cpp else float("nan"))
        tbs = [_deep(args.depth, lambda: gather_traceback(True, True, False)) for _ in range(200)]
        t0 = time.perf_counter()
        symbolize_tracebacks(tbs)
        out["symbolize_us"].append((time.perf_counter() - t0) / len(tbs) * 1e6)
        if args.cpp:
            tbs = [_deep(args.depth, lambda: gather_traceback(True, True, True))
                   for _ in range(20)]
            t0 = time.perf_counter()
            symbolize_tracebacks(tbs)
            out["symbolize_cpp_us"].append((time.perf_counter() - t0) / len(tbs) * 1e6)
        else:
            out["symbolize_cpp_us"].append(float("nan"))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--allocs", type=int, default=20_000)
    p.add_argument("--depth", type=int, default=30)
    p.add_argument("--live", type=int, default=10_000)
    p.add_argument("--cpu", action="store_true", help="the CPU measurement even with CUDA")
    p.add_argument("--no-cpp", dest="cpp", action="store_false",
                   help="skip gathering C++ frames (slow where symbols are many)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    result: Dict[str, Any] = {
        "benchmark": "b11_history", "torch": torch.__version__, "python": sys.version.split()[0],
        "machine": platform.machine(), "cpus": os.cpu_count(), "cuda": cuda,
        "device": torch.cuda.get_device_name(0) if cuda else None,
        "rounds": args.rounds, "allocs": args.allocs, "depth": args.depth, "live": args.live,
    }
    lines = []
    if cuda:
        raw = cuda_rounds(args)
        result["raw"] = raw
        med = {m: {k: statistics.median(v) for k, v in d.items()} for m, d in raw.items()}
        result["median"] = med
        base = med["none"]["alloc_us"]
        lines += ["| history | alloc+free (us) | over none (us) | _snapshot() with "
                  f"{args.live:,} live (ms) |", "| --- | ---: | ---: | ---: |"]
        for m in MODES:
            lines.append(f"| {m} | {med[m]['alloc_us']:.2f} | "
                         f"{med[m]['alloc_us'] - base:+.2f} | {med[m]['snapshot_ms']:.1f} |")
    else:
        raw_cpu = cpu_rounds(args)
        result["raw"] = raw_cpu
        med_cpu = {k: statistics.median(v) for k, v in raw_cpu.items()}
        result["median"] = med_cpu
        lines += [f"| what (depth {args.depth}) | us, median of {args.rounds} |", "| --- | ---: |",
                  f"| gather a Python stack (stacks=\"python\": tensorgc's) | "
                  f"{med_cpu['gather_python_us']:.2f} |",
                  f"| gather Python and C++ frames (stacks=\"all\": torch's) | "
                  f"{med_cpu['gather_cpp_us']:.2f} |",
                  f"| symbolize one Python stack (per stack, in _snapshot()) | "
                  f"{med_cpu['symbolize_us']:.2f} |",
                  f"| symbolize one Python and C++ stack (per stack, in _snapshot()) | "
                  f"{med_cpu['symbolize_cpp_us']:.1f} |"]
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
