"""The sentinel (cycles/young.c's tgc_young_plant): collections run alone, with a pair of objects
planted at the front of what they examine; the collector finds the pair first among its garbage,
and its finalizer, run before any other, looks at the rest of the garbage and takes the part that
holds tensors for the report. What must hold: the same reports as the armed path, the program's
own gc counts and flags untouched, finalizers after the report, and no harm when other callbacks
freeze the heap or grab the pair."""
import gc
import sys

import pytest

pytest.importorskip("torch")

import tensorgc  # noqa: E402
from tensorgc import _tensorgc_testing  # noqa: E402
from _util import DEVICE, T, instances, live_tensors_with_ptr, new_class  # noqa: E402
import test_cycles_island  # noqa: E402
from test_cycles_island import _random_graph, _random_run  # noqa: E402

_C = _tensorgc_testing
# Objects the collector counts per instance of a plain class: 3.10 gives each its __dict__.
PER_INSTANCE = 2 if sys.version_info < (3, 11) else 1
pytestmark = pytest.mark.skipif(not _C._sentinel()["enabled"],
                                reason="the sentinel needs the young-generation pre-scan")


@pytest.fixture(autouse=True)
def _switches():
    """The detector's switches as they were (the random-graph runs turn islands)."""
    island, sentinel = _C._young_island()["enabled"], _C._sentinel()["enabled"]
    yield
    _C._young_island(island)
    _C._sentinel(sentinel)


class Sentinel:
    """Switches the sentinel for a block (the armed path then decides, islands off)."""

    def __init__(self, on):
        self.on = on

    def __enter__(self):
        self.was = _C._sentinel()["enabled"]
        self.island = _C._young_island()["enabled"]
        _C._sentinel(self.on)
        return self

    def __exit__(self, *exc):
        _C._sentinel(self.was)
        _C._young_island(self.island)


def _drop_a_tensor_cycle():
    """A fresh class, and one of its instances holding itself and a 16-byte tensor, dropped:
    garbage for the next collection. Returns the class."""
    Holder = new_class("Holder")
    h = Holder()
    h.me, h.t = h, T(4)
    return Holder


def _pairs(n, cls):
    for _ in range(n):
        a, b = cls(), cls()
        a.other, b.other = b, a


@pytest.fixture
def own_graph_state(monkeypatch):
    """The random graphs' old objects and instance class, this test's own, so that
    test_cycles_island's stay as its tests expect them: the pool is used up, and the attributes
    the graphs set grow the class's shared keys (then its instances get dicts of their own)."""
    pool = [test_cycles_island.Config() for _ in range(1024)]
    gc.collect()  # old
    monkeypatch.setattr(test_cycles_island, "_OLD_POOL", pool)
    monkeypatch.setattr(test_cycles_island, "GraphNode", new_class("GraphNode"))


@pytest.mark.parametrize("generation", [0, 1, 2])
def test_reports_and_frees_what_the_armed_path_does_on_random_graphs(gc_state, own_graph_state,
                                                                     generation):
    """Random graphs of instances, lists, dicts and tensors, some kept alive, some weakly
    referenced: the sentinel's reports are the armed path's, object for object."""
    took = 0
    for seed in range(40):
        make = _random_graph(seed)
        with Sentinel(False):
            _random_run(make, False, generation)  # the device's lazy set-up
            armed = _random_run(make, False, generation)
        before = _C._sentinel()
        got = _random_run(make, False, generation)
        after = _C._sentinel()
        assert got == armed, "seed %d" % seed
        assert after["lost"] == before["lost"]
        took += after["taken"] - before["taken"]
    assert took > 0


def test_the_programs_own_counts_are_unchanged(gc_state):
    """The pair is never counted as collected: gc.collect()'s result and gc.get_stats() say what
    the program's garbage was, as without the detector."""
    Pair = new_class("Pair")
    counts = []
    for observe in (False, True):
        handle = tensorgc.observe_cycles(lambda r: None, device=DEVICE) if observe else None
        try:
            for generation in (0, 1, 2):
                gc.collect()
                stats = [s["collected"] for s in gc.get_stats()]
                _pairs(30, Pair)
                n = gc.collect(generation)
                counts.append((generation, n, gc.get_stats()[generation]["collected"]
                               - stats[generation]))
        finally:
            if handle is not None:
                handle()
    assert counts[:3] == counts[3:] == [(g, 60 * PER_INSTANCE, 60 * PER_INSTANCE)
                                        for g in (0, 1, 2)]
    assert gc.garbage == []


def test_a_full_collection_without_tensor_garbage_is_not_armed(on_gc_callbacks, track):
    """The pre-scan armed every full collection (DEBUG_SAVEALL: the whole garbage through
    gc.garbage); the sentinel looks at the garbage alone and arms nothing."""
    keep = T(8)  # a live tensor: no report
    track(tensorgc.observe_cycles(lambda r: pytest.fail("no report expected"), device=DEVICE))
    Pair = new_class("Pair")
    gc.collect()  # what setting up left (3.10: the observer's first call)
    before, scan = _C._sentinel(), _C._young_scan()
    _pairs(1000, Pair)
    assert gc.collect() == 2000 * PER_INSTANCE
    after = _C._sentinel()
    assert after["planted"] == before["planted"] + 1 and after["taken"] == before["taken"]
    assert _C._young_scan()["armed"] == scan["armed"] and gc.garbage == []
    assert keep.sum().item() == 0


def test_only_the_tensors_part_of_the_garbage_outlives_the_collection(track):
    """10,000 pairs of garbage and one cycle holding a tensor: the collector frees the pairs
    itself, the report sees the one cycle."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Pair, Holder = new_class("Pair"), new_class("Holder")
    _pairs(5000, Pair)
    h = Holder()
    h.me, h.t = h, T(32)
    ptr = h.t.data_ptr()
    _pairs(5000, Pair)
    del h
    # the pairs; the holder and its tensor went to the report
    assert gc.collect(0) == 20000 * PER_INSTANCE
    assert len(reports) == 1 and reports[0].objects == 2 and reports[0].nbytes == 128
    assert live_tensors_with_ptr(ptr) == []
    assert instances(Pair) == [] and instances(Holder) == []


def test_a_callback_after_ours_changes_nothing(track):
    """The pre-scan armed every collection once another gc callback followed ours (its Python
    code could allocate after the walk); the pair sits at the front of the list, so what later
    callbacks allocate is still behind it."""
    reports, made = [], []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Holder = new_class("Holder")

    def later(phase, info):
        if phase == "start" and not made:  # a cycle holding a tensor, made after our callback
            h = Holder()
            h.me, h.t = h, T(4)
            made.append(1)
    gc.callbacks.append(later)
    try:
        scan = _C._young_scan()
        gc.collect(0)
        assert len(reports) == 1 and reports[0].nbytes == 16
        assert _C._young_scan()["armed"] == scan["armed"]
    finally:
        gc.callbacks.remove(later)
    assert instances(Holder) == []


def test_the_users_debug_flags_arm_the_collection(track):
    """With the user's DEBUG_SAVEALL the collector must keep all the garbage in gc.garbage: the
    sentinel arms the collection from inside it, the report still comes, and the user's garbage
    and flags are theirs."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Holder = _drop_a_tensor_cycle()
    before = _C._sentinel()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect(0)
    finally:
        gc.set_debug(0)
    assert _C._sentinel()["armed"] == before["armed"] + 1
    assert len(reports) == 1
    kept = [o for o in gc.garbage if type(o) is Holder]
    assert len(kept) == 1 and kept[0].t.numel() == 4
    gc.garbage.clear()
    del kept
    gc.collect()
    assert instances(Holder) == []


@pytest.mark.parametrize("how", ["freeze", "grab"])
def test_a_later_callback_that_freezes_the_heap_or_grabs_the_pair(on_gc_callbacks, track, how):
    """A "start" callback after ours that freezes every object (gc.freeze) or takes the pair
    (gc.get_objects): the pair outlives the collection, is counted as lost and broken up at
    "stop"; nothing crashes, and the next collection plants a new one."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    grabbed = []

    def later(phase, info):
        if phase != "start":
            return
        if how == "freeze":
            gc.freeze()
        else:
            grabbed.extend(o for o in gc.get_objects() if type(o).__name__ == "_sentinel")
    gc.callbacks.append(later)
    try:
        before = _C._sentinel()
        gc.collect(0)
    finally:
        gc.callbacks.remove(later)
        if how == "freeze":
            gc.unfreeze()
    after = _C._sentinel()
    assert after["lost"] == before["lost"] + 1
    if how == "grab":
        assert len(grabbed) == 2 and all(gc.get_referents(o) == [] for o in grabbed)
        with pytest.raises(TypeError):
            type(grabbed[0])()
        grabbed.clear()
    Holder = _drop_a_tensor_cycle()
    gc.collect(0)
    assert len(reports) == 1 and _C._sentinel()["planted"] == after["planted"] + 1


@pytest.mark.parametrize("where", ["finalizer", "later callback"])
def test_the_last_observer_leaving_during_the_collection_still_frees_the_island(gc_state, where):
    """The last observer removed from inside the collection (another garbage object's __del__, or
    a "start" callback after ours), after the pair was planted: the hook stays for this
    collection's "stop", which runs the island's deferred finalizers and frees it, and then comes
    off gc.callbacks. Taking it off at once left the island (its tensors) alive, its finalizers
    never run, and the pair planted for good."""
    Holder, Fin, Remover = new_class("Holder"), new_class("Fin"), new_class("Remover")
    ran = []
    Fin.__del__ = lambda self: ran.append(1)
    handle = tensorgc.observe_cycles(lambda r: None, device=DEVICE)

    def later(phase, info):
        if phase == "start":
            handle.remove()
    if where == "finalizer":
        Remover.__del__ = lambda self: handle.remove()
        r = Remover()
        r.me = r
        del r
    else:
        gc.callbacks.append(later)
    try:
        h = Holder()
        h.me, h.t, h.f = h, T(4), Fin()
        h.f.back = h
        del h
        before = _C._sentinel()
        gc.collect(0)
        hooked = [cb for cb in gc.callbacks if getattr(cb, "__name__", "") == "_gc_hook"]
    finally:
        if later in gc.callbacks:
            gc.callbacks.remove(later)
        handle.remove()
    assert _C._sentinel()["taken"] == before["taken"] + 1 and hooked == []
    assert ran == [1] and instances(Holder) == [] and instances(Fin) == []
    gc.collect(0)
    assert ran == [1]


@pytest.mark.parametrize("flag", ["DEBUG_COLLECTABLE", "DEBUG_STATS"])
def test_debug_flags_that_print_the_collectors_objects_never_show_the_pair(track, capfd, flag):
    """DEBUG_COLLECTABLE prints every collectable object and DEBUG_STATS counts each generation's
    objects, before the pair could resurrect itself: with those on, no pair is planted (the
    pre-scan decides), and the report still comes."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Holder = _drop_a_tensor_cycle()
    before = _C._sentinel()
    capfd.readouterr()
    gc.set_debug(getattr(gc, flag))
    try:
        gc.collect(0)
    finally:
        gc.set_debug(0)
    err = capfd.readouterr().err
    assert "_sentinel" not in err and "gc: " in err
    assert _C._sentinel()["planted"] == before["planted"] and len(reports) == 1
