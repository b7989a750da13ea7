"""The typed API: `mypy --strict` passes on a user's script that uses every public entry point
(tests/typing/sample_user.py, which is also run) and on the package itself; it catches the
mistakes in tests/typing/misuse.py (so the annotations are not Any); the C module's stub agrees
with the module (mypy.stubtest); and a build ships py.typed and the stub (PEP 561). The checks
run in one process (tests/typing/check.py), which reads torch's annotations once, through mypy's
incremental cache kept outside the checkout.

mypy is pinned by `make deps` (MYPY_VERSION); the tests skip only where mypy is not installed.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("mypy")

# The annotations name torch's types, so a check without torch reads them as missing.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the typed API names torch's types: mypy needs torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TYPING = os.path.join(ROOT, "tests", "typing")
MYPY_PIN = "2.4.1"  # what `make deps` installs; another version may judge differently


def env():
    return dict(os.environ, MYPYPATH=ROOT + os.pathsep + TYPING,
                PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def version_note():
    import mypy.version

    v = mypy.version.__version__
    return "" if v == MYPY_PIN else f" (mypy {v} here; the suite pins {MYPY_PIN})"


@pytest.fixture(scope="module")
def checked():
    """`mypy --strict -p tensorgc -m sample_user -m misuse` and mypy.stubtest of the C module's
    stub, in one process (tests/typing/check.py): torch's annotations are read once (~25 s of CPU
    cold; from mypy's cache once a run made it).
    The messages of the strict check by file, and stubtest's exit status and output."""
    r = subprocess.run([sys.executable, os.path.join(TYPING, "check.py")],
                       capture_output=True, text=True, timeout=900, cwd=ROOT, env=env())
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:] + version_note()
    out = json.loads(r.stdout)
    by_file = {}
    for message in out["mypy"]:
        m = re.match(r"(.+?):\d+: (?:error|note): ", message)
        assert m, message  # every message names its file
        where = os.path.relpath(os.path.join(ROOT, m.group(1)), ROOT)
        by_file.setdefault(where, []).append(message)
    assert out["sources"] > 10, out["sources"]  # the package's modules and the two scripts
    return by_file, out


@needs_torch
def test_a_users_script_type_checks_strictly(checked):
    by_file, _ = checked
    script = os.path.join("tests", "typing", "sample_user.py")
    assert script not in by_file, "\n".join(by_file[script]) + version_note()


@needs_torch
def test_the_package_type_checks_strictly(checked):
    by_file, _ = checked
    package = {f: ms for f, ms in by_file.items() if f.split(os.sep)[0] == "tensorgc"}
    assert not package, "\n".join(m for ms in package.values() for m in ms) + version_note()
    # nothing but the mistakes file has a message at all (a message in the package's imports
    # would be one: mypy --strict reports them where they are read)
    assert set(by_file) <= {os.path.join("tests", "typing", "misuse.py")}, sorted(by_file)


@needs_torch
def test_mistakes_are_caught_where_marked(checked):
    by_file, _ = checked
    path = os.path.join(TYPING, "misuse.py")
    with open(path, encoding="utf-8") as f:
        expected = {i: m.group(1) for i, line in enumerate(f, 1)
                    if (m := re.search(r"# E: ([a-z-]+)$", line))}
    assert len(expected) >= 10
    messages = by_file.get(os.path.relpath(path, ROOT), [])
    found = {}
    for line in messages:
        m = re.match(r".*misuse\.py:(\d+): error: .*\[([a-z-]+)\]$", line)
        if m:
            found[int(m.group(1))] = m.group(2)
    assert found == expected, "\n".join(messages) + version_note()


@needs_torch
def test_the_stub_agrees_with_the_c_module(checked):
    _, out = checked
    assert out["stubtest"] == 0, out["stubtest_output"] + version_note()
    assert "Success: no issues found in 1 module" in out["stubtest_output"], out["stubtest_output"]


@needs_torch
def test_the_sample_runs(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(TYPING, "sample_user.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=env())
    assert r.returncode == 0, r.stderr
    (summary,) = [ln for ln in r.stdout.splitlines() if ln.startswith("sample: ")]
    assert summary.startswith("sample: 1 cycle report(s); ") and "snapshot " in summary
    assert "## train_step" in r.stdout and "trace cuda:0: " in r.stdout  # the stats command
    files = os.listdir(tmp_path)
    assert "run.pickle" in files and "timeline.html" in files
    assert any(f.startswith("tensorgc-cycle-") for f in files)  # warn_tensor_cycles' page
    assert any(f.startswith("oom-") for f in files)  # the autopsy by hand


def test_a_build_ships_py_typed_and_the_stub(tmp_path):
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib",
                        str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    shipped = set(os.listdir(tmp_path / "tensorgc"))
    assert {"py.typed", "_tensorgc.pyi", "__init__.py"} <= shipped
    # the timeline page's script, read at run time, and every subpackage
    page = set(os.listdir(tmp_path / "tensorgc" / "allocator" / "page"))
    assert {"timeline_ui.js", "timeline_views.js"} <= page
    subpackages = {d for d in os.listdir(os.path.join(ROOT, "tensorgc"))
                   if os.path.isfile(os.path.join(ROOT, "tensorgc", d, "__init__.py"))}
    assert {"cycles", "reporter", "allocator", "lineprof", "distributed", "cli"} <= subpackages
    assert all(os.path.isfile(tmp_path / "tensorgc" / d / "__init__.py") for d in subpackages)
    assert open(tmp_path / "tensorgc" / "py.typed").read() == ""  # a marker: the whole package
