"""The resident sentinel (cycles/young.h): once a cycle observer's first collection ended, the
detector's hook leaves gc.callbacks; the tensor watch plants the sentinel's pair inside the
collections that meet a tensor, and the hook joins gc.callbacks again only for the "stop" of a
collection whose garbage holds tensors. What must hold: the reports of the hook on gc.callbacks,
collections that meet no tensor run with nothing of ours, the program's callbacks each called once
in their order, its gc counts and flags untouched, and the hook back on gc.callbacks wherever the
resident sentinel does not fit (the program's debug flags, an observe_garbage observer)."""
import gc
import threading
import weakref

import pytest

torch = pytest.importorskip("torch")

import tensorgc  # noqa: E402
from tensorgc import _tensorgc_testing  # noqa: E402
from _util import DEVICE, T, new_class  # noqa: E402

_C = _tensorgc_testing
pytestmark = pytest.mark.skipif(not _C._resident()["enabled"],
                                reason="the resident sentinel needs the young-generation pre-scan")


def _hooks():
    """The entries of gc.callbacks that are not plain Python functions: tensorgc's hook."""
    return [cb for cb in gc.callbacks if type(cb).__name__ == "builtin_function_or_method"]


def _drop_a_tensor_cycle(nbytes=16):
    Holder = new_class("Holder")
    h = Holder()
    h.me, h.t = h, T(nbytes // 4)
    return Holder


def _pairs(n, cls):
    for _ in range(n):
        a, b = cls(), cls()
        a.other, b.other = b, a


def _resident(track, reports, **kw):
    """An observer appending to reports, resident once its first collection ended."""
    gc.collect()  # what earlier tests left
    handle = track(tensorgc.observe_cycles(reports.append, device=DEVICE, **kw))
    gc.collect()
    assert _C._resident()["resident"] == 1 and _hooks() == []
    return handle


def test_collections_that_meet_no_tensor_run_without_the_hook(track):
    calls = []
    reports = []
    _resident(track, reports)
    before = _C._resident()
    Pair = new_class("Pair")
    for _ in range(20):
        _pairs(300, Pair)
        gc.collect(0)
    gc.collect(1)
    after = _C._resident()
    assert after["planted"] == before["planted"] and after["joined"] == before["joined"]
    assert reports == [] and calls == [] and _hooks() == []


@pytest.mark.parametrize("generation", [0, 1, 2])
def test_a_tensor_cycle_is_reported_and_the_hook_leaves_again(track, generation):
    reports = []
    _resident(track, reports)
    before = _C._resident()
    _drop_a_tensor_cycle(64)
    gc.collect(generation)
    after = _C._resident()
    assert [r.nbytes for r in reports] == [64]
    assert after["planted"] == before["planted"] + 1
    assert after["joined"] == before["joined"] + 1
    assert _hooks() == [] and after["resident"] == 1 and after["missed"] == 0


def test_a_live_tensor_met_by_a_young_collection_plants_but_never_joins(track):
    """A young list holding a live tensor: the pair is planted and walks the garbage, finds no
    tensor in it, and the hook stays off gc.callbacks."""
    reports = []
    _resident(track, reports)
    Pair = new_class("Pair")
    before = _C._resident()
    live = [T(4)]
    _pairs(100, Pair)
    gc.collect(0)
    after = _C._resident()
    assert after["planted"] == before["planted"] + 1 and after["joined"] == before["joined"]
    assert reports == [] and _hooks() == [] and live[0].sum().item() == 0


def test_the_programs_counts_are_those_of_the_hook_on_gc_callbacks(track):
    """The pair outlives its collection (tensorgc keeps it), so the collector never counts it:
    gc.collect()'s result and gc.get_stats() are what they are without an observer when the
    garbage holds no tensor (the pair planted for a live one), and what they are with the hook on
    gc.callbacks when it does (the report's part is freed by the hook, not counted by the collector)."""
    Pair, Holder = new_class("Pair"), new_class("Holder")
    live = [T(4)]

    def run(cycle):
        _pairs(100, Pair)
        young = [live[0]]  # a young list holding a live tensor: the pair is planted
        if cycle:
            h = Holder()
            h.me, h.t = h, T(4)
            del h
        stats = gc.get_stats()[0]["collected"]
        n = gc.collect(0)
        del young
        return n, gc.get_stats()[0]["collected"] - stats

    gc.collect()
    alone = run(False)
    reports = []
    handle = track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    with_hook = []
    try:
        _C._resident(False)
        gc.collect()
        with_hook.append(run(True))
    finally:
        _C._resident(True)
    gc.collect()
    assert _C._resident()["resident"] == 1
    planted = _C._resident()["planted"]
    assert run(False) == alone
    assert run(True) == with_hook[0] and len(reports) == 2
    assert _C._resident()["planted"] == planted + 2
    handle.remove()


def test_the_programs_callbacks_run_once_each_and_in_their_order(track):
    """The hook joins gc.callbacks first in line for a report's "stop"; with the program's
    callbacks after it, it leaves only where the collector's walk cannot skip one of them (from
    the next pair's finalizer): each runs once per phase, in the program's order, and the list is
    the program's again once a collection met a tensor without a report."""
    calls = []

    def first(phase, info):
        calls.append(("first", phase))

    def second(phase, info):
        calls.append(("second", phase))

    reports = []
    _resident(track, reports)
    gc.callbacks.extend([first, second])
    try:
        for _ in range(3):
            calls.clear()
            _drop_a_tensor_cycle()
            gc.collect(0)
            assert calls == [("first", "start"), ("second", "start"),
                             ("first", "stop"), ("second", "stop")]
            assert gc.callbacks[-2:] == [first, second] and len(_hooks()) <= 1
        live = [T(4)]  # met, no report: the pair's finalizer takes the hook off
        gc.collect(0)
        assert gc.callbacks[-2:] == [first, second] and _hooks() == []
        assert live[0].sum().item() == 0
    finally:
        gc.callbacks.remove(first)
        gc.callbacks.remove(second)
    assert len(reports) == 3


def test_a_frozen_heap_is_still_watched(track):
    """gc.freeze() moves every object to the permanent generation: the resident pair is planted
    in each collection that meets a tensor, frozen or not."""
    reports = []
    _resident(track, reports)
    gc.freeze()
    try:
        _drop_a_tensor_cycle(32)
        gc.collect(0)
    finally:
        gc.unfreeze()
    assert [r.nbytes for r in reports] == [32]


def test_the_programs_debug_flags_put_the_hook_back_until_they_are_cleared(track):
    """With the program's debug flags on, the collector must see all of the garbage: the pair's
    collection is armed, the hook stays on gc.callbacks for the following ones, and goes resident
    again at the first "stop" after the flags are cleared."""
    reports = []
    _resident(track, reports)
    gc.set_debug(gc.DEBUG_UNCOLLECTABLE)
    try:
        _drop_a_tensor_cycle(16)
        gc.collect(0)
        assert [r.nbytes for r in reports] == [16] and len(_hooks()) == 1
        assert _C._resident()["resident"] == 0 and gc.get_debug() == gc.DEBUG_UNCOLLECTABLE
        _drop_a_tensor_cycle(32)
        gc.collect(0)
        assert [r.nbytes for r in reports] == [16, 32] and len(_hooks()) == 1
    finally:
        gc.set_debug(0)
    gc.collect(0)
    assert _C._resident()["resident"] == 1 and _hooks() == []
    _drop_a_tensor_cycle(64)
    gc.collect(0)
    assert [r.nbytes for r in reports] == [16, 32, 64] and gc.garbage == []


def test_an_observe_garbage_observer_puts_the_hook_back(track):
    """An observe_garbage observer sees every collection: the hook is back on gc.callbacks as
    soon as one is added, and leaves again once it is removed."""
    reports, seen = [], []
    _resident(track, reports)
    g = tensorgc.observe_garbage(lambda objs: seen.append(len(objs)))
    try:
        assert len(_hooks()) == 1 and _C._resident()["resident"] == 0
        _pairs(10, new_class("Pair"))
        gc.collect(0)
        assert seen and seen[-1] >= 20
        _drop_a_tensor_cycle(16)
        gc.collect(0)
        assert [r.nbytes for r in reports] == [16]
    finally:
        g.remove()
    gc.collect(0)
    assert _C._resident()["resident"] == 1 and _hooks() == []


def test_the_last_observer_leaving_leaves_nothing_behind(gc_state):
    callbacks = list(gc.callbacks)
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    gc.collect()
    assert _C._resident()["resident"] == 1
    handle.remove()
    assert _C._resident()["resident"] == 0 and gc.callbacks == callbacks
    Holder = _drop_a_tensor_cycle()
    ref = weakref.ref([o for o in gc.get_objects() if type(o) is Holder][0])
    gc.collect(0)
    assert ref() is None and reports == [] and gc.callbacks == callbacks


def test_the_last_observer_removed_by_a_weakref_callback_of_the_garbage(gc_state):
    """A weakref callback runs inside the collection before any finalizer, the pair's too: the
    pair then finds nobody listening, gives the garbage back to the collector, which frees it,
    and the hook stays off gc.callbacks."""
    callbacks = list(gc.callbacks)
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    gc.collect()
    Holder = _drop_a_tensor_cycle()
    h = [o for o in gc.get_objects() if type(o) is Holder][0]
    wr = weakref.ref(h, lambda _: handle.remove())
    del h
    gc.collect(0)
    assert wr() is None and reports == [] and gc.callbacks == callbacks
    assert _C._resident()["resident"] == 0


def test_threads_making_tensor_cycles_are_all_reported(track, gc_state):
    """Four threads drop tensor cycles between tensor-free garbage with automatic collection on:
    every tensor is reported once."""
    reports = []
    _resident(track, reports)
    gc.enable()
    Pair = new_class("Pair")

    def work():
        for _ in range(50):
            _pairs(50, Pair)
            _drop_a_tensor_cycle(16)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert sum(len(r.tensors) for r in reports) == 200
    assert sum(r.nbytes for r in reports) == 200 * 16


def test_many_observers_and_filters_while_resident(track):
    """Observers with other filters, added and removed while resident: each report goes to the
    observers whose filter selects its tensors."""
    cpu, every, pred = [], [], []
    _resident(track, cpu, )
    h2 = track(tensorgc.observe_cycles(every.append, device="any"))
    assert _C._resident()["resident"] == 1 and _hooks() == []
    h3 = track(tensorgc.observe_cycles(pred.append,
                                       device=lambda t: t.dtype == torch.float64))
    Holder = new_class("Holder")
    a = Holder()
    a.me, a.t = a, T(4)
    b = Holder()
    b.me, b.t = b, T(4, dtype=torch.float64)
    del a, b
    gc.collect(0)
    assert sum(len(r.tensors) for r in every) == 2
    assert [len(r.tensors) for r in pred] == [1]
    h2.remove()
    h3.remove()
    _drop_a_tensor_cycle()
    gc.collect(0)
    assert len(every) == 1 and len(pred) == 1 and _hooks() == []


def _layouts():
    """Garbage whose tensors lie in different places relative to what holds them, each made by a
    function that leaves it unreachable; name -> maker."""
    Pair, Holder, Far = new_class("Pair"), new_class("Holder"), new_class("Far")

    def beside():  # the holder made right after its tensor, amid tensor-free garbage
        _pairs(150, Pair)
        h = Holder()
        h.me, h.t = h, T(4)
        _pairs(150, Pair)

    def holder_long_before():  # the holder made first, its tensor 300 objects later
        h = Holder()
        h.me = h
        _pairs(150, Pair)
        h.t = T(4)
        _pairs(150, Pair)

    def member_far_away():  # the holder's cycle runs through an object made far from the tensor
        f = Far()
        _pairs(200, Pair)
        h = Holder()
        h.t, h.far, f.back = T(4), f, h
        _pairs(200, Pair)

    def two_cycles_apart():
        h = Holder()
        h.me, h.t = h, T(4)
        _pairs(300, Pair)
        k = Holder()
        k.me, k.t = k, T(8)

    def shared_tensor():  # two cycles holding one tensor
        t = T(4)
        _pairs(100, Pair)
        h, k = Holder(), Holder()
        h.me, h.t, k.me, k.t = h, t, k, t

    return {"beside": beside, "holder_long_before": holder_long_before,
            "member_far_away": member_far_away, "two_cycles_apart": two_cycles_apart,
            "shared_tensor": shared_tensor}


def _seen(r):
    return (r.text, [(t["shape"], t["nbytes"]) for t in r.tensors], r.edges)


@pytest.mark.parametrize("live", [None, "after", "before"],
                         ids=["garbage_only", "live_tensor_after", "live_tensor_before"])
@pytest.mark.parametrize("layout", sorted(_layouts()))
def test_the_walk_from_beside_the_tensor_reports_what_the_walk_from_the_ends_does(
        track, layout, live):
    """Resident, the walk starts beside the tensor the collection met first, when that one is
    garbage, and stops once every reference to a tensor is accounted for; with the hook on
    gc.callbacks it starts at the ends of the garbage. Both give the same report (the same objects
    in the same order: the same text, tensors and edges), wherever the tensor lies relative to what
    holds it. With a live young list referencing a tensor made after the garbage, no stop is
    proven (a reference no garbage explains) and the walk from beside the tensor tests all of the
    garbage; made before it, the first tensor met is the live one, and the walk starts at the
    ends."""
    make = _layouts()[layout]
    tensor = T(2)

    def one(resident):
        reports = []
        handle = track(tensorgc.observe_cycles(reports.append, device=DEVICE))
        try:
            _C._resident(resident)
            gc.collect()
            reports.clear()  # what earlier tests left
            young = [tensor] if live == "before" else None
            near = _C._sentinel()["near"]
            make()
            if live == "after":
                young = [tensor]
            gc.collect(0)
            del young
            return [_seen(r) for r in reports], _C._sentinel()["near"] - near
        finally:
            _C._resident(True)
            handle.remove()

    ends, near_off = one(False)
    beside, near_on = one(True)
    assert len(ends) == 1 and near_off == 0
    assert beside == ends
    assert near_on == (0 if live == "before" else 1)


def test_a_live_tensor_the_collection_met_first_outlives_a_weakref_callback_that_drops_it(track):
    """The pair is planted at the first reference to a tensor the collection follows, and keeps
    that tensor (its hint) until the walk. When it is a live one and a weakref callback, which the
    collector runs before any finalizer, drops its last other reference, it is still alive for
    the callbacks after that one and is freed after the walk, not under it; the garbage's tensor
    is reported, and the live one is freed by the end of the collection."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    gc.collect()
    reports.clear()  # what earlier tests left
    Holder, Target = new_class("Holder"), new_class("Target")
    holder = [T(3)]  # young: the first reference to a tensor the collection follows
    freed = weakref.ref(holder[0])
    alive_then = []
    g, g2 = Target(), Target()
    g.me, g2.me = g, g2
    # reachable weak references to garbage: the collector calls them before any finalizer, in
    # the garbage's order; the second one sees the tensor still held by the pair
    watcher = weakref.ref(g, lambda _: holder.clear())
    looker = weakref.ref(g2, lambda _: alive_then.append(freed() is not None))
    h = Holder()
    h.me, h.t = h, T(4)
    del g, g2, h
    planted = _C._resident()["planted"]
    gc.collect(0)
    assert _C._resident()["planted"] == planted + 1
    assert alive_then == [True]
    assert holder == [] and freed() is None
    assert [(r.nbytes, len(r.tensors)) for r in reports] == [(16, 1)]
    del watcher, looker
