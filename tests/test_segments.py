"""Segment maps at any event (allocator/segmap.c): rewinding from the snapshot's final state and
replaying forward, pre-existing segments and allocations, address reuse, OOM points, the page
(escaped, self-contained), the CLI, and a non-blank headless Chromium screenshot."""

import pytest

from tensorgc import dump_snapshot
from tensorgc.segments import segment_map, segments_html
from _util import chromium, page_colors, run_tensorgc_cli

MB = 1 << 20
S1, S2, OLD = 0x7000_0000, 0x9000_0000, 0x5000_0000


def e(action, addr, size, line=1):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0,
            "frames": [{"filename": "/w/t.py", "line": line, "name": "f"}]}


def snapshot():
    trace = [e("segment_alloc", S1, 20 * MB),               # 0
             e("alloc", S1, 4 * MB, 2),                       # 1
             e("alloc", S1 + 4 * MB, 2 * MB, 3),              # 2
             e("free_requested", S1, 4 * MB),                 # 3
             e("free_completed", S1, 4 * MB),                 # 4
             {"action": "oom", "addr": 0, "size": 0, "device_free": 0, "frames": []},  # 5
             e("segment_alloc", S2, 2 * MB),                  # 6
             e("alloc", S2, MB, 7),                           # 7
             e("free_requested", OLD, MB),                    # 8: made before the trace
             e("alloc", S1, MB, 9)]                           # 9: the address again
    segs = [  # the final state
        {"device": 0, "address": OLD, "total_size": 2 * MB, "blocks": [
            {"address": OLD, "size": 2 * MB, "state": "inactive"}]},
        {"device": 0, "address": S1, "total_size": 20 * MB, "blocks": [
            {"address": S1, "size": MB, "state": "active_allocated"},
            {"address": S1 + MB, "size": 3 * MB, "state": "inactive"},
            {"address": S1 + 4 * MB, "size": 2 * MB, "state": "active_allocated"},
            {"address": S1 + 6 * MB, "size": 14 * MB, "state": "inactive"}]},
        {"device": 0, "address": S2, "total_size": 2 * MB, "blocks": [
            {"address": S2, "size": MB, "state": "active_allocated"},
            {"address": S2 + MB, "size": MB, "state": "inactive"}]},
    ]
    return {"segments": segs, "device_traces": [trace]}


def test_state_at_each_point():
    snap = snapshot()
    _, segs, allocs, _ = segment_map(snap, at=0)
    assert segs == [(OLD, 2 * MB, -1)] and allocs == [(OLD, MB, -1)]
    _, segs, allocs, _ = segment_map(snap, at=3)
    assert [s[0] for s in segs] == [OLD, S1]
    assert allocs == [(OLD, MB, -1), (S1, 4 * MB, 1), (S1 + 4 * MB, 2 * MB, 2)]
    _, segs, allocs, _ = segment_map(snap, at=10)
    assert [s[0] for s in segs] == [OLD, S1, S2]
    assert allocs == [(S1, MB, 9), (S1 + 4 * MB, 2 * MB, 2), (S2, MB, 7)]
    upto, _, allocs, _ = segment_map(snap, oom=0)
    assert upto == 5 and allocs == [(OLD, MB, -1), (S1 + 4 * MB, 2 * MB, 2)]
    assert segment_map(snap)[0] == 10  # default: the end


@pytest.mark.parametrize("kw", [{"at": -1}, {"at": 11}, {"oom": 1}, {"device": -1}, {"at": "3"}])
def test_bad_points_are_value_errors(kw):
    with pytest.raises(ValueError):
        segment_map(snapshot(), **kw)


def test_page_escapes_and_needs_nothing_outside():
    snap = snapshot()
    snap["device_traces"][0][1]["frames"] = [{"filename": "<img src=x onerror=alert(1)>.py",
                                              "line": 1, "name": "<b>"}]
    page = segments_html(snap, at=3)
    assert "<img" not in page and "&lt;img" in page and "<script" not in page
    assert "https://" not in page
    assert page.count('class="s"') == 2 and page.count('class="a"') == 3


def test_overlapping_segments_draw_each_allocation_once():
    # segments from a file may overlap: each row drew every allocation inside it, so 300
    # segments over the same 2,000 blocks (a 49 KB file) made a 110 MB page
    blocks = [{"address": S1 + i * 512, "size": 512, "state": "active_allocated"}
              for i in range(200)]
    segs = [{"device": 0, "address": S1, "total_size": 1 << 40, "blocks": blocks}]
    segs += [{"device": 0, "address": S1 + k, "total_size": 1 << 40, "blocks": []}
             for k in range(1, 50)]
    page = segments_html({"segments": segs, "device_traces": []})
    assert page.count('class="s"') == 50 and page.count('class="a"') == 200


def test_cli_segments(tmp_path):
    p = tmp_path / "s.pickle"
    dump_snapshot(p, snapshot())
    out = tmp_path / "seg.html"
    r = run_tensorgc_cli("segments", str(p), "-o", str(out), "--oom")
    assert r.returncode == 0, r.stderr
    assert "just before OOM event 5" in out.read_text()
    r = run_tensorgc_cli("segments", str(p), "-o", str(out), "--at", "99")
    assert r.returncode == 2 and "--at 99 is outside the trace of cuda:0" in r.stderr
    r = run_tensorgc_cli("segments", str(p), "-o", str(out), "--at", "1", "--oom")
    assert r.returncode == 2 and "not both" in r.stderr


CHROMIUM = chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make deps installs it)")
def test_headless_chromium_screenshot_is_not_blank(tmp_path):
    assert len(page_colors(tmp_path, segments_html(snapshot(), at=3), "1200,300")) > 5


def test_the_page_at_an_oom_shows_the_request_and_the_free_blocks_too_small_for_it():
    import re

    snap = snapshot()
    snap["device_traces"][0][5] = {"action": "oom", "addr": 0, "size": 8 * MB,
                                   "device_free": 3 * MB, "frames": []}
    html = segments_html(snap, oom=0)
    assert "The request that failed: 8.00M, with 3.00M free on the device." in html
    assert "Free blocks in these segments: 3, the largest 14.00M; 1 as large as the request" in html
    gaps = re.findall(r'<rect class="(g(?: fit)?)"[^>]*><title>([^<]*)</title>', html)
    assert sorted(gaps) == sorted([
        ("g", "free 1.00M at +0x100000 of the segment: too small for the request of 8.00M"),
        ("g", "free 4.00M at +0x0 of the segment: too small for the request of 8.00M"),
        ("g fit", "free 14.00M at +0x600000 of the segment: as large as the request of 8.00M")])
    # a request no free block can take: every one outlined red, and the page says so
    snap["device_traces"][0][5]["size"] = 32 * MB
    html = segments_html(snap, oom=0)
    assert "every one too small for the request (red outline)" in html
    assert 'class="g fit"' not in html and html.count('<rect class="g"') == 3
    # not at an OOM: no request, no free blocks drawn
    assert 'class="g' not in segments_html(snap, at=5)
    # an OOM entry whose size is not a number: a request of 0 bytes, nothing raised
    snap["device_traces"][0][5]["size"] = "<b>"
    assert "The request that failed: 0.00B" in segments_html(snap, oom=0)
