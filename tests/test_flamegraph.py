"""Offline flame graphs of the allocator's state (tensorgc.flamegraph: what torch's _memory_viz
segments, memory and compare draw, without flamegraph.pl) and the segment page's stacks: the
folded stacks, the bounds, escaping (the SVG stays well-formed XML whatever the file holds), the
output rule, and the ``tensorgc flamegraph`` command. No torch needed."""
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tensorgc import flamegraph as fg
from tensorgc import load_snapshot
from tensorgc.segments import segments_html

HERE = os.path.dirname(os.path.abspath(__file__))
H100 = os.path.join(HERE, "data", "h100_small_snapshot.pickle")
ROOT = os.path.dirname(HERE)


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


USER = [frame("/home/u/proj/model.py", 12, "forward"), frame("/home/u/proj/train.py", 40, "step"),
        frame("/home/u/proj/train.py", 90, "<module>")]  # innermost first, as torch records


def block(size, requested, state="active_allocated", frames=USER):
    return {"size": size, "requested_size": requested, "state": state, "frames": frames}


def snap_of(*segments):
    return {"segments": list(segments), "device_traces": [[]]}


def seg(addr, blocks, stream=0, device=0):
    return {"device": device, "address": addr, "total_size": sum(b["size"] for b in blocks),
            "stream": stream, "blocks": blocks}


def test_folded_segments_by_stream_segment_state_and_stack():
    s = snap_of(seg(0x1000, [block(1024, 1000), block(512, 0, "inactive", [])]))
    got = fg.folded(s)
    base = ("stream_0", "seg_0x1000")
    assert got == {
        base + ("active_allocated", "/home/u/proj/train.py:90:<module>",
                "/home/u/proj/train.py:40:step", "/home/u/proj/model.py:12:forward"): 1000,
        base + ("active_allocated", "<gaps>"): 24,
        base + ("inactive", "<gaps>"): 512,
    }
    mem = fg.folded(s, by="memory")
    assert all(k[1] in ("active_allocated", "inactive") for k in mem)
    assert sum(mem.values()) == 1536


def test_blocks_without_frames_and_old_snapshots():
    legacy = {"size": 2048, "state": "active_allocated",
              "history": [{"real_size": 1500, "frames": USER[:1]}, {"real_size": 100}]}
    s = snap_of(seg(0, [block(512, 512, frames=[]), legacy]))
    got = fg.folded(s, by="memory")
    assert got[("stream_0", "active_allocated", "<non-python>")] == 612
    assert got[("stream_0", "active_allocated", "/home/u/proj/model.py:12:forward")] == 1500
    assert got[("stream_0", "active_allocated", "<gaps>")] == 448


def test_interpreter_and_dispatch_frames_are_left_out():
    frames = [frame("/pytorch/aten/src/ATen/core/boxing/KernelFunction.h", 1, "call"),
              frame("Python/ceval.c", 5, "_PyEval_EvalFrameDefault"),
              frame("??", 0, "unwind::unwind"), USER[0]]
    got = fg.folded(snap_of(seg(0, [block(64, 64, frames=frames)])), by="memory")
    assert list(got) == [("stream_0", "active_allocated", "/home/u/proj/model.py:12:forward")]
    python = [frame("/srv/Register/hooks.py", 3, "on_epoch_start"), frame("/m/x.py", 1, "_start")]
    got = fg.folded(snap_of(seg(0, [block(64, 64, frames=python)])), by="memory")
    assert len(next(iter(got))) == 4  # a Python frame is never left out, whatever its names


def test_a_device_alone():
    s = snap_of(seg(0, [block(64, 64)], device=0), seg(8192, [block(128, 128)], device=1))
    assert sum(fg.folded(s, device=1).values()) == 128
    assert sum(fg.folded(s).values()) == 192


def test_the_svg_names_the_files_and_is_well_formed():
    svg = fg.segments(snap_of(seg(0x1000, [block(1 << 20, 1 << 20)])))
    root = ET.fromstring(svg.split("\n", 1)[1])
    assert root.tag.endswith("svg")
    assert "train.py:40:step" in svg and "/home/u/proj/train.py:40:step" in svg


HOSTILE = '</title><script>alert(1)</script>"&\x00\x1b]8;;'


def test_every_string_is_escaped():
    frames = [frame(HOSTILE + "x.py", HOSTILE, HOSTILE)]
    s = snap_of({"device": 0, "address": 0, "stream": HOSTILE, "total_size": 64,
                 "blocks": [dict(block(64, 60, state=HOSTILE, frames=frames))]})
    for fmt in ("svg", "html"):
        for draw in (fg.segments, fg.memory):
            out = draw(s, format=fmt, title=HOSTILE)
            assert "<script>alert" not in out and "\x00" not in out and "\x1b" not in out
    ET.fromstring(fg.memory(s).split("\n", 1)[1])


def test_frames_per_stack_are_bounded():
    deep = [frame(f"/m/f{i}.py", i, f"fn{i}") for i in range(1000)]
    got = fg.folded(snap_of(seg(0, [block(64, 64, frames=deep)])), by="memory")
    (stack,) = got
    assert len(stack) == 2 + fg.FRAMES_PER_STACK
    assert stack[2] == "\u2026 937 outer frames" and stack[-1] == "/m/f0.py:0:fn0"


def test_distinct_stacks_are_bounded_and_no_byte_is_lost(monkeypatch):
    monkeypatch.setattr(fg, "STACKS_MAX", 100)
    blocks = [block(512, 512, frames=[frame(f"/m/{i}.py", i, "f")]) for i in range(300)]
    got = fg.folded(snap_of(seg(0, blocks)), by="memory")
    assert len(got) == 101 and ("stream_0", "active_allocated", "<more stacks>") in got
    assert sum(got.values()) == 300 * 512


def test_frames_drawn_and_page_bytes_are_bounded(monkeypatch):
    monkeypatch.setattr(fg, "RECTS_MAX", 500)
    blocks = [block(512 + i, 512 + i, frames=[frame(f"/m/{i}.py", i, "f" * 200)])
              for i in range(3000)]
    svg = fg.memory(snap_of(seg(0, blocks)))
    assert svg.count('<g class="f"') <= 500 and len(svg) < fg.PAGE_MAX


def test_compare_draws_the_segments_of_one_side_only():
    a = snap_of(seg(0x1000, [block(64, 64)]), seg(0x2000, [block(128, 128)]))
    b = snap_of(seg(0x2000, [block(128, 128)]), seg(0x3000, [block(256, 256)]))
    svg = fg.compare(a, b)
    assert "only_before" in svg and "only_after" in svg
    assert "seg_0x1000" in svg and "seg_0x3000" in svg and "seg_0x2000" not in svg


def test_the_page_is_self_contained():
    html = fg.segments(load_snapshot(H100), format="html")
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "<script>" in html
    assert not re.search(r"""(src|href)=["']https?:""", html)
    assert "test_snapshot.py" in html


def test_save_segment_usage_writes_by_the_output_rule(tmp_path):
    snap = load_snapshot(H100)
    out = tmp_path / "usage.svg"
    out.write_text("old")
    fg._save_segment_usage(str(out), snap)
    assert "test_snapshot.py" in out.read_text()
    fg._save_memory_usage(tmp_path / "mem.html", snap)
    assert (tmp_path / "mem.html").read_text().startswith("<!DOCTYPE html>")
    from tensorgc import OutputError
    with pytest.raises(OutputError):
        fg._save_segment_usage(str(tmp_path), snap)  # a directory is never replaced
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OutputError):
        fg._save_segment_usage(str(tmp_path / "fifo"), snap)


def test_save_segment_usage_of_this_process_needs_cuda(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs CUDA"):
        fg._save_segment_usage(str(tmp_path / "x.svg"))
    assert not (tmp_path / "x.svg").exists()


def test_bad_arguments():
    with pytest.raises(ValueError, match="svg"):
        fg.segments(snap_of(), format="png")
    with pytest.raises(ValueError, match="by"):
        fg.folded(snap_of(), by="blocks")
    with pytest.raises(ValueError):
        fg.segments({"segments": "nope"})


# ---------------------------------------------------------------------- the segment page

def test_the_segment_page_names_files_from_the_blocks_of_a_state_history():
    """record_memory_history("state") keeps one trace entry: the stacks are the blocks'."""
    blocks = [block(1 << 20, 1 << 20)]
    s = {"segments": [seg(0x7000, blocks)],
         "device_traces": [[{"action": "segment_alloc", "addr": 0x7000, "size": 1 << 20,
                             "stream": 0}]]}
    html = segments_html(s, device=0)
    assert "/home/u/proj/model.py:12 forward" in html  # the allocation's tooltip
    assert "Allocation sites" in html and "/home/u/proj/model.py:12" in html


# ---------------------------------------------------------------------- the command

def run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tensorgc", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_command_writes_svg_or_html(tmp_path):
    r = run("flamegraph", H100, "-o", str(tmp_path / "a.svg"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.svg").read_text().startswith("<?xml")
    r = run("flamegraph", H100, "-o", str(tmp_path / "a.html"), "--by", "memory")
    assert r.returncode == 0 and "CUDA memory of" in (tmp_path / "a.html").read_text()
    r = run("flamegraph", H100, "-o", "-", "--device", "0")
    assert r.returncode == 0 and "test_snapshot.py" in r.stdout
    r = run("flamegraph", H100, "-o", str(tmp_path / "c.svg"), "--compare", H100)
    assert r.returncode == 0 and "in 0 stacks" in (tmp_path / "c.svg").read_text()


def test_command_refusals(tmp_path):
    assert run("flamegraph", H100, "-o", str(tmp_path)).returncode in (1, 2)
    r = run("flamegraph", H100, "-o", str(tmp_path / "x.svg"), "--device", "3")
    assert r.returncode == 2 and "cuda:3" in r.stderr
    r = run("flamegraph", H100, "-o", str(tmp_path / "x.svg"), "--compare", H100, "--by",
            "memory")
    assert r.returncode == 2
    r = run("flamegraph", H100, "-o", H100)
    assert r.returncode in (1, 2) and "input" in r.stderr
