"""MemReporter with owner chains (collect(owners=True)), on CPU tensors: rows named by what
holds them, a Held-by section a person can read (a parameter's saved alias counted as the
parameter, a forward in flight grouped by module, long runs of graph references folded), the
line of a report without owners that says how many bytes have no name, and the search's bound
passed through collect, report and growth.

Objects kept by a module global live in a fresh module registered in sys.modules (the `mod`
fixture), so names read "tgc_holders_fixture.NAME"."""
import gc
import re
import sys

import pytest

from _util import fresh_module  # noqa: E402
torch = pytest.importorskip("torch")  # the torch-free run skips these

import tensorgc
from tensorgc import MemReporter
import tensorgc.reporter as reporter_mod
from tensorgc.reporter import MODEL_KINDS, readable_size

MOD_NAME = "tgc_holders_fixture"


@pytest.fixture
def mod():
    """A fresh module, registered in sys.modules for the test and removed after it."""
    yield from fresh_module(MOD_NAME)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def _held_by(text):
    return text[text.index("Held by"):].splitlines()


def test_rows_are_named_by_their_holder(mod):
    model = _mlp()
    mod.loss_history = []
    for _ in range(4):
        mod.loss_history.append(model(torch.randn(4, 16)).pow(2).sum())  # no backward
    mod.cache = {"batch": torch.ones(10)}
    rep = MemReporter(model).collect(owners=True)
    names = {r.name: r for r in rep.rows}
    for i in range(4):
        loss = names[f"{MOD_NAME}.loss_history[{i}]"]
        assert loss.kind == "other" and loss.shape == ()
        saved = [r for r in rep.rows
                 if r.name.endswith(f" \u2190 {MOD_NAME}.loss_history[{i}]")]
        # per step: the first Linear's input, ReLU's result, pow's operand (the second Linear's
        # input is ReLU's result: a view row of it, named as well)
        assert {r.name.split(" \u2190 ")[0] for r in saved} == {
            "saved by AddmmBackward0 (mat1)", "saved by ReluBackward0 (result) after 0",
            "saved by PowBackward0 (self) after 2"}, [r.name for r in saved]
        assert all(r.kind == "saved_for_backward" and r.name.startswith("saved by ")
                   for r in saved)
    assert names[f"{MOD_NAME}.cache['batch']"].storage_bytes == 40
    mine = [r for r in rep.rows if r.holder and r.holder.startswith(MOD_NAME)]
    assert mine and not [r for r in mine if re.fullmatch(r"Tensor\d+", r.name)]
    text = rep.format()
    assert f"{MOD_NAME}.loss_history[3]" in text
    assert "report(owners=True) names" not in text  # the hint is for reports without owners


def test_a_report_without_owners_ends_with_the_bytes_that_have_no_name(mod):
    mod.cache = [torch.ones(100), torch.ones(28)]
    rep = MemReporter().collect(device="cpu", owners=False)
    unnamed = [r for r in rep.rows if r.kind == "other" and r.used]
    assert len(unnamed) >= 2  # ours, and any another test left alive
    lines = rep.format().splitlines()
    assert lines[-1] == "-" * len(lines[-1])
    n = len(unnamed)
    assert lines[-2] == (f"Unnamed tensors: {readable_size(sum(r.used for r in unnamed))} in {n} "
                         f"tensor{'s' if n != 1 else ''}; report(owners=True) names what holds "
                         "each one.")
    assert any(re.fullmatch(r"Tensor\d+", r.name) for r in unnamed)
    with_owners = MemReporter().collect(device="cpu", owners=True)
    assert "Unnamed tensors:" not in with_owners.format()
    assert {r.name for r in with_owners.rows} >= {f"{MOD_NAME}.cache[0]", f"{MOD_NAME}.cache[1]"}


def test_no_hint_when_every_tensor_is_named():
    model = torch.nn.Linear(3, 3)
    rep = MemReporter(model).collect(device="meta")  # nothing there
    assert "Unnamed tensors" not in rep.format()


def test_a_saved_alias_of_a_parameter_is_the_parameter(mod):
    """Linear saves its weight, transposed (addmm's mat2): a view of the parameter. It is counted
    as the parameter, never as something a holder keeps."""
    model = _mlp()
    mod.losses = [model(torch.randn(4, 16)).sum()]
    rep = MemReporter(model).collect(owners=True)
    # the first Linear's input needs no grad: only the second one saves its weight
    (mat2,) = [r for r in rep.rows if "(mat2)" in r.name]
    assert mat2.kind == "parameter" and mat2.storage_bytes == 0
    assert mat2.shares_with == "2.weight"
    assert mat2.owner is None and mat2.holder is None
    held = _held_by(rep.format(verbose=True))
    assert not [line for line in held if "(mat2)" in line]
    assert any(line.endswith(f"  {MOD_NAME}.losses") for line in held)


def test_a_forward_in_flight_is_grouped_by_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    seen = {}

    def stop_here(module, inputs, output):
        seen["rep"] = MemReporter(model).collect(owners=True)

    handle = model[3].register_forward_hook(stop_here)
    try:
        out = model(torch.randn(8, 16))
    finally:
        handle.remove()
    rep = seen.pop("rep")
    saved = [r for r in rep.rows if r.kind == "saved_for_backward"]
    assert saved
    by_holder = {}
    for r in saved:
        by_holder.setdefault(r.holder, []).append(r.name)
    # the first Linear's input and ReLU's result after it; the second Linear's input and the
    # second ReLU's result after it
    assert set(by_holder) == {"activations of 0 (forward in flight)",
                              "activations of 2 (forward in flight)"}, by_holder
    assert "saved by AddmmBackward0 (mat1) \u2190 0" in by_holder[
        "activations of 0 (forward in flight)"]
    # the rows keep the module's name; no running frame's local is put on them
    assert all(n.count("\u2190") <= 1 for n in sum(by_holder.values(), []))
    held = _held_by(rep.format())
    assert any(line.endswith("  activations of 0 (forward in flight)") for line in held)
    assert any(line.endswith("  activations of 2 (forward in flight)") for line in held)
    del out


def test_long_runs_of_graph_references_are_folded_in_held_by(mod):
    x = torch.randn(64, requires_grad=True)
    y = x * 2  # saves nothing of x's: the scalar; the chain's end is the leaf's AccumulateGrad
    for _ in range(10):
        y = y.sin()  # each saves its input: the graph's saved tensors are ten steps deep
    mod.result = y
    del x, y
    rep = MemReporter().collect(owners=True)
    deepest = [r for r in rep.rows
               if r.owner and r.owner.startswith(f"module {MOD_NAME} .result .grad_fn")
               and "SinBackward0 saved self" in r.owner]
    assert len(deepest) == 10
    far = max(deepest, key=lambda r: len(rep.chains[rep.rows.index(r)].edges))
    chain = rep.chains[rep.rows.index(far)]
    assert chain.text(fold=False).count(".next_functions[0]") == 9
    assert re.search(r"\.next_functions\[0\] \u2192 SinBackward0 \u2026 7 more \.next_functions "
                     r"\u2026 \.next_functions\[0\] \u2192 SinBackward0 saved self$", far.owner)
    text = rep.format(verbose=True)
    assert f"{far.name}: {far.owner}" in text


def test_max_objects_passes_through_collect_report_and_growth(mod, capsys):
    mod.deep = [[[[torch.ones(3)]]]]
    rep = MemReporter().collect(owners=True, max_objects=1)
    row = next(r for r in rep.rows if r.shape == (3,) and r.holder)
    assert row.owner == "not reached within max_objects=1"
    assert row.name.startswith("Tensor")  # no holder known: the row keeps its number
    full = MemReporter().collect(owners=True)
    assert f"{MOD_NAME}.deep[0][0][0][0]" in {r.name for r in full.rows}
    MemReporter().report(owners=True, max_objects=1)
    assert "not reached within max_objects=1" in capsys.readouterr().out
    with pytest.raises(ValueError, match="max_objects"):
        MemReporter().collect(owners=True, max_objects=0)
    with pytest.raises(TypeError, match="max_objects"):
        MemReporter().collect(owners=True, max_objects="3")

    before = tensorgc.checkpoint()
    mod.more = [[[[torch.ones(5)]]]]
    g = tensorgc.growth(before, max_objects=1)
    (new,) = [r for r in g.rows if r.shape == (5,)]
    assert new.owner == "not reached within max_objects=1"
    g = tensorgc.growth(before)
    (new,) = [r for r in g.rows if r.shape == (5,)]
    assert new.holder == f"{MOD_NAME}.more"
    with pytest.raises(ValueError, match="max_objects"):
        tensorgc.growth(before, max_objects=0)


def test_model_rows_are_never_renamed(mod):
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    mod.also = [model[0].weight]  # a holder of a parameter does not rename it
    rep = MemReporter(model, optimizer=opt).collect(owners=True)
    names = {r.name for r in rep.rows if r.kind in MODEL_KINDS}
    assert {"0.weight", "0.weight.grad", "AdamW.0.weight.exp_avg"} <= names
    assert not [n for n in names if MOD_NAME in n]


def test_a_module_held_outside_the_model_reads_as_torch_names_it(mod):
    mod.spare = torch.nn.Sequential(torch.nn.Linear(2, 3))
    rep = MemReporter().collect(owners=True)
    names = {r.name for r in rep.rows}
    assert {f"{MOD_NAME}.spare.0.weight", f"{MOD_NAME}.spare.0.bias"} <= names
    w = next(r for r in rep.rows if r.name == f"{MOD_NAME}.spare.0.weight")
    assert w.owner == f"module {MOD_NAME} .spare ._modules ['0'] ._parameters ['weight']"


def test_the_real_model_tool_names_the_bytes_of_a_transformer_mid_forward(capsys):
    """tools/real_model_report.py on the CPU, small: a TransformerEncoder with AdamW stopped in
    its middle layer's forward; its activations are grouped by module and the share it prints
    is of the storages the report names."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools",
                        "real_model_report.py")
    spec = importlib.util.spec_from_file_location("real_model_report", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--device", "cpu", "--layers", "2", "--d-model", "32", "--seq", "8",
                      "--batch", "2", "--steps", "1", "--show", "owners"]) == 0
    out = capsys.readouterr().out
    held = _held_by(out)
    assert any(line.endswith("  activations of 0.layers.0.self_attn (forward in flight)")
               for line in held)
    assert any(line.endswith("  activations of 0.layers.0.linear1 (forward in flight)")
               for line in held)
    for how in ("by default \\(owners=None\\)", "with owners=True"):
        m = re.search(rf"^cpu: ([0-9.]+)% named of the storages {how}, the report took \d+ ms$",
                      out, re.M)
        assert m and float(m.group(1)) >= 99.0, out[-2000:]
    assert "0.layers.1.linear1.weight" in out and "AdamW.0.layers.1.linear1.weight.exp_avg" in out


def test_a_tensor_only_c_code_holds_is_named_so():
    """A tensor no Python object holds (only C or C++ code: the base of a view autograd saved,
    say) is named for that, not Tensor<i>."""
    import ctypes

    import tensorgc

    t = torch.zeros(7, 11, 13)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(t))  # the reference C code would hold
    address = id(t)
    del t
    try:
        rep = tensorgc.MemReporter().collect(device="cpu", owners=True)
        (row,) = [r for r in rep.rows if r.shape == (7, 11, 13)]
        assert row.name == "held outside Python"
        assert row.holder is not None and row.holder.startswith("held outside Python")
    finally:
        ctypes.pythonapi.Py_DecRef(ctypes.cast(address, ctypes.py_object))


# ---------------------------------------------------------------- the default: owners=None


def test_the_default_names_an_unnamed_tensor_by_its_holder(mod):
    mod.cache = [torch.ones(100)]
    rep = MemReporter().collect(device="cpu")
    (row,) = [r for r in rep.rows if r.name == f"{MOD_NAME}.cache[0]"]
    assert row.kind == "other" and row.storage_bytes == 400
    assert row.holder == f"{MOD_NAME}.cache"
    assert row.owner == f"module {MOD_NAME} .cache [0]"  # no referrer count: the pass stopped
    s = rep.owner_search
    assert s["mode"] == "auto" and s["bound"] == reporter_mod.AUTO_MAX_OBJECTS
    assert s["stopped"] == 1 and s["truncated"] == 0 and s["visited"] <= s["bound"]
    assert rep.owners is True


def test_the_default_over_its_bound_says_what_it_left_unnamed(mod, monkeypatch):
    mod.cache = [torch.ones(100), torch.ones(28)]
    monkeypatch.setattr(reporter_mod, "AUTO_MAX_OBJECTS", 1)  # fits nothing
    rep = MemReporter().collect(device="cpu")
    assert rep.owner_search["truncated"] == 1 and rep.owner_search["bound"] == 1
    unnamed = [r for r in rep.rows if r.kind == "other" and r.used]
    assert len(unnamed) >= 2 and all(r.holder is None and r.owner is None for r in unnamed)
    assert all(re.fullmatch(r"Tensor\d+", r.name) for r in unnamed)
    lines = rep.format().splitlines()
    n = len(unnamed)
    assert lines[-2] == (f"Unnamed tensors: {readable_size(sum(r.used for r in unnamed))} in "
                         f"{n} tensors: the automatic owner search stopped at its bound of 1 "
                         "objects before it found them; report(owners=True) searches the whole "
                         "heap.")
    # max_objects given sets the automatic search's bound too
    monkeypatch.undo()
    rep = MemReporter().collect(device="cpu", max_objects=1)
    assert rep.owner_search["bound"] == 1 and rep.owner_search["truncated"] == 1


def test_owners_false_still_means_no_search(mod, monkeypatch):
    mod.cache = [torch.ones(100)]
    called = []
    monkeypatch.setattr(reporter_mod, "_owners_of", lambda *a, **k: called.append(1) or {})
    rep = MemReporter().collect(device="cpu", owners=False)
    assert called == [] and rep.owner_search == {"mode": "off"} and rep.owners is False
    assert rep.chains == {} and all(r.owner is None for r in rep.rows)
    assert rep.format().splitlines()[-2].endswith("; report(owners=True) names what holds "
                                                  "each one.")


def test_the_default_searches_nothing_when_every_row_is_named(monkeypatch):
    called = []
    monkeypatch.setattr(reporter_mod, "_owners_of", lambda *a, **k: called.append(1) or {})
    rep = MemReporter(torch.nn.Linear(3, 3)).collect(device="meta")
    assert called == [] and rep.owners is False and rep.owner_search["targets"] == 0


@pytest.mark.parametrize("bad", [1, "yes", 0.0])
def test_owners_must_be_a_bool_or_none(bad):
    with pytest.raises(TypeError, match="owners must be True, False or None"):
        MemReporter().collect(owners=bad)
    with pytest.raises(TypeError, match="owners must be True, False or None"):
        MemReporter().report(owners=bad)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_default_restores_the_collector_state(mod, enabled):
    import gc

    mod.cache = [torch.ones(10)]
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        MemReporter().collect(device="cpu")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_named_rows_read_as_before_under_the_default(mod):
    model = _mlp()
    model(torch.ones(2, 16)).sum().backward()
    mod.keep = torch.ones(5)
    off = MemReporter(model).collect(device="cpu", owners=False).format().splitlines()
    auto = MemReporter(model).collect(device="cpu").format().splitlines()
    named = [line for line in off if line.split(" ", 1)[0] in
             {n for n, _ in model.named_parameters()} | {f"{n}.grad" for n, _ in
                                                         model.named_parameters()}]
    assert named and all(line in auto for line in named)
    assert auto[0] == off[0]  # memlab's header


class _Counted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.relu(self.lin(x)).sin()


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_forward_is_reported_without_recomputing_it(mod, reentrant):
    """A report while a checkpointed graph is alive reads what each checkpoint keeps (its inputs,
    its RNG state) and never unpacks a saved tensor through the checkpoint's hook, which would run
    the forward again."""
    from torch.utils.checkpoint import checkpoint

    blocks = torch.nn.ModuleList([_Counted(), _Counted()])
    h = torch.randn(4, 16, requires_grad=True)
    for b in blocks:
        h = checkpoint(b, h, use_reentrant=reentrant)
    mod.out = h.sum()
    calls = [b.calls for b in blocks]
    rep = MemReporter(blocks).collect(device="cpu")
    assert [b.calls for b in blocks] == calls
    rng = [r for r in rep.rows if r.shape == tuple(torch.get_rng_state().shape)]
    assert len(rng) == 2 and all(r.kind == "saved_for_backward" for r in rng)
    want = "(ctx.fwd_cpu_state)" if reentrant else "(checkpoint: frame.recompute_fn fwd_cpu_state)"
    assert all(r.name.startswith("kept by ") and want in r.name for r in rng), [r.name for r in rng]
    unnamed = [r for r in rep.rows if r.kind == "other" and r.used and r.holder is None]
    assert not [r for r in unnamed if r.shape == (4, 16)], [r.name for r in rep.rows]
    mod.out.backward()
    assert [b.calls for b in blocks] == [c + 1 for c in calls]  # backward recomputes once


@pytest.mark.parametrize("mode", ["non-reentrant", "reentrant"])
def test_the_real_model_tool_names_a_checkpointed_gpt_at_a_steps_end(capsys, mode):
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools",
                        "real_model_report.py")
    spec = importlib.util.spec_from_file_location("real_model_report", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--model", "gpt", "--checkpoint", mode, "--device", "cpu", "--layers", "2",
                      "--d-model", "32", "--heads", "2", "--vocab", "256", "--seq", "16",
                      "--batch", "2", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"^cpu: ([0-9.]+)% named of the storages by default \(owners=None\)", out, re.M)
    assert m and float(m.group(1)) >= 99.0, out[-3000:]
    assert "train() local logits" in out and "Unnamed tensors" not in out


def test_the_default_looks_in_running_frames_before_the_modules():
    """A tensor deep in a running frame's local is found by the first pass (no module entered);
    one only a module holds, by the second."""
    def deep():
        holder = {"a": {"b": [torch.ones(33)]}}
        rep = MemReporter().collect(device="cpu")
        return holder, rep

    holder, rep = deep()
    (row,) = [r for r in rep.rows if r.shape == (33,)]
    assert row.name == "deep() local holder['a']['b'][0]"
    assert rep.owner_search["passes"] in (1, 2)  # 2 when another test left a module's tensor
    del holder


def test_the_default_finds_in_the_modules_what_no_frame_holds(mod):
    mod.history = [torch.ones(34)]
    rep = MemReporter().collect(device="cpu")
    (row,) = [r for r in rep.rows if r.shape == (34,)]
    assert row.name == f"{MOD_NAME}.history[0]"
    assert rep.owner_search["passes"] == 2


def test_the_real_model_tool_lists_the_blocks_no_tensor_holds(monkeypatch):
    """--unattributed's listing (CUDA), from a stand-in snapshot: an allocated block with no
    storage of the report in it is listed with its size, stream and frames; one holding a
    storage, or free, is not."""
    import importlib.util
    import os
    from types import SimpleNamespace

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools",
                        "real_model_report.py")
    spec = importlib.util.spec_from_file_location("real_model_report", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    segs = {"segments": [{"device": 0, "address": 1000, "stream": 7, "blocks": [
        {"size": 100, "state": "active_allocated", "requested_size": 90, "frames": []},
        {"size": 200, "state": "active_allocated", "requested_size": 200,
         "frames": [{"filename": "Blas.cpp", "line": 3, "name": "getCUDABlasLtWorkspace"}]},
        {"size": 50, "state": "inactive", "frames": []}]}]}
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: segs)
    rep = SimpleNamespace(rows=[SimpleNamespace(address=1010, device="cuda:0")])
    out = tool._unattributed(rep, "cuda:0")
    assert out == ["  block 0x44c: 200 bytes (requested 200), stream 7, 1 frames",
                   "      Blas.cpp:3 getCUDABlasLtWorkspace"]
