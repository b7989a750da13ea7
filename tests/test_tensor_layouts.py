"""Tensors of every layout, counted with their real bytes (contract: docs/api.md, "What a
tensor's bytes are"): strided and jagged nested tensors, sparse COO/CSR/CSC/BSR/BSC, mkldnn,
quantized, meta, and wrapper subclasses, by the cycle detector's report (CycleReport.tensors,
its text) and by MemReporter. Every expected byte count is worked out here from shapes and
element sizes, not read back through the storage API the code under test uses.

Layouts live on the CPU whatever TENSORGC_TEST_DEVICE says: mkldnn and quantized tensors have no
CUDA form in a CPU build, and the counting does not depend on the device.
"""

import gc
import logging
import warnings
import weakref

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from _util import new_class
from tensorgc import MemReporter

pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

I64 = 8  # bytes of an int64 index


# --------------------------------------------------------------------------
# wrapper subclasses
# --------------------------------------------------------------------------


class Wrapper(torch.Tensor):
    """A minimal wrapper subclass: no storage of its own, one inner tensor in self.a, and a
    __torch_dispatch__ that refuses every op."""

    @staticmethod
    def __new__(cls, a):
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a):
        self.a = a

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"Wrapper does not run {func}")


class Pair(torch.Tensor):
    """A traceable wrapper subclass (__tensor_flatten__) of two inner tensors."""

    @staticmethod
    def __new__(cls, a, b):
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a, b):
        self.a = a
        self.b = b

    def __tensor_flatten__(self):
        return ["a", "b"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return Pair(inner["a"], inner["b"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"Pair does not run {func}")


class Opaque(torch.Tensor):
    """A wrapper whose sizes, device and layout all go through a __torch_dispatch__ that raises
    NotImplementedError, and whose Python properties raise too (and say that they ran)."""

    ran = []

    @staticmethod
    def __new__(cls, a):
        return torch.Tensor._make_wrapper_subclass(
            cls, a.shape, dtype=a.dtype, device=a.device, dispatch_sizes_strides_policy="sizes",
            dispatch_device=True, dispatch_layout=True)

    def __init__(self, a):
        self.a = a

    @property
    def shape(self):
        Opaque.ran.append("shape")
        raise RuntimeError("Opaque.shape ran")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"Opaque does not run {func}")


class BadFlatten(Wrapper):
    """__tensor_flatten__ raises: the inner tensors come from its __dict__."""

    def __tensor_flatten__(self):
        raise RuntimeError("BadFlatten.__tensor_flatten__ ran")


class Many(torch.Tensor):
    """A wrapper of more inner tensors than are followed."""

    @staticmethod
    def __new__(cls, parts):
        a = parts[0]
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, parts):
        # not "names": that is the named-tensor property of torch.Tensor
        self.part_names = [f"p{i}" for i in range(len(parts))]
        for name, p in zip(self.part_names, parts):
            setattr(self, name, p)

    def __tensor_flatten__(self):
        return list(self.part_names), None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError


# --------------------------------------------------------------------------
# one tensor of each layout, with its true byte count and explanation
# --------------------------------------------------------------------------


def make_strided():
    t = torch.ones(5, 3)
    return t, 5 * 3 * 4, "strided: untyped_storage"


def make_nested_strided():
    comps = [torch.ones(2, 3), torch.ones(4, 3)]
    nt = torch.nested.nested_tensor(comps, layout=torch.strided)
    return nt, sum(c.numel() * c.element_size() for c in comps), "nested (strided): its buffer"


def make_nested_jagged():
    comps = [torch.ones(2, 3), torch.ones(5, 3)]
    nt = torch.nested.nested_tensor(comps, layout=torch.jagged)
    values = sum(c.numel() * c.element_size() for c in comps)
    offsets = (len(comps) + 1) * I64
    names = nt.__tensor_flatten__()[0]
    assert names[:2] == ["_values", "_offsets"]
    # the cached min/max sequence lengths are tensors that hold their number in a 0-sized shape
    assert all(getattr(nt, n).numel() == 0 for n in names[2:])
    return nt, values + offsets, "nested (jagged): " + " + ".join(names)


def make_nested_jagged_from_values():
    values = torch.ones(10, 4, dtype=torch.float64)
    offsets = torch.tensor([0, 3, 10])
    nt = torch.nested.nested_tensor_from_jagged(values, offsets)
    return nt, 10 * 4 * 8 + 3 * I64, "nested (jagged): _values + _offsets"


# Sparse tensors are made from index and value tensors of their own: converting a dense tensor
# may leave an index tensor a view of a larger storage (CSR's col_indices of the COO indices), and
# the storage, all of it, is what is held.
NNZ = 7


def make_coo():
    indices = torch.tensor([[0, 1, 0, 3, 2, 3, 2], [0, 1, 4, 3, 2, 5, 4]])
    sp = torch.sparse_coo_tensor(indices, torch.ones(NNZ), (4, 6), check_invariants=True)
    return sp, 2 * NNZ * I64 + NNZ * 4, "sparse_coo: indices + values"


def make_csr():
    crow = torch.tensor([0, 2, 3, 5, 7])
    col = torch.tensor([0, 4, 1, 2, 4, 3, 5])
    sp = torch.sparse_csr_tensor(crow, col, torch.ones(NNZ, dtype=torch.float64), (4, 6),
                                 check_invariants=True)
    return (sp, (4 + 1) * I64 + NNZ * I64 + NNZ * 8,
            "sparse_csr: crow_indices + col_indices + values")


def make_csc():
    ccol = torch.tensor([0, 1, 2, 3, 4, 6, 7])
    row = torch.tensor([0, 1, 2, 3, 0, 2, 3])
    sp = torch.sparse_csc_tensor(ccol, row, torch.ones(NNZ), (4, 6), check_invariants=True)
    return (sp, (6 + 1) * I64 + NNZ * I64 + NNZ * 4,
            "sparse_csc: ccol_indices + row_indices + values")


def make_bsr():
    crow = torch.tensor([0, 2, 4])          # 2 block rows of 2 x 2 blocks, 4 blocks
    col = torch.tensor([0, 2, 1, 2])
    sp = torch.sparse_bsr_tensor(crow, col, torch.ones(4, 2, 2), (4, 6), check_invariants=True)
    return (sp, (2 + 1) * I64 + 4 * I64 + 4 * 2 * 2 * 4,
            "sparse_bsr: crow_indices + col_indices + values")


def make_bsc():
    ccol = torch.tensor([0, 1, 2, 4])       # 3 block columns, 4 blocks
    row = torch.tensor([0, 1, 0, 1])
    sp = torch.sparse_bsc_tensor(ccol, row, torch.ones(4, 2, 2, dtype=torch.float16), (4, 6),
                                 check_invariants=True)
    return (sp, (3 + 1) * I64 + 4 * I64 + 4 * 2 * 2 * 2,
            "sparse_bsc: ccol_indices + row_indices + values")


def make_mkldnn():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no mkldnn")
    try:
        t = torch.ones(3, 8).to_mkldnn()
    except RuntimeError as exc:  # pragma: no cover - depends on the build
        pytest.skip(f"to_mkldnn() is not available: {exc}")
    return t, 3 * 8 * 4, "mkldnn: element_size * numel (opaque, no storage to read)"


def make_quantized():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized creation functions are deprecated
        q = torch.quantize_per_tensor(torch.randn(3, 5), 0.1, 0, torch.qint8)
    return q, 3 * 5 * 1, "quantized: its integer storage"


def make_quantized_per_channel():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(torch.randn(3, 5), torch.tensor([0.1, 0.2, 0.3]),
                                       torch.tensor([0, 1, 2]), 0, torch.quint8)
    return q, 3 * 5 * 1, "quantized: its integer storage"


def make_meta():
    return torch.empty(64, 64, device="meta"), 0, "none (meta tensor)"


def make_wrapper():
    return Wrapper(torch.ones(6, 2)), 6 * 2 * 4, "wrapper subclass (__dict__): a"


def make_traceable_wrapper():
    a = torch.ones(4, 4)
    return (Pair(a, torch.ones(3, dtype=torch.float64)), 4 * 4 * 4 + 3 * 8,
            "wrapper subclass (__tensor_flatten__): a + b")


def make_traceable_wrapper_sharing():
    a = torch.ones(4, 4)
    return Pair(a, a[1:3]), 4 * 4 * 4, "wrapper subclass (__tensor_flatten__): a + b"


def make_wrapper_of_sparse():
    a = torch.ones(2, 2)
    sp = make_coo()[0]
    return (Pair(a, sp), 2 * 2 * 4 + NNZ * 2 * I64 + NNZ * 4,
            "wrapper subclass (__tensor_flatten__): a + b.indices + b.values")


def make_wrapper_of_wrapper():
    inner = Pair(torch.ones(3), torch.ones(5))
    return (Pair(torch.ones(2), inner), (2 + 3 + 5) * 4,
            "wrapper subclass (__tensor_flatten__): a + b.a + b.b")


def make_wrapper_of_dict_wrapper():
    return (Pair(torch.ones(2), Wrapper(torch.ones(6))), (2 + 6) * 4,
            "wrapper subclass (__tensor_flatten__): a + b.a")


def make_opaque():
    return Opaque(torch.ones(7)), 7 * 4, "wrapper subclass (__dict__): a"


def make_bad_flatten():
    return BadFlatten(torch.ones(9)), 9 * 4, "wrapper subclass (__dict__): a"


def make_empty_wrapper():
    w = Wrapper(torch.ones(3))
    del w.a
    return w, 0, "none (wrapper subclass without inner tensors)"


LAYOUTS = {
    "strided": make_strided,
    "nested_strided": make_nested_strided,
    "nested_jagged": make_nested_jagged,
    "nested_jagged_from_values": make_nested_jagged_from_values,
    "sparse_coo": make_coo,
    "sparse_csr": make_csr,
    "sparse_csc": make_csc,
    "sparse_bsr": make_bsr,
    "sparse_bsc": make_bsc,
    "mkldnn": make_mkldnn,
    "quantized": make_quantized,
    "quantized_per_channel": make_quantized_per_channel,
    "meta": make_meta,
    "wrapper": make_wrapper,
    "traceable_wrapper": make_traceable_wrapper,
    "traceable_wrapper_sharing": make_traceable_wrapper_sharing,
    "wrapper_of_sparse": make_wrapper_of_sparse,
    "wrapper_of_wrapper": make_wrapper_of_wrapper,
    "wrapper_of_dict_wrapper": make_wrapper_of_dict_wrapper,
    "opaque_wrapper": make_opaque,
    "flatten_raises": make_bad_flatten,
    "empty_wrapper": make_empty_wrapper,
}


def _leak(Node, maker, out):
    """A self-referencing Node holding the tensor maker() makes; out gets (bytes, how, type,
    a weak reference to it). Nothing else keeps the tensor."""
    t, nbytes, how = maker()
    out.extend([nbytes, how, type(t).__name__, weakref.ref(t)])
    n = Node()
    n.me = n
    n.t = t


def _report_for(track, maker, device="cpu"):
    Node = new_class()
    expected = []
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=device))
    _leak(Node, maker, expected)
    gc.collect()
    assert len(reports) == 1, reports
    return reports[0], expected


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_cycle_report_counts_the_real_bytes(track, layout):
    device = "meta" if layout == "meta" else "cpu"
    report, (nbytes, how, type_name, ref) = _report_for(track, LAYOUTS[layout], device)
    (info,) = [i for i in report.tensors if i["type"] == type_name and i["storage"] == how]
    assert info["nbytes"] == nbytes, info
    assert info["device"] == device
    assert info["storage"] == how
    # inner tensors are garbage too and reported on their own; their storages count once
    assert report.nbytes == nbytes, (report.tensors, report.nbytes)
    assert ref() is None  # reading it (its __dict__ included) kept nothing alive


def test_ordinary_tensor_fields_are_unchanged(track):
    report, _ = _report_for(track, make_strided)
    (info,) = report.tensors
    assert list(info) == ["shape", "dtype", "device", "nbytes", "data_ptr", "stack", "type",
                          "storage"]
    assert info["shape"] == (5, 3) and info["dtype"] == "float32" and info["nbytes"] == 60
    assert "Tensor float32[5, 3] on cpu (60 B)" in report.text


def test_meta_tensor_says_it_has_no_storage(track):
    report, _ = _report_for(track, make_meta, "meta")
    (info,) = report.tensors
    assert info["nbytes"] == 0 and info["data_ptr"] == 0 and info["device"] == "meta"
    assert info["storage"] == "none (meta tensor)"
    line = "Tensor float32[64, 64] on meta (no storage: meta)"
    assert line in report.text and line in report.dot


def test_meta_tensor_is_filtered_by_its_device(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device="cpu"))
    _leak(new_class(), make_meta, [])
    gc.collect()
    assert reports == []


def test_nested_shapes_have_none_for_the_ragged_dimension(track):
    for maker in (make_nested_strided, make_nested_jagged):
        report, (_, how, type_name, _) = _report_for(track, maker)
        (info,) = [i for i in report.tensors if i["storage"] == how]
        assert info["shape"] == (2, None, 3), info
        assert f"{type_name} float32[2, None, 3] on cpu" in report.text


def test_opaque_wrapper_takes_its_inner_tensors_device(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device="cpu"))
    _leak(new_class(), make_opaque, [])
    gc.collect()
    (report,) = reports
    (info,) = [i for i in report.tensors if i["type"] == "Opaque"]
    assert info["device"] == "cpu" and info["shape"] is None and info["nbytes"] == 28
    assert "Opaque float32[?] on cpu (28 B)" in report.dot  # its node (the text shows the inner)
    assert Opaque.ran == []  # read through TensorBase's getters, never the Python property


def make_many():
    return Many([torch.ones(i + 1) for i in range(40)]), None, None


def make_deep():
    w = torch.ones(5)
    for _ in range(6):
        w = Pair(torch.ones(1), w)
    return w, None, None


def test_wrapper_parts_are_bounded(track):
    report, _ = _report_for(track, make_many)
    (info,) = [i for i in report.tensors if i["type"] == "Many"]
    assert info["nbytes"] == sum((i + 1) * 4 for i in range(16))  # the first 16 only
    assert info["storage"].startswith("wrapper subclass (__tensor_flatten__): p0 + p1 + ")
    assert info["storage"].endswith("(more inner tensors not counted: at most 16, 3 deep)")


def test_wrapper_nesting_is_bounded(track):
    report, _ = _report_for(track, make_deep)
    infos = [i for i in report.tensors if i["type"] == "Pair"]
    outer = max(infos, key=lambda i: len(i["storage"]))
    # a, b.a, b.b.a counted; b.b.b is a wrapper three deep: not opened
    assert outer["storage"] == ("wrapper subclass (__tensor_flatten__): a + b.a + b.b.a (more "
                                "inner tensors not counted: at most 16, 3 deep)")
    assert outer["nbytes"] == 3 * 4


# --------------------------------------------------------------------------
# MemReporter
# --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_mem_reporter_counts_the_real_bytes(layout):
    t, nbytes, how = LAYOUTS[layout]()
    m = torch.nn.Module()
    m.register_buffer("x", t)
    rep = MemReporter(m).collect()
    rows = [r for r in rep.rows if r.name == "x" or r.name.startswith("x.")]
    assert rows, [r.name for r in rep.rows]
    assert {r.kind for r in rows} == {"buffer"}
    assert {r.storage for r in rows} == {how}
    assert sum(r.storage_bytes for r in rows) == nbytes, rows
    if layout in ("sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc"):
        parts = how.split(": ")[1].split(" + ")
        assert [r.name for r in rows] == [f"x.{p}" for p in parts]
    del t, m, rows, rep


def test_mem_reporter_table_says_no_storage():
    m = torch.nn.Module()
    m.register_buffer("weights_on_meta", torch.empty(8, 8, device="meta"))
    rep = MemReporter(m).collect(device="meta")
    (row,) = [r for r in rep.rows if r.name == "weights_on_meta"]
    assert row.storage_bytes == 0 and row.storage == "none (meta tensor)"
    assert "weights_on_meta (no storage: meta)" in rep.format()
    assert rep.to_dict()["rows"][0]["storage"] == "none (meta tensor)"


def test_mem_reporter_rows_of_ordinary_tensors_are_unchanged():
    m = torch.nn.Linear(3, 2)
    rep = MemReporter(m).collect(device="cpu")
    w = [r for r in rep.rows if r.name == "weight"][0]
    assert w[:9] == ("weight", "parameter", (2, 3), "float32", "cpu", 6, 24, None, None)
    assert w.storage == "strided: untyped_storage"


# --------------------------------------------------------------------------
# never an error
# --------------------------------------------------------------------------


def test_odd_tensors_never_log_an_error(track, caplog):
    caplog.set_level(logging.DEBUG, logger="tensorgc")
    reports = []
    track(tensorgc.observe_cycles(reports.append, device="cpu"))
    track(tensorgc.observe_cycles(reports.append, device="meta"))
    Node = new_class()
    for _ in range(3):
        for name, maker in LAYOUTS.items():
            try:
                _leak(Node, maker, [])
            except pytest.skip.Exception:
                continue
            gc.collect()
        m = torch.nn.Module()
        for name, maker in LAYOUTS.items():
            try:
                m.register_buffer(name, maker()[0])
            except pytest.skip.Exception:
                continue
        text = MemReporter(m).collect().format(verbose=True)
        assert "(no storage: meta)" in text
        del m
    assert len(reports) >= 3 * (len(LAYOUTS) - 1)
    for r in reports:
        assert r.text and r.dot  # the text, the drawing: built without an exception
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
