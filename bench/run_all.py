#!/usr/bin/env python
"""Run the tensorgc benchmarks B1 (overhead), B2 (report cost), B3 (MemReporter vs
pytorch_memlab), B4 (timeline vs memory_viz), B5 (line profiler vs pytorch_memlab), B6 (report
pages of adversarial garbage and memory over 10,000 reports, vs torch's detector), B7 (the
owners of 1,000 leaks vs gc.collect() and objgraph), B8 (gather_report's cost per call at 2
ranks, vs a bare gather_object and a MemReporter collect) and B10 (checkpoint(), growth() and
the pytest plugin with 50,000 live tensors); markdown on stdout.

    python bench/run_all.py --repeat 5 --timeout 120 --json-dir bench/results

Each benchmark runs as its own process (``sys.executable``); their markdown tables
go to stdout one after the other, progress to stderr, and with ``--json-dir`` each
writes ``b1.json`` / ``b2.json`` / ``b3.json`` / ``b5.json`` / ``b6.json`` / ``b7.json`` / ``b8.json`` /
``b10.json`` there (B4 prints only).  ``--quick`` is a smoke test (small heap,
few pairs, one repeat).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run B1 to B8 and B10; markdown tables on stdout.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--timeout", type=float, default=120.0, help="per-run cap on the measured section")
    p.add_argument("--device", default="auto")
    p.add_argument("--heaps", default="100000,1000000", help="B1 heaps")
    p.add_argument("--pairs", type=int, default=300_000, help="B1 garbage pairs")
    p.add_argument("--b2-heap", type=int, default=1_000_000, help="B2 heap")
    p.add_argument("--json-dir", default=None,
                   help="write b1.json, b2.json, b3.json, b5.json, b6.json, b7.json, b8.json and "
                        "b10.json here")
    p.add_argument("--b3-heap", type=int, default=1_000_000, help="B3 heap")
    p.add_argument("--b4-events", type=int, default=1_000_000, help="B4 trace entries (synthetic)")
    p.add_argument("--b7-heap", type=int, default=1_000_000, help="B7 heap")
    p.add_argument("--b8-heap", type=int, default=1_000_000, help="B8 heap, in each rank")
    p.add_argument("--b10-tensors", type=int, default=50_000, help="B10 live tensors")
    p.add_argument("--only", choices=["b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b10"],
                   default=None,
                   help="run just one benchmark")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: --repeat 1 --heaps 100000 --pairs 30000 --b2-heap 100000 --timeout 60 "
                        "(and B3, B4, B7, B8 on 100,000 objects or events, B10 on 5,000 tensors)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeat, args.heaps, args.pairs, args.b2_heap, args.timeout = 1, "100000", 30_000, 100_000, 60.0
        args.b3_heap, args.b4_events, args.b7_heap, args.b8_heap = 100_000, 100_000, 100_000, 100_000
        args.b10_tensors = 5_000

    common = ["--repeat", str(args.repeat), "--timeout", str(args.timeout), "--device", args.device]
    jobs = []
    if args.only in (None, "b1"):
        cmd = [sys.executable, os.path.join(HERE, "b1_overhead.py"), *common,
               "--heaps", args.heaps, "--pairs", str(args.pairs)]
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, "b1.json")]
        jobs.append(cmd)
    if args.only in (None, "b2"):
        cmd = [sys.executable, os.path.join(HERE, "b2_report_cost.py"), *common, "--heap", str(args.b2_heap)]
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, "b2.json")]
        jobs.append(cmd)

    if args.only in (None, "b3"):
        cmd = [sys.executable, os.path.join(HERE, "b3_reporter.py"), "--repeat", str(args.repeat),
               "--device", args.device, "--heap", str(args.b3_heap)]
        if args.quick:
            cmd += ["--layers", "10"]
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, "b3.json")]
        jobs.append(cmd)

    if args.only in (None, "b4"):
        jobs.append([sys.executable, os.path.join(HERE, "b4_timeline.py"), "--events",
                     str(args.b4_events), "--repeat", str(min(args.repeat, 3)), "--categories"])
    if args.only in (None, "b5"):
        cmd = [sys.executable, os.path.join(HERE, "b5_lineprof.py"), "--repeat", str(args.repeat)]
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, "b5.json")]
        jobs.append(cmd)
    if args.only in (None, "b6"):
        cmd = [sys.executable, os.path.join(HERE, "b6_pages.py"), "--repeat", str(args.repeat)]
        if args.quick:
            cmd += ["--quick"]
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, "b6.json")]
        jobs.append(cmd)
    if args.only in (None, "b7"):
        cmd = [sys.executable, os.path.join(HERE, "b7_owners.py"), "--repeat", str(args.repeat),
               "--timeout", str(args.timeout), "--heap", str(args.b7_heap)]
        if args.quick:
            cmd += ["--objgraph-sample", "3"]
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, "b7.json")]
        jobs.append(cmd)
    if args.only in (None, "b8"):
        cmd = [sys.executable, os.path.join(HERE, "b8_gather.py"), "--repeat", str(args.repeat),
               "--heap", str(args.b8_heap)]
        if args.device not in ("auto", "cpu"):
            cmd += ["--device", args.device]
            if args.device.startswith("cuda"):
                cmd += ["--backend", "nccl"]
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, "b8.json")]
        jobs.append(cmd)

    if args.only in (None, "b10"):
        cmd = [sys.executable, os.path.join(HERE, "b10_growth.py"), "--repeat", str(args.repeat),
               "--tensors", str(args.b10_tensors)]
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, "b10.json")]
        jobs.append(cmd)

    rc = 0
    for cmd in jobs:
        print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        r = subprocess.call(cmd)
        print(f"[{os.path.basename(cmd[1])}: exit {r}, {time.perf_counter() - t0:.0f}s]", file=sys.stderr, flush=True)
        print(flush=True)
        rc = rc or r
    return rc


if __name__ == "__main__":
    sys.exit(main())
