"""MemReporter on CPU tensors (or TENSORGC_TEST_DEVICE): names, dedupe, totals, filters, the
memlab format, no references kept, bad arguments."""
import gc
import io
import re
import weakref
from contextlib import redirect_stdout

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc import MemReporter
from tensorgc.reporter import readable_size
from _util import DEVICE

DEV = torch.device(DEVICE)


def rows_by_name(rep):
    return {r.name: r for r in rep.rows}


def mine(rep):
    return [r for r in rep.rows if r.device == str(DEV) or r.device.startswith(DEV.type)]


def storage_nbytes(t):
    return t.untyped_storage().nbytes()


@pytest.fixture
def model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 8)).to(DEV)
    return m


def test_parameters_grads_buffers_and_optimizer_state_are_named(model):
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 16, device=DEV)).sum().backward()
    opt.step()
    rep = MemReporter(model, optimizer=opt).collect(device=DEV)
    names = rows_by_name(rep)
    for pname, p in model.named_parameters():
        assert names[pname].kind == "parameter" and names[pname].shape == tuple(p.shape)
        assert names[pname + ".grad"].kind == "grad"
        assert names[f"Adam.{pname}.exp_avg"].kind == "optimizer_state"
        assert names[f"Adam.{pname}.exp_avg_sq"].storage_bytes == storage_nbytes(p)
    for bname, _ in model.named_buffers():
        assert names[bname].kind == "buffer"
    assert names["1.running_mean"].dtype == "float32"
    assert names["1.num_batches_tracked"].dtype == "int64"


def test_memlab_compatible_positional_model_and_add_optimizer(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 16, device=DEV)).sum().backward()
    opt.step()
    r = MemReporter(model)
    r.add_optimizer(opt)
    names = rows_by_name(r.collect(device=DEV))
    assert names["0.weight"].kind == "parameter"
    assert names["SGD.0.weight.momentum_buffer"].kind == "optimizer_state"


def test_tied_weights_show_every_name_and_count_once():
    emb = torch.nn.Embedding(10, 6)
    head = torch.nn.Linear(6, 10, bias=False)
    head.weight = emb.weight
    m = torch.nn.ModuleDict({"emb": emb, "head": head}).to(DEV)
    rep = MemReporter(m).collect(device=DEV)
    names = rows_by_name(rep)
    assert "emb.weight+head.weight" in names
    assert names["emb.weight+head.weight"].storage_bytes == 10 * 6 * 4


def test_views_and_slices_share_the_first_name_and_count_once(model):
    w = model[0].weight
    view = w.view(-1)
    sl = w[2:5]
    rep = MemReporter(model).collect(device=DEV)
    others = [r for r in rep.rows if r.shares_with == "0.weight"]
    assert {r.shape for r in others} >= {tuple(view.shape), tuple(sl.shape)}
    assert all(r.storage_bytes == 0 for r in others)
    buf = io.StringIO()
    with redirect_stdout(buf):
        MemReporter(model).report(verbose=True, device=DEV)
    assert "(->0.weight)" in buf.getvalue()
    buf = io.StringIO()
    with redirect_stdout(buf):
        MemReporter(model).report(verbose=False, device=DEV)
    assert "(->0.weight)" not in buf.getvalue()


def make_sparse():
    i = torch.tensor([[0, 1, 2], [2, 0, 1]], device=DEV)
    v = torch.tensor([3.0, 4.0, 5.0], device=DEV)
    return torch.sparse_coo_tensor(i, v, (3, 3), check_invariants=True)


def test_sparse_tensor_is_indices_plus_values():
    sp = make_sparse()  # its indices and values are reachable only through it
    rep = MemReporter().collect(device=DEV)
    parts = [r for r in rep.rows if r.name.endswith((".indices", ".values")) and r.numel in (6, 3)]
    assert len(parts) == 2 and parts[0].name.split(".")[0] == parts[1].name.split(".")[0]
    kinds = {r.name.rsplit(".", 1)[1]: r for r in parts}
    assert kinds["indices"].storage_bytes == 48
    assert kinds["indices"].dtype == "int64" and kinds["indices"].shape == (2, 3)
    assert kinds["values"].dtype == "float32" and kinds["values"].storage_bytes == 12
    del sp


def test_saved_for_backward_named_by_the_autograd_node(model):
    x = torch.randn(5, 16, device=DEV)
    out = model(x)  # graph alive: saved activations are held in C++ by the nodes
    rep = MemReporter(model).collect(device=DEV)
    saved = [r for r in rep.rows if r.kind == "saved_for_backward"]
    assert any(r.name.startswith("saved by AddmmBackward0 (mat1)") and r.name.endswith("\u2190 3")
               for r in saved), [r.name for r in saved]
    # an activation is placed after the module whose output it consumes
    assert any(r.name.startswith("saved by ReluBackward0 (result) after 1") for r in saved)
    # mat2 of a Linear is its weight, transposed: a view, counted as the parameter
    assert not [r for r in saved if "(mat2)" in r.name]
    mat2 = [r for r in rep.rows if "(mat2)" in r.name]
    assert mat2 and all(r.kind == "parameter" and r.shares_with and r.storage_bytes == 0
                        and r.shares_with.endswith("weight") for r in mat2)
    del out


def test_unnamed_tensors_are_numbered_and_counted():
    a = torch.ones(7, 3, device=DEV)
    rep = MemReporter().collect(device=DEV, owners=False)  # no owner search: Tensor<i>
    generic = [r for r in rep.rows if re.fullmatch(r"Tensor\d+", r.name) and r.shape == (7, 3)]
    assert generic and generic[0].kind == "other" and generic[0].storage_bytes == 84
    del a


def test_exact_totals_equal_the_sum_of_distinct_storages(model):
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 16, device=DEV)).sum().backward()
    opt.step()
    extra = torch.zeros(1000, device=DEV)
    view = extra[10:20]
    rep = MemReporter(model, optimizer=opt).collect(device=DEV)
    t = rep.totals[rep.devices()[0]]
    assert t["storage"] == sum(r.storage_bytes for r in rep.rows if r.device == rep.devices()[0])
    # every named tensor's storage counted exactly once
    expected = {}
    for p in model.parameters():
        expected[p.untyped_storage().data_ptr()] = storage_nbytes(p)
        expected[p.grad.untyped_storage().data_ptr()] = storage_nbytes(p.grad)
    for st in opt.state.values():
        for v in st.values():
            expected[v.untyped_storage().data_ptr()] = storage_nbytes(v)
    expected[extra.untyped_storage().data_ptr()] = 4000
    assert t["storage"] >= sum(expected.values())
    assert t["named_storage"] >= sum(expected.values()) - 4000
    del view


def test_device_filter_keeps_only_that_device():
    c = torch.ones(5)
    rep = MemReporter().collect(device="cpu")
    assert rep.rows and all(r.device == "cpu" for r in rep.rows)
    assert list(rep.totals) == ["cpu"]
    del c


def test_no_strong_references_left_behind():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)).to(DEV)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 16, device=DEV)).sum().backward()
    opt.step()
    t = torch.ones(100, device=DEV)
    refs = [weakref.ref(t), weakref.ref(model), weakref.ref(opt)]
    r = MemReporter(model, optimizer=opt)
    rep = r.collect()
    with redirect_stdout(io.StringIO()):
        r.report(verbose=True)
    del t, model, opt
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert rep.rows  # the report is plain data and outlives them


def test_report_prints_memlab_format(model, capsys):
    MemReporter(model).report(device=DEV)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{'Element type':<40s}{'Size':>20s}{'Used MEM':>10s}"
    assert out[1] == "-" * 79 and out[2] == f"Storage on {DEV if DEV.type == 'cpu' else 'cuda:0'}"
    line = next(x for x in out if x.startswith("0.weight "))
    assert line == f"{'0.weight':<40s}{'(32, 16)':>20s}{readable_size(32 * 16 * 4) if DEV.type == 'cpu' else line[60:]:>10s}"
    assert any(x.startswith("Total Tensors: ") and "\tUsed Memory: " in x for x in out)


def test_readable_size_matches_memlab():
    assert readable_size(0) == "0.00B"
    assert readable_size(512) == "512.00B"
    assert readable_size(1536) == "1.50K"
    assert readable_size(2.42 * 2**30) == "2.42G"


def test_to_dict_and_text(model):
    rep = MemReporter(model).collect(device=DEV)
    d = rep.to_dict()
    assert {"rows", "totals"} <= set(d)
    assert d["rows"][0]["name"] == "0.weight" and d["rows"][0]["kind"] == "parameter"
    assert rep.text.startswith("Element type") and str(rep) == rep.text


def test_to_dict_of_a_row_whose_shape_could_not_be_read():
    # Row.shape is None when not even the number of dimensions can be read: to_dict() raised
    # TypeError (list(None)) instead of giving plain data
    import json

    from tensorgc import Report, Row

    row = Row("w", "parameter", None, "float32", "cpu", None, 0, None, None,
              "none (storage not readable)")
    d = Report(rows=[row], totals={"cpu": {"used": 0}}).to_dict()
    assert d["rows"][0]["shape"] is None and d["rows"][0]["numel"] is None
    assert json.loads(json.dumps(d)) == d


def test_no_warnings_from_deprecated_modules(recwarn, model):
    MemReporter(model).collect()
    assert not [w for w in recwarn if issubclass(w.category, (FutureWarning, DeprecationWarning))]


@pytest.mark.parametrize("bad", [object(), "model", 3])
def test_bad_model_is_a_type_error(bad):
    with pytest.raises(TypeError):
        MemReporter(bad)


def test_bad_optimizer_is_a_type_error(model):
    with pytest.raises(TypeError):
        MemReporter(model, optimizer=[1, 2])
    with pytest.raises(TypeError):
        MemReporter(model).add_optimizer(model)


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", 1.5, object()])
def test_bad_device_is_a_value_error(model, bad):
    with pytest.raises(ValueError):
        MemReporter(model).collect(device=bad)
    with pytest.raises(ValueError):
        MemReporter(model).report(device=bad)


def test_c_walk_finds_tensor_subclasses_without_running_their_properties():
    class Loud(torch.Tensor):
        @property
        def shape(self):  # a property a Python-level walk would trigger
            raise AssertionError("ran")

    x = torch.ones(3, device=DEV).as_subclass(Loud)
    found = [t for t in tensorgc._tensorgc._live_tensors() if t is x]
    assert found
    row = tensorgc._tensorgc._tensor_rows(found)[0]
    assert row[5] == (3,) and row[6] == "float32" and row[7] == 3
    with pytest.raises(TypeError):
        tensorgc._tensorgc._tensor_rows([object()])
    del x, found


def test_rows_do_not_run_a_subclass_torch_function():
    calls = []

    class Traced(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.ones(2, 3, device=DEV).as_subclass(Traced)
    calls.clear()
    row = tensorgc._tensorgc._tensor_rows([x])[0]
    assert row[5] == (2, 3) and row[7] == 6
    assert calls == []
    rep = MemReporter().collect(device=DEV)
    assert any(r.name.startswith("Traced") and r.shape == (2, 3) for r in rep.rows)
    del x


def test_gc_state_is_restored_even_when_collect_fails(model):
    gc.enable()
    with pytest.raises(ValueError):
        MemReporter(model).collect(device="nope")
    assert gc.isenabled()
    MemReporter(model).collect(device=DEV)
    assert gc.isenabled()
    gc.disable()
    try:
        MemReporter(model).collect(device=DEV)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_fake_tensor_holds_no_bytes_and_warns_nothing():
    """torch.compile's FakeTensors say "cpu" but their storage is on the meta device: nothing is
    held, and their storage's data_ptr (which warns) is never read."""
    import warnings

    fake_tensor = pytest.importorskip("torch._subclasses.fake_tensor")
    with fake_tensor.FakeTensorMode():
        f = torch.empty(300, 301)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = MemReporter().collect(device="cpu", owners=False)
    (row,) = [r for r in rep.rows if r.shape == (300, 301)]
    assert row.storage_bytes == 0 and row.storage == "none (meta tensor)" and row.address is None
    assert "(no storage: meta)" in rep.format()
    del f


def test_a_saved_tensor_that_hooks_packed_is_named_packed_and_never_unpacked():
    x = torch.randn(50, 61, requires_grad=True)
    calls = []

    def pack(t):
        calls.append("pack")
        return ("tag", t.clone())

    def unpack(p):
        calls.append("unpack")
        return p[1]

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = (x * 2).sin()
    calls.clear()
    rep = MemReporter().collect(device="cpu")
    assert calls == []
    names = [r.name for r in rep.rows if r.shape == (50, 61)]
    assert "saved by SinBackward0 (self, packed[1])" in names
    del y


def test_a_custom_functions_ctx_tensors_are_named_and_odd_names_escaped():
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.extra = torch.ones(41, 3)
            setattr(ctx, "odd\nname", torch.ones(42, 3))
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = torch.randn(5, requires_grad=True)
    y = Keep.apply(x)
    rep = MemReporter().collect(device="cpu", owners=False)
    names = {r.shape: r.name for r in rep.rows}
    assert names[(41, 3)] == "kept by KeepBackward (ctx.extra)"
    assert names[(42, 3)] == "kept by KeepBackward (ctx.'odd\\nname')"
    assert all("\n" not in line for line in rep.format().splitlines())
    del y
