"""The render worker lives beside the program it watches without touching what is the program's:
its threads (that start a layout and end), its descriptors (os.closerange, dup2 over ours), its
children (os.wait), and its Ctrl-C. Each scenario that changes process-wide state runs in a
child interpreter of its own."""
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tensorgc
import tensorgc._tensorgc_testing as testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
REAL_WORKER = os.path.join(os.path.dirname(tensorgc._tensorgc.__file__), "_tgc_render")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes")


def stats():
    return testing._renderer_stats()


def run_python(code, timeout=60):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture
def silent_worker(tmp_path):
    """A worker that reads requests and never answers: every layout waits for its deadline, or
    for an interrupt."""
    path = tmp_path / "silent-worker"
    path.write_text("#!/bin/sh\nexec cat >/dev/null\n")
    path.chmod(0o700)
    tensorgc._tensorgc._shutdown()
    testing._set_render_worker(str(path))
    yield str(path)
    tensorgc._tensorgc._shutdown()
    testing._set_render_worker(REAL_WORKER)


SLOW_WORKER = """#!{python} -S
# A worker that speaks the protocol and answers every request after {delay} s (renderer.h).
import os, struct, sys, time
def read(n):
    got = b""
    while len(got) < n:
        chunk = os.read(0, n - len(got))
        if not chunk:
            sys.exit(0)
        got += chunk
    return got
while True:
    magic, budget, n = struct.unpack("=IIQ", read(16))
    read(n)
    time.sleep({delay})
    svg = b"<svg>slow</svg>"
    os.write(1, struct.pack("=IIQ", magic, 0, len(svg)) + svg)
"""


@pytest.fixture
def slow_worker(tmp_path):
    """A worker whose every layout takes 2 s, then succeeds."""
    path = tmp_path / "slow-worker"
    path.write_text(SLOW_WORKER.format(python=sys.executable, delay=2.0))
    path.chmod(0o700)
    tensorgc._tensorgc._shutdown()
    testing._set_render_worker(str(path))
    yield str(path)
    tensorgc._tensorgc._shutdown()
    testing._set_render_worker(REAL_WORKER)


def test_threads_that_end_keep_the_worker_and_every_picture():
    tensorgc._tensorgc._shutdown()
    before = stats()
    got, errors = [], []

    def read_pages():
        try:
            for _ in range(3):
                got.append("<svg" in tensorgc.render_svg("digraph { a -> b -> c }"))
        except tensorgc.GraphvizError as exc:
            errors.append(str(exc))

    for _ in range(16):  # each thread starts or uses the worker, then ends
        t = threading.Thread(target=read_pages)
        t.start()
        t.join(60)
        time.sleep(0.01)  # a worker tied to the thread would be killed by now
    assert errors == [] and got == [True] * 48
    after = stats()
    assert after["started"] == before["started"] + 1, "a worker was lost with its thread"
    assert after["renders"] == before["renders"] + 48


def test_the_worker_is_nobodys_child_here():
    # The program's own wait() never returns it and is never held up by it.
    tensorgc.render_svg("digraph { a -> b }")
    pid = stats()["pid"]
    with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    assert ppid != os.getpid()


WAIT = """
import os, signal, subprocess, sys, time
import tensorgc, tensorgc._tensorgc_testing as testing
assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
worker = testing._renderer_stats()["pid"]
# an idle worker, and a worker that exited (killed from outside) and was not replaced yet
child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
pid, status = os.wait()
assert pid == child.pid and os.waitstatus_to_exitcode(status) == 7, (pid, worker)
os.kill(worker, signal.SIGKILL)
time.sleep(0.2)
try:
    got = os.waitpid(-1, os.WNOHANG)
except ChildProcessError:
    got = None
assert got is None, f"the program's waitpid(-1) returned {got}; the worker was {worker}"
t0 = time.monotonic()
try:
    got = os.wait()
except ChildProcessError:
    got = None
assert got is None and time.monotonic() - t0 < 5, got
# the next render starts a new worker; still nothing of ours to wait for
assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
try:
    got = os.waitpid(-1, os.WNOHANG)
except ChildProcessError:
    got = None
assert got is None, got
print("ok")
"""


def test_the_programs_wait_never_returns_the_worker():
    p = run_python(WAIT)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


CLOSERANGE = """
import os, signal, socket
import tensorgc, tensorgc._tensorgc_testing as testing
signal.alarm(30)  # a render blocked on the program's socket ends the test instead of hanging it
assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
ours = testing._renderer_stats()["fd"]
os.closerange(3, 65536)  # as daemons do
a, b = socket.socketpair()
os.dup2(a.fileno(), ours)  # the program's socket now has the number our socket had
theirs = os.fstat(ours)
assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
s = testing._renderer_stats()
assert s["lost"] == 1 and s["started"] == 2, s
# the program's descriptors are intact: open, the same socket, nothing of ours written to it
assert os.fstat(ours).st_ino == theirs.st_ino
b.setblocking(False)
try:
    stray = b.recv(1 << 16)
except BlockingIOError:
    stray = b""
assert stray == b"", stray[:40]
os.write(ours, b"hello")
assert b.recv(5) == b"hello"
tensorgc._tensorgc._shutdown()
assert os.fstat(ours).st_ino == theirs.st_ino  # shutdown leaves it alone too
print("ok")
"""


def test_descriptors_the_program_closed_and_reused_are_left_alone():
    p = run_python(CLOSERANGE)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


SWAPPED_MID_LAYOUT = """
import os, signal, socket, threading, time
import tensorgc, tensorgc._tensorgc_testing as testing
signal.alarm(30)
testing._set_render_worker({worker!r})
tensorgc.set_render_timeout(1.0)

def layout_in_a_thread():
    errors = []
    def render():
        try:
            tensorgc.render_svg("digraph {{ a -> b }}")
        except tensorgc.GraphvizError as exc:
            errors.append(str(exc))
    t = threading.Thread(target=render)
    t.start()
    while testing._renderer_stats()["fd"] < 0:
        time.sleep(0.01)
    time.sleep(0.2)  # the request sent, the answer awaited
    return t, errors, testing._renderer_stats()["fd"]

# another thread puts the program's own socket at our number while we wait for the answer
t, errors, ours = layout_in_a_thread()
a, b = socket.socketpair()
mine = b"the program's own bytes, none of them ours to read" * 4
b.sendall(mine)
os.dup2(a.fileno(), ours)
t.join(20)
a.setblocking(False)
assert a.recv(1 << 16) == mine, "the layout read the program's socket"
b.setblocking(False)
try:
    stray = b.recv(1 << 16)
except BlockingIOError:
    stray = b""
assert stray == b"", stray[:40]
s = testing._renderer_stats()
assert s["lost"] == 1 and s["started"] == 2, s  # a fresh worker got the request
assert errors and "budget" in errors[0], errors
os.write(ours, b"hi")
assert b.recv(2) == b"hi"  # the program's descriptor is intact

# another thread closes it (os.closerange) while we wait
t, errors, ours = layout_in_a_thread()
os.closerange(ours, ours + 1)
t.join(20)
s = testing._renderer_stats()
assert s["lost"] == 2, s
assert errors and "budget" in errors[0], errors  # not "the render worker died"
print("ok")
"""


def test_a_socket_the_program_puts_at_our_number_mid_layout_is_never_read(silent_worker):
    # Before: the socket's identity was checked before a layout only; a dup2 from another
    # thread while the answer was awaited had us read 16 bytes of the program's socket as our
    # answer's header ("malformed"), and a close said the worker died.
    p = run_python(SWAPPED_MID_LAYOUT.format(worker=silent_worker))
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


FORK_WHILE_THE_MAIN_THREAD_DRAWS = """
import os, signal, threading, time, warnings
import tensorgc, tensorgc._tensorgc_testing as testing
warnings.simplefilter("ignore", DeprecationWarning)  # os.fork with threads (3.12+)
signal.alarm(20)  # before: the fork and the layout waited for each other forever
testing._set_render_worker({worker!r})
tensorgc.set_render_timeout(1.5)
took = []

def fork_soon():
    time.sleep(0.3)  # the main thread lays out, taking the GIL back every 40 ms for Ctrl-C
    start = time.monotonic()
    pid = os.fork()  # keeps the GIL through the fork's handlers
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    took.append(time.monotonic() - start)

t = threading.Thread(target=fork_soon)
t.start()
try:
    tensorgc.render_svg("digraph {{ a -> b }}")
    print("drawn?")
except tensorgc.GraphvizError as exc:
    print(exc)
t.join()
print(round(took[0], 2))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_thread_that_forks_while_the_main_thread_draws_does_not_deadlock(silent_worker):
    p = run_python(FORK_WHILE_THE_MAIN_THREAD_DRAWS.format(worker=silent_worker))
    assert p.returncode == 0, p.stdout + p.stderr
    message, took = p.stdout.strip().split("\n")
    assert "budget" in message
    assert float(took) < 1.0, "the fork waited for the layout"


def test_shutdown_waits_for_one_layout_not_for_threads_that_draw_in_a_loop(silent_worker):
    # Before: the layout lock went to threads that draw in a loop again and again (a mutex is
    # not fair), and the interpreter's exit (atexit: _shutdown) waited several budgets or more.
    old = tensorgc.set_render_timeout(1.0)
    stop = threading.Event()

    def draw_forever():
        while not stop.is_set():
            try:
                tensorgc.render_svg("digraph { a -> b }")
            except tensorgc.GraphvizError:
                pass
    threads = [threading.Thread(target=draw_forever) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.5)
        start = time.monotonic()
        tensorgc._tensorgc._shutdown()
        took = time.monotonic() - start
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        tensorgc.set_render_timeout(old)
    assert took < 1.6, f"shutdown waited {took:.1f} s for layouts of 1 s"


CUSTOM_SIGINT_HANDLER = """
import os, signal, threading, time
import tensorgc, tensorgc._tensorgc_testing as testing
signal.alarm(30)
testing._set_render_worker({worker!r})
tensorgc.set_render_timeout(30)
noted, nested = [], []

def take_note(signum, frame):  # "stop after this step": the layout is not the handler's business
    noted.append(signum)
    start = time.monotonic()
    try:
        tensorgc.render_svg("digraph {{ x }}")  # a layout from inside the waiting layout's thread
    except tensorgc.GraphvizError as exc:
        nested.append((str(exc), round(time.monotonic() - start, 1)))

signal.signal(signal.SIGINT, take_note)
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
start = time.monotonic()
print(tensorgc.render_svg("digraph {{ a -> b }}"), noted, round(time.monotonic() - start, 1))
print(nested)

class Stop(Exception):
    pass

def stop(signum, frame):
    raise Stop

signal.signal(signal.SIGINT, stop)
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
start = time.monotonic()
try:
    tensorgc.render_svg("digraph {{ a -> b }}")
    print("not stopped")
except Stop:
    print("stopped after", round(time.monotonic() - start, 1), testing._renderer_stats()["pid"])
"""


def test_a_sigint_handler_that_returns_lets_the_layout_finish(slow_worker):
    # Before: any SIGINT handler's Ctrl-C abandoned the layout, and a handler that only takes
    # note got GraphvizError("the layout was interrupted") raised into the program.
    p = run_python(CUSTOM_SIGINT_HANDLER.format(worker=slow_worker))
    assert p.returncode == 0, p.stdout + p.stderr
    drawn, nested, stopped = p.stdout.strip().split("\n")
    svg, noted, took = drawn.rsplit(" ", 2)
    assert svg == "<svg>slow</svg>" and noted == "[2]", drawn  # drawn, the handler ran once
    assert float(took) >= 1.9  # the handler ran, the layout went on
    # the nested layout failed at once instead of waiting 30 s for its own thread
    assert "this thread's own layout" in nested and ", 0.0)" in nested, nested
    # a handler that raises stops the layout, and its exception is the call's
    assert stopped.startswith("stopped after ") and float(stopped.split()[2]) < 1.5, stopped
    assert stopped.endswith(" 0")  # the worker went with the layout


INHERITED_ABOVE_THE_LIMIT = """
import os, resource, select, signal
import tensorgc, tensorgc._tensorgc_testing as testing
signal.alarm(30)
r, w = os.pipe()
os.dup2(w, 900)  # inheritable (dup2's default), as a C library's descriptor may be
os.close(w)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))  # lowered after it was opened
assert "<svg" in tensorgc.render_svg("digraph { a -> b }")
worker = testing._renderer_stats()["pid"]
held = sorted(int(fd) for fd in os.listdir(f"/proc/{worker}/fd"))
os.close(900)
ready = select.select([r], [], [], 2.0)[0]
print(held, bool(ready) and os.read(r, 1) == b"")
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux's /proc")
def test_the_worker_holds_none_of_the_programs_inherited_descriptors():
    # Before: the worker closed 3 up to its soft limit only; a pipe's write end above it stayed
    # open in the worker, and the program's reader saw no end of input while the worker lived.
    p = run_python(INHERITED_ABOVE_THE_LIMIT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "[0, 1, 2] True", p.stdout


SIGNAL_BEFORE_THE_LAYOUT = """
import itertools, signal, time
import tensorgc, tensorgc._tensorgc_testing as testing
testing._set_render_worker({worker!r})
tensorgc.set_render_timeout(2)

class Alarm(Exception):
    pass

def alarm(signum, frame):
    raise Alarm

signal.signal(signal.SIGALRM, alarm)
signal.setitimer(signal.ITIMER_REAL, 0.01)
start = time.monotonic()
try:
    # the signal comes while C code runs just before the layout: no bytecode in between (each
    # map calls its function from C; operator.call would too, but it is 3.11+)
    list(itertools.chain.from_iterable(itertools.starmap(map, [
        (sum, [range(10 ** 7)]), (tensorgc.render_svg, ["digraph {{ a -> b }}"])])))
    print("no exception")
except Alarm:
    print("raised", testing._renderer_stats()["renders"])
except tensorgc.GraphvizError as exc:
    print(exc)
"""


def test_a_signal_pending_when_a_layout_is_asked_for_is_never_lost(silent_worker):
    # Before: its handler ran inside the call into threading that finds the main thread, whose
    # exception was cleared there: the KeyboardInterrupt was lost, the layout waited its budget.
    p = run_python(SIGNAL_BEFORE_THE_LAYOUT.format(worker=silent_worker))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "raised 0", p.stdout  # raised, and no layout started


def test_ctrl_c_stops_a_layout_long_before_its_budget(silent_worker, ctrl_c):
    old = tensorgc.set_render_timeout(60)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            tensorgc.render_svg("digraph { a -> b }")
        elapsed = time.monotonic() - start
    finally:
        timer.cancel()
        tensorgc.set_render_timeout(old)
    assert elapsed < 5, f"Ctrl-C took {elapsed:.1f} s to stop the layout"
    s = stats()
    assert s["interrupted"] >= 1 and s["pid"] == 0  # the worker was stopped with the layout


def test_ctrl_c_while_another_thread_lays_out_reaches_the_main_thread(silent_worker, ctrl_c):
    # Signals are the main thread's: a layout in another thread goes on to its deadline.
    old = tensorgc.set_render_timeout(1.5)
    errors = []

    def render():
        try:
            tensorgc.render_svg("digraph { a -> b }")
        except tensorgc.GraphvizError as exc:
            errors.append(str(exc))
    t = threading.Thread(target=render)
    try:
        t.start()
        time.sleep(0.2)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(2)
        t.join(10)
    finally:
        tensorgc.set_render_timeout(old)
    assert errors and "budget" in errors[0]


INTERRUPT_IN_GC = """
import gc, os, signal, sys, threading, time, torch
import tensorgc, tensorgc._tensorgc_testing as testing
signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal, even if started in the background
testing._set_render_worker({worker!r})
tensorgc.set_render_timeout(60)
pages = []
tensorgc.observe_tensor_cycles(pages.append, device="cpu")
class Node:
    pass
a, b = Node(), Node()
a.b, b.a, a.t = b, a, torch.zeros(4)
del a, b
# From outside, as a terminal's Ctrl-C (no thread here runs while the collector holds the
# GIL): the worker sends it as it starts, so it comes while the layout is awaited, however long
# the report took to build (a timer of 0.3 s came while torch's metadata was read, on a loaded
# machine: a test of something else).
os.environ["TGC_TEST_PARENT"] = str(os.getpid())
start = time.monotonic()
try:
    gc.collect()
    for _ in range(100):  # the interrupt arrives at the next bytecode after the collection
        pass
    print("no interrupt")
except KeyboardInterrupt:
    print("interrupted after", round(time.monotonic() - start, 2))
assert len(pages) == 1 and "No picture" in pages[0] and "interrupted" in pages[0], pages
print("page ok", testing._renderer_stats()["interrupted"])
"""


def test_ctrl_c_during_a_layout_inside_the_collector_reaches_the_program(tmp_path):
    pytest.importorskip("torch")
    worker = tmp_path / "interrupting-worker"  # a silent worker that sends the Ctrl-C
    worker.write_text('#!/bin/sh\nkill -INT "$TGC_TEST_PARENT"\nexec cat >/dev/null\n')
    worker.chmod(0o700)
    p = run_python(INTERRUPT_IN_GC.format(worker=str(worker)))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")
    assert lines[0].startswith("interrupted after"), p.stdout + p.stderr
    assert float(lines[0].split()[-1]) < 5
    assert lines[1] == "page ok 1"


def test_a_silent_worker_is_stopped_at_the_deadline(silent_worker):
    old = tensorgc.set_render_timeout(0.3)
    try:
        with pytest.raises(tensorgc.GraphvizError, match="budget"):
            tensorgc.render_svg("digraph { a -> b }")
    finally:
        tensorgc.set_render_timeout(old)
    assert stats()["pid"] == 0


def test_collections_inside_and_outside_still_draw_after_the_scenarios():
    gc.collect()
    assert "<svg" in tensorgc.render_svg("digraph { a -> b }")


@pytest.mark.skipif(not os.environ.get("TENSORGC_UNDER_ASAN"), reason="make asan only")
def test_pictures_are_drawn_by_the_sanitized_worker_under_make_asan():
    # No address-space cap under AddressSanitizer: Graphviz really runs, under both sanitizers.
    tensorgc._tensorgc._shutdown()
    assert "<svg" in tensorgc.render_svg("digraph { a -> b -> c -> a }")
    with open(f"/proc/{stats()['pid']}/maps") as f:
        maps = f.read()
    assert "libasan" in maps and "libubsan" in maps
