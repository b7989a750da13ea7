"""The packaging's promises that need no wheel built: a build without Graphviz's development files
stops at once with one line that says what to install, and the sdist's file list holds what the
build reads. The wheels themselves are built and installed by `make wheel` and
tools/wheel_smoke.sh (CI runs both)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_build_without_graphviz_says_what_to_install(tmp_path):
    empty = tmp_path / "no-pkgconfig"
    empty.mkdir()
    env = dict(os.environ, PKG_CONFIG_PATH="", PKG_CONFIG_LIBDIR=str(empty))
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-temp",
                           str(tmp_path / "temp"), "--build-lib", str(tmp_path / "lib")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needed in ("libgraphviz-dev pkg-config", "graphviz-devel", "conda-forge graphviz"):
        assert needed in lines[0]
    assert not (tmp_path / "temp").exists()  # stopped before compiling anything


def test_the_sdist_holds_every_source_the_build_reads():
    with open(os.path.join(ROOT, "MANIFEST.in"), encoding="utf-8") as f:
        grafted = {line.split()[1] for line in f if line.startswith("graft ")}
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        setup = f.read()
    for d in ("common", "tensor", "graph", "cycles", "reporter", "allocator", "module", "include"):
        assert f'"{d}' in setup or d == "include"
        assert d in grafted, d
