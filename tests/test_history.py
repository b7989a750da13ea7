"""observe_tensor_cycles and warn_tensor_cycles start the CUDA allocator's history as torch's
observe_tensor_cycles does, when it is useful and nothing records yet, and stop what they started
when the last observer relying on it goes. torch is replaced by a fake (tensorgc.allocator._history._torch),
so the decisions are checked on any machine; the real start is tests/test_cuda.py's (CUDA)."""
import logging

import pytest

import tensorgc
from tensorgc.allocator import _history


class FakeTorch:
    def __init__(self, cuda=True, recording=False, fail=False):
        self.cuda, self.on, self.fail = cuda, recording, fail
        self.calls = []

    def cuda_available(self):
        return self.cuda

    def recording(self):
        return self.on

    def start(self):
        if self.fail:
            raise RuntimeError("CUDA driver is too old")
        self.calls.append("start")
        self.on = True

    def stop(self):
        self.calls.append("stop")
        self.on = False


@pytest.fixture
def fake(monkeypatch):
    f = FakeTorch()
    monkeypatch.setattr(_history, "_torch", f)
    monkeypatch.setattr(_history, "_owned", False)
    monkeypatch.setattr(_history, "_users", set())
    return f


def test_started_for_a_cuda_observer_and_stopped_with_it(fake):
    h = tensorgc.observe_tensor_cycles(lambda html: None, device="cuda")
    assert fake.calls == ["start"] and _history.started_by_tensorgc()
    h.remove()
    assert fake.calls == ["start", "stop"] and not _history.started_by_tensorgc()
    h.remove()  # once
    assert fake.calls == ["start", "stop"]


def test_the_settings_are_the_cheapest_that_give_stacks():
    assert _history.SETTINGS == {"enabled": "state", "context": "state", "stacks": "python"}


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "any", lambda t: True])
def test_devices_that_may_see_cuda_tensors(fake, device):
    with tensorgc.observe_tensor_cycles(lambda html: None, device=device):
        assert fake.calls == ["start"]


def test_not_for_cpu_tensors(fake):
    with tensorgc.observe_tensor_cycles(lambda html: None, device="cpu"):
        pass
    assert fake.calls == []


def test_opt_out(fake):
    with tensorgc.observe_tensor_cycles(lambda html: None, record_history=False):
        pass
    with tensorgc.warn_tensor_cycles(device="cuda", record_history=False):
        pass
    assert fake.calls == []


def test_not_without_cuda(fake):
    fake.cuda = False
    with tensorgc.observe_tensor_cycles(lambda html: None):
        pass
    assert fake.calls == []


@pytest.mark.parametrize("state", [True, None], ids=["recording", "torch-cannot-say"])
def test_the_programs_recording_is_left_alone(fake, state):
    fake.on = state
    h = tensorgc.observe_tensor_cycles(lambda html: None)
    h.remove()
    assert fake.calls == [] and fake.on is state


def test_stopped_with_the_last_of_several(fake):
    a = tensorgc.observe_tensor_cycles(lambda html: None)
    b = tensorgc.warn_tensor_cycles(device="cuda")
    assert fake.calls == ["start"]
    a.remove()
    assert fake.calls == ["start"]
    b.remove()
    assert fake.calls == ["start", "stop"]


def test_taken_over_by_the_program_is_not_stopped(fake):
    h = tensorgc.observe_tensor_cycles(lambda html: None)
    _history.took_over()  # what record_memory_history says when the program calls it
    h.remove()
    assert fake.calls == ["start"] and fake.on


def test_record_memory_history_takes_it_over(fake, monkeypatch):
    import importlib

    snap_mod = importlib.import_module("tensorgc.snapshot")

    recorder = importlib.import_module("tensorgc.allocator._recorder")
    monkeypatch.setattr(snap_mod, "cuda_available", lambda: True)
    monkeypatch.setattr(recorder, "record", lambda *a, **k: None)
    h = tensorgc.observe_tensor_cycles(lambda html: None)
    tensorgc.record_memory_history("all")
    h.remove()
    assert fake.calls == ["start"]


def test_stopped_already_by_the_program_is_not_stopped_again(fake):
    h = tensorgc.observe_tensor_cycles(lambda html: None)
    fake.on = False  # torch.cuda.memory._record_memory_history(None), behind tensorgc's back
    h.remove()
    assert fake.calls == ["start"]


def test_a_failed_start_is_logged_and_the_observer_works(fake, caplog):
    fake.fail = True
    caplog.set_level(logging.WARNING, logger="tensorgc")
    h = tensorgc.observe_tensor_cycles(lambda html: None)
    assert h.active and "CUDA driver is too old" in caplog.text
    h.remove()
    assert fake.calls == []


def test_a_handle_removed_inside_its_callback_stops_it(fake, track, device):
    import gc

    from _util import T, new_class

    handles = []

    def once(html):
        handles[0].remove()

    handles.append(tensorgc.observe_tensor_cycles(once, device="any"))
    try:
        Node = new_class()
        a = Node()
        a.self = a
        a.t = T()  # without torch: skipped here, and the handle removed below
        del a
        gc.collect()
        assert fake.calls == ["start", "stop"]
    finally:
        handles[0].remove()


class _BeforeInit:
    """torch as it is before CUDA's lazy initialization: the allocator's question must not be
    asked (torch 2.11 dereferences a device allocator that does not exist yet), and a start
    waits in torch's queue of calls run at the initialization."""

    def __init__(self, monkeypatch):
        import torch

        from tensorgc.allocator import _recorder

        self.initialized = False
        self.queued = []
        self.recorded = []
        self.history_on = False
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: self.initialized)
        monkeypatch.setattr(torch.cuda, "_lazy_call", self.queued.append, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled", self.ask, raising=False)
        monkeypatch.setattr(_recorder, "record", self.record)
        monkeypatch.setattr(_history._Torch, "cuda_available", lambda self: True)
        monkeypatch.setattr(_history, "_torch", _history._Torch())
        monkeypatch.setattr(_history, "_owned", False)
        monkeypatch.setattr(_history, "_users", set())

    def ask(self):
        assert self.initialized, "asked whether the allocator records before CUDA's initialization"
        return self.history_on

    def record(self, enabled="all", **kw):
        self.recorded.append(enabled)
        self.history_on = enabled is not None

    def init(self):
        """What torch's lazy initialization does with the queue."""
        self.initialized = True
        for call in self.queued:
            call()


def test_before_cuda_is_initialized_the_start_waits_for_it(monkeypatch):
    pytest.importorskip("torch")
    t = _BeforeInit(monkeypatch)
    assert _history._Torch().recording() is False
    h = tensorgc.observe_tensor_cycles(lambda html: None, device="cuda")
    assert t.recorded == [] and len(t.queued) == 1 and _history.started_by_tensorgc()
    t.init()
    assert t.recorded == ["state"] and t.history_on
    h.remove()
    assert t.recorded == ["state", None] and not _history.started_by_tensorgc()


def test_a_start_queued_before_cuda_is_initialized_is_dropped_with_its_observer(monkeypatch):
    pytest.importorskip("torch")
    t = _BeforeInit(monkeypatch)
    h = tensorgc.observe_tensor_cycles(lambda html: None, device="cuda")
    h.remove()
    t.init()  # nobody relies on it any more: nothing starts
    assert t.recorded == []


def test_a_queued_start_leaves_the_programs_own_history_alone(monkeypatch):
    pytest.importorskip("torch")
    t = _BeforeInit(monkeypatch)
    h = tensorgc.observe_tensor_cycles(lambda html: None, device="cuda")
    t.history_on = True  # the program started its own before CUDA's initialization ran ours
    t.init()
    assert t.recorded == [] and not _history.started_by_tensorgc()
    h.remove()
    assert t.recorded == []  # not ours to stop


def test_a_queued_start_that_fails_never_fails_cudas_initialization(monkeypatch, caplog):
    pytest.importorskip("torch")
    t = _BeforeInit(monkeypatch)

    def broken(enabled="all", **kw):
        raise RuntimeError("no history here")

    from tensorgc.allocator import _recorder
    with tensorgc.observe_tensor_cycles(lambda html: None, device="cuda"):
        monkeypatch.setattr(_recorder, "record", broken)
        with caplog.at_level(logging.WARNING, logger="tensorgc"):
            t.init()  # must not raise: torch would fail the program's CUDA initialization
    assert "could not start the CUDA allocator's history" in caplog.text
