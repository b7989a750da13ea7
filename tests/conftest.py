"""pytest configuration for the tensorgc tests.

The `gc_state` fixture (autouse) saves and restores the garbage collector's
state the way CPython's Lib/test/test_gc.py does, disables automatic
collection for the duration of each test (so only explicit gc.collect()
calls collect), and checks afterwards that tensorgc left the debug flags,
gc.callbacks and sys.getprofile() as they were. A test that unfreezes the
permanent generation has what is alive afterwards frozen again.
"""

import gc
import time
import os
import signal
import sys

import pytest

# torch's intra-op threads at one, here and in every process a test starts (they inherit the
# environment): the suite runs a worker per core and its tensors are small, so a second OpenMP
# thread per process gains nothing and spins waiting for a busy core (docs/guide.md's sample of
# 100 training steps on a busy 2-core machine: 23 s of CPU with two threads, 7 s with one).
_THREADS = os.environ.setdefault("OMP_NUM_THREADS", "1")

# hypothesis's pytest plugin, installed on some machines and used by no test here, takes 1.2 s to
# import in every pytest process: off in the suite's own (setup.cfg) and in those its tests start.
_NO_PLUGINS = "-p no:hypothesispytest"
if _NO_PLUGINS not in os.environ.get("PYTEST_ADDOPTS", ""):
    os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {_NO_PLUGINS}".strip()

try:
    import torch
except ImportError:  # the torch-free run: tests that need torch skip themselves
    torch = None
if torch is not None and _THREADS.isdigit() and int(_THREADS) > 0:
    torch.set_num_threads(int(_THREADS))  # where a plugin imported torch before this file

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_ROOT = os.path.dirname(_HERE)
try:  # plain `pytest` (not `python -m pytest`) from the repo root
    import tensorgc  # noqa: F401
except ImportError:
    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)

from _util import DEVICE, IS_CUDA  # noqa: E402


def _entry_point_names_the_module():
    """An installed tensorgc whose entry point registers tensorgc.pytest_plugin under its own
    name (releases before tensorgc._pytest_entry): naming the module again would fail."""
    try:
        from importlib.metadata import entry_points
        return any(ep.value == "tensorgc.pytest_plugin" for ep in entry_points(group="pytest11"))
    except Exception:  # noqa: BLE001
        return False


# The suite runs as a user's with tensorgc installed: its pytest plugin loaded (observers'
# exceptions fail the test that collected; tests of the logging say set_observer_errors("log")).
# Named here for a checkout that is not installed; where it is, the entry point loads the same
# module under this name, and whichever comes second finds it registered.
pytest_plugins = () if _entry_point_names_the_module() else ("tensorgc.pytest_plugin",)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: a test that starts another compiler run, process group, browser or "
                   "mypy over torch's annotations; CI runs these on its first leg only "
                   "(.ci/run: -m 'not slow' on the others)")
    if IS_CUDA and (torch is None or not torch.cuda.is_available()):
        raise pytest.UsageError(
            f"TENSORGC_TEST_DEVICE={DEVICE!r} but torch.cuda.is_available() is False"
        )


def pytest_report_header(config):
    return f"tensorgc test device: {DEVICE}" + ("" if torch else " (torch not installed)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In the torch-free run, a test that needs torch (imported inside it, or by a fixture) is
    reported as skipped, not failed; any other error stays an error."""
    outcome = yield
    report = outcome.get_result()
    e = call.excinfo.value if call.excinfo is not None else None
    if torch is None and isinstance(e, ModuleNotFoundError) and e.name == "torch":
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, "Skipped: needs torch")


# tests/data holds a project the plugin's tests run (tests/test_pytest_plugin.py): its tests fail
# on purpose, and are not the suite's.
collect_ignore = ["data"]
if torch is None:  # PyTorch's own tests, copied as they are: they import torch at the top
    collect_ignore.append("test_cuda.py")

# What makes a test slow: the fixtures that launch process groups or a browser, and these tests,
# each a compiler run (or a pip install, which is one) or mypy reading torch's annotations.
_SLOW_FIXTURES = {"two", "three", "world", "ddp", "browser"}
_SLOW_TESTS = {
    "test_typing.py": {"test_the_stub_agrees_with_the_c_module",
                       "test_a_users_script_type_checks_strictly",
                       "test_mistakes_are_caught_where_marked"},
    "test_bench_pages.py": {"test_quick_run_without_torch_writes_its_pages_table_and_json"},
    "test_phase_times.py": {"test_timed_build_counts_each_phase"},
    "test_portable.py": {"test_built_with_the_version_check_forced_to_unknown"},
    "test_pytest_plugin.py": {"test_installed_in_a_virtual_environment"},
    "test_integration_runs.py": {"test_two_cpu_processes_each_write_their_pages_and_rank_0_logs_the_table",
                                 "test_pytorch_lightning_package"},
}


# Under pytest-xdist (make test: two workers, --dist loadgroup) the tests of these files are handed
# out first, in this order: each of them runs a compiler, pip, mypy, a subprocess pytest, a
# training, process groups or a browser for seconds of CPU, and one started last would hold its
# worker alone at the end of the run. The other files follow in their own order.
_FIRST = ["test_pytest_plugin.py", "test_typing.py", "test_bench_pages.py",
          "test_integration_runs.py", "test_gather.py", "test_demos.py", "test_phase_times.py",
          "test_portable.py", "test_why_alive_demo.py", "test_notebooks.py", "test_docs.py",
          "test_guest.py", "test_layout.py", "test_snapshot_stream.py", "test_no_cuda.py",
          "test_wheel.py", "test_timeline_views.py", "test_timeline_browser.py",
          "test_growth_watch.py", "test_growth.py", "test_render_worker.py", "test_ranks.py"]


def _module_fixture(item):
    """Whether the test uses a fixture of its own module's that lives for the module (a build, a
    training, a browser, a mypy cache): its module's tests that do are one xdist_group, so that
    one worker sets the fixture up once."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(fds and fds[-1].scope in ("module", "class") and fds[-1].baseid
               and fds[-1].baseid.split("::")[0] == item.nodeid.split("::")[0]
               for fds in defs.values())


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Marks the slow tests (one list, here, rather than in each file); groups the tests that
    share a module fixture; under xdist, hands out the long files' tests first."""
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        if (_SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
                or name in _SLOW_TESTS.get(item.path.name, ())):
            item.add_marker(pytest.mark.slow)
        if _module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker sorts alike: the collections agree
        first = {name: i for i, name in enumerate(_FIRST)}
        items.sort(key=lambda item: first.get(item.path.name, len(first)))


@pytest.fixture
def device():
    """The device the suite's tensors live on and observers are registered for."""
    return DEVICE


@pytest.fixture(scope="session", autouse=True)
def _freeze_startup_objects():
    """Move everything alive at session start (torch, pytest, ...) to the
    permanent generation so that each of the many full collections below only
    walks the objects created by the tests (a full collection of the ~165k
    objects of an interpreter with torch imported costs ~0.1 s). torch's first optimizer imports
    some 800 modules more (its compiler): one is made first, so they are frozen too, whichever
    test makes the first one."""
    if torch is not None:
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    gc.collect()
    gc.freeze()
    _modules_frozen[0] = len(sys.modules)
    # gc.get_freeze_count() walks the whole permanent generation (~33 ms here): a test that
    # unfreezes is noticed by this flag instead
    real_unfreeze = gc.unfreeze

    def unfreeze():
        _unfrozen[0] = True
        real_unfreeze()

    gc.unfreeze = unfreeze
    yield
    gc.unfreeze = real_unfreeze
    gc.unfreeze()


_unfrozen = [False]
_last_collect = [0.0]  # seconds, gc_state's last full collection after a test
_modules_frozen = [0]  # len(sys.modules) when the heap was last frozen


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Where a test file's last test leaves (its module's fixtures just torn down): what the
    worker keeps from now on (modules a test imported, torch's compiled graphs, caches) is frozen
    as at session start, when there is enough of it to slow the next file's collections
    (every test runs at least two). A file's own objects are gone by then, so nothing a test
    looks at is frozen."""
    yield
    if nextitem is not None and nextitem.path == item.path:
        return
    if len(sys.modules) > _modules_frozen[0] or _last_collect[0] > 0.005:
        gc.collect()
        gc.freeze()
        _modules_frozen[0] = len(sys.modules)
        _last_collect[0] = 0.0


@pytest.fixture(autouse=True)
def gc_state(_freeze_startup_objects):
    saved_enabled = gc.isenabled()
    saved_debug = gc.get_debug()
    saved_callbacks = list(gc.callbacks)
    saved_garbage = list(gc.garbage)
    saved_threshold = gc.get_threshold()
    saved_profile = sys.getprofile()
    _unfrozen[0] = False

    gc.disable()
    gc.collect()  # flush garbage left by earlier tests / pytest itself
    yield

    problems = []
    debug_after = gc.get_debug()
    if debug_after != saved_debug:
        problems.append(f"gc.get_debug() changed: {saved_debug:#x} -> {debug_after:#x}")
    if len(gc.callbacks) != len(saved_callbacks) or any(
        a is not b for a, b in zip(gc.callbacks, saved_callbacks)
    ):
        problems.append(
            f"gc.callbacks not restored after all observers were removed: {gc.callbacks!r}"
        )
    profile_after = sys.getprofile()
    if profile_after is not saved_profile:
        problems.append(f"sys.getprofile() changed: {profile_after!r}")

    # Restore everything, whatever happened.
    history = sys.modules.get("tensorgc.allocator._history")
    if history is not None:
        history._program_set = False  # each test is a program of its own: it may start one
    gc.set_debug(saved_debug)
    gc.callbacks[:] = saved_callbacks
    gc.garbage[:] = saved_garbage
    gc.set_threshold(*saved_threshold)
    sys.setprofile(saved_profile)
    t0 = time.perf_counter()
    gc.collect()
    _last_collect[0] = time.perf_counter() - t0
    if _unfrozen[0]:
        # the test called gc.unfreeze(): what was alive is frozen again, else every collection of
        # the worker's later tests walks torch's objects once more (~0.2 s each)
        gc.freeze()
    if saved_enabled:
        gc.enable()
    else:
        gc.disable()

    assert not problems, "; ".join(problems)


@pytest.fixture
def observer_errors_logged():
    """For tests of the default, where what an observer raises is logged: the plugin (loaded
    above) has it raised in the program instead."""
    import tensorgc

    previous = tensorgc.set_observer_errors("log")
    yield
    tensorgc.set_observer_errors(previous)


@pytest.fixture
def prescan_path():
    """The detector as it runs where no sentinel can be planted: the pre-scan walks the young
    lists before each collection, proves islands, and arms the rest (DEBUG_SAVEALL). The tests of
    that path's own mechanics (its counters, which proof decides, the armed split) take it."""
    testing = tensorgc._tensorgc_testing
    was = testing._sentinel()["enabled"]
    testing._sentinel(False)
    yield
    testing._sentinel(was)


@pytest.fixture(params=["sentinel", "pre-scan"])
def detector_path(request):
    """Each of the detector's two ways of finding tensor garbage, where the pre-scan is available
    (the sentinel by default; the pre-scan, islands and the armed path where no sentinel can be
    planted): a test that must hold on both takes this fixture. Its value names the path."""
    testing = tensorgc._tensorgc_testing
    was = testing._sentinel()["enabled"]
    if request.param == "sentinel" and not was:
        pytest.skip("the sentinel needs the young-generation pre-scan, not available here")
    testing._sentinel(request.param == "sentinel")
    yield request.param
    testing._sentinel(was)


@pytest.fixture
def on_gc_callbacks():
    """The cycle detector's hook stays on gc.callbacks and plants its sentinel at every "start"
    (the resident sentinel off), as it does wherever the resident one does not fit: for the tests
    of that path. Set before the test's observers, restored after them."""
    from tensorgc import _tensorgc_testing as testing
    was = testing._resident()["enabled"]
    testing._resident(False)
    yield
    testing._resident(was)


@pytest.fixture
def track(gc_state):
    """track(handle) -> handle; every tracked handle is removed at teardown
    (before gc_state checks that the gc hook left gc.callbacks)."""
    handles = []

    def _track(handle):
        handles.append(handle)
        return handle

    yield _track
    for handle in handles:
        handle.remove()


@pytest.fixture
def ctrl_c():
    """Ctrl-C raises KeyboardInterrupt here, as in a program started from a terminal. A suite
    started in the background (nohup, `cmd &` in a script) inherits SIGINT ignored, and so does
    every process it starts; then neither a signal nor tensorgc's re-raise of an interrupt taken
    inside the collector (PyErr_SetInterrupt) reaches the program."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
