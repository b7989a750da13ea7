#!/usr/bin/env python
"""run_all: the quick demo behind ``make demo``.

Runs ``simple_leak.py`` with a small iteration count and ``--gc-interval`` so
that a tensorgc report appears quickly: it prints the report's text summary and
the path of its HTML page (``HTML: /tmp/tensorgc-....html``).  Takes a few
seconds on CPU.  ``--all`` also runs the Awaitable and training demos, and the demos that need
CUDA (``oom_autopsy.py``) where there is CUDA: without it they are skipped, saying so, and the
run still succeeds. A demo that ran and could not show what it is for fails the run.

Each demo runs in its own interpreter (``sys.executable``), no shell involved.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_ONLY = ("oom_autopsy.py",)  # they exit 2 without CUDA, saying so on stderr


def run(script: str, *args: str) -> int:
    cmd = [sys.executable, os.path.join(HERE, script), *args]
    print(f"$ {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    rc = subprocess.call(cmd)
    print(f"[{script}: exit {rc}, {time.perf_counter() - t0:.1f}s]\n", flush=True)
    return rc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run the tensorgc demos quickly (simple_leak by default).")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    p.add_argument("--iterations", type=int, default=60, help="simple_leak iterations")
    p.add_argument("--gc-interval", type=int, default=20, help="simple_leak --gc-interval")
    p.add_argument("--directory", default=None, help="where HTML pages go (default: the temp dir)")
    p.add_argument("--all", action="store_true", help="also run awaitable_leak and training_no_zero_grad")
    args = p.parse_args(argv)

    common = ["--device", args.device]
    if args.directory:
        common += ["--directory", args.directory]
    rcs = [run("simple_leak.py", *common, "--iterations", str(args.iterations),
               "--gc-interval", str(args.gc_interval))]
    if args.all:
        rcs.append(run("awaitable_leak.py", *common))
        rcs.append(run("training_no_zero_grad.py", *common))
        cuda = _cuda() if args.device == "auto" else args.device.startswith("cuda")
        for script in CUDA_ONLY:
            if cuda:
                rcs.append(run(script, *common))
            else:
                print(f"[{script}: skipped, it needs CUDA and device {args.device!r} has none]\n",
                      flush=True)
    return max(rcs)


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


if __name__ == "__main__":
    sys.exit(main())
