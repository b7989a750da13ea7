#!/usr/bin/env python
"""why_alive: a leak that is not a cycle, found mid-training: what holds it, and what grows.

The story: a training loop keeps `loss_history.append(loss)` "for plotting" -- the loss tensor,
not loss.item() -- on the steps where it skips backward (a validation-like step every few
steps). Each kept loss keeps its whole autograd graph: every activation saved for backward.
Nothing is a reference cycle, so no collector and no cycle detector will ever see it.
tensorgc answers the three questions:
  1. what grows: checkpoint() before, growth() every few steps, one log line each time;
  2. what holds it: MemReporter's "Held by" section, one chain per owner;
  3. which test leaks: the pytest plugin fails a test that leaves tensors alive (run with
     --pytest to see its failure output on this same leak).

    python demos/why_alive.py               # CUDA when present, else the CPU
    python demos/why_alive.py --pytest      # the plugin's output for a test of one step
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from _common import ROOT, import_tensorgc, is_cuda, pick_device

loss_history = []  # the leak: losses kept as tensors


def build(device, width):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(),
                                torch.nn.Linear(width, width), torch.nn.GELU(),
                                torch.nn.Linear(width, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt


def step(model, opt, x, y, train):
    import torch

    loss = torch.nn.functional.cross_entropy(model(x), y)
    if train:
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    loss_history.append(loss)  # meant loss.item(): keeps the graph on the no-backward steps


PLUGIN_TEST = '''
import sys
sys.path.insert(0, {demos!r})
import torch, why_alive

def test_one_eval_step():
    model, opt = why_alive.build("{device}", 256)
    x = torch.randn(64, 256, device="{device}")
    y = torch.randint(0, 10, (64,), device="{device}")
    why_alive.step(model, opt, x, y, train=False)
'''


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--pytest", action="store_true", help="show the pytest plugin's failure")
    args = p.parse_args(argv)

    import torch

    tensorgc = import_tensorgc()
    device = pick_device(args.device)
    if args.pytest:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "test_leak.py")
            with open(path, "w") as f:
                f.write(PLUGIN_TEST.format(demos=os.path.join(ROOT, "demos"), device=device))
            env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "-p", "tensorgc.pytest_plugin", "--tensorgc", path],
                               cwd=d, env=env, capture_output=True, text=True)
            print(r.stdout.replace(d, "<tmp>"))
            # the test is meant to error at its teardown with the plugin's report, and only so
            shown = (r.returncode == 1 and "tensorgc: the test left" in r.stdout
                     and "1 error" in r.stdout and " failed" not in r.stdout)
            if not shown:
                print(f"why_alive --pytest: pytest exited {r.returncode} without the plugin's "
                      f"report of the leak (a test that errors at its teardown):\n"
                      f"{r.stderr.replace(d, '<tmp>')[-2000:]}", file=sys.stderr)
                return 1
            return 0
    width = args.width if is_cuda(device) else min(args.width, 512)
    model, opt = build(device, width)
    x = torch.randn(256, width, device=device)
    y = torch.randint(0, 10, (256,), device=device)
    step(model, opt, x, y, train=True)  # the optimizer's state exists from here on
    if is_cuda(device):  # the allocator's history: growth() then also says where it was allocated
        tensorgc.record_memory_history(max_entries=100_000)
    try:
        before = tensorgc.checkpoint(device)
        for i in range(args.steps):
            step(model, opt, x, y, train=i % 3 != 2)
            if i % 4 == 3:
                print(tensorgc.growth(before, device).summary())
        print()
        print(tensorgc.growth(before, device))
        print()
        tensorgc.MemReporter(model, optimizer=opt).report(device=device, owners=True)
    finally:
        if is_cuda(device):
            tensorgc.record_memory_history(enabled=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
