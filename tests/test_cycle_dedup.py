"""Repeated leaks in long jobs (tensorgc/cycles/dedup.py, docs/api.md "Repeated leaks"): a cycle
signature reported in full once and then counted, max_pages and min_interval, the summary
lines (time driven by an injected clock), the bounds, thread safety, cycle_totals(); and the
signature itself (cycles/report_sig.c): the same for the same shape whatever the sizes,
addresses and instance counts, different for another shape.

The CycleDedup logic is checked on stand-in reports (no torch needed); the rest on real
collections of CPU tensors."""
import gc
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tensorgc
from tensorgc import CycleDedup, dedup
from tensorgc.cycles import observe
from _util import DEVICE, T, new_class

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE_RE = re.compile(r"^tensorgc-cycle-[a-z0-9_]{8}\.html$")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


class FakeReport:
    """What CycleDedup reads of a report: its groups (signature, count, nbytes, cycle)."""

    def __init__(self, *groups, nbytes=0):
        self.groups = [{"signature": s, "count": n, "nbytes": b, "cycle": f"{s} -.x-> {s}"}
                       for s, n, b in groups]
        self.nbytes = nbytes


@pytest.fixture(autouse=True)
def fresh_process_counts(monkeypatch):
    """Each test starts with the process's signature numbers and totals empty; what its removed
    handles left untold is dropped, not logged when the test session exits."""
    monkeypatch.setattr(dedup, "_numbers", {})
    monkeypatch.setattr(dedup, "_totals", {"reports": 0, "seen": 0, "bytes": 0})
    monkeypatch.setattr(dedup, "_other_seen", False)
    yield
    for counter, handle in list(observe._counters):
        if not handle.active:
            counter.summaries(final=True)


def pages_in(directory):
    return sorted(p for p in os.listdir(directory) if p.startswith("tensorgc-cycle-"))


# --------------------------------------------------------------------------
# CycleDedup on stand-in reports
# --------------------------------------------------------------------------

def test_a_repeated_signature_is_reported_once_then_counted():
    d = CycleDedup()
    v = d.admit(FakeReport(("aaaa", 1, 100)))
    assert v.full and v.numbers == (1,) and v.new == (1,)
    d.reported(v, "/pages/p1.html")
    for _ in range(9):
        v = d.admit(FakeReport(("aaaa", 2, 50)))
        assert not v.full and v.why == "seen before" and v.numbers == (1,)
    assert d.totals() == {"reports": 1, "seen": 19, "bytes": 550, "signatures": 1}
    assert tensorgc.cycle_totals() == {"reports": 1, "seen": 19, "bytes": 550, "signatures": 1}


def test_a_report_with_a_new_signature_among_old_ones_is_made_in_full():
    d = CycleDedup()
    d.reported(d.admit(FakeReport(("aaaa", 1, 10))), "/p1")
    v = d.admit(FakeReport(("aaaa", 3, 30), ("bbbb", 1, 10)))
    assert v.full and v.numbers == (1, 2) and v.new == (2,)
    d.reported(v, "/p2")
    lines = d.summaries(final=True)
    # the old signature's cycles in that report were seen again; the new one's are in its page
    assert len(lines) == 1 and lines[0].startswith("tensorgc: cycle signature #1 seen 4 times")


def test_the_same_signature_twice_in_one_report_is_merged():
    d = CycleDedup()
    v = d.admit(FakeReport(("aaaa", 2, 20), ("aaaa", 3, 30)))
    assert v.full and v.numbers == (1,)
    assert d.totals()["seen"] == 5 and d.totals()["signatures"] == 1


def test_max_pages_caps_full_reports_then_counts_only():
    d = CycleDedup(max_pages=2, summary_every=None)
    for sig in ("a1", "b2"):
        v = d.admit(FakeReport((sig, 1, 8)))
        assert v.full
        d.reported(v, f"/{sig}.html")
    v = d.admit(FakeReport(("c3", 4, 32)))
    assert not v.full and v.why == "max_pages" and v.numbers == (3,)
    assert not d.admit(FakeReport(("c3", 1, 8))).full
    assert d.totals() == {"reports": 2, "seen": 7, "bytes": 56, "signatures": 3}
    (line,) = d.summaries(final=True)
    assert line == ("tensorgc: cycle signature #3 seen 5 times, 40 B in all since first seen "
                    "(no page: max_pages=2 reached); 5 times (40 B) since the last summary: "
                    "c3 -.x-> c3")


def test_max_pages_zero_makes_no_full_report():
    d = CycleDedup(max_pages=0)
    assert d.admit(FakeReport(("a", 1, 1))).why == "max_pages"


def test_min_interval_defers_a_new_signature_until_it_has_passed():
    clock = Clock()
    d = CycleDedup(min_interval=30, clock=clock)
    d.reported(d.admit(FakeReport(("a", 1, 1))), "/a.html")
    clock.now += 10
    v = d.admit(FakeReport(("b", 1, 1)))
    assert not v.full and v.why == "min_interval"
    clock.now += 19.5  # 29.5 s after the page
    assert d.admit(FakeReport(("b", 1, 1))).why == "min_interval"
    clock.now += 0.5   # 30 s
    v = d.admit(FakeReport(("b", 1, 1)))
    assert v.full and v.new == (2,)
    d.reported(v, "/b.html")
    clock.now += 100
    assert d.admit(FakeReport(("b", 1, 1))).why == "seen before"
    (line,) = [ln for ln in d.summaries(final=True) if "#2" in ln]
    assert "seen 4 times" in line and "(first at /b.html)" in line


def test_summary_lines_come_every_summary_every_seconds_with_the_counts():
    clock = Clock()
    d = CycleDedup(summary_every=600, clock=clock)
    d.reported(d.admit(FakeReport(("aaaa", 1, 1 << 30))), "/tmp/tensorgc-cycle-x.html")
    assert d.summaries() == []
    for _ in range(40):
        clock.now += 10  # 400 s in all: not yet
        d.admit(FakeReport(("aaaa", 10, 3 << 20)))
        assert d.summaries() == []
    clock.now += 200  # 600 s since the CycleDedup was made
    d.admit(FakeReport(("aaaa", 12, 4 << 20)))
    (line,) = d.summaries()
    assert line == ("tensorgc: cycle signature #1 seen 413 times, 1.1 GiB in all since the "
                    "first report (first at /tmp/tensorgc-cycle-x.html); 412 times (124.0 MiB) "
                    "since the last summary: aaaa -.x-> aaaa")
    clock.now += 1000  # nothing seen since: no line however long it has been
    assert d.summaries() == []
    d.admit(FakeReport(("aaaa", 1, 1)))
    (line,) = d.summaries()  # overdue: the next report brings it
    assert "seen 414 times" in line and "; 1 time (1 B) since the last summary" in line


def test_summary_every_none_tells_only_at_the_end():
    clock = Clock()
    d = CycleDedup(summary_every=None, clock=clock)
    d.reported(d.admit(FakeReport(("a", 1, 1))), "/a")
    d.admit(FakeReport(("a", 1, 1)))
    clock.now += 1e9
    assert d.summaries() == []
    assert len(d.summaries(final=True)) == 1
    assert d.summaries(final=True) == []  # told once


def test_a_page_that_was_not_written_leaves_its_signature_a_page_to_come():
    d = CycleDedup(summary_every=None)
    v = d.admit(FakeReport(("a", 1, 1)))
    d.reported(v, None)  # a full disk
    v = d.admit(FakeReport(("a", 1, 1)))
    assert v.full and v.new == (1,)
    d.reported(v, "/a.html")
    assert d.admit(FakeReport(("a", 1, 1))).why == "seen before"
    assert d.totals()["reports"] == 2


def test_dedup_false_reports_every_report_within_the_caps():
    d = CycleDedup(dedup=False, max_pages=3)
    verdicts = []
    for _ in range(5):
        verdicts.append(d.admit(FakeReport(("a", 1, 1))))
        if verdicts[-1].full:
            d.reported(verdicts[-1], "/a")
    assert [v.full for v in verdicts] == [True, True, True, False, False]
    assert verdicts[0].new == (1,) and verdicts[1].new == ()  # its first page is made


def test_signatures_past_the_bound_share_the_other_bucket(monkeypatch):
    monkeypatch.setattr(dedup, "MAX_SIGNATURES", 3)
    d = CycleDedup(summary_every=None)
    for i in range(5):
        v = d.admit(FakeReport((f"s{i}", 1, 10)))
        if i < 3:
            assert v.full
            d.reported(v, f"/s{i}")
        else:
            assert not v.full and v.numbers == (0,) and v.why == "other"
    assert d.admit(FakeReport(("s4", 2, 20))).why == "other"
    assert d.totals() == {"reports": 3, "seen": 7, "bytes": 70, "signatures": 4}
    assert tensorgc.cycle_totals()["signatures"] == 4  # three numbered, the others as one
    lines = d.summaries(final=True)
    assert lines == ["tensorgc: other cycle signatures (past the 3 tracked) seen 4 times, 40 B "
                     "in all; 4 times (40 B) since the last summary"]
    assert len(d._sigs) == 3


def test_a_summary_names_at_most_summary_lines_signatures(monkeypatch):
    monkeypatch.setattr(dedup, "SUMMARY_LINES", 2)
    d = CycleDedup(max_pages=0, summary_every=None)
    for i, n in enumerate((5, 1, 9, 3)):
        d.admit(FakeReport((f"s{i}", n, n)))
    lines = d.summaries(final=True)
    assert len(lines) == 3
    assert lines[0].startswith("tensorgc: cycle signature #3 seen 9 times")  # most seen first
    assert lines[1].startswith("tensorgc: cycle signature #1 seen 5 times")
    assert lines[2] == "tensorgc: 2 more cycle signatures seen 4 times (4 B) since the last summary"


def test_a_cycle_text_is_cut_and_cannot_forge_log_lines():
    d = CycleDedup(max_pages=0)
    r = FakeReport(("a", 1, 1))
    r.groups[0]["cycle"] = "Evil\nWARNING fake line " + "x" * 1000
    d.admit(r)
    (line,) = d.summaries(final=True)
    assert "\n" not in line and "Evil?WARNING" in line and "(1023 chars)" in line


def test_a_report_that_cannot_be_read_counts_as_one_unknown_cycle():
    class Broken:
        nbytes = 64

        @property
        def groups(self):
            raise RuntimeError("no groups")

    d = CycleDedup()
    v = d.admit(Broken())
    assert v.full
    assert d.totals() == {"reports": 1, "seen": 1, "bytes": 64, "signatures": 1}


def test_a_call_nested_in_a_locked_section_is_counted_by_the_next():
    # what happens when a collection starts inside a section of this thread (an allocation
    # there): the gc callback's admit must neither wait for the lock it holds nor touch the
    # tables mid-update
    d = CycleDedup()
    with dedup._LOCK:
        dedup._busy = True
        try:
            v = d.admit(FakeReport(("a", 2, 20)))
        finally:
            dedup._busy = False
    assert not v.full and v.why == "counted later" and d.totals()["seen"] == 0
    v = d.admit(FakeReport(("a", 1, 10)))
    assert v.full and d.totals() == {"reports": 1, "seen": 3, "bytes": 30, "signatures": 1}
    d.reported(v, "/a")
    (line,) = d.summaries(final=True)  # the nested call's cycles were in no page
    assert "seen 3 times, 30 B in all" in line and "; 2 times (20 B) since" in line


def test_concurrent_admits_count_everything_and_report_each_signature_once():
    d = CycleDedup(summary_every=None)
    start = threading.Barrier(4)
    full = []

    def work(k):
        start.wait()
        for i in range(250):
            v = d.admit(FakeReport((f"s{i % 5}", 1, 2)))
            if v.full:
                full.append(v.new)
                d.reported(v, f"/{k}-{i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert d.totals() == {"reports": 5, "seen": 1000, "bytes": 2000, "signatures": 5}
    assert sorted(n for new in full for n in new) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"max_pages": -1}, ValueError, "max_pages"),
    ({"max_pages": 2.5}, TypeError, "max_pages"),
    ({"max_pages": True}, TypeError, "max_pages"),
    ({"min_interval": -1}, ValueError, "min_interval"),
    ({"min_interval": float("nan")}, ValueError, "min_interval"),
    ({"min_interval": "5"}, TypeError, "min_interval"),
    ({"summary_every": 0}, ValueError, "summary_every"),
    ({"summary_every": float("inf")}, ValueError, "summary_every"),
    ({"dedup": 1}, TypeError, "dedup"),
    ({"clock": 5}, TypeError, "clock"),
])
def test_bad_arguments_say_which(kwargs, error, words):
    with pytest.raises(error, match=words):
        CycleDedup(**kwargs)


def test_cycle_totals_has_the_four_counts():
    assert tensorgc.cycle_totals() == {"reports": 0, "seen": 0, "bytes": 0, "signatures": 0}
    a, b = CycleDedup(), CycleDedup()
    a.reported(a.admit(FakeReport(("x", 2, 5))), "/x")
    b.reported(b.admit(FakeReport(("x", 1, 5), ("y", 1, 1))), "/y")
    assert tensorgc.cycle_totals() == {"reports": 2, "seen": 4, "bytes": 11, "signatures": 2}
    assert a.number("x") == b.number("x") == 1  # numbered per process


# --------------------------------------------------------------------------
# the signature of real cycles
# --------------------------------------------------------------------------

def signatures(track, make):
    """The signatures of the one report a collection of make()'s garbage gives."""
    reports = []
    h = track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    make()
    gc.collect()
    h.remove()
    assert len(reports) == 1
    return [g["signature"] for g in reports[0].groups]


def pair(Node, size=16):
    a, b = Node(), Node()
    a.other, b.other = b, a
    a.t = T(size)


def ring(Node, n):
    nodes = [Node() for _ in range(n)]
    for i, x in enumerate(nodes):
        x.other = nodes[(i + 1) % n]
    nodes[0].t = T(3)


def test_the_signature_ignores_sizes_addresses_and_counts(track):
    Node = new_class("Node")
    one = signatures(track, lambda: pair(Node))
    assert len(one) == 1 and re.fullmatch(r"[0-9a-f]{16}", one[0])
    assert signatures(track, lambda: pair(Node, 100_000)) == one       # another tensor size
    assert signatures(track, lambda: [pair(Node) for _ in range(7)]) == one  # seven of them
    assert signatures(track, lambda: pair(new_class("Node"))) == one   # another class object
    assert signatures(track, lambda: ring(Node, 10)) == one            # the same references
    assert signatures(track, lambda: ring(Node, 2000)) == one          # too long to draw whole


def test_the_signature_tells_other_shapes_apart(track):
    base = signatures(track, lambda: pair(new_class("Node")))
    assert signatures(track, lambda: pair(new_class("Other"))) != base  # another type

    def other_label():
        a, b = new_class("Node")(), new_class("Node")()
        a.next, b.next = b, a
        a.t = T(16)
    assert signatures(track, other_label) != base

    def two_shapes():
        pair(new_class("Node"))
        pair(new_class("Other"))
    assert sorted(signatures(track, two_shapes)) == sorted(
        base + signatures(track, lambda: pair(new_class("Other"))))


def test_keys_and_indices_count_as_their_shape_not_their_values(track):
    Holder = new_class("Holder")

    def keyed_by_id(n):
        def make():
            h = Holder()
            h.d = {id(h): h}  # a new id (an address) each time
            h.t = T(n)
        return make

    assert signatures(track, keyed_by_id(2)) == signatures(track, keyed_by_id(5))

    def keyed_by_name(name):
        def make():
            h = Holder()
            h.d = {name: h}
            h.t = T(2)
        return make

    assert signatures(track, keyed_by_name("a")) != signatures(track, keyed_by_name("b"))


# --------------------------------------------------------------------------
# warn_tensor_cycles with repeats
# --------------------------------------------------------------------------

@pytest.fixture
def warn_log(caplog):
    """The WARNING messages of logger "tensorgc" since the last caplog.clear() (which a test
    calls after warn_tensor_cycles: that call logs what earlier, removed handles left untold)."""
    caplog.set_level(logging.INFO, logger="tensorgc")

    def warnings():
        return [r.getMessage() for r in caplog.records
                if r.name == "tensorgc" and r.levelno == logging.WARNING]
    return warnings


def test_a_repeated_leak_writes_one_page_and_counts_the_rest(track, tmp_path, warn_log, caplog):
    track(tensorgc.warn_tensor_cycles(device=DEVICE, directory=tmp_path))
    caplog.clear()
    Node = new_class("Node")
    for i in range(25):
        pair(Node, 16 + i)  # the sizes change, the shape does not
        gc.collect()
    (page,) = pages_in(tmp_path)
    assert PAGE_RE.match(page)
    assert tensorgc.cycle_totals() == {"reports": 1, "seen": 25, "bytes": sum(
        4 * (16 + i) for i in range(25)), "signatures": 1}
    (warning,) = warn_log()
    assert f"picture: {tmp_path / page} (cycle signature #1)" in warning
    pair(new_class("Other"))
    gc.collect()
    assert len(pages_in(tmp_path)) == 2
    assert "(cycle signature #2)" in warn_log()[-1]
    assert tensorgc.cycle_totals()["signatures"] == 2


def test_a_repeat_never_makes_its_page_nor_its_text(track, tmp_path, monkeypatch):
    read = {"html": 0, "text": 0}

    class Counted:
        def __init__(self, report):
            self.report = report
            self.groups = report.groups
            self.nbytes = report.nbytes

        @property
        def html(self):
            read["html"] += 1
            return self.report.html

        @property
        def text(self):
            read["text"] += 1
            return self.report.text

    real = tensorgc.observe_cycles
    monkeypatch.setattr(observe, "observe_cycles",
                        lambda cb, device: real(lambda r: cb(Counted(r)), device=device))
    track(tensorgc.warn_tensor_cycles(device=DEVICE, directory=tmp_path))
    Node = new_class("Node")
    for _ in range(10):
        pair(Node)
        gc.collect()
    assert read == {"html": 1, "text": 1}
    assert len(pages_in(tmp_path)) == 1


def test_max_pages_and_min_interval_hold_for_pages(track, tmp_path, warn_log, caplog):
    clock = Clock()
    counter = CycleDedup(max_pages=2, min_interval=60, summary_every=300, clock=clock)
    track(tensorgc.warn_tensor_cycles(device=DEVICE, directory=tmp_path, dedup=counter))
    caplog.clear()
    shapes = [new_class(name) for name in ("A", "B", "C")]
    pair(shapes[0])
    gc.collect()  # t=0: page 1
    clock.now += 30
    pair(shapes[1])
    gc.collect()  # t=30: B must wait for min_interval
    assert len(pages_in(tmp_path)) == 1
    clock.now += 30
    pair(shapes[1])
    gc.collect()  # t=60: B's page, the second and last
    assert len(pages_in(tmp_path)) == 2
    clock.now += 100
    pair(shapes[2])
    gc.collect()  # t=160: C is counted only: max_pages
    assert len(pages_in(tmp_path)) == 2
    assert len(warn_log()) == 2
    clock.now += 200
    pair(shapes[0])
    gc.collect()  # t=360: the summary is due
    lines = sorted(warn_log()[2:])  # one per signature with counts not told yet, by number
    assert len(lines) == 3, lines
    assert lines[0].startswith("tensorgc: cycle signature #1 seen 2 times, 128 B in all since "
                               "the first report (first at " + str(tmp_path))
    # B's first sighting waited for min_interval, and is told now
    assert lines[1].startswith("tensorgc: cycle signature #2 seen 2 times, 128 B in all since "
                               "the first report (first at " + str(tmp_path))
    assert lines[2] == ("tensorgc: cycle signature #3 seen 1 time, 64 B in all since first "
                        "seen (no page: max_pages=2 reached); 1 time (64 B) since the last "
                        "summary: C -.other-> C -.other-> C")
    assert counter.totals() == {"reports": 2, "seen": 5, "bytes": 320, "signatures": 3}


def test_dedup_false_writes_a_page_per_reporting_collection(track, tmp_path):
    track(tensorgc.warn_tensor_cycles(device=DEVICE, directory=tmp_path, dedup=False,
                                      max_pages=3))
    Node = new_class("Node")
    for _ in range(5):
        pair(Node)
        gc.collect()
    assert len(pages_in(tmp_path)) == 3


@pytest.mark.parametrize("kwargs, error", [
    ({"dedup": "yes"}, TypeError),
    ({"dedup": CycleDedup(), "max_pages": 5}, ValueError),
    ({"max_pages": -2}, ValueError),
    ({"summary_every": "600"}, TypeError),
])
def test_warn_tensor_cycles_refuses_bad_limits_before_registering(kwargs, error):
    before = list(gc.callbacks)
    with pytest.raises(error):
        tensorgc.warn_tensor_cycles(device=DEVICE, **kwargs)
    assert gc.callbacks == before


def test_pending_counts_are_told_at_exit():
    code = textwrap.dedent(f"""
        import gc, tempfile, torch, tensorgc
        gc.disable()
        directory = tempfile.mkdtemp()
        tensorgc.warn_tensor_cycles(device="cpu", directory=directory)
        class Node:
            pass
        for _ in range(6):
            a, b = Node(), Node()
            a.other, b.other = b, a
            a.t = torch.zeros(4)
            del a, b
            gc.collect()
        print("pages", len(__import__("os").listdir(directory)), flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TENSORGC_OUTPUT_DIR"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    if "No module named 'torch'" in proc.stderr:
        pytest.skip("needs torch")
    assert proc.returncode == 0, proc.stderr
    assert "pages 1" in proc.stdout
    assert re.search(r"tensorgc: cycle signature #1 seen 6 times, 96 B in all since the first "
                     r"report \(first at .*tensorgc-cycle-\w{8}\.html\); 5 times \(80 B\) since "
                     r"the last summary: Node -\.other-> Node", proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_counts_though_a_thread_held_the_lock_at_the_fork():
    # a DataLoader worker forked while another thread of the trainer was inside a locked section
    held, release = threading.Event(), threading.Event()

    def hold():
        with dedup._LOCK:
            held.set()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    try:
        pid = os.fork()
        if pid == 0:  # the child: the lock's holder does not exist here
            try:
                d = CycleDedup()
                ok = d.admit(FakeReport(("a", 1, 1))).full and d.totals()["seen"] == 1
            finally:
                os._exit(0 if ok else 1)
        deadline = time.monotonic() + 60  # a safety net against a hung child, not a timing
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung on the lock")
            time.sleep(0.01)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        release.set()
        t.join()
