"""Categories over time on a real CUDA trace: three training steps of a small MLP with Adam under
tensorgc.categorize, with the allocator's history recorded. Run on the GPU machine:

    TENSORGC_TEST_DEVICE=cuda python3 -m pytest tests/test_categories_cuda.py -q

Expected bytes are the sizes the replay counts: the trace's (an allocation's requested bytes)
and, for blocks alive at the end, the snapshot's requested_size, so that the allocator's
rounding does not enter the comparison."""
import time

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc.categories import KEY, categorize
from tensorgc.timeline import categories_at_peak, replay, timeline_html
from _util import IS_CUDA

pytestmark = pytest.mark.skipif(not (IS_CUDA and torch.cuda.is_available()),
                                reason="needs TENSORGC_TEST_DEVICE=cuda and CUDA")


def _now():
    return time.time_ns() // 1000  # the clock of the trace's time_us


def per_event(snap, device):
    """(times, series): the trace time of each of the replay's events (None: alive before the
    trace) and the replay's bytes per category after each event (one column per event)."""
    trace = snap["device_traces"][device]
    free = ("free_requested" if any(e["action"] == "free_requested" for e in trace)
            else "free_completed")
    allocated = {e["addr"] for e in trace if e["action"] == "alloc"}
    pre = sum(1 for s in snap["segments"] if s["device"] == device for b in s["blocks"]
              if b["state"] == "active_allocated" and b["address"] not in allocated)
    times = [None] * pre + [e["time_us"] for e in trace if e["action"] in ("alloc", free, "oom")]
    tl, _ = replay(snap, device=device, columns=len(times), detail=0)
    assert tl["events"] == len(times)
    return times, tl["cat_active"]


def at(times, series, t):
    """Bytes per category after the last event at or before time t."""
    i = max(k for k, x in enumerate(times) if x is None or x <= t)
    return {c: v[i] for c, v in series.items()}


def block_size_at(trace, addr, t):
    """The size of the allocation made at addr most recently before time t (the block that a
    grad marked at t lives in)."""
    sizes = [e["size"] for e in trace if e["action"] == "alloc" and e["addr"] == addr
             and e["time_us"] <= t]
    assert sizes, f"no allocation at {addr:#x} before {t}"
    return sizes[-1]


def storage_ptr(t):
    return t.data_ptr() - t.storage_offset() * t.element_size()


def test_three_steps_of_an_mlp_with_adam(tmp_path):
    device = torch.device("cuda", torch.cuda.current_device())
    index = device.index
    torch.cuda.synchronize()
    try:  # a fresh history: one column per event below must stay under the replay's 100,000
        torch.cuda.memory._record_memory_history("all", context="all", stacks="python",
                                                 max_entries=50_000, clear_history=True)
    except TypeError:  # a torch without clear_history
        tensorgc.record_memory_history(max_entries=50_000)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                    torch.nn.Linear(512, 512), torch.nn.GELU(),
                                    torch.nn.Linear(512, 10)).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(64, 256, device=device)
        marks = []  # per step: (end of backward, grad storage ptrs and nbytes), end of step 1
        with categorize(model, opt) as handle:
            for step in range(3):
                loss = model(x).square().mean()
                loss.backward()
                t_bw = _now()
                grads = [(storage_ptr(p.grad), p.grad.nbytes) for p in model.parameters()]
                opt.step()
                t_opt = _now()
                marks.append((t_bw, grads, t_opt))
                opt.zero_grad(set_to_none=True)
                del loss
            torch.cuda.synchronize()
            snap = tensorgc.snapshot()
        state = [v for s in opt.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor) and v.is_cuda]
    finally:
        tensorgc.record_memory_history(enabled=None)
    assert handle.errors == 0

    # the file carries it all
    path = tmp_path / "s.pickle"
    tensorgc.dump_snapshot(path, snap)
    snap = tensorgc.load_snapshot(path)
    key = snap[KEY]
    assert [s[0] for s in key["spans"] if s[0] != "optimizer"] == ["forward", "backward"] * 3
    assert sum(1 for s in key["spans"] if s[0] == "optimizer") >= 3
    nparams = len(list(model.parameters()))
    assert len(key["grads"]) == 3 * nparams and all(d == index for d, _, _ in key["grads"])

    trace = snap["device_traces"][index]
    times, series = per_event(snap, index)

    # grads: at the end of each backward, the blocks the grads landed in, exactly
    for t_bw, grads, _ in marks:
        sizes = [block_size_at(trace, ptr, t_bw) for ptr, _ in grads]
        assert all(s >= nb for s, (_, nb) in zip(sizes, grads))
        assert at(times, series, t_bw)["grad"] == sum(sizes)

    # optimizer state: after step 1, Adam's exp_avg and exp_avg_sq (their blocks in the
    # snapshot: they are alive at the end)
    blocks = {b["address"]: b.get("requested_size", b["size"]) for s in snap["segments"]
              if s["device"] == index for b in s["blocks"] if b["state"] == "active_allocated"}
    state_blocks = [blocks[storage_ptr(v)] for v in state]
    assert all(s >= v.nbytes for s, v in zip(state_blocks, state))
    assert len(state) >= 2 * nparams  # exp_avg, exp_avg_sq (and step, when it is on CUDA)
    assert at(times, series, marks[0][2])["optimizer_state"] == sum(state_blocks)
    # and the parameters, named by the reporter at the snapshot
    param_blocks = sum(blocks[storage_ptr(p)] for p in model.parameters())
    assert series["parameter"][-1] == param_blocks

    # activations: alive at the end of each forward
    for _, t0, t1 in (s for s in key["spans"] if s[0] == "forward"):
        inside = [k for k, t in enumerate(times) if t is not None and t0 <= t <= t1]
        assert inside, "no allocation inside a forward"
        assert series["activation"][inside[-1]] > 0

    # the reporter's names travel in the file: every parameter's block is named
    from tensorgc.categories import names_of
    called = names_of(snap, index)
    for name, p in model.named_parameters():
        assert called[storage_ptr(p)] == name

    # and names over the run: every step's grads, freed by zero_grad, named in the replay
    from tensorgc.categories import name_marks_of
    marked = name_marks_of(snap, index)
    pnames = [n for n, _ in model.named_parameters()]
    assert sum(1 for _, _, n in marked if n.endswith(".grad")) == 3 * nparams
    assert {f"{n}.exp_avg" for n in pnames} <= {n for _, _, n in marked}
    tl, _ = replay(snap, device=index, columns=1, detail=0)
    name_index = memoryview(tl["name_index"]).cast("I")
    for t_bw, grads, _ in marks:
        for (ptr, _), name in zip(grads, pnames):
            entry = max(i for i, e in enumerate(trace) if e["action"] == "alloc"
                        and e["addr"] == ptr and e["time_us"] <= t_bw)
            assert tl["names"][name_index[entry]] == name + ".grad"

    # the page and the breakdown
    page = timeline_html(snap, device=index)
    assert '"0.weight"' in page  # the names of the blocks alive at the end, for the panel
    assert "Categories over time" in page and ">optimizer state</text>" in page
    assert categories_at_peak(snap, index).startswith("at the peak")
