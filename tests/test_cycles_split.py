"""The split path: in a collection whose garbage holds a tensor, the part that neither reaches a
tensor nor is reached from one is freed before the report is built (the collector's own check
still holds then); the report and the later resurrection check only see the tensors' part."""
import gc
import weakref

import pytest

import tensorgc
from _util import DEVICE, T, instances, new_class

# the split of the armed path's garbage (the sentinel hands over only the tensors' part)
pytestmark = pytest.mark.usefixtures("prescan_path")


def make_mixed(n_pairs=500):
    Pair = new_class("Pair")
    Holder = new_class("Holder")
    Referrer = new_class("Referrer")
    pair_refs = []
    for _ in range(n_pairs):
        a, b = Pair(), Pair()
        a.other, b.other = b, a
        pair_refs.append(weakref.ref(a))
    h = Holder()
    h.me = h
    h.t = T(64)
    r = Referrer()  # reaches the tensor cycle without being in it
    r.holder = h
    r.me = r
    return Pair, Holder, Referrer, pair_refs, weakref.ref(h), weakref.ref(r)


def test_unrelated_garbage_freed_and_report_intact(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Pair, Holder, Referrer, pair_refs, h_ref, r_ref = make_mixed()
    gc.collect()
    assert len(reports) == 1
    r = reports[0]
    assert r.garbage >= 1000 + 2  # the whole collection, not only the tensors' part
    assert ("Holder", ".t", "Tensor") in r.edges and ("Holder", ".me", "Holder") in r.edges
    assert r.tensors[0]["nbytes"] == 64 * 4
    assert all(ref() is None for ref in pair_refs)
    assert h_ref() is None and r_ref() is None
    assert instances(Pair) == [] and instances(Holder) == [] and instances(Referrer) == []


def test_garbage_observer_still_gets_every_object_intact(track):
    seen = []
    reports = []

    def observer(objs):
        pairs = [o for o in objs if type(o).__name__ == "Pair"]
        # intact: every pair still points at its partner when the observer runs
        seen.append((len(pairs), all(p.other.other is p for p in pairs)))

    track(tensorgc.observe_garbage(observer))
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    make_mixed(200)
    gc.collect()
    assert seen == [(400, True)]
    assert len(reports) == 1


def test_callback_keeping_a_tensor_keeps_its_holder_intact(track):
    kept = []

    def keep(report):
        # reach the garbage through gc introspection and keep the holder alive
        kept.extend(o for o in gc.get_objects() if type(o).__name__ == "Holder")

    track(tensorgc.observe_cycles(keep, device=DEVICE))
    make_mixed(300)
    gc.collect()
    try:
        assert len(kept) == 1
        holder = kept[0]
        assert holder.me is holder and holder.t.numel() == 64  # not cleared
    finally:
        kept.clear()


def test_young_cycle_holding_the_last_reference_to_an_old_tensor_is_reported(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Holder = new_class("Holder")
    t = T(1000)
    t_ref = weakref.ref(t)
    gc.collect()  # the tensor is old now; a young collection never examines it
    assert reports == []

    def make():
        h = Holder()
        h.me = h
        h.t = t
    make()
    del t
    gc.collect(0)
    assert len(reports) == 1
    assert reports[0].tensors[0]["nbytes"] == 4000 and reports[0].generation == 0
    assert ("Holder", ".t", "Tensor") in reports[0].edges
    assert t_ref() is None and instances(Holder) == []


def test_young_cycle_holding_an_old_tensor_that_lives_on_is_not_reported(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Holder = new_class("Holder")
    t = T(1000)
    gc.collect()

    def make():
        h = Holder()
        h.me = h
        h.t = t
    make()
    gc.collect(0)
    assert reports == []  # the tensor is still ours: the garbage does not keep it alive
    assert t.numel() == 1000 and instances(Holder) == []


def test_young_cycle_holding_many_old_tensors_takes_the_heap_sized_pass(track):
    # More distinct held tensors (100) than the allocation-free table holds (32): the retry must
    # still find every one, some held twice, and free them with the cycle.
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Holder = new_class("Holder")
    ts = [T(i + 1) for i in range(100)]
    refs = [weakref.ref(t) for t in ts]
    kept = T(7)  # referenced by the cycle but also by us: not held
    gc.collect()

    def make():
        h = Holder()
        h.me = h
        h.ts = list(ts)
        h.first = ts[0]
        h.kept = kept
    make()
    ts.clear()
    gc.collect(0)
    assert len(reports) == 1
    assert sorted(t["nbytes"] for t in reports[0].tensors) == [4 * (i + 1) for i in range(100)]
    assert all(r() is None for r in refs) and instances(Holder) == []
    assert kept.numel() == 7


# ------------------------------------------------------------------------------------------------
# The seeded split (hook__seeded_keep): it must keep exactly what the full reference graph keeps.
# Each shape is built twice, once per path, and the two reports and survivors must be identical.

def _shape_self_cycle(t):
    Holder = new_class("Holder")
    h = Holder()
    h.me, h.t = h, t


def _shape_pair(t):
    A, B = new_class("A"), new_class("B")
    a, b = A(), B()
    a.b, b.a, a.t = b, a, t


def _shape_lambda(t):
    Owner = new_class("Owner")
    o = Owner()
    o.t = t
    o.cb = lambda: o  # closure cell -> function -> instance


def _shape_referrer(t):
    Holder, Referrer = new_class("Holder"), new_class("Referrer")
    h = Holder()
    h.me, h.t = h, t
    r = Referrer()  # reaches the tensor cycle without being in it
    r.holder, r.me = h, r


def _shape_ring(t):
    Link = new_class("Link")
    first = prev = Link()
    first.t = t
    for _ in range(40):  # a long way back to the holder: more passes than the seeded split makes
        nxt = Link()
        prev.next = nxt
        prev = nxt
    prev.next = first


def _shape_class_attribute(t):
    Cls = new_class("Cls", t=t)  # the class itself is garbage (its __mro__ and __dict__ cycle)
    c = Cls()
    c.me = c


def _shape_many_seeds(t):
    Holder = new_class("Holder")
    for _ in range(40):  # more referrers of the tensor than the scan notes
        h = Holder()
        h.me, h.t = h, t


_REPRS = []  # what the holder's __repr__ saw of the object it reaches


def _holder_repr(self):
    _REPRS.append(getattr(self.tail, "label", "<cleared>"))
    return "Holder"


def _shape_reached_from_tensor_holder(t):
    Holder, Tail = new_class("Holder", __repr__=_holder_repr), new_class("Tail")
    h = Holder()
    h.me, h.t = h, t
    h.tail = Tail()  # reached from the kept part: intact while the report reads reprs
    h.tail.label = "intact"
    h.tail.back = h.tail


SHAPES = {
    "self cycle": (_shape_self_cycle, True),
    "pair": (_shape_pair, True),
    "lambda capturing self": (_shape_lambda, None),
    "referrer outside the cycle": (_shape_referrer, True),
    "long ring": (_shape_ring, False),
    "class attribute": (_shape_class_attribute, None),
    "many referrers": (_shape_many_seeds, False),
    "reached from the holder": (_shape_reached_from_tensor_holder, True),
}


def _run_shape(make, seeded, old_tensor):
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    from tensorgc import _tensorgc_testing as _C
    _C._seeded_split(seeded)
    island = _C._young_island()["enabled"]
    _C._young_island(False)  # the split is the armed path's: islands never reach it
    try:
        Pair = new_class("Pair")
        gc.collect()
        t = T(96)
        t_ref = weakref.ref(t)
        if old_tensor:
            gc.collect()  # the tensor is old: joined to the garbage by the held-tensor pass

        def unrelated():
            for _ in range(200):
                a, b = Pair(), Pair()
                a.other, b.other = b, a
        unrelated()
        make(t)
        del t
        _REPRS.clear()
        before = _C._seeded_split()
        gc.collect(0)
        after = _C._seeded_split()
        assert len(reports) == 1
        r = reports[0]
        summary = (sorted(r.edges), [x["nbytes"] for x in r.tensors], r.garbage, r.nbytes,
                   r.text.split("\n", 1)[0], sorted(set(_REPRS)))
        assert "<cleared>" not in _REPRS
        assert t_ref() is None and instances(Pair) == []
        return summary, after["used"] - before["used"], after["fallback"] - before["fallback"]
    finally:
        _C._seeded_split(True)
        _C._young_island(island)
        handle()


@pytest.mark.parametrize("old_tensor", [False, True], ids=["young tensor", "old tensor"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_seeded_split_keeps_what_the_full_split_keeps(gc_state, name, old_tensor):
    make, decides = SHAPES[name]
    full, used, _ = _run_shape(make, False, old_tensor)
    assert used == 0
    fast, used, fallback = _run_shape(make, True, old_tensor)
    assert fast == full
    if decides is True:
        assert (used, fallback) == (1, 0), "the seeded split should decide this shape itself"
    elif decides is False:
        assert (used, fallback) == (0, 1), "this shape must go to the full split"
    else:
        assert used + fallback == 1


def _survivors_while_reporting(seeded):
    """Instances of the garbage's Node (a cycle referencing a tensor that lives on elsewhere)
    still alive while the observer reads the report, and whether the seeded split decided."""
    from tensorgc import _tensorgc_testing as _C
    _C._seeded_split(seeded)
    island = _C._young_island()["enabled"]
    _C._young_island(False)  # the split is the armed path's: islands never reach it
    Node, Holder, Pair = new_class("Node"), new_class("Holder"), new_class("Pair")
    live = T(7)
    gc.collect()
    seen = []
    handle = tensorgc.observe_cycles(
        lambda r: seen.append((r.garbage, sorted(r.edges), len(instances(Node)))), device=DEVICE)
    try:
        def make():
            for _ in range(100):
                a, b = Pair(), Pair()
                a.other, b.other = b, a
            n = Node()
            n.me, n.t = n, live  # references a tensor, but not one of the garbage's
            h = Holder()
            h.me, h.t = h, T(5)
        make()
        before = _C._seeded_split()["used"]
        gc.collect(0)
        return seen, _C._seeded_split()["used"] - before
    finally:
        _C._seeded_split(True)
        _C._young_island(island)
        handle()


def test_seeded_split_drops_referrers_of_tensors_outside_the_garbage(gc_state):
    full, used = _survivors_while_reporting(False)
    assert used == 0 and len(full) == 1 and full[0][2] == 0  # the full split freed Node
    fast, used = _survivors_while_reporting(True)
    assert used == 1
    assert fast == full
