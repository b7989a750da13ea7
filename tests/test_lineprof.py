"""The line profiler (reporter/lineprof.c, its Python side reporter/lineprof_*.c and binding.c,
tensorgc/lineprof/__init__.py) on the process-memory source, which is what a machine without
CUDA measures. CUDA columns are in test_lineprof_cuda.py."""
import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc import lineprof as L

MB = 1 << 20


@pytest.fixture(autouse=True)
def _restore_tracing(monkeypatch):
    """Process memory even on a CUDA machine; and no test may leave a tracer, a profiler or a
    monitoring tool behind."""
    monkeypatch.setattr(L, "_cuda_available", lambda: False)
    _trim()
    before = sys.gettrace()
    yield
    assert sys.gettrace() is before
    assert L._Events.enabled == 0 and not L._Events.watched
    if L.MONITORING:
        assert L._Events.tool is None


def _trim():
    """Give the heap's free memory back to the system, so that a new allocation raises the
    resident size and a free lowers it: a library may set malloc's mmap threshold high (seen in
    the CUDA test process on the GPU host), and then freed blocks stay resident and are reused
    without a change that resident memory could show."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


_FREES_SHOW = []
# Under `make asan` the process's resident memory follows AddressSanitizer's quarantine, which
# keeps freed blocks and releases them in bulk on whatever line runs then: the tests of byte
# counts per line run in `make test`; under ASan the same code runs in every other test here.
rss_bytes = pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                               reason="resident bytes under ASan's quarantine are not the program's")


def _frees_show() -> bool:
    """Whether frees show in this process's resident memory line by line. Under
    AddressSanitizer (`make asan`) freed memory sits in a quarantine that is released in bulk
    later, on whatever line runs then; elsewhere a library may keep freed blocks resident. The
    checks of decreases and of quiet lines run only where frees can be seen."""
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return False
    if not _FREES_SHOW:
        _trim()
        before = _resident()
        x = torch.ones(64 * MB, dtype=torch.uint8)
        mid = _resident()
        del x
        _trim()
        _FREES_SHOW.append(mid - _resident() > 32 * MB and mid - before > 32 * MB)
    return _FREES_SHOW[0]


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rows(lp, func, col):
    """{line offset from def: (hits, value)} of one column."""
    stats = lp.display(func, columns=(col,))
    assert len(stats.functions) == 1
    fn = stats.functions[0]
    first = fn["code"].co_firstlineno
    return {ln - first: (h, v[0]) for ln, (h, v) in fn["lines"].items()}


def big_alloc(n):
    x = torch.ones(n, dtype=torch.uint8)      # +1
    y = int(x[0])                             # +2  (x.sum() would make an int64 copy: 8x)
    del x; _trim()                            # +3  (see _trim)
    return y                                  # +4


@rss_bytes
def test_large_allocation_is_charged_to_its_line():
    with L.LineProfiler(big_alloc) as lp:
        big_alloc(96 * MB)
    assert lp.source.startswith("process resident memory")
    d = _rows(lp, big_alloc, "rss_bytes.all.delta")
    assert d[1][0] == 1 and d[1][1] >= 90 * MB          # the allocation's line
    if _frees_show():
        assert d[3][1] <= -90 * MB                       # the del's line gives it back
    if _frees_show():
        assert abs(d[2][1]) < 16 * MB and abs(d[4][1]) < 16 * MB
    p = _rows(lp, big_alloc, "rss_bytes.all.peak")
    cur = _rows(lp, big_alloc, "rss_bytes.all.current")
    assert p[1][1] >= cur[1][1] - d[1][1] + 90 * MB      # the peak of that line holds it


def inner_transient(n):
    t = torch.ones(n, dtype=torch.uint8)      # +1
    r = int(t[0])                             # +2
    del t; _trim()                            # +3
    return r                                  # +4


def outer():
    a = 1                                     # +1
    b = inner_transient(64 * MB)              # +2: a profiled call with a 64 MB transient
    return a + b                              # +3


@rss_bytes
def test_nested_profiled_call_charges_the_calling_line():
    with L.LineProfiler(outer, inner_transient) as lp:
        _trim()
        outer()
    po = _rows(lp, outer, "rss_bytes.all.peak")
    co = _rows(lp, outer, "rss_bytes.all.current")
    # the calling line's peak includes the callee's transient, though the callee's own lines
    # reset the peak counter several times meanwhile
    assert po[2][1] >= co[1][1] + 60 * MB
    pi = _rows(lp, inner_transient, "rss_bytes.all.peak")
    assert pi[1][1] >= co[1][1] + 60 * MB
    if _frees_show():
        assert po[3][1] < po[2][1] - 60 * MB             # the next line's peak is its own


@rss_bytes
def test_repeated_calls_fold():
    with L.LineProfiler(big_alloc) as lp:
        for _ in range(3):
            _trim()
            big_alloc(32 * MB)
    d = _rows(lp, big_alloc, "rss_bytes.all.delta")
    assert d[1][0] == 3 and d[1][1] >= 3 * 30 * MB       # deltas add up
    p = _rows(lp, big_alloc, "rss_bytes.all.peak")
    assert p[1][0] == 3
    one = L.LineProfiler(big_alloc)
    with one:
        _trim()
        big_alloc(32 * MB)
    if _frees_show():  # the max of three equal peaks is one of them
        assert abs(_rows(one, big_alloc, "rss_bytes.all.peak")[1][1] - p[1][1]) < 16 * MB


def test_columns_are_validated():
    with L.LineProfiler(big_alloc) as lp:
        big_alloc(MB)
    with pytest.raises(ValueError) as exc:
        lp.display(columns=("active_bytes.all.pea",))
    assert "rss_bytes.all.peak" in str(exc.value) and "valid columns" in str(exc.value)
    assert "rss_bytes.all.delta" in lp.columns()
    # memlab's CUDA defaults map to the process-memory ones without CUDA
    assert lp.display().columns == list(L.RSS_COLUMNS)


def hostile():
    s = "<script>alert(1)</script> & \"q\""   # +1
    return s                                 # +2


def test_text_and_html_display():
    with L.LineProfiler(hostile) as lp:
        hostile()
    text = str(lp.display())
    assert "## hostile" in text and "rss_bytes.all.peak" in text
    assert "<script>alert(1)</script>" in text            # the text form is the source as is
    html = lp.display()._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count("<tr>") == 1 + 3                    # header + the 3 source lines
    import io
    buf = io.StringIO()
    lp.print_stats(stream=buf)
    assert buf.getvalue() == text
    assert str(L.LineProfiler(hostile).display()) == "No data collected\n"


def test_display_filters_by_function_and_name():
    with L.LineProfiler(outer, inner_transient) as lp:
        outer()
    assert [f["code"].co_name for f in lp.display(outer).functions] == ["outer"]
    assert [f["code"].co_name for f in lp.display("inner_transient").functions] == \
        ["inner_transient"]
    assert len(lp.display().functions) == 2


def test_profile_every_prints_every_nth_call(capsys):
    L.clear_global_line_profiler()

    def work():
        return torch.ones(1024).sum()

    wrapped = L.profile_every(2)(work)
    try:
        wrapped()
        assert "## " not in capsys.readouterr().out
        wrapped()
        out = capsys.readouterr().out
        assert "## test_profile_every_prints_every_nth_call.<locals>.work" in out
        assert "return torch.ones(1024).sum()" in out
        assert L.profile_every(1, enable=False)(work) is work
        with pytest.raises(ValueError):
            L.profile_every(0)
    finally:
        L.global_line_profiler.disable()
        L.clear_global_line_profiler()


def test_profile_prints_at_exit_even_after_keyboard_interrupt(tmp_path):
    script = tmp_path / "prof.py"
    script.write_text(textwrap.dedent("""
        import torch
        from tensorgc import profile

        @profile
        def step(n):
            x = torch.ones(n)
            raise KeyboardInterrupt

        step(1 << 20)
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, cwd=str(tmp_path),
                       env={**__import__("os").environ, "PYTHONPATH": str(
                           __import__("pathlib").Path(tensorgc.__file__).parents[1])})
    assert r.returncode != 0 and "KeyboardInterrupt" in r.stderr
    assert "## step" in r.stdout and "x = torch.ones(n)" in r.stdout


def raises_inside(kind):
    x = torch.ones(1024)                      # +1
    raise kind("boom")                        # +2


@pytest.mark.parametrize("kind", [ValueError, KeyboardInterrupt])
def test_exceptions_leave_no_frame_and_restore_the_tracer(kind):
    seen = []

    def user_tracer(frame, event, arg):
        seen.append(event)
        return None

    sys.settrace(user_tracer)
    try:
        lp = L.LineProfiler(raises_inside)
        with pytest.raises(kind):
            with lp:
                raises_inside(kind)
        assert sys.gettrace() is user_tracer
    finally:
        sys.settrace(None)
    assert lp._core.open_frames == 0
    d = _rows(lp, raises_inside, "rss_bytes.all.delta")
    assert d[1][0] == 1 and d[2][0] == 1
    with lp:  # still usable
        with pytest.raises(kind):
            raises_inside(kind)
    assert _rows(lp, raises_inside, "rss_bytes.all.delta")[1][0] == 2


def gen(n):
    for i in range(n):                        # +1
        yield torch.ones(MB)                  # +2


def test_generators_are_followed_across_yields():
    with L.LineProfiler(gen) as lp:
        out = list(gen(3))
    assert len(out) == 3
    d = _rows(lp, gen, "rss_bytes.all.delta")
    assert d[2][0] == 3        # each yield line once, though it is left and resumed
    assert d[1][0] == 4        # the for line: three items and the end
    assert lp._core.open_frames == 0


def threaded(n):
    x = torch.ones(n, dtype=torch.uint8)      # +1
    return int(x[0])                          # +2


def test_threads_are_profiled():
    with L.LineProfiler(threaded) as lp:
        ts = [threading.Thread(target=threaded, args=(MB,)) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        threaded(MB)
    d = _rows(lp, threaded, "rss_bytes.all.delta")
    assert d[1][0] == 5 and d[2][0] == 5
    assert lp._core.open_frames == 0


@rss_bytes
def test_two_profilers_on_one_function():
    a, b = L.LineProfiler(big_alloc), L.LineProfiler(big_alloc)
    with a:
        with b:
            _trim()
            big_alloc(32 * MB)
        _trim()
        big_alloc(32 * MB)
    assert _rows(a, big_alloc, "rss_bytes.all.delta")[1][0] == 2
    assert _rows(b, big_alloc, "rss_bytes.all.delta")[1][0] == 1
    assert _rows(b, big_alloc, "rss_bytes.all.delta")[1][1] >= 30 * MB


def test_methods_and_bad_input():
    class M:
        def forward(self, n):
            return torch.ones(n).sum()

    m = M()
    with L.LineProfiler(m.forward) as lp:
        m.forward(1024)
    assert len(lp.display().functions) == 1
    with pytest.raises(TypeError, match="no Python code object"):
        L.LineProfiler(len)
    with pytest.raises(ValueError):
        L.LineProfiler(big_alloc, target_gpu=-1)
    with pytest.raises(TypeError):
        tensorgc._tensorgc._LineProfiler().add_code(1)


def test_add_function_while_enabled_and_clear():
    lp = L.LineProfiler()
    with lp:
        big_alloc(MB)                         # not watched yet
        lp.add_function(big_alloc)
        big_alloc(MB)
    assert _rows(lp, big_alloc, "rss_bytes.all.delta")[1][0] == 1
    lp.clear()
    assert str(lp.display()) == "No data collected\n"


def test_nothing_is_traced_until_enabled():
    code = textwrap.dedent("""
        import sys, tensorgc
        from tensorgc import lineprof
        assert sys.gettrace() is None
        if hasattr(sys, "monitoring"):
            assert all(sys.monitoring.get_tool(i) is None for i in range(6))
        assert tensorgc._tensorgc._lp_start is not None
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(
                           __import__("pathlib").Path(tensorgc.__file__).parents[1])})
    assert r.stdout.strip() == "ok", r.stderr


def test_the_def_line_counts_no_hit():
    """The def line is not a line of the body: a call's readings up to its first line go to
    that line, and the def line shows its source with no hits."""
    with L.LineProfiler(plain) as lp:
        for i in range(5):
            plain(i)
    hits = {line - plain.__code__.co_firstlineno: h for _, line, h, _, _ in lp._core.records()}
    assert hits == {1: 5, 2: 5}
    row = [ln for ln in str(lp.display()).splitlines() if "def plain(n):" in ln]
    assert len(row) == 1 and row[0].split()[1] == "def"   # no hits column on the def line


def test_closures_count_each_call():
    y = 3

    def clos(n):
        return n + y                          # +1

    with L.LineProfiler(clos) as lp:
        for i in range(4):
            clos(i)
    d = _rows(lp, clos, "rss_bytes.all.delta")
    assert 0 not in d and d[1][0] == 4        # a closure's call is no generator's resume


# -- re-entrancy, threads, odd code objects -----------------------------------------------------

def _core_events(codes, on):
    """The events of `codes` on or off for bare _LineProfiler cores (no LineProfiler around)."""
    if on:
        L._Events.start(codes)
    else:
        L._Events.stop(codes)


def plain(n):
    a = n + 1                                 # +1
    return a                                  # +2


def _fake_cuda(core, stats, reset=lambda dev: None):
    core.set_source("cuda", 0, stats, reset)


def test_a_reading_that_disables_another_profiler_stops_its_events():
    """lp__dispatch walked st->lp_enabled itself with borrowed items: a reading (Python code)
    that disabled a later profiler left it in the walk (it got the event after its disable),
    and freed it when that was its last reference (a use-after-free under ASan)."""
    C = tensorgc._tensorgc
    a, hold = C._LineProfiler(), [C._LineProfiler(), C._LineProfiler()]
    b = hold[0]
    calls = [0]

    def stats(dev):
        calls[0] += 1
        if calls[0] == 3:
            b.disable()                       # the last of the list...
            hold.pop().disable()              # ...and hold[1], whose last reference this was
        return {"x": {"current": 1, "peak": 2}}

    _fake_cuda(a, stats)
    for p in (a, b, hold[1]):
        p.add_code(plain.__code__)
    a.enable(); hold[1].enable(); b.enable()
    del p
    _core_events([plain.__code__], True)
    try:
        plain(1)
        plain(2)
    finally:
        _core_events([plain.__code__], False)
        a.disable()
    assert calls[0] > 3
    assert not b.enabled and b.open_frames == 0 and b.lines == 0


def test_a_profiler_enabled_from_inside_its_first_reading_is_listed_once():
    """enable() checked `enabled` before its first reading and appended after it: a reading that
    enabled the same profiler (Python code, as a replaced memory_stats is) put it on the list
    twice, and disable() took only one off: it went on recording after its disable."""
    C = tensorgc._tensorgc
    p = C._LineProfiler()
    p.add_code(plain.__code__)
    once = [True]

    def stats(dev):
        if once[0]:
            once[0] = False
            p.enable()
        return {"x": {"current": 1, "peak": 1}}

    _fake_cuda(p, stats)
    p.enable()
    p.disable()
    assert not p.enabled
    p.enable()                                # once more: one entry, one fold per event
    _core_events([plain.__code__], True)
    try:
        plain(1)
    finally:
        _core_events([plain.__code__], False)
        p.disable()
    hits = {line - plain.__code__.co_firstlineno: h for _, line, h, _, _ in p.records()}
    assert hits == {1: 1, 2: 1}
    lines = p.lines
    _core_events([plain.__code__], True)
    try:
        plain(1)                              # disabled: nothing more
    finally:
        _core_events([plain.__code__], False)
    assert p.lines == lines and p.open_frames == 0


def _run_py(code, timeout=120):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(
                              __import__("pathlib").Path(tensorgc.__file__).parents[1])})


def test_a_self_nesting_memory_stats_is_an_error_not_a_crash():
    """lp__flatten recursed into every nested dict with no bound: a dict that contains itself
    (from a replaced memory_stats) overflowed the C stack (SIGSEGV)."""
    r = _run_py("""
        from tensorgc import _tensorgc as C
        p = C._LineProfiler()
        d = {}
        d["self"] = d
        p.set_source("cuda", 0, lambda dev: d, lambda dev: None)
        try:
            p.enable()
        except RuntimeError as exc:
            print("refused:", exc)
        print("alive", p.enabled)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "refused: memory_stats() nests too deep" in r.stdout and "alive False" in r.stdout


def _with_lines(body_lines, def_line=1):
    """A function compiled from an AST whose statements claim the given line numbers (as code
    generators and odd line tables do): `def f(): a = 1; ...; return a`."""
    import ast
    src = "def f():\n" + "".join(f"    a{i} = {i}\n" for i in range(len(body_lines) - 1)) + \
        "    return 0\n"
    tree = ast.parse(src)
    fn = tree.body[0]
    ast.increment_lineno(tree, def_line - 1)
    for stmt, line in zip(fn.body, body_lines):
        for node in ast.walk(stmt):
            if hasattr(node, "lineno"):
                node.lineno = node.end_lineno = line
    ns = {}
    exec(compile(tree, "<generated>", "exec"), ns)
    return ns["f"]


def test_lines_before_the_first_line_are_recorded():
    """The engine kept a dense table from co_firstlineno on and dropped the records of lines
    before it (a code object's line table may go below co_firstlineno)."""
    f = _with_lines([3, 12], def_line=10)
    assert f.__code__.co_firstlineno == 10
    with L.LineProfiler(f) as lp:
        f()
        f()
    hits = {line: h for _, line, h, _, _ in lp._core.records()}
    assert hits == {3: 2, 12: 2}
    text = str(lp.display())
    assert "\n   3     2 " in text


def test_a_huge_line_number_costs_no_memory():
    """The dense table grew to (line - co_firstlineno) records: one line numbered 20,000,000
    cost 1.3 GB (and a line near 2**30 could allocate tens of GB and touch them all)."""
    f = _with_lines([2, 20_000_000])
    _trim()
    before = _resident()
    with L.LineProfiler(f) as lp:
        f()
    grew = _resident() - before
    hits = {line: h for _, line, h, _, _ in lp._core.records()}
    del lp
    assert hits == {2: 1, 20_000_000: 1}
    assert grew < 64 * MB


def test_lines_near_the_largest_line_number():
    code = plain.__code__.replace(co_firstlineno=2**31 - 5)
    g = type(plain)(code, globals())
    with L.LineProfiler(g) as lp:
        g(1)
    assert sorted(line for _, line, _, _, _ in lp._core.records()) == [2**31 - 4, 2**31 - 3]


@rss_bytes
def test_a_forked_child_reads_its_own_resident_memory():
    """The RSS source kept /proc/self/statm open from its first reading: /proc/self is resolved
    at open, so a forked child (a DataLoader worker, multiprocessing's fork) read its parent's
    resident memory: a 200 MB allocation in the child showed as 0."""
    r = _run_py("""
        import os
        from tensorgc import lineprof as L
        L._cuda_available = lambda: False
        MB = 1 << 20
        def grow():
            x = bytearray(200 * MB)
            return x
        lp = L.LineProfiler(grow)
        with lp:                  # the parent reads first
            pass
        pid = os.fork()
        if pid == 0:
            with lp:
                keep = grow()
            first = grow.__code__.co_firstlineno
            sums = {line - first: b for _, line, _, _, b in lp._core.records()}
            print("child delta MB", sums[1][list(lp._core.keys).index("rss_bytes.all.current")] // MB,
                  flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.split("child delta MB")[1]) >= 190


@pytest.mark.skipif(L.MONITORING, reason="the C tracer is the 3.10/3.11 path")
def test_disabled_from_another_thread_gives_the_tracer_back():
    """The tracer that enable() replaced was kept for the module, not for its thread: a
    disable() on another thread put the enabling thread's tracer (here the user's) on that
    other thread, and the enabling thread kept the C tracer for good: the user's tracer never
    saw an event again."""
    events = []

    def user_tracer(frame, event, arg):
        events.append(event)

    sys.settrace(user_tracer)
    try:
        lp = L.LineProfiler(plain)
        lp.enable()
        other = []
        t = threading.Thread(target=lambda: (lp.disable(), other.append(sys.gettrace())))
        t.start()
        t.join()
        events.clear()
        plain(1)
        assert sys.gettrace() is user_tracer
        assert other == [None]
        assert "call" in events
    finally:
        sys.settrace(None)


@pytest.mark.skipif(L.MONITORING, reason="the C tracer is the 3.10/3.11 path")
def test_gettrace_settrace_round_trip_keeps_profiling():
    """sys.gettrace() returned the C tracer's argument: the module (or the _LineProfiler type on
    spawned threads). The usual `old = sys.gettrace(); ...; sys.settrace(old)` of a tool that
    traces for a while then installed a non-callable as a Python tracer: TypeError raised into
    the user's code at the next call, and the profile stopped."""
    def round_trip():
        old = sys.gettrace()
        sys.settrace(None)
        sys.settrace(old)
        plain(1)                              # TypeError: 'module' object is not callable
        plain(2)

    with L.LineProfiler(plain) as lp:
        round_trip()
        t = threading.Thread(target=round_trip)
        t.start()
        t.join()
    hits = {line - plain.__code__.co_firstlineno: h for _, line, h, _, _ in lp._core.records()}
    assert hits[1] >= 3                       # profiled again after each round trip


def test_profilers_enabled_and_disabled_from_many_threads():
    """_Events' counts and the tool id were updated with read-modify-write steps that a thread
    switch can split (the GIL makes bytecodes atomic, not methods): KeyError from disable(),
    counts that never returned to 0 (the tracer or tool id kept for good), and on 3.12 two
    threads each taking a tool id, then 'no free sys.monitoring tool id'."""
    r = _run_py("""
        import sys, threading
        from tensorgc import lineprof as L
        L._cuda_available = lambda: False
        sys.setswitchinterval(1e-6)
        def f(n):
            return n + 1
        def g(n):
            return n + 2
        errors = []
        def worker():
            lp = L.LineProfiler(f, g)
            try:
                for i in range(2000):
                    with lp:
                        f(i)
            except BaseException as exc:
                errors.append(repr(exc))
        ts = [threading.Thread(target=worker) for _ in range(8)]
        for t in ts: t.start()
        for t in ts: t.join()
        print("errors", errors[:3])
        print("left", L._Events.enabled, len(L._Events.watched), L._Events.tool)
    """, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "errors []" in r.stdout and "left 0 0 None" in r.stdout, r.stdout


def test_profile_every_never_hides_the_functions_outcome(caplog):
    """profile_every printed from a `finally`: a printing that failed (here an unknown column,
    which can only be checked once the source is known) replaced the function's return value,
    or its own exception, with ValueError on every call."""
    L.clear_global_line_profiler()

    def ok():
        return 42

    def bad():
        raise KeyError("the user's own")

    cols = ("no.such.column",)
    try:
        assert L.profile_every(1, columns=cols)(ok)() == 42
        with pytest.raises(KeyError, match="the user's own"):
            L.profile_every(1, columns=cols)(bad)()
        assert "no.such.column" in caplog.text
    finally:
        L.global_line_profiler.disable()
        L.clear_global_line_profiler()


def _compiled_as(path, src="def f():\n    a = 1\n    return a\n"):
    ns = {}
    exec(compile(src, str(path), "exec"), ns)
    return ns["f"]


def test_display_when_the_source_file_does_not_match(tmp_path):
    """display() asked inspect for the source and fell back only on OSError/TypeError: a file
    that no longer holds the code (edited since, or compile() given another file's name) made
    inspect raise tokenize.TokenError out of display(); and where inspect did return some other
    block, the records of lines outside it were silently left out of the table."""
    broken = tmp_path / "broken.py"
    broken.write_text("x = (\n  1,\n")
    f = _compiled_as(broken)
    with L.LineProfiler(f) as lp:
        f()
    text = str(lp.display())
    assert [ln.split()[:2] for ln in text.splitlines()[3:]] == [["2", "1"], ["3", "1"]]
    assert "<table" in lp.display()._repr_html_()

    short = tmp_path / "short.py"
    short.write_text("def f(): pass\n")
    g = _compiled_as(short)
    with L.LineProfiler(g) as lp:
        g()
    rows = [ln.split()[:2] for ln in str(lp.display()).splitlines()[3:]]
    assert rows == [["1", "def"], ["2", "1"], ["3", "1"]]   # the def line: source, no hits


def test_partials_are_profiled_through_their_target():
    """_code_of's docstring promises partials' targets, but a functools.partial has no __code__
    and no __func__: LineProfiler(partial(f, 1)) raised 'has no Python code object'."""
    import functools
    p = functools.partial(plain, 1)
    with L.LineProfiler(p) as lp:
        p()
    assert [fn["code"] for fn in lp.display().functions] == [plain.__code__]
    assert L.LineProfiler(functools.partial(functools.partial(plain), 2))._funcs


@pytest.mark.skipif(L.MONITORING, reason="the thread hook is the 3.10/3.11 path")
def test_a_thread_hook_set_while_profiling_survives_disable():
    """disable() put back the threading.settrace hook that enable() had found, whatever was
    there by then: a hook installed meanwhile (coverage or a debugger starting) was dropped,
    and threads started afterwards escaped it."""
    def user_hook(frame, event, arg):
        return None

    before = threading.gettrace()
    try:
        with L.LineProfiler(plain):
            threading.settrace(user_hook)
        assert threading.gettrace() is user_hook
    finally:
        threading.settrace(before)


def test_a_reading_that_lets_other_threads_run_loses_none_of_their_events():
    """The 'inside an event' flag was one for the interpreter: while one thread's reading ran
    Python code that let other threads run (I/O, a lock, a sleep in a replaced memory_stats),
    every event of every other thread was dropped as if it were the reading's own: here three
    calls in four went unrecorded."""
    import time
    C = tensorgc._tensorgc
    p = C._LineProfiler()
    p.add_code(plain.__code__)

    def stats(dev):
        time.sleep(0.0002)
        return {"x": {"current": 1, "peak": 1}}

    _fake_cuda(p, stats)
    p.enable()
    _core_events([plain.__code__], True)
    try:
        def work():
            for i in range(50):
                plain(i)
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        _core_events([plain.__code__], False)
        p.disable()
    hits = {line - plain.__code__.co_firstlineno: h for _, line, h, _, _ in p.records()}
    assert hits == {1: 200, 2: 200}
    assert p.open_frames == 0


def test_a_profiler_cleared_by_a_later_reading_is_not_shared():
    """A profiler read earlier in an event kept read_ok after a later reading disabled it and
    cleared it (clear(True) drops its layout): the next profiler on the same source looked at
    its layout to share its reading, and dereferenced NULL (SIGSEGV)."""
    r = _run_py("""
        from tensorgc import _tensorgc as C
        from tensorgc import lineprof as L
        def f():
            return 1
        q, r, s = C._LineProfiler(), C._LineProfiler(), C._LineProfiler()
        calls = [0]
        def stats_q(dev):
            return {"x": {"current": 1, "peak": 1}}
        def stats_r(dev):
            calls[0] += 1
            if calls[0] == 2:
                q.disable()
                q.clear(True)
            return {"y": {"current": 1}}
        for p in (q, s):
            p.set_source("cuda", 0, stats_q, lambda dev: None)
        r.set_source("cuda", 1, stats_r, lambda dev: None)
        for p in (q, r, s):
            p.add_code(f.__code__)
            p.enable()
        L._Events.start([f.__code__])
        f()
        L._Events.stop([f.__code__])
        print("lines", q.lines, r.lines > 0, s.lines > 0)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "lines 0 True True" in r.stdout


def test_ctrl_c_inside_a_reading_reaches_the_program(ctrl_c):
    """A KeyboardInterrupt raised inside a reading (Ctrl-C lands in a reading's Python code: a
    replaced memory_stats, an unraisable hook writing to a notebook's stderr) was taken for a
    failed reading and swallowed: the program never stopped."""
    C = tensorgc._tensorgc
    p = C._LineProfiler()
    p.add_code(plain.__code__)
    calls = [0]

    def stats(dev):
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt
        return {"x": {"current": 1, "peak": 1}}

    _fake_cuda(p, stats)
    p.enable()
    seen = []
    old_hook, sys.unraisablehook = sys.unraisablehook, seen.append
    _core_events([plain.__code__], True)
    try:
        with pytest.raises(KeyboardInterrupt):
            for i in range(10000):
                plain(i)
    finally:
        _core_events([plain.__code__], False)
        sys.unraisablehook = old_hook
        p.disable()
    assert calls[0] < 100 and seen == []
