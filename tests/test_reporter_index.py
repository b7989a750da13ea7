"""The opt-in index of live tensors (reporter/index.c): reports with it on see exactly what the
full walk sees, through promotions, deaths, freezes and unfreezes; it holds no tensor alive and
leaves gc.callbacks as it found it."""
import gc
import weakref

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc import MemReporter, track_tensors
from _util import DEVICE

# Off where the collector is not one of the generational ones tensorgc reads (3.14+, the portable
# path): tests/test_portable.py checks that track_tensors() says False there.
_INDEX = tensorgc.features()["tensor_index"]
pytestmark = pytest.mark.skipif(not _INDEX.enabled, reason="the index is off: " + _INDEX.why)


@pytest.fixture
def tracking():
    before = list(gc.callbacks)
    assert track_tensors(True) is True
    yield
    track_tensors(False)
    assert gc.callbacks == before


def full_walk_ids():
    track_tensors(False)
    try:
        return {id(t) for t in tensorgc._tensorgc._live_tensors()}
    finally:
        track_tensors(True)


def indexed_ids():
    return {id(t) for t in tensorgc._tensorgc._live_tensors()}


def test_index_sees_what_the_full_walk_sees(tracking):
    old = torch.ones(3, device=DEVICE)
    gc.collect()  # promoted to the oldest generation
    young = torch.ones(4, device=DEVICE)
    gc.collect(0)  # to generation 1
    newest = torch.ones(5, device=DEVICE)  # still in generation 0
    ids = indexed_ids()
    assert {id(old), id(young), id(newest)} <= ids
    assert ids == full_walk_ids()


def test_tensors_promoted_by_automatic_collections_are_found(tracking):
    keep = []
    for i in range(20000):  # enough allocations for automatic gen-1 and gen-2 collections
        o = [i]
        if i % 2000 == 0:
            keep.append(torch.full((2,), float(i), device=DEVICE))
        del o
    gc.collect(1)
    ids = indexed_ids()
    assert all(id(t) in ids for t in keep)
    assert ids == full_walk_ids()


def test_dead_tensors_leave_the_index_and_nothing_is_kept_alive(tracking):
    t = torch.ones(6, device=DEVICE)
    gc.collect()
    ref = weakref.ref(t)
    assert id(t) in indexed_ids()
    del t
    assert ref() is None  # the index holds weak references only
    assert all(x.numel() != 6 or x.device.type != DEVICE for x in tensorgc._tensorgc._live_tensors()
               if x.shape == (6,))


def test_unfreeze_is_noticed(tracking):
    gc.collect()
    t = torch.ones(7, device=DEVICE)
    gc.freeze()  # t goes to the permanent generation: neither walk sees it now
    try:
        track_tensors(False)
        track_tensors(True)  # a fresh index built while t is frozen
    finally:
        gc.unfreeze()  # t is in the oldest generation again, behind the index's back
    assert id(t) in indexed_ids()
    del t


def test_reports_match_with_and_without_the_index():
    m = torch.nn.Linear(8, 4).to(DEVICE)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(torch.randn(2, 8, device=DEVICE)).sum().backward()
    opt.step()
    extra = torch.zeros(100, device=DEVICE)
    gc.collect()
    plain = MemReporter(m, optimizer=opt).collect(device=DEVICE)
    before = list(gc.callbacks)
    try:
        tracked = MemReporter(m, optimizer=opt, track=True).collect(device=DEVICE)
    finally:
        track_tensors(False)
    assert gc.callbacks == before
    key = lambda r: (r.name, r.kind, r.shape, r.storage_bytes)  # noqa: E731
    assert sorted(map(key, plain.rows)) == sorted(map(key, tracked.rows))
    del extra


def test_index_callback_survives_collections_inside_reports(tracking):
    t = torch.ones(9, device=DEVICE)
    rep = MemReporter(pre_collect=True).collect(device=DEVICE)  # gc.collect() with the hook on
    assert any(r.shape == (9,) for r in rep.rows)
    del t
