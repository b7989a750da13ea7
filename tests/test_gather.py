"""Distributed jobs: gather_report over a real process group (2 and 3 CPU processes on gloo, one
launch each: tests/_dist_worker.py goes through every scenario and the tests read what each rank
saw), the OOM autopsy reading another rank's published summary from the job's store, dump_snapshot
into a directory per rank; and, in this process, the table's arithmetic, the store reader's
bounds (a missing key, a store that fails or stops answering, a hostile value) and the
single-process fallbacks."""
import json
import os
import socket
import statistics
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc.cycles import dedup
from tensorgc.distributed import _summaries
from tensorgc.ranks import GatheredReport, peer_summaries
from tensorgc.reporter import readable_size as R

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_dist_worker.py")
MB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, out, init):
    """Runs the worker on `world` ranks; returns each rank's results. Every process is killed
    if the run outlasts its timeout, so a hang fails the test instead of stalling it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    procs = [subprocess.Popen([sys.executable, WORKER, str(r), str(world), init, str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=180))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, (_, err)) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{err[-4000:]}"
    results = []
    for r in range(world):
        with open(os.path.join(out, f"rank{r}.json"), encoding="utf-8") as f:
            results.append(json.load(f))
    return results


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Two ranks over the launcher's environment (a TCPStore)."""
    out = tmp_path_factory.mktemp("two")
    return launch(2, out, f"tcp:{free_port()}"), out


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Three ranks over a FileStore."""
    out = tmp_path_factory.mktemp("three")
    return launch(3, out, f"file:{out / 'store'}"), out


@pytest.fixture(scope="module", params=[2, 3])
def job(request):
    """(world, (results, out)): the job of two ranks or of three, as the tests that hold for both
    take it. A module fixture they name, so that tests/conftest.py groups them with the others on
    the worker that launched the jobs, instead of launching them again on the other worker."""
    return request.param, request.getfixturevalue({2: "two", 3: "three"}[request.param])


# gloo's threads may hold the byte tensor of an earlier object collective a little longer (torch
# keeps its Python object while C++ holds it), so a walk may count one more small uint8 tensor:
# rows are compared within this much, and the printed table against its own rows
STRAY = 64 << 10


def near(a, b):
    return abs(a - b) < STRAY


def size_of(text):
    """Bytes from the table's size text ("1.50M"), to within its rounding."""
    units = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return float(text[:-1]) * units[text[-1]]


def expected(results, at=None):
    """What each rank's row must say: the bytes of the CPU tensors it holds (those alive before
    the worker's own, its (rank + 1) MiB and the model), the model's as named; with ``at``, as
    the worker's walk counted them right before that table (a byte tensor an earlier object
    collective left behind is counted by both)."""
    if at is not None:
        return [res[at] for res in results]
    return [res["baseline"] + res["made"] + res["model"] for res in results]


def highest_line(alloc):
    import statistics

    med = statistics.median(alloc)
    top = max(range(len(alloc)), key=lambda r: alloc[r])
    over = alloc[top] - med
    return f"rank {top} is highest: +{R(over)} (+{100.0 * over / med:.0f}%) over the median ({R(med)})"


def test_the_gathered_table_on_dst_holds_every_ranks_numbers(job):
    world, (results, _) = job
    alloc = expected(results, "at_gather")
    got = results[0]["gather"]
    assert [r["rank"] for r in got["ranks"]] == list(range(world))
    rows = [row["allocated"] for row in got["ranks"]]
    for r, row in enumerate(got["ranks"]):
        assert row["device"] == "cpu" and row["world_size"] == world
        assert near(row["allocated"], alloc[r])
        assert row["named"] == results[r]["model"]  # the weight and bias MemReporter named
        assert row["reserved"] is None and row["cycles_held"] == 0
        assert row["tensors"] >= 3
        assert row["top"][0]["bytes"] == (r + 1) * MB and row["top"][0]["kind"] == "other"
        assert {"Tensor0", "weight", "bias"} <= {t["name"] for t in row["top"]}
    assert got["spread"]["allocated"] == max(rows) - min(rows)
    assert near(got["spread"]["allocated"], max(alloc) - min(alloc))
    assert got["spread"]["named"] == 0 and got["spread"]["reserved"] is None
    assert got["highest"]["rank"] == world - 1
    printed = results[0]["gather_printed"]
    assert printed.startswith(f"Memory by rank: {world} ranks (gloo), gathered on rank 0\n")
    assert highest_line(rows) in printed
    for r in range(world):
        assert f"{r:>5d}  cpu     {R(rows[r]):>11s}{'n/a':>11s}{R(results[r]['model']):>11s}" \
            in printed
    assert f"max - min      {R(max(rows) - min(rows)):>11s}" in printed
    assert "cycles held: unknown" not in printed  # cycle_totals() answered on every rank


def test_other_ranks_get_none_and_print_nothing(job):
    _, (results, _) = job
    for res in results[1:]:
        assert res["gather"] is None and res["gather_printed"] == ""


def test_all_ranks_gives_every_rank_the_same_dicts(two):
    results, _ = two
    assert results[0]["all_ranks"] == results[1]["all_ranks"]
    got = [r["allocated"] for r in results[0]["all_ranks"]]
    assert all(near(a, b) for a, b in zip(got, expected(results, "at_all")))


def test_memreporter_report_gather_prints_on_dst_only(two):
    results, _ = two
    assert results[0]["report_gather"] == ""
    table = results[1]["report_gather"]
    assert table.startswith("Memory by rank: 2 ranks (gloo), gathered on rank 1\n")
    alloc = expected(results, "at_report")
    assert "rank 1 is highest: +" in table
    line = next(ln for ln in table.splitlines() if ln.startswith("rank 1 is highest: +"))
    assert near(size_of(line.split("+")[1].split()[0]), alloc[1] - statistics.median(alloc))
    assert "weight" in table and "Tensor0" in table


def test_bad_arguments_name_themselves_on_every_rank(two):
    results, _ = two
    for res in results:
        assert res["bad_dst"] == ("ValueError: dst 2 is not a rank of the group, whose ranks "
                                  "are 0 to 1")
        assert res["bad_group"] == ("TypeError: group must be a torch.distributed ProcessGroup "
                                    "or None, not str")
        assert res["bad_top"] == "ValueError: top must be an int from 0 to 100, not 1000"


def test_a_device_one_rank_lacks_fails_there_and_the_others_still_get_the_table(job):
    world, (results, _) = job
    last = results[-1]
    dev = last["missing_device"]  # cuda:0 without CUDA, the first index past the devices else
    assert last["bad_device"].startswith(f"DeviceError: device {dev} is not on this machine")
    assert results[0]["bad_device"] is None
    table = results[0]["bad_device_printed"]
    assert f"{world - 1:>5d}  {dev:<8s}  no report: device {dev} is not on this machine" in table
    assert f"Memory by rank: {world} ranks" in table


def test_a_subgroup_gathers_its_members_and_refuses_others(three):
    results, _ = three
    assert results[0]["subgroup"] is None and results[1]["subgroup"] == [0, 1]
    assert results[2]["subgroup_error"] == (
        "ValueError: group: this process (rank 2) is not a member of the group "
        "(torch.distributed.new_group returned NON_GROUP_MEMBER here); only the group's members "
        "call gather_report with it")


def test_the_autopsy_reads_what_another_rank_published(job):
    world, (results, _) = job
    assert results[1]["published"] is True and results[1]["flushed"] is True
    text = results[0]["ranks.txt"]
    assert text.startswith(f"This autopsy is rank 0's (of {world}; local rank 0; ")
    alloc = [results[0]["at_autopsy"], results[1]["at_publish"]]
    lines = text.splitlines()
    (own,) = [ln for ln in lines if ln.startswith("    0  cpu")]
    (peer,) = [ln for ln in lines if ln.startswith("    1  cpu")]
    assert near(size_of(own.split()[2]), alloc[0]) and own.endswith("0.0 s")
    assert near(size_of(peer.split()[2]), alloc[1]) and peer.endswith(" s")
    assert float(peer.split()[-2]) >= 0
    if world == 3:  # rank 2 published nothing: said so, not waited for
        assert ("    2  nothing published (the rank calls neither gather_report nor "
                "publish_reports)") in text
        assert "asked the job's store for 2 other rank(s) of 3" in text
    assert f"1 had published a summary" in text
    assert results[0]["README.txt"].startswith(f"tensorgc OOM autopsy for cpu on rank 0 of {world}")
    assert f"ranks.txt: this is rank 0 of {world}; 1 other rank(s) had published" \
        in results[0]["README.txt"]
    assert results[0]["memreport.txt"].startswith(f"MemReporter of cpu on rank 0 of {world}\n")


def test_dump_snapshot_into_a_directory_writes_one_file_per_rank(job):
    world, (results, out) = job
    snaps = out / "snaps"
    assert sorted(os.listdir(snaps)) == [f"snapshot-rank{r}.pickle" for r in range(world)]
    for r, res in enumerate(results):
        assert res["snapshot_path"] == str(snaps / f"snapshot-rank{r}.pickle")
        assert tensorgc.load_snapshot(res["snapshot_path"])["device_traces"][0][0]["size"] == 512
        assert oct(os.stat(res["snapshot_path"]).st_mode & 0o777) == "0o600"


# ---------------------------------------------------------------------- in this process


def summary(rank, allocated, named=0, device="cpu", **kw):
    d = {"rank": rank, "local_rank": rank, "world_size": 4, "host": "h", "pid": 1,
         "device": device, "time": 0.0, "allocated": allocated, "reserved": None,
         "named": named, "cycles_held": 0, "cycles_known": False, "tensors": 1,
         "top": [{"name": f"t{rank}", "kind": "other", "shape": [allocated // 4],
                  "dtype": "torch.float32", "bytes": allocated}]}
    d.update(kw)
    return d


def test_spread_and_highest_are_against_the_median():
    rep = GatheredReport([summary(0, 10 * MB), summary(1, 12 * MB), summary(2, 10 * MB),
                          summary(3, 11 * MB)], backend="nccl")
    assert rep.spread()["allocated"] == 2 * MB
    h = rep.highest()
    assert (h["rank"], h["median"], h["over"]) == (1, 10.5 * MB, 1.5 * MB)
    assert rep.highest_line() == "rank 1 is highest: +1.50M (+14%) over the median (10.50M)"
    same = GatheredReport([summary(0, MB), summary(1, MB)])
    assert same.highest_line() == "every rank allocates the same: 1.00M"
    assert GatheredReport([summary(0, MB)]).highest() is None
    zero = GatheredReport([summary(0, 0), summary(1, 0), summary(2, MB)])
    assert zero.highest_line() == "rank 2 is highest: +1.00M over the median (0.00B)"


def test_a_rank_with_an_error_is_a_row_and_left_out_of_the_spread():
    rep = GatheredReport([summary(0, MB), {"rank": 1, "device": "cuda:5", "error": "boom"},
                          summary(2, 3 * MB)])
    assert rep.spread()["allocated"] == 2 * MB
    assert "    1  cuda:5    no report: boom" in rep.text
    assert rep.highest()["rank"] == 2
    assert json.loads(json.dumps(rep.to_dict()))["ranks"][1]["error"] == "boom"


def test_many_ranks_list_the_top_tensors_of_the_highest_only():
    rep = GatheredReport([summary(r, (r + 1) * MB) for r in range(40)])
    text = rep.format()
    assert "Largest tensors of the 4 highest ranks (verbose=True lists every rank's)" in text
    assert "rank 39 (cpu" in text and "rank 0 (cpu" not in text
    assert "rank 0 (cpu" in rep.format(verbose=True)
    # title, rule, header; 40 rows; rule, spread, highest, rule; the cycles note; 4 ranks' heading
    # and tensor each; rule
    assert len(text.splitlines()) == 3 + 40 + 4 + 1 + 1 + 4 * 2 + 1


def test_outside_a_job_gather_report_is_this_process_alone(capsys):
    keep = torch.zeros(MB // 4)
    rep = tensorgc.gather_report("cpu")
    assert [r["rank"] for r in rep.ranks] == [0] and rep.ranks[0]["allocated"] >= MB
    out = capsys.readouterr().out
    assert out.startswith("Memory by rank: 1 rank\n") and "one rank" not in out
    with pytest.raises(ValueError, match="dst 1 is not a rank of the group, whose ranks are 0"):
        tensorgc.gather_report("cpu", dst=1)
    with pytest.raises(ValueError, match="group: torch.distributed is not initialised"):
        tensorgc.gather_report("cpu", group=object())
    with pytest.raises(tensorgc.DeviceError, match="device gpu is not a device"):
        tensorgc.gather_report("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(tensorgc.DeviceError, match="device cuda:1 is not on this machine: "):
            tensorgc.gather_report("cuda:1")
    assert tensorgc.publish_reports(every=1).publish() is False  # no job, no store: nothing
    del keep


def test_a_publisher_publishes_after_optimizer_steps_until_removed(monkeypatch):
    class Dist:  # a job of 4 ranks, this one rank 3
        def get_rank(self):
            return 3

    store = Store()
    store.set = lambda key, value: store.values.__setitem__(key, value)
    monkeypatch.setattr(_summaries, "_dist", lambda: Dist())
    monkeypatch.setattr(_summaries, "_default_store", lambda: store)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        model(torch.ones(2, 8)).sum().backward()
        opt.step()

    pub = tensorgc.publish_reports(every=0, model=model, optimizer=opt, device="cpu", top=2)
    step()
    step()
    assert pub.published == 2 and pub.flush(30)
    got = json.loads(store.values["tensorgc/summary/rank3"])
    assert got["named"] == 2 * (8 * 8 + 8) * 4  # the weights and their grads, named
    assert [t["name"] for t in got["top"]] == ["weight", "weight.grad"]
    pub.remove()
    step()
    assert pub.published == 2
    slow = tensorgc.MemReporter(model).publish(every=3600, device="cpu")
    step()
    step()
    assert slow.published == 1  # the first step, then not again within the hour
    slow.remove()


def test_a_failing_publication_never_reaches_the_optimizer_step(monkeypatch, caplog):
    monkeypatch.setattr(_summaries, "_dist", lambda: object())  # no get_rank: publishing fails
    monkeypatch.setattr(_summaries, "_default_store", lambda: Store())
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensorgc.publish_reports(every=0, device="cuda:4096") as pub:
        opt.step()
        opt.step()
    assert pub.failures == 2 and pub.published == 0
    assert sum("publishing this rank's memory summary failed (said once)" in r.message
               for r in caplog.records) == 1


def test_cycles_held_come_from_cycle_totals(monkeypatch):
    monkeypatch.setattr(dedup, "cycle_totals", lambda: {"bytes": 3 * MB, "cycles": 2})
    rep = tensorgc.gather_report("cpu", show=False)
    assert rep.ranks[0]["cycles_held"] == 3 * MB and rep.ranks[0]["cycles_known"] is True
    assert "cycles held" in rep.text and "unknown" not in rep.text

    def broken():
        raise RuntimeError("no")

    monkeypatch.setattr(dedup, "cycle_totals", broken)
    rep = tensorgc.gather_report("cpu", show=False)
    assert rep.ranks[0]["cycles_held"] == 0 and rep.ranks[0]["cycles_known"] is False
    assert "cycles held: unknown (cycle_totals() failed)" in rep.text


def test_publish_reports_checks_its_arguments():
    with pytest.raises(ValueError, match="every must be a number of seconds >= 0, not -1"):
        tensorgc.publish_reports(every=-1)
    with pytest.raises(ValueError, match="top must be an int from 0 to 100"):
        tensorgc.publish_reports(top=101)


def test_a_summary_is_bounded():
    big = [torch.zeros(1) for _ in range(300)]  # more tensors than any summary carries
    rep = tensorgc.gather_report("cpu", top=100, show=False)
    assert len(rep.ranks[0]["top"]) == 100
    data = _summaries._encode(rep.ranks[0])
    assert len(data) <= _summaries.MAX_SUMMARY_BYTES
    long = summary(0, MB)
    long["top"] = [dict(long["top"][0], name="x" * 5000) for _ in range(100)]
    data = _summaries._encode(long)  # rows dropped until it fits
    assert len(data) <= _summaries.MAX_SUMMARY_BYTES and json.loads(data)["top"]
    del big


class Store:
    """A store as torch's: check(keys) -> bool, get(key) -> bytes; `hang` blocks every call
    until released, `fail` raises."""

    def __init__(self, values=(), hang=False, fail=False):
        self.values = dict(values)
        self.hang = threading.Event() if hang else None
        self.fail = fail
        self.calls = []

    def check(self, keys):
        self.calls.append(("check", keys[0]))
        if self.hang is not None:
            self.hang.wait()
        if self.fail:
            raise RuntimeError("Connection reset by peer")
        return keys[0] in self.values

    def get(self, key):
        self.calls.append(("get", key))
        return self.values[key]


def test_the_store_is_read_without_waiting_for_a_missing_key():
    good = json.dumps(summary(2, 5 * MB, time=1.0)).encode()
    store = Store({"tensorgc/summary/rank2": good,
                   "tensorgc/summary/rank0": b"\xff not json",
                   "tensorgc/summary/rank4": json.dumps({"rank": "x"}).encode(),
                   "tensorgc/summary/rank3": b" " * (_summaries.MAX_SUMMARY_BYTES + 1)})
    got, missing, note = peer_summaries(store=store, rank=1, world_size=6, wait=30)
    assert [s["rank"] for s in got] == [2] and got[0]["allocated"] == 5 * MB
    assert got[0]["age"] > 0
    assert missing[5].startswith("nothing published")
    assert missing[0].startswith("unreadable: ")
    assert missing[4] == "unreadable: 'rank' is not an int"
    assert missing[3] == f"unreadable: {_summaries.MAX_SUMMARY_BYTES + 1:,} bytes, over 65,536"
    # nearest ranks first; get() only for keys check() found
    assert [c for c in store.calls if c[0] == "check"] == [
        ("check", f"tensorgc/summary/rank{r}") for r in (0, 2, 3, 4, 5)]
    assert ("get", "tensorgc/summary/rank5") not in store.calls
    assert "asked the job's store for 5 other rank(s) of 6" in note


def test_a_store_that_stops_answering_is_left_after_the_wait():
    store = Store(hang=True)
    try:
        got, missing, note = peer_summaries(store=store, rank=0, world_size=3, wait=0.2)
        assert got == [] and set(missing) == {1, 2}
        assert missing[1] == "not read: the store did not answer within 0.2 s"
        assert note.endswith("the store did not answer in time, and was left")
        # while that read is still blocked, another autopsy does not start a second one
        got, missing, note = peer_summaries(store=Store(), rank=0, world_size=3, wait=5)
        assert got == [] and note.startswith("the other ranks were not asked: an earlier read")
    finally:
        store.hang.set()
    for t in list(_summaries._STUCK):
        t.join(10)
    got, missing, _ = peer_summaries(store=Store(), rank=0, world_size=3, wait=5)
    assert missing == {1: missing[1], 2: missing[2]} and missing[1].startswith("nothing published")


def test_a_store_that_fails_stops_the_reading():
    store = Store(fail=True)
    got, missing, _ = peer_summaries(store=store, rank=0, world_size=4, wait=5)
    assert got == [] and missing[1] == "the store failed: RuntimeError: Connection reset by peer"
    assert len(store.calls) == 1
    assert missing[2] == "not read: the store did not answer within 5 s"


def test_outside_a_job_the_autopsy_asks_no_one(tmp_path):
    path, _ = tensorgc.write_autopsy(tmp_path, "cpu")
    assert "ranks.txt" not in os.listdir(path)
    assert open(os.path.join(path, "README.txt")).read().startswith("tensorgc OOM autopsy for cpu\n")
    with pytest.raises(ValueError, match="peers_wait must be a number of seconds from 0 to 60"):
        tensorgc.write_autopsy(tmp_path, "cpu", peers_wait=-1)
    got, missing, note = peer_summaries()
    assert (got, missing) == ([], {}) and "no process group in this process" in note


def test_dump_snapshot_into_a_directory_outside_a_job(tmp_path, monkeypatch):
    snap = {"segments": [], "device_traces": []}
    assert tensorgc.dump_snapshot(tmp_path, snap) == str(tmp_path / "snapshot.pickle")
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert tensorgc.dump_snapshot(tmp_path, snap) == str(tmp_path / "snapshot-rank7.pickle")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        tensorgc.dump_snapshot(str(tmp_path / "missing") + os.sep, snap)
    with pytest.raises(FileNotFoundError):
        tensorgc.dump_snapshot(tmp_path / "missing" / "x.pickle", snap)
    assert sorted(os.listdir(tmp_path)) == ["snapshot-rank7.pickle", "snapshot.pickle"]
