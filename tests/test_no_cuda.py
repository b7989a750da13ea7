"""What every CUDA-minded public call does on a machine without CUDA: a clear RuntimeError that
names the call (never torch's AttributeError from a CPU build), or a documented fallback with a
message that says what was done instead. torch.cuda.is_available() is patched to False, so the
same tests run on a GPU machine."""
import gc
import logging
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import tensorgc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_CUDA = "torch.cuda.is_available() is False on this machine"
NO_CUDA_RE = re.escape(NO_CUDA)


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def log(caplog):
    caplog.set_level(logging.DEBUG, logger="tensorgc")
    return caplog


def messages(caplog, level):
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_record_memory_history_says_it_needs_cuda():
    with pytest.raises(RuntimeError) as exc:
        tensorgc.record_memory_history()
    assert str(exc.value).startswith(f"tensorgc: record_memory_history needs CUDA; {NO_CUDA}")
    assert not isinstance(exc.value, AttributeError)
    with pytest.raises(ValueError, match="enabled must be"):  # arguments are checked first
        tensorgc.record_memory_history(enabled="yes")


def test_stopping_the_history_without_cuda_does_nothing(log):
    assert tensorgc.record_memory_history(enabled=None) is None
    assert any("nothing was recording" in m for m in messages(log, logging.DEBUG))


def test_snapshot_says_it_needs_cuda():
    with pytest.raises(RuntimeError, match=f"tensorgc: snapshot needs CUDA; {NO_CUDA_RE}"):
        tensorgc.snapshot()


def test_dump_snapshot_says_it_needs_cuda_and_writes_nothing(tmp_path):
    p = tmp_path / "snap.pickle"
    with pytest.raises(RuntimeError,
                       match=f"tensorgc: dump_snapshot needs CUDA; {NO_CUDA_RE}") as exc:
        tensorgc.dump_snapshot(p)
    assert "pass snap=" in str(exc.value)
    assert os.listdir(tmp_path) == []
    snap = {"segments": [], "device_traces": []}  # one you have is written anyway
    assert tensorgc.dump_snapshot(p, snap) == str(p)
    assert tensorgc.load_snapshot(p) == snap


def test_on_oom_and_a_cuda_autopsy_say_they_need_cuda(tmp_path):
    with pytest.raises(RuntimeError, match=f"tensorgc: on_oom needs CUDA; {NO_CUDA_RE}"):
        tensorgc.on_oom(str(tmp_path))
    target = tmp_path / "autopsies"
    with pytest.raises(RuntimeError, match=r"tensorgc: write_autopsy\(device='cuda:0'\) needs "
                                           r"CUDA; .*device='cpu'"):
        tensorgc.write_autopsy(str(target), "cuda:0")
    assert not target.exists()  # refused before anything was made
    path, verdict = tensorgc.write_autopsy(str(target), "cpu")
    assert os.path.exists(os.path.join(path, "memreport.txt")) and verdict


def test_warn_tensor_cycles_watches_the_cpu_by_default_and_says_so(track, tmp_path, log):
    track(tensorgc.warn_tensor_cycles(directory=tmp_path))
    assert any("hold cpu tensors (the default: no CUDA" in m
               for m in messages(log, logging.INFO))

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other, a.t = b, a, torch.zeros(1000)
    del a, b
    gc.collect()
    warnings = messages(log, logging.WARNING)
    assert len(warnings) == 1 and "reference cycles kept tensors alive" in warnings[0]
    assert len(os.listdir(tmp_path)) == 1  # the page of the CPU tensor's cycle


def test_asking_for_cuda_cycles_without_cuda_warns(track, log):
    track(tensorgc.warn_tensor_cycles(device="cuda:0"))
    (w,) = messages(log, logging.WARNING)
    assert "warn_tensor_cycles(device='cuda:0') watches CUDA tensors, and there are none" in w
    assert NO_CUDA in w and "device='cpu'" in w


def test_observe_tensor_cycles_by_default_says_it_sees_nothing_without_cuda(track, log):
    track(tensorgc.observe_tensor_cycles(lambda html: None))  # torch's default: "cuda"
    (w,) = messages(log, logging.WARNING)
    assert "observe_tensor_cycles(device='cuda') watches CUDA tensors, and there are none" in w
    assert NO_CUDA in w and "device='cpu' or 'any'" in w
    log.clear()
    for device in ("cpu", "any", lambda t: True):  # these see the CPU's tensors: nothing said
        track(tensorgc.observe_tensor_cycles(lambda html: None, device=device))
    assert messages(log, logging.WARNING) == []


def test_a_device_the_detector_refuses_raises_without_a_warning_first(log):
    for bad in ("0", "gpu"):  # a bare index is not a filter of the cycle detector
        with pytest.raises(ValueError, match="device must be 'cuda', 'cpu', 'any'"):
            tensorgc.warn_tensor_cycles(device=bad)
    assert messages(log, logging.WARNING) == []


def test_memreporter_for_cuda_is_empty_and_says_why(log):
    keep = torch.ones(10)
    rep = tensorgc.MemReporter().collect(device="cuda")
    assert rep.rows == [] and rep.totals == {}  # no phantom cuda:0 with zeros
    (w,) = messages(log, logging.WARNING)
    assert "the report for cuda is empty" in w and NO_CUDA in w
    assert any(r.device == "cpu" for r in tensorgc.MemReporter().collect(device="cpu").rows)
    del keep


def test_courtesy_for_cuda_has_nothing_to_yield_and_says_why(log):
    keep = torch.ones(10)
    with tensorgc.Courtesy() as c:
        assert c.moved == tensorgc.Moved(0, 0, 0, 0)
    (w,) = messages(log, logging.WARNING)
    assert "Courtesy('cuda') has nothing to yield" in w and NO_CUDA in w
    del keep


def test_courtesy_on_the_cpu_says_what_it_did(log):
    t = torch.arange(1000, dtype=torch.float32)
    before = t.clone()
    with tensorgc.Courtesy("cpu") as c:
        assert c.moved.tensors >= 1
    assert torch.equal(t, before)
    infos = [m for m in messages(log, logging.INFO) if "Courtesy" in m]
    assert len(infos) == 2
    yielded, restored = infos
    assert "into new CPU storages" in yielded and "no memory was freed" in yielded
    assert "already live in host memory" in yielded
    assert "moved" not in yielded and "to host memory" not in yielded
    assert "back into new CPU storages" in restored and "never left host memory" in restored


def test_the_line_profile_demo_tells_the_truth_on_the_cpu():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "demos", "line_profile.py"),
                        "--device", "cpu", "--width", "128", "--steps", "1"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("Courtesy on the CPU"))
    assert "into new CPU storages" in line and "no memory was freed" in line
    assert "to host memory" not in r.stdout


def test_the_line_profiler_falls_back_to_resident_memory():
    def step():
        buf = bytearray(1 << 20)
        return len(buf)

    with tensorgc.LineProfiler(step) as lp:
        step()
    assert lp.source.startswith("process resident memory (no CUDA")
    assert "rss_bytes.all.peak" in str(lp.display())
