"""Garbage of hostile shapes: every report comes with its page, within the render budget and the
size bounds (docs/api.md, "Bounds"), and the render worker survives overruns, crashes and forks.

The layout's deadline is enforced by killing the render worker; these tests check that pictures
of bounded shapes never need it (the worker's kill counter does not move) and that the page still
comes when it does.
"""
import gc
import os
import random
import re
import signal
import threading

import pytest

import tensorgc
import tensorgc._tensorgc_testing  # the detector's counters
from _util import DEVICE, T, new_class

PAGE_MAX = 5 << 20
TEXT_MAX = 64 << 10


def heavy_dot():
    """A random mesh of 300 nodes and 1,500 edges in a cluster: dot runs for minutes."""
    rnd = random.Random(1)
    return ("digraph g { graph [rankdir=LR]; subgraph cluster_0 {" +
            " ".join(f"n{i};" for i in range(300)) + "} " +
            " ".join(f"n{rnd.randrange(300)} -> n{rnd.randrange(300)};" for _ in range(1500)) + "}")


def stats():
    return tensorgc._tensorgc_testing._renderer_stats()


@pytest.fixture
def reports(track):
    got = []
    track(tensorgc.observe_cycles(got.append, device=DEVICE))
    return got


def collect_one(reports):
    gc.collect()
    assert len(reports) == 1, f"expected one report, got {len(reports)}"
    return reports.pop()


def check_page(report, *, drawn=True):
    """The page's bounds, and that the layout finished within its budget (nothing killed)."""
    before = stats()["killed"]
    html = report.html
    assert len(html.encode()) <= PAGE_MAX
    assert len(report.text.encode()) <= TEXT_MAX
    assert stats()["killed"] == before, "the layout overran its budget"
    if drawn:
        assert "<svg" in html and "No picture" not in html
    assert report.text.split("\n")[0] in html or "&" in report.text  # the summary is on the page
    return html


def ring(n, make, tensor_at=0):
    objs = [make(i) for i in range(n)]
    for a, b in zip(objs, objs[1:] + objs[:1]):
        a.next = b
    objs[tensor_at].t = T(4)


def test_ring_of_objects_each_of_its_own_class_is_drawn_as_a_short_ring(reports):
    ring(1000, lambda i: type(f"C{i}", (), {})())
    r = collect_one(reports)
    html = check_page(r)
    assert "more objects" in r.dot  # the ring's middle is one "... N more objects" edge
    assert r.dot.count("->") < 50
    assert "C0" in html


def test_ring_of_ten_thousand_plain_objects(reports):
    Plain = new_class("Plain")
    ring(10_000, lambda i: Plain())
    r = collect_one(reports)
    check_page(r)
    assert re.search("\u2026 9,99[0-9] more objects", r.dot)
    assert r.dot.count("[label=\"Plain") < 20


def test_namedtuple_and_dataclass_factories_in_a_ring(reports):
    import collections
    import dataclasses

    def make(i):
        if i % 2:
            return dataclasses.make_dataclass(f"D{i}", [("next", object, None), ("t", object, None)])()
        holder = new_class(f"H{i}")()
        holder.nt = collections.namedtuple(f"N{i}", "a b")(1, 2)
        return holder
    ring(400, make)
    check_page(collect_one(reports))


def test_fan_of_spokes_that_point_back_at_their_hub(reports):
    Hub, Spoke = new_class("Hub"), new_class("Spoke")
    hub = Hub()
    hub.spokes = []
    for i in range(5000):
        s = Spoke()
        s.hub = hub
        s.t = T(2)
        hub.spokes.append(s)
    del hub, s
    r = collect_one(reports)
    html = check_page(r)
    assert "more objects in this leak" in html


@pytest.mark.parametrize("n", [20, 30, 40, 150])
def test_mesh_where_every_object_refers_to_every_other(reports, n):
    Node = new_class("Node")
    nodes = [Node() for _ in range(n)]
    for x in nodes:
        x.peers = list(nodes)
    nodes[0].t = T(4)
    del nodes, x
    r = collect_one(reports)
    check_page(r)
    drawn = r.dot.count("[label=\"Node") + r.dot.count("[label=\"list")
    # at most 2.5 references per drawn object, and no more than 450
    assert r.dot.count(" -> n") <= max(60, min(450, drawn * 5 // 2)) + 16
    assert "more references between the drawn objects are not drawn" in r.dot


def test_deep_chain_from_a_small_cycle_to_its_tensor(reports):
    Link = new_class("Link")
    a, b = Link(), Link()
    a.b, b.a = b, a
    cur = b
    for _ in range(20_000):
        nxt = Link()
        cur.down = nxt
        cur = nxt
    cur.t = T(4)
    del a, b, cur, nxt
    r = collect_one(reports)
    check_page(r)
    assert "more objects" in r.dot


def test_many_distinct_leak_shapes_bound_the_text_and_table(reports):
    for i in range(1500):
        cls = new_class(f"Shape{i}")
        x, y = cls(), cls()
        x.y, y.x = y, x
        setattr(x, "t" * (1 + i % 7), T(1))
        y.depth = [[x]] * (i % 5)
    r = collect_one(reports)
    html = check_page(r, drawn=False)
    assert "more leak shapes" in r.text
    assert "more leak shapes, smaller ones" in html
    assert len(r.groups) > 40  # the structured report keeps every shape


@pytest.mark.parametrize("where", ["attribute", "class", "dict key", "slots", "repr", "closure"])
def test_huge_strings_are_cut_with_their_true_length(reports, where):
    huge = "x" * (10 << 20)

    def make():
        if where == "attribute":
            Node = new_class("Node")
            a, b = Node(), Node()
            setattr(a, huge, b)
            b.a, b.t = a, T(4)
        elif where == "class":
            Big = new_class(huge)
            a, b = Big(), Big()
            a.b, b.a, b.t = b, a, T(4)
        elif where == "dict key":
            a = new_class("Node")()
            a.d = {huge: a, "t": T(4)}
        elif where == "slots":
            Slotted = type("Slotted", (), {"__slots__": (huge[:1 << 20], "t")})
            a = Slotted()
            setattr(a, huge[:1 << 20], a)
            a.t = T(4)
        elif where == "repr":
            a = new_class("Loud", __repr__=lambda self: huge)()
            a.items = [a, T(4), 1]
            a.d = {1: a}
        else:
            ns = {}
            exec(f"def make(a):\n    {huge[:1 << 16]} = a\n    return lambda: {huge[:1 << 16]}", ns)
            a = new_class("Node")()
            a.f = ns["make"](a)
            a.t = T(4)
    make()
    r = collect_one(reports)
    html = check_page(r)
    assert len(html) < 2 << 20
    assert huge[:1 << 16] not in html and huge[:1 << 16] not in r.dot
    if where in ("attribute", "class", "closure"):
        assert "chars)" in r.dot  # "xxx… (10485760 chars)"


HOSTILE = [
    '</script><script>alert(1)</script>',
    '"]; evil -> x [label="',
    "<img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "\u202eevil\u202c\x00\x1b[31m",
    "\ud800 lone surrogate",
    "\\N\\G\\l&amp;&#60;",
]


@pytest.mark.parametrize("s", HOSTILE)
def test_hostile_strings_are_escaped_everywhere(reports, s):
    name = "Evil" + s.replace("\x00", "")
    if "\ud800" in name:
        name = "Evil"  # a class name must encode to UTF-8; attributes and reprs need not
    Evil = new_class(name, __repr__=lambda self: s)
    a, b = Evil(), Evil()
    setattr(a, s, b)
    b.link = {s: a}
    b.t = T(4)
    del a, b
    r = collect_one(reports)
    html = check_page(r)
    assert "<script>alert" not in html and "<img" not in html
    assert "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert "\x00" not in html and "\x1b" not in html
    assert html.count("<script>") == 1  # the page's own


def test_overrun_is_stopped_and_the_page_still_comes(reports):
    heavy = heavy_dot()
    old = tensorgc.set_render_timeout(0.2)
    try:
        before = stats()
        with pytest.raises(tensorgc.GraphvizError, match="budget"):
            tensorgc.render_svg(heavy)
        after = stats()
        assert after["killed"] == before["killed"] + 1
        assert "<svg" in tensorgc.render_svg("digraph { a -> b }")  # a new worker
        assert stats()["started"] == after["started"] + 1
        # a report whose layout overruns: the page says so and keeps the text and table
        Node = new_class("Node")
        a, b = Node(), Node()
        a.b, b.a, b.t = b, a, T(4)
        del a, b
        r = collect_one(reports)
        tensorgc.set_render_timeout(1e-6)
        html = r.html
        assert "No picture" in html and "budget" in html
        assert "<table" in html and "fix:" in html
        with pytest.raises(tensorgc.GraphvizError):
            r.svg  # noqa: B018 -- the same error again, not a second layout
    finally:
        tensorgc.set_render_timeout(old)


def test_render_timeout_validation():
    old = tensorgc.get_render_timeout()
    for bad in (0, -1, float("nan"), float("inf"), 1e9):
        with pytest.raises(ValueError):
            tensorgc.set_render_timeout(bad)
    with pytest.raises(TypeError):
        tensorgc.set_render_timeout("1")
    assert tensorgc.get_render_timeout() == old
    assert tensorgc.set_render_timeout(3) == old
    assert tensorgc.set_render_timeout(old) == 3.0


def test_a_killed_worker_is_replaced():
    assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
    pid = stats()["pid"]
    assert pid > 0
    os.kill(pid, signal.SIGKILL)
    assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
    assert stats()["pid"] not in (0, pid)


def test_a_worker_dying_mid_layout_is_an_error_not_a_hang():
    heavy = heavy_dot()
    old = tensorgc.set_render_timeout(30)
    errors = []

    def render():
        try:
            tensorgc.render_svg(heavy)
        except tensorgc.GraphvizError as exc:
            errors.append(str(exc))
    try:
        tensorgc._tensorgc._shutdown()  # no worker now: the next one is fresh
        t = threading.Thread(target=render)
        t.start()
        t.join(0.5)
        pid = stats()["pid"]
        assert pid > 0
        os.kill(pid, signal.SIGSEGV)  # as if Graphviz crashed on this graph
        t.join(20)
        assert not t.is_alive()
        # (under make asan, AddressSanitizer's own handler takes the signal and aborts)
        crashed = ("died while drawing" if os.environ.get("TENSORGC_UNDER_ASAN")
                   else "crashed inside Graphviz (signal 11)")
        assert errors and crashed in errors[0], errors
        # killed from outside: no answer at all, the end of input says it died
        t = threading.Thread(target=render)
        t.start()
        t.join(0.5)
        os.kill(stats()["pid"], signal.SIGKILL)
        t.join(20)
        assert not t.is_alive()
        assert len(errors) == 2 and "died while drawing" in errors[1]
    finally:
        tensorgc.set_render_timeout(old)
    assert "<svg" in tensorgc.render_svg("digraph { a -> b }")


def test_worker_is_retired_after_many_layouts():
    before = stats()
    for _ in range(300):
        tensorgc.render_svg("digraph { a -> b }")
    assert stats()["retired"] >= before["retired"] + 1


def test_threads_share_the_worker():
    out, errors = [], []

    def work():
        try:
            for _ in range(30):
                out.append("<svg" in tensorgc.render_svg("digraph { a -> b -> c }"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(out) == 120 and all(out)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_starts_its_own_worker_and_leaves_the_parents_alone():
    assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
    parent_worker = stats()["pid"]
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        try:
            ok = "<svg" in tensorgc.render_svg("digraph { a -> b }")
            s = tensorgc._tensorgc_testing._renderer_stats()
            ok = ok and s["pid"] not in (0, parent_worker)
            tensorgc._tensorgc._shutdown()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert stats()["pid"] == parent_worker
    assert "<svg" in tensorgc.render_svg("digraph { a -> b }")


def socket_inodes():
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:"):
            out.add(link)
    return out


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="needs Linux's /proc")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_closes_its_parents_worker_socket_at_once():
    assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
    parent = socket_inodes()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, repr(sorted(socket_inodes())).encode())
        os._exit(0)
    os.close(w)
    child = set(eval(os.read(r, 1 << 16).decode()))  # noqa: S307 -- our own child's repr
    os.close(r)
    os.waitpid(pid, 0)
    assert len(parent - child) == 1 and child <= parent


def test_settings_and_counters_do_not_wait_for_a_layout():
    old = tensorgc.set_render_timeout(3)
    t = threading.Thread(target=lambda: pytest.raises(tensorgc.GraphvizError, tensorgc.render_svg,
                                                       heavy_dot()))
    try:
        t.start()
        t.join(0.3)
        assert t.is_alive()
        import time
        start = time.monotonic()
        tensorgc.get_render_timeout()
        tensorgc._tensorgc_testing._renderer_stats()
        tensorgc.set_render_timeout(3)
        assert time.monotonic() - start < 1.0, "waited for the layout in progress"
    finally:
        t.join(30)
        tensorgc.set_render_timeout(old)


def test_links_in_svg_are_refused():
    with pytest.raises(tensorgc.GraphvizError, match="inert"):
        tensorgc.render_svg('digraph { a [URL="java&#115;cript:alert(1)"] }')
    # the same words as text are fine
    assert "<svg" in tensorgc.render_svg('digraph { a [label="href=javascript:alert(1)"] }')


ORPHAN = """
import os, sys, threading, time
sys.path.insert(0, {root!r})
import tensorgc
import tensorgc._tensorgc_testing  # the detector's counters
sys.path.insert(0, {tests!r})
from test_cycles_adversarial import heavy_dot
tensorgc.set_render_timeout(60)
threading.Thread(target=tensorgc.render_svg, args=(heavy_dot(),), daemon=True).start()
for _ in range(100):
    pid = tensorgc._tensorgc_testing._renderer_stats()["pid"]
    if pid:
        break
    time.sleep(0.05)
print(pid, flush=True)
time.sleep(0.5)
os.kill(os.getpid(), 9)
"""


@pytest.mark.skipif(not os.path.exists("/proc"), reason="needs Linux's /proc")
def test_worker_dies_with_a_killed_parent_even_mid_layout():
    import subprocess
    import sys
    import time
    here = os.path.dirname(os.path.abspath(__file__))
    code = ORPHAN.format(root=os.path.dirname(here), tests=here)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    pid = int(p.stdout.split()[0])
    assert pid > 0
    for _ in range(100):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the worker outlived its killed parent")
