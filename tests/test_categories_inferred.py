"""Categories inferred from the allocation stacks (allocator/infer.c, timeline.c's rules 8-15):
torch's own recordings of two training runs classified to under 10% "other" at the peak, with
the model's, the optimizer's, the grads', the workspaces' and the loop's outputs' bytes what
the run held; the synthetic traces of tests/_traces.py checked against their truth; stacks of
any shape read within bounds; recorded marks winning; each allocation's label and name in the
page's detail data, freed blocks named."""
import os
import pickle
import re
import time

import pytest

from tensorgc import SnapshotError, _tensorgc, load_snapshot
from tensorgc.categories import (CATEGORIES, HINT_KINDS, HINT_PHASES, KEY, LABEL_INFERRED,
                                 NAME_MAX, describe_label, parse, stack_hints)
from tensorgc.timeline import (_replay, _text, categories_at_peak, classification_inputs, replay,
                               timeline_html)

from _traces import accuracy, make_trace
from _util import run_tensorgc_cli
from test_timeline_detail import decode

MB = 1 << 20
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
REAL = dict(loss_outside=True, clip_grad=True, metrics=True)  # what real loops do besides


def _model_bytes(layers, d, vocab=1000):
    """A TransformerEncoder of `layers` layers (12 d^2 + 13 d parameters each) and a Linear
    head, fp32: the bytes the trace's allocations ask for."""
    return 4 * (layers * (12 * d * d + 13 * d) + vocab * d + vocab)


@pytest.fixture(scope="module", params=["all", "python"])
def recorded(request):
    """torch's own snapshot of tools/record_training_snapshot.py (6 layers, d_model 512, AdamW,
    3 steps and an OOM), with Python and C++ stacks or Python ones only."""
    snap = load_snapshot(os.path.join(DATA, f"transformer-adamw-big-{request.param}.pickle"))
    tl, trace, _ = _replay(snap, 0, 600, 0, None)
    return request.param, snap, tl


def test_recorded_run_is_under_a_tenth_other_at_the_peak(recorded):
    mode, snap, tl = recorded
    peak = tl["at_peak"]
    assert sum(peak.values()) == tl["max"]
    assert peak["other"] < 0.10 * tl["max"], peak
    line = categories_at_peak(snap)
    assert "inferred from the stacks" in line
    other = re.search(r"other ([\d.]+)M", line)
    assert other is None or float(other.group(1)) * MB < 0.10 * tl["max"]
    # the peak is in the second step's backward: the forward's activations dominate
    assert peak["activation"] > 0.75 * tl["max"]


def test_recorded_run_holds_what_the_run_did(recorded):
    """Parameters: the model's size; AdamW's state: twice that; the grads: once, at most."""
    mode, snap, tl = recorded
    model = _model_bytes(6, 512)
    assert tl["at_peak"]["parameter"] == model
    assert tl["at_peak"]["optimizer_state"] == 2 * model
    assert max(tl["cat_active"]["grad"]) == model  # every grad alive at the step, then freed
    assert max(tl["cat_active"]["optimizer_state"]) == 2 * model
    assert max(tl["cat_active"]["parameter"]) == model
    # the input batches: x (32 x 256 x 512 fp32) and y (int64), three steps of them
    assert max(tl["cat_active"]["input"]) == 32 * 256 * 512 * 4 + 32 * 256 * 8
    rules = tl["rules"]
    assert rules[8] == 74 and rules[9] == 3 * 74 and rules[13] == 6  # params, grads, inputs
    # `out` and `loss`, held by the loop past the backward until `del` after the step
    assert tl["at_peak"]["output"] == max(tl["cat_active"]["output"]) == 32 * 256 * 1000 * 4 + 4
    # the cuBLAS workspaces: told by their C++ frames, else other
    ws = _cublas_workspace_bytes(load_snapshot(
        os.path.join(DATA, "transformer-adamw-big-all.pickle"))["device_traces"][0])
    assert ws == 2 * (32 << 20) + (1 << 20)
    assert tl["at_peak"]["workspace"] == (ws if mode == "all" else 0)
    assert tl["at_peak"]["other"] == (0 if mode == "all" else ws)


def test_recorded_run_sources(recorded):
    mode, snap, tl = recorded
    info = classification_inputs(snap, "cuda:0")
    # torch's own step annotations are recorded; everything else comes from the stacks
    assert info["source"] == "recorded+inferred"
    assert info["recorded"]["annotation_spans"] == 3 and info["recorded"]["spans"] == 0
    inferred = info["inferred"]
    assert [p for p, _, _ in inferred["spans"]].count("forward") == 3
    assert [p for p, _, _ in inferred["spans"]].count("backward") == 3
    assert inferred["kinds"]["parameter"] >= 1 and inferred["kinds"]["ungrad"] >= 1  # zero_grad
    assert inferred["phases"]["backward"] >= 1 and inferred["phases"]["optimizer"] >= 1
    assert set(inferred["phases"]) == set(HINT_PHASES)
    assert set(inferred["kinds"]) == set(HINT_KINDS)


def test_streamed_snapshot_infers_the_same():
    path = os.path.join(DATA, "transformer-adamw-big-python.pickle")
    plain = replay(load_snapshot(path), columns=50, detail=5)[0]
    lean = replay(load_snapshot(path, lean=True), columns=50, detail=5)[0]
    for k in ("at_peak", "cat_active", "labels", "pre_labels", "rules", "inferred_spans"):
        assert plain[k] == lean[k], k


def test_stats_says_inferred():
    out = run_tensorgc_cli("stats", os.path.join(DATA, "transformer-adamw-big-python.pickle"))
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if "categories at the peak" in ln)
    assert "inferred from the stacks" in line and "activation" in line


@pytest.mark.parametrize("stacks", ["all", "python"])
@pytest.mark.parametrize("kw", [{}, REAL, dict(optimizer="sgd", accumulate=2, **REAL),
                                dict(optimizer="adam", buffers=True, side_stream=True, **REAL),
                                dict(max_entries=2500, **REAL),
                                dict(hold_output=True, accumulate=2, **REAL)],
                         ids=["plain", "loop", "sgd-accumulate", "adam-buffers", "ring",
                              "held-logits"])
def test_generated_runs_against_their_truth(stacks, kw):
    g = make_trace(layers=4, steps=3, d_model=128, stacks=stacks, **kw)
    tl, _ = replay(g.snapshot, columns=1, detail=0)
    # Python frames alone do not show the cuBLAS workspaces (their C++ frames do): other
    a = accuracy(g, tl, {"workspace": "other"} if stacks == "python" else None)
    assert a["peak"] >= 0.99, a["confusion"]
    assert a["time"] >= 0.98 and a["allocations"] >= 0.98


def test_generated_run_without_stacks_infers_nothing():
    g = make_trace(layers=2, steps=2, d_model=64, stacks="none", annotations=False)
    assert categories_at_peak(g.snapshot) is None
    assert classification_inputs(g.snapshot)["source"] is None


def test_set_to_none_false_keeps_the_grads():
    g = make_trace(layers=2, steps=3, d_model=64, stacks="all", set_to_none=False, **REAL)
    tl, _ = replay(g.snapshot, columns=1, detail=0)
    assert accuracy(g, tl)["time"] >= 0.99
    assert tl["cat_active"]["grad"] == [_model_bytes(2, 64)]  # made once, kept to the end


def test_hints_of_hostile_stacks_are_bounded_and_never_raise():
    frame = {"filename": "/x/torch/nn/modules/module.py", "name": "_call_impl", "line": 1}
    huge = [{"filename": "??", "name": "f", "line": 0}] * 1_000_000 + [frame]
    odd = [None, 1, "x", {"filename": 5, "name": b"x", "line": "7"},
           {"filename": "a\udcff.py", "name": "forward"}, {}, {"name": "backward"},
           {"filename": "w.py", "name": "backward", "line": 1 << 80}]
    t0 = time.perf_counter()
    hints = stack_hints([[], huge, odd, "not a list", {"frames": 1}, [frame] * 3, [odd[-1]]])
    assert time.perf_counter() - t0 < 1.0  # a window of each stack, not a million frames
    assert len(hints) == 7
    phases = [HINT_PHASES[h & 7] for h in hints]
    assert phases[0] == "frameless"  # no frames, in a list of stacks that has Python frames
    assert phases[1] == "forward"    # the outermost frame, in the window's tail
    assert phases[2] == "backward"   # the one plain frame of the odd ones
    assert phases[3] == phases[4] == "unknown"
    assert phases[5] == "forward" and phases[6] == "backward"
    assert stack_hints([[], [{"filename": "??", "name": "x", "line": 0}]]) == bytes(2)
    with pytest.raises(TypeError):
        _tensorgc._stack_hints("x")


def test_replay_of_a_trace_with_hostile_stacks():
    g = make_trace(layers=2, steps=2, d_model=64, stacks="python")
    trace = g.snapshot["device_traces"][0]
    odd = [None, {"filename": 1}, {"filename": "/t/torch/optim/adam.py", "name": "\udcff"}]
    for i, e in enumerate(trace):
        if i % 7 == 0 and e["action"] in ("alloc", "free_requested", "free_completed"):
            e["frames"] = odd if i % 2 else [{"filename": "x.py", "name": "f" * 100_000, "line": -1}]
    tl, _ = replay(g.snapshot, columns=50, detail=20)
    assert sum(tl["at_peak"].values()) == tl["max"]
    page = timeline_html(g.snapshot, detail=20)
    assert "\udcff" not in page


def test_recorded_marks_win_over_the_stacks():
    g = make_trace(layers=2, steps=3, d_model=64, stacks="all", categorize=True, **REAL)
    key = g.snapshot[KEY]
    trace = g.snapshot["device_traces"][0]
    # the reporter called one parameter a buffer: the recorded name wins over Module.to's stack
    param = next(i for i, e in enumerate(trace) if g.category_of(i) == "parameter")
    key["named"][0][trace[param]["addr"]] = "buffer"
    tl, _ = replay(g.snapshot, columns=1, detail=0)
    lab = tl["labels"]
    assert describe_label(lab[param]).startswith("buffer (named by the reporter")
    spans = [(s[1], s[2]) for s in key["spans"]]
    for i, e in enumerate(trace):
        if e["action"] != "alloc":
            continue
        rule = lab[i] >> 4
        if rule == 14:  # a stack that made a library's workspace names it, in a span or not
            assert CATEGORIES[lab[i] & 15] == "workspace" and g.category_of(i) == "workspace"
        elif any(t0 <= e["time_us"] <= t1 for t0, t1 in spans):  # a recorded span holds it
            assert 1 <= rule <= 5 and not lab[i] & LABEL_INFERRED
    # the loss, made outside the model's forward hooks, comes from the stacks
    assert any(lab[i] & LABEL_INFERRED and CATEGORIES[lab[i] & 15] == "activation"
               for i in range(len(trace)))
    assert accuracy(g, tl)["peak"] > 0.999  # all but the parameter called a buffer
    info = classification_inputs(g.snapshot)
    assert info["source"] == "recorded+inferred" and info["recorded"]["spans"] == 9


def _detail_rows(snap, tl, cols):
    d = _tensorgc._detail(cols, tl["pre"], tl["use_req"], 1000,
                          (tl["labels"], tl["pre_labels"], tl["name_index"],
                           tl["pre_name_index"], tl["names"]))
    A = decode(d)[0]
    E = [a if j >= d["npre"] else -1 for j, a in enumerate(A)]  # the trace entry: its position
    index = memoryview(d["name_index"]).cast("I")
    return d, E, d["cats"], index


def _page_data(snap):
    import json

    page = timeline_html(snap)
    return json.loads(page[page.index('id="tgc-data">') + 14:page.index("</script>")])


def test_detail_carries_each_allocations_label_and_name_freed_blocks_too():
    g = make_trace(layers=2, steps=3, d_model=64, stacks="python", categorize=True, **REAL)
    tl, trace, cols = _replay(g.snapshot, 0, 10, 0, None)
    d, E, cats, index = _detail_rows(g.snapshot, tl, cols)
    assert d["categories"] == CATEGORIES and len(cats) == d["n"] == len(index)
    assert d["names"][0] == "" and d["names"] is tl["names"]
    named = 0
    for j, e in enumerate(E):
        if e < 0:
            continue
        assert cats[j] == tl["labels"][e]
        if trace[e]["action"] == "alloc" and e in g.names:
            assert d["names"][index[j]] == g.names[e]
            named += 1
    grads = [e for e in g.names if g.category_of(e) == "grad"]
    assert len(grads) == 3 * 26 and named >= len(grads)  # every grad of every step, freed too
    # the page's data carries them (in its compressed parts) with what each label says
    page = _page_data(g.snapshot)
    assert page["cats"]["names"] == [c.replace("_", " ") for c in CATEGORIES]
    assert page["names"] == [_text(n) for n in tl["names"]]
    assert {"CT", "NI"} <= {p[0] for p in page["blob"]["parts"]}
    assert any(t.startswith("grad (") for t in page["cats"]["labels"].values())


def test_detail_without_labels_has_none():
    g = make_trace(layers=1, steps=1, d_model=32, stacks="none", annotations=False)
    tl, trace, cols = _replay(g.snapshot, 0, 10, 0, None)
    assert tl["labels"] is None
    d = _tensorgc._detail(cols, tl["pre"], tl["use_req"], 10)
    assert d["cats"] is None and d["names"] is None
    page = _page_data(g.snapshot)
    assert not page["cats"]["known"] and "CT" not in {p[0] for p in page["blob"]["parts"]}
    with pytest.raises(ValueError):
        _tensorgc._detail(cols, tl["pre"], tl["use_req"], 10, (b"", b"", b"", b"", []))
    with pytest.raises(TypeError):
        _tensorgc._detail(cols, tl["pre"], tl["use_req"], 10, (b"",))


def test_name_marks_in_the_key_are_checked_and_cut():
    g = make_trace(layers=1, steps=2, d_model=32, stacks="python", categorize=True)
    key = g.snapshot[KEY]
    key["name_marks"].append([0, 0x1000, 5, "n" * (NAME_MAX + 50)])
    parse(key)
    for bad in ([0, 1, 2], [0, -1, 2, "x"], [0, 1, 2, 3], [200, 1, 2, "x"], [0, True, 2, "x"], "x"):
        with pytest.raises(SnapshotError, match="name mark"):
            parse(dict(key, name_marks=[bad]))
    with pytest.raises(SnapshotError, match="name_marks"):
        parse(dict(key, name_marks={}))
    tl, _ = replay(g.snapshot, columns=1, detail=0)
    assert max(map(len, tl["names"])) <= NAME_MAX
    # a dumped file keeps them (untrusted again on the way in)
    blob = pickle.dumps(g.snapshot)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tgc-names-{os.getpid()}.pickle")
    with open(path, "wb") as f:
        f.write(blob)
    try:
        again = load_snapshot(path)
    finally:
        os.unlink(path)
    assert again[KEY]["name_marks"][-1][3] == "n" * (NAME_MAX + 50)  # the file's, as it was
    assert replay(again, columns=1, detail=0)[0]["names"] == tl["names"]


@pytest.mark.parametrize("classify, err", [
    (([], [], [], "x", None, []), TypeError), (([], [], [], None, 1, []), TypeError),
    (([], [], [], None, None, {}), TypeError), (([], [], [], None, b"", []), ValueError),
    (([], [], [], None, None, [(1, 2)]), ValueError),
    (([], [], [], None, None, [(1, "t", 2)]), ValueError),
    (([], [], [], None, None, [(1, 2, -1)]), ValueError),
    (([], [], [], None, None, [(1, 2, 1 << 32)]), ValueError),
    (([], [], [], None, None, [((1 << 64) - 1, 2, 1)]), ValueError),
])
def test_the_binding_checks_the_inference_inputs(classify, err):
    cols = _tensorgc._trace_columns([{"action": "alloc", "addr": 0x1000, "size": 512,
                                      "time_us": 1, "frames": []}])
    with pytest.raises(err):
        _tensorgc._timeline(cols, [(0x9000, 512)], 10, 10, False, classify)


def test_hints_beyond_the_stacks_and_names_at_the_end():
    """A stack id past the hints reads as no hint; a name mark at None is the end's."""
    cols = _tensorgc._trace_columns([
        {"action": "alloc", "addr": 0x1000, "size": 512, "time_us": 1, "frames": []},
        {"action": "alloc", "addr": 0x2000, "size": 512, "time_us": 2,
         "frames": [{"filename": "w.py", "name": "f", "line": 1}]}])
    tl = _tensorgc._timeline(cols, [(0x9000, 512)], 10, 10, False,
                             ([], [], [], b"\x00", bytes([0x08 | 3]), [(0x2000, None, 1),
                                                                  (0x9000, None, 2)]))
    labels = tl["labels"]
    assert labels[0] >> 4 == labels[1] >> 4 == 6  # no rule: other
    assert tl["pre_labels"][0] == CATEGORIES.index("parameter") | 8 << 4  # its stack's kind
    names = memoryview(tl["name_index"]).cast("I")
    assert list(names) == [0, 1] and memoryview(tl["pre_name_index"]).cast("I")[0] == 2


def test_generated_held_logits_are_outputs_recorded_or_inferred():
    """The loop keeps each step's logits and loss into the next step: output, from the
    recorded spans (the model's hooks) and from the stacks alike; the workspaces, made in the
    recorded forward, are workspaces by their C++ frames."""
    for categorize in (False, True):
        g = make_trace(layers=2, steps=3, d_model=64, stacks="all", hold_output=True,
                       categorize=categorize, **REAL)
        tl, _ = replay(g.snapshot, columns=1, detail=0)
        trace = g.snapshot["device_traces"][0]
        outs = [i for i in range(len(trace)) if g.category_of(i) == "output"]
        assert len(outs) == 2 * 3
        got = {CATEGORIES[tl["labels"][i] & 15] for i in outs}
        assert got == {"output"}
        rules = {tl["labels"][i] >> 4 for i in outs}
        assert rules == ({4, 11} if categorize else {11})  # the loss outside the model: 11
        ws = [i for i in range(len(trace)) if g.category_of(i) == "workspace"]
        assert len(ws) == 2 and all(tl["labels"][i] == CATEGORIES.index("workspace") | 14 << 4
                                    for i in ws)


def test_describe_label():
    assert describe_label(CATEGORIES.index("output") | 11 << 4) == (
        "output (inferred from the stacks: allocated in a forward, alive after the backward "
        "that followed, until the next result)")
    assert describe_label(CATEGORIES.index("workspace") | 14 << 4) == (
        "workspace (inferred from the stack: a library's workspace (cuBLAS, cuBLASLt, cuDNN))")
    assert describe_label(CATEGORIES.index("activation") | 12 << 4).endswith(
        "in a backward by a checkpoint's recompute, used after it)")
    assert describe_label(CATEGORIES.index("activation") | 11 << 4) == (
        "activation (inferred from the stacks: allocated in a forward, alive after it)")
    assert describe_label(CATEGORIES.index("temporary") | 10 << 4).endswith(
        "optimizer step, freed inside it)")
    assert describe_label(CATEGORIES.index("grad") | 2 << 4) == "grad (a grad landed in it)"
    assert describe_label(CATEGORIES.index("input") | 13 << 4).endswith("into the next forward)")
    assert (CATEGORIES.index("grad") | 9 << 4) & LABEL_INFERRED
    assert not (CATEGORIES.index("grad") | 2 << 4) & LABEL_INFERRED


# ---- a second recording: tools/record_gpt_snapshot.py (GPT-style decoder, 4 layers, d_model
# 512, vocab 16384, context 512, batch 8; non-reentrant checkpointing of each block, bf16
# autocast, 2 micro-batches a step, clipping, Adam + LambdaLR, 3 steps, logits kept into the
# next step, the next batch fetched first, detached losses kept, an OOM)

GPT = dict(layers=4, d=512, vocab=16384, ctx=512, batch=8, seq=512)


def _gpt_param_bytes(layers, d, vocab, ctx, **_):
    """Token and position embeddings, per block two LayerNorms, qkv, proj, fc and out Linears,
    a final LayerNorm; the head is the token embedding (tied): counted once. fp32."""
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    return 4 * (vocab * d + ctx * d + layers * block + 2 * d)


def _cublas_workspace_bytes(trace):
    """The bytes torch's cuBLAS and cuBLASLt handles took for their workspaces: the allocations
    whose C++ frames say so (read here without the classifier)."""
    return sum(e["size"] for e in trace if e["action"] == "alloc" and any(
        f.get("name", "").startswith(("at::cuda::setWorkspaceForHandle",
                                      "at::cuda::getCUDABlasLtWorkspace"))
        for f in e.get("frames") or ()))


@pytest.fixture(scope="module", params=["all", "python"])
def gpt(request):
    snap = load_snapshot(os.path.join(DATA, f"gpt-ckpt-{request.param}.pickle"))
    tl, trace, _ = _replay(snap, 0, 600, 0, None)
    return request.param, snap, tl, trace


def test_gpt_run_is_under_a_tenth_other_at_the_peak(gpt):
    mode, snap, tl, trace = gpt
    peak = tl["at_peak"]
    assert sum(peak.values()) == tl["max"]
    assert peak["other"] < 0.10 * tl["max"], peak
    line = categories_at_peak(snap)
    assert "inferred from the stacks" in line and "output 128.00M" in line


def test_gpt_run_holds_what_the_run_did(gpt):
    """Parameters: the model's, the tied head once; Adam's two states (made lazily in the first
    step) twice that; the grads once (one for the tied weight)."""
    mode, snap, tl, trace = gpt
    model = _gpt_param_bytes(**GPT)
    peak, over = tl["at_peak"], tl["cat_active"]
    assert peak["parameter"] == max(over["parameter"]) == model
    assert peak["optimizer_state"] == max(over["optimizer_state"]) == 2 * model
    # the peak is in the last micro-batch's backward: every grad accumulated once already
    assert peak["grad"] == max(over["grad"]) == model
    rules = tl["rules"]
    assert rules[8] == 52 and rules[9] == 3 * 52  # 52 parameters, their grads in 3 steps
    # the two batches the loop holds (the current one and the one fetched ahead): int64
    assert peak["input"] == 2 * GPT["batch"] * (GPT["seq"] + 1) * 8


def test_gpt_run_names_the_logits_the_loop_keeps(gpt):
    """`logits = model(x)` keeps each micro-batch's bf16 logits past its backward, into the next
    forward (and the last ones to the end): output, all six; at the peak, the current ones."""
    mode, snap, tl, trace = gpt
    logits = GPT["batch"] * GPT["seq"] * GPT["vocab"] * 2
    made = [i for i, e in enumerate(trace) if e["action"] == "alloc" and e["size"] == logits
            and any(f.get("name") == "forward" and f.get("filename", "").endswith("linear.py")
                    for f in e["frames"])]
    assert len(made) == 6
    assert all(describe_label(tl["labels"][i]).startswith("output (inferred") for i in made)
    assert tl["at_peak"]["output"] == logits + 4  # and the loss of that micro-batch
    # what the peak's temporaries are: the backward's first two grads, float32 over the logits
    # (nll_loss's and log_softmax's, before ToCopyBackward makes them bf16), and its seed (the
    # loss's grad, 1.0)
    assert tl["at_peak"]["temporary"] == 2 * 2 * logits + 4


def test_gpt_run_workspaces_need_cpp_frames(gpt):
    """With C++ frames the cuBLAS/cuBLASLt workspaces (one pair per thread: the loop's and the
    autograd engine's) are workspace; Python frames alone do not show them: other."""
    mode, snap, tl, trace = gpt
    ws = _cublas_workspace_bytes(trace)
    if mode == "all":
        assert ws == 2 * (32 << 20) + 2 * (1 << 20)
        assert tl["at_peak"]["workspace"] == max(tl["cat_active"]["workspace"]) == ws
        assert tl["rules"][14] == 4
    else:
        ws = 2 * (32 << 20) + 2 * (1 << 20)  # what the other recording's C++ frames show
        assert tl["at_peak"]["workspace"] == 0 and tl["rules"][14] == 0
        assert ws <= tl["at_peak"]["other"] < ws + 64  # and the kept detached losses


def test_gpt_run_recomputed_activations(gpt):
    """Non-reentrant checkpointing recomputes each block's forward inside the backward (its
    Python frames show the unpack hook, on the engine's thread too): what the backward frees
    after the recompute is an activation made again, the same bytes in each backward."""
    mode, snap, tl, trace = gpt
    lab = tl["labels"]
    backwards = [(t0, t1) for p, t0, t1 in tl["inferred_spans"] if p == 1]
    assert len(backwards) == 6
    per = [0] * 6
    for i, e in enumerate(trace):
        if e["action"] == "alloc" and lab[i] >> 4 == 12 and \
                CATEGORIES[lab[i] & 15] == "activation":
            assert any(f.get("name") == "unpack_hook" for f in e["frames"])
            per[next(k for k, (t0, t1) in enumerate(backwards) if t0 <= e["time_us"] <= t1)] \
                += e["size"]
    # per backward: at least the 4 blocks' saved inputs of LayerNorm and the Linears
    assert min(per) > 4 * 3 * GPT["batch"] * GPT["seq"] * GPT["d"] * 4
    # the same in each (the first one's cuBLASLt workspace, made inside its recompute, breaks
    # nothing), with either kind of stack
    assert per == [per[0]] * 6 == [294_387_776] * 6
