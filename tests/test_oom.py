"""The OOM autopsy: the files it writes (CPU: report and gc check, by hand), that a garbage
collection's verdict names the cycles, that the observer never raises; on CUDA, a real OOM with
a leak held by cycles and capped device memory."""
import gc
import logging
import os

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc.oom import _Observer
from _util import DEVICE, new_class


def leak(n, numel):
    Node = new_class("Leaky")
    for _ in range(n):
        a = Node()
        a.me = a
        a.t = torch.ones(numel, device=DEVICE)


def test_write_autopsy_by_hand_names_the_cycles(tmp_path):
    m = torch.nn.Linear(4, 4).to(DEVICE)
    gc.disable()
    try:
        leak(3, 1000)
        path, verdict = tensorgc.write_autopsy(str(tmp_path), DEVICE, model=m)
    finally:
        gc.enable()
    files = set(os.listdir(path))
    assert {"memreport.txt", "gc.txt", "README.txt"} <= files
    assert any(f.startswith("cycles-") for f in files)
    assert "reference cycles held" in verdict
    assert "weight" in open(os.path.join(path, "memreport.txt")).read()
    gctxt = open(os.path.join(path, "gc.txt")).read()
    assert gctxt.startswith("reference cycles held") and "Leaky" in gctxt
    assert oct(os.stat(path).st_mode & 0o777) == "0o700"


def test_nothing_to_collect_says_so(tmp_path):
    gc.collect()
    _, verdict = tensorgc.write_autopsy(str(tmp_path), DEVICE)
    assert verdict == "a garbage collection would not free device memory"


def test_observer_never_raises_and_does_not_nest(tmp_path, caplog):
    obs = _Observer(str(tmp_path / "missing" / "\0bad"), None, None)  # unwritable directory
    with caplog.at_level(logging.ERROR, logger="tensorgc"):
        obs(0, 1 << 20, 0, 0)  # must not raise
    assert any("autopsy failed" in r.message for r in caplog.records)
    obs.busy = True
    obs(0, 1, 0, 0)  # nested: ignored
    obs.busy = False
    obs.remove()
    obs(0, 1, 0, 0)
    assert obs.count == 0


def test_observer_survives_a_raising_log_filter(tmp_path):
    # logger.exception in the observer's except clause could raise (a filter, a handler) out
    # of __call__ into the allocator
    class Boom(logging.Filter):
        def filter(self, record):
            raise RuntimeError("filter")

    logger = logging.getLogger("tensorgc")
    boom = Boom()
    logger.addFilter(boom)
    try:
        obs = _Observer(str(tmp_path / "missing" / "\0bad"), None, None)
        obs(0, 1 << 20, 0, 0)  # must not raise
        assert not obs.busy
    finally:
        logger.removeFilter(boom)


def test_autopsies_do_not_nest_across_observers(tmp_path):
    # the busy flag was per observer: with on_oom called twice (or an OOM in another thread),
    # an OOM inside one autopsy started another
    from tensorgc import oom

    first, second = _Observer(str(tmp_path), None, None), _Observer(str(tmp_path), None, None)
    assert oom._AUTOPSY.acquire(blocking=False)  # as if `first` were writing its autopsy
    try:
        second(0, 1 << 20, 0, 0)
    finally:
        oom._AUTOPSY.release()
    assert second.count == 0 and os.listdir(tmp_path) == []
    first(0, 1 << 20, 0, 0)  # not nested: writes (on CPU, the CUDA parts note failures)
    assert first.count == 1 and len(os.listdir(tmp_path)) == 1


def test_a_new_autopsy_directory_is_private(tmp_path):
    target = tmp_path / "new" / "autopsies"
    gc.collect()
    path, _ = tensorgc.write_autopsy(str(target), DEVICE)
    assert oct(os.stat(target).st_mode & 0o777) == "0o700"  # was 0o755 (the umask's default)
    assert oct(os.stat(path).st_mode & 0o777) == "0o700"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_on_oom_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="needs CUDA"):
        tensorgc.on_oom()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_real_oom_writes_the_autopsy(tmp_path, caplog):
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    frac = min(1.0, (torch.cuda.memory_reserved() + (2 << 30)) / total)  # ~2 GB more allowed
    torch.cuda.set_per_process_memory_fraction(frac)
    tensorgc.record_memory_history(max_entries=10000)
    off = tensorgc.on_oom(str(tmp_path))
    Node = new_class("Leaky")
    gc.disable()
    try:
        with caplog.at_level(logging.WARNING, logger="tensorgc"):
            with pytest.raises(torch.cuda.OutOfMemoryError):
                for _ in range(1000):
                    a = Node()
                    a.me = a
                    a.t = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
                    del a
    finally:
        gc.enable()
        off()
        tensorgc.record_memory_history(enabled=None)
        torch.cuda.set_per_process_memory_fraction(1.0)
        gc.collect()
        torch.cuda.empty_cache()
    dirs = [d for d in os.listdir(tmp_path) if d.startswith("oom-")]
    assert len(dirs) == 1
    path = tmp_path / dirs[0]
    files = set(os.listdir(path))
    assert {"snapshot.pickle", "timeline.html", "segments.html", "memreport.txt", "gc.txt"} <= files
    assert "reference cycles held" in (path / "gc.txt").read_text()
    snap = tensorgc.load_snapshot(path / "snapshot.pickle")
    assert any(e["action"] == "oom" for t in snap["device_traces"] for e in t)
    assert "OOM at event" in (path / "timeline.html").read_text()
    assert "just before OOM event" in (path / "segments.html").read_text()
    assert any("autopsy in" in r.message for r in caplog.records)


class _FakeAttach:
    """torch's OOM observer list, for on_oom's argument checks on a machine without CUDA."""

    def __init__(self, monkeypatch):
        from tensorgc.allocator import oom

        self.observers = []
        monkeypatch.setattr(oom, "require_cuda", lambda *a: None)
        monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer",
                            self.observers.append, raising=False)


def test_on_oom_makes_a_missing_directory_and_its_parents(tmp_path, monkeypatch):
    fake = _FakeAttach(monkeypatch)
    target = tmp_path / "runs" / "7" / "autopsies"
    off = tensorgc.on_oom(target)
    assert target.is_dir() and oct(os.stat(target).st_mode & 0o777) == "0o700"
    assert len(fake.observers) == 1 and fake.observers[0].directory == str(target)
    off()


def test_on_oom_says_in_one_line_why_it_cannot_make_the_directory(tmp_path, monkeypatch):
    _FakeAttach(monkeypatch)
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="exists and is not a directory") as e:
        tensorgc.on_oom(tmp_path / "file")
    assert "\n" not in str(e.value)
    with pytest.raises(OSError, match="cannot make the directory") as e:
        tensorgc.on_oom(tmp_path / "file" / "below\nnewline")
    assert "\n" not in str(e.value) and "\\n" in str(e.value)
