"""What the training recorders (tools/record_*_snapshot.py) share: their common options, and the
recording itself around the run, done the way a user does it with torch alone (no tensorgc code
runs while it records): ``_record_memory_history(enabled="all", context="all", stacks=...)``,
the run, one allocation that runs out of memory, ``_dump_snapshot``."""
import argparse
import sys
from typing import Callable, Optional

import torch


def parser(doc: str) -> argparse.ArgumentParser:
    """The options every recorder has: --out, --stacks, --steps, --max-entries."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--stacks", choices=["python", "all"], default="all",
                    help="python: Python frames only; all: Python and C++ frames")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--max-entries", type=int, default=1_000_000)
    return ap


def record(name: str, args: argparse.Namespace,
           run: Callable[[torch.device], Optional[str]]) -> int:
    """Runs run(device) under torch's allocator history, then the OOM a user meets, and writes
    the snapshot to args.out; prints what run returned after the peak. 2 without CUDA."""
    if not torch.cuda.is_available():
        print(f"{name}: needs CUDA", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=args.stacks,
                                             max_entries=args.max_entries)
    said = run(torch.device("cuda"))
    try:  # far more than the device has
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        pass
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(args.out)
    torch.cuda.memory._record_memory_history(enabled=None)
    print(f"wrote {args.out}: peak {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB"
          + (f", {said}" if said else ""))
    return 0
