#!/usr/bin/env python
"""ranks: a distributed job's memory, rank by rank.

The story: two ranks train the same model with DistributedDataParallel, but rank 1 also runs a
larger validation batch each step "for the log", outside torch.no_grad(), and keeps its loss --
and with it the graph and the activations it saved. Every rank publishes its
memory summary to the job's store after each step (tensorgc.publish_reports); then every rank
calls tensorgc.gather_report, and rank 0 prints one table with the ranks side by side and the
rank that is highest over the median. Rank 1 then runs out of memory (on CUDA, under a cap: the
autopsy of tensorgc.on_oom says it is rank 1's and reads rank 0's published summary from the
store; on the CPU there is no allocator to run out of, so rank 1 writes the same autopsy by
hand). Each rank dumps its snapshot into one directory (tensorgc.dump_snapshot(directory):
snapshot-rank<N>.pickle), and rank 0 prints `tensorgc stats` of the directory and the command
that draws every rank on one page.

    torchrun --nproc-per-node 2 demos/ranks.py      # one GPU a rank (NCCL); gloo on the CPU
    python3 demos/ranks.py --spawn                  # no launcher: 2 processes, gloo, CPU

On the CPU the snapshots are stand-ins: CPU tensors have no allocator history, so each rank's
file is made from a MemReporter walk after every step (the storages that came and went, with
the wall clock), in the allocator snapshot's format, so that the same commands read it.
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import tempfile
import time

from _common import import_tensorgc

MB = 1 << 20


class CpuHistory:
    """A CPU stand-in for the CUDA allocator's history: after each step, the storages the
    reporter finds, diffed against the previous step's (alloc and free_requested entries with
    the wall clock), and the last ones as the snapshot's blocks; recorded as device ``index``."""

    def __init__(self, reporter, index: int) -> None:
        self.reporter, self.index = reporter, index
        self.live: dict = {}
        self.trace: list = []

    def step(self) -> None:
        rows = self.reporter.collect("cpu").rows
        now = {r.address: r.storage_bytes for r in rows if r.address and r.storage_bytes}
        t = time.time_ns() // 1000
        for addr, size in self.live.items():
            if now.get(addr) != size:
                self.trace.append({"action": "free_requested", "addr": addr, "size": size,
                                   "time_us": t})
        for addr, size in now.items():
            if self.live.get(addr) != size:
                self.trace.append({"action": "alloc", "addr": addr, "size": size, "time_us": t})
        self.live = now

    def snapshot(self) -> dict:
        segs = [{"device": self.index, "address": a, "total_size": n, "segment_type": "large",
                 "blocks": [{"address": a, "size": n, "requested_size": n,
                             "state": "active_allocated"}]} for a, n in sorted(self.live.items())]
        # index is the rank's, so that the files line up as CUDA ranks' would; the key below
        # makes `tensorgc stats` and the ranks page call the device "cpu", not cuda:<index>
        return {"segments": segs,
                "device_traces": [[] for _ in range(self.index)] + [self.trace],
                "tensorgc_device_names": {self.index: "cpu"}}


def run(rank: int, world: int, local: int, use_cuda: bool, args) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    tensorgc = import_tensorgc()
    if use_cuda:
        torch.cuda.set_device(local)  # NCCL's object collectives run on the current device
        device = f"cuda:{local}"
        tensorgc.record_memory_history(max_entries=200_000)
    else:
        device = "cpu"
    dist.init_process_group("nccl" if use_cuda else "gloo",
                            timeout=datetime.timedelta(seconds=120))
    # one directory for every rank: rank 0's choice, broadcast
    where = [args.out or (tempfile.mkdtemp(prefix="tensorgc-ranks-") if rank == 0 else None)]
    dist.broadcast_object_list(where, src=0)
    out = where[0]
    os.makedirs(out, exist_ok=True)

    torch.manual_seed(0)
    width = args.width
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)]).to(device)
    ddp = DDP(model, device_ids=[local] if use_cuda else None)
    opt = torch.optim.Adam(model.parameters())
    pub = tensorgc.publish_reports(every=0, model=model, optimizer=opt, device=device)
    history = CpuHistory(tensorgc.MemReporter(model, optimizer=opt), local) if not use_cuda \
        else None
    off = tensorgc.on_oom(out, model=model, optimizer=opt) if use_cuda else None
    kept = []  # rank 1's mistake
    for step in range(args.steps):
        x = torch.randn(args.batch, width, device=device)
        y = ddp(x)
        y.square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 1:  # a validation batch for the log, outside no_grad, its result kept:
            val = torch.randn(6 * args.batch, width, device=device)  # its graph holds the
            kept.append(model(val).mean())                           # activations
        if history is not None:
            history.step()

    table = tensorgc.gather_report(device, reporter=tensorgc.MemReporter(model, optimizer=opt))
    pub.flush(10)
    dist.barrier()
    if rank == 1:
        if use_cuda:
            cap = (torch.cuda.memory_reserved() + 256 * MB) / torch.cuda.get_device_properties(
                local).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap))
            try:
                kept.append(torch.empty(1 << 30, dtype=torch.uint8, device=device))
            except torch.cuda.OutOfMemoryError:
                print("rank 1: OutOfMemoryError", flush=True)
            finally:
                torch.cuda.set_per_process_memory_fraction(1.0)
            found = sorted(d for d in os.listdir(out) if d.startswith("oom-"))
            autopsy = os.path.join(out, found[-1]) if found else None
            what = "OOM autopsy"
        else:  # no allocator to run out of: the same files, written by hand and named so
            written, _ = tensorgc.write_autopsy(out, "cpu", model=model, optimizer=opt,
                                                reason="by hand: the CPU has no allocator to "
                                                       "run out of")
            autopsy = os.path.join(out, "autopsy-" + os.path.basename(written)[len("oom-"):])
            os.rename(written, autopsy)
            what = "autopsy (written by hand: a CPU run has no OOM)"
        if autopsy is None or not os.path.exists(os.path.join(autopsy, "ranks.txt")):
            raise SystemExit(f"rank 1: no autopsy with ranks.txt in {out}: nothing to show")
        with open(os.path.join(autopsy, "ranks.txt"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        print(f"rank 1's {what}: {autopsy}\n  ranks.txt:", flush=True)
        start = next(i for i, ln in enumerate(lines) if ln.startswith("Memory by rank"))
        print("\n".join("    " + ln for ln in lines[start:start + 9]), flush=True)
    dist.barrier()
    if off is not None:
        off()
    if use_cuda:
        path = tensorgc.dump_snapshot(out)
        tensorgc.record_memory_history(enabled=None)
    else:
        path = tensorgc.dump_snapshot(out, history.snapshot())
    dist.barrier()
    if rank == 0:
        print(f"\nsnapshots: {out}" + ("" if use_cuda else
                                       " (CPU stand-ins: MemReporter walks after each step)"))
        print(f"$ python -m tensorgc stats {out}", flush=True)
        from tensorgc.cli import main as tensorgc_command

        tensorgc_command(["stats", out])
        print(f"\nEvery rank on one page:\n  python -m tensorgc timeline {out} -o ranks.html\n"
              f"One rank's full timeline:\n  python -m tensorgc timeline {path} -o rank0.html",
              flush=True)
    del kept, table
    pub.remove()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawned(index: int, world: int, port: int, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(index),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(index))
    run(index, world, index, False, args)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spawn", action="store_true",
                   help="start the ranks here with torch.multiprocessing (gloo, CPU)")
    p.add_argument("--ranks", type=int, default=2, help="with --spawn: how many (default 2)")
    p.add_argument("--device", choices=["auto", "cpu"], default="auto",
                   help="auto: one GPU a rank where there are enough, else the CPU")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--out", default=None, help="the directory for the snapshots and autopsies "
                                               "(default: a new temporary one)")
    args = p.parse_args(argv)
    if args.spawn:
        import torch.multiprocessing as mp

        if args.ranks < 2:
            p.error("--ranks must be 2 or more")
        mp.spawn(spawned, args=(args.ranks, free_port(), args), nprocs=args.ranks)
        return 0
    if "RANK" not in os.environ:
        p.error("start it with torchrun --nproc-per-node 2 demos/ranks.py, or with --spawn")
    import torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    use_cuda = (args.device == "auto" and torch.cuda.is_available()
                and torch.cuda.device_count() >= local_world)
    run(rank, world, local, use_cuda, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
