#!/usr/bin/env python
"""A real model's memory, every byte named: a TransformerEncoder trained with AdamW for a few
steps, then stopped half-way through the next forward pass (a forward hook on its middle
layer), where the report with owner chains is printed: parameters, grads and AdamW's moments by
their names, the activations the forward in flight has saved grouped by the module that saved
them, and any other tensor by what holds it. The last line is the share of the device's bytes
that the report names or (CUDA, with allocation history recorded) ties to an allocation stack:
on CUDA out of torch.cuda.memory_allocated(), elsewhere out of the live tensors' storages.

    python tools/real_model_report.py                  # CUDA when present, else CPU
    python tools/real_model_report.py --device cpu --layers 2 --d-model 128
    python tools/real_model_report.py --verbose        # every tensor's whole chain
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_tensorgc() -> Any:
    """The in-place build of this checkout when there is one, else an installed tensorgc."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import tensorgc

    return tensorgc


def share(totals: Dict[str, int]) -> float:
    """The fraction of a device's bytes named or stacked: (named + stack-attributed) / allocated
    where the allocator's numbers are known (CUDA), named storage / storage elsewhere."""
    if "allocated" in totals:
        a = totals["allocated"]
        return (totals["named"] + totals["stack_attributed"]) / a if a else 1.0
    s = totals["storage"]
    return totals["named_storage"] / s if s else 1.0


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--verbose", action="store_true", help="every tensor's chain")
    ap.add_argument("--no-history", action="store_true",
                    help="CUDA: do not record allocation stacks")
    args = ap.parse_args(argv)

    import torch

    tensorgc = _import_tensorgc()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda")
    if cuda and not args.no_history:
        # from the first allocation on, so a block no tensor object owns still has a stack
        torch.cuda.memory._record_memory_history(max_entries=100_000)

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(args.d_model, nhead=8,
                                             dim_feedforward=4 * args.d_model,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=args.layers,
                                        enable_nested_tensor=False).to(device)
    head = torch.nn.Linear(args.d_model, 1000).to(device)
    net = torch.nn.Sequential(model, head)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        x = torch.randn(args.batch, args.seq, args.d_model, device=device)
        y = torch.randint(0, 1000, (args.batch, args.seq), device=device)
        loss = loss_fn(net(x).reshape(-1, 1000), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)  # the grads stay, as in most training loops

    for _ in range(args.steps):
        step()

    seen: Dict[str, Any] = {}

    def stop_here(module: Any, inputs: Any, output: Any) -> None:
        t0 = time.perf_counter()
        seen["report"] = tensorgc.MemReporter(net, optimizer=opt).collect(device=device,
                                                                          owners=True)
        seen["seconds"] = time.perf_counter() - t0

    middle = model.layers[args.layers // 2]
    handle = middle.register_forward_hook(stop_here)
    try:
        x = torch.randn(args.batch, args.seq, args.d_model, device=device)
        net(x)
    finally:
        handle.remove()
        if cuda and not args.no_history:
            torch.cuda.memory._record_memory_history(enabled=None)
    rep = seen["report"]
    print(f"--- mid-forward, at the end of layers.{args.layers // 2}: "
          f"MemReporter(net, optimizer=opt).report(owners=True) ---")
    print(rep.format(verbose=args.verbose))
    for dev, t in rep.totals.items():
        what = "named or stacked of allocated" if "allocated" in t else "named of the storages"
        print(f"{dev}: {100 * share(t):.2f}% {what} "
              f"(the report with owners took {seen['seconds']:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
