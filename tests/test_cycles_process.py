"""Whole-process behaviour: interpreter shutdown with observers and pending cyclic garbage, and
(CUDA only) allocation stacks from torch's memory history on tensor nodes."""
import gc
import os
import subprocess
import sys
import textwrap

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from _util import DEVICE, IS_CUDA, new_class

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-X", "dev", "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def test_shutdown_with_observers_and_pending_garbage_is_clean():
    # Cycles holding tensors are still uncollected at exit, every kind of observer is on, and one
    # observer is called during finalisation's collections if it runs at all: no crash, no
    # "Exception ignored" noise, exit status 0.
    proc = run_python(f"""
        import gc, sys, torch, tensorgc
        gc.disable()
        seen = []
        tensorgc.observe_cycles(lambda r: seen.append(r.text), device={DEVICE!r})
        tensorgc.observe_tensor_cycles(lambda html: seen.append(len(html)), device="any")
        tensorgc.observe_garbage(lambda objs: seen.append(len(objs)))
        tensorgc.warn_tensor_cycles(device={DEVICE!r})
        class Node:
            pass
        for _ in range(50):
            a, b = Node(), Node()
            a.other, b.other = b, a
            a.t = torch.zeros(64, device={DEVICE!r})
            a.cb = lambda: a
        del a, b
        # module globals, the class and the cycles all go away during finalisation
        print("exiting", flush=True)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "exiting" in proc.stdout
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_removing_observers_at_exit_restores_gc_callbacks():
    proc = run_python("""
        import atexit, gc, tensorgc, tensorgc._tensorgc_testing
        h = tensorgc.observe_garbage(lambda objs: None)
        assert any(getattr(cb, "__name__", "") == "_gc_hook" for cb in gc.callbacks)
        def check():
            # runs before tensorgc's own atexit hook (LIFO): still registered here
            print("hook registered at exit:", tensorgc._tensorgc_testing._observer_count())
        atexit.register(check)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "hook registered at exit: 1" in proc.stdout


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")
def test_sparse_tensor_in_cycle_counts_indices_and_values(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device="cpu"))
    Node = new_class()

    def make():
        i = torch.tensor([[0, 1, 2], [2, 0, 1]])
        v = torch.tensor([3.0, 4.0, 5.0])
        n = Node()
        n.me = n
        n.sparse = torch.sparse_coo_tensor(i, v, (3, 3), check_invariants=True)
    make()
    gc.collect()
    assert len(reports) == 1
    (info,) = [t for t in reports[0].tensors if t["shape"] == (3, 3)]
    # indices: 2 x 3 int64 = 48 bytes, values: 3 float32 = 12 bytes
    assert info["nbytes"] == 48 + 12


@pytest.mark.skipif(not IS_CUDA, reason="allocation stacks come from CUDA memory history")
def test_cuda_allocation_stack_names_the_allocating_line(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device="cuda"))
    Node = new_class()

    def allocate_leaky_pair():
        a, b = Node(), Node()
        a.other, b.other = b, a
        a.t = torch.empty(1024, 1024, device="cuda")  # the line the stack must name

    torch.cuda.memory._record_memory_history(max_entries=10000)
    try:
        allocate_leaky_pair()
        gc.collect()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    assert len(reports) == 1
    (info,) = reports[0].tensors
    assert info["stack"] is not None, reports[0].tensors
    assert "test_cycles_process.py" in info["stack"]
    assert "allocate_leaky_pair" in info["stack"]
    assert "allocate_leaky_pair" in reports[0].dot


@pytest.mark.skipif(not IS_CUDA, reason="CUDA only")
def test_cuda_without_history_says_how_to_record(track):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device="cuda"))
    Node = new_class()

    def make():
        n = Node()
        n.me = n
        n.t = torch.empty(16, device="cuda")
    make()
    gc.collect()
    assert reports[0].tensors[0]["stack"] is None
    assert "_record_memory_history" in reports[0].dot
