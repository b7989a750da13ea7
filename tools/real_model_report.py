#!/usr/bin/env python
"""Real models' memory, every byte named: the share of a training job's tensor bytes that
MemReporter names by default (owners=None: the automatic owner search) and with owners=True,
and how long each report took, on three models:

  encoder      a TransformerEncoder trained with AdamW for a few steps, then stopped half-way
               through the next forward pass (a forward hook on its middle layer): parameters,
               grads and AdamW's moments by their names, the activations the forward in flight
               has saved grouped by the module that saved them, any other tensor by its holder;
  gpt          a GPT-style decoder (defined here: no download) trained with AdamW and activation
               checkpointing (torch.utils.checkpoint of each block, --checkpoint non-reentrant or
               reentrant), reported at a step's end: after optimizer.step(), before zero_grad(),
               with the loop keeping each step's loss;
  gpt-compile  the same model under torch.compile.

The share is of the device's bytes that a report names or (CUDA, with allocation history
recorded) ties to an allocation stack: on CUDA out of torch.cuda.memory_allocated(), elsewhere
out of the live tensors' storages.

    python tools/real_model_report.py                  # encoder; CUDA when present, else CPU
    python tools/real_model_report.py --model gpt --checkpoint reentrant
    python tools/real_model_report.py --model gpt-compile --device cpu
    python tools/real_model_report.py --device cpu --layers 2 --d-model 128
    python tools/real_model_report.py --verbose        # every tensor's whole chain
    python tools/real_model_report.py --model gpt --unattributed   # CUDA: the blocks no tensor
                                                       # holds, with their allocation stacks
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_tensorgc() -> Any:
    """The in-place build of this checkout when there is one for this interpreter, else an
    installed tensorgc (a wheel's)."""
    import importlib.machinery

    built = any(os.path.exists(os.path.join(ROOT, "tensorgc", "_tensorgc" + suffix))
                for suffix in importlib.machinery.EXTENSION_SUFFIXES)
    if built and ROOT not in sys.path:
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


def _gpt(args: Any, device: str) -> Any:
    """A GPT-style decoder: token and position embeddings, pre-norm blocks of causal attention
    (scaled_dot_product_attention) and an MLP, a final norm and a head tied to the embedding;
    each block checkpointed in training unless --checkpoint none."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    d, h = args.d_model, args.heads

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, h, C // h).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(args.vocab, d)
            self.wpe = nn.Embedding(args.seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, args.vocab, bias=False)
            self.head.weight = self.wte.weight  # tied, as GPT-2's

        def forward(self, idx: Any) -> Any:
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.blocks:
                if self.training and args.checkpoint != "none":
                    x = checkpoint(b, x, use_reentrant=args.checkpoint == "reentrant")
                else:
                    x = b(x)
            return self.head(self.ln_f(x))

    return GPT().to(device)


def _encoder_run(args: Any, device: str, take: Callable[[Any, Any], None]) -> str:
    import torch

    layer = torch.nn.TransformerEncoderLayer(args.d_model, nhead=8,
                                             dim_feedforward=4 * args.d_model,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=args.layers,
                                        enable_nested_tensor=False).to(device)
    head = torch.nn.Linear(args.d_model, 1000).to(device)
    net = torch.nn.Sequential(model, head)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses: List[Any] = []  # --keep-losses: each step's loss, as a loop that logs them keeps it

    def step() -> None:
        x = torch.randn(args.batch, args.seq, args.d_model, device=device)
        y = torch.randint(0, 1000, (args.batch, args.seq), device=device)
        loss = loss_fn(net(x).reshape(-1, 1000), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)  # the grads stay, as in most training loops
        if args.keep_losses:
            losses.append(loss)

    for _ in range(args.steps):
        step()

    def stop_here(module: Any, inputs: Any, output: Any) -> None:
        take(net, opt)

    middle = model.layers[args.layers // 2]
    handle = middle.register_forward_hook(stop_here)
    try:
        x = torch.randn(args.batch, args.seq, args.d_model, device=device)
        net(x)
    finally:
        handle.remove()
    return f"mid-forward, at the end of layers.{args.layers // 2}"


def _gpt_run(args: Any, device: str, take: Callable[[Any, Any], None]) -> str:
    import torch
    import torch.nn.functional as F

    model = _gpt(args, device)
    net = torch.compile(model) if args.model == "gpt-compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses: List[Any] = []  # the loop keeps each step's loss, graph and all

    def train() -> None:
        for step in range(args.steps):
            idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
            targets = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
            logits = net(idx)
            loss = F.cross_entropy(logits.view(-1, args.vocab), targets.view(-1))
            loss.backward()
            opt.step()
            losses.append(loss)
            if step == args.steps - 1:
                take(model, opt)  # the step's end: after optimizer.step(), before zero_grad()
            opt.zero_grad(set_to_none=True)

    train()
    return (f"at a step's end, checkpoint {args.checkpoint}"
            + (", under torch.compile" if args.model == "gpt-compile" else ""))


def _unattributed(rep: Any, device: str) -> List[str]:
    """CUDA: each allocated block of the allocator that holds no storage the report found, with
    its size and its recorded stack (the Python and C++ frames, when history is on)."""
    import torch

    idx = torch.device(device).index or 0
    ptrs = sorted(r.address for r in rep.rows if r.address and r.device == f"cuda:{idx}")
    import bisect

    out = []
    for seg in torch.cuda.memory._snapshot()["segments"]:
        if seg.get("device") != idx:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            start, size = addr, b["size"]
            addr += size
            if b["state"] != "active_allocated":
                continue
            k = bisect.bisect_left(ptrs, start)
            if k < len(ptrs) and ptrs[k] < start + size:
                continue  # a tensor's storage is in it
            frames = b.get("frames") or []
            out.append(f"  block {start:#x}: {size:,} bytes (requested {b.get('requested_size', 0):,}), "
                       f"stream {seg.get('stream', '?')}, {len(frames)} frames")
            for f in frames[:16]:
                out.append(f"      {f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '?')}")
    return out or ["  none: every allocated block holds a storage the report found"]


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("encoder", "gpt", "gpt-compile"), default="encoder")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8, help="gpt: attention heads")
    ap.add_argument("--vocab", type=int, default=8192, help="gpt: vocabulary size")
    ap.add_argument("--checkpoint", choices=("non-reentrant", "reentrant", "none"),
                    default="non-reentrant", help="gpt: torch.utils.checkpoint's use_reentrant")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--keep-losses", action="store_true",
                    help="encoder: the loop keeps each step's loss in a list")
    ap.add_argument("--repeat", type=int, default=1,
                    help="reports of each kind taken, interleaved; their median time printed")
    ap.add_argument("--verbose", action="store_true", help="every tensor's chain")
    ap.add_argument("--show", choices=("default", "owners"), default="default",
                    help="which report's table to print (default: the default one's)")
    ap.add_argument("--unattributed", action="store_true",
                    help="CUDA: list the allocated blocks no tensor was found in")
    ap.add_argument("--no-history", action="store_true",
                    help="CUDA: do not record allocation stacks")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    import torch

    tensorgc = _import_tensorgc()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda")
    if cuda and not args.no_history:
        # from the first allocation on, so a block no tensor object owns still has a stack
        torch.cuda.memory._record_memory_history(max_entries=100_000)

    torch.manual_seed(0)
    seen: Dict[str, Tuple[Any, float]] = {}
    extra: List[str] = []

    def take(model: Any, opt: Any) -> None:
        """One report untimed (the first imports and caches), then owners=False (what the
        default was), the default (owners=None) and owners=True, each timed."""
        reporter = tensorgc.MemReporter(model, optimizer=opt)
        reporter.collect(device=device, owners=False)
        times: Dict[str, List[float]] = {}
        for _ in range(args.repeat):  # interleaved; the median of each is printed
            for key, owners in (("off", False), ("default", None), ("owners", True)):
                t0 = time.perf_counter()
                rep = reporter.collect(device=device, owners=owners)
                times.setdefault(key, []).append(time.perf_counter() - t0)
                seen[key] = (rep, statistics.median(times[key]))
                del rep
        if args.unattributed and cuda:
            extra.extend(_unattributed(seen["owners"][0], device))

    try:
        where = (_encoder_run if args.model == "encoder" else _gpt_run)(args, device, take)
    finally:
        if cuda and not args.no_history:
            torch.cuda.memory._record_memory_history(enabled=None)
    rep = seen[args.show][0]
    call = "report()" if args.show == "default" else "report(owners=True)"
    print(f"--- {args.model}, {where}: MemReporter(model, optimizer=opt).{call} ---")
    print(rep.format(verbose=args.verbose))
    if extra:
        print("Allocated blocks that hold no storage the report found:")
        print("\n".join(extra))
    for key, label in (("off", "with owners=False"), ("default", "by default (owners=None)"),
                       ("owners", "with owners=True")):
        r, seconds = seen[key]
        for dev, t in r.totals.items():
            what = ("named or stacked of allocated" if "allocated" in t
                    else "named of the storages")
            print(f"{dev}: {100 * share(t):.2f}% {what} {label}, the report took "
                  f"{seconds * 1e3:.0f} ms" + (f" (median of {args.repeat})" if args.repeat > 1
                                               else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
