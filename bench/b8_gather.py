#!/usr/bin/env python
"""B8 -- what one tensorgc.gather_report call costs a distributed job, per call, per rank.

Setup: ``--ranks`` (2) processes started by this script, one a rank, in one process group
(``--backend gloo`` on the CPU, the default; ``--backend nccl --device cuda`` on a machine with
a GPU a rank: each rank calls torch.cuda.set_device(its local rank) first, as NCCL's object
collectives require). In each rank: a heap of ``--heap`` (1,000,000) live gc-tracked objects
(``_common.build_heap``, as B1 to B7) and ``--layers`` x Linear(``--width``) (20 x 1024) with
Adam after one step on the device, plus (rank + 1) x 16 MiB of one more tensor, so that the
ranks differ.

Modes, timed in every rank, interleaved mode by mode in each run; each run is ``--calls`` calls
of one mode between two barriers (the barriers untimed), its figure the mean per call; medians
over ``--repeat`` runs:

* ``gather_report``  -- tensorgc.gather_report(device, reporter=MemReporter(model, optimizer=opt),
  show=False): this rank's walk and summary, gather_object to rank 0, the GatheredReport there,
  and the hand-over of the summary to the store writer;
* ``collect``        -- MemReporter(model, optimizer=opt).collect(device) alone: the walk that
  gather_report makes;
* ``gather_object``  -- a bare torch.distributed.gather_object of a dict of the same size as a
  summary (this rank's own, taken once before timing) to rank 0: the collective alone;
* ``all_gather_object`` -- the same dict with all_gather_object (what ``all_ranks=True`` uses);
* ``publish``        -- Publisher.publish(): the walk, the summary and the hand-over to the store
  writer thread (what each optimizer step that publishes costs).

``--track`` turns tensorgc.track_tensors() on first (reports then walk an index of live tensors,
not the heap). Output: a markdown table on stdout (rank 0's medians, and the slowest rank's), the
summary's size, JSON to ``--json`` (every rank's runs), progress on stderr.

    python3 bench/b8_gather.py --repeat 7 --json docs/results/b8-gather-cpu.json
    python3 bench/b8_gather.py --backend nccl --device cuda --repeat 7   # one GPU a rank
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

MODES = ("gather_report", "collect", "gather_object", "all_gather_object", "publish")
MB = 1 << 20


def worker(cfg: dict) -> None:
    rank, world = cfg["rank"], cfg["ranks"]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(cfg["port"]), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import torch
    import torch.distributed as dist

    tensorgc = C.import_tensorgc()
    device = cfg["device"]
    if device.startswith("cuda"):
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(cfg["backend"], timeout=datetime.timedelta(seconds=cfg["timeout"]))
    heap = C.build_heap(cfg["heap"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(cfg["width"], cfg["width"])
                                  for _ in range(cfg["layers"])]).to(device)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(8, cfg["width"], device=device)).sum().backward()
    opt.step()
    extra = torch.zeros((rank + 1) * 16 * MB // 4, device=device)
    if cfg["track"]:
        tensorgc.track_tensors(True)
    import gc

    gc.collect()
    tracked = len(gc.get_objects())
    reporter = tensorgc.MemReporter(model, optimizer=opt)
    publisher = tensorgc.MemReporter(model, optimizer=opt).publish(every=1e9, device=device,
                                                                   top=20)
    own = tensorgc.gather_report(device, reporter=reporter, show=False, all_ranks=True)
    payload = dict(own.ranks[rank])
    size = len(pickle.dumps(payload))

    def gather_report():
        tensorgc.gather_report(device, reporter=reporter, show=False)

    def collect():
        reporter.collect(device)

    def gather_object():
        out = [None] * world if rank == 0 else None
        dist.gather_object(payload, out, dst=0)

    def all_gather_object():
        out = [None] * world
        dist.all_gather_object(out, payload)

    def publish():
        publisher.publish()

    fns = {"gather_report": gather_report, "collect": collect, "gather_object": gather_object,
           "all_gather_object": all_gather_object, "publish": publish}
    modes = cfg["modes"]
    for m in modes:  # warm-up
        fns[m]()
    runs = {m: [] for m in modes}
    for _ in range(cfg["repeat"]):
        for m in modes:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(cfg["calls"]):
                fns[m]()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            runs[m].append((time.perf_counter() - t0) / cfg["calls"])
            dist.barrier()
    publisher.flush(30)
    publisher.remove()
    C.emit_result({"rank": rank, "runs": runs, "summary_bytes": size,
                   "summary_json_bytes": len(json.dumps(payload)), "tracked": tracked,
                   "allocated": payload.get("allocated"), "device": device})
    dist.barrier()
    dist.destroy_process_group()
    del heap, extra


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cfg: dict, timeout: float) -> list:
    """Starts one process a rank; returns their results (rank order). Kills every rank when one
    overstays ``timeout``."""
    port = free_port()
    procs = []
    for r in range(cfg["ranks"]):
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker",
             json.dumps(dict(cfg, rank=r, port=port))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        raise SystemExit(f"B8: a rank overstayed {timeout:g} s; every rank was stopped")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        line = [x for x in out.splitlines() if x.startswith(C.RESULT_PREFIX)]
        if p.returncode != 0 or not line:
            raise SystemExit(f"B8: rank {r} exited {p.returncode}:\n{err[-3000:]}")
        results.append(json.loads(line[-1][len(C.RESULT_PREFIX):]))
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2, help="processes, one a rank (default 2)")
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--device", default="cpu", help="cpu, or cuda (rank N on cuda:N)")
    p.add_argument("--heap", type=int, default=1_000_000, help="live objects in each rank")
    p.add_argument("--layers", type=int, default=20)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=7, help="runs of each mode (median)")
    p.add_argument("--calls", type=int, default=5, help="calls per run (its mean)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--track", action="store_true", help="tensorgc.track_tensors() on")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run")
    p.add_argument("--json")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or args.ranks < 2 or args.repeat < 1 or args.calls < 1:
        p.error(f"modes are {', '.join(MODES)}; --ranks >= 2, --repeat and --calls >= 1"
                + (f" (not {', '.join(bad)})" if bad else ""))
    if args.backend == "nccl" and not args.device.startswith("cuda"):
        p.error("--backend nccl needs --device cuda (one GPU a rank)")
    cfg = {k: getattr(args, k) for k in ("ranks", "backend", "device", "heap", "layers", "width",
                                         "repeat", "calls", "track", "timeout")}
    cfg["modes"] = modes
    C.log(f"B8: {args.ranks} ranks on {args.backend}/{args.device}, heap {args.heap:,}, "
          f"{args.layers} x Linear({args.width}), {args.repeat} x {args.calls} calls per mode")
    results = launch(cfg, args.timeout)
    med = {r["rank"]: {m: statistics.median(v) for m, v in r["runs"].items()} for r in results}
    env = C.environment(args.device)
    print(f"### B8 gather_report: {args.ranks} ranks, {args.backend} on {args.device}, "
          f"{results[0]['tracked']:,} gc-tracked objects a rank, {args.layers} x "
          f"Linear({args.width}) + Adam{', track_tensors() on' if args.track else ''}\n")
    print(f"python {env.get('python')}, torch {env.get('torch')}, {env.get('cpu_count')} CPUs; "
          f"median of {args.repeat} runs of {args.calls} calls (mean per call); one summary: "
          f"{results[0]['summary_bytes']:,} bytes pickled, {results[0]['summary_json_bytes']:,} "
          "as JSON in the store\n")
    print("| mode | rank 0, ms per call | slowest rank, ms per call | rank 0's runs (ms) |")
    print("| --- | ---: | ---: | --- |")
    for m in modes:
        runs = next(r for r in results if r["rank"] == 0)["runs"][m]
        print(f"| {m} | {med[0][m] * 1e3:.2f} | {max(v[m] for v in med.values()) * 1e3:.2f} | "
              f"{', '.join(f'{x * 1e3:.2f}' for x in runs)} |")
    if "gather_report" in modes and "collect" in modes:
        g, c = med[0]["gather_report"], med[0]["collect"]
        print(f"\ngather_report - collect on rank 0: {(g - c) * 1e3:.2f} ms per call (the "
              f"collective, the summary and the table); gather_report / collect: {g / c:.2f}x")
    C.write_json(args.json, {"env": env, "args": vars(args), "results": results,
                             "median": {str(k): v for k, v in med.items()}})


if __name__ == "__main__":
    main()
