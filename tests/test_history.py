"""observe_tensor_cycles and warn_tensor_cycles start the CUDA allocator's history as torch's
observe_tensor_cycles does, when it is useful and nothing records yet, and stop what they started
when the last observer relying on it goes. torch is replaced by a fake (tensorgc._history._torch),
so the decisions are checked on any machine; the real start is tests/test_cuda.py's (CUDA)."""
import logging

import pytest

import tensorgc
from tensorgc import _history


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

    recorder = importlib.import_module("tensorgc._recorder")
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
    Node = new_class()
    a = Node()
    a.self = a
    a.t = T()
    del a
    gc.collect()
    assert fake.calls == ["start", "stop"]
