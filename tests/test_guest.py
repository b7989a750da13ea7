"""tensorgc is a guest in the program's process: what the program set up stays as it set it,
with tensorgc's tools on beside it. The program's gc callbacks, the collector's switches,
another tracer (coverage's) or profiler (cProfile, torch's), DataLoader workers and
torch.compile; the allocator's history is tests/test_history.py's, the CUDA rows (the OOM
observers, a CUDA graph's capture) tests/test_guest_cuda.py's."""
import gc
import os
import subprocess
import sys
import textwrap

import pytest

import tensorgc
from _util import DEVICE, T, new_class

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _cycle_with_tensor():
    Node = new_class("Guest")
    a = Node()
    a.me = a
    a.t = T(16)


def _tensorgc_at_work():
    """Every tool that runs inside the program: reports, owners, growth, the index, a picture's
    graph, a line profile; with the detector on and collections that find a tensor cycle."""
    handles = [tensorgc.observe_cycles(lambda r: r.text, device="any"),
               tensorgc.observe_garbage(lambda r: None) if hasattr(tensorgc, "observe_garbage")
               else None]
    try:
        tensorgc.track_tensors()
        keep = [T(8) for _ in range(3)]
        before = tensorgc.checkpoint()
        keep.append(T(32))
        _cycle_with_tensor()
        gc.collect()
        tensorgc.growth(before)
        tensorgc.MemReporter().collect(owners=True)
        tensorgc.owners(keep[:1])
        tensorgc.create_graph([keep])

        def f():
            return T(64)

        with tensorgc.LineProfiler(f):
            f()
    finally:
        tensorgc.track_tensors(False)
        for h in handles:
            if h is not None:
                h.remove()


def test_the_programs_gc_callbacks_are_called_in_its_order_and_removed_only_by_it():
    pytest.importorskip("torch")
    calls = []

    def first(phase, info):
        calls.append(("first", phase))

    def second(phase, info):
        calls.append(("second", phase))

    gc.callbacks.append(first)
    h1 = tensorgc.observe_cycles(lambda r: None, device="any")
    gc.callbacks.append(second)
    h2 = tensorgc.warn_tensor_cycles(device="cpu")
    try:
        _cycle_with_tensor()
        gc.collect()
        assert [c for c in calls if c[1] == "start"] == [("first", "start"), ("second", "start")]
        mine = [cb for cb in gc.callbacks if cb in (first, second)]
        assert mine == [first, second]
        gc.callbacks.remove(first)  # the program's to remove, any time
        calls.clear()
        gc.collect()
        assert calls == [("second", "start"), ("second", "stop")]
        gc.callbacks.insert(0, first)
        _tensorgc_at_work()
    finally:
        h2.remove()
        h1.remove()
    assert [cb for cb in gc.callbacks if cb in (first, second)] == [first, second]
    gc.callbacks.remove(first)
    gc.callbacks.remove(second)


@pytest.mark.parametrize("enabled", [False, True], ids=["gc-disabled", "gc-enabled"])
def test_the_collectors_switches_stay_as_the_program_set_them(enabled):
    pytest.importorskip("torch")
    threshold = gc.get_threshold()
    gc.set_threshold(50_000, 30, 40)
    kept_frozen = [object()]
    gc.freeze()
    not_frozen = [object()]  # made after the program's freeze
    (gc.enable if enabled else gc.disable)()
    try:
        _tensorgc_at_work()
        assert gc.isenabled() is enabled
        assert gc.get_threshold() == (50_000, 30, 40)
        # neither unfrozen nor frozen by tensorgc (the count alone moves as frozen objects die)
        tracked = {id(o) for o in gc.get_objects()}  # every generation but the permanent one
        assert id(kept_frozen) not in tracked and id(not_frozen) in tracked
    finally:
        gc.disable()
        gc.unfreeze()
        gc.set_threshold(*threshold)


def _run(tmp_path, code, env=None, timeout=240):
    """Runs ``code`` as a program of its own (a file: spawned workers import it)."""
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(code))
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]), **(env or {}))
    p = subprocess.run([sys.executable, str(script)], capture_output=True,
                       text=True, timeout=timeout, env=full, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


_COVERED = """
    import sys, threading
    import coverage
    import tensorgc

    def work(n):
        total = 0
        for i in range(n):
            total += i
        return total

    def in_thread():
        x = work(3)
        return x

    cov = coverage.Coverage(data_file=None)
    cov.start()
    with tensorgc.LineProfiler(work, in_thread) as lp:
        work(10)
        t = threading.Thread(target=in_thread)
        t.start(); t.join()
    cov.stop()
    lines = set(cov.get_data().lines(__file__) or ())
    src = open(__file__).read().splitlines()
    want = {i + 1 for i, l in enumerate(src)
            if l.strip().startswith(("total", "for i", "return total", "x = work", "return x"))}
    print("missing", sorted(want - lines))
    print("profiled", sorted(r.line for r in lp.records() if r.calls) if hasattr(lp, "records")
          else "n/a")
    print("tracer", sys.gettrace())
"""


@pytest.mark.parametrize("core", ["ctrace", "sysmon"])
def test_coverage_keeps_every_line_with_the_line_profiler_on(tmp_path, core):
    pytest.importorskip("coverage")
    if core == "sysmon" and sys.version_info < (3, 12):
        pytest.skip("coverage's sys.monitoring core needs Python 3.12+")
    script = tmp_path / "covered.py"
    script.write_text(textwrap.dedent(_COVERED))
    full = dict(os.environ, PYTHONPATH=ROOT, COVERAGE_CORE=core)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=240, env=full)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "missing []" in p.stdout, p.stdout  # coverage saw the profiled lines, threads' too
    assert "tracer None" in p.stdout  # coverage's stop left no tracer of ours behind


def test_the_line_profiler_still_profiles_under_coverage(tmp_path):
    pytest.importorskip("coverage")
    pytest.importorskip("torch")
    out = _run(tmp_path, """
        import coverage, tensorgc, torch
        def f():
            a = torch.zeros(1 << 20)
            return a.sum()
        cov = coverage.Coverage(data_file=None)
        cov.start()
        with tensorgc.LineProfiler(f) as lp:
            f()
        cov.stop()
        print(lp.text() if hasattr(lp, "text") else lp.display())
    """)
    assert "a = torch.zeros(1 << 20)" in out and "return a.sum()" in out


def test_cprofile_sees_every_call_with_tensorgc_on(tmp_path):
    pytest.importorskip("torch")
    out = _run(tmp_path, """
        import cProfile, gc, pstats, io
        import tensorgc, torch

        def leaf():
            return torch.zeros(4)

        def work():
            for _ in range(7):
                leaf()

        h = tensorgc.observe_cycles(lambda r: None, device="any")
        prof = cProfile.Profile()
        prof.enable()
        with tensorgc.LineProfiler(work):
            work()
        gc.collect()
        prof.disable()
        h.remove()
        stats = pstats.Stats(prof)
        n = [v[1] for k, v in stats.stats.items() if k[2] == "leaf"]
        print("leaf calls", n)
    """)
    assert "leaf calls [7]" in out


def test_torch_profiler_records_memory_with_tensorgc_on():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    h = tensorgc.observe_cycles(lambda r: None, device="any")
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            x = torch.ones(1 << 18)
            tensorgc.MemReporter().collect()
            _cycle_with_tensor()
            gc.collect()
            del x
    finally:
        h.remove()
    events = prof.key_averages()
    assert any(e.cpu_memory_usage > 0 for e in events)  # allocations were recorded
    assert any(e.key == "aten::ones" for e in events)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers_with_the_detector_on(tmp_path, method):
    pytest.importorskip("torch")
    out = _run(tmp_path, f"""
        import gc, torch, tensorgc
        from torch.utils.data import DataLoader, Dataset

        class Squares(Dataset):
            def __len__(self):
                return 16
            def __getitem__(self, i):
                return torch.full((4,), float(i * i))

        def main():
            seen = []
            h = tensorgc.observe_cycles(lambda r: seen.append(r), device="any")
            gc.enable()
            dl = DataLoader(Squares(), batch_size=4, num_workers=2,
                            multiprocessing_context="{method}")
            total = sum(float(b.sum()) for b in dl)
            class Node: pass
            a = Node(); a.me = a; a.t = torch.zeros(3)
            del a
            gc.collect()
            h.remove()
            print("total", total, "reports", len(seen))

        if __name__ == "__main__":
            main()
    """, timeout=300)
    assert "total {} reports".format(float(sum(4 * i * i for i in range(16)))) in out
    assert "reports 0" not in out  # the parent's detector still reports after the workers


def test_torch_compile_no_graph_break_or_recompile_from_tensorgc(tmp_path):
    torch = pytest.importorskip("torch")
    out = _run(tmp_path, """
        import gc, torch, tensorgc
        from torch._dynamo.utils import counters

        def step(x, w):
            y = torch.relu(x @ w)
            return (y * 2).sum()

        def run(with_tensorgc):
            torch._dynamo.reset()
            counters.clear()
            f = torch.compile(step, backend="eager")
            handles = []
            if with_tensorgc:
                handles.append(tensorgc.observe_cycles(lambda r: None, device="any"))
                tensorgc.track_tensors()
            w = torch.randn(8, 8)
            for i in range(6):
                class Node: pass
                a = Node(); a.me = a; a.t = torch.zeros(2)
                del a
                if with_tensorgc:
                    with tensorgc.LineProfiler(step):
                        f(torch.randn(4, 8), w)
                    tensorgc.MemReporter().collect()
                else:
                    f(torch.randn(4, 8), w)
                gc.collect()
            for h in handles:
                h.remove()
            tensorgc.track_tensors(False)
            return (sum(counters["graph_break"].values()),
                    counters["stats"]["unique_graphs"], counters["stats"]["calls_captured"])

        print("plain", run(False))
        print("tensorgc", run(True))
    """, timeout=300)
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["tensorgc"] == lines["plain"], out
