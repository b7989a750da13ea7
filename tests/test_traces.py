"""The synthetic training traces of tests/_traces.py: deterministic, of torch's shape (the
snapshot checks and loads), the allocator's books balanced (every allocation inside a segment
alive then, the segments' blocks at the end the allocations alive at the end), the truth complete,
torch's ring buffer (max_entries) honoured, the stack modes as torch writes them."""
import pickle

from tensorgc import load_snapshot
from tensorgc.snapshot import check_snapshot
from tensorgc.categories import parse

from _traces import CATEGORIES, SIDE_STREAM, make_trace

MiB = 1 << 20


def _books(snap):
    """Replays the trace against its segments: every allocation lies in a segment alive then and
    never overlaps another live one; returns the allocations alive at the end {addr: size}."""
    segs = {}  # addr -> size
    live = {}
    for s in snap["segments"]:  # segments made before the trace are alive from the start
        segs[s["address"]] = s["total_size"]
    made = {e["addr"] for e in snap["device_traces"][0] if e["action"] == "segment_alloc"}
    for a in made:
        segs.pop(a, None)
    freed_before = [e for e in snap["device_traces"][0] if e["action"] == "segment_free"
                    and e["addr"] not in made]
    for e in freed_before:
        segs[e["addr"]] = e["size"]
    for e in snap["device_traces"][0]:
        act = e["action"]
        if act == "segment_alloc":
            assert e["addr"] not in segs
            segs[e["addr"]] = e["size"]
        elif act == "segment_free":
            assert not any(e["addr"] <= a < e["addr"] + e["size"] for a in live)
            del segs[e["addr"]]
        elif act == "alloc":
            assert e["addr"] not in live
            assert any(s <= e["addr"] and e["addr"] + e["size"] <= s + n for s, n in segs.items())
            live[e["addr"]] = e["size"]
        elif act == "free_completed":
            live.pop(e["addr"], None)  # made before the trace: not in live
    return live


def test_deterministic_for_a_seed_and_different_across_seeds():
    a = make_trace(layers=2, steps=2, d_model=64, seed=3)
    b = make_trace(layers=2, steps=2, d_model=64, seed=3)
    c = make_trace(layers=2, steps=2, d_model=64, seed=4)
    assert pickle.dumps(a.snapshot) == pickle.dumps(b.snapshot) and a.truth == b.truth
    assert pickle.dumps(a.snapshot) != pickle.dumps(c.snapshot)


def test_shape_books_and_truth(tmp_path):
    g = make_trace(layers=3, steps=3, d_model=128, optimizer="adamw", stacks="all", buffers=True)
    snap = g.snapshot
    check_snapshot(snap)
    path = tmp_path / "gen.pickle"
    path.write_bytes(pickle.dumps(snap))
    assert len(load_snapshot(str(path))["device_traces"][0]) == len(snap["device_traces"][0])
    trace = snap["device_traces"][0]
    live = _books(snap)
    blocks = {b["address"]: b["requested_size"] for s in snap["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"}
    assert blocks == live
    # every allocation has its truth; each category of a training run is there
    allocs = [i for i, e in enumerate(trace) if e["action"] == "alloc"]
    assert all(g.category_of(i) in CATEGORIES for i in allocs)
    # (nothing this run makes is of no category: "other" is the classifier's last resort)
    assert {g.category_of(i) for i in allocs} == set(CATEGORIES) - {"other"}
    assert all(g.category_of(i) is None for i, e in enumerate(trace) if e["action"] != "alloc")
    # the model's size: 3 layers of 12 d^2 + 13 d parameters and the head, fp32 (the trace says
    # the bytes asked for; the segments' blocks are rounded to 512)
    d = 128
    params = sum(trace[i]["size"] for i in allocs if g.category_of(i) == "parameter")
    assert params == 4 * (3 * (12 * d * d + 13 * d) + 1000 * d + 1000)
    assert all(b["size"] % 512 == 0 and b["size"] - 512 < b["requested_size"] <= b["size"]
               for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    opt = sum(trace[i]["size"] for i in allocs if g.category_of(i) == "optimizer_state")
    assert opt == 2 * params
    grads = [i for i in allocs if g.category_of(i) == "grad"]
    assert sum(trace[i]["size"] for i in grads) == 3 * params  # one set per step
    assert all(g.names[i].endswith(".grad") for i in grads)
    # times increase; frees come in requested/completed pairs; the OOM is torch's
    assert all(x["time_us"] < y["time_us"] for x, y in zip(trace, trace[1:]))
    kinds = [e["action"] for e in trace]
    assert kinds.count("free_requested") == kinds.count("free_completed")
    oom = trace[-1]
    assert oom["action"] == "oom" and oom["size"] == 1 << 50 and oom["device_free"] > 0
    assert "addr" not in oom and kinds[-2] == "segment_free"
    seg_sizes = {e["size"] for e in trace if e["action"] == "segment_alloc"}
    assert 2 * MiB in seg_sizes and 20 * MiB in seg_sizes and max(seg_sizes) > 20 * MiB


def test_stack_modes_look_like_torch():
    def frames(g, pred):
        t = g.snapshot["device_traces"][0]
        return [t[i]["frames"] for i in range(len(t)) if pred(g, i)]

    def is_grad(g, i):
        return g.category_of(i) == "grad"

    def is_act(g, i):
        return g.category_of(i) == "activation"

    full = make_trace(layers=2, steps=2, d_model=64, stacks="all")
    py = make_trace(layers=2, steps=2, d_model=64, stacks="python")
    none = make_trace(layers=2, steps=2, d_model=64, stacks="none")
    names = [[f["name"] for f in fs] for fs in frames(full, is_grad)]
    assert all(any("Engine::evaluate_function" in n for n in ns) for ns in names)
    assert any(any("AccumulateGrad::apply" in n for n in ns) for ns in names)
    assert all(not any(f["filename"].endswith(".py") for f in fs) for fs in frames(full, is_grad))
    act = frames(full, is_act)[0]
    files = [f["filename"] for f in act]
    assert files.index(next(f for f in files if f.endswith(".py"))) > 6  # C++ first, as torch
    assert any(f["name"] == "_call_impl" for f in act)
    assert all(fs == [] for fs in frames(py, is_grad))  # the engine's thread has no Python
    assert all(f["filename"].endswith(".py") for fs in frames(py, is_act) for f in fs)
    assert all(e["frames"] == [] for e in none.snapshot["device_traces"][0])


def test_ring_buffer_keeps_the_last_entries_and_their_truth():
    full = make_trace(layers=2, steps=6, d_model=64, oom=False)
    cut = make_trace(layers=2, steps=6, d_model=64, oom=False, max_entries=1500)
    t_full, t_cut = full.snapshot["device_traces"][0], cut.snapshot["device_traces"][0]
    assert len(t_cut) == 1500 and t_cut == t_full[-1500:]
    for j, (a, b) in enumerate(zip(cut.truth, full.truth[-1500:])):
        if b:  # an allocation: the same truth
            assert a == b
        elif a:  # the free of a block made before the cut carries its category
            assert t_cut[j]["action"] in ("free_requested", "free_completed")
            assert cut.pre[t_cut[j]["addr"]] == a - 1
    # the blocks alive at the cut: the parameters and the optimizer state among them
    pre = list(cut.pre.values())
    assert pre.count(CATEGORIES.index("parameter")) == 2 * 12 + 2
    assert pre.count(CATEGORIES.index("optimizer_state")) == 2 * (2 * 12 + 2)
    check_snapshot(cut.snapshot)
    _books(cut.snapshot)


def test_steps_until_max_entries_and_categorize_marks():
    g = make_trace(layers=1, steps=None, d_model=32, max_entries=20_000, optimizer="sgd",
                   stacks="python", categorize=True, side_stream=True)
    trace = g.snapshot["device_traces"][0]
    assert len(trace) == 20_000 and g.steps > 20
    assert {e["stream"] for e in trace} == {0, SIDE_STREAM}
    inputs = [e for i, e in enumerate(trace) if g.category_of(i) == "input"]
    assert inputs and all(e["stream"] == SIDE_STREAM for e in inputs)
    spans, grads, named, _ = parse(g.snapshot["tensorgc_categories"])
    assert {p for p, _, _ in spans} == {0, 1, 2} and grads
    assert set(named[0].values()) <= set(CATEGORIES)
    check_snapshot(g.snapshot)
