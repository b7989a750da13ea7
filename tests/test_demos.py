"""The demos say when they could not show what they are for: a demo that cannot run here exits
non-zero with the reason on stderr; `make demo` (demos/run_all.py) skips what needs CUDA on a
machine without it, saying so, and still succeeds; demos/ranks.py --spawn calls its CPU
stand-ins what they are."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMOS = os.path.join(ROOT, "demos")


def demo(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=DEMOS)


def test_the_oom_demo_without_cuda_fails_and_says_why():
    pytest.importorskip("torch")
    r = demo("oom_autopsy.py", "--device", "cpu")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "needs CUDA" in r.stderr and "nothing to show" in r.stderr
    assert r.stdout == ""


def test_the_pytest_demo_fails_when_pytest_fails_for_another_reason():
    """A device that does not exist makes the demo's test fail on its own: no leak is shown."""
    pytest.importorskip("torch")
    r = demo("why_alive.py", "--device", "cuda:99", "--pytest")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "without the plugin's report of the leak" in r.stderr
    assert "tensorgc: the test left" not in r.stdout


def test_make_demo_skips_what_needs_cuda_and_succeeds():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("the machine has CUDA: nothing is skipped")
    r = demo("run_all.py", "--all", "--iterations", "20", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[oom_autopsy.py: skipped, it needs CUDA and device 'auto' has none]" in r.stdout
    for script in ("simple_leak.py", "awaitable_leak.py", "training_no_zero_grad.py"):
        assert f"[{script}: exit 0," in r.stdout


def test_the_spawned_ranks_demo_names_its_cpu_stand_ins_as_such(tmp_path):
    pytest.importorskip("torch.distributed")
    out = tmp_path / "ranks"
    r = demo("ranks.py", "--spawn", "--steps", "2", "--width", "256", "--batch", "64",
             "--out", str(out), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = r.stdout[r.stdout.index("rank    device       peak"):].splitlines()[1:3]
    assert [ln.split()[:3] for ln in table] == [["rank", "0", "cpu"], ["rank", "1", "cpu"]], table
    assert "cuda:" not in r.stdout
    names = sorted(os.listdir(out))
    assert not [n for n in names if n.startswith("oom-")], names
    assert [n for n in names if n.startswith("autopsy-") and n.endswith("-cpu0")], names
    assert "rank 1's autopsy (written by hand: a CPU run has no OOM)" in r.stdout
    page = out / "ranks.html"
    from _util import run_tensorgc_cli

    t = run_tensorgc_cli("timeline", str(out), "-o", str(page))
    assert t.returncode == 0, t.stderr
    html = page.read_text()
    assert ", cpu: peak " in html and "cuda:" not in html.split("<body", 1)[-1].split("<script")[0]
