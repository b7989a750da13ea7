"""A pytest plugin: fail a test that leaves tensors alive after it returns, and say what holds
them, the way pytest-memray fails a test over a memory limit.

    pytest --tensorgc                  # every test
    @pytest.mark.tensorgc              # one test (or a module: pytestmark = pytest.mark.tensorgc)
    @pytest.mark.tensorgc(min_bytes=1 << 20, device="cuda")

A storage born during the test's call (its fixtures are set up before, so theirs do not count)
and alive once the test has returned and its function-scoped fixtures are torn down fails the
test at its teardown (pytest reports an error there): held by an owner (a module global, a
cache, a class attribute, a module or session fixture's value, named as such: the chain is
printed), or kept only by a reference cycle that the collector has not freed yet (said so: the
tensor outlives the test until a collection). A test that fails on its own is not checked.

Installed with tensorgc through the pytest11 entry point (tensorgc._pytest_entry, which loads
this module by its name, so that ``-p tensorgc.pytest_plugin`` or a conftest's
``pytest_plugins`` naming it as well registers it once); it imports nothing heavy until a test
asks for it. Under pytest-xdist each worker loads it and checks its own tests.

The first test that asks turns on tensorgc's index of live tensors (one walk of the heap) and
the session keeps it on until it ends, so each test's checkpoint and growth read the live
tensors from it rather than walking the heap; the owners are searched only when some storage
is left.
"""
from __future__ import annotations

from typing import Any, Dict, Generator, Optional, Tuple

import pytest

_MARK = "tensorgc"
_HOLD = pytest.StashKey[bool]()  # the session holds the index of live tensors on
# a test that returned: its checkpoint and settings, until the check after its teardown
_PENDING = pytest.StashKey[Tuple[Any, Dict[str, Any]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tensorgc", "tensors left alive (tensorgc)")
    group.addoption("--tensorgc", action="store_true", default=False,
                    help="fail any test that leaves tensors alive after it returns, with the "
                         "chain of references that holds them")
    group.addoption("--tensorgc-min-bytes", type=int, default=0, metavar="N",
                    help="with --tensorgc: fail only when the tensors left alive hold more "
                         "than N bytes (default 0)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "tensorgc(min_bytes=0, device=None): fail the test if it leaves tensors "
        "alive after it returns (tensorgc's pytest plugin)")


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_HOLD, False):
        from .. import _tensorgc

        config.stash[_HOLD] = False
        _tensorgc._index_release()


@pytest.fixture(autouse=True)
def _tensorgc_observer_errors() -> Generator[None, None, None]:
    """An exception raised in a tensorgc observer fails the test that collected, as torch's
    observers' do (tensorgc.set_observer_errors("raise")), instead of being logged."""
    from .._tensorgc import set_observer_errors

    previous = set_observer_errors("raise")
    yield
    set_observer_errors(previous)


def _settings(item: pytest.Item) -> Optional[Dict[str, Any]]:
    mark = item.get_closest_marker(_MARK)
    if mark is None and not item.config.getoption("--tensorgc"):
        return None
    s: Dict[str, Any] = {"min_bytes": item.config.getoption("--tensorgc-min-bytes"),
                         "device": None}
    if mark is not None:
        if mark.args:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.tensorgc takes keyword "
                                    "arguments only (min_bytes=, device=)")
        unknown = set(mark.kwargs) - set(s)
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.tensorgc: unknown "
                                    f"argument(s) {', '.join(sorted(unknown))}")
        s.update(mark.kwargs)
    if not isinstance(s["min_bytes"], int) or s["min_bytes"] < 0:
        raise pytest.UsageError(f"{item.nodeid}: tensorgc min_bytes must be an int >= 0")
    return s


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    s = _settings(item)
    if s is None:
        return (yield)
    # only now: torch and the C module load when a test asks for them
    try:
        import torch  # noqa: F401
    except ImportError:  # no torch, no tensor a test could leave alive: nothing to check
        return (yield)
    from .. import _tensorgc
    from .growth import checkpoint

    if not item.config.stash.get(_HOLD, False):
        _tensorgc._index_hold()  # released in pytest_unconfigure
        item.config.stash[_HOLD] = True
    before = checkpoint(s["device"])
    try:
        res = yield  # a failing test raises here, and its own failure is the one reported
        item.stash[_PENDING] = (before, s)  # checked once its fixtures are torn down
    finally:
        del before  # now: a failure's traceback keeps this frame, and the checkpoint its keys
    return res


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]
                            ) -> Generator[None, Any, Any]:
    pending = item.stash.get(_PENDING, None)
    if pending is None:  # not asked for, or the test failed (or was skipped) on its own
        return (yield)
    del item.stash[_PENDING]
    before, s = pending
    del pending
    g = None
    try:
        # The test's own fixtures first, and the check before the broader ones go: the last
        # test of a module, of an xdist worker or of the run (nextitem None) tears down module
        # and session fixtures too, and what it left in them would be freed unseen.
        torn, own_error = _teardown_own_fixtures(item)
        if torn and own_error is None:
            _drop_torn_down(item)
            g = _growth(before, s["device"], item)
        res = yield  # the rest of the teardown: the broader fixtures nextitem does not need
        if own_error is not None:  # the fixtures' teardown: an error there is the one reported
            raise own_error
        if not torn:  # a pytest whose teardown could not be split: check after all of it
            _drop_torn_down(item)
            g = _growth(before, s["device"], item)
    finally:
        del before
    if g is not None and g.rows and g.nbytes > s["min_bytes"]:
        pytest.fail(_message(g), pytrace=False)
    return res


class _ParentChain:
    """Stands in for a next item that needs every node above ``item``: given to pytest's
    SetupState.teardown_exact, it tears down the item's own node (its function-scoped
    fixtures) and nothing else."""

    def __init__(self, item: pytest.Item) -> None:
        self._chain = item.listchain()[:-1]

    def listchain(self) -> list:  # type: ignore[type-arg]
        return self._chain


def _teardown_own_fixtures(item: pytest.Item) -> Tuple[bool, Optional[BaseException]]:
    """Tears down the test's function-scoped fixtures, as pytest's own teardown would first:
    (whether it could, the error a finalizer raised). Not done (False) where the session's
    SetupState is not the one known (pytest 7 to 9: a dict from node to finalizers, the item
    last)."""
    state = getattr(item.session, "_setupstate", None)
    stack = getattr(state, "stack", None)
    if (not isinstance(stack, dict) or not stack or next(reversed(stack)) is not item
            or not callable(getattr(state, "teardown_exact", None))):
        return False, None
    try:
        state.teardown_exact(_ParentChain(item))  # type: ignore[union-attr]
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001  Exception, or pytest's outcomes (fail, skip)
        return True, e
    return True, None


def _fixture_defs(item: pytest.Item) -> Dict[str, Any]:
    """{name: the FixtureDef the test used} for every fixture of its closure; {} for an item
    that has none (a doctest, another plugin's item)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", None)
    if not isinstance(defs, dict):
        return {}
    return {name: fds[-1] for name, fds in defs.items() if fds}


def _drop_torn_down(item: pytest.Item) -> None:
    """Forget the values of the test's fixtures that are torn down (its function-scoped ones):
    pytest drops its reference to every value (item.funcargs) only after the teardown hooks, so
    what only they hold would still be alive at the check."""
    funcargs = getattr(item, "funcargs", None)
    if not isinstance(funcargs, dict):
        return
    defs = _fixture_defs(item)
    for name in [n for n in funcargs if n in defs and defs[n].cached_result is None]:
        del funcargs[name]


def _fixture_roots(item: pytest.Item) -> Dict[str, Dict[str, Any]]:
    """The test's fixtures still set up (module, class, package or session scope) as named
    roots for the owner search: {"session-scoped fixture": {name: value}}, so that a chain through
    one reads "session-scoped fixture cache ['key']", not a path from pytest's own frames."""
    out: Dict[str, Dict[str, Any]] = {}
    for name, fd in _fixture_defs(item).items():
        cached = fd.cached_result  # (value, cache key, exception info), None once torn down
        if cached is not None and cached[2] is None:
            out.setdefault(f"{fd.scope}-scoped fixture", {})[name] = cached[0]
    return out


def _growth(before: Any, device: Any, item: pytest.Item) -> Any:
    """growth(before), the owners searched from the test's live fixtures first. Its own frame:
    the owner search does not enter what tensorgc's frames hold, and this one holds no value."""
    from .growth import growth

    return growth(before, device, roots=_fixture_roots(item))


def _message(g: Any) -> str:
    from ..reporter import readable_size

    lines = [f"tensorgc: the test left {len(g.rows)} storage{'s' if len(g.rows) != 1 else ''} "
             f"({readable_size(g.nbytes)}) alive after it returned:"]
    for holder, nbytes, n, chain in g.groups[:20]:
        lines.append(f"  {readable_size(nbytes):>10s} in {n:>4d}  {holder}")
        if chain and chain != holder:
            lines.append(f"      {chain}")
    if len(g.groups) > 20:
        lines.append(f"  … {len(g.groups) - 20} more owners")
    if any(r.owner and r.owner.startswith("unreachable") for r in g.rows):
        lines.append("  (unreachable: a reference cycle keeps them until the collector runs; "
                     "tensorgc.observe_tensor_cycles draws it)")
    return "\n".join(lines)
