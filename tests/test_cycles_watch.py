"""The tensor watch (cycles/watch.c): once a cycle observer's first collection ran, torch's tensor
types carry a tp_is_gc that counts how often the collector follows a reference to a tensor; a
collection that followed none skips the sentinel's walk of its garbage. What must hold: every
tensor the walk would have found is still found (subclasses made before and after the watch,
classes the collector once found as garbage that were kept alive, older tensors held only by
young garbage), the slot answers as an empty one, and a tensor type whose slot is someone else's
turns the watch off instead of being overwritten."""
import gc
import sys

import pytest

torch = pytest.importorskip("torch")

import tensorgc  # noqa: E402
from tensorgc import _tensorgc_testing  # noqa: E402
from _util import DEVICE, T, new_class  # noqa: E402

_C = _tensorgc_testing
pytestmark = pytest.mark.skipif(not _C._sentinel()["enabled"],
                                reason="the sentinel needs the young-generation pre-scan")

TENSOR_TYPES = (torch._C.TensorBase, torch.Tensor, torch.nn.Parameter)


def _counts():
    """(pairs planted, at "start" or by the watch; walks the watch spared)."""
    s = _C._sentinel()
    return s["planted"] + _C._resident()["planted"], s["unwalked"]


@pytest.fixture(autouse=True, params=["resident", "callbacks"])
def mode(request):
    """Each test with the resident sentinel (the default: planted by the watch, inside the
    collections that meet a tensor) and with the hook on gc.callbacks (planted at every
    "start", the walk skipped when the watch counted nothing)."""
    was = _C._resident()["enabled"]
    _C._resident(request.param == "resident")
    yield request.param
    _C._resident(was)


def _pairs(n, cls):
    for _ in range(n):
        a, b = cls(), cls()
        a.other, b.other = b, a


def test_collections_that_meet_no_tensor_skip_the_walk(track, mode):
    """Tensor-free garbage: no young collection walks (resident: none is even planted, and the
    hook stays off gc.callbacks; on gc.callbacks: every one is planted and the walk skipped);
    live tensors held by old objects are not met by a young collection either."""
    keep = [T(4) for _ in range(10)]
    gc.collect()  # keep's list is old now
    callbacks = list(gc.callbacks)
    track(tensorgc.observe_cycles(lambda r: pytest.fail("no report expected"), device=DEVICE))
    gc.collect(0)  # resident: the first collection's "stop" takes the hook off gc.callbacks
    Pair = new_class("Pair")
    planted, unwalked = _counts()
    for _ in range(5):
        _pairs(200, Pair)
        gc.collect(0)
    p, u = _counts()
    if mode == "resident":
        assert (p, u) == (planted, unwalked) and gc.callbacks == callbacks
    else:
        assert p - planted == 5 and u - unwalked == 5
    assert all(_C._tensor_watched(tp) for tp in TENSOR_TYPES)
    assert keep[0].sum().item() == 0


def test_a_collection_that_meets_a_tensor_walks_and_reports(track):
    """A live tensor referenced by a young object is met, so the walk runs (and finds no
    garbage holding it); a tensor cycle in the same kind of collection is reported."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Pair, Holder = new_class("Pair"), new_class("Holder")
    gc.collect()
    live = [T(4)]  # young, references a tensor
    planted, unwalked = _counts()
    _pairs(100, Pair)
    gc.collect(0)
    assert _counts() == (planted + 1, unwalked) and reports == []
    h = Holder()
    h.me, h.t = h, T(8)
    del h
    gc.collect(0)
    assert len(reports) == 1 and reports[0].nbytes == 32
    assert live[0].sum().item() == 0


@pytest.mark.parametrize("made", ["before", "after"])
def test_subclasses_made_before_or_after_the_watch_are_met(track, made):
    """A tensor subclass alive when the watch went on gets the slot; one made later inherits it.
    Either way a cycle holding one (itself, or an older one only the cycle references) is
    reported."""
    Sub = type("Sub", (torch.Tensor,), {}) if made == "before" else None
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    gc.collect(0)  # the first plant puts the watch on
    if Sub is None:
        Sub = type("Sub", (torch.Tensor,), {})
    Grand = type("Grand", (Sub,), {})
    assert _C._tensor_watched(Sub) and _C._tensor_watched(Grand)
    older = T(16).as_subclass(Grand)
    gc.collect()  # older is old now
    Holder = new_class("Holder")
    h = Holder()
    h.me, h.t = h, T(2).as_subclass(Sub)
    k = Holder()
    k.me, k.t = k, older
    del h, k, older
    gc.collect(0)
    assert sum(r.nbytes for r in reports) == 8 + 64


@pytest.fixture
def fresh_watch(gc_state):
    """The watch as a process's first observer finds it: off, no verdict yet (and so again after
    the test, for the tests after it)."""
    _C._tensor_watch_reset()
    yield
    _C._tensor_watch_reset()


def _tensor_types():
    """Every tensor type alive, found the slow way."""
    return [o for o in gc.get_objects()
            if isinstance(o, type) and issubclass(o, torch._C.TensorBase)]


def test_the_watch_stays_after_the_last_observer(fresh_watch):
    """Once on, the slots stay (a class the collector dropped from __subclasses__ could not be
    found again to put them back on); every tensor type alive has it."""
    Sub = type("Sub", (torch.Tensor,), {})
    assert not _C._tensor_watched(Sub)
    handle = tensorgc.observe_cycles(lambda r: None, device=DEVICE)
    try:
        gc.collect(0)
    finally:
        handle.remove()
    Later = type("Later", (Sub,), {})
    assert all(_C._tensor_watched(tp) for tp in TENSOR_TYPES + (Sub, Later))
    assert [tp for tp in _tensor_types() if not _C._tensor_watched(tp)] == []


def _kept_class(name, how):
    """A tensor subclass the collector found as garbage (it and an instance in a cycle) that
    survived: resurrected by a finalizer, or kept in gc.garbage by DEBUG_SAVEALL. Either way
    the collector cleared the weak reference its base's __subclasses__ held."""
    kept = []

    class Keeper:
        def __del__(self):
            kept.append(self.cls)

    cls = type(name, (torch.Tensor,), {})
    if how == "finalizer":
        cls.keeper = Keeper()
        cls.keeper.cls = cls
    cls.me = cls
    del cls
    if how == "DEBUG_SAVEALL":
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        gc.set_debug(0)
        kept = [o for o in gc.garbage if isinstance(o, type) and o.__name__ == name]
        gc.garbage.clear()
    else:
        gc.collect()
    (cls,) = kept
    assert cls not in torch.Tensor.__subclasses__()
    return cls


@pytest.mark.parametrize("how", ["finalizer", "DEBUG_SAVEALL"])
def test_a_class_kept_alive_out_of_its_garbage_is_watched(fresh_watch, how):
    """Such a class, and one derived from it before the watch went on, are found by the pass over
    the collector's lists; a cycle holding an instance of either is reported."""
    Kept = _kept_class("Kept", how)
    Derived = type("Derived", (Kept,), {})
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        gc.collect(0)
        assert _C._tensor_watched(Kept) and _C._tensor_watched(Derived)
        Holder = new_class("Holder")
        for cls in (Kept, Derived):
            h = Holder()
            h.me, h.t = h, T(4).as_subclass(cls)
            del h
            gc.collect(0)
        assert [r.nbytes for r in reports] == [16, 16]
    finally:
        handle.remove()


def test_a_frozen_class_out_of_its_garbage_is_watched(fresh_watch):
    """The same class moved to the permanent generation by gc.freeze()."""
    Kept = _kept_class("Frozen", "finalizer")
    gc.freeze()
    try:
        handle = tensorgc.observe_cycles(lambda r: None, device=DEVICE)
        try:
            gc.collect(0)
            assert _C._tensor_watched(Kept)
        finally:
            handle.remove()
    finally:
        gc.unfreeze()


def test_a_tensor_type_with_a_slot_of_its_own_turns_the_watch_off(fresh_watch):
    """Another tool's tp_is_gc on one subclass: the watch changes no slot at all, every
    collection walks, and the cycle is still reported."""
    Foreign = type("Foreign", (torch.Tensor,), {})
    _C._foreign_is_gc(Foreign, True)
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        Pair, Holder = new_class("Pair"), new_class("Holder")
        planted, unwalked = _counts()
        _pairs(100, Pair)
        gc.collect(0)
        assert _counts() == (planted + 1, unwalked)
        assert not any(_C._tensor_watched(tp) for tp in TENSOR_TYPES + (Foreign,))
        h = Holder()
        h.me, h.t = h, T(4).as_subclass(Foreign)
        del h
        gc.collect(0)
        assert len(reports) == 1 and reports[0].nbytes == 16
    finally:
        handle.remove()
        _C._foreign_is_gc(Foreign, False)


def test_other_callers_of_is_gc_see_what_they_saw(track):
    """The slot answers as an empty one: gc.is_tracked, sys.getsizeof and a dict deciding to
    track itself behave the same with the watch on."""
    t = T(4)
    before = (gc.is_tracked(t), sys.getsizeof(t), gc.is_tracked({"k": t}))
    track(tensorgc.observe_cycles(lambda r: None, device=DEVICE))
    gc.collect(0)
    assert _C._tensor_watched(type(t))
    assert (gc.is_tracked(t), sys.getsizeof(t), gc.is_tracked({"k": t})) == before


def test_a_walk_stops_once_every_tensor_reference_is_found(track):
    """Two tensor cycles among tensor-free garbage: the walk goes on past the first (two references
    were counted) and stops after the second, before the rest; with a live young list also
    referencing a tensor (a reference the garbage does not explain) it walks to the end. Both
    ways, the one report has both cycles."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Pair, Holder = new_class("Pair"), new_class("Holder")
    gc.collect()
    for with_live in (False, True):
        live = [T(1)] if with_live else None  # young, referencing a tensor
        before = _C._sentinel()["cut"]
        h = Holder()
        h.me, h.t = h, T(4)
        _pairs(200, Pair)
        k = Holder()
        k.me, k.t = k, T(8)
        _pairs(200, Pair)
        del h, k
        gc.collect(0)
        assert [(r.nbytes, len(r.tensors)) for r in reports] == [(48, 2)]
        assert _C._sentinel()["cut"] - before == (0 if with_live else 1)
        reports.clear()
        del live
