"""create_graph, to_dot and to_html over any objects (torch.utils.viz._cycles' functions, drawn
by tensorgc): torch's semantics (what is kept, the Node fields), escaping and bounds on every
string, and the bounded, self-contained page. The cycle pages' own additions for torch's
test_cycles (the tensor's class, the closure's cell_contents) are checked here too."""
import gc
import re

import pytest

import tensorgc
from tensorgc import Node, create_graph, to_dot, to_html
from tensorgc.object_graph import cuda_allocation_context, is_cuda_tensor
from _util import T, new_class

torch = pytest.importorskip("torch")


def _closure_garbage():
    """gc.garbage after DEBUG_SAVEALL of a closure cycle holding a tensor (torch's test)."""
    def create():
        x = T(3, 4)

        def foo(p):
            return foo(not p) if p else x
        return foo

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        create()
        gc.collect()
    finally:
        gc.set_debug(0)
    garbage = list(gc.garbage)
    gc.garbage.clear()
    return garbage


def _is_tensor(obj):
    return isinstance(obj, torch.Tensor)


def test_create_graph_keeps_what_reaches_a_root(gc_state):
    garbage = _closure_garbage()
    nodes = create_graph(garbage, filter=_is_tensor)
    assert all(isinstance(n, Node) for n in nodes)
    kinds = sorted(n.label.split("\n")[0].split(" ")[0] for n in nodes)
    assert kinds == ["Tensor", "cell", "cell", "function", "tuple"]
    roots = [n for n in nodes if n.root]
    assert len(roots) == 1 and roots[0].label.startswith("Tensor float32[3, 4] on ")
    labels = {lab for n in nodes for lab, _ in n.referrents}
    assert {"cell_contents", "__closure__", "[0]", "[1]"} <= labels
    for n in nodes:
        for _, j in n.referrents:
            assert 0 <= j < len(nodes)
    tensor = nodes.index(roots[0])
    assert any(j == tensor and lab == "cell_contents" for n in nodes for lab, j in n.referrents)


def test_what_reaches_no_root_is_left_out(gc_state):
    Node_ = new_class()
    a, b, lone = Node_(), Node_(), Node_()
    a.b, b.t = b, T()
    lone.other = a  # reaches a root through a: kept
    unrelated = [1, 2]
    nodes = create_graph([a, b, b.t, lone, unrelated], filter=_is_tensor)
    assert len(nodes) == 4
    assert not any("list" in n.label for n in nodes)
    ref_labels = sorted(lab for n in nodes for lab, _ in n.referrents)
    assert ref_labels == [".b", ".other", ".t"]


@pytest.mark.parametrize("made", [False, True])
def test_an_instance_whose_dict_was_made_keeps_its_references(gc_state, made):
    """From 3.11 an instance keeps its attributes inline until something asks for its __dict__
    (vars(), obj.__dict__); then its references go through that dict, which the list does not
    hold: they are read through it as before, not lost with the instance."""
    Node_ = new_class()
    a, b = Node_(), Node_()
    a.b, b.a, a.t = b, a, T()
    if made:
        vars(a), vars(b)
    nodes = create_graph([a, b, a.t], filter=_is_tensor)
    assert [(n.label.split(" ")[0], n.referrents) for n in nodes] == [
        (Node_.__name__, [(".b", 1), (".t", 2)]), (Node_.__name__, [(".a", 0)]), ("Tensor", [])]


def test_default_filter_is_cuda_tensors(gc_state):
    garbage = _closure_garbage()
    nodes = create_graph(garbage)
    if not torch.cuda.is_available() or not any(is_cuda_tensor(o) for o in garbage):
        assert nodes == []
    assert not is_cuda_tensor(T(device="cpu")) and not is_cuda_tensor(object())


def test_context_is_asked_for_the_kept_nodes_only(gc_state):
    asked = []

    def context(obj):
        asked.append(obj)
        return "where: here" if _is_tensor(obj) else None

    t = T()
    holder = {"t": t}
    nodes = create_graph([holder, t, [0]], context=context, filter=_is_tensor)
    assert [n.context for n in nodes] == [None, "where: here"]
    assert len(asked) == 2 and not any(isinstance(o, list) for o in asked)


def test_proxies_and_repeats(gc_state):
    Node_ = new_class()
    a = Node_()
    a.t = T()
    import weakref
    nodes = create_graph([a, a, weakref.proxy(a), a.t], filter=_is_tensor)
    assert len(nodes) == 2


def test_cuda_allocation_context_without_history_says_nothing():
    ctx = cuda_allocation_context()
    assert ctx(T()) is None and ctx(object()) is None


def test_to_dot_names_nodes_by_index_and_colours_roots():
    nodes = [Node("a", None, False, [("x", 1)]), Node("b", "ctx", True, [])]
    dot = to_dot(nodes)
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert re.search(r'n1 \[label="b\\l.*color="#c62828"', dot)
    assert 'n0 -> n1 [label="x"' in dot


def test_torch_nodes_and_plain_tuples_are_taken():
    _cycles = pytest.importorskip("torch.utils.viz._cycles")
    nodes = [_cycles.Node("a", None, True, []), ("b", None, False, [("r", 0)])]
    assert 'n1 -> n0 [label="r"' in to_dot(nodes)


@pytest.mark.parametrize("bad, err", [
    ([Node("a", None, False, [("x", 5)])], ValueError),
    ([Node("a", None, False, [("x", -1)])], ValueError),
    ([Node(3, None, False, [])], TypeError),
    ([Node("a", 3, False, [])], TypeError),
    ([Node("a", None, False, [("x",)])], TypeError),
    ([Node("a", None, False, [(1, 0)])], TypeError),
    ([object()], TypeError),
])
def test_malformed_nodes_are_refused(bad, err):
    with pytest.raises(err, match="node 0"):
        to_dot(bad)


HOSTILE = 'x"]; n9 [label="pwn\\" </title><script>alert(1)</script> & \x00\x07\n'


def test_every_string_is_escaped_and_cut():
    long = "L" * 10_000
    nodes = [Node(HOSTILE + long, HOSTILE * 3, True, [(HOSTILE + long, 1)]),
             Node("b", None, False, [])]
    dot = to_dot(nodes)
    assert not re.search(r"^\s*n9 \[", dot, re.M)  # inside a quoted string, never a statement
    assert re.findall(r"^  (n\d+) \[", dot, re.M) == ["n0", "n1"]
    assert "\x00" not in dot and "\x07" not in dot
    assert "(10" in dot and "chars)" in dot  # cut, with the true length
    assert len(dot) < 20_000
    html = to_html(nodes)
    assert "<script>alert" not in html
    assert html.count("<script>") == 1  # the page's own pan/zoom script


def test_bounds_of_a_large_graph():
    n = 1000
    nodes = [Node(f"obj{i}", None, i == 0, [("next", (i + 1) % n), ("r", 0), ("s", (i * 7) % n)])
             for i in range(n)]
    dot = to_dot(nodes)
    drawn = re.findall(r"^  n(\d+) \[label=", dot, re.M)
    edges = re.findall(r"^  n\d+ -> n\d+ ", dot, re.M)
    assert len(drawn) == 300 and "0" in drawn  # the root first
    assert len(edges) <= 450
    assert "700 more objects" in dot


def test_to_html_is_a_self_contained_page(gc_state):
    nodes = create_graph(_closure_garbage(), filter=_is_tensor,
                         context=lambda o: "made at: test.py:1" if _is_tensor(o) else None)
    html = to_html(nodes)
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert "made at: test.py:1" in html and "cell_contents" in html
    assert not re.search(r"""(src|href)=["']https?:""", html)
    assert "1 root (red)" in html


def test_the_cycle_page_names_the_tensor_class_and_the_closure_cell(track, device):
    pages = []
    track(tensorgc.observe_tensor_cycles(pages.append, device=device))

    def create():
        x = T(3, 4)

        def foo(p):
            return foo(not p) if p else x
        return foo

    create()
    gc.collect()
    assert len(pages) == 1
    assert "torch.Tensor: Tensor float32[3, 4]" in pages[0]
    assert re.search(r"closure x: __closure__\[\d\]\.cell_contents", pages[0])


def test_empty():
    assert create_graph([], filter=_is_tensor) == []
    assert to_dot([]).startswith("digraph")
    assert "0 objects" in to_html([])


class _FakeCudaTensor:
    """What cuda_allocation_context reads of a CUDA tensor, on a machine without CUDA."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.device = type("device", (), {"type": "cuda"})()

    def untyped_storage(self):
        return type("storage", (), {"data_ptr": lambda s: self.ptr})()


def _fake_torch(per_address):
    import types

    frames = [{"filename": "/p/model.py", "line": 3, "name": "forward"},
              {"filename": "/pytorch/c10/Alloc.cpp", "line": 9, "name": "malloc"},
              {"filename": "/p/train.py", "line": 7, "name": "step"}]
    snap = {"segments": [{"address": 4096, "blocks": [
        {"size": 512, "state": "inactive"},
        {"size": 512, "state": "active_allocated", "frames": frames}]}]}
    c = types.SimpleNamespace(_cuda_isHistoryEnabled=lambda: True)
    if per_address:
        c._cuda_allocationTraceback = lambda p: frames if p == 4608 else None
    return types.SimpleNamespace(
        Tensor=_FakeCudaTensor, _C=c, _subclasses=None,
        cuda=types.SimpleNamespace(memory=types.SimpleNamespace(_snapshot=lambda: snap),
                                   is_initialized=lambda: True))


@pytest.mark.parametrize("per_address", [True, False], ids=["by-address", "from-snapshot"])
def test_cuda_allocation_context_reads_torchs_stacks(monkeypatch, per_address):
    import sys

    monkeypatch.setitem(sys.modules, "torch", _fake_torch(per_address))
    ctx = cuda_allocation_context()
    assert ctx(_FakeCudaTensor(4608)) == "/p/model.py:3:forward\n/p/train.py:7:step"
    assert ctx(_FakeCudaTensor(4096)) is None and ctx(object()) is None


def test_cuda_allocation_context_asks_nothing_before_cudas_initialization(monkeypatch):
    import sys

    fake = _fake_torch(True)
    fake.cuda.is_initialized = lambda: False

    def asked():
        raise AssertionError("asked the allocator before CUDA's initialization")

    fake._C._cuda_isHistoryEnabled = asked
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert cuda_allocation_context()(_FakeCudaTensor(4608)) is None
