"""`tensorgc stats` and `tensorgc timeline` given several snapshot files or a directory of them,
one a rank: the ranks side by side, ordered by the rank in the file names, the rank that peaks
highest and the one that runs out of memory first named, one chart a rank on the same axes, and
strings from the files escaped. Synthetic snapshots: no torch needed."""
import os
import pickle
import re

import pytest

from tensorgc import cli, ranks_page
from tensorgc.ranks_page import HEIGHT, LEFT, TOP, WIDTH, order_files, rank_of

MB = 1 << 20
FRAMES = [{"filename": "/w/train.py", "line": 3, "name": "step"}]


def rank_snap(device, sizes, t0=None, oom_after=None, frames=FRAMES, step=1000):
    """One device's snapshot: an alloc of each size (MiB, all alive at the end) every `step`
    microseconds from `t0` (no time_us when t0 is None), an OOM entry after the alloc
    `oom_after`; one segment holding every block."""
    base = 0x7000_0000 + device * 0x1000_0000
    trace, blocks, t, addr = [], [], t0, base
    for i, mib in enumerate(sizes):
        e = {"action": "alloc", "addr": addr, "size": mib * MB, "frames": frames}
        blocks.append({"address": addr, "size": mib * MB, "requested_size": mib * MB,
                       "state": "active_allocated", "frames": frames})
        addr += mib * MB
        trace.append(e)
        if oom_after == i:
            trace.append({"action": "oom", "device_free": 3 * MB, "frames": frames})
        for e in trace[-2 if oom_after == i else -1:]:
            if t0 is not None:
                e["time_us"] = t
                t += step
    seg = {"device": device, "address": base, "total_size": 64 * MB, "stream": 0,
           "segment_type": "large", "blocks": blocks}
    return {"segments": [seg], "device_traces": [[] for _ in range(device)] + [trace]}


def write(directory, name, snap):
    p = directory / name
    p.write_bytes(pickle.dumps(snap, protocol=4))
    return str(p)


# rank: (allocs in MiB, first time_us, OOM after alloc #): rank 1 peaks highest (14M); rank 2
# runs out of memory first (at +0.002 s), rank 1 later (+0.005 s: the last entry of all, at
# 15,000 us; rank 0's first is the earliest, at 10,000 us); rank 10 sorts after rank 2
JOB = {0: ([1, 2, 3], 10_000, None), 1: ([2, 4, 8], 12_000, 3 - 1), 2: ([1, 1, 1], 11_000, 0),
       10: ([4], 10_500, None)}


@pytest.fixture
def job(tmp_path):
    d = tmp_path / "snaps"
    d.mkdir()
    for r, (sizes, t0, oom) in JOB.items():
        write(d, f"snapshot-rank{r}.pickle", rank_snap(r % 8, sizes, t0, oom))
    (d / ".tensorgc-partial.tmp").write_bytes(b"\x80")  # a temp file of atomic_write: skipped
    (d / "notes.txt").write_text("not a snapshot")
    return d


def run(capsys, *argv):
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_names_carry_the_rank_and_order_the_files():
    assert rank_of("/x/snapshot-rank12.pickle") == 12 and rank_of("run_rank_3.pickle") == 3
    assert rank_of("/rank5/snapshot.pickle") is None and rank_of("cranky.pickle") is None
    assert order_files(["b.pickle", "snapshot-rank10.pickle", "a.pickle",
                        "snapshot-rank2.pickle"]) == ["snapshot-rank2.pickle",
                                                      "snapshot-rank10.pickle", "a.pickle",
                                                      "b.pickle"]


def test_stats_of_a_directory_puts_the_ranks_side_by_side(job, capsys):
    code, out, err = run(capsys, "stats", job)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{job}: 4 row(s), one per rank and device (ranks from the file names)"
    rows = [ln for ln in lines if re.match(r"rank \d+ +cuda", ln)]
    assert [r.split()[1] for r in rows] == ["0", "1", "2", "10"]
    assert rows[1].split() == ["rank", "1", "cuda:1", "14.00M", "64.00M", "14.00M", "3", "1",
                               "+0.005", "s"]
    assert rows[2].split()[-2:] == ["+0.002", "s"] and rows[0].split()[-1] == "-"
    assert "rank 1 peaks highest: 14.00M, +9.00M (+180%) over the median (5.00M)" in lines
    assert "rank 2 runs out of memory first: at +0.002 s (wall clock); 1 other rank(s) do too" \
        in lines
    assert f"  rank 10: {job / 'snapshot-rank10.pickle'}" in lines
    assert "notes.txt" not in out and ".tensorgc-" not in out


def test_stats_of_files_named_one_by_one(job, capsys):
    files = [job / f"snapshot-rank{r}.pickle" for r in (10, 2, 0)]
    code, out, _ = run(capsys, "stats", *files, files[0])  # given twice: read once
    assert code == 0
    assert [ln.split()[1] for ln in out.splitlines() if re.match(r"rank \d+ +cuda", ln)] == \
        ["0", "2", "10"]
    assert "rank 0 peaks highest: 6.00M, +2.00M (+50%) over the median (4.00M)" in out
    assert "rank 2 runs out of memory first" in out


def test_without_times_in_every_trace_the_order_of_ooms_is_not_claimed(tmp_path, capsys):
    write(tmp_path, "snapshot-rank0.pickle", rank_snap(0, [1, 1], None, 1))
    write(tmp_path, "snapshot-rank1.pickle", rank_snap(1, [2], 5, 0))
    code, out, _ = run(capsys, "stats", tmp_path)
    assert code == 0
    assert ("ranks that run out of memory: rank 0 (event 2), rank 1 (event 1); not every trace "
            "has times (time_us), so which came first is not known") in out
    assert "first OOM: the event number in that rank's own trace" in out
    page = tmp_path / "p.html"
    code, _, err = run(capsys, "timeline", tmp_path, "-o", page)
    assert code == 0, err
    html = page.read_text()
    assert "x axis: the event number (not every trace has times, time_us)" in html
    # events on one scale: rank 0 has 3 events, rank 1 two; an OOM is drawn at its event + 0.5
    xs = [float(x) for x in re.findall(r'class="oom" x1="([\d.]+)"', html)]
    assert xs == pytest.approx([LEFT + WIDTH * 2.5 / 3, LEFT + WIDTH * 1.5 / 3], abs=0.05)


def test_one_page_with_a_chart_a_rank_on_the_same_axes(job, capsys):
    page = job.parent / "ranks.html"
    code, _, err = run(capsys, "timeline", job, "-o", page)
    assert code == 0, err
    assert err == f"{page}: {page.stat().st_size:,} bytes\n"
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count('class="rank-chart"') == 4
    assert "<script" not in html and "https://" not in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert html.count("<h3>") == 4 and "<h3>rank 10, cuda:2: peak 4.00M, 0 OOM(s)</h3>" in html
    assert '<p class="lead">rank 1 peaks highest: 14.00M, +9.00M (+180%) over the median ' \
           "(5.00M)</p>" in html
    assert '<p class="lead">rank 2 runs out of memory first: at +0.002 s (wall clock)' in html
    assert "x axis: the wall clock (the traces&#x27; time_us)" in html
    assert f"python -m tensorgc timeline {job / 'snapshot-rank1.pickle'} --device 1 -o " \
           "rank1-timeline.html" in html
    # the same clock for every rank, 10,000 to 15,000 us: rank 1's OOM is the last entry of
    # all, rank 2's at 12,000 us
    xs = [float(x) for x in re.findall(r'class="oom" x1="([\d.]+)"', html)]
    assert xs == pytest.approx([LEFT + WIDTH, LEFT + WIDTH * 2 / 5], abs=0.05)
    # one y scale: rank 1's 14M peak reaches the top, rank 10's 4M is 4/14 of it
    dots = {peak: cy for cy, peak in re.findall(r'cy="([\d.]+)" r="3"><title>peak ([\d.]+M)',
                                                 html)}
    assert float(dots["14.00M"]) == TOP
    assert float(dots["4.00M"]) == pytest.approx(TOP + HEIGHT - HEIGHT * 4 / 14, abs=0.05)
    # the summary rows: highest peak and first OOM marked
    assert '<tr class="hi"><td class="l">rank 1</td>' in html
    assert '<tr class="first"><td class="l">rank 2</td>' in html


NASTY = "a\x00b\x1b[31m\u202e<script>alert(1)</script>"


def test_strings_from_the_files_are_escaped_and_cut(tmp_path, capsys):
    frames = [{"filename": "/srv/" + NASTY + "x" * 5000 + ".py", "line": 1, "name": "<b>f"}]
    name = "snapshot-rank3-<i>\x1b.pickle"
    write(tmp_path, name, rank_snap(3, [1], 1, 0, frames=frames))
    write(tmp_path, "other<b>.pickle", rank_snap(0, [2], 1, None, frames=frames))
    page = tmp_path / "p.html"
    code, _, err = run(capsys, "timeline", tmp_path, "-o", page)
    assert code == 0, err
    html = page.read_text()
    assert "<script" not in html and "<b>" not in html and "<i>" not in html
    assert "\x00" not in html and "\x1b" not in html and "\u202e" not in html
    assert "a\\x00b\\x1b[31m\\u202e&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the stack
    assert "&lt;b&gt;f" in html and "other&lt;b&gt;.pickle" in html
    assert "x" * 900 in html and "x" * 1100 not in html
    assert len(html) < 40_000
    code, out, _ = run(capsys, "stats", tmp_path)
    assert code == 0
    assert "\x1b" not in out and "\x00" not in out
    assert "snapshot-rank3-<i>\\x1b.pickle" in out  # a file name on the terminal: escaped


def test_files_without_the_device_get_a_row_that_says_so(tmp_path, capsys):
    write(tmp_path, "snapshot-rank0.pickle", rank_snap(0, [1], 1))
    write(tmp_path, "snapshot-rank1.pickle", {"segments": [], "device_traces": []})
    code, out, _ = run(capsys, "stats", tmp_path)
    assert code == 0
    assert "rank 1  no device in this file (it holds no device (no segment and no trace " \
           "entry))" in out
    page = tmp_path / "p.html"
    code, _, err = run(capsys, "timeline", tmp_path, "--device", "0", "-o", page)
    assert code == 0, err
    assert page.read_text().count('class="rank-chart"') == 1
    # a device that no file holds: a usage error, as for one file, with each file's note
    code, _, err = run(capsys, "timeline", tmp_path, "--device", "1", "-o", page)
    assert code == 2 and "none of the 2 snapshots holds cuda:1" in err, err
    assert "no cuda:1 in this file (it holds cuda:0)" in err


def test_bad_sets_of_files_are_refused(tmp_path, capsys, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "stats", empty)
    assert code == 1 and err == (f"tensorgc stats: {empty}: is a directory, not a regular "
                                 "file, and holds no snapshot files (*.pickle) to read side by "
                                 "side\n")
    p = write(tmp_path, "snapshot-rank0.pickle", rank_snap(0, [1], 1))
    code, _, err = run(capsys, "stats", p, "-")
    assert code == 2 and "standard input (-) is read alone, not among several snapshots" in err
    code, _, err = run(capsys, "stats", p, tmp_path / "missing.pickle")
    assert code == 1 and "missing.pickle: cannot read: No such file or directory" in err
    code, _, err = run(capsys, "timeline", p, p, "-o", tmp_path / "no" / "p.html")
    assert code == 2 and "does not exist" in err
    for i in range(3):
        write(tmp_path, f"snapshot-rank{i + 1}.pickle", rank_snap(0, [1], 1))
    monkeypatch.setattr(ranks_page, "MAX_FILES", 3)
    code, _, err = run(capsys, "stats", tmp_path)
    assert code == 2 and "more than 3 snapshot files: give fewer (one a rank)" in err
    code, _, err = run(capsys, "stats", p, p.replace("rank0", "rank1"))
    assert code == 0, err
    monkeypatch.setattr(ranks_page, "SCAN_MAX", 2)
    code, _, err = run(capsys, "stats", tmp_path)
    assert code == 2 and f"{tmp_path} holds more than 2 entries" in err


def test_times_out_of_order_stay_inside_the_chart(tmp_path, capsys):
    snap = rank_snap(0, [1, 2, 3], 5_000, 1)
    for e, t in zip(snap["device_traces"][0], (9_000, 1_000, 7_000, 3_000)):
        e["time_us"] = t  # the OOM (the third entry) comes "before" the first
    write(tmp_path, "snapshot-rank0.pickle", snap)
    write(tmp_path, "snapshot-rank1.pickle", rank_snap(1, [1], 2_000))
    page = tmp_path / "p.html"
    code, _, err = run(capsys, "timeline", tmp_path, "-o", page)
    assert code == 0, err
    xs = [float(x) for x in re.findall(r'(?:x1|cx)="([\d.]+)"', page.read_text())]
    assert xs and all(LEFT <= x <= LEFT + WIDTH for x in xs)


def test_one_file_is_read_as_before(tmp_path, capsys):
    p = write(tmp_path, "snapshot-rank0.pickle", rank_snap(0, [1], 1))
    code, out, _ = run(capsys, "stats", p)
    assert code == 0 and out.startswith(f"snapshot {p}: 1 segments, 1 blocks, 1 trace entries")
    page = tmp_path / "p.html"
    code, _, _ = run(capsys, "timeline", p, "-o", page)
    assert code == 0 and "Active memory timeline of snapshot-rank0.pickle" in page.read_text()
    assert 'class="rank-chart"' not in page.read_text()


def test_a_link_that_loops_in_the_directory_is_skipped(tmp_path, capsys):
    # is_file() raises ELOOP for it: one bad link must not stop the whole directory (it did:
    # "cannot list DIR: Too many levels of symbolic links", exit code 2)
    write(tmp_path, "snapshot-rank0.pickle", rank_snap(0, [1], 1_000))
    os.symlink("b.pickle", tmp_path / "a.pickle")
    os.symlink("a.pickle", tmp_path / "b.pickle")
    code, out, err = run(capsys, "stats", tmp_path)
    assert code == 0, err
    assert "1 row(s)" in out and "rank 0" in out


def test_an_oom_stamped_before_the_first_entry_is_not_at_a_negative_time(tmp_path, capsys):
    snap = rank_snap(0, [1, 2, 3], 5_000, 1)
    snap["device_traces"][0][2]["time_us"] = 10  # the OOM: before the trace's first entry
    write(tmp_path, "snapshot-rank0.pickle", snap)
    write(tmp_path, "snapshot-rank1.pickle", rank_snap(0, [1], 6_000))
    code, out, err = run(capsys, "stats", tmp_path)
    assert code == 0, err
    assert "+-" not in out
    assert "rank 0 runs out of memory first: at +0.000 s (wall clock)" in out


def test_two_files_with_one_rank_are_told_apart_by_their_names(tmp_path, capsys):
    write(tmp_path, "a-rank1.pickle", rank_snap(0, [1, 2], 1_000))
    write(tmp_path, "b-rank1.pickle", rank_snap(0, [4], 1_000))
    code, out, err = run(capsys, "stats", tmp_path)
    assert code == 0, err
    assert "rank 1 (b-rank1.pickle) peaks highest: 4.00M" in out
    assert "\nrank 1 (a-rank1.pickle)  cuda:0" in out
    page = tmp_path / "p.html"
    code, _, err = run(capsys, "timeline", tmp_path, "-o", page)
    assert code == 0, err
    assert "rank 1 (a-rank1.pickle), cuda:0: peak" in page.read_text()


def test_a_device_the_file_names_is_shown_by_its_name_escaped(tmp_path):
    """A stand-in made from CPU tensors names its device (tensorgc_device_names): the table and
    the page show that name, not cuda:N; a hostile one is text."""
    import pickle

    from _util import run_tensorgc_cli

    hostile = '<script>alert(1)</script>\x1b]8;;'
    for rank, name in ((0, "cpu"), (1, hostile)):
        snap = {"segments": [{"device": rank, "address": 4096, "total_size": 512,
                              "segment_type": "large", "stream": 0,
                              "blocks": [{"address": 4096, "size": 512, "requested_size": 512,
                                          "state": "active_allocated"}]}],
                "device_traces": [[] for _ in range(rank)]
                + [[{"action": "alloc", "addr": 4096, "size": 512, "stream": 0}]],
                "tensorgc_device_names": {rank: name}}
        with open(tmp_path / f"snapshot-rank{rank}.pickle", "wb") as f:
            pickle.dump(snap, f)
    r = run_tensorgc_cli("stats", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("rank 0 ", "rank 1 "))][:2]
    assert lines[0].split()[:3] == ["rank", "0", "cpu"], lines
    assert "cuda:" not in lines[0] and "\x1b" not in r.stdout and "cuda:1" not in lines[1]
    out = tmp_path / "ranks.html"
    r = run_tensorgc_cli("timeline", str(tmp_path), "-o", str(out))
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "<script>ale" not in html and "&lt;script&gt;ale" in html and "\x1b" not in html
    assert ", cpu: peak " in html
