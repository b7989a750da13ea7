"""The pre-scan's fast paths (cycles/shapes.h, tgc_shape_runs): instances with a managed dict (3.11+:
inline values, or the __dict__ once made), __slots__, exact lists, tuples, cells, bound methods and
functions have their references read in place instead of through tp_traverse. A reference the
fast path missed would be a tensor cycle never reported, so each fast path is checked twice: what
it reads against what tp_traverse visits (_traverse_fast), and the pre-scan's verdict on every
young object against tp_traverse's, while cycles hide an old tensor in each place
(_prescan_crosscheck)."""
import collections
import functools
import gc
import types
import weakref

import pytest

pytest.importorskip("torch")  # the objects below hold tensors (the torch-free run skips them)

import tensorgc  # noqa: E402
from tensorgc import _tensorgc_testing  # noqa: E402
from _util import DEVICE, T, new_class  # noqa: E402

_C = _tensorgc_testing
pytestmark = pytest.mark.skipif(not _C._young_scan()["available"],
                                reason="the pre-scan needs the collector's generation lists")


class Plain:
    pass


class Sub(Plain):
    pass


class Mixed:
    __slots__ = ("me", "__dict__")


class Slotted:
    __slots__ = ("me", "t")


class ListSub(list):
    pass


class DictSub(dict):
    pass


class Handler:
    def method(self):
        return self


def _function(t=None):
    def f(a=t, *, k=t):
        return f
    return f


def _objects():
    """(name, object): one of every shape the fast paths read, and of shapes they leave to
    tp_traverse, each holding a tensor somewhere."""
    t = T(3)
    p = Plain()
    p.a, p.t, p.none = 1, t, None
    deleted = Plain()
    deleted.a, deleted.b, deleted.t = 1, 2, t
    del deleted.b  # a hole in the inline values
    made = Plain()
    made.t = t
    made.__dict__["x"] = 1  # the dict is made: the values live there now
    many = Plain()
    for i in range(40):  # more attributes than a class's shared keys take
        setattr(many, f"a{i}", i)
    many.t = t
    sub = Sub()
    sub.t = t
    mixed = Mixed()
    mixed.me, mixed.t = mixed, t
    slotted = Slotted()
    slotted.t = t
    cell = (lambda: t).__closure__[0]
    empty_cell = types.CellType()
    f = _function(t)
    f.__doc__, f.extra = t, t
    bound = types.MethodType(Handler.method, t)  # __self__ is the tensor
    on_instance = Handler()
    on_instance.cb = on_instance.method
    lsub = ListSub([t])
    lsub.x = t
    dsub = DictSub(a=t)
    return [
        ("inline values", p), ("inline values with a hole", deleted),
        ("materialized __dict__", made), ("many attributes", many), ("subclass instance", sub),
        ("slots and __dict__", mixed), ("slots", slotted), ("list", [1, t, None, "x"]),
        ("empty list", []), ("tuple", (t, 1, [t])), ("empty tuple", ()), ("cell", cell),
        ("empty cell", empty_cell), ("function", f), ("closure", _function()),
        ("bound method of a tensor", bound), ("bound method on its instance", on_instance.cb),
        ("list subclass", lsub), ("dict subclass", dsub), ("dict", {"a": t, t: 1, 2: [t]}),
        ("str-keyed dict", {"a": t}), ("OrderedDict", collections.OrderedDict(a=t)),
        ("partial", functools.partial(print, t)), ("SimpleNamespace", types.SimpleNamespace(t=t)),
        ("exception", ValueError(t)), ("tensor", t),
        ("function with odd __builtins__", types.FunctionType((lambda: 0).__code__, {"__builtins__": t})),
    ]


@pytest.mark.parametrize("name", [n for n, _ in _objects()])
def test_fast_traversal_reads_what_tp_traverse_visits(name):
    obj = dict(_objects())[name]
    fast, full = _C._traverse_fast(obj)
    fast_ids, full_ids = collections.Counter(map(id, fast)), collections.Counter(map(id, full))
    if fast_ids != full_ids:
        # a fast path skips the type of a heap type's instance, which tp_traverse visits
        assert type(obj).__flags__ & (1 << 9), name  # Py_TPFLAGS_HEAPTYPE
        full_ids[id(type(obj))] -= 1
        assert fast_ids == +full_ids, (name, fast, full)


@pytest.fixture
def crosscheck(on_gc_callbacks):
    """Pre-scan, islands and both crosschecks on, the hook on gc.callbacks (the crosscheck runs at
    "start"); restored after."""
    saved = {f: getattr(_C, f)()["enabled"] for f in
             ("_young_scan", "_young_island", "_island_crosscheck", "_prescan_crosscheck")}
    for f in saved:
        getattr(_C, f)(True)
    yield
    for f in reversed(list(saved)):
        getattr(_C, f)(saved[f])


def _hiding_places():
    """(name, make(t) -> None): each makes young cyclic garbage whose only reference to the
    tensor is in one place a fast path reads (or one it leaves to tp_traverse)."""
    def inline_value(t):
        o = Plain()
        o.me, o.t = o, t

    def materialized(t):
        o = Plain()
        o.me = o
        o.__dict__["t"] = t

    def many_attributes(t):
        o = Plain()
        for i in range(40):
            setattr(o, f"a{i}", i)
        o.me, o.t = o, t

    def subclass_instance(t):
        o = Sub()
        o.me, o.t = o, t

    def list_item(t):
        lst = [1, 2]
        lst.append(lst)
        lst.append(t)

    def tuple_item(t):
        lst = []
        lst.append((None, t, lst))

    def dict_value(t):
        d = {1: None}
        d["d"], d["t"] = d, t

    def dict_key(t):
        d = {}
        d[t] = d

    def cell(t):
        def f():
            return f, t
        del f.__doc__

    def function_doc(t):
        f = _function()
        f.__doc__ = t
        f.me = f

    def function_module(t):
        f = _function()
        f.__module__ = t
        f.me = f

    def function_default(t):
        f = _function(t)  # the defaults tuple holds it
        f.me = f

    def function_builtins(t):
        g = {"__builtins__": t}  # taken as it is when the function is made
        f = types.FunctionType((lambda: 0).__code__, g)
        del g["__builtins__"]
        f.me = f

    def bound_self(t):
        o = Plain()
        o.m = types.MethodType(Handler.method, t)
        o.me = o

    def method_on_instance(t):
        h = Handler()
        h.cb = h.method  # instance -> method -> instance
        h.t = t

    def list_subclass(t):
        lst = ListSub([t])
        lst.append(lst)

    def dict_subclass(t):
        d = DictSub(t=t)
        d["d"] = d

    def own_traverse(t):
        ns = types.SimpleNamespace(t=t)
        ns.me = ns

    def partial(t):
        lst = []
        lst.append(functools.partial(print, t, lst))

    return [("inline value", inline_value), ("materialized __dict__", materialized),
            ("many attributes", many_attributes), ("subclass instance", subclass_instance),
            ("list item", list_item), ("tuple item", tuple_item), ("dict value", dict_value),
            ("dict key", dict_key), ("cell", cell), ("function __doc__", function_doc),
            ("function __module__", function_module), ("function default", function_default),
            ("function __builtins__", function_builtins), ("bound method __self__", bound_self),
            ("bound method on its instance", method_on_instance),
            ("list subclass", list_subclass), ("dict subclass", dict_subclass),
            ("SimpleNamespace", own_traverse), ("functools.partial", partial)]


@pytest.mark.parametrize("name", [n for n, _ in _hiding_places()])
def test_pre_scan_sees_an_old_tensor_in_each_place(track, crosscheck, name):
    make = dict(_hiding_places())[name]
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    t = T(250)
    t_ref = weakref.ref(t)
    gc.collect()  # the tensor is old now: only the pre-scan's reading of the cycle can find it
    make(t)
    del t
    assert t_ref() is not None
    assert _C._young_prescan(0) is True, name
    before = _C._prescan_crosscheck()
    gc.collect(0)
    after = _C._prescan_crosscheck()
    assert after["checked"] > before["checked"]
    assert after["mismatched"] == before["mismatched"], name
    assert _C._island_crosscheck()["mismatched"] == 0
    assert len(reports) == 1, name
    assert [x["nbytes"] for x in reports[0].tensors] == [1000]
    assert t_ref() is None


def test_pre_scan_finds_nothing_in_tensor_free_shapes(gc_state):
    """The same shapes without a tensor: the pre-scan lets the collection run alone."""
    keep = []
    gc.collect()
    for _, make in _hiding_places():
        make(1)  # a stand-in that is no tensor
    for _, obj in _objects():
        keep.append(obj)  # old after the next collection: out of generation 0
    gc.collect()
    for _, make in _hiding_places():
        make(1)  # a stand-in that is no tensor
    assert _C._young_prescan(0) is False


def test_pre_scan_crosscheck_on_every_b1_shape(track, crosscheck):
    """B1's garbage of every shape, with tensors among it, through automatic collections: the
    pre-scan and tp_traverse agree on every young object."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "bench"))
    from b1_overhead import SHAPES, TensorCycle

    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    before = _C._prescan_crosscheck()
    gc.enable()
    try:
        for make in SHAPES.values():
            for i in range(3000):
                make()
                if i % 1000 == 500:
                    TensorCycle(T(4))
    finally:
        gc.disable()
    gc.collect()
    after = _C._prescan_crosscheck()
    assert after["checked"] - before["checked"] > 10_000
    assert after["mismatched"] == before["mismatched"]
    assert sum(len(r.tensors) for r in reports) == 3 * len(SHAPES)


def test_an_old_tensor_in_one_closure_among_many(track, crosscheck):
    """Functions, their cells and their closures' tuples alternate among young objects, three
    types in turn, which each end of the walk keeps known without a lookup: the one cell that
    holds an old tensor, a few hundred objects in, is still read."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    t = T(250)
    t_ref = weakref.ref(t)
    gc.collect()

    def pair(x):
        def f():
            return g, x

        def g():
            return f
        return f

    for i in range(60):
        pair(t if i == 37 else i)
    del t
    assert t_ref() is not None
    assert _C._young_prescan(0) is True
    before = _C._prescan_crosscheck()
    gc.collect(0)
    after = _C._prescan_crosscheck()
    assert after["checked"] - before["checked"] > 300
    assert after["mismatched"] == before["mismatched"]
    assert [x["nbytes"] for r in reports for x in r.tensors] == [1000]
    assert t_ref() is None


def test_switch():
    was = _C._prescan_crosscheck()
    assert set(was) == {"enabled", "checked", "mismatched"}
    try:
        assert _C._prescan_crosscheck(True)["enabled"] is True
        assert _C._prescan_crosscheck(False)["enabled"] is False
    finally:
        _C._prescan_crosscheck(was["enabled"])
    with pytest.raises(ValueError):
        _C._young_prescan(2)


def test_class_shapes_do_not_outlive_a_walk(gc_state):
    """The shape caches hold type pointers for one walk only: classes made and dropped between
    walks (a new class at the same address) are read by their own shape."""
    for i in range(50):
        cls = new_class(f"C{i}", __slots__=tuple(f"s{j}" for j in range(i % 5)))
        o = cls()
        for j in range(i % 5):
            setattr(o, f"s{j}", T(1))
        fast, full = _C._traverse_fast(o)
        assert len(fast) == i % 5 and len(full) == i % 5 + 1
        del o, cls
        gc.collect()
