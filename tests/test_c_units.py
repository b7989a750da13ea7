"""Drives the plain-C unit tests (tests/c/test_units.c: graph engine, escapers, Graphviz render,
HTML page, the line profiler's engine; tests/c/test_pickstream.c: the streaming snapshot loader's
engine) from pytest: built by `make build/test_units` (and the others), run, and its exit status
checked."""
import os
import shutil
import subprocess

import pytest

from _util import needs_graphviz_dev

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make and a C compiler")
@needs_graphviz_dev
def test_c_units():
    build = subprocess.run(["make", "-s", "build/test_units"], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([os.path.join(ROOT, "build", "test_units")], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all passed" in run.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make and a C compiler")
def test_c_streaming_loader_engine():
    build = subprocess.run(["make", "-s", "build/test_pickstream"], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([os.path.join(ROOT, "build", "test_pickstream")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all passed" in run.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make and a C compiler")
def test_c_device_query_answers_with_or_without_a_driver():
    build = subprocess.run(["make", "-s", "build/test_device"], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([os.path.join(ROOT, "build", "test_device")], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    out = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
    assert out["ok"] in ("0", "1")
    if out["ok"] == "0":
        assert out["error"]  # says why: no driver, no device, no headers
    else:
        assert int(out["total"]) > 0
