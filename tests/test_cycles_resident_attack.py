"""The resident sentinel (cycles/young.c's resident__plant, cycles/hook.c's hook__join and
hook__leave) under a program that uses the collector itself: its own gc.callbacks entries that
come and go during a collection, its gc debug flags changed between collections, observers added
from inside a collection. What must hold: what callback mode (the hook kept on gc.callbacks,
T._resident(False)) gives, the same reports, every program callback called once per phase, the
program's flags and gc.garbage its own, and the pair never shown to the program."""
import gc
import weakref

import pytest

pytest.importorskip("torch")

import tensorgc  # noqa: E402
from tensorgc import _tensorgc_testing  # noqa: E402
from _util import DEVICE, T, new_class  # noqa: E402

_C = _tensorgc_testing
pytestmark = pytest.mark.skipif(not _C._resident()["enabled"],
                                reason="the resident sentinel needs the young-generation pre-scan")


@pytest.fixture(autouse=True, params=["resident", "callbacks"])
def mode(request):
    """Each test resident (the default) and with the hook on gc.callbacks: what the resident
    sentinel gives must be what callback mode gives."""
    was = _C._resident()["enabled"]
    _C._resident(request.param == "resident")
    yield request.param
    _C._resident(was)


def _drop_a_tensor_cycle(cls, n=4):
    h = cls()
    h.me, h.t = h, T(n)


def _observe(track, reports):
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    gc.collect(0)  # resident: the first collection's "stop" takes the hook off gc.callbacks


def test_debug_collectable_shows_the_pair_at_most_once(track, capsys, mode):
    """DEBUG_COLLECTABLE set between collections, while the hook is off gc.callbacks: the first
    collection that meets a tensor may print the resident pair (it was planted before anything of
    ours could see the flags; docs/api.md says so), and sends the hook back to gc.callbacks, where
    no pair is planted under those flags: never again while they stay on. Every report comes."""
    reports = []
    _observe(track, reports)
    Holder = new_class("Holder")
    capsys.readouterr()
    gc.set_debug(gc.DEBUG_COLLECTABLE)
    try:
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        first = capsys.readouterr().err
        for _ in range(3):
            _drop_a_tensor_cycle(Holder)
            gc.collect(0)
    finally:
        gc.set_debug(0)
    later = capsys.readouterr().err
    assert "collectable <Holder" in first and later.count("collectable <Holder") == 3
    assert first.count("_sentinel") <= (2 if mode == "resident" else 0)
    assert "_sentinel" not in later
    assert len(reports) == 4


def test_a_one_shot_callback_leaves_the_others_called_at_the_next_start(track, mode):
    """A program callback that removes itself at its first "stop" (a one-shot), behind another of
    the program's callbacks: the next collection still calls that other callback at "start" and
    "stop", and tensorgc's hook does not stay on gc.callbacks."""
    reports, calls = [], []

    def persistent(phase, info):
        calls.append(("persistent", phase))

    def one_shot(phase, info):
        calls.append(("one_shot", phase))
        if phase == "stop":
            gc.callbacks.remove(one_shot)

    _observe(track, reports)
    Holder = new_class("Holder")
    gc.callbacks.extend([persistent, one_shot])
    try:
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        assert len(reports) == 1
        calls.clear()
        gc.collect(0)
        assert calls == [("persistent", "start"), ("persistent", "stop")]
        ours = [cb for cb in gc.callbacks if cb is not persistent]
        assert len(ours) <= 1  # resident: off, or first in line until it can leave unseen
    finally:
        gc.callbacks.remove(persistent)


def test_restoring_gc_callbacks_after_a_one_shot_loses_no_report_nor_leaves_saveall(track):
    """After a one-shot program callback removed itself in "stop", the program puts gc.callbacks
    back as it saved them (test suites do): every later tensor cycle is reported by its own
    collection, the program's callback is called at each "stop", and no collection returns with
    DEBUG_SAVEALL set or tensorgc's garbage left in gc.garbage."""
    reports, calls = [], []
    saved = list(gc.callbacks)

    def persistent(phase, info):
        calls.append(phase)

    def one_shot(phase, info):
        if phase == "stop":
            gc.callbacks.remove(one_shot)

    _observe(track, reports)
    saved = list(gc.callbacks)
    Holder = new_class("Holder")
    gc.callbacks.extend([persistent, one_shot])
    try:
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        assert len(reports) == 1
        gc.callbacks[:] = saved + [persistent]
        for i in range(2, 5):
            calls.clear()
            _drop_a_tensor_cycle(Holder)
            gc.collect(0)
            assert (len(reports), calls) == (i, ["start", "stop"])
            assert gc.get_debug() == 0 and gc.garbage == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.callbacks.remove(persistent)


def test_a_callback_appended_during_stop_is_called_in_that_stop(track):
    """A program callback appends another during "stop", after the report: the collector calls
    the new one in that same "stop", as it does when tensorgc is not there."""
    reports, calls = [], []

    def late(phase, info):
        calls.append(("late", phase))

    def adder(phase, info):
        calls.append(("adder", phase))
        if phase == "stop" and late not in gc.callbacks:
            gc.callbacks.append(late)

    _observe(track, reports)
    Holder = new_class("Holder")
    gc.callbacks.append(adder)
    try:
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        assert len(reports) == 1
        assert calls == [("adder", "start"), ("adder", "stop"), ("late", "stop")]
    finally:
        for cb in (adder, late):
            if cb in gc.callbacks:
                gc.callbacks.remove(cb)


def test_a_callback_that_moves_itself_to_the_end_during_stop_runs_once(track):
    """A program callback that re-registers itself (remove, append) during "stop": called once
    in that "stop" and once in the next collection's "start"."""
    reports, calls = [], []

    def mover(phase, info):
        calls.append(phase)
        if phase == "stop":
            gc.callbacks.remove(mover)
            gc.callbacks.append(mover)

    _observe(track, reports)
    Holder = new_class("Holder")
    gc.callbacks.append(mover)
    try:
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        assert len(reports) == 1 and calls == ["start", "stop"]
        calls.clear()
        gc.collect(0)
        assert calls == ["start", "stop"]
    finally:
        gc.callbacks.remove(mover)


def test_an_observe_garbage_observer_added_by_a_weakref_callback_costs_no_cycle_report(track):
    """A weakref callback of this collection's garbage (it runs before any finalizer) adds an
    observe_garbage observer: the cycle observer that was already there still gets this
    collection's tensor cycle, and the new observer sees the garbage, as in callback mode."""
    reports, seen = [], []
    _observe(track, reports)
    Holder, Plain = new_class("Holder"), new_class("Plain")
    handles = []

    def added(ref):
        handles.append(track(tensorgc.observe_garbage(seen.append)))

    p = Plain()
    p.me = p
    ref = weakref.ref(p, added)
    _drop_a_tensor_cycle(Holder)
    del p
    gc.collect(0)
    assert handles and ref() is None
    assert len(reports) == 1 and reports[0].nbytes == 16
    assert len(seen) == 1


def test_a_callback_that_takes_the_hook_off_in_stop_leaves_no_saveall_behind(track):
    """A program callback that takes tensorgc's hook off gc.callbacks at each "stop" (a program
    keeping the list to itself): reports may stop, but no collection returns with DEBUG_SAVEALL
    set or tensorgc's garbage in gc.garbage, nor do they stay once the last observer is gone."""
    reports = []
    handle = track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    gc.collect(0)
    Holder = new_class("Holder")

    def keeper(phase, info):
        if phase == "stop":
            gc.callbacks[:] = [cb for cb in gc.callbacks if cb is keeper]

    gc.callbacks.append(keeper)
    try:
        flags = []
        for _ in range(4):
            _drop_a_tensor_cycle(Holder)
            gc.collect(0)
            flags.append((gc.get_debug(), len(gc.garbage)))
        handle.remove()
        flags.append((gc.get_debug(), len(gc.garbage)))
        assert flags == [(0, 0)] * 5
    finally:
        gc.callbacks.remove(keeper)
        gc.set_debug(0)
        gc.garbage.clear()


def test_removing_the_last_observer_from_a_stop_callback_skips_no_later_callback(track):
    """A program callback that runs after tensorgc's hook in "stop" removes the last observer:
    the program's next callback is still called in that "stop" (tensorgc's hook must not leave
    gc.callbacks from under the collector's walk). Callback mode does the same today: this holds
    for both."""
    reports, calls = [], []
    handle = track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    gc.collect(0)
    Holder = new_class("Holder")

    def remover(phase, info):
        calls.append(("remover", phase))
        if phase == "stop":
            handle.remove()

    def after(phase, info):
        calls.append(("after", phase))

    gc.callbacks.extend([remover, after])
    try:
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        assert len(reports) == 1
        assert calls == [("remover", "start"), ("after", "start"), ("remover", "stop"),
                         ("after", "stop")]
    finally:
        gc.callbacks.remove(remover)
        gc.callbacks.remove(after)


@pytest.mark.parametrize("when", ["start", "stop"])
def test_removing_the_last_observer_from_a_callback_ahead_of_the_hook_skips_no_later_callback(
        track, when):
    """tensorgc's hook sits on gc.callbacks between a program callback ahead of it and one behind
    it (resident: the hook joined first in line for a report and stays, not being the last
    entry); the callback ahead removes the last observer in "start" or "stop". The callback
    behind must still be called in that phase. The hook appends a trailing copy to leave from,
    but the first copy, called next, sees a hook as the list's last entry and takes every copy
    off from under the collector's walk, which then skips the entry behind it."""
    reports, calls = [], []
    handle = track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    gc.collect(0)
    Holder = new_class("Holder")

    def after(phase, info):
        calls.append(("after", phase))

    def remover(phase, info):
        calls.append(("remover", phase))
        if phase == when:
            handle.remove()

    gc.callbacks.append(after)
    try:
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        assert len(reports) == 1
        assert gc.callbacks.index(after) == len(gc.callbacks) - 1 > 0  # the hook is ahead of it
        gc.callbacks.insert(0, remover)
        calls.clear()
        gc.collect(0)
        assert calls == [("remover", "start"), ("after", "start"), ("remover", "stop"),
                         ("after", "stop")]
        assert gc.callbacks == [remover, after]
    finally:
        for cb in (remover, after):
            if cb in gc.callbacks:
                gc.callbacks.remove(cb)


def test_an_observer_swapped_in_start_by_callbacks_behind_the_hook_skips_no_stop_callback(track):
    """Program callbacks behind tensorgc's hook swap observers during "start": one removes the
    last observer (the hook appends a trailing copy to leave from), the next adds a new one (which
    keeps the hook: the copy stays). At "stop" the hook's first entry goes resident again and sees
    a hook as the list's last entry: it must not take every copy off from under the collector's
    walk, which would skip the callback right behind it. Callback mode calls every one."""
    reports, calls = [], []
    handles = [track(tensorgc.observe_cycles(reports.append, device=DEVICE))]
    gc.collect(0)
    Holder = new_class("Holder")

    def first(phase, info):
        calls.append(("first", phase))

    def remover(phase, info):
        calls.append(("remover", phase))
        if phase == "start" and len(handles) == 1:
            handles[0].remove()

    def adder(phase, info):
        calls.append(("adder", phase))
        if phase == "start" and len(handles) == 1:
            handles.append(track(tensorgc.observe_cycles(reports.append, device=DEVICE)))

    gc.callbacks.append(first)
    try:
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        assert len(reports) == 1
        assert gc.callbacks.index(first) > 0  # the hook is ahead of the program's callbacks
        gc.callbacks.extend([remover, adder])
        calls.clear()
        gc.collect(0)
        assert calls == [("first", "start"), ("remover", "start"), ("adder", "start"),
                         ("first", "stop"), ("remover", "stop"), ("adder", "stop")]
        _drop_a_tensor_cycle(Holder)
        gc.collect(0)
        assert len(reports) == 2
    finally:
        for cb in (first, remover, adder):
            if cb in gc.callbacks:
                gc.callbacks.remove(cb)
