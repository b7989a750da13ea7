"""The young-generation pre-scan (cycles/young.c): in "start", a young collection whose generations
hold no tensor and reference none runs without DEBUG_SAVEALL. Whatever the detector reports with
the pre-scan, it must report without it; these tests hold the tensor in every shape the walk reads
differently (slots read directly, everything else through tp_traverse)."""
import gc
import os
import subprocess
import sys
import sysconfig
import weakref

import pytest

import tensorgc
from tensorgc import _tensorgc_testing
from _util import DEVICE, T, instances, new_class

_C = _tensorgc_testing  # the detector's switches and counters
AVAILABLE = _C._young_scan()["available"]  # CPython 3.10-3.13 with the GIL (compat.h)
# the pre-scan's own path (where the sentinel runs, it decides instead: tests/test_cycles_sentinel.py)
pytestmark = pytest.mark.usefixtures("prescan_path")


def counts():
    """(collections run without the detector, collections it looked at): looked at means armed,
    or handled as an island (a young collection whose tensor-holding garbage "start" proved)."""
    s = _C._young_scan()
    return s["skipped"], s["armed"] + _C._young_island()["used"]


@pytest.fixture(params=["islands", "armed"])
def scan(request):
    if not AVAILABLE:
        pytest.skip("no young-generation pre-scan on this interpreter: " + _C._young_scan()["why"])
    """The pre-scan switched on for the test, with islands on (the default) or off (every young
    collection that could hold a tensor is armed); the former settings are restored after."""
    before, island = _C._young_scan()["enabled"], _C._young_island()["enabled"]
    _C._young_scan(True)
    _C._young_island(request.param == "islands")
    yield request.param
    _C._young_island(island)
    _C._young_scan(before)


def test_available_where_the_collector_has_generation_lists():
    s = _C._young_scan()
    layout_known = ((3, 10) <= sys.version_info < (3, 14)
                    and not sysconfig.get_config_var("Py_GIL_DISABLED")
                    and os.environ.get("TENSORGC_PORTABLE", "") in ("", "0"))
    assert s["available"] is layout_known
    assert s["enabled"] is layout_known  # on by default wherever it can be
    assert (s["why"] == "") is layout_known
    if not layout_known:
        with pytest.raises(RuntimeError, match="the young-generation pre-scan is not available "
                           "on this interpreter: "):
            _C._young_scan(True)
        with pytest.raises(RuntimeError, match="islands need the young-generation pre-scan"):
            _C._young_island(True)


def test_tensor_free_young_collection_runs_without_the_detector(track, scan):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Slotted = new_class("Slotted", __slots__=("other", "__weakref__"))
    Plain = new_class("Plain")
    gc.collect()
    garbage_before = list(gc.garbage)
    refs = []
    for cls in (Slotted, Plain):
        for _ in range(50):
            a, b = cls(), cls()
            a.other, b.other = b, a
            refs.append(weakref.ref(a))
        del a, b
    skipped, armed = counts()
    assert gc.collect(0) >= 200
    assert counts() == (skipped + 1, armed)
    assert reports == [] and gc.garbage == garbage_before
    assert all(r() is None for r in refs) and instances(Slotted) == [] and instances(Plain) == []


def test_young_tensor_arms_the_collection_and_is_reported(track, scan):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Slotted = new_class("Slotted", __slots__=("t", "me"))
    gc.collect()

    def make():
        s = Slotted()
        s.me = s
        s.t = T(100)
    make()
    skipped, armed = counts()
    gc.collect(0)
    assert counts() == (skipped, armed + 1)
    assert len(reports) == 1 and reports[0].tensors[0]["nbytes"] == 400
    assert ("Slotted", ".t", "Tensor") in reports[0].edges
    assert instances(Slotted) == []


def _holders():
    """(name, make(tensor) -> None): each makes young cyclic garbage whose only reference to the
    tensor is one edge of a different shape, and returns nothing."""
    Base = new_class("SlotBase", __slots__=("t",))
    Sub = new_class("SlotSub", (Base,), __slots__=("me",))
    Plain = new_class("Plain")
    Mixed = new_class("Mixed", __slots__=("me", "__dict__"))
    ListSub = new_class("ListSub", (list,), __slots__=("me",))
    Wide = new_class("Wide", __slots__=tuple(f"s{i}" for i in range(12)))  # more slots than read

    def self_cycle(cls):
        def make(t):
            o = cls()
            o.me = o
            o.t = t
        return make

    sub = self_cycle(Sub)  # the tensor in the base class's slot
    plain = self_cycle(Plain)
    mixed = self_cycle(Mixed)  # the tensor in the instance __dict__, not a slot

    def list_subclass(t):
        o = ListSub([t])  # the tensor in the list's own items
        o.me = o

    def wide(t):
        o = Wide()
        o.s0 = o
        o.s11 = t

    def closure(t):
        def f():
            return t, f
        f.self = f

    def tuple_cycle(t):
        lst = []
        lst.append((t, lst))

    def dict_cycle(t):
        d = {"t": t}
        d["d"] = d

    def unset(t):
        o = Sub()  # its `me` slot is never set
        o.t = t
        lst = [o, None]
        lst[1] = lst

    Link = new_class("Link", __slots__=("nxt", "t", "other"))

    def mid_run(t):
        # a run of one __slots__ class (the walk's inner loop), whose slots alternate between
        # its own type, None and another class, and only the 38th holds the tensor
        marker = Plain()
        links = [Link() for _ in range(60)]
        for i, o in enumerate(links):
            o.nxt, o.t, o.other = links[(i + 1) % 60], None, marker
        links[37].t = t

    return [("slots, base class", sub), ("slot never set", unset), ("instance dict", plain),
            ("slots and __dict__", mixed), ("list subclass", list_subclass),
            ("more slots than the fast path reads", wide), ("closure", closure),
            ("tuple", tuple_cycle), ("dict", dict_cycle), ("middle of a run of slots", mid_run)]


@pytest.mark.parametrize("name", [n for n, _ in _holders()])
def test_young_cycle_holding_the_last_reference_to_an_old_tensor(track, scan, name):
    make = dict(_holders())[name]
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    t = T(250)
    t_ref = weakref.ref(t)
    gc.collect()  # the tensor is old now; a young collection never examines it
    assert reports == []
    make(t)
    del t
    assert t_ref() is not None  # only the young garbage holds it
    skipped, armed = counts()
    gc.collect(0)
    assert counts() == (skipped, armed + 1), "the pre-scan must see the reference to the tensor"
    assert len(reports) == 1, name
    assert [x["nbytes"] for x in reports[0].tensors] == [1000]
    assert t_ref() is None


def test_garbage_observers_see_every_collection(track, scan):
    seen = []
    track(tensorgc.observe_garbage(lambda objs: seen.append(len(objs))))
    Node = new_class("Node", __slots__=("other",))  # no __dict__: 2 objects on every version
    gc.collect()
    seen.clear()
    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    gc.collect(0)
    assert seen == [2]


def test_full_collection_is_always_armed(track, scan):
    track(tensorgc.observe_cycles(lambda r: None, device=DEVICE))
    skipped, armed = counts()
    gc.collect()
    assert counts() == (skipped, armed + 1)


def test_switched_off_every_collection_is_armed_as_before(track, scan):
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    gc.collect()
    _C._young_scan(False)
    assert _C._young_scan()["enabled"] is False
    skipped, armed = counts()
    Node = new_class("Node")
    a = Node()
    a.me = a
    del a
    gc.collect(0)
    assert counts() == (skipped, armed)  # no decision taken: armed unconditionally
    t = T(8)
    gc.collect()

    def make():
        n = Node()
        n.me, n.t = n, t
    make()
    del t
    gc.collect(0)
    assert len(reports) == 1


def test_switch_rejects_bad_arguments():
    class Bad:
        def __bool__(self):
            raise ValueError("no truth")

    with pytest.raises(TypeError):
        _C._young_scan(True, False)
    with pytest.raises(ValueError, match="no truth"):
        _C._young_scan(Bad())
    assert _C._young_scan(None)["enabled"] in (True, False)


def test_without_torch_every_young_collection_is_skipped():
    code = (
        "import gc, sys, tensorgc, tensorgc._tensorgc_testing\n"
        "h = tensorgc.observe_cycles(lambda r: None, device='any')\n"
        "class N: pass\n"
        "for _ in range(5):\n"
        "    a = N(); a.me = a; del a\n"
        "    gc.collect(0)\n"
        "s = tensorgc._tensorgc_testing._young_scan()\n"
        "assert 'torch' not in sys.modules, 'tensorgc imported torch'\n"
        "print(s['skipped'] if s['available'] else 'unavailable')\n"
        "h()\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    last = out.stdout.split()[-1]
    if last != "unavailable":
        assert int(last) >= 5


@pytest.mark.parametrize("enabled", [False, True], ids=["scan off", "scan on"])
def test_callback_after_ours_making_tensor_garbage_in_start(track, scan, enabled):
    """A gc callback that runs after ours in "start" runs Python code between the pre-scan and the
    collection: what it leaves as garbage must be reported as with the pre-scan off."""
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    Holder = new_class("Holder")
    armed = []

    def later(phase, info):
        if phase == "start" and armed:
            armed.clear()
            o = Holder()
            o.me, o.t = o, T(10)

    gc.callbacks.append(later)
    try:
        _C._young_scan(enabled)
        gc.collect()
        reports.clear()
        armed.append(1)
        gc.collect(0)
    finally:
        gc.callbacks.remove(later)
    assert len(reports) == 1
    assert [x["nbytes"] for x in reports[0].tensors] == [40]
    assert instances(Holder) == []


def test_each_end_of_the_walk_keeps_its_own_shape(track, scan):
    """The walk follows the list from both ends; while the front end is inside a long run of one
    __slots__ class, the back end meets many other types. Each end must keep the shape of its own
    run (a shared cache of a few entries would hand the front end another type's slot layout: it
    would read the wrong words of the objects, or none, and miss the tensor)."""
    Link = new_class("ShapeLink", __slots__=("a", "b"))
    # thirty one-slot classes at the end of the young list: the back end looks up a new type at
    # every step, and a cache shared by both ends would hand the front end one of their layouts
    # (one word of a Link, never the one holding the tensor) long before it reaches links[20]
    tail_types = [new_class(f"Tail{i}", __slots__=("s",)) for i in range(30)]
    reports = []
    track(tensorgc.observe_cycles(reports.append, device=DEVICE))
    t = T(300)
    t_ref = weakref.ref(t)
    gc.collect()  # the tensor is old: only the reference from the run shows it to the walk
    links = [Link() for _ in range(60)]
    for i, o in enumerate(links):
        o.a, o.b = links[(i + 1) % 60], None
    links[20].b = t
    tail = [cls() for cls in tail_types]
    for i, o in enumerate(tail):
        o.s = tail[(i + 1) % 30]
    del links, tail, t, o
    skipped, armed = counts()
    gc.collect(0)
    assert counts() == (skipped, armed + 1), "the walk must see the run's reference to the tensor"
    assert len(reports) == 1
    assert [x["nbytes"] for x in reports[0].tensors] == [1200]
    assert t_ref() is None
