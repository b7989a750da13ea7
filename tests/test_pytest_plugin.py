"""tensorgc's pytest plugin on a small project (tests/data/plugin_project: clean and leaky tests
with session, module and function fixtures), run as a user would: from a checkout with
``-p tensorgc.pytest_plugin``, through the installed entry point, both at once, and under
pytest-xdist. Each run's outcome for every test and the holder each leak is charged to are
compared with the expected ones; the installed runs use a throwaway virtual environment."""
import glob
import os
import shutil
import site
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from _util import _test_cache, cached_build, graphviz_dev

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.join(ROOT, "tests", "data", "plugin_project")

# test -> (outcome, a line the report must hold). A leak fails the test at its teardown, which
# pytest reports as an error; a test that fails on its own keeps its failure.
WITH_TENSORGC = {
    "test_clean::test_frees_its_tensor": ("passed", None),
    "test_clean::test_reads_the_weights": ("passed", None),
    "test_clean::test_fills_its_scratch_fixture": ("passed", None),
    "test_clean::test_reads_the_module_table": ("passed", None),
    "test_leaky::test_keeps_a_tensor_in_a_global": ("error", "64.00K in    1  test_leaky.KEEP"),
    "test_leaky::test_fills_the_cache": (
        "error", "11.72K in    1  session-scoped fixture cache\n"
                 "      session-scoped fixture cache ['features']"),
    "test_leaky::test_appends_to_the_module_table": (
        "error", "19.53K in    1  module-scoped fixture table\n"
                 "      module-scoped fixture table [1]"),
    "test_leaky::test_fails_on_its_own": ("failed", "AssertionError: its own failure"),
    "test_leaky::test_leaves_less_than_its_limit": ("passed", None),
    "test_leaky::test_reads_the_module_table_last": ("passed", None),
}
# without --tensorgc only the marked test is checked (and it stays under its limit)
WITHOUT = {name: ("passed", None) if outcome == "error" else (outcome, line)
           for name, (outcome, line) in WITH_TENSORGC.items()}


def _outcomes(xml_path):
    """{"module::test": (outcome, the failure's or error's text)} from a junit XML report."""
    out = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag: child.text or "" for child in case}
        outcome = ("error" if "error" in kinds else "failed" if "failure" in kinds
                   else "skipped" if "skipped" in kinds else "passed")
        assert name not in out, f"{name} reported twice"
        out[name] = (outcome, kinds.get("error", kinds.get("failure", "")))
    return out


def _check(outcomes, expected):
    assert sorted(outcomes) == sorted(expected)
    for name, (outcome, line) in expected.items():
        got, text = outcomes[name]
        assert got == outcome, f"{name}: {got}, not {outcome}:\n{text}"
        if line is not None:
            assert line in text, f"{name}:\n{text}"
    for name, (got, text) in outcomes.items():
        # one leak each: the report names nothing else
        assert got != "error" or text.count("tensorgc: the test left 1 storage (") == 1, text


def _run(python, project, args, env, junit):
    # hypothesis's plugin, where installed, is no part of these projects and takes 1.2 s a run
    cmd = [python, "-m", "pytest", "-q", "-p", "no:hypothesispytest", "--junitxml", str(junit),
           *args]
    r = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stdout[-4000:] + r.stderr[-4000:]
    return r, _outcomes(junit)


@pytest.fixture
def project(tmp_path):
    """A copy of the project, so that its runs write nothing into the checkout."""
    pytest.importorskip("torch")
    dst = tmp_path / "project"
    shutil.copytree(PROJECT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _checkout_env(*front):
    path = os.pathsep.join([*front, ROOT] + ([os.environ["PYTHONPATH"]]
                                            if os.environ.get("PYTHONPATH") else []))
    env = dict(os.environ, PYTHONPATH=path)
    env.pop("PYTEST_ADDOPTS", None)
    return env


def test_from_a_checkout(project, tmp_path):
    env = _checkout_env()
    r, got = _run(sys.executable, project, ["-p", "tensorgc.pytest_plugin", "--tensorgc"], env,
                  tmp_path / "on.xml")
    _check(got, WITH_TENSORGC)
    assert "1 failed, 9 passed, 3 errors" in r.stdout
    assert "pytest_runtestloop" not in r.stdout  # a fixture's leak starts at the fixture
    _, got = _run(sys.executable, project, ["-p", "tensorgc.pytest_plugin"], env,
                  tmp_path / "off.xml")
    _check(got, WITHOUT)


def test_from_a_checkout_under_xdist(project, tmp_path):
    pytest.importorskip("xdist")
    # loadfile: a module's tests on one worker, so the module fixture lives on to its last test
    r, got = _run(sys.executable, project,
                  ["-p", "tensorgc.pytest_plugin", "--tensorgc", "-n", "2", "--dist", "loadfile"],
                  _checkout_env(), tmp_path / "xdist.xml")
    _check(got, WITH_TENSORGC)
    assert "[gw" in r.stdout  # the reports came from the workers


# a leak into a broader fixture by the test that is the last one to use it: the check runs before
# pytest tears the module and session fixtures down
LAST_LEAKS = {
    "test_leaky::test_fills_the_cache": WITH_TENSORGC["test_leaky::test_fills_the_cache"],
    "test_leaky::test_appends_to_the_module_table":
        WITH_TENSORGC["test_leaky::test_appends_to_the_module_table"],
}


@pytest.mark.parametrize("name", sorted(LAST_LEAKS))
def test_a_leak_into_a_broader_fixture_by_a_test_run_alone(project, tmp_path, name):
    node = name.replace("::", ".py::")
    r, got = _run(sys.executable, project, ["-p", "tensorgc.pytest_plugin", "--tensorgc", node],
                  _checkout_env(), tmp_path / "alone.xml")
    _check(got, {name: LAST_LEAKS[name]})
    assert "1 passed, 1 error" in r.stdout


def test_a_leak_into_a_session_fixture_by_the_last_test_of_an_xdist_worker(project, tmp_path):
    pytest.importorskip("xdist")
    names = ["test_leaky::test_keeps_a_tensor_in_a_global", "test_leaky::test_fills_the_cache"]
    r, got = _run(sys.executable, project,
                  ["-p", "tensorgc.pytest_plugin", "--tensorgc", "-n", "2", "--dist", "loadfile"]
                  + [n.replace("::", ".py::") for n in names],
                  _checkout_env(), tmp_path / "xdist-last.xml")
    _check(got, {n: WITH_TENSORGC[n] for n in names})
    assert "[gw" in r.stdout


def test_the_last_tests_fixtures_teardown_error_is_reported_and_the_rest_torn_down(tmp_path):
    """A function fixture whose teardown fails, in the run's last test: that error is the one
    reported (not the leak), and the session fixture is still torn down after it."""
    pytest.importorskip("torch")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (proj / "conftest.py").write_text(
        "import pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def cache():\n"
        "    d = {}\n"
        "    yield d\n"
        "    open('session-torn-down', 'w').write(str(len(d)))\n"
        "@pytest.fixture\n"
        "def broken():\n"
        "    yield\n"
        "    raise RuntimeError('the fixture broke on teardown')\n")
    (proj / "test_it.py").write_text(
        "import torch\n"
        "def test_leaks_and_breaks(cache, broken):\n"
        "    cache['k'] = torch.empty(1000)\n")
    r, got = _run(sys.executable, proj, ["-p", "tensorgc.pytest_plugin", "--tensorgc"],
                  _checkout_env(), tmp_path / "broken.xml")
    outcome, text = got["test_it::test_leaks_and_breaks"]
    assert outcome == "error" and "the fixture broke on teardown" in text, text
    assert "tensorgc: the test left" not in text
    assert (proj / "session-torn-down").read_text() == "1"


def _entry_point_site(tmp_path):
    """A directory that, on sys.path, makes the checkout look installed to pytest: a distribution
    whose only content is tensorgc's pytest11 entry point, as setup.cfg declares it."""
    site = tmp_path / "site"
    info = site / "tensorgc-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorgc\nVersion: 0.0\n")
    with open(os.path.join(ROOT, "setup.cfg"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = lines.index("pytest11 =")
    entry = lines[start + 1].strip()
    assert entry.startswith("tensorgc = "), entry
    (info / "entry_points.txt").write_text(f"[pytest11]\n{entry}\n")
    return site


def test_the_entry_point_and_the_module_named_too(project, tmp_path):
    """The entry point with -p tensorgc.pytest_plugin: the plugin registered once, checks once."""
    env = _checkout_env(str(_entry_point_site(tmp_path)))
    for i, args in enumerate((["--tensorgc"], ["-p", "tensorgc.pytest_plugin", "--tensorgc"])):
        r, got = _run(sys.executable, project, args, env, tmp_path / f"ep{i}.xml")
        _check(got, WITH_TENSORGC)
    # -p no:tensorgc turns it off: --tensorgc is then an unknown option
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:tensorgc", "--tensorgc"],
                       cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 4 and "unrecognized arguments: --tensorgc" in r.stderr


def test_a_project_without_torch(tmp_path):
    """Where torch cannot be imported no test can leave a tensor alive: --tensorgc checks nothing
    and fails nothing (it ran as the installed wheel's smoke test does, without torch)."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "torch.py").write_text("raise ImportError('torch is hidden from this run')\n")
    proj = tmp_path / "plain"
    proj.mkdir()
    (proj / "test_plain.py").write_text("KEEP = []\n\n\ndef test_keeps_a_list():\n"
                                        "    KEEP.append([0] * 1000)\n")
    r, got = _run(sys.executable, proj, ["-p", "tensorgc.pytest_plugin", "--tensorgc",
                                         "-p", "no:cacheprovider"],
                  _checkout_env(str(hide)), tmp_path / "plain.xml")
    _check(got, {"test_plain::test_keeps_a_list": ("passed", None)})


def test_the_plugin_module_imports_nothing_heavy():
    code = ("import sys, tensorgc.pytest_plugin, tensorgc._pytest_entry; "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=_checkout_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _copy_for_install(dst):
    """The checkout's sources without its build outputs, tests or documents."""
    top = {"tests", "docs", "bench", "demos", "build", ".git", ".ci", ".gpu", "dist", ".benchmarks",
           ".mypy_cache"}

    def ignore(d, names):
        skip = set(shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "_tgc_render",
                                          ".pytest_cache")(d, names))
        if os.path.abspath(d) == ROOT:
            skip |= top & set(names)
        return skip

    shutil.copytree(ROOT, dst, ignore=ignore)


def _built_wheel():
    """The wheel `make wheel` built from this tree for this interpreter, where the run names
    the folder (TENSORGC_TEST_WHEEL_DIR: CI builds the wheels before the tests): what users
    install, without compiling the extension again."""
    folder = os.environ.get("TENSORGC_TEST_WHEEL_DIR")
    if not folder:
        return None
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    found = sorted(glob.glob(os.path.join(folder, f"tensorgc-*-{tag}-{tag}-manylinux*.whl")))
    return found[-1] if found else None


def _wheel_of_the_checkout(tmp_path):
    """Without a wheel from `make wheel`: the one pip builds from a copy of the checkout, kept
    as variant_build keeps its copies (keyed by every file of the copy, this interpreter and the
    flags; the four newest per interpreter), so that a later run installs it without compiling
    again."""
    import hashlib
    import sysconfig

    src = tmp_path / "src"
    _copy_for_install(src)
    # `make build`'s extension (this interpreter's, up to date: `make test` builds it first) goes
    # where setuptools puts its own, with its time kept: setuptools finds it newer than every
    # source and links it into the wheel without compiling again, as on a second `pip wheel .`
    # of a checkout. Only the render worker is compiled.
    lib = src / "build" / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}" / "tensorgc"
    built = os.path.join(ROOT, "tensorgc", "_tensorgc" + sysconfig.get_config_var("EXT_SUFFIX"))
    if os.path.exists(built):
        lib.mkdir(parents=True)
        shutil.copy2(built, lib)
    h = hashlib.sha256(repr((sys.executable, sys.version, sysconfig.get_config_var("EXT_SUFFIX"),
                             os.environ.get("CC"), os.environ.get("CFLAGS"))).encode())
    for d, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                h.update(os.path.relpath(path, src).encode() + b"\0" + f.read())
    def make(tmp):
        # -O1: what is installed, not the optimizer, is under test here, and the extension
        # compiles in two thirds of the time (as _util.variant_build's)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                               "--no-build-isolation", "-w", tmp, str(src)],
                              capture_output=True, text=True, timeout=1200,
                              env=dict(os.environ, TENSORGC_CFLAGS="-O1"))
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    out = cached_build(_test_cache("wheels") or str(tmp_path),
                       f"cp{sys.version_info[0]}{sys.version_info[1]}", h.hexdigest()[:16], make)
    (wheel,) = glob.glob(os.path.join(out, "tensorgc-*.whl"))
    return wheel


def test_installed_in_a_virtual_environment(project, tmp_path):
    """pip installs the wheel built from this tree (`make wheel`'s, else the one pip builds from
    a copy of the checkout) into a throwaway venv (this environment's packages visible: torch, pytest, pytest-xdist); the project
    then runs with the entry point alone, and with -p tensorgc.pytest_plugin too under xdist."""
    pytest.importorskip("xdist")
    src = _built_wheel()
    if src is None:
        if not graphviz_dev():
            pytest.skip("needs Graphviz's development files to build from the checkout")
        src = _wheel_of_the_checkout(tmp_path)
    venv = tmp_path / "venv"
    # No pip or setuptools of its own, and not the base interpreter's site-packages: 3.10's venv
    # and base interpreter carry setuptools 65, which builds no wheel without the `wheel`
    # package, and either would be found before this environment's
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=300)
    python = str(venv / "bin" / "python")
    # the new venv sees the packages of the environment this suite runs in (the base
    # interpreter's, or a venv's), pip and setuptools included, through a .pth file
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    with open(os.path.join(purelib, "_tensorgc_test_parent.pth"), "w") as f:
        f.write("\n".join(p for p in site.getsitepackages() if os.path.isdir(p)) + "\n")
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", str(src)],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    where = subprocess.run([python, "-c", "import tensorgc; print(tensorgc.__file__)"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    # the entry point alone; then named again with -p, under xdist: its workers load both
    # (test_the_entry_point_and_the_module_named_too runs -p without xdist)
    for i, args in enumerate((["--tensorgc"],
                              ["-p", "tensorgc.pytest_plugin", "--tensorgc", "-n", "2",
                               "--dist", "loadfile"])):
        r, got = _run(python, project, args, env, tmp_path / f"installed{i}.xml")
        _check(got, WITH_TENSORGC)
