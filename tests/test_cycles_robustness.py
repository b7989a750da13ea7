"""Robustness tests of tensorgc: gc state, handles, failing callbacks,
re-entrancy, threads, hostile objects, warn_tensor_cycles (docs/api.md)."""

import gc
import logging
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import weakref

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from _util import DEVICE, T, has_edge, instances, new_class


def make_pair(Node, size=16):
    a = Node()
    b = Node()
    a.other = b
    b.other = a
    a.t = T(size)
    refs = [weakref.ref(a), weakref.ref(b), weakref.ref(a.t)]
    del a, b
    return refs


def hook_count():
    return len(gc.callbacks)


@pytest.fixture
def unraisable(monkeypatch):
    """Exceptions reported to sys.unraisablehook (e.g. raised out of a gc callback)."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))
    return seen


# --------------------------------------------------------------------------
# gc state is preserved
# --------------------------------------------------------------------------


def test_debug_flags_preserved(track):
    Node = new_class()
    reports, flags_in_callback = [], []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    track(tensorgc.observe_garbage(lambda g: flags_in_callback.append(gc.get_debug())))
    old = gc.get_debug()
    gc.set_debug(old | gc.DEBUG_UNCOLLECTABLE)
    try:
        refs = make_pair(Node)
        gc.collect()
        assert gc.get_debug() == old | gc.DEBUG_UNCOLLECTABLE
    finally:
        gc.set_debug(old)
    assert len(reports) == 1
    assert all(r() is None for r in refs)
    # "gc debug flags ... are never changed": not even while observers run
    assert flags_in_callback and set(flags_in_callback) == {old | gc.DEBUG_UNCOLLECTABLE}


def test_user_gc_garbage_entries_preserved(track):
    Node = new_class()
    sentinel = object()
    sentinel_list = ["user", "entries"]
    reports, garbage_ids = [], []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    track(tensorgc.observe_garbage(lambda g: garbage_ids.append({id(o) for o in g})))
    gc.garbage.append(sentinel)
    gc.garbage.append(sentinel_list)
    n_before = len(gc.garbage)
    make_pair(Node)
    gc.collect()
    assert len(reports) == 1
    assert len(gc.garbage) == n_before
    assert gc.garbage[-2] is sentinel and gc.garbage[-1] is sentinel_list
    assert sentinel_list == ["user", "entries"]
    # the user's entries are not passed to observers as garbage of this collection
    assert garbage_ids and all(id(sentinel) not in ids for ids in garbage_ids)


def test_profile_function_preserved(track):
    Node = new_class()
    events = []

    def profiler(frame, event, arg):
        if frame.f_code is marker.__code__:
            events.append(event)

    def marker():
        return None

    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    old = sys.getprofile()
    sys.setprofile(profiler)
    try:
        make_pair(Node)
        gc.collect()
        assert sys.getprofile() is profiler
        marker()
    finally:
        sys.setprofile(old)
    assert len(reports) == 1
    assert "call" in events  # the profiler still works after the collection


def test_user_saveall_keeps_garbage_in_gc_garbage(track):
    Node = new_class()
    reports, garbage_calls = [], []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    track(tensorgc.observe_garbage(lambda g: garbage_calls.append(len(g))))
    old = gc.get_debug()
    gc.set_debug(old | gc.DEBUG_SAVEALL)
    try:
        make_pair(Node)
        gc.collect()
        assert gc.get_debug() == old | gc.DEBUG_SAVEALL
        saved = [o for o in gc.garbage if type(o) is Node]
    finally:
        gc.set_debug(old)
    # observers still run
    assert len(reports) == 1
    assert garbage_calls
    # the garbage stays in gc.garbage, intact
    assert len(saved) == 2
    a, b = saved
    assert a.other is b and b.other is a
    holder = a if hasattr(a, "t") else b
    assert holder.t.shape == (16,)
    # (the gc_state fixture restores gc.garbage)


def test_hook_only_while_observers_exist():
    before = list(gc.callbacks)
    h1 = tensorgc.observe_cycles(lambda r: None, device=DEVICE)
    try:
        assert hook_count() > len(before)
        h2 = tensorgc.observe_garbage(lambda g: None)
        try:
            assert hook_count() > len(before)
        finally:
            h2.remove()
        assert hook_count() > len(before)  # h1 still registered
    finally:
        h1.remove()
    assert len(gc.callbacks) == len(before)
    assert all(x is y for x, y in zip(gc.callbacks, before))


def test_failed_registration_leaves_no_hook():
    before = len(gc.callbacks)
    with pytest.raises(TypeError):
        tensorgc.observe_cycles(None)
    with pytest.raises(ValueError):
        tensorgc.observe_cycles(lambda r: None, device="not-a-device")
    assert len(gc.callbacks) == before


# --------------------------------------------------------------------------
# handles
# --------------------------------------------------------------------------


def test_handle_call_and_remove_are_idempotent():
    calls = []
    h = tensorgc.observe_cycles(calls.append, device=DEVICE)
    assert h.active is True
    h()
    assert h.active is False
    h()
    h.remove()
    h.remove()
    assert h.active is False
    make_pair(new_class())
    gc.collect()
    assert calls == []


def test_handle_context_manager():
    calls = []
    with tensorgc.observe_cycles(calls.append, device=DEVICE) as h:
        assert h.active
        make_pair(new_class())
        gc.collect()
        assert len(calls) == 1
    assert not h.active
    make_pair(new_class())
    gc.collect()
    assert len(calls) == 1


@pytest.mark.parametrize("kind", ["observe_garbage", "observe_cycles", "observe_tensor_cycles", "warn_tensor_cycles"])
def test_every_registration_returns_a_handle(kind, tmp_path):
    func = getattr(tensorgc, kind)
    if kind == "warn_tensor_cycles":
        h = func(device=DEVICE, directory=tmp_path)
    elif kind == "observe_garbage":
        h = func(lambda g: None)
    else:
        h = func(lambda x: None, device=DEVICE)
    assert h.active
    with h:
        pass
    assert not h.active
    h()


def test_two_observers_coexist(track):
    first, second, pages, garbage_calls = [], [], [], []
    track(tensorgc.observe_cycles(first.append, device=DEVICE))
    track(tensorgc.observe_cycles(second.append, device=DEVICE))
    track(tensorgc.observe_tensor_cycles(pages.append, device=DEVICE))
    track(tensorgc.observe_garbage(garbage_calls.append))
    make_pair(new_class())
    gc.collect()
    assert len(first) == 1 and len(second) == 1 and len(pages) == 1
    assert len(garbage_calls) >= 1
    del garbage_calls[:]


def test_observer_removes_itself_inside_callback(track):
    calls, other = [], []
    holder = []

    def once(report):
        calls.append(report)
        holder[0]()

    holder.append(tensorgc.observe_cycles(once, device=DEVICE))
    track(holder[0])
    track(tensorgc.observe_cycles(other.append, device=DEVICE))
    make_pair(new_class())
    gc.collect()
    assert len(calls) == 1 and len(other) == 1
    assert not holder[0].active
    make_pair(new_class())
    gc.collect()
    assert len(calls) == 1  # not called again
    assert len(other) == 2  # the other observer is unaffected


def test_last_observer_removing_itself_unhooks_gc():
    before = len(gc.callbacks)
    holder, calls = [], []

    def once(report):
        calls.append(report)
        holder[0].remove()

    holder.append(tensorgc.observe_cycles(once, device=DEVICE))
    make_pair(new_class())
    gc.collect()
    assert len(calls) == 1
    assert len(gc.callbacks) == before
    make_pair(new_class())
    gc.collect()
    assert len(calls) == 1


def test_observer_removes_another_inside_callback(track):
    victim_calls = []
    victim = track(tensorgc.observe_cycles(victim_calls.append, device=DEVICE))
    track(tensorgc.observe_cycles(lambda r: victim.remove(), device=DEVICE))
    make_pair(new_class())
    gc.collect()
    assert not victim.active
    n = len(victim_calls)
    assert n <= 1  # whether it ran in that same collection is not specified
    make_pair(new_class())
    gc.collect()
    assert len(victim_calls) == n


# --------------------------------------------------------------------------
# failing callbacks
# --------------------------------------------------------------------------


def test_raising_callback_is_logged_and_others_still_run(track, caplog, unraisable,
                                                         observer_errors_logged):
    Node = new_class()
    caplog.set_level(logging.ERROR, logger="tensorgc")
    before, after = [], []

    def bad(report):
        raise RuntimeError("observer exploded")

    track(tensorgc.observe_cycles(before.append, device=DEVICE))
    track(tensorgc.observe_cycles(bad, device=DEVICE))
    track(tensorgc.observe_cycles(after.append, device=DEVICE))
    make_pair(Node)
    result = gc.collect()  # completes; nothing propagates
    assert isinstance(result, int)
    assert len(before) == 1 and len(after) == 1
    records = [r for r in caplog.records if r.name == "tensorgc" and r.levelno == logging.ERROR]
    assert len(records) == 1
    record = records[0]
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert "observer exploded" in caplog.text
    assert unraisable == []  # never reached the collector
    # (objects are not checked for being freed: the logged traceback, kept by
    #  caplog, may legitimately keep the callback's frame alive)


def test_raising_garbage_observer(track, caplog, unraisable, observer_errors_logged):
    caplog.set_level(logging.ERROR, logger="tensorgc")
    reports = []

    def bad(garbage):
        raise KeyError("nope")

    track(tensorgc.observe_garbage(bad))
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    make_pair(new_class())
    gc.collect()
    assert len(reports) == 1
    assert any(r.name == "tensorgc" and r.levelno == logging.ERROR for r in caplog.records)
    assert unraisable == []


def test_ctrl_c_in_python_code_inside_the_collector_reaches_the_program(track, caplog,
                                                                        unraisable, ctrl_c):
    # The eval loop runs the program's SIGINT handler inside whatever Python code the callback
    # runs (torch's metadata, a repr, an observer). Before: that KeyboardInterrupt was logged
    # ("reading a tensor's metadata raised") and dropped, and the program went on.
    caplog.set_level(logging.ERROR, logger="tensorgc")
    reports, calls = [], []

    def interrupted(garbage):
        calls.append(len(garbage))
        raise KeyboardInterrupt  # as the default SIGINT handler does, here

    track(tensorgc.observe_garbage(interrupted))
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    make_pair(new_class())
    with pytest.raises(KeyboardInterrupt):
        gc.collect()
        for _ in range(1000):  # it reaches the program at its next bytecode
            pass
    assert calls and len(reports) == 1  # the other observers still ran
    assert not [r for r in caplog.records if r.name == "tensorgc"], caplog.records
    assert unraisable == []


def test_raising_callback_keeps_observer_registered(track, caplog, observer_errors_logged):
    caplog.set_level(logging.ERROR, logger="tensorgc")
    calls = []

    def flaky(report):
        calls.append(report)
        raise ValueError("flaky")

    h = track(tensorgc.observe_cycles(flaky, device=DEVICE))
    make_pair(new_class())
    gc.collect()
    make_pair(new_class())
    gc.collect()
    assert len(calls) == 2
    assert h.active


# --------------------------------------------------------------------------
# re-entrancy and threads
# --------------------------------------------------------------------------


def test_gc_collect_inside_callback(track, caplog, unraisable):
    caplog.set_level(logging.ERROR, logger="tensorgc")
    results, garbage_results = [], []

    def collecting(report):
        results.append(gc.collect())

    def collecting_garbage(garbage):
        garbage_results.append(gc.collect())

    track(tensorgc.observe_cycles(collecting, device=DEVICE))
    track(tensorgc.observe_garbage(collecting_garbage))
    Node = new_class()
    refs = make_pair(Node)
    gc.collect()
    assert len(results) == 1 and isinstance(results[0], int)
    assert garbage_results and all(isinstance(n, int) for n in garbage_results)
    assert not [r for r in caplog.records if r.name == "tensorgc"]
    assert unraisable == []
    assert all(r() is None for r in refs)
    assert instances(Node) == []


def test_collection_on_another_thread(track):
    Node = new_class()
    reports, threads = [], []

    def observer(report):
        reports.append(report)
        threads.append(threading.get_ident())

    track(tensorgc.observe_cycles(observer, device=DEVICE))
    refs = make_pair(Node)
    worker = threading.Thread(target=gc.collect)
    worker.start()
    worker.join()
    assert len(reports) == 1
    assert all(r() is None for r in refs)
    assert instances(Node) == []


def test_automatic_collection(track):
    """A collection triggered by allocation (not gc.collect()) is observed too."""
    Node = new_class()
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    refs = make_pair(Node)
    gc.set_threshold(1)  # (restored by the gc_state fixture)
    gc.enable()
    try:
        junk = [[] for _ in range(100)]
    finally:
        gc.disable()
    del junk
    assert len(reports) >= 1
    assert all(r() is None for r in refs)
    assert instances(Node) == []


# --------------------------------------------------------------------------
# finalizers and resurrection
# --------------------------------------------------------------------------


def test_cycle_with_finalizer(track):
    finalized = []

    class Node:
        def __del__(self):
            finalized.append(True)

    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    refs = make_pair(Node)
    gc.collect()
    assert len(reports) == 1
    assert finalized == [True, True]
    assert all(r() is None for r in refs)
    assert instances(Node) == []


def test_resurrected_cycle_stays_intact(track):
    resurrected = []

    class Node:
        def __del__(self):
            if hasattr(self, "t"):
                resurrected.append(self)

    track(tensorgc.observe_cycles(lambda r: None, device=DEVICE))
    make_pair(Node)
    gc.collect()
    assert len(resurrected) == 1
    a = resurrected[0]
    # the resurrected object and what it reaches must not have been cleared
    assert a.other.other is a
    assert a.t.shape == (16,)
    resurrected.clear()


# --------------------------------------------------------------------------
# hostile objects
# --------------------------------------------------------------------------

EVIL_REPR = '<script>alert(1)</script>"\\N{}'
EVIL_KEY = "</svg><script>x</script>"
DOT_KEY = 'a" -> b [label="x'
EVIL_ATTR = "<script>alert(4)</script>"
EVIL_TYPE = "</svg><img src=x onerror=alert(3)>"


class Evil:
    def __repr__(self):
        return EVIL_REPR


class BadRepr:
    def __repr__(self):
        raise RuntimeError("repr is broken")


def build_hostile():
    EvilType = new_class(EVIL_TYPE)
    e = Evil()
    bad = BadRepr()
    weird = EvilType()
    e.t = T(4)
    e.d = {EVIL_KEY: e, DOT_KEY: e, bad: e}
    bad.back = e
    e.bad = bad
    e.weird = weird
    setattr(weird, EVIL_ATTR, e)
    del e, bad, weird, EvilType


def _assert_no_markup_injection(page):
    assert "<script>alert" not in page
    assert "</svg><script>" not in page
    assert "<script>x</script>" not in page
    assert "<img src=x" not in page


@pytest.fixture
def hostile_report(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    build_hostile()
    gc.collect()
    assert len(reports) == 1
    return reports[0]


def test_hostile_html_is_escaped(hostile_report):
    html = hostile_report.html
    assert "<svg" in html
    _assert_no_markup_injection(html)


def test_hostile_svg_renders(hostile_report):
    svg = hostile_report.svg
    assert "<svg" in svg
    _assert_no_markup_injection(svg)
    # Where the repr is drawn, Graphviz's `\N` (node name) escape must not
    # have been expanded: the backslash has to be escaped in the DOT source.
    if "alert(1)" in svg:
        assert "\\N{}" in svg


def test_hostile_report_keeps_edges(hostile_report):
    assert has_edge(hostile_report, "Evil", ".d", "dict")
    assert has_edge(hostile_report, "dict", "[" + repr(EVIL_KEY) + "]", "Evil")
    assert has_edge(hostile_report, "dict", "[" + repr(DOT_KEY) + "]", "Evil")
    assert has_edge(hostile_report, "Evil", ".bad", "BadRepr")
    assert hostile_report.text.splitlines()[0].startswith("tensorgc:")


def test_hostile_dot_parses(hostile_report):
    # Parsed and laid out by the Graphviz library the extension links (no `dot` binary needed).
    svg = tensorgc.render_svg(hostile_report.dot)
    titles = re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]*)</title>', svg)
    assert titles, svg[:500]
    # 'a" -> b [label="x' must not have injected a node of its own: every node is one of ours
    assert all(re.fullmatch(r"n\d+|more\d+", t) for t in titles), titles


def test_render_svg_errors_are_exceptions():
    with pytest.raises(tensorgc.GraphvizError):
        tensorgc.render_svg("digraph { a -> }")
    with pytest.raises(TypeError):
        tensorgc.render_svg(b"digraph {}")
    with pytest.raises(ValueError):
        tensorgc.render_svg("digraph {}\0")
    assert "<svg" in tensorgc.render_svg("digraph { a -> b }")


def test_hostile_observe_tensor_cycles_page(track):
    pages = []
    track(tensorgc.observe_tensor_cycles(pages.append, device=DEVICE))
    build_hostile()
    gc.collect()
    assert len(pages) == 1
    assert "<svg" in pages[0]
    _assert_no_markup_injection(pages[0])


def test_hostile_objects_are_freed(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    build_hostile()
    gc.collect()
    assert len(reports) == 1
    assert instances(Evil) == [] and instances(BadRepr) == []


def test_page_out_of_memory_raises_and_leaves_the_report_usable(track):
    """The page is made on first use; if memory runs out while it is made (here the UTF-8 of a
    non-ASCII edge name in the summary table), .html raises MemoryError, caches nothing, and works
    once memory is back. Never a result with an exception set (SystemError)."""
    _testcapi = pytest.importorskip("_testcapi")
    if not hasattr(_testcapi, "set_nomemory"):
        pytest.skip("this interpreter's _testcapi cannot make allocations fail")
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Owner = new_class("Owner")
    outcomes = set()
    for start in range(80):  # every allocation of the page's first steps fails once
        reports.clear()
        o = Owner()
        o.t = T(4)
        o.box = {"\u043a\u043b\u044e\u0447 <k>": o}  # a Cyrillic key: its UTF-8 is allocated
        del o
        gc.collect()
        assert len(reports) == 1
        r = reports[0]
        _testcapi.set_nomemory(start, start + 1)
        try:
            page = r.html
            outcomes.add("page")
        except MemoryError:
            outcomes.add("MemoryError")
        finally:
            _testcapi.remove_mem_hooks()  # raises SystemError if .html left an exception set
        page = r.html
        assert "\u043a\u043b\u044e\u0447 &lt;k&gt;" in page and "</table>" in page
    assert outcomes == {"page", "MemoryError"}


def test_huge_repr_and_key_output_bounded(track):
    # docs/api.md does not state a limit for one label; we expect the
    # output to stay bounded like the 10,000-object ring (test_cycles.py).
    class Huge:
        def __repr__(self):
            return "H" * 5_000_000

    def build():
        h = Huge()
        h.t = T(4)
        h.d = {"K" * 5_000_000: h, Huge(): h}
        del h

    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    build()
    gc.collect()
    assert len(reports) == 1
    assert len(reports[0].dot) < 2_000_000
    assert len(reports[0].html) < 2_000_000


# --------------------------------------------------------------------------
# warn_tensor_cycles
# --------------------------------------------------------------------------

FILE_RE = re.compile(r"^tensorgc-cycle-[A-Za-z0-9_-]{8}\.html$")  # XXXXXXXX: 8 random chars


def _cycle_files(directory):
    return sorted(p for p in os.listdir(directory) if p.startswith("tensorgc-cycle-"))


def test_warn_tensor_cycles_writes_file(track, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    track(tensorgc.warn_tensor_cycles(device=DEVICE, directory=tmp_path))
    make_pair(new_class())
    gc.collect()
    files = _cycle_files(tmp_path)
    assert len(files) == 1
    name = files[0]
    assert FILE_RE.match(name), name
    path = tmp_path / name
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    content = path.read_text(encoding="utf-8")
    assert content.startswith("<!DOCTYPE html>")
    assert "<svg" in content
    warnings = [r for r in caplog.records if r.name == "tensorgc" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert str(path) in message
    assert "tensorgc:" in message  # the text summary


def test_warn_tensor_cycles_one_file_per_reporting_collection(track, tmp_path):
    # two shapes of leak: a repeat of one would be counted, not written (test_cycle_dedup.py)
    track(tensorgc.warn_tensor_cycles(device=DEVICE, directory=tmp_path))
    make_pair(new_class("Node"))
    gc.collect()
    make_pair(new_class("Other"))
    gc.collect()
    Node = new_class()
    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    gc.collect()  # tensor-free garbage: no file
    gc.collect()  # no garbage: no file
    files = _cycle_files(tmp_path)
    assert len(files) == 2
    assert all(FILE_RE.match(f) for f in files)
    assert files[0] != files[1]
    assert sorted(os.listdir(tmp_path)) == files  # nothing else written


def test_warn_tensor_cycles_default_directory_is_tempdir(track, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    track(tensorgc.warn_tensor_cycles(device=DEVICE))
    make_pair(new_class())
    gc.collect()
    assert len(_cycle_files(tmp_path)) == 1


def test_warn_tensor_cycles_accepts_str_directory(track, tmp_path):
    track(tensorgc.warn_tensor_cycles(device=DEVICE, directory=str(tmp_path)))
    make_pair(new_class())
    gc.collect()
    assert len(_cycle_files(tmp_path)) == 1


def test_warn_tensor_cycles_missing_directory(tmp_path):
    before = len(gc.callbacks)
    with pytest.raises((FileNotFoundError, NotADirectoryError)):
        h = tensorgc.warn_tensor_cycles(device=DEVICE, directory=tmp_path / "does-not-exist")
        h.remove()
    assert len(gc.callbacks) == before


def test_warn_tensor_cycles_directory_is_a_file(tmp_path):
    path = tmp_path / "plain-file"
    path.write_text("x")
    with pytest.raises((NotADirectoryError, FileNotFoundError)):
        h = tensorgc.warn_tensor_cycles(device=DEVICE, directory=path)
        h.remove()


def test_warn_tensor_cycles_unwritable_directory_does_not_break_gc(track, tmp_path, caplog, unraisable):
    # a directory removed after registration: the collection must still complete
    caplog.set_level(logging.WARNING, logger="tensorgc")
    target = tmp_path / "gone"
    target.mkdir()
    track(tensorgc.warn_tensor_cycles(device=DEVICE, directory=target))
    target.rmdir()
    Node = new_class()
    make_pair(Node)
    assert isinstance(gc.collect(), int)
    assert unraisable == []
    assert instances(Node) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_while_another_thread_renders_does_not_deadlock_the_child():
    big = "digraph g {" + " ".join(f"n{i} -> n{i + 1};" for i in range(400)) + "}"
    stop = threading.Event()

    def render_forever():
        while not stop.is_set():
            tensorgc.render_svg(big)

    t = threading.Thread(target=render_forever)
    t.start()
    try:
        for _ in range(5):
            pid = os.fork()
            if pid == 0:  # child: rendering must still work
                signal.alarm(20)  # a deadlocked child dies instead of hanging the suite
                try:
                    ok = "<svg" in tensorgc.render_svg("digraph { a -> b }")
                finally:
                    os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        stop.set()
        t.join()
