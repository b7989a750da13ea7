#!/usr/bin/env python
"""B12 -- what tensorgc.warn_memory_growth costs a training step on a real model.

Setup: a Transformer encoder (``--layers`` 2 layers, d_model ``--width`` 256, 8 heads, a
feed-forward of 4x the width) on batches of ``--batch`` (8) sequences of ``--seq`` (64)
tokens, trained with AdamW on ``--device`` (cpu or cuda); nothing leaks, so the watch only
samples (no investigation: the run fails if one happened). Measured, in one process:

1. ``step`` -- the training step's wall time (forward, backward, AdamW, zero_grad; on CUDA
   synchronized at the step's end), the median of ``--steps`` (20) steps, in ``--rounds`` (5)
   rounds that alternate without and with the watch (the optimizer's hook installed), so that
   the machine's drift hits both alike; the difference of the medians is noisy and printed too;
2. ``watch per step`` -- the watch's own work a step, timed directly: ``GrowthWatch.step()`` on
   this process's memory, ``--calls`` (20,000) times, the median of 5 batches (the sample:
   torch.cuda.memory_allocated on CUDA, glibc's mallinfo2 on the CPU; the trend test over its
   window; the hook's call through torch's optimizer hook table is in 3);
3. ``hook`` -- an optimizer step of a one-parameter SGD with and without the watch's hook.

The figure is (2 + the hook's extra of 3) / 1, in percent: the target is 1%.

    python3 bench/b12_growth_watch.py --device cpu --json docs/results/b12-cpu.json
    python3 bench/b12_growth_watch.py --device cuda --json docs/results/b12-h200.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--json", default=None)
    a = p.parse_args()

    import torch
    import tensorgc

    dev = a.device
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(a.width, 8, 4 * a.width, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(a.batch, a.seq, a.width, device=dev)

    def train_step() -> float:
        t = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - t

    for _ in range(3):
        train_step()  # warm-up: optimizer state, kernels
    off: list = []
    on: list = []
    watch = None
    for r in range(a.rounds):
        off.extend(train_step() for _ in range(a.steps))
        watch = tensorgc.warn_memory_growth(dev, page=False)
        on.extend(train_step() for _ in range(a.steps))
        stats = watch.stats()
        watch.remove()
        if stats["investigations"]:
            print(f"round {r}: the watch investigated a run that does not leak: {stats}",
                  file=sys.stderr)
            return 1
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    step = statistics.median(off)
    step_on = statistics.median(on)

    # 2: the watch's own work a step
    w = tensorgc.warn_memory_growth(dev, page=False, optimizer_hook=False)
    batches = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(a.calls // 5):
            w.step()
        batches.append((time.perf_counter() - t) / (a.calls // 5))
    source = w.stats()["source"]
    w.remove()
    per_step = statistics.median(batches)

    # 3: the hook's call
    prm = torch.zeros(1, device=dev, requires_grad=True)
    prm.grad = torch.zeros(1, device=dev)
    sgd = torch.optim.SGD([prm], lr=0.1)

    def sgd_steps(n: int) -> float:
        t = time.perf_counter()
        for _ in range(n):
            sgd.step()
        sync()
        return (time.perf_counter() - t) / n
    n = a.calls // 5
    plain = statistics.median(sgd_steps(n) for _ in range(5))
    hooked_w = tensorgc.warn_memory_growth(dev, page=False)
    hooked = statistics.median(sgd_steps(n) for _ in range(5))
    hooked_w.remove()
    hook_extra = max(hooked - plain - per_step, 0.0)
    pct = 100.0 * (per_step + hook_extra) / step
    res = {"device": dev, "torch": torch.__version__, "source": source,
           "model": f"TransformerEncoder {a.layers}x{a.width}, batch {a.batch}x{a.seq}",
           "step_ms": step * 1e3, "step_watched_ms": step_on * 1e3,
           "watch_per_step_us": per_step * 1e6, "hook_extra_us": hook_extra * 1e6,
           "sgd_step_us": plain * 1e6, "sgd_step_hooked_us": hooked * 1e6,
           "percent_of_step": pct, "steps": a.steps, "rounds": a.rounds}
    print(f"| device | model | step | watched step | watch a step | hook's call | % of a step |\n"
          f"| --- | --- | --- | --- | --- | --- | --- |\n"
          f"| {dev} ({source}) | {res['model']} | {step * 1e3:.1f} ms | {step_on * 1e3:.1f} ms | "
          f"{per_step * 1e6:.1f} us | {hook_extra * 1e6:.1f} us | {pct:.3f}% |")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
