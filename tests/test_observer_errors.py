"""set_observer_errors("raise"): what an observer raises reaches the program at its next Python
call after the collection, in the thread that collected, as torch's observers' exceptions do;
never inside the collection, another gc callback or another thread. The pytest plugin (loaded
by conftest.py) turns it on for every test."""
import gc
import logging
import sys
import threading
import traceback

import pytest

import tensorgc
from _util import T, new_class


def _cycle_with_tensor():
    Node = new_class()
    a = Node()
    a.self = a
    a.t = T()


def _noop():
    pass


def test_the_plugin_turns_it_on():
    assert tensorgc.set_observer_errors("raise") == "raise"


def test_mode_is_checked_and_the_previous_one_returned():
    with pytest.raises(ValueError, match="'log' or 'raise'"):
        tensorgc.set_observer_errors("print")
    with pytest.raises(ValueError):
        tensorgc.set_observer_errors(1)
    assert tensorgc.set_observer_errors("log") == "raise"
    assert tensorgc.set_observer_errors("raise") == "log"


def test_raised_at_the_next_call_not_inside_the_collection(track, device):
    seen = []

    def observer(report):
        seen.append(report.nbytes)
        assert report.nbytes == 0, "the observer's assertion"

    track(tensorgc.observe_cycles(observer, device=device))
    _cycle_with_tensor()
    gc.collect()  # returns: the collection is whole, its garbage freed
    exc = None
    try:  # the next Python call (pytest.raises would be the one)
        _noop()
    except BaseException as e:  # noqa: BLE001
        exc = e
    assert seen
    assert isinstance(exc, AssertionError) and "the observer's assertion" in str(exc)
    frames = [f.name for f in traceback.extract_tb(exc.__traceback__)]
    assert "_noop" in frames and "observer" in frames  # where it surfaced, where it was raised
    assert sys.getprofile() is None
    _noop()  # once only


def test_a_profiler_of_the_program_is_put_back_and_sees_the_event(track, device):
    events = []

    def profiler(frame, event, arg):
        events.append((event, frame.f_code.co_name))

    def observer(report):
        raise KeyError("from the observer")

    track(tensorgc.observe_cycles(observer, device=device))
    _cycle_with_tensor()
    sys.setprofile(profiler)
    exc = None
    try:
        try:  # with a profiler on, gc.collect's own return is the next event
            gc.collect()
            events.append("collected")
        except BaseException as e:  # noqa: BLE001
            exc = e
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    assert isinstance(exc, KeyError) and "from the observer" in str(exc)
    assert "collected" not in events
    last = max(i for i, e in enumerate(events) if e == ("return", "observer"))
    assert events[last + 1][0] == "c_return"  # the event it was raised at reached the profiler


def test_not_raised_into_a_gc_callback_that_follows(track, device):
    phases = []

    def other(phase, info):
        phases.append(phase)  # Python code: the first event after tensorgc's callback

    def observer(report):
        raise RuntimeError("observer failed")

    track(tensorgc.observe_cycles(observer, device=device))
    gc.callbacks.append(other)
    try:
        _cycle_with_tensor()
        gc.collect()
        exc = None
        try:  # the next Python call (pytest.raises would be the one)
            _noop()
        except BaseException as e:  # noqa: BLE001
            exc = e
    finally:
        gc.callbacks.remove(other)
    assert isinstance(exc, RuntimeError) and "observer failed" in str(exc)
    assert phases == ["start", "stop"]
    # the copy that delivered it is gone (and the hook itself, once the resident sentinel
    # watches instead)
    assert all(gc.callbacks.count(cb) == 1 for cb in gc.callbacks)


def test_only_the_first_is_raised_the_others_are_logged(track, device, caplog):
    caplog.set_level(logging.ERROR, logger="tensorgc")

    def first(report):
        raise ValueError("first")

    def second(report):
        raise ValueError("second")

    track(tensorgc.observe_cycles(first, device=device))
    track(tensorgc.observe_cycles(second, device=device))
    _cycle_with_tensor()
    gc.collect()
    exc = None
    try:  # the next Python call (pytest.raises would be the one)
        _noop()
    except BaseException as e:  # noqa: BLE001
        exc = e
    assert isinstance(exc, ValueError) and str(exc) == "first"
    assert "second" in caplog.text and "first" not in caplog.text


def test_a_garbage_observer_in_another_thread(track):
    def observer(objs):
        raise ZeroDivisionError("in the collecting thread")

    track(tensorgc.observe_garbage(observer))
    got = []

    def run():
        Node = new_class()
        a = Node()
        a.self = a
        del a
        try:
            gc.collect()
            _noop()
            got.append("not raised")
        except ZeroDivisionError as exc:
            got.append(str(exc))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got == ["in the collecting thread"]
    _noop()  # nothing waits in this thread


def test_log_mode_logs_and_raises_nothing(track, device, caplog, observer_errors_logged):
    caplog.set_level(logging.ERROR, logger="tensorgc")

    def observer(report):
        raise RuntimeError("logged only")

    track(tensorgc.observe_cycles(observer, device=device))
    _cycle_with_tensor()
    gc.collect()
    _noop()
    assert "logged only" in caplog.text
