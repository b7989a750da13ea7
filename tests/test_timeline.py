"""The Active Memory Timeline: the C replay on traces built as dicts (pairing, pre-existing
allocations, address reuse, detail, OOM), the page (self-contained, escaped), the CLI, and a
headless Chromium screenshot that must not be blank."""
import os
import re

import pytest

from tensorgc import _tensorgc, dump_snapshot, load_snapshot
from tensorgc.timeline import replay, timeline_html
from _util import chromium, page_colors, run_tensorgc_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1 << 20


def ev(action, addr=0, size=0, frames=None, **kw):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0,
         "frames": frames or [{"filename": "/w/train.py", "line": 3, "name": "f"}]}
    e.update(kw)
    return e


def snap_of(trace, blocks=()):
    seg = {"device": 0, "address": 0x1000, "total_size": 64 * MB, "stream": 0,
           "blocks": list(blocks)}
    return {"segments": [seg], "device_traces": [trace]}


def test_replay_pairs_allocs_and_frees():
    trace = [ev("alloc", 0x1000, 4 * MB), ev("alloc", 0x2000, 2 * MB),
             ev("free_requested", 0x1000, 4 * MB), ev("free_completed", 0x1000, 4 * MB),
             ev("alloc", 0x1000, MB)]  # the address is reused
    tl, _ = replay(snap_of(trace), columns=4, detail=10)
    # events used: alloc, alloc, free_requested, alloc -> one per column
    assert tl["active"] == [4 * MB, 6 * MB, 2 * MB, 3 * MB]
    assert tl["max"] == 6 * MB and tl["allocs"] == 3
    sizes = sorted(b[2] for b in tl["bands"])
    assert sizes == [MB, 2 * MB, 4 * MB]
    big = next(b for b in tl["bands"] if b[2] == 4 * MB)
    assert big[0] == 0 and big[1] == 2 and (big[3], big[4]) == (0, 2)


def test_pre_existing_allocations_start_at_zero():
    # freed in the trace without an alloc, and alive at the end without an alloc
    trace = [ev("alloc", 0x5000, MB), ev("free_requested", 0x9000, 2 * MB)]
    blocks = [{"address": 0x7000, "size": 3 * MB, "state": "active_allocated"},
              {"address": 0x5000, "size": MB, "state": "active_allocated"}]
    tl, _ = replay(snap_of(trace, blocks), columns=3, detail=10)
    # pre: 0x7000 (3M); events: pre, alloc 1M, free of the unknown 2M (alive from the start)
    assert tl["active"] == [5 * MB, 6 * MB, 4 * MB]


def test_detail_summarizes_the_rest_on_top():
    trace = [ev("alloc", 0x1000 * (i + 1), (i + 1) * MB) for i in range(10)]
    tl, _ = replay(snap_of(trace), columns=10, detail=3)
    assert [b[2] for b in tl["bands"]] == [8 * MB, 9 * MB, 10 * MB]  # stacked in alloc order
    assert tl["small"][-1] == sum(range(1, 8)) * MB
    assert tl["active"][-1] == 55 * MB
    # the bands lie at the bottom, each on the ones allocated before it
    assert tl["bands"][1][5][-1] == 8 * MB and tl["bands"][2][5][-1] == 17 * MB


def test_ooms_are_reported_and_marked():
    trace = [ev("alloc", 0x1000, MB), ev("oom", device_free=123), ev("alloc", 0x2000, MB)]
    tl, _ = replay(snap_of(trace), columns=3, detail=5)
    assert tl["ooms"] == [1]
    page = timeline_html(snap_of(trace), detail=5)
    assert page.count('class="oom"') == 1 and "OOM at event 1" in page


def test_page_is_self_contained_and_escaped():
    evil = [{"filename": "<script>alert(1)</script>.py", "line": 1, "name": "\"&'"}]
    page = timeline_html(snap_of([ev("alloc", 0x1000, MB, frames=evil)]), detail=5)
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page and "<script src" not in page
    # the page's own scripts: the data block and the interaction, nothing from the file raw
    assert page.count("<script") == 2
    data = page[page.index('id="tgc-data">'):page.index("</script>")]
    assert "<" not in data[len('id="tgc-data">'):] and "\\u003cscript\\u003e" in data
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page


def test_many_ooms_are_placed_in_one_pass():
    # each OOM's column was found by walking the trace before it: quadratic, and a file of
    # 200,000 OOM entries (400 KB, one entry repeated through the memo) drew for hours
    calls = [0]

    class Entry(dict):
        def get(self, *a):
            calls[0] += 1
            return dict.get(self, *a)

    from tensorgc.timeline import OOM_MARKS

    n = 3000
    trace = [Entry(ev("alloc", 0x1000, MB))] + [Entry(ev("oom", device_free=0)) for _ in range(n)]
    page = timeline_html(snap_of(trace), detail=5)
    # a button for each of the first OOM_MARKS in the markup, every OOM in the page's data
    assert page.count('class="oom"') == OOM_MARKS < n and f"and {n - OOM_MARKS:,} more" in page
    assert len(page_data(page)["ooms"]) == n
    assert calls[0] < 20 * n  # was about n * n / 2
    # and at its own trace position: the OOM after the alloc of a 2-entry trace is event 1
    page = timeline_html(snap_of([ev("alloc", 0x1000, MB), ev("oom")]), detail=5, columns=2)
    assert re.search(r'class="oom" data-event="1"', page)


def test_strings_from_the_file_are_cut_and_made_utf8():
    # a 5 MB file name shared by every frame through the memo: the page repeated it in every
    # band's tooltip (300 bands x 8 frames); a lone surrogate made the page unwritable as UTF-8
    from tensorgc.timeline import SCAN_FRAMES, TEXT_MAX, _frame_lines

    long_name = "/w/" + "a" * (5 << 20) + ".py"
    frames = [{"filename": long_name, "line": 1, "name": "\ud800<b>"}] * 8
    trace = [ev("alloc", 0x1000 * (i + 1), MB, frames=frames) for i in range(50)]
    page = timeline_html(snap_of(trace), detail=50)
    assert len(page) < 50 * 8 * 2 * TEXT_MAX + 100_000
    page.encode("utf-8")  # strict: no surrogates left
    assert "<b>" not in page and "&lt;b&gt;" in page
    # a long stack shared by every entry: only its top is looked at
    entry = ev("alloc", frames=[{"filename": "x.cpp", "line": 1, "name": "f"}] * 100_000)
    assert len(_frame_lines(entry, 10**6)) == SCAN_FRAMES


@pytest.mark.parametrize("bad", [
    [{"action": 5}], [{"action": "alloc", "addr": "x", "size": 1}], [7],
    [{"action": "alloc", "addr": -1, "size": 1}],
])
def test_malformed_traces_are_value_errors(bad):
    with pytest.raises(ValueError):
        _tensorgc._trace_columns(bad)
    with pytest.raises(ValueError):
        replay(snap_of(bad))


@pytest.mark.parametrize("cols", [
    (b"\x01", b"", b"", b"", b""),                      # lengths disagree
    (b"\x01", b"\0" * 8, b"\0" * 8, b"\0" * 8, b"\0" * 3),
    (b"\x63", b"\0" * 8, b"\0" * 8, b"\0" * 8, b"\0" * 4),  # no such kind
    (b"", b"", b"", b""),                                # too short
    ("x", b"", b"", b"", b""),                           # not bytes
    (b"\x01", b"\0" * 8, b"\0" * 8, b"\0" * 8, b"\xff" * 4),  # a stack past the list
])
def test_malformed_columns_are_refused(cols):
    cols = cols + ([[]],)
    if cols[4] != b"\xff" * 4:  # the replay reads no stacks
        with pytest.raises((ValueError, TypeError)):
            _tensorgc._timeline(cols, [], 10, 10, True)
    with pytest.raises((ValueError, TypeError)):
        _tensorgc._detail(cols, [], True, 10)


def test_bad_arguments():
    with pytest.raises(ValueError):
        _tensorgc._timeline(_tensorgc._trace_columns([]), [], 0, 10, True)
    with pytest.raises(ValueError):
        replay(snap_of([]), device=-1)
    tl, _ = replay(snap_of([]), device=3)  # no trace for that device: an empty picture
    assert tl["max"] == 0 and tl["bands"] == []


run_cli = run_tensorgc_cli


def test_cli_timeline(tmp_path):
    p = tmp_path / "s.pickle"
    dump_snapshot(p, snap_of([ev("alloc", 0x1000, MB), ev("free_requested", 0x1000, MB)]))
    out = tmp_path / "t.html"
    r = run_cli("timeline", str(p), "-o", str(out), "--detail", "10")
    assert r.returncode == 0, r.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
    r = run_cli("timeline", str(p))
    assert r.returncode == 2 and "-o" in r.stderr
    r = run_cli("timeline", "--help")
    assert r.returncode == 0 and "--detail" in r.stdout


def page_data(page):
    import json

    return json.loads(page[page.index('id="tgc-data">') + 14:page.index("</script>")])


def test_real_fixture_renders():
    path = os.path.join(ROOT, "tests", "data", "h100_small_snapshot.pickle")
    page = timeline_html(load_snapshot(path))
    assert page_data(page)["allocs"] >= 2
    assert page.count("<tr><td>") >= 1  # the largest allocations alive at the peak


CHROMIUM = chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make deps installs it)")
def test_headless_chromium_screenshot_is_not_blank(tmp_path):
    trace = []
    for i in range(200):
        trace.append(ev("alloc", 0x100000 * (i + 1), (1 + i % 7) * MB))
        if i % 3 == 2:
            trace.append(ev("free_requested", 0x100000 * (i - 1), (1 + (i - 2) % 7) * MB))
    trace.append(ev("oom", device_free=0))
    colors = page_colors(tmp_path, timeline_html(snap_of(trace), detail=50), "1300,600")
    assert len(colors) > 20  # bands in many colours, not a blank page


def test_categories_colour_bands_alive_at_the_end():
    trace = [ev("alloc", 0x1000, 4 * MB), ev("alloc", 0x2000, 2 * MB), ev("alloc", 0x3000, MB),
             ev("free_requested", 0x3000, MB)]
    page = timeline_html(snap_of(trace), detail=10,
                         categories={0x1000: "parameter", 0x2000: "optimizer_state",
                                     0x3000: "grad"})
    assert 'fill="#7b3fb5"' in page and 'fill="#f0a030"' in page
    assert ">parameter</text>" in page and ">optimizer state</text>" in page
    assert ">grad</text>" not in page  # 0x3000 was freed: another allocation may own it now


def test_progress_only_for_large_inputs_on_a_terminal(tmp_path, monkeypatch, capsys):
    import io
    import types

    from tensorgc.cli import base

    p = tmp_path / "s.pickle"
    dump_snapshot(p, snap_of([ev("alloc", 0x1000, MB)]))
    args = types.SimpleNamespace(snapshot=str(p), command="timeline", max_bytes=1 << 30)

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(base.sys, "stderr", Tty())
    base.progress(args, "hello")
    assert base.sys.stderr.getvalue() == ""  # small input: quiet
    monkeypatch.setattr(base, "PROGRESS_BYTES", 10)
    base.progress(args, "hello")
    assert base.sys.stderr.getvalue() == "tensorgc timeline: hello\n"
    monkeypatch.setattr(base.sys, "stderr", io.StringIO())  # not a terminal: quiet
    base.progress(args, "hello")
    assert base.sys.stderr.getvalue() == ""


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make deps installs it)")
def test_headless_chromium_screenshot_of_a_cycle_page_is_not_blank(tmp_path):
    import gc as _gc

    import torch

    import tensorgc
    from _util import DEVICE, new_class

    pages = []
    Holder = new_class("Holder")

    def make():
        h = Holder()
        h.me = h
        h.t = torch.ones(64, device=DEVICE)
    with tensorgc.observe_tensor_cycles(pages.append, device=DEVICE):
        make()
        _gc.collect()
    assert pages
    assert len(page_colors(tmp_path, pages[0], "1200,900")) > 20


def training_snapshot(steps=4, layers=6):
    """A synthetic trace of a few training steps (parameters; per step: activations and
    temporaries in forward, grads and temporaries in backward, Adam's state in the first
    optimizer step) with the tensorgc_categories marks categorize would record."""
    trace, spans, grads = [], [], []
    clock, top = [1000], [0x10000000]

    def new(size):
        top[0] += 0x1000000
        return top[0], size

    def act(action, a, s):
        clock[0] += 10
        trace.append(ev(action, a, s, time_us=clock[0],
                        frames=[{"filename": "/w/train.py", "line": 10 + len(trace) % 7,
                                 "name": "step"}]))

    params = [new(8 * MB) for _ in range(layers)]
    for p in params:
        act("alloc", *p)
    for step in range(steps):
        t0, acts = clock[0] + 1, []
        for _ in range(layers):
            a = new(6 * MB)
            act("alloc", *a)
            acts.append(a)
            tmp = new(3 * MB)
            act("alloc", *tmp)
            act("free_completed", *tmp)
        spans.append(["forward", t0, clock[0] + 1])
        t0, gs = clock[0] + 5, []
        for i in reversed(range(layers)):
            g = new(8 * MB)
            act("alloc", *g)
            gs.append(g)
            grads.append([0, g[0], clock[0] + 2])
            tmp = new(4 * MB)
            act("alloc", *tmp)
            act("free_completed", *tmp)
            act("free_completed", *acts[i])
        spans.append(["backward", t0, clock[0] + 1])
        t0 = clock[0] + 5
        if step == 0:
            for _ in range(2 * layers):
                act("alloc", *new(8 * MB))
        for _ in range(layers):
            tmp = new(2 * MB)
            act("alloc", *tmp)
            act("free_completed", *tmp)
        spans.append(["optimizer", t0, clock[0] + 1])
        for g in gs:
            act("free_completed", *g)
    key = {"version": 1, "spans": spans, "grads": grads,
           "named": {0: {a: "parameter" for a, _ in params}}}
    return {"segments": [], "device_traces": [trace], "tensorgc_categories": key}


def test_training_categories_add_up():
    tl, _ = replay(training_snapshot(), columns=200, detail=50)
    ca = tl["cat_active"]
    assert ca["parameter"][-1] == 48 * MB and ca["optimizer_state"][-1] == 96 * MB
    assert max(ca["grad"]) == 48 * MB and max(ca["activation"]) == 36 * MB
    assert max(ca["temporary"]) == 4 * MB and not any(ca["other"])
    assert all(sum(v[c] for v in ca.values()) == tl["active"][c] for c in range(200))


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make deps installs it)")
def test_headless_chromium_screenshot_of_the_categories(tmp_path):
    colors = page_colors(tmp_path, timeline_html(training_snapshot(), detail=300), "1300,900")
    # the bands and the areas in the category colours: parameter, grad, optimizer state,
    # activation, temporary
    for hexa in ("7b3fb5", "d93b3b", "f0a030", "3a8fd9", "9ccc65"):
        assert bytes.fromhex(hexa) in {c[:3] for c in colors}, hexa


def test_a_trace_past_the_detail_bound_carries_its_largest_allocations(monkeypatch):
    import sys

    T = sys.modules["tensorgc.timeline"]  # tensorgc.timeline is the function

    trace = [ev("alloc", 0x1000 * (k + 1), (k + 1) * MB) for k in range(10)]
    data = page_data(timeline_html(snap_of(trace), detail=5))
    assert data["allocs"] == data["total"] == 10
    monkeypatch.setattr(T, "DETAIL_MAX", 9)
    page = timeline_html(snap_of(trace), detail=5)
    data = page_data(page)
    assert data["allocs"] == 9 and data["total"] == 10
    assert "it carries the 9 largest" in page


def test_the_timeline_function_takes_a_dict_a_path_or_now(tmp_path):
    import tensorgc
    from tensorgc._common.devices import cuda_available

    trace = [ev("alloc", 0x1000, MB), ev("free_requested", 0x1000, MB)]
    page = tensorgc.timeline(snap_of(trace), title="one <step>")
    assert page.startswith("<!DOCTYPE html>") and "one &lt;step&gt;" in page
    snap_path = dump_snapshot(str(tmp_path / "s.pickle"), snap_of(trace))
    out = tmp_path / "t.html"
    assert tensorgc.timeline(snap_path, out) == str(out)
    assert out.read_text() == tensorgc.timeline(snap_path, title=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.pickle", "t.html"]  # no temp left
    with pytest.raises(TypeError, match="snapshot dict, a file path or None"):
        tensorgc.timeline(42)
    with pytest.raises(tensorgc.SnapshotError, match="over the limit"):
        tensorgc.timeline(snap_path, max_bytes=10)
    with pytest.raises(tensorgc.DeviceError):
        tensorgc.timeline(snap_of(trace), device=3)
    if not cuda_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            tensorgc.timeline()
