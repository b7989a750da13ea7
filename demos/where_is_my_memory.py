#!/usr/bin/env python
"""where_is_my_memory: a training step stopped mid-forward, and every byte on the device named.

The story: a model trains fine for one step, then the next forward pass runs out of memory
half-way. What is on the device at that moment? Parameters, their grads (kept from the last
step because zero_grad(set_to_none=False) was never reached), Adam's two moments per
parameter, the activations autograd saved for backward, and memory that belongs to no tensor
at all (cuBLAS workspaces). MemReporter names each, counts shared storages once, and on CUDA
reconciles its total with torch.cuda.memory_allocated(), the allocator's reserve and the
driver's view of the process.

    python demos/where_is_my_memory.py            # CUDA when present, else CPU
    python demos/where_is_my_memory.py --device cpu --layers 4
"""
from __future__ import annotations

import argparse

from _common import import_tensorgc, is_cuda, pick_device


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--no-history", action="store_true",
                   help="CUDA: do not record allocation stacks (unowned blocks stay unexplained)")
    args = p.parse_args(argv)

    import torch

    tensorgc = import_tensorgc()
    device = pick_device(args.device)
    width = args.width if is_cuda(device) else min(args.width, 256)
    if is_cuda(device) and not args.no_history:
        # From the first allocation on, so even blocks no tensor owns get a stack.
        torch.cuda.memory._record_memory_history(max_entries=10000)

    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.LayerNorm(width)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, width, device=device)

    model(x).square().mean().backward()
    opt.step()  # grads stay: zero_grad() is where the next step would have freed them

    def stop_here(module, inputs, output):
        reporter = tensorgc.MemReporter(model, optimizer=opt)
        print(f"--- mid-forward, after layer {module_index}: the graph so far is alive ---")
        reporter.report(verbose=True, device=device)

    module_index = 2 * (args.layers // 2)
    handle = model[module_index].register_forward_hook(stop_here)
    y = model(x)
    handle.remove()
    del y
    if is_cuda(device) and not args.no_history:
        torch.cuda.memory._record_memory_history(enabled=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
