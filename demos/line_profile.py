#!/usr/bin/env python
"""line_profile: which line of a training step takes the memory, then give the device back.

The story: a training step peaks higher than its model and batch suggest. tensorgc's
LineProfiler (pytorch_memlab's API, in C) charges every line of train_step with its peak and its
change of active memory; the forward line holds the activations, backward turns them into grads,
the first optimizer step allocates Adam's moments. Then Courtesy moves every tensor to host
memory so another job could use the GPU for a while, and brings them back bit for bit (on the
CPU, where the tensors are in host memory already, it copies them and says so).

    python demos/line_profile.py            # CUDA when present (allocator counters), else the
                                            # CPU (process resident memory)
"""
from __future__ import annotations

import argparse

from _common import import_tensorgc, is_cuda, pick_device


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)

    import torch

    tensorgc = import_tensorgc()
    device = pick_device(args.device)
    width = args.width if is_cuda(device) else min(args.width, 1024)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width)).to(device)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(512, width, device=device)

    def train_step(x):
        out = model(x)
        loss = out.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    with tensorgc.LineProfiler(train_step) as lp:
        for _ in range(args.steps):
            train_step(x)
    # the profiler reads CUDA's counters wherever CUDA is (memlab's target_gpu), else the RSS
    cols = (("active_bytes.all.peak", "active_bytes.all.delta", "reserved_bytes.all.peak")
            if lp.source.startswith("cuda") else ("rss_bytes.all.peak", "rss_bytes.all.delta"))
    lp.print_stats(columns=cols)

    before = [t.detach().clone() for t in model.parameters()]
    with tensorgc.Courtesy(device) as c:
        mib = f"{c.moved.nbytes / 2**20:.1f} MiB in {c.moved.tensors} tensors " \
              f"({c.moved.storages} storages)"
        if is_cuda(device):
            held = torch.cuda.memory_allocated(device)
            print(f"\nCourtesy: moved {mib} to host memory; memory_allocated({device}) while "
                  f"yielded: {held / 2**20:.1f} MiB")
        else:  # CPU tensors are in host memory already: the mechanism runs, nothing is freed
            print(f"\nCourtesy on the CPU: copied {mib} into new CPU storages; CPU tensors "
                  "already live in host memory, so no memory was freed")
    same = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    print(f"Courtesy: restored {c.restored.nbytes / 2**20:.1f} MiB; parameters bit-identical: "
          f"{same}")
    train_step(x)  # training goes on
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
