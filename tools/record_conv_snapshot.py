#!/usr/bin/env python
"""Records torch's own allocator history of a small convolutional training run, for what the
other recordings do not exercise: cuDNN convolutions (their per-call workspaces; with
``--benchmark`` the algorithm search's too), BatchNorm buffers, SGD with momentum, a
reentrant checkpoint (``--reentrant``: its recompute runs inside the checkpoint's backward),
a validation forward under ``torch.no_grad`` whose output the loop keeps, and an OOM at the
end. No tensorgc code runs: the file is what torch alone writes. Needs CUDA.

    python tools/record_conv_snapshot.py --stacks all --out conv-all.pickle
    python tools/record_conv_snapshot.py --stacks all --benchmark --reentrant --out conv-b.pickle

On an H200 with torch 2.11.0+cu130 the second command records (peak 3.36G: no "other" at the
peak, 65 MB of workspace); the first stops inside torch's own ``batch_norm`` ("returned NULL
without setting an exception"), with no tensorgc code in the process.
"""
import sys

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import _recording


class Net(torch.nn.Module):
    def __init__(self, width: int, blocks: int, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.stem = torch.nn.Conv2d(3, width, 3, padding=1)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.BatchNorm2d(width),
            torch.nn.ReLU(), torch.nn.Conv2d(width, width, 3, padding=1),
            torch.nn.BatchNorm2d(width)) for _ in range(blocks))
        self.head = torch.nn.Linear(width, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for i, block in enumerate(self.blocks):
            if i % 2 and self.training:  # every other block checkpointed
                x = F.relu(x + checkpoint(block, x, use_reentrant=self.reentrant))
            else:
                x = F.relu(x + block(x))
        return self.head(x.mean((2, 3)))


def main() -> int:
    ap = _recording.parser(__doc__)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--benchmark", action="store_true", help="torch.backends.cudnn.benchmark")
    ap.add_argument("--reentrant", action="store_true", help="reentrant checkpoints")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = args.benchmark

    def run(dev: torch.device) -> str:
        model = Net(args.width, args.blocks, args.reentrant).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        kept = None
        for _ in range(args.steps):
            model.train()
            x = torch.randn(args.batch, 3, args.size, args.size, device=dev)
            y = torch.randint(0, 100, (args.batch,), device=dev)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del x, y, loss
            model.eval()
            with torch.no_grad():  # validation: the loop keeps the last output
                kept = model(torch.randn(args.batch, 3, args.size, args.size, device=dev))
        return f"kept {tuple(kept.shape)}"

    return _recording.record("record_conv_snapshot", args, run)


if __name__ == "__main__":
    sys.exit(main())
