"""Islands (cycles/young.c, tgc_young_island): when a young collection could hold tensors, "start"
tries to prove that the tensors and the young objects referencing them lie in garbage that nothing
else references. Then the collector runs alone (no DEBUG_SAVEALL, no gc.garbage round trip) and
"stop" reports and frees the island. Every shape must be reported exactly as the armed path
reports it; shapes the proof cannot cover must fall back to the armed path."""
import gc
import random
import weakref

import pytest

import tensorgc
from tensorgc import _tensorgc_testing
from _util import DEVICE, T, instances, live_tensors_with_ptr, new_class

_C = _tensorgc_testing  # the detector's switches and counters

pytestmark = [pytest.mark.skipif(not _C._young_scan()["available"],
                                 reason="islands need the young-generation pre-scan"),
              pytest.mark.usefixtures("prescan_path")]


@pytest.fixture(autouse=True)
def _switches():
    """Pre-scan and islands on, the cross-check of the two proofs off; all restored after, and
    the old objects the shapes take refilled (a full collection in each run makes them old)."""
    scan, island = _C._young_scan()["enabled"], _C._young_island()["enabled"]
    check = _C._island_crosscheck()["enabled"]
    _C._young_scan(True)
    _C._young_island(True)
    _C._island_crosscheck(False)
    if len(_OLD_POOL) < 512:
        _OLD_POOL.extend(Config() for _ in range(1024 - len(_OLD_POOL)))
    yield
    _C._island_crosscheck(check)
    _C._young_island(island)
    _C._young_scan(scan)
    _KEPT_CLASSES.clear()


# Module-level classes: a class made per cycle is young garbage itself, which islands leave to
# the armed path (type objects carry weak references from their bases).
class Holder:
    pass


class Slotted:
    __slots__ = ("me", "t")


class Pair:
    __slots__ = ("other",)


class Finalized:
    def __del__(self):
        Finalized.ran += 1


Finalized.ran = 0


def _self_cycle(t):
    h = Holder()
    h.me, h.t = h, t


def _slotted(t):
    s = Slotted()
    s.me, s.t = s, t


def _lambda(t):
    h = Holder()
    h.t = t
    h.cb = lambda: h  # function -> closure tuple -> cell -> instance


def _dict_and_list(t):
    d = {"t": t, "<script>\"'{}": []}
    d["<script>\"'{}"].append(d)


def _pointed_at(t):
    h = Holder()  # the cycle holding the tensor...
    h.me, h.t = h, t
    lst = [h]  # ...and garbage pointing at it that it does not reach
    lst.append(lst)


def _finalizer(t):
    f = Finalized()
    f.me, f.t = f, t


def _weakly_referenced(t):
    h = Holder()
    h.me, h.t = h, t
    _weakly_referenced.refs.append(weakref.ref(h))


_weakly_referenced.refs = []


def _class_per_cycle(t):
    Local = new_class("Local")
    o = Local()
    o.me, o.t = o, t


class RingNode:
    """The rings' instances: a class of their own, with only their two attributes, so that its
    instances never get dicts of their own (other shapes' attributes grow Holder's shared keys,
    past which an instance brings a dict, one more member each: a ring just under the cap would
    no longer be under it)."""


def _ring(t, n):
    first = prev = RingNode()
    first.t = t
    for _ in range(n):
        nxt = RingNode()
        prev.next = nxt
        prev = nxt
    prev.next = first


def _pairs(n):
    for _ in range(n):
        a, b = Pair(), Pair()
        a.other, b.other = b, a


class Config:
    pass


_OLD_LIVE = Config()  # made at import: old, and alive through the module
_OLD_POOL = [Config() for _ in range(1024)]  # old objects (see _switches), one per cycle


def _old_live_in_reach(t):
    h = Holder()
    h.me, h.t, h.cfg = h, t, _OLD_LIVE


def _old_garbage_in_reach(t):
    h = Holder()
    h.me, h.t = h, t
    h.old = _OLD_POOL.pop()  # the cycle holds its last reference: old garbage, freed with it


_KEPT_CLASSES = []


def _young_class_elsewhere(t):
    _KEPT_CLASSES.append(new_class("Elsewhere"))  # a young class, alive, outside the leak
    _self_cycle(t)


def _young_ints(t):
    h = Holder()
    h.me, h.t = h, t
    h.data = [0] * 5000  # one member, but more references than the quick proof looks at


def _two_leaks(t):
    # after _collect_young's 200 pairs: a leak, 90 pairs, a second leak, 5 pairs
    _self_cycle(t)
    _pairs(90)
    _self_cycle(T(128))
    _pairs(5)


def _long_ring(t):
    _ring(t, 2000)  # more members than an island may have


def _ring_300(t):
    _ring(t, 300)  # grows the island's tables from their first size


def _members_per_holder():
    """An island's members per ring node with an attribute: 2 where its attributes are a dict of
    its own, which its tp_traverse reports (3.10), 1 where it holds them itself (3.11+)."""
    h = RingNode()
    h.x = None
    return 1 + any(type(r) is dict for r in gc.get_referents(h))


_PER_HOLDER = _members_per_holder()


def _ring_almost_max(t):
    # with the tensor and the first holder: 1,022 members (1,021 on 3.10), just under the cap
    _ring(t, 1021 // _PER_HOLDER - 1)


# name -> (make(tensor), whether an island can carry it)
SHAPES = {
    "self cycle": (_self_cycle, True),
    "slots": (_slotted, True),
    "lambda capturing self": (_lambda, True),
    "dict and list, hostile keys": (_dict_and_list, True),
    "garbage pointing in": (_pointed_at, False),
    "__del__ in the cycle": (_finalizer, True),  # the hook runs it after the report
    "weak reference to a member": (_weakly_referenced, False),
    "class made per cycle": (_class_per_cycle, False),
    "ring of 300": (_ring_300, True),
    "ring just under the cap": (_ring_almost_max, True),
    "ring longer than an island": (_long_ring, False),
    "two leaks, the later one met first": (_two_leaks, True),
    "old live object in reach": (_old_live_in_reach, True),
    "old garbage in reach": (_old_garbage_in_reach, True),
    "young class elsewhere": (_young_class_elsewhere, True),
    "young list of 5,000 ints": (_young_ints, True),
}

# Shapes whose proof needs the young lists marked (island__marked), with a young tensor: larger
# sets than the quick proof takes (ISLAND_QUICK_MAX, ISLAND_QUICK_VISITS), old objects in reach,
# young classes. The others are decided without marking, island or not. With an old tensor,
# every shape the proof reaches a verdict on through the closure needs marking: the tensor is an
# old member.
NEEDS_MARKING = {"lambda capturing self",  # a function reaches its module's (old) globals
                 "class made per cycle", "ring of 300", "ring just under the cap",
                 "ring longer than an island", "old live object in reach",
                 "old garbage in reach", "young class elsewhere", "young list of 5,000 ints"}
DECIDED_BY_A_SEED = {"garbage pointing in", "weak reference to a member"}


def _collect_young(make, island, old_tensor):
    """Young tensor-free garbage plus make(tensor), collected by gc.collect(0): what the report
    said, whether an island carried it, and whether everything was freed."""
    _C._young_island(island)
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        gc.collect()
        t = T(96)
        ptr = t.data_ptr()  # no weakref.ref(t): a weak reference to a young tensor is a fallback
        if old_tensor:
            gc.collect()  # the tensor is old: only the held-tensor pass finds it
        _pairs(200)
        make(t)
        del t
        used = _C._young_island()["used"]
        gc.collect(0)
        used = _C._young_island()["used"] - used
        assert len(reports) == 1
        r = reports[0]
        tensors = [{k: v for k, v in x.items() if k != "data_ptr"} for x in r.tensors]
        summary = (sorted(r.edges), tensors, r.garbage, r.nbytes, r.objects, r.generation,
                   r.text, r.dot)
        return summary, used, live_tensors_with_ptr(ptr) == [] and instances(Pair) == []
    finally:
        handle()


@pytest.mark.parametrize("old_tensor", [False, True], ids=["young tensor", "old tensor"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_island_reports_exactly_what_the_armed_path_reports(gc_state, name, old_tensor):
    make, carried = SHAPES[name]
    # a throw-away round first: the device's lazy set-up may leave garbage of its own in the
    # first collection, which report.garbage (the whole collection's count) would include
    _collect_young(make, False, old_tensor)
    armed, used, freed = _collect_young(make, False, old_tensor)
    assert used == 0 and freed
    fast, used, freed = _collect_young(make, True, old_tensor)
    assert used == int(carried), "island taken" if used else "island expected"
    assert fast == armed
    assert freed


@pytest.mark.parametrize("old_tensor", [False, True], ids=["young tensor", "old tensor"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_which_proof_decides(gc_state, name, old_tensor):
    """The quick proof (no marking) decides the common shapes; whatever it cannot vouch for goes
    to the marked proof, whose verdict (used or not) test_island_reports_exactly_... checks."""
    make, carried = SHAPES[name]
    _collect_young(make, False, old_tensor)  # the device's lazy set-up, as above
    before = _C._young_island()
    _collect_young(make, True, old_tensor)
    after = _C._young_island()
    marked = after["marked"] - before["marked"]
    used = after["used"] - before["used"]
    if name in DECIDED_BY_A_SEED:
        expected = 0  # a seed's own counts or weak reference: no island, whatever the marking
    else:
        expected = int(old_tensor or name in NEEDS_MARKING)
    assert (used, marked) == (int(carried), expected)


_KEPT = []  # what a random graph keeps alive from outside, until its run ends


class GraphNode:
    """The random graphs' instances: a class of their own, since the attributes they set grow its
    shared keys (past which its instances get dicts of their own, one more object each, which
    would change the shapes above)."""


def _random_graph(seed):
    """make(t) for one random young graph: instances, lists and dicts referencing each other,
    the tensor, more tensors, an old live object, old objects only they hold; sometimes one
    node kept alive from outside or weakly referenced. The same graph on every call."""
    def link(a, b, i):
        if isinstance(a, GraphNode):
            setattr(a, "r%d" % i, b)
        elif isinstance(a, list):
            a.append(b)
        else:
            a["k%d" % i] = b

    def make(t, split=None):
        rng = random.Random(seed)
        kinds = [rng.choice((GraphNode, list, dict)) for _ in range(rng.randint(1, 14))]
        nodes = [k() for k in kinds[:len(kinds) // 2]]
        if split is not None:
            split()  # with gc.collect(0): these nodes (and the tensor) move to generation 1
        nodes += [k() for k in kinds[len(kinds) // 2:]]
        for a in nodes:
            for i in range(rng.randint(0, 3)):
                r = rng.random()
                if r < 0.06:
                    b = _OLD_LIVE
                elif r < 0.12:
                    b = _OLD_POOL.pop()
                elif r < 0.18:
                    b = T(rng.randint(1, 8))
                else:
                    b = rng.choice(nodes + [t])
                link(a, b, i)
        link(rng.choice(nodes), t, 99)
        r = rng.random()
        if r < 0.15:
            _KEPT.append(rng.choice(nodes))
        elif r < 0.25:
            node = rng.choice([n for n in nodes if isinstance(n, GraphNode)] or [None])
            if node is not None:
                _KEPT.append(weakref.ref(node))
    return make


def _random_run(make, island, generation=0):
    """One young collection of make(tensor) after some pairs: every report, as comparable data.
    With generation 1, half the graph is in generation 1 when the collection starts."""
    _C._young_island(island)
    reports = []
    gc.collect()
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        gc.collect()
        t = T(96)
        _pairs(50)
        make(t, (lambda: gc.collect(0)) if generation else None)
        del t
        gc.collect(generation)
        return [(sorted(r.edges), [{k: v for k, v in x.items() if k != "data_ptr"}
                                   for x in r.tensors], r.garbage, r.nbytes, r.objects, r.text,
                 r.dot) for r in reports]
    finally:
        handle()
        _KEPT.clear()
        gc.collect()


@pytest.mark.parametrize("generation", [0, 1])
def test_island_matches_the_armed_path_on_random_graphs(gc_state, generation):
    """Whichever proof decides (quick, marked, or none), what is reported and freed must be what
    the armed path reports: a wrong island would free live objects or change the report. Every
    quick answer is also checked against the marked proof (members and order)."""
    outcomes = set()
    check = _C._island_crosscheck(True)
    for seed in range(60):
        make = _random_graph(seed)
        _random_run(make, False, generation)  # the device's lazy set-up
        armed = _random_run(make, False, generation)
        before = _C._young_island()
        fast = _random_run(make, True, generation)
        after = _C._young_island()
        assert fast == armed, "seed %d" % seed
        # (with generation 1, the collection that splits the graph counts too: a live tensor)
        outcomes.add(tuple(after[k] - before[k] for k in ("used", "marked", "fallback")))
    done = _C._island_crosscheck()
    assert done["checked"] > check["checked"]
    assert done["mismatched"] == check["mismatched"]
    # the graphs took every road: islands proven quickly and by marking, and armed collections
    assert {(1, 0), (1, 1)} <= {o[:2] for o in outcomes}, outcomes
    assert any(o[2] > 0 for o in outcomes), outcomes


def test_generation_1_island_lists_objects_in_the_collectors_order(gc_state):
    """A collection of generation 1 sees generation 1's objects first, then generation 0's: an
    island must list (and report) them in that order, as gc.garbage does."""
    def run(island):
        _C._young_island(island)
        reports = []
        gc.collect()
        handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
        try:
            older = Holder()
            older.t = T(7)
            gc.collect(0)  # older (and its tensor) move to generation 1
            younger = Holder()
            younger.t = T(16)
            younger.o, older.o = older, younger
            del older, younger
            used = _C._young_island()["used"]
            gc.collect(1)
            shapes = [x["shape"] for r in reports for x in r.tensors]
            return shapes, _C._young_island()["used"] - used
        finally:
            handle()
    run(False)  # the device's lazy set-up
    armed, used = run(False)
    assert used == 0 and len(armed) == 2
    fast, used = run(True)
    assert used == 1 and fast == armed


def test_old_container_of_untracked_items_in_reach(gc_state):
    """A leak holding an old list of many ints: the quick proof looks at a bounded number of
    references and hands over to the marked proof, which reports as the armed path does."""
    def make(t):
        h = Holder()
        h.me, h.t, h.big = h, t, _BIG_OLD
    _collect_young(make, False, False)
    armed, used, freed = _collect_young(make, False, False)
    before = _C._young_island()
    fast, used, freed = _collect_young(make, True, False)
    after = _C._young_island()
    assert fast == armed and freed
    assert (after["used"] - before["used"], after["marked"] - before["marked"]) == (1, 1)


_BIG_OLD = list(range(200_000))


def test_island_frees_everything_in_the_same_collection(gc_state):
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        gc.collect()
        refs = []
        for _ in range(3):
            s = Slotted()
            s.me, s.t = s, T(10)
            refs.append(s.t.data_ptr())
        for _ in range(100):
            a, b = Pair(), Pair()
            a.other, b.other = b, a
        del s, a, b
        used = _C._young_island()["used"]
        gc.collect(0)
        assert _C._young_island()["used"] == used + 1
        assert len(reports) == 1
        assert sorted(x["nbytes"] for x in reports[0].tensors) == [40, 40, 40]
        assert reports[0].garbage >= 3 * 2 + 200  # the whole collection's garbage
        assert all(live_tensors_with_ptr(p) == [] for p in refs)
        assert instances(Slotted) == [] and instances(Pair) == []
    finally:
        handle()


def test_live_young_tensor_falls_back_and_stays_alive(gc_state):
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        gc.collect()
        live = T(5)  # young, and ours: an island can never include it
        holder = Holder()
        holder.t = live
        _self_cycle(T(7))
        before = _C._young_island()
        gc.collect(0)
        after = _C._young_island()
        assert (after["used"], after["fallback"]) == (before["used"], before["fallback"] + 1)
        assert len(reports) == 1 and [x["nbytes"] for x in reports[0].tensors] == [28]
        assert holder.t is live and live.numel() == 5
    finally:
        handle()


def test_young_collection_of_only_live_tensors_reports_nothing(gc_state):
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        gc.collect()
        kept = [T(3) for _ in range(5)]
        gc.collect(0)
        assert reports == [] and all(k.numel() == 3 for k in kept)
    finally:
        handle()


def test_user_debug_flags_send_the_island_to_the_collector(gc_state):
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        _self_cycle(T(4))
        used = _C._young_island()["used"]
        gc.collect(0)
        assert _C._young_island()["used"] == used  # the user keeps their garbage
        assert gc.get_debug() == gc.DEBUG_SAVEALL
        assert len(reports) == 1
        kept = [o for o in gc.garbage if type(o) is Holder]
        assert len(kept) == 1 and kept[0].me is kept[0]  # intact, in gc.garbage, as asked
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        handle()


def test_island_leaves_gc_garbage_and_flags_alone(gc_state):
    handle = tensorgc.observe_cycles(lambda r: None, device=DEVICE)
    try:
        gc.collect()
        mine = object()
        gc.garbage.append(mine)
        _self_cycle(T(4))
        used = _C._young_island()["used"]
        gc.collect(0)
        assert _C._young_island()["used"] == used + 1
        assert gc.garbage == [mine] and gc.get_debug() == 0
    finally:
        gc.garbage.clear()
        handle()


class Grabber:
    """Tensor-free garbage whose finalizer, run by the collector while the island waits for
    "stop", reaches into the island through gc.get_objects() and keeps a member."""
    kept = []

    def __del__(self):
        Grabber.kept.extend(o for o in gc.get_objects() if type(o) is Slotted)


def test_island_member_grabbed_during_the_collection_stays_intact(gc_state):
    reports = []
    handle = tensorgc.observe_cycles(reports.append, device=DEVICE)
    try:
        gc.collect()
        g = Grabber()
        g.me = g
        del g
        _slotted(T(6))
        used = _C._young_island()["used"]
        gc.collect(0)
        assert _C._young_island()["used"] == used + 1
        assert len(Grabber.kept) == 1
        s = Grabber.kept[0]
        assert s.me is s and s.t.numel() == 6  # never cleared: it is reachable again
        assert len(reports) == 1
    finally:
        Grabber.kept.clear()
        handle()


def test_exception_in_callback_on_the_island_path_is_logged(gc_state, caplog,
                                                            observer_errors_logged):
    def boom(report):
        raise RuntimeError("callback failed")
    handle = tensorgc.observe_cycles(boom, device=DEVICE)
    try:
        gc.collect()
        s = Slotted()
        s.me, s.t = s, T(2)
        ptr = s.t.data_ptr()
        del s
        with caplog.at_level("ERROR", logger="tensorgc"):
            gc.collect(0)
        assert any("callback failed" in (r.exc_text or "") or "callback failed" in r.getMessage()
                   for r in caplog.records)
        assert live_tensors_with_ptr(ptr) == [] and instances(Slotted) == []
    finally:
        handle()


def test_collect_inside_the_callback_on_the_island_path(gc_state):
    seen = []

    def cb(report):
        seen.append(gc.collect())  # must neither recurse nor deadlock
    handle = tensorgc.observe_cycles(cb, device=DEVICE)
    try:
        gc.collect()
        _self_cycle(T(2))
        used = _C._young_island()["used"]
        gc.collect(0)
        assert _C._young_island()["used"] == used + 1 and len(seen) == 1
    finally:
        handle()


@pytest.mark.parametrize("name", ["_young_island", "_island_crosscheck"])
def test_switch(name):
    switch = getattr(_C, name)
    assert switch(False)["enabled"] is False
    assert switch(True)["enabled"] is True
    with pytest.raises(TypeError):
        switch(1, 2)



def test_island_takes_a_leak_before_the_one_the_pre_scan_met_first(gc_state):
    """The pre-scan walks the young list from both ends, so it meets the second leak (near the
    end) first: the island must still start early enough to take the first one too."""
    make = SHAPES["two leaks, the later one met first"][0]
    # the first tensor old, so that neither leak is near the front of the young list
    _collect_young(make, False, True)  # a throw-away round (the device's lazy set-up)
    armed, used, freed = _collect_young(make, False, True)
    assert used == 0 and freed
    fast, used, freed = _collect_young(make, True, True)
    assert used == 1, "island expected"
    assert freed
    assert fast == armed
    assert len(fast[1]) == 2, "both tensors reported"
