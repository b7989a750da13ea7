"""One rank of the distributed tests (tests/test_ranks.py starts one process per rank):

    python tests/_dist_worker.py RANK WORLD INIT OUTDIR

INIT is ``tcp:PORT`` (the launcher's environment, a TCPStore on 127.0.0.1) or ``file:PATH`` (a
FileStore). The rank holds (rank + 1) MiB of CPU tensors and a Linear(32, 32), goes through
every distributed scenario in turn on gloo, and writes what it saw to OUTDIR/rank<N>.json (the
test asserts on it). Scenarios that must fail record their error message."""
import contextlib
import datetime
import gc
import io
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1 << 20


def error_of(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 -- the test reads the type and the message
        return f"{type(exc).__name__}: {exc}"
    return None


def main():
    rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    how, _, where = init.partition(":")
    if how == "tcp":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=where, RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
        method = "env://"
    else:
        method = f"file://{where}"
    sys.path.insert(0, ROOT)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    import tensorgc

    def alive():
        """The bytes of the CPU tensors alive now, as the reporter's walk counts them: taken
        right before each table, so that a byte tensor an earlier object collective left behind
        (gloo's threads may still hold one) is in what the table must say too."""
        gc.collect()
        return tensorgc.MemReporter().collect("cpu").totals.get("cpu", {}).get("storage", 0)

    res = {"rank": rank}
    base = tensorgc.MemReporter().collect("cpu").totals.get("cpu", {})
    res["baseline"] = base.get("storage", 0)
    model = torch.nn.Linear(32, 32)
    held = [torch.zeros((rank + 1) * MB // 4)]  # (rank + 1) MiB of float32
    res["made"] = sum(t.numel() * t.element_size() for t in held)
    res["model"] = sum(p.numel() * p.element_size() for p in model.parameters())

    # the autopsy first, before any rank calls gather_report: rank 1 alone publishes
    if rank == 1:
        res["at_publish"] = alive()
        pub = tensorgc.publish_reports(every=3600, model=model, device="cpu")
        res["published"] = pub.publish()
        res["flushed"] = pub.flush(30)
        pub.remove()
    dist.barrier()
    if rank == 0:
        res["at_autopsy"] = alive()
        path, _ = tensorgc.write_autopsy(os.path.join(out, "autopsy"), "cpu", model=model,
                                         peers_wait=30)
        for name in ("ranks.txt", "README.txt", "memreport.txt"):
            with open(os.path.join(path, name), encoding="utf-8") as f:
                res[name] = f.read()
    dist.barrier()

    # the gathered table, on rank 0 only
    res["at_gather"] = alive()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rep = tensorgc.gather_report("cpu", reporter=tensorgc.MemReporter(model))
    res["gather"] = None if rep is None else rep.to_dict()
    res["gather_printed"] = buf.getvalue()
    # on every rank
    res["at_all"] = alive()
    rep = tensorgc.gather_report("cpu", reporter=tensorgc.MemReporter(model), all_ranks=True,
                                 show=False)
    res["all_ranks"] = [{k: v for k, v in r.items() if k != "time"} for r in rep.ranks]
    # MemReporter's option, gathered to the last rank
    res["at_report"] = alive()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tensorgc.MemReporter(model).report(device="cpu", gather=True, dst=world - 1)
    res["report_gather"] = buf.getvalue()

    # bad arguments: raised on every rank before the collective (no rank is left waiting)
    res["bad_dst"] = error_of(lambda: tensorgc.gather_report("cpu", dst=world))
    res["bad_group"] = error_of(lambda: tensorgc.gather_report("cpu", group="world"))
    res["bad_top"] = error_of(lambda: tensorgc.gather_report("cpu", top=1000))
    # a device only the last rank gets wrong (a CUDA index past this machine's devices): it
    # raises after the collective, the others get their table with its row saying why
    missing = f"cuda:{torch.cuda.device_count() if torch.cuda.is_available() else 0}"
    res["missing_device"] = missing
    dev = missing if rank == world - 1 else "cpu"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        res["bad_device"] = error_of(lambda: tensorgc.gather_report(dev))
    res["bad_device_printed"] = buf.getvalue()

    # a subgroup of ranks 0 and 1, gathered to 1; any other rank is not a member
    if world >= 3:
        sub = dist.new_group([0, 1])
        if rank in (0, 1):
            rep = tensorgc.gather_report("cpu", group=sub, dst=1, show=False)
            res["subgroup"] = None if rep is None else [r["rank"] for r in rep.ranks]
        else:
            res["subgroup_error"] = error_of(lambda: tensorgc.gather_report("cpu", group=sub))

    # every rank's snapshot into one directory
    snaps = os.path.join(out, "snaps")
    os.makedirs(snaps, exist_ok=True)
    dist.barrier()
    made = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 4096, "size": 512,
                                                "time_us": 1}]]}
    res["snapshot_path"] = tensorgc.dump_snapshot(snaps, made)
    dist.barrier()
    dist.destroy_process_group()
    del held
    with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
