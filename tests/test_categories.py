"""Categories over time: the C replay's rules on traces built as dicts (exact bytes per category
per column, address reuse, nesting, open spans, torch's annotations), the marks that
tensorgc.categorize records on a real CPU model, the snapshot key as untrusted input, and the
page and the CLI."""
import logging
import pickle
import threading

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc import SnapshotError, _tensorgc, dump_snapshot, load_snapshot
from tensorgc.categories import (CATEGORIES, KEY, OPEN, PHASES, annotation_spans, categorize,
                                 parse, snapshot_key)
from tensorgc.timeline import categories_at_peak, replay, timeline_html
from _util import markup, run_tensorgc_cli

MB = 1 << 20
KB = 1 << 10


def ev(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": [{"filename": "/w/train.py", "line": 3, "name": "f"}]}


def snap_of(trace, blocks=(), key=None, **extra):
    seg = {"device": 0, "address": 0x1000, "total_size": 64 * MB, "stream": 0,
           "blocks": list(blocks)}
    s = {"segments": [seg], "device_traces": [trace]}
    if key is not None:
        s[KEY] = key
    s.update(extra)
    return s


# One training step, every rule once. (name, addr, size, alloc time, free time or None, category)
# with the phases forward [100, 200], backward [300, 400], optimizer [500, 600].
STEP = [
    ("P", 0x1000, 4 * MB, 10, None, "parameter"),        # 1: named at the end
    ("A", 0x2000, 2 * MB, 110, 320, "activation"),       # 4: forward, outlives it
    ("T", 0x3000, 1 * MB, 120, 150, "temporary"),        # 4: forward, freed inside
    ("G", 0x3000, 1 * MB, 310, 700, "grad"),             # 2: T's address again; mark at 315
    ("B", 0x4000, 512 * KB, 330, 350, "temporary"),      # 5: backward, freed inside
    ("O", 0x5000, 256 * KB, 360, 800, "other"),          # 5: backward, outlives it
    ("S", 0x6000, 3 * MB, 510, None, "optimizer_state"),  # 3: optimizer, alive at the end
    ("U", 0x7000, 1 * MB, 520, 530, "temporary"),        # 3: optimizer, freed inside
    ("X", 0x3000, 1 * MB, 710, None, "buffer"),          # 1: G's address again, named buffer
    ("Y", 0x8000, 256 * KB, 720, None, "other"),         # 6: outside every span
]
SPANS = [["forward", 100, 200], ["backward", 300, 400], ["optimizer", 500, 600]]
# grad marks: G at 315 (T at 0x3000 was freed at 150, X comes at 710); one at an address that
# holds nothing then; one for another device
GRADS = [[0, 0x3000, 315], [0, 0x9000, 316], [1, 0x2000, 115]]
NAMED = {0: {0x1000: "parameter", 0x3000: "buffer", 0x2000: "parameter", 0x8000: "other"}}


def step_trace(rows=STEP):
    events = []
    for name, addr, size, t0, t1, _ in rows:
        events.append((t0, 0, ev("alloc", addr, size, t0)))
        if t1 is not None:
            events.append((t1, 1, ev("free_completed", addr, size, t1)))
    return [e for _, _, e in sorted(events, key=lambda x: (x[0], x[1]))]


def expected_by_column(trace, rows=STEP):
    """Bytes per category after each event (one column per event), from the rows' own
    categories: what the replay must find."""
    cat = {}
    live = {}
    out = {c: [] for c in CATEGORIES}
    by_alloc = {(r[1], r[3]): r for r in rows}
    now = {c: 0 for c in CATEGORIES}
    for e in trace:
        if e["action"] == "alloc":
            r = by_alloc[(e["addr"], e["time_us"])]
            live[e["addr"]] = r
            now[r[5]] += r[2]
        else:
            r = live.pop(e["addr"])
            now[r[5]] -= r[2]
        cat[r[0]] = r[5]
        for c in CATEGORIES:
            out[c].append(now[c])
    return out


def key(spans=SPANS, grads=GRADS, named=NAMED):
    return {"version": 1, "spans": spans, "grads": grads, "named": named}


def test_every_rule_exact_bytes_per_category_per_column():
    trace = step_trace()
    tl, _ = replay(snap_of(trace, key=key()), columns=len(trace), detail=100)
    assert tl["marks"] is True
    assert tl["cat_active"] == expected_by_column(trace)
    # by hand, at the end: P 4M + X 1M (buffer) + S 3M + Y 256K
    end = {k: v[-1] for k, v in tl["cat_active"].items()}
    assert end == {"parameter": 4 * MB, "buffer": MB, "optimizer_state": 3 * MB, "grad": 0,
                   "input": 0, "activation": 0, "temporary": 0, "other": 256 * KB,
                   "workspace": 0, "output": 0}
    alive = {b[6]: (tl["categories"][b[7]], b[8]) for b in tl["bands"] if b[1] < 0}
    assert alive[0x1000] == ("parameter", 1) and alive[0x3000] == ("buffer", 1)
    assert alive[0x8000] == ("other", 6)
    # the grad mark picked G, not T (freed before it) nor X (allocated after it)
    g = next(b for b in tl["bands"] if b[6] == 0x3000 and b[2] == MB and b[1] >= 0
             and trace[b[0]]["time_us"] == 310)
    assert (tl["categories"][g[7]], g[8]) == ("grad", 2)
    t = next(b for b in tl["bands"] if b[6] == 0x3000 and trace[b[0]]["time_us"] == 120)
    assert (tl["categories"][t[7]], t[8]) == ("temporary", 4)
    # the peak: P 4M + G 1M + O 256K + S 3M = 8.25M at t=510; U (1M) at 520 makes 9.25M
    assert tl["max"] == 4 * MB + MB + 256 * KB + 3 * MB + MB
    assert trace[tl["peak_event"]]["time_us"] == 520
    assert tl["at_peak"] == {"parameter": 4 * MB, "buffer": 0, "optimizer_state": 3 * MB,
                             "grad": MB, "input": 0, "activation": 0, "temporary": MB,
                             "other": 256 * KB, "workspace": 0, "output": 0}


def test_columns_sum_to_active_and_stay_exact_with_fewer_columns():
    trace = step_trace()
    full = expected_by_column(trace)
    tl, _ = replay(snap_of(trace, key=key()), columns=5, detail=3)
    n = len(trace)
    for c in range(5):
        last = (c + 1) * n // 5 - 1  # the event that ends column c
        assert {k: v[c] for k, v in tl["cat_active"].items()} == {k: v[last] for k, v in full.items()}
        assert sum(v[c] for v in tl["cat_active"].values()) == tl["active"][c]


def test_named_blocks_freed_before_the_end_are_not_named():
    # 0x2000 is named "parameter" in NAMED, but A was freed at 320: activation
    trace = step_trace()
    tl, _ = replay(snap_of(trace, key=key()), columns=len(trace), detail=100)
    a = next(b for b in tl["bands"] if b[6] == 0x2000)
    assert tl["categories"][a[7]] == "activation"


def test_innermost_span_wins_and_open_spans_keep_what_is_alive():
    rows = [("F", 0x1000, MB, 120, 130, "temporary"),   # forward inside a step (LBFGS closure)
            ("K", 0x2000, MB, 140, None, "activation"),  # forward still open at the snapshot
            ("S", 0x3000, MB, 105, None, "optimizer_state")]
    trace = step_trace(rows)
    spans = [["optimizer", 100, 300], ["forward", 110, OPEN]]
    tl, _ = replay(snap_of(trace, key=key(spans, [], {})), columns=len(trace), detail=10)
    assert tl["cat_active"] == expected_by_column(trace, rows)


def test_overlapping_spans_of_one_phase_merge():
    # torch's annotation and the optimizer hook mark the same step: one span
    rows = [("U", 0x1000, MB, 150, 190, "temporary"), ("S", 0x2000, MB, 160, None,
                                                       "optimizer_state")]
    trace = step_trace(rows)
    spans = [["optimizer", 100, 180], ["optimizer", 120, 200]]
    tl, _ = replay(snap_of(trace, key=key(spans, [], {})), columns=len(trace), detail=10)
    assert tl["cat_active"] == expected_by_column(trace, rows)


def test_pre_existing_allocations_are_other_unless_named():
    trace = [ev("alloc", 0x5000, MB, 110), ev("free_completed", 0x9000, 2 * MB, 120)]
    blocks = [{"address": 0x7000, "size": 3 * MB, "state": "active_allocated"},
              {"address": 0x6000, "size": MB, "state": "active_allocated"},
              {"address": 0x5000, "size": MB, "state": "active_allocated"}]
    k = key([["forward", 100, 200]], [[0, 0x6000, 105]], {0: {0x7000: "parameter"}})
    tl, _ = replay(snap_of(trace, blocks, key=k), columns=4, detail=10)
    # events: pre 0x7000, pre 0x6000, alloc 0x5000, free 0x9000 (alive from the start)
    ca = tl["cat_active"]
    assert ca["parameter"] == [3 * MB] * 4
    assert ca["grad"] == [MB] * 4  # a grad mark finds a pre-existing block alive
    # 0x5000: made in the forward and alive at the end, but the reporter, which named the end,
    # did not name it: no tensor holds it, so it is no activation
    assert ca["activation"] == [0, 0, 0, 0]
    assert ca["other"] == [2 * MB, 2 * MB, 3 * MB, MB]


def test_a_trace_without_times_uses_no_marks():
    trace = [{"action": "alloc", "addr": 0x1000, "size": MB},
             {"action": "alloc", "addr": 0x2000, "size": MB}]
    tl, _ = replay(snap_of(trace, key=key([["forward", 0, 10]], [[0, 0x1000, 5]],
                                          {0: {0x2000: "parameter"}})), columns=2, detail=5)
    assert tl["marks"] is False
    assert tl["cat_active"]["parameter"] == [0, MB] and tl["cat_active"]["other"] == [MB, MB]


def test_no_classification_keeps_the_old_replay():
    tl, _ = replay(snap_of(step_trace()), columns=4, detail=5)
    assert tl["cat_active"] is None and tl["at_peak"] is None and tl["marks"] is False
    assert all(b[7] == CATEGORIES.index("other") and b[8] == 0 for b in tl["bands"])


def test_torch_optimizer_annotations_give_spans_with_no_setup():
    notes = [{"stage": "START", "name": "Optimizer.step#Adam.step", "device": 0, "time_us": 500},
             {"stage": "START", "name": "Optimizer.zero_grad#Adam.zero_grad", "device": 0,
              "time_us": 650},
             {"stage": "END", "name": "Optimizer.step#Adam.step", "device": 0, "time_us": 600},
             {"stage": "START", "name": "Optimizer.step#Adam.step", "device": 0, "time_us": 900},
             {"stage": "END", "name": 7, "time_us": "x"}, "junk", None]
    assert annotation_spans({"external_annotations": notes}) == [(2, 500, 600), (2, 900, OPEN)]
    rows = [("S", 0x1000, MB, 510, None, "optimizer_state"), ("U", 0x2000, MB, 520, 530,
                                                              "temporary"),
            ("N", 0x3000, MB, 910, None, "optimizer_state"),  # inside the open step (an OOM)
            ("Y", 0x4000, MB, 700, None, "other")]
    trace = step_trace(rows)
    tl, _ = replay(snap_of(trace, external_annotations=notes), columns=len(trace), detail=10)
    assert tl["marks"] is True
    assert tl["cat_active"] == expected_by_column(trace, rows)


def test_explicit_categories_win_over_the_file_and_other_names_nothing():
    trace = step_trace()
    tl, _ = replay(snap_of(trace, key=key()), columns=len(trace), detail=100,
                   categories={0x8000: "activation", 0x6000: "other", "x": "grad"})
    y = next(b for b in tl["bands"] if b[6] == 0x8000)
    s = next(b for b in tl["bands"] if b[6] == 0x6000)
    assert tl["categories"][y[7]] == "activation" and y[8] == 1
    assert tl["categories"][s[7]] == "optimizer_state" and s[8] == 3


@pytest.mark.parametrize("classify, err", [
    ("x", TypeError), (([], []), TypeError), (([], [], {}), TypeError),
    (([(0, 1)], [], []), ValueError), (([(3, 1, 2)], [], []), ValueError),
    (([(0, 5, 2)], [], []), ValueError), (([(0, "a", 2)], [], []), ValueError),
    (([(0, 1 << 63, 2)], [], []), ValueError), (([], [(-1, 5)], []), ValueError),
    (([], [((1 << 64) - 1, 5)], []), ValueError), (([], [], [(1, len(CATEGORIES))]), ValueError),
    (([], [], [[1, 0]]), ValueError), (([], [(1.5, 2)], []), ValueError),
])
def test_the_binding_checks_its_inputs(classify, err):
    trace = step_trace()
    with pytest.raises(err):
        _tensorgc._timeline(_tensorgc._trace_columns(trace), [], 10, 10, False, classify)


def test_bad_times_in_the_trace_are_value_errors():
    trace = step_trace()
    trace[2]["time_us"] = "soon"
    with pytest.raises(ValueError, match="time_us must be an int"):
        _tensorgc._timeline(_tensorgc._trace_columns(trace), [], 10, 10, False, ([], [], []))
    trace[2]["time_us"] = 1 << 63
    with pytest.raises(ValueError, match="time_us out of range"):
        _tensorgc._timeline(_tensorgc._trace_columns(trace), [], 10, 10, False, ([], [], []))
    _tensorgc._timeline(_tensorgc._trace_columns(trace), [], 10, 10, False, None)  # times are not read without marks


def test_many_marks_stay_linear():
    import time

    n = 200_000
    trace = []
    for i in range(n):
        trace.append(ev("alloc", 0x1000 + (i % 64) * 0x100000, 512, 10 * i))
        trace.append(ev("free_completed", 0x1000 + (i % 64) * 0x100000, 512, 10 * i + 5))
    spans = [["forward", 10 * i, 10 * i + 3] for i in range(0, n, 2)]
    grads = [[0, 0x1000 + (i % 64) * 0x100000, 10 * i + 1] for i in range(1, n, 2)]
    t0 = time.perf_counter()
    tl, _ = replay(snap_of(trace, key=key(spans, grads, {})), columns=1200, detail=300)
    assert time.perf_counter() - t0 < 20
    assert tl["cat_active"]["temporary"][-1] == 0 and tl["allocs"] == n


# ---------------------------------------------------------------------- the page and the CLI

def test_page_colours_every_band_by_category_and_draws_the_areas():
    trace = step_trace()
    page = timeline_html(snap_of(trace, key=key()), detail=100)
    for kind in ("parameter", "grad", "optimizer_state", "activation", "temporary", "buffer"):
        assert f">{kind.replace('_', ' ')}</text>" in page
    assert 'fill="#9ccc65"' in page  # temporary
    # the legend: one entry per category, its bytes at the peak in its title
    assert "Categories over time" in page and page.count('class="lg"') == 7
    assert "optimizer state: 3.00M at the peak (event 10)" in page
    assert "At the peak (event 10, 9.25M): parameter 4.00M, optimizer state 3.00M" in page
    # the largest alive at the peak say why; one colour per category, none by site
    assert "grad (a grad landed in it)" in page and "hsl(" not in page
    assert "<script" not in markup(page)


def test_named_only_keeps_site_colours_with_the_areas():
    trace = step_trace()
    page = timeline_html(snap_of(trace, key=key([], [], NAMED)), detail=100)
    assert 'fill="#7b3fb5"' in page  # the parameter, named
    assert "Only the blocks named at the snapshot are known here" in page
    assert 'fill="#d93b3b"' not in page  # no grad known without marks


def test_page_without_categories_has_no_areas():
    page = timeline_html(snap_of(step_trace()), detail=10)
    assert "Categories over time" not in page and 'class="a"' not in page


def test_hostile_strings_never_reach_the_page(tmp_path):
    trace = step_trace()
    trace[0]["frames"] = [{"filename": "<script>alert(1)</script>.py", "line": 1, "name": "<b>"}]
    notes = [{"stage": "START", "name": "Optimizer.step#<script>x</script>", "device": "<i>",
              "time_us": 500}]
    page = timeline_html(snap_of(trace, key=key(), external_annotations=notes), detail=100,
                         categories={0x8000: "<script>", 0x6000: "<img src=x>"})
    page = markup(page)
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    # legacy colouring (no marks) shows the caller's kind, escaped
    page = markup(timeline_html(snap_of(trace), detail=100, categories={0x8000: "<script>"}))
    assert "<script" not in page and "&lt;script&gt;" in page


def test_cli_stats_prints_the_breakdown_and_timeline_uses_the_file(tmp_path):
    p = tmp_path / "s.pickle"
    dump_snapshot(p, snap_of(step_trace(), key=key()))
    r = run_tensorgc_cli("stats", str(p))
    assert r.returncode == 0, r.stderr
    assert ("categories at the peak (event 10, 9.25M): parameter 4.00M, optimizer state 3.00M, "
            "grad 1.00M, temporary 1.00M, other 256.00K") in r.stdout
    out = tmp_path / "t.html"
    r = run_tensorgc_cli("timeline", str(p), "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert "Categories over time" in page and ">optimizer state</text>" in page
    # no categories: no line
    dump_snapshot(p, snap_of(step_trace()))
    r = run_tensorgc_cli("stats", str(p))
    assert r.returncode == 0 and "categories" not in r.stdout


def test_categories_at_peak_is_none_without_anything_to_classify():
    assert categories_at_peak(snap_of(step_trace())) is None
    assert categories_at_peak(snap_of(step_trace(), key=key())).startswith("at the peak")


# ---------------------------------------------------------------------- the key, untrusted

def _load(tmp_path, value, name="k.pickle"):
    p = tmp_path / name
    with open(p, "wb") as f:
        pickle.dump(snap_of(step_trace(), key=value), f, protocol=4)
    return load_snapshot(p)


BAD_KEYS = [
    ([1], "must be a dict, not list"),
    ({"version": "1"}, "'version' must be an int"),
    ({"version": 1, "spans": {}}, "'spans' must be a list, not dict"),
    ({"version": 1, "grads": "x"}, "'grads' must be a list, not str"),
    ({"version": 1, "named": []}, "'named' must be a dict, not list"),
    ({"version": 1, "dropped": 3}, "'dropped' must be a dict"),
    ({"version": 1, "spans": [["<script>alert(1)</script>", 1, 2]]}, "span 0 must be"),
    ({"version": 1, "spans": [["forward", 5, 2]]}, "t0 <= t1"),
    ({"version": 1, "spans": [["forward", 1.0, 2]]}, "span 0"),
    ({"version": 1, "spans": [["forward", True, 2]]}, "span 0"),
    ({"version": 1, "spans": [["forward", 1, 2, 3]]}, "span 0"),
    ({"version": 1, "spans": [["forward", 1, 1 << 63]]}, "span 0"),
    ({"version": 1, "grads": [[0, -5, 1]]}, "grad mark 0"),
    ({"version": 1, "grads": [[500, 5, 1]]}, "grad mark 0"),
    ({"version": 1, "grads": [["0", 5, 1]]}, "grad mark 0"),
    ({"version": 1, "named": {"0": {}}}, "'named' must map device indices"),
    ({"version": 1, "named": {0: []}}, "'named' must map device indices"),
    ({"version": 1, "named": {0: {5: "<script>"}}}, "named block 5 of device 0"),
    ({"version": 1, "named": {0: {"5": "grad"}}}, "named block '5' of device 0"),
    ({"version": 1, "dropped": {"grads": -1}}, "'dropped' counts"),
    ({"version": 1, "names": []}, "'names' must be a dict, not list"),
    ({"version": 1, "names": {"0": {}}}, "'names' must map device indices"),
    ({"version": 1, "names": {0: {5: b"w"}}}, "name of block 5 of device 0"),
    ({"version": 1, "names": {0: {-5: "w"}}}, "name of block -5 of device 0"),
]


@pytest.mark.parametrize("value, msg", BAD_KEYS)
def test_hostile_keys_are_snapshot_errors(tmp_path, value, msg):
    with pytest.raises(SnapshotError, match=msg.replace("(", r"\(").replace(")", r"\)")) as exc:
        _load(tmp_path, value)
    assert KEY in str(exc.value) and len(str(exc.value)) < 600


@pytest.mark.parametrize("value, msg", BAD_KEYS[:3])
def test_every_command_refuses_a_bad_key(tmp_path, capsys, value, msg):
    from tensorgc import cli

    p = tmp_path / "bad.pickle"
    with open(p, "wb") as f:
        pickle.dump(snap_of(step_trace(), key=value), f, protocol=4)
    for argv in (["stats", p], ["timeline", p, "-o", tmp_path / "o.html"]):
        assert cli.main([str(a) for a in argv]) == 1
        assert KEY in capsys.readouterr().err


def test_in_memory_snapshots_are_checked_by_the_replay_too():
    with pytest.raises(SnapshotError, match="span 0"):
        replay(snap_of(step_trace(), key={"version": 1, "spans": [["x", 1, 2]]}))


def test_a_newer_version_is_ignored_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="tensorgc"):
        snap = _load(tmp_path, {"version": 2, "spans": "anything"})
    assert KEY not in snap and any("version 2" in r.message for r in caplog.records)


def test_long_lists_are_fine_and_memo_repetition_is_refused(tmp_path):
    n = 300_000
    snap = _load(tmp_path, {"version": 1, "grads": [[0, 0x1000 + i, i] for i in range(n)],
                            "spans": [["forward", i, i + 1] for i in range(n)]})
    assert len(snap[KEY]["grads"]) == n
    # one dict of 50,000 blocks named for 128 devices through the memo: 6.4 million rows
    # from a file of a few hundred KB
    blocks = {0x1000 + i: "grad" for i in range(50_000)}
    with pytest.raises(SnapshotError, match="repeats lists through the memo"):
        _load(tmp_path, {"version": 1, "named": {d: blocks for d in range(128)}})


def test_names_travel_in_the_key_cut_and_bounded(tmp_path):
    from tensorgc.categories import NAME_MAX, names_of

    long = "m." + "x" * (NAME_MAX * 3)
    snap = _load(tmp_path, {"version": 1, "names": {0: {0x1000: "fc.weight", 0x2000: long},
                                                    1: {0x3000: "<b>"}}})
    assert names_of(snap, 0) == {0x1000: "fc.weight", 0x2000: long[:NAME_MAX]}
    assert names_of(snap, 1) == {0x3000: "<b>"} and names_of(snap, 2) == {}
    assert names_of({"segments": []}, 0) == {}
    blocks = {0x1000 + i: "w" for i in range(50_000)}
    with pytest.raises(SnapshotError, match="repeats dicts through the memo"):
        _load(tmp_path, {"version": 1, "names": {d: blocks for d in range(128)}})


def test_memory_viz_ignores_the_key():
    from torch.cuda import _memory_viz

    snap = snap_of(step_trace(), key=key())
    page = _memory_viz.trace_plot(snap)
    assert "<html" in page.lower() or "<!doctype" in page.lower()


# ---------------------------------------------------------------------- the hooks, on CPU

def _train(model, opt, steps, x):
    for _ in range(steps):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def test_real_hooks_record_spans_and_grads_in_order():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 16)
    ptrs = []
    with categorize(model, opt) as h:
        for _ in range(3):
            loss = model(x).square().mean()
            loss.backward()
            ptrs.append({p.grad.data_ptr() for p in model.parameters()})
            opt.step()
            opt.zero_grad(set_to_none=True)
        m = h.marks()
    assert not h.active and h.errors == 0
    spans, grads = m["spans"], m["grads"]
    assert [s[0] for s in spans] == ["forward", "backward", "optimizer"] * 3
    assert all(t0 <= t1 for _, t0, t1 in spans)
    flat = [t for _, t0, t1 in spans for t in (t0, t1)]
    assert flat == sorted(flat)  # the phases follow each other, step after step
    assert len(grads) == 4 * 3 and m["dropped"] == {"spans": 0, "grads": 0, "names": 0}
    for k in range(3):
        _, b0, b1 = spans[3 * k + 1]
        step = grads[4 * k:4 * k + 4]
        assert all(d == -1 and b0 <= t <= b1 for d, _, t in step)  # CPU; inside the backward
        assert {a for _, a, _ in step} == ptrs[k]
    # each grad named as it lands, by the model's parameter names (CPU: no states named)
    assert [n[:3] for n in m["name_marks"]] == grads
    assert {n[3] for n in m["name_marks"]} == {"0.weight.grad", "0.bias.grad", "2.weight.grad",
                                               "2.bias.grad"}


def test_states_are_named_once_when_they_appear():
    """After a step at which the optimizer holds new states: each parameter's and state's name
    at its address (meta tensors stand for CUDA ones here: not on the CPU, address 0), once;
    the step count on the CPU is left out."""
    model = torch.nn.Linear(4, 4, device="meta")
    opt = torch.optim.Adam(model.parameters())
    with categorize(model, opt) as h:
        for p in model.parameters():
            opt.state[p] = {"step": torch.tensor(1.0), "exp_avg": torch.empty_like(p),
                            "exp_avg_sq": torch.empty_like(p)}
        for _ in range(3):
            h._step_pre(opt, (), {})
            h._step_post(opt, (), {})
        m = h.marks()
    assert h.errors == 0
    assert [n[3] for n in m["name_marks"]] == ["weight", "weight.exp_avg", "weight.exp_avg_sq",
                                               "bias", "bias.exp_avg", "bias.exp_avg_sq"]
    assert all(n[:2] == [-1, 0] for n in m["name_marks"])


def test_remove_takes_every_hook_off_and_holds_no_model():
    import weakref

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    h = categorize(model, opt)
    assert h in tensorgc.categories.active()
    h.remove()
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not model.weight._post_accumulate_grad_hooks
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    assert h not in tensorgc.categories.active()
    _train(model, opt, 1, torch.randn(2, 4))
    assert h.marks()["spans"] == []
    # no cycle: the model goes with its last reference (automatic gc is off in the tests)
    h2 = categorize(model, opt)
    ref = weakref.ref(model)
    del model, opt
    assert ref() is None and h2.model() is None
    h2.remove()


def test_hooks_never_raise_into_training(monkeypatch, caplog):
    from tensorgc import categories

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = [0]

    def broken():
        calls[0] += 1
        raise RuntimeError("clock broke")

    with categorize(model, opt) as h:
        monkeypatch.setattr(categories, "_now", broken)
        with caplog.at_level(logging.ERROR, logger="tensorgc"):
            _train(model, opt, 2, torch.randn(2, 4))
    assert h.errors >= 4 and calls[0] >= 4
    assert sum("clock broke" in (r.exc_text or "") or "hook failed" in r.message
               for r in caplog.records) == 1  # said once


def test_one_backward_span_for_several_outputs():
    model = torch.nn.Linear(4, 4)
    with categorize(model) as h:
        a = model(torch.randn(2, 4))
        b = model(torch.randn(2, 4))
        (a.sum() + b.sum()).backward()
        m = h.marks()
    assert [s[0] for s in m["spans"]] == ["forward", "forward", "backward"]
    assert len(m["grads"]) == 2


def test_marks_are_bounded_and_keep_the_newest():
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with categorize(model, opt, max_marks=5) as h:
        _train(model, opt, 4, torch.randn(2, 4))
        m = h.marks()
    assert len(m["spans"]) == 5 and m["dropped"] == {"spans": 7, "grads": 3, "names": 3}
    # the newest five of 4 x (forward, backward, optimizer), oldest first
    assert [s[0] for s in m["spans"]] == ["backward", "optimizer", "forward", "backward",
                                          "optimizer"]
    assert m["spans"] == sorted(m["spans"], key=lambda s: s[1])
    assert len(m["grads"]) == 5 and len(m["name_marks"]) == 5 and h.dropped == 13
    with pytest.raises(ValueError):
        categorize(model, max_marks=0)


def test_open_spans_end_at_the_snapshot():
    model = torch.nn.Linear(4, 4)
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(h.marks())  # a snapshot inside the forward (an OOM there)
            return model(x)

    probe = Probe()
    with categorize(probe) as h:
        probe(torch.randn(2, 4))
    (phase, t0, t1), = seen[0]["spans"]
    assert phase == "forward" and t0 <= t1


def test_grad_marks_from_other_threads():
    model = torch.nn.Linear(4, 4)
    with categorize(model) as h:
        threads = [threading.Thread(target=lambda: model(torch.randn(2, 4)).sum().backward())
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        m = h.marks()
    assert len(m["grads"]) == 8 and all(len(g) == 3 for g in m["grads"])
    assert [s[0] for s in m["spans"]].count("forward") == 4


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        categorize()
    with pytest.raises(TypeError):
        categorize(object())
    with pytest.raises(TypeError):
        categorize(torch.nn.Linear(2, 2), optimizer="adam")


def test_snapshot_attaches_the_marks(monkeypatch, tmp_path):
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot",
                        lambda *a, **k: {"segments": [], "device_traces": []})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as where there is CUDA
    assert KEY not in tensorgc.snapshot()  # no handle: torch's dict as it was
    with categorize(model, opt):
        _train(model, opt, 1, torch.randn(2, 4))
        snap = tensorgc.snapshot()
        assert KEY not in tensorgc.snapshot(categories=False)
        named = snapshot_key({0: {0x1000: "parameter", 0x2000: "other", 0x3000: "grad"},
                              "cuda:1": {0x4000: "activation", "x": "grad", 5: "<b>"},
                              "cpu": {0x5000: "parameter"}, 2: []})["named"]
        names = snapshot_key({}, {0: {0x1000: "fc.weight", 0x2000: "x" * 999, "a": "b"},
                                  "cuda:1": {0x4000: 7}, "cpu": {1: "c"}})["names"]
    # "other" names nothing; Report.block_kinds' "cuda:N" keys are taken; the rest is left out
    assert named == {0: {0x1000: "parameter", 0x3000: "grad"}, 1: {0x4000: "activation"}}
    assert names == {0: {0x1000: "fc.weight", 0x2000: "x" * 200}, 1: {}}
    assert snapshot_key() is None
    k = snap[KEY]
    assert k["version"] == 1 and [s[0] for s in k["spans"]] == ["forward", "backward", "optimizer"]
    assert len(k["grads"]) == 2 and k["named"] == {}  # CPU tensors name no CUDA block
    p = tmp_path / "s.pickle"
    dump_snapshot(p, snap)
    assert parse(load_snapshot(p)[KEY])[0][0][0] == PHASES.index("forward")


def test_snapshot_survives_a_failing_reporter(monkeypatch, caplog):
    from tensorgc import reporter

    model = torch.nn.Linear(4, 4)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot",
                        lambda *a, **k: {"segments": [], "device_traces": []})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as where there is CUDA

    def broken(self, device=None):
        raise RuntimeError("no")

    monkeypatch.setattr(reporter.MemReporter, "collect", broken)
    with categorize(model), caplog.at_level(logging.WARNING, logger="tensorgc"):
        snap = tensorgc.snapshot()
    assert snap[KEY]["named"] == {} and any("naming the blocks" in r.message
                                            for r in caplog.records)


def test_a_forward_block_alive_at_the_end_is_an_activation_only_if_named_so():
    # W: made in the forward, never freed, no tensor the reporter saw (a cuBLAS workspace);
    # V: the same, but the reporter named it saved for backward (the graph is alive)
    rows = [("P", 0x1000, 4 * MB, 10, None, "parameter"),
            ("W", 0x2000, 2 * MB, 110, None, "other"),
            ("V", 0x4000, 1 * MB, 120, None, "activation")]
    trace = step_trace(rows)
    snap = snap_of(trace, key=key(grads=[], named={0: {0x1000: "parameter"}}))
    # the reporter's kinds as Report.block_kinds gives them: saved_for_backward is an activation
    tl, _ = replay(snap, columns=len(trace), categories={0x4000: "saved_for_backward"})
    assert tl["cat_active"] == expected_by_column(trace, rows)
    with categorize(torch.nn.Linear(2, 2)):
        assert snapshot_key(named={0: {0x4000: "saved_for_backward"}})["named"] == \
            {0: {0x4000: "activation"}}
    # without the reporter's names the forward's survivors are activations, as before
    tl, _ = replay(snap_of(trace, key=key(grads=[], named={})), columns=len(trace))
    assert {k: v[-1] for k, v in tl["cat_active"].items()}["activation"] == 3 * MB


def test_a_forward_block_held_past_its_backward_is_an_output():
    """Two steps, recorded: forward [100, 200], backward [300, 400], step [500, 600]; forward
    [700, 800], backward [900, 1000], step [1100, 1200]. What the first forward makes and the
    backward does not free is held by the loop: an output when the next result replaces it
    (freed by the end of the next forward) or, made after the first forward, at the end; kept
    longer, or made in the first forward and alive at the end (a workspace no stack names, in
    a one-step trace the same), it is not."""
    spans = [["forward", 100, 200], ["backward", 300, 400], ["optimizer", 500, 600],
             ["forward", 700, 800], ["backward", 900, 1000], ["optimizer", 1100, 1200]]
    rows = [("A", 0x1000, MB, 110, 350, "activation"),   # freed by its backward
            ("L", 0x2000, MB, 190, 750, "output"),       # rebound in the next forward
            ("M", 0x3000, MB, 195, 650, "output"),       # del after the step
            ("K", 0x4000, MB, 150, 950, "activation"),   # kept past the next forward
            ("W", 0x5000, MB, 120, None, "activation"),  # from the first forward, to the end
            ("N", 0x2000, MB, 790, None, "output")]      # the last logits, to the end
    trace = step_trace(rows)
    tl, _ = replay(snap_of(trace, key=key(spans=spans, grads=[], named={})),
                   columns=len(trace))
    assert tl["cat_active"] == expected_by_column(trace, rows)
    # an OOM inside the second backward: nothing begins after it, so no backward is known to
    # have ended: what its forward made is an activation still
    oom = [s for s in spans if s[1] < 900] + [["backward", 900, 950]]
    rows = [r for r in rows if r[0] != "K"][:-1] + [("N", 0x2000, MB, 790, None, "activation")]
    trace = step_trace(rows)
    tl, _ = replay(snap_of(trace, key=key(spans=oom, grads=[], named={})), columns=len(trace))
    assert tl["cat_active"] == expected_by_column(trace, rows)
