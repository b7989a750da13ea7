"""The line profiler on the CUDA caching allocator's counters (torch.cuda.memory_stats): known
lines, every memory_stats key as a column, nested peaks, set_target_gpu. Needs a GPU."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc import lineprof as L

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
MB = 1 << 20


def _col(lp, func, col):
    fn = lp.display(func, columns=(col,)).functions[0]
    first = fn["code"].co_firstlineno
    return {ln - first: (h, v[0]) for ln, (h, v) in fn["lines"].items()}


def alloc_line():
    x = torch.empty(64 * MB, dtype=torch.uint8, device="cuda")   # +1
    y = x[:10].sum()                                              # +2
    del x                                                         # +3
    return y                                                      # +4


def test_memory_stats_columns_on_a_known_line():
    torch.cuda.empty_cache()
    with L.LineProfiler(alloc_line) as lp:
        alloc_line()
    assert lp.source == f"cuda:{0} (torch.cuda.memory_stats)"
    assert set(torch.cuda.memory_stats()) <= set(lp.columns())
    cur = _col(lp, alloc_line, "active_bytes.all.current")
    assert _col(lp, alloc_line, "active_bytes.all.delta")[1][1] == 64 * MB
    assert _col(lp, alloc_line, "active_bytes.all.delta")[3][1] == -64 * MB
    before = cur[1][1] - _col(lp, alloc_line, "active_bytes.all.delta")[1][1]
    assert _col(lp, alloc_line, "active_bytes.all.peak")[1][1] >= before + 64 * MB
    assert _col(lp, alloc_line, "allocated_bytes.all.allocated")[1][1] >= 64 * MB
    assert _col(lp, alloc_line, "allocation.all.allocated")[1][1] >= 1
    assert _col(lp, alloc_line, "reserved_bytes.all.peak")[1][1] >= 64 * MB
    text = str(lp.display())  # memlab's default columns
    assert "active_bytes.all.peak" in text and "reserved_bytes.all.peak" in text


def transient(n):
    t = torch.empty(n, dtype=torch.uint8, device="cuda")          # +1
    return int(t.numel())                                         # +2


def calls_transient():
    a = 0                                                         # +1
    a += transient(128 * MB)                                      # +2
    return a                                                      # +3


def test_nested_peaks_on_cuda():
    with L.LineProfiler(calls_transient, transient) as lp:
        calls_transient()
        calls_transient()
    base = _col(lp, calls_transient, "active_bytes.all.current")[1][1]
    peak = _col(lp, calls_transient, "active_bytes.all.peak")
    assert peak[2][0] == 2 and peak[2][1] >= base + 128 * MB
    assert peak[3][1] < base + 128 * MB
    assert _col(lp, transient, "active_bytes.all.delta")[1][1] == 2 * 128 * MB


def test_set_target_gpu():
    n = torch.cuda.device_count()
    lp = L.LineProfiler(alloc_line, target_gpu=torch.device("cuda:0"))
    assert lp.target_gpu == 0
    L.set_target_gpu(0)
    assert L.global_line_profiler.target_gpu == 0
    if n == 1:
        bad = L.LineProfiler(alloc_line, target_gpu=1)
        with pytest.raises(ValueError, match="does not exist"):
            bad.enable()
        assert L._Events.enabled == 0
    else:
        def on1():
            x = torch.empty(32 * MB, dtype=torch.uint8, device="cuda:1")  # +1
            return x                                                       # +2
        lp0, lp1 = L.LineProfiler(on1, target_gpu=0), L.LineProfiler(on1, target_gpu=1)
        with lp0, lp1:
            on1()
        assert _col(lp1, on1, "active_bytes.all.delta")[1][1] == 32 * MB
        assert _col(lp0, on1, "active_bytes.all.delta")[1][1] == 0


def test_profile_prints_cuda_columns_at_exit(tmp_path):
    script = tmp_path / "prof.py"
    script.write_text(textwrap.dedent("""
        import torch
        from tensorgc import profile

        @profile
        def step():
            x = torch.ones(1 << 20, device="cuda")
            return x.sum().item()

        step(); step()
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(Path(tensorgc.__file__).parents[1])})
    assert r.returncode == 0, r.stderr
    assert "## step" in r.stdout and "cuda:0 (torch.cuda.memory_stats)" in r.stdout
    assert "active_bytes.all.peak" in r.stdout
