"""The portable path: tensorgc on an interpreter whose collector it does not know (CPython 3.14 and
later, whose collector is incremental) runs on the public gc API only, says so once at import
(PortableModeWarning, attributed to module "tensorgc"), lists what is off in features(), and
still finds tensor cycles: every collection is armed (DEBUG_SAVEALL), as before the pre-scan.

Two ways in, each in a fresh interpreter: the run-time check told to refuse (TENSORGC_PORTABLE=1,
on this very build), and a build whose version check is forced to "unknown"
(-DTGC_ASSUME_UNKNOWN_INTERPRETER: compiled as for 3.14, no internal header included, which the
preprocessor's own list of the headers it read confirms)."""
import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import tensorgc
from tensorgc import _tensorgc_testing as _C
from _util import graphviz_dev, variant_build

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["young_prescan", "finalizer_cycles", "tensor_index", "owner_marks"]
HAVE_TORCH = __import__("importlib").util.find_spec("torch") is not None

# What the fresh interpreter does on the portable path; prints one JSON line.
SCENARIO = textwrap.dedent('''
    import gc, json, sys, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import tensorgc
    from tensorgc import _tensorgc_testing as C
    out = {"warnings": [(w.category.__name__, str(w.message), w.filename) for w in caught],
           "features": {k: list(v) for k, v in tensorgc.features().items()},
           "scan": C._young_scan(), "island": C._young_island(),
           "file": tensorgc._tensorgc.__file__}
    for switch in (C._young_scan, C._young_island):
        try:
            switch(True)
            out.setdefault("switched", []).append(True)
        except RuntimeError as exc:
            out.setdefault("refused", []).append(str(exc))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        reports = []
        h = tensorgc.observe_cycles(reports.append, device="cpu")

        class Node:
            pass

        class GenHolder:
            def __init__(self, t):
                self.t, self.gen = t, self.run()
                next(self.gen)

            def run(self):
                while True:
                    yield self

        gc.collect()
        for generation in (0, 2):
            n = Node(); n.me = n; n.t = torch.ones(16)   # 64 bytes
            del n
            gc.collect(generation)
        GenHolder(torch.ones(4))   # a cycle its finalizer breaks: freed unseen on this path
        gc.collect(0)
        out["reports"] = [(r.generation, r.nbytes, sorted(set(e[0] for e in r.edges)))
                          for r in reports]
        out["tracked"] = tensorgc.track_tensors(True)
        out["owner"] = str(tensorgc.owner(Node))
        h()
    print(json.dumps(out))
''')


def _run(env_extra, cwd, pythonpath):
    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = pythonpath
    done = subprocess.run([sys.executable, "-c", SCENARIO], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_portable(out, why):
    # one warning, of its own category, attributed to tensorgc's own module
    ours = [w for w in out["warnings"] if w[0] == "PortableModeWarning"]
    assert len(ours) == 1, out["warnings"]
    assert ours[0][1].startswith("tensorgc: running on the public gc API only (")
    assert why in ours[0][1]
    assert ours[0][2].endswith(os.path.join("tensorgc", "__init__.py"))
    assert sorted(out["features"]) == sorted(NAMES)
    for name, (title, enabled, reason, effect) in out["features"].items():
        assert enabled is False and why in reason and effect, name
    assert out["scan"]["available"] is False and out["scan"]["enabled"] is False
    assert why in out["scan"]["why"]
    assert out["island"]["enabled"] is False
    assert "switched" not in out and len(out["refused"]) == 2
    if HAVE_TORCH:
        # a young and a full collection, both armed, both reported; the cycle a finalizer breaks
        # gets no report of its own: where the collector still finds what is left of it in its
        # garbage (3.12: the holder and its closed generator), that is an ordinary report
        assert out["reports"][:2] == [[0, 64, ["Node"]], [2, 64, ["Node"]]]
        assert out["reports"][2:] in ([], [[0, 16, ["GenHolder", "generator"]]])
        assert out["tracked"] is False
        assert out["owner"].startswith("module ")


def test_every_feature_is_on_where_the_collector_is_known():
    if os.environ.get("TENSORGC_PORTABLE", "") not in ("", "0"):
        pytest.skip("TENSORGC_PORTABLE is set for this run")
    f = tensorgc.features()
    assert list(f) == NAMES
    known = (3, 10) <= sys.version_info < (3, 14)
    for name, feat in f.items():
        assert feat.enabled is known, name
        assert (feat.why == "" and feat.effect == "") is known
    assert (tensorgc._common.features.portable_message() is None) is known


def test_asked_for_at_run_time_with_tensorgc_portable(tmp_path):
    out = _run({"TENSORGC_PORTABLE": "1"}, str(tmp_path), ROOT)
    assert os.path.dirname(out["file"]) == os.path.join(ROOT, "tensorgc")
    _check_portable(out, "TENSORGC_PORTABLE is set")


def test_the_warning_can_be_silenced_before_the_import(tmp_path):
    env = dict(os.environ, TENSORGC_PORTABLE="1", PYTHONPATH=ROOT)
    for how in (["-W", "ignore:::tensorgc"], ["-c", "import warnings; warnings.filterwarnings("
                                                     "'ignore', module='tensorgc'); "
                                                     "import tensorgc"]):
        argv = [sys.executable, *how] + (["-c", "import tensorgc"] if how[0] == "-W" else [])
        done = subprocess.run(argv, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and "PortableModeWarning" not in done.stderr, done.stderr


@pytest.fixture(scope="module")
def unknown_build(tmp_path_factory):
    """The extensions built with the version check forced to "unknown", as a package of their own
    (the Python files copied beside them). The suite runs where the extension was just built from
    source, so the compiler is there. -O1: the path taken does not depend on the optimizer; the
    build is kept under build/ for the next run (_util.variant_build)."""
    if not graphviz_dev():
        pytest.skip("builds from source: needs Graphviz's development files")
    lib = variant_build("unknown-interpreter", "-DTGC_ASSUME_UNKNOWN_INTERPRETER -O1")
    out = tmp_path_factory.mktemp("unknown")
    pkg = out / "pkg" / "tensorgc"
    shutil.copytree(os.path.join(ROOT, "tensorgc"), pkg,
                    ignore=shutil.ignore_patterns("*.so", "_tgc_render", "__pycache__"))
    for built in glob.glob(os.path.join(lib, "tensorgc", "*")):
        shutil.copy(built, pkg / os.path.basename(built))
    return out


def test_built_with_the_version_check_forced_to_unknown(unknown_build, tmp_path):
    out = _run({"TENSORGC_PORTABLE": ""}, str(tmp_path), str(unknown_build / "pkg"))
    assert out["file"].startswith(str(unknown_build / "pkg"))
    _check_portable(out, "built with TGC_ASSUME_UNKNOWN_INTERPRETER")


def test_unknown_build_reads_no_internal_header(tmp_path):
    """The sources that read internals, preprocessed as for an unknown interpreter: the
    preprocessor lists every header it opened (-H), and none is the interpreter's internal one."""
    inc = sysconfig.get_paths()["include"]
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    headers = []
    for src in ("cycles/young.c", "graph/frames.c", "common/internals.c", "reporter/index.c",
                "graph/owners.c", "cycles/hook.c"):
        done = subprocess.run(cc + ["-std=c11", "-D_GNU_SOURCE", "-DTGC_ASSUME_UNKNOWN_INTERPRETER",
                                    "-fsyntax-only", "-H", "-Iinclude", "-I.", "-I" + inc, src],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        headers += [line.lstrip(". ") for line in done.stderr.splitlines() if line.startswith(".")]
        # the same source as for this interpreter: where the build knows it, the internals show
        known = subprocess.run(cc + ["-std=c11", "-D_GNU_SOURCE", "-fsyntax-only", "-H",
                                     "-Iinclude", "-I.", "-I" + inc, src],
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
        if src == "cycles/young.c" and (3, 10) <= sys.version_info < (3, 14):
            assert "internal/pycore_gc.h" in known.stderr
    assert headers and not [h for h in headers if "/internal/" in h]
