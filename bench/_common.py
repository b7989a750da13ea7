"""Shared machinery of the tensorgc benchmarks (B1, B2, B3, B6): not a benchmark itself.

* every measurement runs in a fresh interpreter (``python <script> --worker <json>``);
  the worker prints one line ``RESULT {json}`` on stdout;
* a per-run timeout: the worker arms ``setitimer`` over the measured section and,
  when it fires, reports ``timed_out`` plus how far it got, then ``os._exit``s;
  the parent also kills a worker that overstays (setup included) by a grace period;
* torch's own detector (``torch.utils.viz._cycles``) installed for the benchmark's
  device -- see :func:`install_torch_detector`;
* median / markdown / JSON helpers.
"""

from __future__ import annotations

import glob
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_PREFIX = "RESULT "
TIMEOUT_EXIT = 124


# --------------------------------------------------------------------------- worker side

def import_tensorgc():
    """Import tensorgc, preferring an in-place build in the repository root."""
    if glob.glob(os.path.join(ROOT, "tensorgc", "_tensorgc*")) and ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    try:
        import tensorgc  # noqa: F401
    except ImportError:
        if ROOT in sys.path:
            raise
        sys.path.insert(0, ROOT)
        import tensorgc  # noqa: F401
    import tensorgc

    if not hasattr(tensorgc, "observe_cycles"):
        raise SystemExit(
            f"tensorgc at {list(getattr(tensorgc, '__path__', []))} has no observe_cycles: "
            f"the extension is not built yet (e.g. `make` in {ROOT})"
        )
    import tensorgc._tensorgc_testing  # noqa: F401 -- the benchmarks read the detector's counters
    return tensorgc


def emit_result(result: dict) -> None:
    """Write the worker's result line with a raw write (safe from a signal handler)."""
    data = (RESULT_PREFIX + json.dumps(result) + "\n").encode()
    os.write(1, data)


def arm_timeout(seconds: float, progress: list, total: int, extra: dict) -> float:
    """Arm a timer over the measured section; on expiry emit a timed_out result and exit.

    ``progress[0]`` is updated by the measured loop; ``extra`` is merged into the result.
    Returns the start time (perf_counter) to use for the measurement.
    """
    start = time.perf_counter()

    def on_alarm(signum, frame):  # runs in the main thread between bytecodes
        elapsed = time.perf_counter() - start
        done = progress[0] / total if total else None
        emit_result({**extra, "timed_out": True, "seconds": elapsed, "progress": done})
        os._exit(TIMEOUT_EXIT)

    if seconds and seconds > 0:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    return start


def disarm_timeout() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def build_heap(n: int) -> list:
    """``n`` live, gc-tracked objects (slotted instances: never untracked by the collector).

    Each points at an earlier one (a tree of depth log2(n)) so the heap has edges to
    traverse, like a real program's object graph.
    """

    class Live:
        __slots__ = ("value", "parent")

    heap = []
    append = heap.append
    for i in range(n):
        o = Live()
        o.value = i
        o.parent = heap[i >> 1] if i else None
        append(o)
    return heap


def install_torch_detector(device: str, callback):
    """Install PyTorch's cycle detector for ``device``; return (remove, description).

    On CUDA this is exactly ``torch.utils.viz._cycles.observe_tensor_cycles(callback)``
    (which also turns on ``torch.cuda.memory._record_memory_history`` for allocation
    stacks).  That function is hard-wired to CUDA: it calls
    ``_record_memory_history`` and a CUDA allocator snapshot, and only looks for CUDA
    tensors, so on any other device it reports nothing or fails.  There we use torch's
    ``observe_garbage`` with an observer doing what ``observe_tensor_cycles``'s does,
    for the right device: if the garbage holds a tensor of the device, build the graph
    (``create_graph``, no allocation context) and render it (``to_html``).  The cost
    that matters -- ``observe_garbage``'s DEBUG_SAVEALL + forced full collections --
    is identical.
    """
    import torch
    from torch.utils.viz import _cycles

    dev_type = torch.device(device).type
    if dev_type == "cuda":
        return _cycles.observe_tensor_cycles(callback), "torch observe_tensor_cycles"

    fake = getattr(getattr(torch, "_subclasses", None), "FakeTensor", ())

    def is_dev_tensor(obj):
        return isinstance(obj, torch.Tensor) and obj.device.type == dev_type and not isinstance(obj, fake)

    def observer(garbage):
        if garbage:
            if not any(is_dev_tensor(obj) for obj in garbage):
                return
            nodes = _cycles.create_graph(garbage, context=lambda obj: None, filter=is_dev_tensor)
            callback(_cycles.to_html(nodes))

    return _cycles.observe_garbage(observer), f"torch observe_garbage + create_graph/to_html ({dev_type} adaptation)"


def _noop():
    return None


def settle() -> None:
    """A few Python-level calls.

    torch's ``observe_garbage`` defers its work from the gc callback to the next
    ``sys.setprofile`` events after the collection (it skips the first one).  Calling
    this right after ``gc.collect()`` makes that deferred work happen here, i.e. inside
    a measurement that brackets ``gc.collect(); settle()``.  For other detectors it is
    a few hundred nanoseconds.
    """
    _noop()
    _noop()
    _noop()


def gc_collections() -> list:
    import gc

    return [s["collections"] for s in gc.get_stats()]


# --------------------------------------------------------------------------- parent side

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


_COMPILED: set = set()  # the interpreters whose bytecode worker_env has cached


def worker_env(python: str | None = None) -> dict:
    """The environment of a measured interpreter: this one's, with the bytecode of tensorgc and
    of the benchmarks cached next to their sources, as a package installed by pip has it (pip
    compiles at install; torch's own is there already).

    Without a cache (``PYTHONDONTWRITEBYTECODE`` set, as on some machines) every fresh process
    would compile tensorgc's sources at import, and compiling frees temporaries among live
    objects: holes in the heap that the program's young objects fill scattered, which slows
    every later collection (docs/benchmarks.md, "B1 in fresh processes"). No user's process pays
    that, so no measurement should. The sources are compiled once per interpreter, before its
    first run; a ``PYTHONPYCACHEPREFIX`` already set is kept (it moves every module's cache,
    torch's too: the first run would compile torch)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    exe = python or sys.executable
    if exe not in _COMPILED:
        r = subprocess.run([exe, "-m", "compileall", "-q", os.path.join(ROOT, "tensorgc"),
                            os.path.join(ROOT, "bench")], env=env, capture_output=True, text=True)
        if r.returncode != 0:  # a tree that cannot be written: measured, but said
            log(f"bench: tensorgc's bytecode could not be cached for {exe}; its workers compile "
                f"the sources at import, which no installed package does: "
                f"{(r.stderr or r.stdout).strip()[-300:]}")
        _COMPILED.add(exe)
    return env


def run_worker(script: str, config: dict, timeout: float, grace: float = 180.0,
               python: str | None = None) -> dict:
    """Run one measurement in a fresh interpreter (``python``, default this one), with the
    bytecode cached (worker_env); return its result dict.

    ``timeout`` bounds the measured section (enforced in the worker); the whole
    process gets ``timeout + grace`` (setup included) before it is killed.
    """
    cmd = [python or sys.executable, script, "--worker", json.dumps(config)]
    hard = (timeout + grace) if timeout and timeout > 0 else None
    env = worker_env(python)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=hard, env=env)
    except subprocess.TimeoutExpired as exc:
        return {"timed_out": True, "seconds": None, "progress": None, "killed": True,
                "wall_s": time.perf_counter() - t0,
                "stderr_tail": (exc.stderr or b"")[-2000:].decode(errors="replace")
                if isinstance(exc.stderr, bytes) else (exc.stderr or "")[-2000:]}
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
    if result is None:
        return {"timed_out": False, "seconds": None, "error": f"worker exit {proc.returncode}, no result",
                "returncode": proc.returncode, "wall_s": time.perf_counter() - t0,
                "stderr_tail": proc.stderr[-3000:]}
    result["returncode"] = proc.returncode
    result["wall_s"] = time.perf_counter() - t0
    if proc.returncode not in (0, TIMEOUT_EXIT) or (proc.stderr and "Traceback" in proc.stderr):
        result["stderr_tail"] = proc.stderr[-3000:]
    return result


def run_value(run: dict) -> float:
    """Seconds of one run for the median: +inf for a timeout, nan for a failure."""
    if run.get("timed_out"):
        return math.inf
    if run.get("seconds") is None:
        return math.nan
    return float(run["seconds"])


def median_of(runs: list) -> float | None:
    vals = [run_value(r) for r in runs]
    vals = [v for v in vals if not math.isnan(v)]
    if not vals:
        return None
    return statistics.median(vals)


def fmt_seconds(v: float | None, timeout: float) -> str:
    if v is None:
        return "error"
    if math.isinf(v):
        return f">{timeout:g} s"
    return f"{v:.3f}"


def fmt_run(run: dict, timeout: float) -> str:
    if run.get("timed_out"):
        p = run.get("progress")
        return f">{timeout:g}" + (f" ({100 * p:.0f}% done)" if p is not None else " (killed)")
    if run.get("seconds") is None:
        return "error"
    return f"{run['seconds']:.3f}"


def fmt_ratio(v: float | None, base: float | None, timeout: float) -> str:
    if v is None or base is None or math.isnan(base) or base <= 0 or math.isinf(base):
        return "n/a"
    if math.isinf(v):
        return f">{timeout / base:.0f}x"
    return f"{v / base:.2f}x"


def json_safe(v):
    """Recursively replace inf/nan (not valid JSON) by "inf"/None."""
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return None if math.isnan(v) else "inf"
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def environment(device: str) -> dict:
    env = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "device": device,
        # workers run with tensorgc's bytecode cached, as installed (worker_env)
        "bytecode": "cached",
    }
    try:
        import gc

        env["gc_threshold"] = list(gc.get_threshold())
        import torch

        env["torch"] = torch.__version__
        env["torch_threads"] = torch.get_num_threads()
        if device.startswith("cuda") and torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name()
    except Exception as exc:  # pragma: no cover
        env["torch_error"] = repr(exc)
    try:
        tg = import_tensorgc()
        env["tensorgc"] = getattr(tg, "__version__", None)
        env["tensorgc_file"] = getattr(tg, "__file__", None)
    except Exception as exc:
        env["tensorgc_error"] = repr(exc)
    return env


def write_json(path: str | None, payload: dict) -> None:
    if not path:
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(json_safe(payload), f, indent=2, allow_nan=False)
        f.write("\n")
    log(f"wrote {path}")
