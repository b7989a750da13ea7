"""Cycles that finalizers break: a suspended generator, coroutine or async generator whose frame
holds the object that holds it (obj.gen = generator, the frame's `self` = obj, obj.t = tensor), or
a __del__ that drops a reference of the cycle. The collector finds the cycle, runs the finalizers
(gen.close() clears the frame) and the objects die by reference counting during finalization:
nothing reaches gc.garbage, DEBUG_SAVEALL or not, and the collector's counts leave them out.

tensorgc reports them when the "start" pre-scan proves them an island of young objects (CPython
3.10-3.13): it keeps them aside, reports them intact, then runs the finalizers itself and frees
what is left. What it cannot see (old garbage, a weakly referenced member, an interpreter without
the pre-scan) is shown here exactly as the user sees it: no report, the tensor alive until the
collector ran."""
import gc
import inspect
import sys
import weakref

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc import _tensorgc_testing
from _util import DEVICE, T, instances, live_tensors_with_ptr

_C = _tensorgc_testing  # the detector's switches and counters
AVAILABLE = _C._young_scan()["available"]  # the pre-scan and islands: CPython 3.10-3.13

EVENTS = []  # "report" from the observer, "finalized" from the finalizers, in the order they ran


@pytest.fixture(autouse=True)
def _switches():
    """Pre-scan and islands on where the interpreter has them; asyncgen hooks off; restored."""
    scan, island = _C._young_scan()["enabled"], _C._young_island()["enabled"]
    hooks = sys.get_asyncgen_hooks()
    sys.set_asyncgen_hooks(None, None)
    if AVAILABLE:
        _C._young_scan(True)
        _C._young_island(True)
    EVENTS.clear()
    yield
    EVENTS.clear()
    sys.set_asyncgen_hooks(*hooks)
    if AVAILABLE:
        _C._young_island(island)
        _C._young_scan(scan)


# Module-level classes: frozen with the startup objects (conftest), so old, as real code's are. A
# class made in the test would be young, and its methods' functions with it: the generator's frame
# references its function, and a young function referenced from its class is no island.
class Suspend:
    """An awaitable that suspends the coroutine awaiting it."""

    def __await__(self):
        yield


class GenHolder:
    def __init__(self, t):
        self.t = t
        self.gen = self.run()
        next(self.gen)

    def run(self):
        try:
            while True:
                yield self
        finally:
            EVENTS.append("finalized")


class CoroHolder:
    def __init__(self, t):
        self.t = t
        self.coro = self.run()
        self.coro.send(None)

    async def run(self):
        try:
            while True:
                await Suspend()
        finally:
            EVENTS.append("finalized")


class AgenHolder:
    def __init__(self, t):
        self.t = t
        self.agen = self.run()
        with pytest.raises(StopIteration):
            self.agen.asend(None).send(None)  # runs to the first yield

    async def run(self):
        try:
            while True:
                yield self
        finally:
            EVENTS.append("finalized")


class Breaker:
    """A __del__ that drops its reference to the peer, which references it back."""

    def __init__(self, t):
        self.t = t
        self.peer = Peer(self)

    def __del__(self):
        EVENTS.append("finalized")
        self.peer = None


class Peer:
    def __init__(self, owner):
        self.owner = owner


class Phoenix:
    """A __del__ that resurrects its object (and so the cycle and the tensor)."""
    saved = []

    def __init__(self, t):
        self.t = t
        self.me = self

    def __del__(self):
        EVENTS.append("finalized")
        Phoenix.saved.append(self)


class RaisingHolder:
    def __init__(self, t):
        self.t = t
        self.gen = self.run()
        next(self.gen)

    def run(self):
        try:
            while True:
                yield self
        finally:
            EVENTS.append("finalized")
            raise ValueError("raised while closing")


def _line(func, text):
    """The line of func's source that contains text."""
    lines, first = inspect.getsourcelines(func)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _where(func, text):
    return "%s at %s:%d" % (func.__qualname__, inspect.getsourcefile(func), _line(func, text))


# name -> (class, its attribute holding the generator or peer, the drawn edges of the cycle, the
#          fix hint's opening, or None for the generic hint)
SHAPES = {
    "generator": (GenHolder, [("GenHolder", ".gen", "generator"),
                              ("generator", "local self", "GenHolder")],
                  "the generator " + _where(GenHolder.run, "yield self")
                  + ", stored at GenHolder.gen, holds 'self' in its suspended frame: call its "
                  "close() when done"),
    "coroutine": (CoroHolder, [("CoroHolder", ".coro", "coroutine"),
                               ("coroutine", "local self", "CoroHolder")],
                  "the coroutine " + _where(CoroHolder.run, "await Suspend()")
                  + ", stored at CoroHolder.coro, holds 'self' in its suspended frame: call its "
                  "close() when done"),
    "async generator": (AgenHolder, [("AgenHolder", ".agen", "async_generator"),
                                     ("async_generator", "local self", "AgenHolder")],
                        "the async generator " + _where(AgenHolder.run, "yield self")
                        + ", stored at AgenHolder.agen, holds 'self' in its suspended frame: "
                        "await its aclose() when done"),
    "__del__ clearing an attribute": (Breaker, [("Breaker", ".peer", "Peer"),
                                                ("Peer", ".owner", "Breaker")], None),
}
COLLECTIONS = {"young": 0, "full": 2}


def _observe():
    reports = []

    def observer(report):
        EVENTS.append("report")
        reports.append(report)
    return reports, tensorgc.observe_cycles(observer, device=DEVICE)


@pytest.mark.parametrize("kind", list(COLLECTIONS))
@pytest.mark.parametrize("name", list(SHAPES))
def test_cycle_a_finalizer_breaks_is_reported_before_the_finalizer_runs(gc_state, name, kind,
                                                                       detector_path):
    cls, edges, hint = SHAPES[name]
    reports, handle = _observe()
    try:
        gc.collect()
        island = _C._young_island()
        sentinel = _C._sentinel()
        t = T(64)
        ptr, nbytes = t.data_ptr(), t.untyped_storage().nbytes()
        cls(t)
        del t
        # no weakref.ref(t): a weakly referenced member is no island (see the blind spots below)
        assert len(live_tensors_with_ptr(ptr)) == 1  # only the cycle keeps it alive
        assert gc.collect(COLLECTIONS[kind]) == 0  # finalizers freed it: the collector counts 0
        after = _C._young_island()
        assert live_tensors_with_ptr(ptr) == [] and instances(cls) == []
        assert gc.garbage == []
        if not AVAILABLE:
            assert reports == [] and EVENTS == ["finalized"]
            return
        # reported intact, then finalized once, then freed
        assert EVENTS == ["report", "finalized"]
        assert len(reports) == 1
        r = reports[0]
        assert r.generation == COLLECTIONS[kind]
        assert [x["nbytes"] for x in r.tensors] == [nbytes] and r.nbytes == nbytes
        for e in edges + [(cls.__name__, ".t", "Tensor")]:
            assert e in r.edges, (e, r.edges)
        if hint is not None:
            assert r.hints[0].startswith(hint), r.hints[0]
        assert after["finalized"] == island["finalized"] + 1
        if detector_path == "sentinel":
            # found in the collection, before any finalizer ran, and taken out of it
            assert _C._sentinel()["taken"] == sentinel["taken"] + 1
            assert (after["early"], after["used"]) == (island["early"], island["used"])
        else:
            assert after["early"] == island["early"] + (kind == "full")
            assert after["used"] == island["used"] + (kind == "young")
    finally:
        handle()


def test_old_tensor_only_the_cycle_holds_is_reported(gc_state):
    """A young cycle holding the last reference to an old tensor: the held-tensor pass adds it."""
    reports, handle = _observe()
    try:
        t = T(32)
        ptr = t.data_ptr()
        gc.collect()  # the tensor is old now
        GenHolder(t)
        del t
        gc.collect(0)
        assert live_tensors_with_ptr(ptr) == [] and instances(GenHolder) == []
        assert len(reports) == int(AVAILABLE)
        if AVAILABLE:
            assert [x["data_ptr"] for x in reports[0].tensors] == [ptr]
            assert EVENTS == ["report", "finalized"]
    finally:
        handle()


def test_generator_whose_frame_object_exists(gc_state):
    """gi_frame read before: the frame object (and its locals dict) is young garbage too, drawn
    folded or not, and freed with the rest."""
    reports, handle = _observe()
    try:
        gc.collect()
        t = T(8)
        ptr = t.data_ptr()
        h = GenHolder(t)
        assert h.gen.gi_frame.f_locals["self"] is h  # the frame object and its dict now exist
        del h, t
        gc.collect(0)
        assert live_tensors_with_ptr(ptr) == [] and instances(GenHolder) == []
        assert len(reports) == int(AVAILABLE)
        assert EVENTS == ["report"][:int(AVAILABLE)] + ["finalized"]
    finally:
        handle()


def test_resurrecting_finalizer_leaves_the_cycle_intact(gc_state):
    reports, handle = _observe()
    try:
        gc.collect()
        Phoenix(T(16))
        gc.collect(0)
        assert EVENTS == ["report"][:int(AVAILABLE)] + ["finalized"]
        assert len(Phoenix.saved) == 1
        p = Phoenix.saved[0]
        assert p.me is p and p.t.numel() == 16  # never cleared: reachable again
        del p
        Phoenix.saved.clear()  # garbage again; its finalizer already ran, so it will not again
        gc.collect()  # survivors of a young collection are older: the collector moved it
        assert EVENTS.count("finalized") == 1
        assert instances(Phoenix) == []
        assert len(reports) == 1 + int(AVAILABLE)
    finally:
        Phoenix.saved.clear()
        handle()


def test_finalizer_that_raises_is_unraisable_and_everything_is_freed(gc_state, monkeypatch):
    seen = []
    # the type only: the exception's traceback holds the generator's frame, and so the cycle
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(type(u.exc_value)))
    reports, handle = _observe()
    try:
        gc.collect()
        t = T(4)
        ptr = t.data_ptr()
        RaisingHolder(t)
        del t
        gc.collect(0)
        assert seen == [ValueError]  # as the collector reports it
        assert live_tensors_with_ptr(ptr) == [] and instances(RaisingHolder) == []
        assert len(reports) == int(AVAILABLE)
    finally:
        handle()


def test_async_generator_finalizer_hook_resurrects(gc_state):
    """asyncio's way: the finalizer hook keeps the async generator to aclose() it later. The
    cycle survives the collection intact, reported or not, and aclose() then breaks it."""
    pending = []
    sys.set_asyncgen_hooks(firstiter=lambda agen: None, finalizer=pending.append)
    reports, handle = _observe()
    try:
        gc.collect()
        t = T(4)
        ptr = t.data_ptr()
        AgenHolder(t)
        del t
        gc.collect(0)
        assert len(reports) == int(AVAILABLE)
        assert len(pending) == 1 and EVENTS == ["report"][:int(AVAILABLE)]
        assert len(live_tensors_with_ptr(ptr)) == 1  # the hook keeps it, as the collector would
        with pytest.raises(StopIteration):
            pending.pop().aclose().send(None)
        assert EVENTS[-1] == "finalized"
        gc.collect(0)
        assert live_tensors_with_ptr(ptr) == [] and instances(AgenHolder) == []
    finally:
        pending.clear()
        handle()


# --------------------------------------------------------------------------------------------
# What the pre-scan cannot see (the sentinel can, unless the user keeps garbage with
# DEBUG_SAVEALL): no report, and the tensor alive until the collector ran
# --------------------------------------------------------------------------------------------

def _old_cycle(make):
    """The cycle survives a full collection while referenced (so it is old), then is dropped."""
    keep = make()
    gc.collect()
    return keep


def _weakly_referenced(make):
    return make()  # young; the test's weakref.ref to the tensor is enough to refuse the island


BLIND = {
    # old garbage: only a full collection finds it, and the pre-scan walks the young lists only
    "old garbage, full collection": (_old_cycle, 2),
    # the collector clears weak references before finalizing: the island path does not do that
    "weakly referenced tensor, young collection": (_weakly_referenced, 0),
    "weakly referenced tensor, full collection": (_weakly_referenced, 2),
}
# The sentinel looks at the garbage the collector found, after it cleared the weak references and
# before any finalizer ran, whatever the generation: it reports all of these, unless the user's
# DEBUG_SAVEALL asks the collector to keep the garbage (it must then see all of it, and the
# finalizer that breaks the cycle runs before anything is kept).


@pytest.mark.parametrize("saveall", [False, True], ids=["", "DEBUG_SAVEALL"])
@pytest.mark.parametrize("case", list(BLIND))
@pytest.mark.parametrize("name", list(SHAPES))
def test_blind_spot_no_report_and_the_tensor_lived_until_the_collection(gc_state, name, case,
                                                                        saveall, detector_path):
    cls = SHAPES[name][0]
    seen = AVAILABLE and detector_path == "sentinel" and not saveall
    prepare, generation = BLIND[case]
    reports, handle = _observe()
    try:
        gc.collect()
        holder = prepare(lambda: cls(T(16)))
        w = weakref.ref(holder.t)
        del holder
        assert w() is not None  # dropped, yet alive: the cycle keeps it
        if saveall:
            gc.set_debug(gc.DEBUG_SAVEALL)  # the user's: it would keep any garbage that remains
        assert gc.collect(generation) == 0
        gc.set_debug(0)
        assert w() is None  # freed by the collection (after the report), by the finalizer
        if seen:  # reported intact, then finalized once, then freed
            assert len(reports) == 1 and EVENTS == ["report", "finalized"]
            assert reports[0].generation == generation and len(reports[0].tensors) == 1
        else:  # nothing to report on: the finalizer broke the cycle first
            assert reports == [] and EVENTS == ["finalized"]
        assert gc.garbage == [] and instances(cls) == []
    finally:
        gc.set_debug(0)
        handle()


def test_torch_detector_does_not_see_it_either(gc_state):
    """torch.utils.viz._cycles.observe_garbage: DEBUG_SAVEALL, the garbage handed over in "stop":
    the broken cycle never reaches gc.garbage, so its observer never sees the tensor."""
    from torch.utils.viz._cycles import observe_garbage
    profile = sys.getprofile()
    seen, calls = [], []

    def observer(garbage):
        calls.append(len(garbage))
        seen.extend(type(o).__name__ for o in garbage)
    remove = observe_garbage(observer)
    try:
        gc.collect()
        len([])
        seen.clear()
        calls.clear()
        holder = GenHolder(T(16))
        w = weakref.ref(holder.t)
        del holder
        assert w() is not None
        gc.collect(0)
        len([])  # a call: torch's profile trampoline reports and re-collects at the next one
        assert w() is None
        assert calls  # it ran, and was handed what reached gc.garbage
        assert "GenHolder" not in seen and "Tensor" not in seen and "generator" not in seen
    finally:
        remove()
        gc.set_debug(0)
        sys.setprofile(profile)


def test_the_user_can_close_the_generator_instead(gc_state):
    """What the hint says: close() releases the frame's locals, and plain reference counting
    frees everything when the owner goes; no collector, no report needed."""
    reports, handle = _observe()
    try:
        holder = GenHolder(T(16))
        w = weakref.ref(holder.t)
        holder.gen.close()
        assert EVENTS == ["finalized"]
        del holder
        assert w() is None  # freed at once, without a collection
        gc.collect()
        assert reports == []
    finally:
        handle()


def test_a_weakref_finalize_tells_whether_the_tensor_died_in_a_collection(gc_state):
    """A flag set by a gc callback between "start" and "stop", read by a weakref.finalize on the
    tensor: it says the tensor was freed by the collector (so a cycle held it), report or not."""
    collecting = [False]
    died_collecting = []

    def flag(phase, info):
        collecting[0] = phase == "start"
    gc.callbacks.append(flag)
    try:
        holder = GenHolder(T(16))
        weakref.finalize(holder.t, lambda: died_collecting.append(collecting[0]))
        del holder
        assert died_collecting == []
        gc.collect()
        assert died_collecting == [True] and EVENTS == ["finalized"]
        holder = GenHolder(T(16))
        weakref.finalize(holder.t, lambda: died_collecting.append(collecting[0]))
        holder.gen.close()
        del holder
        assert died_collecting == [True, False]  # closed: freed at once, by reference counting
    finally:
        gc.callbacks.remove(flag)


def test_referrers_find_the_generator(gc_state):
    """How to find such a generator by hand: the tensor's owner is referenced by a generator
    (gc.get_referrers), whose gi_frame says where it is suspended. On 3.10 the referrer is the
    generator's frame, an object of its own, and the generator is the frame's referrer."""
    holder = GenHolder(T(4))
    refs = gc.get_referrers(holder)
    refs += [g for f in refs if inspect.isframe(f)
             for g in gc.get_referrers(f) if inspect.isgenerator(g)]
    gens = [r for r in refs if inspect.isgenerator(r)]
    assert gens == [holder.gen]
    assert gens[0].gi_frame.f_lineno == _line(GenHolder.run, "yield self")
    assert gens[0].gi_frame.f_locals["self"] is holder
    holder.gen.close()
    del gens, refs, holder
    assert instances(GenHolder) == []
