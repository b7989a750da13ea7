#!/usr/bin/env python
"""Records torch's own allocator history of a small training run, the way a user does: a
TransformerEncoder with AdamW, a few steps (forward, backward, step, zero_grad), then one
allocation that runs out of memory, all under
``torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=...)``, and
writes it with torch's ``torch.cuda.memory._dump_snapshot``. No tensorgc code runs while it
records: the file is what torch alone writes, the input of the timeline's categories inferred
from stacks. Needs CUDA.

    python tools/record_training_snapshot.py --stacks all --out transformer-adamw.pickle
    python tools/record_training_snapshot.py --stacks python --layers 2 --out small.pickle
"""
import sys

import torch

import _recording


def main() -> int:
    ap = _recording.parser(__doc__)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()

    def run(dev: torch.device) -> None:
        layer = torch.nn.TransformerEncoderLayer(args.d_model, nhead=8,
                                                 dim_feedforward=4 * args.d_model,
                                                 batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=args.layers,
                                            enable_nested_tensor=False).to(dev)
        head = torch.nn.Linear(args.d_model, 1000).to(dev)
        opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()
        for _ in range(args.steps):
            x = torch.randn(args.batch, args.seq, args.d_model, device=dev)
            y = torch.randint(0, 1000, (args.batch, args.seq), device=dev)
            out = head(model(x))
            loss = loss_fn(out.reshape(-1, 1000), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del x, y, out, loss

    return _recording.record("record_training_snapshot", args, run)


if __name__ == "__main__":
    sys.exit(main())
