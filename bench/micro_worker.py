#!/usr/bin/env python
"""Micro: what the render worker costs beside the job: starting one (a cold layout against a
warm one), and how soon a Ctrl-C stops a layout in progress.

* ``start``: ``render_svg`` of a 3-node graph right after the worker was stopped (a new worker:
  the middle process, exec, Graphviz's start) and on the worker that is already up; medians of
  ``--repeat`` pairs, interleaved.
* ``ctrl-c``: a layout that never finishes (a worker that reads the request and never answers,
  budget 60 s); a thread sends SIGINT to the process after a random 50-250 ms; the time from
  ``os.kill`` to the ``KeyboardInterrupt`` caught around ``render_svg``, median and maximum over
  ``--repeat`` tries. The contract is 100 ms (the check runs every 40 ms).

    python bench/micro_worker.py --repeat 30 [--json out.json]
"""
import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorgc  # noqa: E402
import tensorgc._tensorgc_testing as testing  # noqa: E402

REAL_WORKER = os.path.join(os.path.dirname(tensorgc._tensorgc.__file__), "_tgc_render")
SMALL = "digraph { a -> b -> c }"


def start_costs(repeat):
    cold, warm = [], []
    for _ in range(repeat):
        tensorgc._tensorgc._shutdown()
        t0 = time.perf_counter()
        tensorgc.render_svg(SMALL)
        t1 = time.perf_counter()
        tensorgc.render_svg(SMALL)
        t2 = time.perf_counter()
        cold.append((t1 - t0) * 1e3)
        warm.append((t2 - t1) * 1e3)
    return cold, warm


def ctrl_c_latencies(repeat):
    silent = os.path.join(tempfile.mkdtemp(prefix="tgc-bench-"), "silent-worker")
    with open(silent, "w") as f:
        f.write("#!/bin/sh\nexec cat >/dev/null\n")
    os.chmod(silent, 0o700)
    tensorgc._tensorgc._shutdown()
    testing._set_render_worker(silent)
    old = tensorgc.set_render_timeout(60)
    sent = []
    out = []

    def fire():
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)
    try:
        for _ in range(repeat):
            sent.clear()
            timer = threading.Timer(random.uniform(0.05, 0.25), fire)
            timer.start()
            try:
                tensorgc.render_svg(SMALL)
            except KeyboardInterrupt:
                out.append((time.perf_counter() - sent[0]) * 1e3)
            timer.join()
    finally:
        tensorgc.set_render_timeout(old)
        tensorgc._tensorgc._shutdown()
        testing._set_render_worker(REAL_WORKER)
        os.unlink(silent)
        os.rmdir(os.path.dirname(silent))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    cold, warm = start_costs(args.repeat)
    lat = ctrl_c_latencies(args.repeat)
    res = {"repeat": args.repeat,
           "cold_ms_median": statistics.median(cold), "warm_ms_median": statistics.median(warm),
           "ctrl_c_ms_median": statistics.median(lat), "ctrl_c_ms_max": max(lat),
           "ctrl_c_tries": len(lat)}
    print(f"layout of a 3-node graph: {res['cold_ms_median']:.2f} ms with a new worker, "
          f"{res['warm_ms_median']:.2f} ms on a running one (medians of {args.repeat})")
    print(f"Ctrl-C to KeyboardInterrupt during a layout: median {res['ctrl_c_ms_median']:.1f} ms, "
          f"max {res['ctrl_c_ms_max']:.1f} ms over {len(lat)} tries")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
