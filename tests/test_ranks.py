"""Distributed jobs (docs/api.md "Ranks and the output directory"): the rank in the names of
cycle pages and autopsy directories and in every record of logger "tensorgc", from
torch.distributed (two processes over gloo) or from the launcher's environment (RANK set, no
group); names unchanged outside a job; the output directory (set_output_dir,
TENSORGC_OUTPUT_DIR) for pages, autopsies and snapshots, explicit arguments first."""
import datetime
import gc
import json
import logging
import os
import re
import socket
import stat
import time

import pytest

import tensorgc
from tensorgc._common import output as _output, rank as _rank
from _util import new_class

RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@pytest.fixture(autouse=True)
def no_job(monkeypatch):
    """Each test starts outside a job, with no output directory."""
    for name in RANK_VARS + (_output.ENV,):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_rank, "_group_rank", None)
    previous = tensorgc.set_output_dir(None)
    yield
    tensorgc.set_output_dir(previous)


def leak_pair(size=8):
    import torch

    Node = new_class("Node")
    a, b = Node(), Node()
    a.other, b.other = b, a
    a.t = torch.zeros(size)


def record(msg="tensorgc: something %s", args=("happened",)):
    return logging.LogRecord("tensorgc", logging.WARNING, __file__, 1, msg, args, None)


# --------------------------------------------------------------------------
# two ranks over gloo
# --------------------------------------------------------------------------

def _ddp_worker(rank, world, port, out):
    """One rank: a group over gloo, a cycle leaked three times with warn_tensor_cycles on (pages
    into the output directory), an autopsy by hand, its log records kept in a file."""
    import torch
    import torch.distributed as dist

    for name in RANK_VARS + (_output.ENV,):
        os.environ.pop(name, None)  # the rank comes from the group alone
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    if os.path.exists("/sys/class/net/lo"):  # gloo on loopback, whatever the host name says
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    log = logging.getLogger("tensorgc")
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(os.path.join(out, f"log-{rank}.txt"))
    handler.setFormatter(logging.Formatter("%(rank)s|%(levelname)s|%(message)s"))
    log.addHandler(handler)
    ranks = []

    class Keep(logging.Handler):
        def emit(self, r):
            ranks.append(r.rank)

    log.addHandler(Keep())
    tensorgc.set_output_dir(os.path.join(out, "shared"))
    gc.disable()
    handle = tensorgc.warn_tensor_cycles(device="cpu")
    for _ in range(3):
        leak_pair(8 + rank)
        gc.collect()
    handle.remove()
    autopsy, _ = tensorgc.write_autopsy(device="cpu")
    seen = torch.tensor([tensorgc.cycle_totals()["seen"]])
    dist.all_reduce(seen)  # a collective over gloo: both ranks got this far
    dist.destroy_process_group()
    log.warning("tensorgc: after the group")  # still this rank's, though the group is gone
    with open(os.path.join(out, f"result-{rank}.json"), "w") as f:
        json.dump({"autopsy": autopsy, "ranks": ranks, "seen_in_all": int(seen.item()),
                   "totals": tensorgc.cycle_totals()}, f)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """Runs two ranks once for the tests below; returns (directory, results by rank)."""
    pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("ddp")
    ctx = mp.spawn(_ddp_worker, args=(2, _free_port(), str(out)), nprocs=2, join=False)
    deadline = time.monotonic() + 240  # a safety net against a hung rendezvous, not a timing
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the two ranks did not finish")
    results = {}
    for r in (0, 1):
        with open(out / f"result-{r}.json") as f:
            results[r] = json.load(f)
    return out, results


def test_each_rank_names_its_pages(ddp):
    out, _ = ddp
    pages = sorted(os.listdir(out / "shared"))
    cycles = [p for p in pages if p.startswith("tensorgc-cycle-")]
    assert len(cycles) == 2, pages  # one page per rank: the two repeats are counted
    assert re.fullmatch(r"tensorgc-cycle-rank0-[a-z0-9_]{8}\.html", cycles[0])
    assert re.fullmatch(r"tensorgc-cycle-rank1-[a-z0-9_]{8}\.html", cycles[1])


def test_each_rank_tags_its_log_records(ddp):
    out, results = ddp
    for r in (0, 1):
        lines = (out / f"log-{r}.txt").read_text().splitlines()
        warnings = [ln for ln in lines if "|WARNING|" in ln]
        page = next(ln for ln in warnings if "picture: " in ln)
        assert page.startswith(f"{r}|WARNING|[rank {r}] reference cycles kept tensors alive")
        assert f"tensorgc-cycle-rank{r}-" in page
        info = next(ln for ln in lines if "|INFO|" in ln)
        assert info.startswith(f"{r}|INFO|[rank {r}] tensorgc: watching reference cycles")
        after = lines.index(f"{r}|WARNING|[rank {r}] tensorgc: after the group")
        # at exit, the repeats not told yet; the rank stays after destroy_process_group
        assert re.fullmatch(
            rf"{r}\|WARNING\|\[rank {r}\] tensorgc: cycle signature #1 seen 3 times, "
            rf"{3 * 4 * (8 + r)} B in all since the first report \(first at .*"
            rf"tensorgc-cycle-rank{r}-\w{{8}}\.html\); 2 times .*", lines[after + 1])
        assert results[r]["ranks"] == [r] * len(results[r]["ranks"])  # an int in every record


def test_each_rank_names_its_autopsy_in_the_output_directory(ddp):
    out, results = ddp
    for r in (0, 1):
        path = results[r]["autopsy"]
        assert os.path.dirname(path) == str(out / "shared")
        assert re.fullmatch(rf"oom-\d{{8}}-\d{{6}}-rank{r}-\d+-cpu0", os.path.basename(path))
        assert {"memreport.txt", "gc.txt", "README.txt"} <= set(os.listdir(path))


def test_each_rank_counts_its_own_cycles(ddp):
    _, results = ddp
    for r in (0, 1):
        assert results[r]["totals"] == {"reports": 1, "seen": 3, "bytes": 3 * 4 * (8 + r),
                                        "signatures": 1}
        assert results[r]["seen_in_all"] == 6


# --------------------------------------------------------------------------
# the launcher's environment, and no job at all
# --------------------------------------------------------------------------

def test_the_environment_names_the_rank_without_a_group(track, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    caplog.set_level(logging.WARNING, logger="tensorgc")
    track(tensorgc.warn_tensor_cycles(device="cpu", directory=tmp_path))
    gc.disable()
    leak_pair()
    gc.collect()
    (page,) = os.listdir(tmp_path)
    assert re.fullmatch(r"tensorgc-cycle-rank3-[a-z0-9_]{8}\.html", page)
    (rec,) = [r for r in caplog.records if r.name == "tensorgc"]
    assert rec.rank == 3 and rec.getMessage().startswith("[rank 3] reference cycles kept")
    path, _ = tensorgc.write_autopsy(tmp_path, "cpu")
    assert re.fullmatch(rf"oom-\d{{8}}-\d{{6}}-rank3-{os.getpid()}-cpu0", os.path.basename(path))


def test_local_rank_alone_is_a_job_too(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert _rank.rank_tag() == "rank1" and _output.ranked("oom-x-") == "oom-x-rank1-"


def test_outside_a_job_names_and_messages_stay_as_they_were(track, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    track(tensorgc.warn_tensor_cycles(device="cpu", directory=tmp_path))
    gc.disable()
    leak_pair()
    gc.collect()
    (page,) = os.listdir(tmp_path)
    assert re.fullmatch(r"tensorgc-cycle-[a-z0-9_]{8}\.html", page)
    (rec,) = [r for r in caplog.records if r.name == "tensorgc"]
    assert rec.rank is None and rec.getMessage().startswith("reference cycles kept")
    path, _ = tensorgc.write_autopsy(tmp_path, "cpu")
    assert re.fullmatch(rf"oom-\d{{8}}-\d{{6}}-{os.getpid()}-cpu0", os.path.basename(path))


# --------------------------------------------------------------------------
# the log filter
# --------------------------------------------------------------------------

def test_the_filter_is_on_the_logger_once():
    log = logging.getLogger("tensorgc")
    ours = [f for f in log.filters if isinstance(f, _rank.RankFilter)]
    assert len(ours) == 1
    assert _rank.install_filter(log) is ours[0]  # again (a reload): no second one
    assert len([f for f in log.filters if isinstance(f, _rank.RankFilter)]) == 1


def test_a_format_can_name_the_rank(monkeypatch):
    monkeypatch.setenv("RANK", "5")
    rec = record()
    assert _rank.RankFilter().filter(rec) is True
    assert logging.Formatter("%(rank)s: %(message)s").format(rec) == \
        "5: [rank 5] tensorgc: something happened"


def test_a_record_is_tagged_once(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    rec = record()
    f = _rank.RankFilter()
    f.filter(rec)
    f.filter(rec)
    assert rec.getMessage() == "[rank 2] tensorgc: something happened"


def test_a_message_that_is_not_a_str_keeps_its_text(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    rec = record(msg=ValueError("bad %s"), args=("value",))
    _rank.RankFilter().filter(rec)
    assert rec.getMessage() == "[rank 0] bad value" and rec.rank == 0


def test_the_filter_never_raises_nor_drops(monkeypatch):
    def broken():
        raise RuntimeError("no rank today")

    monkeypatch.setattr(_rank, "rank_info", broken)
    rec = record()
    assert _rank.RankFilter().filter(rec) is True
    assert rec.getMessage() == "tensorgc: something happened"


def test_a_group_made_after_import_is_seen_at_the_next_record(monkeypatch):
    # the rank is looked up for each record, never cached
    monkeypatch.setattr(_rank, "_group_rank", None)
    rec = record()
    _rank.RankFilter().filter(rec)
    assert rec.rank is None
    monkeypatch.setenv("RANK", "7")
    rec = record()
    _rank.RankFilter().filter(rec)
    assert rec.rank == 7


# --------------------------------------------------------------------------
# the output directory
# --------------------------------------------------------------------------

def test_set_output_dir_makes_it_and_returns_the_one_before(tmp_path):
    where = tmp_path / "a" / "b"
    assert tensorgc.set_output_dir(where) is None
    assert tensorgc.get_output_dir() == str(where) and where.is_dir()
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o700
    assert tensorgc.set_output_dir(str(tmp_path)) == str(where)
    assert tensorgc.set_output_dir(None) == str(tmp_path)
    assert tensorgc.get_output_dir() is None


def test_set_output_dir_refuses_bad_paths(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="set_output_dir"):
        tensorgc.set_output_dir(f)
    with pytest.raises(TypeError, match="path"):
        tensorgc.set_output_dir(3)
    with pytest.raises(TypeError, match="path"):
        tensorgc.set_output_dir(b"/tmp")
    with pytest.raises(ValueError, match="path"):
        tensorgc.set_output_dir("")
    assert tensorgc.get_output_dir() is None


def test_the_environment_variable_is_the_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORGC_OUTPUT_DIR", str(tmp_path / "env"))
    assert tensorgc.get_output_dir() == str(tmp_path / "env")
    tensorgc.set_output_dir(tmp_path / "set")
    assert tensorgc.get_output_dir() == str(tmp_path / "set")  # the call wins
    monkeypatch.setenv("TENSORGC_OUTPUT_DIR", "")
    tensorgc.set_output_dir(None)
    assert tensorgc.get_output_dir() is None


def test_pages_autopsies_and_snapshots_go_to_the_output_directory(track, tmp_path,
                                                                  monkeypatch):
    env = tmp_path / "from-env"  # made on first use
    monkeypatch.setenv("TENSORGC_OUTPUT_DIR", str(env))
    track(tensorgc.warn_tensor_cycles(device="cpu"))
    gc.disable()
    leak_pair()
    gc.collect()
    path, _ = tensorgc.write_autopsy(device="cpu")
    snap = {"segments": [], "device_traces": []}
    written = tensorgc.dump_snapshot("run.pickle", snap)
    assert written == str(env / "run.pickle")
    names = sorted(os.listdir(env))
    assert names[0] == os.path.basename(path) and names[1] == "run.pickle"
    assert names[2].startswith("tensorgc-cycle-") and len(names) == 3
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o700


def test_explicit_directories_win(track, tmp_path, monkeypatch):
    tensorgc.set_output_dir(tmp_path / "out")
    mine = tmp_path / "mine"
    mine.mkdir()
    track(tensorgc.warn_tensor_cycles(device="cpu", directory=mine))
    gc.disable()
    leak_pair()
    gc.collect()
    tensorgc.write_autopsy(mine, "cpu")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    snap = {"segments": [], "device_traces": []}
    relative = os.path.join("sub", "x.pickle")  # a directory part: as given
    assert tensorgc.dump_snapshot(relative, snap) == relative
    assert tensorgc.dump_snapshot(str(mine / "y.pickle"), snap) == str(mine / "y.pickle")
    assert os.listdir(tmp_path / "out") == []
    assert len(os.listdir(mine)) == 3  # the page, the autopsy, y.pickle


def test_without_an_output_directory_a_bare_snapshot_name_is_the_current_directory(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tensorgc.dump_snapshot("run.pickle", {"segments": [], "device_traces": []}) == \
        "run.pickle"
    assert (tmp_path / "run.pickle").is_file()


def test_a_page_that_cannot_reach_the_output_directory_still_warns(track, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    tensorgc.set_output_dir(tmp_path / "ok")
    os.rmdir(tmp_path / "ok")
    blocker.rename(tmp_path / "ok")  # the output directory became a file meanwhile
    caplog.set_level(logging.WARNING, logger="tensorgc")
    track(tensorgc.warn_tensor_cycles(device="cpu"))
    gc.disable()
    leak_pair()
    gc.collect()
    (rec,) = [r for r in caplog.records if r.name == "tensorgc"]
    assert "no page written: " in rec.getMessage() and "File exists" in rec.getMessage()
