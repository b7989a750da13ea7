"""Functional tests of tensorgc's cycle detector (contract: docs/api.md).

Every cycle is built inside a helper function that drops its locals before
returning, so no live frame keeps the garbage reachable.  Automatic gc is
disabled by the autouse `gc_state` fixture (conftest.py): only the explicit
gc.collect() calls in the tests collect.
"""

import gc
import os
import re
import sys
import types
import weakref

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
import tensorgc._tensorgc_testing  # the detector's counters
from _util import (
    DEVICE,
    IS_CUDA,
    OTHER_DEVICE,
    T,
    find_edges,
    has_edge,
    instances,
    is_plain_data,
    live_tensors_with_ptr,
    new_class,
)


# --------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------


def make_pair(Node, tensor=None):
    """a <-> b, a.t = tensor (held by the cycle, not in it).

    Returns weakrefs to a, b and the tensor, and the tensor's data_ptr.
    """
    a = Node()
    b = Node()
    a.other = b
    b.other = a
    a.t = T(16) if tensor is None else tensor
    refs = [weakref.ref(a), weakref.ref(b), weakref.ref(a.t)]
    ptr = a.t.data_ptr()
    del a, b, tensor
    return refs, ptr


def make_tensor_free_pair(Node):
    a = Node()
    b = Node()
    a.other = b
    b.other = a
    refs = [weakref.ref(a), weakref.ref(b)]
    ids = {id(a), id(b)}
    del a, b
    return refs, ids


def _getframe_here():
    return sys._getframe()


def _raise_with(owner):
    raise ValueError("inner")


def _catch_from_inner(box):
    # Only the *inner* frame (local `owner`) references the owner; this frame's
    # locals are just the (emptied) box, so the only way back to the owner is
    # traceback --tb_next--> traceback --tb_frame--> frame --local owner--> owner.
    try:
        _raise_with(box.pop())
    except ValueError as e:
        return e


# -- one builder per edge kind; each returns nothing and leaves only garbage --


def build_attribute():
    Node = new_class()
    make_pair(Node)


def build_slots():
    SNode = new_class("SNode", __slots__=("x", "t", "__weakref__"))
    a, b = SNode(), SNode()
    a.x = b
    b.x = a
    a.t = T()
    del a, b


def build_dict_value_str():
    Node = new_class()
    a = Node()
    a.t = T()
    a.d = {"k": a}
    del a


def build_dict_value_int():
    Node = new_class()
    a = Node()
    a.t = T()
    a.d = {3: a}
    del a


def build_dict_key():
    Node = new_class()
    a = Node()
    a.t = T()
    a.d = {a: None}
    del a


def build_list():
    Node = new_class()
    a = Node()
    a.t = T()
    a.l = [None, a]
    del a


def build_tuple():
    Node = new_class()
    a = Node()
    a.t = T()
    a.tup = (None, a)
    del a


def build_set():
    Node = new_class()
    a = Node()
    a.t = T()
    a.s = {a}
    del a


def build_frozenset():
    Node = new_class()
    a = Node()
    a.t = T()
    a.s = frozenset([a])
    del a


def build_closure():
    class Node:
        def __init__(self):
            self.t = T()
            self.f = lambda: self  # lambda capturing self

    Node()


def build_bound_method():
    class Node:
        def __init__(self):
            self.t = T()
            self.m = self.method  # bound method stored on self

        def method(self):
            return self.t

    Node()


def build_cell():
    Node = new_class()
    a = Node()
    a.t = T()
    a.c = types.CellType(a)
    del a


def build_defaults():
    Node = new_class()
    a = Node()
    a.t = T()

    def f(x=a):
        return x

    a.f = f
    del a, f


def build_kwdefaults():
    Node = new_class()
    a = Node()
    a.t = T()

    def f(*, x=a):
        return x

    a.f = f
    del a, f


def build_function_dict():
    Node = new_class()
    a = Node()
    a.t = T()

    def f():
        return None

    f.owner = a
    a.f = f
    del a, f


def build_globals():
    Node = new_class()
    a = Node()
    a.t = T()
    g = {}
    exec("def f():\n    return a\n", g)
    g["a"] = a
    a.f = g["f"]
    del a, g


def build_frame_local():
    class Node:
        def grab(self):
            self.frame = sys._getframe()

    n = Node()
    n.t = T()
    n.grab()
    del n


def build_frame_f_back():
    class Node:
        def outer(self):
            # the inner frame does not reference self; its caller's frame does
            self.fr = _getframe_here()

    n = Node()
    n.t = T()
    n.outer()
    del n


def build_traceback():
    class Node:
        def run(self):
            try:
                raise ValueError("boom")
            except ValueError as e:
                self.err = e  # exception caught and stored on self

    n = Node()
    n.t = T()
    n.run()
    del n


def build_tb_next():
    Node = new_class()
    owner = Node()
    owner.t = T()
    owner.err = _catch_from_inner([owner])
    del owner


def build_exc_context():
    Node = new_class()
    a = Node()
    a.t = T()
    first = ValueError("first")
    first.owner = a
    second = KeyError("second")
    second.__context__ = first
    a.err = second
    del a, first, second


def build_exc_cause():
    Node = new_class()
    a = Node()
    a.t = T()
    first = ValueError("first")
    first.owner = a
    second = KeyError("second")
    second.__cause__ = first
    a.err = second
    del a, first, second


def build_exc_args():
    Node = new_class()
    a = Node()
    a.t = T()
    a.err = ValueError(a)
    del a


def build_class():
    Klass = new_class("Klass")
    inst = Klass()
    inst.t = T()
    Klass.inst = inst  # inst --__class__--> Klass --...--> inst
    del inst, Klass


# (id, builder, expected edges (src_type, label, dst_type); None = any type)
EDGE_CASES = [
    ("attribute", build_attribute, [("Node", ".other", "Node"), ("Node", ".t", "Tensor")]),
    ("slots", build_slots, [("SNode", ".x", "SNode"), ("SNode", ".t", "Tensor")]),
    ("dict-value-str", build_dict_value_str, [("Node", ".d", "dict"), ("dict", "['k']", "Node")]),
    ("dict-value-int", build_dict_value_int, [("dict", "[3]", "Node")]),
    # docs/api.md: dict key -> `(key)`.  Read literally (no template such as
    # repr(key), unlike the dict-value row), the label is the text "(key)".
    ("dict-key", build_dict_key, [("Node", ".d", "dict"), ("dict", "(key)", "Node")]),
    ("list-index", build_list, [("Node", ".l", "list"), ("list", "[1]", "Node")]),
    ("tuple-index", build_tuple, [("Node", ".tup", "tuple"), ("tuple", "[1]", "Node")]),
    ("set-member", build_set, [("Node", ".s", "set"), ("set", "member", "Node")]),
    ("frozenset-member", build_frozenset, [("frozenset", "member", "Node")]),
    ("closure", build_closure, [("Node", ".f", "function"), ("function", "closure self", "Node")]),
    ("bound-method", build_bound_method, [("Node", ".m", "method"), ("method", "__self__", "Node")]),
    ("cell", build_cell, [("Node", ".c", "cell"), ("cell", "cell_contents", "Node")]),
    ("function-defaults", build_defaults, [("function", "__defaults__", "tuple"), ("tuple", "[0]", "Node")]),
    ("function-kwdefaults", build_kwdefaults, [("function", "__kwdefaults__", "dict"), ("dict", "['x']", "Node")]),
    # docs/api.md: function attributes are `.name` (its `__dict__` is folded too)
    ("function-dict", build_function_dict, [("Node", ".f", "function"), ("function", ".owner", "Node")]),
    ("function-globals", build_globals, [("function", "__globals__", "dict"), ("dict", "['a']", "Node")]),
    ("frame-local", build_frame_local, [("Node", ".frame", "frame"), ("frame", "local self", "Node")]),
    ("frame-f_back", build_frame_f_back, [("Node", ".fr", "frame"), ("frame", "f_back", "frame"), ("frame", "local self", "Node")]),
    # No `f_globals` case: on CPython 3.11 frame_traverse() does not visit
    # f_globals (it is borrowed from f_func), so there is no such gc edge.
    (
        "traceback",
        build_traceback,
        [
            ("Node", ".err", "ValueError"),
            ("ValueError", "__traceback__", "traceback"),
            ("traceback", "tb_frame", "frame"),
            ("frame", "local self", "Node"),
        ],
    ),
    ("traceback-tb_next", build_tb_next, [("traceback", "tb_next", "traceback"), ("frame", "local owner", "Node")]),
    ("exception-context", build_exc_context, [("KeyError", "__context__", "ValueError"), ("ValueError", ".owner", "Node")]),
    ("exception-cause", build_exc_cause, [("KeyError", "__cause__", "ValueError"), ("ValueError", ".owner", "Node")]),
    # docs/api.md does not say whether the args tuple is folded: only the
    # label and the source type are checked.
    ("exception-args", build_exc_args, [("Node", ".err", "ValueError"), ("ValueError", "args", None)]),
    ("class", build_class, [("Klass", "__class__", "type"), ("Klass", ".t", "Tensor")]),
]


def collect_one_report(track, builder, generation=2, device=DEVICE, with_info=False):
    """Register observe_cycles, run builder(), collect once; exactly one report."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=device))
    info = builder()
    gc.collect(generation)
    assert len(reports) == 1, f"expected exactly one report, got {len(reports)}"
    return (reports[0], info) if with_info else reports[0]


def call_expecting(exc, func, *args, **kwargs):
    """func(*args, **kwargs) must raise exc; a handle returned instead is removed."""
    with pytest.raises(exc):
        handle = func(*args, **kwargs)
        handle.remove()  # only reached when nothing was raised


# --------------------------------------------------------------------------
# edge labels
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "builder, expected", [c[1:] for c in EDGE_CASES], ids=[c[0] for c in EDGE_CASES]
)
def test_edge_labels(track, builder, expected):
    report = collect_one_report(track, builder)
    for src, label, dst in expected:
        assert has_edge(report, src, label, dst), (
            f"missing edge {(src, label, dst)}; edges: {report.edges}"
        )
        assert label in report.dot, f"label {label!r} not in report.dot"


def test_instance_dict_is_folded(track):
    report = collect_one_report(track, build_attribute)
    # a.other is drawn as Node --.other--> Node, never via a __dict__ node
    assert has_edge(report, "Node", ".other", "Node")
    assert not find_edges(report, "Node", "__dict__", None)
    assert not find_edges(report, "dict", "['other']", "Node")


def test_function_dict_is_folded(track):
    report = collect_one_report(track, build_function_dict)
    assert has_edge(report, "function", ".owner", "Node")
    assert not find_edges(report, "function", "__dict__", None)
    assert not find_edges(report, "dict", "['owner']", "Node")


def test_edges_are_string_triples(track):
    report = collect_one_report(track, build_attribute)
    assert report.edges
    for edge in report.edges:
        assert type(edge) is tuple and len(edge) == 3
        assert all(type(part) is str for part in edge)


def test_edge_labels_are_made_once_and_reused(track):
    """Labels are reused across reports: ".other" is one str object in both. An attribute name
    that is a str subclass is labelled anew, without its __hash__ or __eq__ running; and a cycle
    with more distinct attribute names than the cache keeps is still labelled right."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Node = new_class()
    for _ in range(2):
        make_pair(Node)
        gc.collect()
    assert len(reports) == 2
    first, second = ({e[1]: e[1] for e in r.edges if e[1] == ".other"} for r in reports)
    assert first[".other"] is second[".other"]

    class Name(str):
        calls = 0

        def __hash__(self):
            Name.calls += 1
            return str.__hash__(self)

        def __eq__(self, other):
            Name.calls += 1
            return str.__eq__(self, other)

    def build():
        o = Node()
        o.__dict__[Name("held")] = T(16)
        for i in range(5000):  # more names than the cache keeps
            setattr(o, f"a{i}", i)
        o.me = o

    calls = Name.calls
    before = len(reports)
    build()
    after_insert = Name.calls
    gc.collect()
    assert len(reports) == before + 1
    assert Name.calls == after_insert >= calls  # the report ran none of them
    report = reports[-1]
    assert has_edge(report, "Node", ".held", "Tensor") and has_edge(report, "Node", ".me", "Node")
    make_pair(Node)
    gc.collect()
    assert has_edge(reports[-1], "Node", ".other", "Node")


# --------------------------------------------------------------------------
# cycle shapes
# --------------------------------------------------------------------------


def test_tensor_held_by_cycle_but_not_in_it(track):
    Node = new_class()
    report, (refs, ptr) = collect_one_report(
        track, lambda: make_pair(Node, T(8, 8)), with_info=True
    )
    assert [t["data_ptr"] for t in report.tensors] == [ptr]
    assert [t["shape"] for t in report.tensors] == [(8, 8)]
    assert has_edge(report, "Node", ".other", "Node")
    assert has_edge(report, "Node", ".t", "Tensor")
    assert len(report.groups) == 1
    group = report.groups[0]
    assert group["count"] == 1
    assert "Node" in group["cycle"]
    # the tensor hangs off the cycle; it is not part of it
    assert "Tensor" not in group["cycle"]
    assert report.garbage >= 3


def _tensor_self_list():
    t = T(4)
    t.foo = [t]  # plain tensors accept attributes (their __dict__)
    ptr = t.data_ptr()
    del t
    return ptr


def test_tensor_in_cycle_via_list(track):
    report, ptr = collect_one_report(track, _tensor_self_list, with_info=True)
    assert [t["data_ptr"] for t in report.tensors] == [ptr]
    assert has_edge(report, "Tensor", ".foo", "list")
    assert has_edge(report, "list", "[0]", "Tensor")
    assert "Tensor" in report.groups[0]["cycle"]
    assert not live_tensors_with_ptr(ptr)


class MyTensor(torch.Tensor):
    pass


def _subclass_self_ref():
    t = T(4).as_subclass(MyTensor)
    t.me = t
    del t


def _parameter_self_ref():
    p = torch.nn.Parameter(T(4))
    p.me = p
    del p


@pytest.mark.parametrize(
    "builder, type_name",
    [(_subclass_self_ref, "MyTensor"), (_parameter_self_ref, "Parameter")],
    ids=["subclass", "parameter"],
)
def test_tensor_subclass_in_cycle(track, builder, type_name):
    report = collect_one_report(track, builder)
    assert [t["type"] for t in report.tensors] == [type_name]
    assert has_edge(report, type_name, ".me", type_name)


def _build_module_hook_closure():
    def attach(module):
        module.register_forward_hook(lambda mod, inputs, output: module)

    m = torch.nn.Linear(4, 4).to(DEVICE)
    attach(m)
    del m


def _build_module_hook_bound_method():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_forward_hook(self.hook)

        def hook(self, mod, inputs, output):
            return output

    Model().to(DEVICE)


def test_module_forward_hook_closure(track):
    report = collect_one_report(track, _build_module_hook_closure)
    assert sorted(t["type"] for t in report.tensors) == ["Parameter", "Parameter"]
    assert sorted(t["shape"] for t in report.tensors) == [(4,), (4, 4)]
    assert has_edge(report, "Linear", "._forward_hooks", None)
    assert has_edge(report, "function", "closure module", "Linear")
    assert report.nbytes == (16 + 4) * 4


def test_module_forward_hook_bound_method(track):
    report = collect_one_report(track, _build_module_hook_bound_method)
    assert len(report.tensors) == 2
    assert has_edge(report, "Model", "._forward_hooks", None)
    assert has_edge(report, "method", "__self__", "Model")
    assert any("weakmethod" in h.lower() or "bound method" in h.lower() for h in report.hints)


def test_one_report_for_several_kinds_of_cycles(track):
    def build():
        # (no locals here: this frame becomes garbage through the traceback's
        #  f_back chain and must not connect the three cycles)
        build_closure()
        build_traceback()
        _self_reference()

    report = collect_one_report(track, build)
    assert len(report.groups) >= 3
    assert len(report.hints) == len(report.groups)
    assert len(report.tensors) == 3


# --------------------------------------------------------------------------
# when is there (no) report
# --------------------------------------------------------------------------


def test_no_report_for_reachable_cycle(track):
    Node = new_class()
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    a = Node()
    a.other = Node()
    a.other.other = a
    a.t = T(3)
    gc.collect()
    assert reports == []
    # nothing was cleared
    assert a.other.other is a
    assert a.t.shape == (3,)
    # once unreachable it is reported
    del a
    gc.collect()
    assert len(reports) == 1


def test_no_report_for_tensor_free_garbage(track):
    Node = new_class()
    reports, garbage_seen = [], []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    track(tensorgc.observe_garbage(lambda g: garbage_seen.append({id(o) for o in g})))
    refs, ids = make_tensor_free_pair(Node)
    gc.collect()
    assert reports == []
    # but the garbage observer saw it
    assert any(ids <= seen for seen in garbage_seen)
    assert all(r() is None for r in refs)
    assert instances(Node) == []


def test_no_report_for_tensors_freed_by_refcount(track):
    Node = new_class()
    reports, garbage_calls = [], []
    T(1)  # a worker's first CUDA tensor leaves cyclic garbage of torch's own (its NVML bindings)
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    gc.collect()
    track(tensorgc.observe_garbage(garbage_calls.append))

    def no_cycle():
        a = Node()
        a.t = T(32)
        a.child = Node()
        t = T(5)
        del a, t

    no_cycle()
    gc.collect()
    assert reports == []
    assert garbage_calls == []  # no cyclic garbage at all


def test_observe_garbage_not_called_without_garbage(track):
    calls = []
    track(tensorgc.observe_garbage(calls.append))
    gc.collect()
    calls.clear()
    gc.collect()
    assert calls == []


def test_default_device_is_cuda(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append))
    make_pair(new_class(), T(4, device=DEVICE))
    gc.collect()
    assert len(reports) == (1 if IS_CUDA else 0)


# --------------------------------------------------------------------------
# freeing
# --------------------------------------------------------------------------


def test_garbage_freed_after_one_collection(track):
    Node = new_class()
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    track(tensorgc.observe_garbage(lambda g: None))
    garbage_before = list(gc.garbage)
    if IS_CUDA:
        torch.cuda.synchronize()
        mem_before = torch.cuda.memory_allocated()
    refs, ptr = make_pair(Node, T(256, 256))
    gc.collect()
    assert len(reports) == 1
    assert all(r() is None for r in refs)
    assert instances(Node) == []
    assert not live_tensors_with_ptr(ptr)
    assert len(gc.garbage) == len(garbage_before)
    assert all(x is y for x, y in zip(gc.garbage, garbage_before))
    if IS_CUDA:
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == mem_before
    # nothing left over for a second collection
    gc.collect()
    assert len(reports) == 1


@pytest.mark.parametrize("builder", [c[1] for c in EDGE_CASES], ids=[c[0] for c in EDGE_CASES])
def test_every_edge_kind_freed_after_one_collection(track, builder):
    # The garbage of every kind of cycle is freed by the first collection:
    # a second collection finds no cyclic garbage at all.
    reports, later_garbage = [], []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    builder()
    gc.collect()
    assert len(reports) == 1
    track(tensorgc.observe_garbage(lambda g: later_garbage.append(sorted({type(o).__name__ for o in g}))))
    gc.collect()
    assert len(reports) == 1, "tensor garbage was left for a second collection"
    assert later_garbage == [], f"garbage left for a second collection: {later_garbage}"


def test_report_holds_no_reference_to_garbage(track):
    Node = new_class()
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    refs, _ = make_pair(Node)
    gc.collect()
    report = reports[0]
    assert all(r() is None for r in refs)
    assert instances(Node) == []
    for name in ("text", "dot", "html", "tensors", "nbytes", "objects", "garbage",
                 "generation", "groups", "edges", "hints"):
        assert is_plain_data(getattr(report, name)), name


# --------------------------------------------------------------------------
# observe_garbage
# --------------------------------------------------------------------------


def test_observe_garbage_receives_list_of_garbage(track):
    Node = new_class()
    received = []

    def observer(garbage):
        received.append((type(garbage), {id(o) for o in garbage}))

    track(tensorgc.observe_garbage(observer))
    refs, ids = make_tensor_free_pair(Node)
    gc.collect()
    assert received
    assert all(kind is list for kind, _ in received)
    assert any(ids <= seen for _, seen in received)


def test_observer_keeping_the_list_keeps_objects_intact(track):
    Node = new_class()
    kept, reports = [], []
    track(tensorgc.observe_garbage(kept.append))
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    refs, ptr = make_pair(Node, torch.arange(16, dtype=torch.float32, device=DEVICE))
    gc.collect()
    assert len(reports) == 1
    nodes = [o for lst in kept for o in lst if type(o) is Node]
    assert len(nodes) == 2
    a, b = nodes
    # not cleared: the cycle is intact and the tensor is alive with its data
    assert a.other is b and b.other is a
    holder = a if hasattr(a, "t") else b
    assert holder.t.data_ptr() == ptr
    assert holder.t.sum().item() == sum(range(16))
    assert not any(type(o) is Node for o in gc.garbage)


def test_observer_keeping_one_object_keeps_what_it_reaches(track):
    Node = new_class()
    Other = new_class("Other")
    kept = []

    def observer(garbage):
        kept.extend(o for o in garbage if type(o) is Node and hasattr(o, "t"))

    track(tensorgc.observe_garbage(observer))
    make_pair(Node, T(10))
    other_refs, _ = make_tensor_free_pair(Other)
    gc.collect()
    assert len(kept) == 1
    a = kept[0]
    assert a.other.other is a
    assert a.t.shape == (10,)
    assert a.other.__dict__ == {"other": a}
    # what nobody kept was freed
    assert all(r() is None for r in other_refs)
    assert instances(Other) == []


# --------------------------------------------------------------------------
# report fields
# --------------------------------------------------------------------------


def test_report_fields(track):
    Node = new_class()
    expected_device = str(T(1).device)
    report, (refs, ptr) = collect_one_report(
        track, lambda: make_pair(Node, T(256, 256)), with_info=True
    )
    assert isinstance(report, tensorgc.CycleReport)
    assert isinstance(report.text, str)
    assert report.text.splitlines()[0].startswith("tensorgc:")
    assert isinstance(report.dot, str) and report.dot.strip()
    assert "<svg" in report.svg
    assert "<svg" in report.html
    assert len(report.tensors) == 1
    info = report.tensors[0]
    assert info["shape"] == (256, 256) and type(info["shape"]) is tuple
    assert info["dtype"] == "float32"
    assert info["device"] == expected_device
    assert info["nbytes"] == 262144
    assert info["data_ptr"] == ptr
    assert info["stack"] is None or isinstance(info["stack"], str)
    assert info["type"] == "Tensor"
    assert report.nbytes == 262144
    assert report.objects >= 2
    assert report.garbage >= 3
    assert report.generation == 2
    assert len(report.groups) == 1
    group = report.groups[0]
    assert set(group) >= {"count", "objects", "tensors", "nbytes", "hint", "cycle"}
    assert group["count"] == 1
    assert group["nbytes"] == 262144
    assert isinstance(group["hint"], str) and group["hint"]
    assert isinstance(group["cycle"], str)
    assert report.hints == [g["hint"] for g in report.groups]


def test_svg_is_cached(track):
    report = collect_one_report(track, build_attribute)
    first = report.svg
    assert "<svg" in first
    assert report.svg is first


def _dtype_cycle():
    Node = new_class()
    a = Node()
    a.me = a
    a.t = torch.ones(3, 5, dtype=torch.float16, device=DEVICE)
    del a


def test_report_dtype_and_shape(track):
    report = collect_one_report(track, _dtype_cycle)
    (info,) = report.tensors
    assert info["dtype"] == "float16"
    assert info["shape"] == (3, 5)
    assert info["nbytes"] == 30


def _shared_storage_cycle():
    Node = new_class()
    base = T(256, 256)
    a, b = Node(), Node()
    a.other, b.other = b, a
    a.v = base[:128]  # two views of one 256 KiB storage
    b.v = base[128:]
    del a, b, base


def test_shared_storage_counted_once(track):
    report = collect_one_report(track, _shared_storage_cycle)
    assert len(report.tensors) == 2
    # `nbytes` of a tensor entry: bytes of its storage
    assert [t["nbytes"] for t in report.tensors] == [262144, 262144]
    assert report.nbytes == 262144


@pytest.mark.parametrize("generation", [0, 1, 2])
def test_generation(track, generation):
    report = collect_one_report(track, build_attribute, generation=generation)
    assert report.generation == generation


# --------------------------------------------------------------------------
# grouping and bounded output (no timing here; see bench/)
# --------------------------------------------------------------------------


def test_identical_cycles_are_grouped(track):
    Node = new_class()

    def build():
        for _ in range(1000):
            a, b = Node(), Node()
            a.other, b.other = b, a
            a.t = T(16)  # 64 bytes each
        del a, b

    report = collect_one_report(track, build)
    assert len(report.groups) == 1
    group = report.groups[0]
    assert group["count"] == 1000
    assert group["nbytes"] == 1000 * 64
    assert report.nbytes == 1000 * 64
    assert "Node" in group["cycle"]
    assert report.garbage >= 3000
    assert instances(Node) == []


def _groups(report):
    return [(g["count"], g["objects"], g["tensors"], g["nbytes"], g["signature"])
            for g in report.groups]


def test_observers_with_other_filters_group_the_same_leaks_alike(track):
    """Three identical leaks, one collection, two observers whose filters select the same
    tensors (so each gets a report of its own): both count 3. The first report's naming makes
    the drawn instances' managed __dict__ (3.11+) and adds it to the garbage; the second must
    see through it as the first did, not count those leaks as another shape (count 2 and 1)."""
    Node = new_class()
    first, second = [], []
    track(tensorgc.observe_cycles(first.append, device=DEVICE))
    track(tensorgc.observe_cycles(second.append, device=lambda t: t.dtype == torch.float32))
    for _ in range(3):
        make_pair(Node)
    gc.collect()
    assert len(first) == len(second) == 1
    assert _groups(first[0]) == [(3, 3, 3, 3 * 64, first[0].groups[0]["signature"])]
    assert _groups(second[0]) == _groups(first[0])
    assert instances(Node) == []


def test_an_instance_dict_made_before_the_leak_does_not_split_its_group(track):
    """vars() makes a 3.11+ instance's managed __dict__, which its tp_traverse then reports:
    the leak still has the shape of the others (one group of 3, 3 objects each)."""
    Node = new_class()

    def build():
        for i in range(3):
            a, b = Node(), Node()
            a.other, b.other = b, a
            a.t = T(16)
            if i == 1:
                vars(a), vars(b)
        del a, b

    report = collect_one_report(track, build)
    assert [(g["count"], g["objects"], g["nbytes"]) for g in report.groups] == [(3, 3, 3 * 64)]


def test_large_ring_output_is_bounded(track):
    Node = new_class()

    def build():
        nodes = [Node() for _ in range(10_000)]
        for i, node in enumerate(nodes):
            node.next = nodes[(i + 1) % len(nodes)]
        nodes[1234].t = T(8)
        del nodes, node

    report = collect_one_report(track, build)
    assert report.garbage >= 10_000
    assert report.objects <= 500
    assert len(report.tensors) == 1
    assert len(report.html) < 2_000_000
    assert "<svg" in report.html
    assert instances(Node) == []


# --------------------------------------------------------------------------
# fix hints
# --------------------------------------------------------------------------


def _self_reference():
    Node = new_class()
    a = Node()
    a.me = a
    a.t = T()
    del a


@pytest.mark.parametrize(
    "builder, words",
    [
        (build_closure, ("closure", "lambda")),
        (build_bound_method, ("weakmethod", "bound method")),
        (_self_reference, ("itself",)),
        (build_traceback, ("traceback",)),
    ],
    ids=["lambda", "bound-method", "self-reference", "traceback"],
)
def test_fix_hints(track, builder, words):
    report = collect_one_report(track, builder)
    assert report.hints
    assert len(report.hints) == len(report.groups)
    assert any(w in h.lower() for h in report.hints for w in words), report.hints


# --------------------------------------------------------------------------
# device filter
# --------------------------------------------------------------------------


def _cpu_cycle():
    make_pair(new_class(), torch.zeros(64))


@pytest.mark.parametrize(
    "device",
    ["cpu", "any", torch.device("cpu")],
    ids=["cpu", "any", "torch.device-cpu"],
)
def test_device_filter_sees_cpu_tensors(track, device):
    report = collect_one_report(track, _cpu_cycle, device=device)
    assert [t["device"] for t in report.tensors] == ["cpu"]


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda")], ids=str)
def test_cuda_filter_ignores_cpu_tensors(track, device):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=device))
    _cpu_cycle()
    gc.collect()
    assert reports == []


@pytest.mark.skipif(not IS_CUDA, reason="needs TENSORGC_TEST_DEVICE=cuda")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda"), "any"], ids=str)
def test_cuda_filter_sees_cuda_tensors(track, device):
    report = collect_one_report(track, lambda: make_pair(new_class(), T(8)), device=device)
    assert [t["device"] for t in report.tensors] == ["cuda:0"]


@pytest.mark.skipif(not IS_CUDA, reason="needs TENSORGC_TEST_DEVICE=cuda")
def test_cpu_filter_ignores_cuda_tensors(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device="cpu"))
    make_pair(new_class(), T(8))
    gc.collect()
    assert reports == []


def test_other_device_ignores_test_device(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=OTHER_DEVICE))
    make_pair(new_class(), T(8))
    gc.collect()
    assert reports == []


def test_device_predicate(track):
    seen_types = set()

    def big(t):
        seen_types.add(type(t))
        return t.numel() > 10

    reports = []
    track(tensorgc.observe_cycles(reports.append, device=big))
    make_pair(new_class(), T(4))  # numel 4: not of interest
    gc.collect()
    assert reports == []
    make_pair(new_class(), T(4))
    make_pair(new_class(), T(10, 10))
    gc.collect()
    assert len(reports) == 1
    assert [t["shape"] for t in reports[0].tensors] == [(10, 10)]
    assert seen_types and all(issubclass(t, torch.Tensor) for t in seen_types)


@pytest.mark.parametrize("func", ["observe_cycles", "observe_tensor_cycles"])
def test_bad_device_string(func):
    call_expecting(ValueError, getattr(tensorgc, func), lambda x: None, device="not-a-device")


def test_bad_device_string_warn():
    call_expecting(ValueError, tensorgc.warn_tensor_cycles, device="not-a-device")


@pytest.mark.parametrize("bad", [3, 2.5, b"cpu", ["cpu"]], ids=repr)
@pytest.mark.parametrize("func", ["observe_cycles", "observe_tensor_cycles"])
def test_bad_device_type(func, bad):
    # docs/api.md: "TypeError (other types)" -- including int, although
    # torch.device(3) itself would be accepted.
    call_expecting(TypeError, getattr(tensorgc, func), lambda x: None, device=bad)


@pytest.mark.parametrize("func", ["observe_garbage", "observe_cycles", "observe_tensor_cycles"])
@pytest.mark.parametrize("callback", [None, 42, "print"], ids=repr)
def test_non_callable_callback(func, callback):
    call_expecting(TypeError, getattr(tensorgc, func), callback)


def test_device_is_keyword_only():
    call_expecting(TypeError, tensorgc.observe_cycles, lambda r: None, "cpu")


# --------------------------------------------------------------------------
# observe_tensor_cycles
# --------------------------------------------------------------------------


def test_observe_tensor_cycles_html(track):
    import re

    pages = []
    track(tensorgc.observe_tensor_cycles(pages.append, device=DEVICE))
    build_closure()
    gc.collect()
    assert len(pages) == 1
    page = pages[0]
    assert isinstance(page, str)
    assert page.startswith("<!DOCTYPE html>")
    assert "<svg" in page
    # self-contained: no external script/stylesheet/image
    assert not re.search(r"""\b(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert not re.search(r"""url\(\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert not re.search(r"@import", page, re.I)


def test_page_table_and_dot_are_made_from_what_the_build_kept(track):
    """The DOT and the page's summary table are made on first use, from what the report kept when
    it was built: the garbage is gone by then, the rows match .groups, user strings in them are
    escaped, and changing the lists a report hands out changes neither."""
    import html as html_mod
    import re

    def build():
        Node = new_class()
        for _ in range(3):  # three identical leaks: one group, count 3
            make_pair(Node)
        Owner = new_class("Owner")
        o = Owner()
        o.t = T(64)
        o.box = {'<b>"k"</b>': o}  # a hostile key on the cycle's path
        del o

    report = collect_one_report(track, build)
    gc.collect()  # whatever the hook left; the report needs none of it
    groups = [dict(g) for g in report.groups]
    assert len(groups) == 2 and sorted(g["count"] for g in groups) == [1, 3]
    dot = report.dot
    assert report.dot is dot  # decoded once
    report.groups.clear()  # the table does not read the list it hands out
    page = report.html
    table = re.search(r'<table id="groups">(.*?)</table>', page, re.S).group(1)
    rows = re.findall(r"<tr><td class=\"num\">(\d+)</td><td class=\"num\">([\d,]+)</td>"
                      r"<td class=\"num\">([\d,]+)</td><td class=\"num\">([\d,]+)</td>"
                      r"<td class=\"num\">([^<]*)</td><td>(.*?)</td><td>(.*?)</td></tr>", table)
    assert [r[0] for r in rows] == ["1", "2"]
    for r, g in zip(rows, groups):
        assert (int(r[1]), int(r[2]), int(r[3])) == (g["count"], g["objects"], g["tensors"])
        assert html_mod.unescape(r[5]) == g["cycle"] and html_mod.unescape(r[6]) == g["hint"]
    assert any('<b>"k"</b>' in g["cycle"] for g in groups)
    assert "<b>" not in table and "&lt;b&gt;&quot;k&quot;&lt;/b&gt;" in table
    assert '\\"k\\"' in dot and "<b>" in dot  # DOT escapes quotes; HTML-like text is plain there


def test_dot_is_drawn_only_for_reports_someone_keeps(track):
    """The DOT waits until it is asked for: a report the callback only reads is never drawn; one
    it keeps is drawn before the garbage goes, from the builder rather than from what .tensors
    hands out, and keeps none of the garbage alive; one whose .dot was read is drawn once."""
    dots = tensorgc._tensorgc_testing._report_dots
    Node = new_class()

    lengths = []
    handle = track(tensorgc.observe_cycles(lambda r: lengths.append(len(r.text)), device=DEVICE))
    before = dots()
    refs, _ = make_pair(Node)
    gc.collect()
    assert len(lengths) == 1 and lengths[0] > 0
    assert dots() == {"kept": before["kept"], "skipped": before["skipped"] + 1}
    assert all(r() is None for r in refs)
    handle.remove()

    kept = []

    def keep(report):
        for t in report.tensors:
            t["stack"] = 42  # what .tensors hands out is the user's to change
        kept.append(report)

    handle = track(tensorgc.observe_cycles(keep, device=DEVICE))
    before = dots()
    refs, _ = make_pair(Node)
    gc.collect()
    assert dots() == {"kept": before["kept"] + 1, "skipped": before["skipped"]}
    assert all(r() is None for r in refs)  # the kept report holds none of the garbage
    dot = kept[0].dot
    assert dot.count('label=".other"') == 2 and dot.count('label=".t"') == 1
    assert "Tensor float32[16]" in dot and "42" not in dot
    assert kept[0].dot is dot and "<svg" in kept[0].svg
    handle.remove()

    read_in_callback = []

    def read(report):
        read_in_callback.append(report.dot)
        kept.append(report)

    track(tensorgc.observe_cycles(read, device=DEVICE))
    before = dots()
    make_pair(Node)
    gc.collect()
    assert dots() == before  # drawn when asked, nothing left to settle
    assert kept[-1].dot is read_in_callback[0] and 'label=".t"' in read_in_callback[0]


def test_lists_are_made_for_reports_someone_reads_or_keeps(track):
    """A report's lists (tensors, groups, edges, hints) are made on first use: a callback that
    reads only the text makes none. One kept without reading them has them made before the
    garbage goes, equal to what reading them in the callback gives; reading .dot first, or the
    repr, makes them once, and they still read the same afterwards."""
    made = tensorgc._tensorgc_testing._report_lists
    Node = new_class()

    texts = []
    handle = track(tensorgc.observe_cycles(lambda r: texts.append(r.text), device=DEVICE))
    before = made()
    refs, _ = make_pair(Node)
    gc.collect()
    assert len(texts) == 1 and "Node" in texts[0]
    assert made() == before
    assert all(r() is None for r in refs)
    handle.remove()

    def lists(r):
        return (r.tensors, r.groups, r.edges, r.hints)

    read, kept = [], []

    def both(report):
        read.append(lists(report))
        kept.append(report)

    handle = track(tensorgc.observe_cycles(both, device=DEVICE))
    before = made()
    refs, ptr = make_pair(Node)
    gc.collect()
    assert made() == before + 1 and lists(kept[0]) == read[0]
    assert read[0][0][0]["data_ptr"] == ptr and read[0][0][0]["shape"] == (16,)
    handle.remove()

    kept_unread = []
    handle = track(tensorgc.observe_cycles(kept_unread.append, device=DEVICE))
    before = made()
    refs, ptr = make_pair(Node)
    gc.collect()
    assert made() == before + 1  # made when the detector let go of it, while the garbage lived
    assert all(r() is None for r in refs)
    tensors, groups, edges, hints = lists(kept_unread[0])
    assert [t["data_ptr"] for t in tensors] == [ptr]
    assert {**tensors[0], "data_ptr": 0} == {**read[0][0][0], "data_ptr": 0}
    assert groups == read[0][1] and groups[0]["count"] == groups[0]["tensors"] == 1
    assert sorted(edges) == sorted(read[0][2]) and hints == read[0][3]
    assert made() == before + 1  # read again: not made again
    handle.remove()

    dot_first, reprs = [], []

    def dot_then_keep(report):
        dot_first.append(report.dot)  # the model is gone after the drawing: the lists were made
        reprs.append(repr(report))
        kept.append(report)

    track(tensorgc.observe_cycles(dot_then_keep, device=DEVICE))
    before = made()
    make_pair(Node)
    gc.collect()
    assert made() == before + 1
    assert "1 tensors" in reprs[0] and "1 leak groups" in reprs[0]
    assert lists(kept[-1])[1][0]["signature"] == read[0][1][0]["signature"]


def test_a_callback_that_empties_the_garbage_leaves_the_lists_whole(track):
    """A callback that reaches the garbage (gc.get_objects), breaks its cycle and empties every
    list holding it that it can find (gc.get_referrers), then reads the report: its lists and
    repr are made from what the report took at build (the signatures among them), never from
    the objects the callback freed."""
    Node = new_class("Emptied")
    seen = []

    def hostile(report):
        nodes = [o for o in gc.get_objects() if type(o) is Node]
        holders = [h for n in nodes for h in gc.get_referrers(n) if type(h) is list and h is not nodes]
        for n in nodes:
            n.__dict__.clear()
        for h in holders:
            h.clear()
        del nodes, holders
        junk = [bytearray(64) for _ in range(1000)]  # reuse what was freed, if anything was
        seen.append((report.groups[0]["signature"], report.groups[0]["cycle"],
                     [t["shape"] for t in report.tensors], repr(report)))
        del junk

    track(tensorgc.observe_cycles(hostile, device=DEVICE))
    refs = []
    for _ in range(3):
        refs += make_pair(Node)[0]
        gc.collect()
    assert len(seen) == 3 and len({s[0] for s in seen}) == 1
    assert all(s[1].startswith("Emptied") and s[2] == [(16,)] and "1 tensors" in s[3] for s in seen)
    assert all(r() is None for r in refs)


_EMPTIED_SCRIPT = r"""
import gc, sys, types, weakref, torch, tensorgc
device = sys.argv[1]
class Hub: pass
class Spoke: pass
class Marked(torch.Tensor): pass
kept, freed = [], []
def hostile(report):
    kept.append(report)
    objs = [o for o in gc.get_objects() if type(o) in (Hub, Spoke) or
            (type(o) is types.FunctionType and o.__qualname__.endswith("build.<locals>.fn"))]
    holders = [h for h in gc.get_referrers(*objs) if type(h) is list and h is not objs]
    for o in objs:
        if type(o) is types.FunctionType:
            for cell in o.__closure__:
                cell.cell_contents = None
        else:
            o.__dict__.clear()
    for h in holders:
        h.clear()
    ref = weakref.ref(objs[0])
    del objs, holders, o
    freed.append(ref() is None)
    junk = [bytearray(64) for _ in range(4000)]  # reuse what was freed
def build():
    hub = Hub()  # a group too large to draw whole
    hub.t = torch.zeros(16, device=device).as_subclass(Marked)
    hub.spokes = [Spoke() for _ in range(400)]
    for s in hub.spokes:
        s.hub = hub
    x = torch.zeros(64, device=device)  # more bytes: drawn first, whole; fn's closure holds fn and x
    def fn(p):
        return fn(not p) if p else x
h = tensorgc.observe_cycles(hostile, device=device)
build()
gc.collect()
h.remove()
print("freed", freed)
print("dot", kept[0].dot)
"""


def test_a_kept_report_draws_what_it_took_at_build_when_the_garbage_was_emptied():
    """A callback keeps its report, then breaks the garbage's references and empties every list
    holding it, which frees it: the report's DOT, drawn when the detector lets go of the report,
    still names the tensor's class, the closure cell and a large group's types, all taken at
    build, never read from the freed objects. In a process of its own, on the system allocator,
    where reading freed memory crashes instead of finding stale objects."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _EMPTIED_SCRIPT, DEVICE], capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                              "PYTHONMALLOC": "malloc"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "freed [True]" in out.stdout, out.stdout + out.stderr  # the callback did free them
    dot = out.stdout.split("dot ", 1)[1]
    assert "__main__.Marked: Marked float32[16]" in dot
    assert re.search(r"x: __closure__\[\d\]\.cell_contents", dot)
    assert re.search(r"more objects in this leak\\l(.+\\l)*Spoke ×\d+\\l", dot)


_NOMEM_SCRIPT = r"""
import gc, sys, _testcapi, torch, tensorgc
gc.disable()
class Node: pass
a, b = Node(), Node()
a.other, b.other, a.t = b, a, torch.zeros(16)
del a, b
kept = []
def keep(report):
    kept.append(report)
    _testcapi.set_nomemory(1, 41)  # the next 40 allocations fail: the lists' among them
h = tensorgc.observe_cycles(keep, device="cpu")
try:
    gc.collect()
finally:
    _testcapi.remove_mem_hooks()
h.remove()
r = kept[0]
print("repr", repr(r).startswith("<tensorgc.CycleReport: generation "))
for name in ("tensors", "groups", "edges", "hints", "html"):
    try:
        print(name, "whole" if getattr(r, name) else "empty")
    except MemoryError as e:
        print(name, "MemoryError" if "could not be made" in str(e) else repr(e))
print("text", "Tensor float32[16]" in r.text)
"""


def test_lists_a_kept_report_could_not_make_raise_memory_error():
    """Memory that runs out while the detector lets go of a report someone kept: its lists,
    made then, are either whole or raise MemoryError when read (never None, never 'cleared by
    the collector'), and its repr still comes. In a process of its own: the allocations that
    fail there are the collector's and torch's too."""
    pytest.importorskip("_testcapi")
    import subprocess

    out = subprocess.run([sys.executable, "-c", _NOMEM_SCRIPT], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines.get("repr") == "True" and lines.get("text") == "True", out.stdout + out.stderr
    for name in ("tensors", "groups", "edges", "hints", "html"):
        assert lines.get(name) in ("whole", "MemoryError"), out.stdout + out.stderr


def test_reprs_on_the_dot_are_taken_before_the_callback(track):
    """A drawn object's __repr__ runs while the report is built, before any callback: drawing the
    DOT later runs no user code. A repr that reads the report it appears in (it can reach it
    through a callback's list) finds nothing there yet, and the kept report's DOT is complete."""
    kept, events = [], []

    class Node:
        def __repr__(self):
            events.append("repr")
            if kept:
                kept[0].dot  # never reached: the report is not anyone's yet
            return "Node!"

    def keep(report):
        events.append("callback")
        kept.append(report)

    track(tensorgc.observe_cycles(keep, device=DEVICE))
    make_pair(Node)
    gc.collect()
    assert len(kept) == 1 and events and events[-1] == "callback"
    assert set(events[:-1]) == {"repr"}
    assert "digraph" in kept[0].dot and "Node!" in kept[0].dot
    assert "<svg" in kept[0].svg
    assert events[-1] == "callback"  # drawing and rendering ran no repr


def test_dot_of_reports_beyond_the_shared_ones(track):
    """Observers with distinct filters get reports of their own; past the eight the detector
    shares between observers, each is settled on its own, and every kept one has its DOT."""
    kept = [[] for _ in range(10)]
    for i in range(10):
        track(tensorgc.observe_cycles(kept[i].append, device=lambda t, i=i: True))
    Node = new_class()
    before = tensorgc._tensorgc_testing._report_dots()
    refs, _ = make_pair(Node)
    gc.collect()
    assert tensorgc._tensorgc_testing._report_dots()["kept"] == before["kept"] + 10
    assert all(r() is None for r in refs)
    assert len({id(k[0]) for k in kept}) == 10
    for k in kept:
        assert len(k) == 1 and k[0].dot.count('label=".other"') == 2


def test_observe_cycles_html_is_self_contained(track):
    import re

    report = collect_one_report(track, build_traceback)
    page = report.html
    assert page.startswith("<!DOCTYPE html>")
    assert "<svg" in page
    assert "<table" in page.lower()  # summary table
    assert not re.search(r"""\b(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
