"""Regressions found in review: objects the user parks in gc.garbage during a collection, legacy
tp_del objects, callbacks after ours when the last observer leaves, set subclasses with a Python
__iter__, long reprs and keys, and a report whose .groups the user mutates."""
import gc
import re

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from _util import DEVICE, T, new_class


def live_function():
    return len("still alive")


def test_object_parked_in_gc_garbage_by_del_is_left_alone(track):
    track(tensorgc.observe_cycles(lambda r: None, device=DEVICE))
    parked = {"note": "parked by __del__"}

    class D:
        def __del__(self):
            gc.garbage.append(live_function)
            gc.garbage.append(parked)

    def make():
        d = D()
        d.me = d
    make()
    gc.collect()
    try:
        assert gc.garbage[-2:] == [live_function, parked]
        assert live_function.__globals__ is not None and live_function() == 11
        assert parked == {"note": "parked by __del__"}
    finally:
        del gc.garbage[-2:]


def test_other_gc_callback_keeps_its_stop_when_last_observer_leaves(track):
    events = []
    handle = None

    def once(objs):
        handle.remove()

    handle = track(tensorgc.observe_garbage(once))

    def other(phase, info):
        events.append(phase)

    gc.callbacks.append(other)
    Node = new_class()

    def make():
        n = Node()
        n.me = n
    make()
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(other)
    assert events == ["start", "stop"]
    assert not any(getattr(cb, "__name__", "") == "_gc_hook" for cb in gc.callbacks)


def test_registering_inside_a_collection_keeps_the_hook_once(track):
    inner = []

    def first(objs):
        # registering from inside a callback must not make any callback run twice
        track(tensorgc.observe_garbage(inner.append))

    track(tensorgc.observe_garbage(first))
    Node = new_class()

    def make():
        n = Node()
        n.me = n
    make()
    gc.collect()
    make()
    gc.collect()
    assert sum(getattr(cb, "__name__", "") == "_gc_hook" for cb in gc.callbacks) == 1
    assert len(inner) >= 1


def test_set_subclass_python_iter_never_runs(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    calls = []

    class EndlessSet(set):
        def __iter__(self):
            calls.append(1)
            while True:
                yield 0

    Holder = new_class("Holder")

    def make():
        h = Holder()
        h.s = EndlessSet([1])
        h.s.add(h)  # a member edge back to the holder
        h.t = T(4)
    make()
    gc.collect()
    assert calls == []
    assert len(reports) == 1
    assert any(label == "member" for _, label, _ in reports[0].edges)


def test_long_repr_and_key_are_cut_with_an_ellipsis(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))

    class Holder:
        def __repr__(self):
            return "x" * 500

    def make():
        h = Holder()
        h.d = {"k" * 300: h}
        h.t = T(4)
    make()
    gc.collect()
    r = reports[0]
    labels = [label for _, label, _ in r.edges]
    # cut with an ellipsis and the true length: "['kkk\u2026 (302 chars)]"
    assert any(label.startswith("['kkk") and label.endswith("\u2026 (302 chars)]") for label in labels), labels
    assert "x" * 60 + "\u2026 (500 chars)" in r.dot
    assert "x" * 61 not in r.dot


def test_mutating_report_groups_does_not_touch_the_page(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Node = new_class()

    def make():
        n = Node()
        n.me = n
        n.t = T(4)
    make()
    gc.collect()
    r = reports[0]
    r.groups[0].clear()
    r.groups.clear()
    html = r.html
    assert "<table id=\"groups\">" in html and "<svg" in html


_testcapi = pytest.importorskip("_testcapi")


@pytest.mark.skipif(not hasattr(_testcapi, "with_tp_del"), reason="needs _testcapi.with_tp_del")
def test_legacy_tp_del_object_stays_intact_in_gc_garbage(track):
    track(tensorgc.observe_cycles(lambda r: None, device=DEVICE))

    @_testcapi.with_tp_del
    class Legacy:
        def __tp_del__(self):
            pass

    def make():
        x = Legacy()
        x.me = x
        x.payload = {"k": [1, 2, 3]}
    make()
    gc.collect()
    left = [o for o in gc.garbage if type(o) is Legacy]
    try:
        assert len(left) == 1
        assert left[0].payload == {"k": [1, 2, 3]} and left[0].me is left[0]
    finally:
        gc.garbage[:] = [o for o in gc.garbage if type(o) is not Legacy]
        for o in left:
            o.__dict__.clear()


def test_a_traceback_node_names_its_real_line(track):
    # from 3.11 tb_lineno is computed on demand: read raw it was -1 ("line -1")
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Holder = new_class("Holder")

    def make():
        h = Holder()
        h.t = T(4)
        try:
            raise ValueError("kept")
        except ValueError as exc:
            h.err = exc
        return make.__code__.co_firstlineno
    first = make()
    gc.collect()
    lines = [int(m) for m in re.findall(r"traceback\\lline (\d+)", reports[0].dot)]
    assert lines and all(first < n < first + 10 for n in lines), reports[0].dot
