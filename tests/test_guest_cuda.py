"""The CUDA rows of being a guest (tests/test_guest.py has the others): the program's own
allocator history stays whole in every order with every tool of tensorgc's that may touch it, in
fresh processes as a program starts; the program's OOM observers are still called; a collection
inside a CUDA graph's capture leaves the capture valid. Needs CUDA."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = """
import gc, sys, tempfile
import torch, tensorgc

steps, tool = sys.argv[1].split(","), sys.argv[2]
NUMEL = 896  # 3,584 bytes: a size nothing else here allocates
handles = []

def work():
    xs = [torch.empty(NUMEL, device="cuda") for _ in range(50)]
    del xs

def start_tool():
    if tool == "warn":
        handles.append(tensorgc.warn_tensor_cycles().remove)
    elif tool == "observe":
        handles.append(tensorgc.observe_tensor_cycles(lambda html: None).remove)
    elif tool == "memreporter":
        tensorgc.MemReporter().collect(device="cuda", owners=True)  # reads the stacks
    elif tool == "lineprof":
        lp = tensorgc.LineProfiler(work)
        lp.enable()
        handles.append(lp.disable)
    elif tool == "on_oom":
        handles.append(tensorgc.on_oom(tempfile.mkdtemp() + "/autopsies"))

for step in steps:
    if step == "record":
        torch.cuda.memory._record_memory_history(max_entries=100000)
    elif step == "tool":
        start_tool()
    elif step == "work":
        work()
    elif step == "remove":
        if handles:
            handles.pop()()
    elif step == "init":
        torch.cuda.init()
work()
for h in handles:
    h()
snap = torch.cuda.memory._snapshot()
n = sum(1 for e in snap["device_traces"][torch.cuda.current_device()]
        if e["action"] == "alloc" and e["size"] == NUMEL * 4)
print("allocations", n)
"""

ORDERS = {
    "record-only": "record",
    "record-tool": "record,tool",
    "tool-record": "tool,record",
    "record-tool-work-remove": "record,tool,work,remove",
    "init-record-tool": "init,record,tool",
    "tool-work-record-remove": "tool,work,record,remove",
    "init-tool-record-remove": "init,tool,record,remove",
}
CASES = [(o, t) for o in ORDERS for t in ("warn", "observe")] + [
    (o, t) for o in ("record-tool", "tool-record", "record-tool-work-remove")
    for t in ("memreporter", "lineprof", "on_oom")]


@pytest.mark.parametrize("order,tool", CASES, ids=[f"{o}-{t}" for o, t in CASES])
def test_the_programs_history_stays_whole(tmp_path, order, tool):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, str(script), ORDERS[order], tool], capture_output=True,
                       text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    steps = ORDERS[order].split(",")
    since = steps[steps.index("record"):]
    want = 50 * (1 + since.count("work"))
    assert f"allocations {want}\n" in p.stdout, p.stdout + p.stderr


def test_the_programs_oom_observers_are_still_called(tmp_path):
    import tensorgc

    seen = []
    torch._C._cuda_attach_out_of_memory_observer(lambda *a: seen.append(a[0]))
    off = tensorgc.on_oom(tmp_path / "autopsies")
    try:
        with pytest.raises(torch.cuda.OutOfMemoryError):
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        assert len(seen) == 1
    finally:
        off()
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    assert len(seen) == 2
    assert len(os.listdir(tmp_path / "autopsies")) == 1  # ours wrote one, then was off


def test_a_collection_inside_a_cuda_graph_capture_leaves_it_valid(tmp_path):
    p = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import gc, torch, tensorgc
        torch.cuda.memory._record_memory_history("state", stacks="python")
        pages = []
        h = tensorgc.observe_tensor_cycles(pages.append)
        w = tensorgc.warn_tensor_cycles()
        tensorgc.track_tensors()
        x = torch.ones(1024, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up, as torch's documentation has it
            y = x * 2
        torch.cuda.current_stream().wait_stream(s)
        class Node: pass
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            a = Node(); a.me = a; a.t = torch.zeros(256, device="cuda")
            del a
            gc.collect()  # the detector runs inside the capture
            y = x * 2
        x.fill_(3.0)
        g.replay()
        torch.cuda.synchronize()
        gc.collect()
        h.remove(); w.remove()
        print("replayed", float(y.sum()), "pages", len(pages))
    """)], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT), cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "replayed 6144.0 pages 1" in p.stdout, p.stdout + p.stderr
