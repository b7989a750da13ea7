"""Phase timers (tensorgc._tensorgc_testing._phase_times, cycles/cycles.h's TGC_PHASE_*): compiled
out of a normal build, where the function says so with None; a build with -DTGC_PHASE_TIMES (make
phases) counts each phase of the detector once per event, which bench/b1_inprocess.py turns into
B1's breakdown. The second test compiles such a copy of the extensions and checks its counts on one
collection of each kind."""
import gc
import glob
import importlib.util
import os
import sys
import types

import pytest

from tensorgc import _tensorgc_testing as _C
from _util import DEVICE, T, graphviz_dev, variant_build

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = {"scan", "island", "exact", "build", "callback", "free", "plant", "walk", "uproot"}


class Cycle:
    def __init__(self, tensor):
        self.tensor = tensor
        self.me = self


class Pair:
    __slots__ = ("other",)


def test_normal_build_has_no_timers():
    assert _C._phase_times() is None
    assert _C._phase_times(True) is None
    with pytest.raises(TypeError):
        _C._phase_times(True, False)


def _load(lib):
    """A second copy of the extensions under their own package name (the init functions are the
    files'): module state of its own, a gc hook of its own. The testing module binds to the
    _tensorgc of its own package, so that one is registered first."""
    pkg = "tgc_phase_times_copy"
    sys.modules[pkg] = types.ModuleType(pkg)
    sys.modules[pkg].__path__ = []
    mods = []
    for name in ("_tensorgc", "_tensorgc_testing"):
        (path,) = glob.glob(os.path.join(lib, name + ".*"))
        spec = importlib.util.spec_from_file_location(f"{pkg}.{name}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        mods.append(mod)
    return types.SimpleNamespace(main=mods[0], testing=mods[1])


@pytest.fixture(scope="module")
def timed():
    """The suite runs where the extension was just built from source, so the compiler is there.
    -O1: the counts do not depend on the optimizer, and the copy compiles in two thirds of the
    time; kept under build/ for the next run (_util.variant_build)."""
    if not graphviz_dev():
        pytest.skip("builds from source: needs Graphviz's development files")
    return _load(os.path.join(variant_build("phase-times", "-DTGC_PHASE_TIMES -O1"), "tensorgc"))


def _two_collections(timed, sentinel, resident=False):
    """With the sentinel on or off (and on: resident, or the hook on gc.callbacks): the phases of
    a young collection of garbage without a tensor, then of one with a tensor cycle, as
    {phase: (count, seconds)} each; and the reports' texts' lengths."""
    seen = []
    was = timed.testing._sentinel()["enabled"]
    was_resident = timed.testing._resident()["enabled"]
    timed.testing._sentinel(sentinel)
    timed.testing._resident(resident)
    remove = timed.main.observe_cycles(lambda r: seen.append(len(r.text)), device=DEVICE)
    try:
        if resident:
            gc.collect(0)  # the first collection's "stop" takes the hook off gc.callbacks
            assert timed.testing._resident()["resident"] == 1
        timed.testing._phase_times(True)
        for _ in range(5):
            Pair().other = Pair()
        gc.collect(0)
        plain = timed.testing._phase_times(True)
        Cycle(T(4))
        gc.collect(0)
        hit = timed.testing._phase_times()
    finally:
        remove()
        timed.testing._sentinel(was)
        timed.testing._resident(was_resident)
    return plain, hit, seen


def counts(phases):
    return {k: n for k, (n, _) in phases.items()}


NONE = dict.fromkeys(PHASES, 0)


def test_timed_build_counts_each_phase(gc_state, timed):
    assert set(timed.testing._phase_times()) == PHASES
    if not timed.testing._young_scan()["available"]:
        pytest.skip("the phases of a young collection need the pre-scan")
    # the pre-scan path's phases (where the sentinel runs, the collector finds the garbage)
    after_scan, after_island, seen = _two_collections(timed, False)
    assert counts(after_scan) == {**NONE, "scan": 1}  # reset, then one scan
    assert counts(after_island) == {**NONE, "island": 1, "exact": 1, "build": 1, "callback": 1,
                                    "free": 1}  # an island, reported and freed
    assert len(seen) == 1 and seen[0] > 0
    assert all(secs > 0 for n, secs in after_island.values() if n)


def test_timed_build_counts_the_sentinels_phases(gc_state, timed):
    if not timed.testing._young_scan()["available"]:
        pytest.skip("the sentinel needs the collector's lists")
    after_walk, after_hit, seen = _two_collections(timed, True)
    # no tensor: planted, walked, uprooted
    assert counts(after_walk) == {**NONE, "plant": 1, "walk": 1, "uproot": 1}
    # a tensor cycle: the walk takes it, "stop" reports and frees it
    assert counts(after_hit) == {**NONE, "plant": 1, "walk": 1, "exact": 1, "build": 1,
                                 "callback": 1, "free": 1}
    assert len(seen) == 1 and seen[0] > 0
    assert all(secs > 0 for n, secs in after_walk.values() if n)


def test_timed_build_counts_the_resident_sentinels_phases(gc_state, timed):
    if not timed.testing._young_scan()["available"]:
        pytest.skip("the sentinel needs the collector's lists")
    after_none, after_hit, seen = _two_collections(timed, True, resident=True)
    assert counts(after_none) == NONE  # no tensor met: nothing of ours ran
    # a tensor cycle: the watch plants the pair, its walk takes it, "stop" reports and frees it
    assert counts(after_hit) == {**NONE, "walk": 1, "exact": 1, "build": 1, "callback": 1,
                                 "free": 1}
    assert len(seen) == 1 and seen[0] > 0


def test_a_second_copy_shares_the_tensor_watch(gc_state, timed):
    """Two builds of the extension in one process (as bench/b1_inprocess.py's variants are): the
    first to put the tensor watch on publishes it, the other uses it instead of taking the first
    one's slots for another tool's. Both skip the walk where no tensor was met; a tensor cycle is
    still reported (by the copy whose sentinel the collector finalizes first)."""
    import tensorgc

    if not timed.testing._sentinel()["enabled"]:
        pytest.skip("the sentinel needs the collector's lists")
    import torch

    _C._tensor_watch_reset()
    ours, theirs = [], []
    handles = [timed.main.observe_cycles(theirs.append, device=DEVICE),
               tensorgc.observe_cycles(ours.append, device=DEVICE)]
    try:
        before = [m._sentinel()["unwalked"] for m in (_C, timed.testing)]
        for _ in range(5):
            Pair().other = Pair()
        gc.collect(0)
        after = [m._sentinel()["unwalked"] for m in (_C, timed.testing)]
        assert [a - b for a, b in zip(after, before)] == [1, 1]
        assert _C._tensor_watched(torch.Tensor) and timed.testing._tensor_watched(torch.Tensor)
        Cycle(T(4))
        gc.collect(0)
        assert len(ours) + len(theirs) == 1
    finally:
        for h in handles:
            h()
