#!/usr/bin/env python
"""Records torch's own allocator history of a second, different training run: a small GPT-style
decoder (token and position embeddings, causal attention through
``scaled_dot_product_attention``, a tied head) trained with activation checkpointing
(``torch.utils.checkpoint``, non-reentrant), bf16 autocast, two micro-batches of gradient
accumulation, gradient clipping, Adam with a learning-rate schedule, and a loop that does what
training loops do: it keeps the last micro-batch's ``logits`` in a variable into the next step,
fetches the next batch before the step ends, and keeps a list of detached losses. It ends with
an allocation that runs out of memory. No tensorgc code runs: the file is what torch alone
writes (``_record_memory_history(enabled="all", context="all", stacks=...)`` and
``_dump_snapshot``). Needs CUDA.

    python tools/record_gpt_snapshot.py --stacks all --out gpt-ckpt-all.pickle
    python tools/record_gpt_snapshot.py --stacks python --out gpt-ckpt-python.pickle
"""
import math
import sys

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import _recording


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab: int, ctx: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(ctx, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2's

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(self.ln(x))


def main() -> int:
    ap = _recording.parser(__doc__)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--accum", type=int, default=2)
    args = ap.parse_args()

    def run(dev: torch.device) -> str:
        model = GPT(args.vocab, args.seq, args.d_model, args.layers, args.heads).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.95))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / 2) * 0.5 * (1 + math.cos(math.pi * s / 100)))

        def batch() -> torch.Tensor:
            return torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev)

        losses = []
        logits = None
        nxt = batch()
        for _ in range(args.steps):
            for _ in range(args.accum):
                data, nxt = nxt, batch()  # the next batch is fetched before this one is used
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = model(data[:, :-1])
                    loss = F.cross_entropy(logits.float().view(-1, args.vocab),
                                           data[:, 1:].reshape(-1)) / args.accum
                loss.backward()
                losses.append(loss.detach())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        return (f"logits kept {logits.numel() * logits.element_size() / 2**20:.1f} MiB, "
                f"{len(losses)} losses")

    return _recording.record("record_gpt_snapshot", args, run)


if __name__ == "__main__":
    sys.exit(main())
