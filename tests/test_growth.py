"""checkpoint() and growth() on CPU tensors: they read the live tensors from the index of live
tensors (turned on by the checkpoint, off again when no checkpoint needs it) and compare storage
keys in C (reporter/storages.c), and give what a walk of the whole heap gives: the same storages,
bytes, owners, chains and freed count, through frees and re-allocations, views, threads, and
tensors made before the index existed; the pytest plugin still fails a leaking test.

Objects kept by a module global live in a fresh module registered in sys.modules (the `mod`
fixture), so holders read "tgc_growth_fixture.NAME". The heap walk's answer is computed with the
index off: MemReporter.collect() then walks every object the collector tracks."""
import collections
import copy
import gc
import os
import pickle
import subprocess
import sys
import threading

import pytest

from _util import fresh_module  # noqa: E402
torch = pytest.importorskip("torch")  # the torch-free run skips these

import tensorgc
from tensorgc import MemReporter, _tensorgc, track_tensors
from tensorgc.growth import Checkpoint

MOD_NAME = "tgc_growth_fixture"
NO_GENERATIONS = sys.version_info >= (3, 14) or not getattr(sys, "_is_gil_enabled", lambda: True)()

pytest_plugins = ["pytester"]


@pytest.fixture
def mod():
    """A fresh module, registered in sys.modules for the test and removed after it."""
    yield from fresh_module(MOD_NAME, collect=False)


@pytest.fixture
def index_off():
    """The index is off when the test starts (no checkpoint or track_tensors left it on) and off
    again when it ends, whatever the test turned on."""
    track_tensors(False)
    assert not index_on()
    yield
    track_tensors(False)


def index_on():
    return any(getattr(cb, "__name__", "") == "_index_hook" for cb in gc.callbacks)


def key(r):
    return (r.device, r.address or 0, r.storage_bytes)


def walk_keys(device=None):
    """The storages a walk of the whole heap counts (the index turned off for it)."""
    track_tensors(False)
    rep = MemReporter().collect(device=device)
    return {key(r) for r in rep.rows if r.address and r.storage_bytes}


def walk_growth(before, reporter=None):
    """growth() by a walk of the whole heap, as it was computed before the index: one MemReporter
    walk with owners, its rows compared with the checkpoint's keys."""
    track_tensors(False)
    rep = (reporter or MemReporter())._collect(before.device, True, True)
    rows = [r for r in rep.rows if r.address and r.storage_bytes]
    now = {key(r) for r in rows}
    new = [r for r in rows if key(r) not in before.keys]
    groups = {}
    for r in new:
        groups.setdefault(r.holder or r.kind, []).append(r)
    out = sorted(((h, sum(r.storage_bytes for r in rs), len(rs), rs[0].owner or "")
                  for h, rs in groups.items()), key=lambda g: -g[1])
    return new, out, len(before.keys - now)


def same_row(r):
    """What a row says, less the number in an unnamed tensor's name (Tensor<i> counts the
    tensors before it, in the order they were found)."""
    return (key(r), r.kind, r.holder, r.owner, r.name if r.kind != "other" else None, r.shape,
            r.dtype)


@pytest.mark.skipif(NO_GENERATIONS, reason="no generational collector: no index")
def test_growth_with_50000_live_tensors_is_the_heap_walks(mod, index_off):
    mod.OLD = [torch.empty(2) for _ in range(50_000)]  # made before the index existed
    before = tensorgc.checkpoint()
    assert index_on()
    assert len(before.keys) >= 50_000
    assert {(t.untyped_storage().data_ptr(), 8) for t in mod.OLD} <= {
        (p, n) for _, p, n in before.keys}
    del mod.OLD[:100]                                          # freed
    mod.KEEP = [torch.ones(32) for _ in range(20)]             # new, held by a list
    mod.CACHE = {i: torch.zeros(64) for i in range(5)}         # new, held by a dict
    mod.VIEWS = [t[1:] for t in mod.OLD[:10]]                  # old storages, new views
    got = tensorgc.growth(before)
    assert index_on()  # the checkpoint holds it
    now = walk_keys()
    assert {key(r) for r in got.rows} == now - before.keys
    assert got.freed == len(before.keys - now) == 100
    assert got.nbytes == 20 * 32 * 4 + 5 * 64 * 4
    assert {h: (b, n) for h, b, n, _ in got.groups} == {
        f"{MOD_NAME}.KEEP": (20 * 32 * 4, 20), f"{MOD_NAME}.CACHE": (5 * 64 * 4, 5)}
    assert all(r.kind == "other" and r.owner.startswith(f"module {MOD_NAME} .") for r in got.rows)


@pytest.mark.skipif(NO_GENERATIONS, reason="no generational collector: no index")
def test_growth_matches_the_heap_walk_with_autograd_names_and_owners(mod, index_off):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 16)
    model(x).square().mean().backward()
    opt.step()  # Adam's state exists from here on
    opt.zero_grad(set_to_none=True)
    mod.OTHERS = [torch.empty(3) for _ in range(2_000)]
    reporter = MemReporter(model, optimizer=opt)
    before = tensorgc.checkpoint()
    mod.LOSSES = []
    for i in range(4):
        loss = model(x).square().mean()
        if i % 2 == 0:
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        mod.LOSSES.append(loss)  # the no-backward steps keep their graphs
    del loss
    mod.SCRATCH = {"buf": torch.ones(100)}
    del mod.OTHERS[:7]
    got = tensorgc.growth(before, reporter=reporter)
    rows, groups, freed = walk_growth(before, reporter)
    assert collections.Counter(map(same_row, got.rows)) == collections.Counter(map(same_row, rows))
    assert got.groups == groups
    assert got.freed == freed == 7
    holders = {h for h, _, _, _ in got.groups}
    assert f"{MOD_NAME}.LOSSES" in holders and f"{MOD_NAME}.SCRATCH" in holders
    assert any(" saved " in c for h, _, _, c in got.groups if h == f"{MOD_NAME}.LOSSES")


def test_growth_names_a_storage_held_by_a_named_root(mod, index_off):
    mod.caches = [{}]  # a module reaches it too, further away (and no local of ours does)
    before = tensorgc.checkpoint()
    mod.caches[0]["features"] = torch.empty(300)
    got = tensorgc.growth(before, roots={"session-scoped fixture": {"cache": mod.caches[0]}})
    assert [(h, b, n) for h, b, n, _ in got.groups] == [("session-scoped fixture cache", 1200, 1)]
    assert got.groups[0][3] == "session-scoped fixture cache ['features']"
    assert tensorgc.growth(before).groups[0][0] == f"{MOD_NAME}.caches"
    with pytest.raises(TypeError, match="roots must"):
        tensorgc.growth(before, roots={"fixture": 1})  # refused when something is new...
    del mod.caches[0]["features"]
    with pytest.raises(TypeError, match="roots must"):
        tensorgc.growth(before, roots={"fixture": 1})  # ...and when nothing is (no search)


def test_a_freed_storage_and_its_reallocation(mod, index_off):
    mod.A = [torch.empty(4096)]
    old = mod.A[0].untyped_storage().data_ptr()
    before = tensorgc.checkpoint()
    del mod.A[0]  # freed: its tensor object's slot and its memory may both be reused
    mod.B = torch.empty(4096)
    got = tensorgc.growth(before)
    if mod.B.untyped_storage().data_ptr() == old:
        # the same address and size: counted as the old storage (documented)
        assert (got.rows, got.freed) == ([], 0)
    else:
        assert [key(r) for r in got.rows] == [("cpu", mod.B.untyped_storage().data_ptr(),
                                               4096 * 4)]
        assert got.freed == 1
    now = walk_keys()
    assert {key(r) for r in got.rows} == now - before.keys
    assert got.freed == len(before.keys - now)


def test_views_count_a_storage_once_and_an_old_storage_never(mod, index_off):
    mod.BASE = torch.arange(64.0)
    mod.GONE_BASE = [torch.arange(32.0)]
    before = tensorgc.checkpoint()
    mod.VIEW_OF_OLD = mod.BASE[8:]             # a new view of an old storage: not new
    mod.SURVIVOR = mod.GONE_BASE.pop()[4:]     # its base's object dropped: the storage lives
    fresh = torch.ones(50)
    mod.HALVES = [fresh[:25], fresh[25:]]      # one new storage, two views
    mod.EMPTY = fresh[:0]                      # no elements: no row of its own
    del fresh
    got = tensorgc.growth(before)
    assert len(got.rows) == 1
    (r,) = got.rows
    assert key(r) == ("cpu", mod.HALVES[0].untyped_storage().data_ptr(), 50 * 4)
    assert got.nbytes == 200 and got.freed == 0
    now = walk_keys()
    assert {key(r) for r in got.rows} == now - before.keys


def test_tensors_made_by_threads(mod, index_off):
    mod.BY_THREAD = [[] for _ in range(4)]
    before = tensorgc.checkpoint()
    stop = threading.Event()

    def work(i):
        for j in range(200):
            t = torch.full((8,), float(j))
            if j % 10 == 0:
                mod.BY_THREAD[i].append(t)

    churn_keep = []

    def churn():  # makes and drops tensors while the main thread compares
        while not stop.is_set():
            churn_keep.append(torch.empty(4))
            del churn_keep[:-3]

    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    churner = threading.Thread(target=churn)
    churner.start()
    for w in workers:
        w.start()
    for _ in range(3):  # while threads make tensors: no crash, nothing counted twice
        mid = tensorgc.growth(before)
        assert len({key(r) for r in mid.rows}) == len(mid.rows)
    for w in workers:
        w.join()
    stop.set()
    churner.join()
    churn_keep.clear()
    got = tensorgc.growth(before)
    assert {h: n for h, _, n, _ in got.groups} == {f"{MOD_NAME}.BY_THREAD": 4 * 20}
    assert {key(r) for r in got.rows} == walk_keys() - before.keys


@pytest.mark.skipif(NO_GENERATIONS, reason="no generational collector: no index")
def test_the_index_lives_as_long_as_a_checkpoint_that_started_it(mod, index_off):
    callbacks = list(gc.callbacks)
    mod.EARLY = torch.ones(10)  # before the index existed
    before = tensorgc.checkpoint()
    assert index_on()
    assert ("cpu", mod.EARLY.untyped_storage().data_ptr(), 40) in before.keys
    second = tensorgc.checkpoint()
    del before
    assert index_on()  # the second one still needs it
    del second
    assert not index_on() and gc.callbacks == callbacks
    # the user's track_tensors(True) is theirs: a checkpoint dropped leaves it on
    assert track_tensors(True)
    third = tensorgc.checkpoint()
    del third
    assert index_on()
    track_tensors(False)
    assert gc.callbacks == callbacks
    # growth() with a checkpoint whose index the user turned off turns it on again, for as
    # long as the checkpoint lives
    fourth = tensorgc.checkpoint()
    track_tensors(False)
    mod.LATER = torch.ones(12)
    got = tensorgc.growth(fourth)
    assert [key(r) for r in got.rows] == [("cpu", mod.LATER.untyped_storage().data_ptr(), 48)]
    assert index_on()
    del fourth
    assert gc.callbacks == callbacks


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_compares_with_the_parents_checkpoint(mod, index_off):
    mod.OLD = [torch.ones(6) for _ in range(100)]
    before = tensorgc.checkpoint()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: inherits the index, the checkpoint and its hold
        code = 1
        try:
            mod.CHILD = [torch.ones(9)]
            del mod.OLD[:3]
            g = tensorgc.growth(before)
            ok = ([h for h, _, _, _ in g.groups] == [f"{MOD_NAME}.CHILD"] and g.freed == 3
                  and index_on() is (not NO_GENERATIONS))
            code = 0 if ok else 2
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    try:
        got = os.read(r, 1)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert got == b"\x00"
    assert tensorgc.growth(before).rows == []  # the parent's tensors did not change


def test_a_checkpoint_before_torch_is_imported(tmp_path):
    script = tmp_path / "early.py"
    script.write_text(
        "import sys\n"
        "import tensorgc\n"
        "assert 'torch' not in sys.modules\n"
        "before = tensorgc.checkpoint()\n"
        "import torch\n"
        "KEEP = torch.ones(3)\n"
        "print(tensorgc.growth(before).groups[0][0])\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "__main__.KEEP"


def test_index_holds_and_releases(index_off):
    callbacks = list(gc.callbacks)
    on = _tensorgc._index_hold()
    assert on is (not NO_GENERATIONS)
    assert _tensorgc._index_hold() is on
    _tensorgc._index_release()
    assert index_on() is on
    _tensorgc._index_release()
    _tensorgc._index_release()  # one too many: ignored
    assert gc.callbacks == callbacks


def test_a_copied_or_pickled_checkpoint_compares_the_same(mod, index_off):
    mod.OLD = [torch.ones(5) for _ in range(10)]
    before = tensorgc.checkpoint()
    mod.NEW = torch.ones(7)
    del mod.OLD[0]
    want = tensorgc.growth(before)
    for other in (copy.copy(before), pickle.loads(pickle.dumps(before)),
                  Checkpoint(set(before.keys), None, before.time, before.nbytes)):
        got = tensorgc.growth(other)
        assert [key(r) for r in got.rows] == [key(r) for r in want.rows]
        assert (got.freed, got.nbytes, got.groups) == (want.freed, want.nbytes, want.groups)


def test_a_checkpoint_of_one_device_compared_on_another(mod, index_off):
    mod.KEEP = torch.ones(3)
    before = tensorgc.checkpoint("cpu")
    with pytest.raises(ValueError, match="taken on cpu"):
        tensorgc.growth(before, "meta")
    everything = tensorgc.checkpoint()
    assert everything.keys and all(d == "cpu" for d, _, _ in everything.keys)
    # compared on a device the checkpoint's storages are not on: none of them was freed
    got = tensorgc.growth(everything, "meta")
    assert (got.rows, got.freed, got.device) == ([], 0, "meta")
    assert tensorgc.checkpoint("meta").keys == frozenset()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
def test_storage_keys_count_each_layout_as_memreporter_does(index_off):
    class WithTorchFunction(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs or {})

    class Wrapper(torch.Tensor):
        @staticmethod
        def __new__(cls, a, b):
            return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype)

        def __init__(self, a, b):
            self.a, self.b = a, b

        def __tensor_flatten__(self):
            return ["a", "b"], None

        __torch_function__ = torch._C._disabled_torch_function_impl

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError(func)

    base = torch.arange(20.0)
    coo = torch.eye(4).to_sparse()
    resized = torch.ones(10)
    resized.resize_(0)  # no elements, its storage kept
    keep = [torch.ones(5), base[3:], base, torch.empty(0), torch.empty(5, device="meta"),
            torch.nn.Parameter(torch.ones(3)), torch.ones(6).as_subclass(WithTorchFunction),
            coo, coo.values(), torch.eye(3).to_sparse_csr(), resized,
            Wrapper(torch.ones(3), torch.zeros(3))]
    live = _tensorgc._live_tensors()
    keys, where, matched, nbytes, table = _tensorgc._storage_keys(live, None, None)
    assert where is None and matched == 0
    assert set(keys) == walk_keys() and len(keys) == len(set(keys))
    assert not any(gc.is_tracked(k) for k in keys)  # a str and two ints: nothing to collect
    assert nbytes == sum(n for _, _, n in keys)
    for before in (table, frozenset(keys)):
        again = _tensorgc._storage_keys(live, None, before)
        assert again[:3] == ([], [], len(keys))
    assert _tensorgc._storage_keys(live, ("meta", None), None)[0] == []
    with pytest.raises(TypeError):
        _tensorgc._storage_keys([object()], None, None)
    with pytest.raises(ValueError, match="table"):
        _tensorgc._storage_keys(live, None, (b"not a table", ()))
    del keep, live


def test_the_plugin_fails_a_leaking_test_and_passes_a_clean_one(pytester):
    pytester.makepyfile(test_leaky="""
        import gc
        import torch

        KEEP = []

        def index_on():
            return any(getattr(cb, "__name__", "") == "_index_hook" for cb in gc.callbacks)

        def test_keeps_a_tensor():
            KEEP.append(torch.empty(1 << 16))

        def test_frees_its_tensor():
            t = torch.empty(1 << 16)
            del t

        def test_fails_on_its_own():
            KEEP.append(torch.empty(8))
            assert False, "its own failure"

        def test_the_session_keeps_the_index_on():
            import sys
            no_generations = sys.version_info >= (3, 14) or not getattr(
                sys, "_is_gil_enabled", lambda: True)()
            assert index_on() or no_generations
    """)
    callbacks = list(gc.callbacks)
    result = pytester.runpytest_inprocess("-p", "tensorgc.pytest_plugin", "--tensorgc",
                                          "-p", "no:cacheprovider")
    # the leak is reported at the teardown of a test whose call passed: an error there
    result.assert_outcomes(failed=1, passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_keeps_a_tensor*",
                                 "*tensorgc: the test left 1 storage (256.00K) alive*",
                                 "*test_leaky.KEEP*"])
    result.stdout.fnmatch_lines(["*AssertionError: its own failure*"])
    # not for its own failure (the short summary repeats the message where the terminal is wide)
    told = [line for line in result.stdout.lines
            if "alive after it returned:" in line and not line.startswith(("ERROR", "FAILED"))]
    assert len(told) == 1
    assert gc.callbacks == callbacks  # the session's hold on the index ended with it
