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

    def recording(self, allocator_ready=False):
        return self.on

    def watch(self):
        pass

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
    monkeypatch.setattr(_history, "_program_set", False)
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


class CudaModel:
    """torch's CUDA around its lazy initialization, as torch/cuda/__init__.py and
    torch/csrc/cuda/memory_snapshot.cpp have it, with the allocator faked:

    * torch.cuda.is_initialized() is Python's flag, set only after torch ran its queued calls;
    * the allocator is made by the C++ side's lazy init, which torch's history switch runs
      itself (at::globalContext().lazyInitCUDA()) without running the queue or setting the flag;
    * asking _cuda_isHistoryEnabled before the allocator exists is torch 2.11's segmentation
      fault: here it fails the test;
    * each switch replaces every setting and starts an empty trace.

    The program's calls are torch's own Python functions (torch.cuda.memory._record_memory_history
    and torch.cuda.init), which reach the faked C functions."""

    def __init__(self, monkeypatch):
        import torch

        from tensorgc.allocator import _recorder

        self.torch = torch
        self.py_initialized = False
        self.allocator = False
        self.queue = []
        self.settings = None  # what the switch was last set to; None: not recording
        self.trace = []
        self.switches = []
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: self.py_initialized)
        monkeypatch.setattr(torch.cuda, "_lazy_call", self.lazy_call, raising=False)
        monkeypatch.setattr(torch.cuda, "_lazy_init", self.lazy_init)
        monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled", self.ask, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_record_memory_history", self.switch, raising=False)
        monkeypatch.setattr(_recorder, "cuda_available", lambda: True)
        monkeypatch.setattr(_history._Torch, "cuda_available", lambda self: True)
        monkeypatch.setattr(_history, "_torch", _history._Torch())
        monkeypatch.setattr(_history, "_owned", False)
        monkeypatch.setattr(_history, "_users", set())
        monkeypatch.setattr(_history, "_program_set", False)

    def ask(self):
        assert self.allocator, "asked whether the allocator records before it exists"
        return self.settings is not None

    def switch(self, enabled, context, stacks, max_entries, *rest):
        self.allocator = True
        self.switches.append(enabled)
        self.trace = []
        if enabled is None:
            self.settings = None
        else:
            self.settings = {"enabled": enabled, "context": context, "stacks": stacks,
                             "max_entries": max_entries if enabled == "all" else 1}

    def lazy_call(self, call):
        if self.py_initialized:
            call()
        else:
            self.queue.append(call)

    def lazy_init(self):
        if self.py_initialized:
            return
        self.allocator = True  # torch._C._cuda_init()
        for call in self.queue:
            call()
        self.queue.clear()
        self.py_initialized = True

    def work(self, n=50):
        """n allocations, as a program's first CUDA tensor initializes CUDA."""
        self.lazy_init()
        s = self.settings
        for _ in range(n):
            if s is not None and s["enabled"] == "all" and len(self.trace) < s["max_entries"]:
                self.trace.append("alloc")

    def record(self):
        """What the memory snapshot documentation tells everyone to call."""
        self.torch.cuda.memory._record_memory_history(max_entries=100000)


PROGRAMS = {
    "record only": [],
    "record, then warn_tensor_cycles()": ["record", "warn"],
    "record, then observe_tensor_cycles(cb)": ["record", "observe"],
    "warn_tensor_cycles(), then record": ["warn", "record"],
    "record, warn, work, remove, work": ["record", "warn", "work", "remove"],
    "torch.cuda.init(), record, warn_tensor_cycles()": ["init", "record", "warn"],
    "warn_tensor_cycles(), work, record, remove": ["warn", "work", "record", "remove"],
    "observe, warn, record, remove one, work, remove the other": [
        "observe", "warn", "record", "remove", "work", "remove"],
    "record from another thread while tensorgc starts": ["warn", "record-thread", "remove"],
}


@pytest.mark.parametrize("steps", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_the_programs_trace_stays_whole_in_any_order(monkeypatch, steps):
    pytest.importorskip("torch")
    import threading

    m = CudaModel(monkeypatch)
    handles = []
    if "record" not in steps and "record-thread" not in steps:
        steps = ["record"] + steps
    for step in steps:
        if step == "record":
            m.record()
        elif step == "record-thread":
            t = threading.Thread(target=m.record)
            t.start()
            t.join()
        elif step == "warn":
            handles.append(tensorgc.warn_tensor_cycles(device="cuda"))
        elif step == "observe":
            handles.append(tensorgc.observe_tensor_cycles(lambda html: None))
        elif step == "work":
            m.work()
        elif step == "remove":
            handles.pop().remove()
        elif step == "init":
            m.lazy_init()
    m.work()
    for h in handles:
        h.remove()
    # the program's settings, all of them, and every allocation since its call in its trace
    assert m.settings == {"enabled": "all", "context": "all", "stacks": "all",
                          "max_entries": 100000}
    last = max(i for i, s in enumerate(steps) if s.startswith("record"))
    assert len(m.trace) == 50 * (1 + steps[last:].count("work"))
    assert not _history.started_by_tensorgc()


def test_tensorgcs_own_history_when_nobody_records(monkeypatch):
    pytest.importorskip("torch")
    m = CudaModel(monkeypatch)
    h = tensorgc.observe_tensor_cycles(lambda html: None, device="cuda")
    assert m.switches == [] and len(m.queue) == 1 and _history.started_by_tensorgc()
    m.work()
    assert m.settings == {"enabled": "state", "context": "state", "stacks": "python",
                          "max_entries": 1}
    h.remove()
    assert m.settings is None and m.switches == ["state", None]
    assert not _history.started_by_tensorgc()


def test_after_cuda_is_initialized_it_starts_at_once(monkeypatch):
    pytest.importorskip("torch")
    m = CudaModel(monkeypatch)
    m.lazy_init()
    with tensorgc.warn_tensor_cycles(device="cuda"):
        assert m.switches == ["state"]
    assert m.switches == ["state", None]


def test_a_start_queued_before_cuda_is_initialized_is_dropped_with_its_observer(monkeypatch):
    pytest.importorskip("torch")
    m = CudaModel(monkeypatch)
    h = tensorgc.observe_tensor_cycles(lambda html: None, device="cuda")
    h.remove()
    m.work()  # nobody relies on it any more: nothing starts
    assert m.switches == []


def test_a_program_that_stopped_the_history_is_not_restarted(monkeypatch):
    pytest.importorskip("torch")
    m = CudaModel(monkeypatch)
    m.lazy_init()
    h = tensorgc.warn_tensor_cycles(device="cuda")
    m.torch.cuda.memory._record_memory_history(None)  # the program's choice: no history
    h.remove()
    with tensorgc.observe_tensor_cycles(lambda html: None, device="cuda"):
        pass
    assert m.switches == ["state", None] and m.settings is None
    assert _history.program_set_it()


def test_tensorgcs_own_calls_are_not_the_programs(monkeypatch):
    pytest.importorskip("torch")
    m = CudaModel(monkeypatch)
    m.lazy_init()
    for _ in range(2):
        with tensorgc.warn_tensor_cycles(device="cuda"):
            pass
    assert m.switches == ["state", None, "state", None] and not _history.program_set_it()


def test_the_watch_is_a_pass_through(monkeypatch):
    pytest.importorskip("torch")
    m = CudaModel(monkeypatch)
    with tensorgc.warn_tensor_cycles(device="cuda"):
        watched = m.torch._C._cuda_record_memory_history
        assert watched is not m.switch and watched.__wrapped__ == m.switch
        assert watched.__name__ == m.switch.__name__
    _history._torch.watch()  # once: never wrapped twice
    assert m.torch._C._cuda_record_memory_history is watched


def test_a_queued_start_that_fails_never_fails_cudas_initialization(monkeypatch, caplog):
    pytest.importorskip("torch")
    m = CudaModel(monkeypatch)

    def broken(*args):
        raise RuntimeError("no history here")

    with tensorgc.observe_tensor_cycles(lambda html: None, device="cuda"):
        monkeypatch.setattr(m, "switch", broken)
        monkeypatch.setattr(m.torch._C, "_cuda_record_memory_history",
                            _history._watching(broken))
        with caplog.at_level(logging.WARNING, logger="tensorgc"):
            m.work()  # must not raise: torch would fail the program's CUDA initialization
    assert "could not start the CUDA allocator's history" in caplog.text
