"""tensorgc: where your GPU memory is and why it was not freed.

The cycle detector and the reporter's walk are C (tensorgc._tensorgc); this package adds the
file-writing warning (with its deduplication, dedup.py), the reporter's naming (reporter.py) and
the allocator helpers (allocator.py), the output directory and the rank in file names and log
records (_output.py, _rank.py), and re-exports the API. See docs/api.md.
"""
from __future__ import annotations

import atexit
import logging
import os
import tempfile
import threading
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple, Union

from . import _tensorgc
from ._errors import DeviceError
from ._version import __version__ as __version__  # re-exported (the type checker reads "as")
from ._tensorgc import (
    CycleReport,
    GraphvizError,
    Handle,
    observe_cycles,
    observe_garbage,
    get_render_timeout,
    render_svg,
    set_observer_errors,
    set_render_timeout,
)
from .reporter import MemReporter, Report, Row, track_tensors  # noqa: E402  (memlab-compatible)
from .oom import on_oom, write_autopsy  # noqa: E402
from .ranks import GatheredReport, Publisher, gather_report, publish_reports  # noqa: E402
from .owner_chains import Chain, owner, owners  # noqa: E402  (why is it still alive)
from .growth import Checkpoint, Growth, checkpoint, growth  # noqa: E402  (what grows)
from .categories import Categorizer, categorize  # noqa: E402  (categories over time)
from .courtesy import Courtesy, Moved  # noqa: E402  (memlab's Courtesy)
from .lineprof import (  # noqa: E402  (memlab's line profiler)
    LineProfiler,
    clear_global_line_profiler,
    profile,
    profile_every,
    set_target_gpu,
)
from .object_graph import Node, create_graph, to_dot, to_html  # noqa: E402  (torch's _cycles)
from .timeline import timeline  # noqa: E402  (the function shadows the module, as snapshot)
from ._lean import LeanTrace  # noqa: E402  (a streamed snapshot's device trace)
from .snapshot import (  # noqa: E402
    OutputError,
    SnapshotError,
    dump_snapshot,
    load_snapshot,
    record_memory_history,
    snapshot,
)
from ._output import get_output_dir, set_output_dir  # noqa: E402
from .dedup import CycleDedup, cycle_totals  # noqa: E402  (repeated leaks in long jobs)
from ._rank import install_filter as _install_rank_filter  # noqa: E402
from ._features import Feature, PortableModeWarning, features  # noqa: E402
from ._features import portable_message as _portable_message  # noqa: E402

__all__ = [
    "Categorizer",
    "Chain",
    "Checkpoint",
    "Courtesy",
    "CycleDedup",
    "CycleReport",
    "DeviceError",
    "Feature",
    "GatheredReport",
    "GraphvizError",
    "Growth",
    "Handle",
    "LeanTrace",
    "LineProfiler",
    "MemReporter",
    "Moved",
    "Node",
    "OutputError",
    "PortableModeWarning",
    "Publisher",
    "Report",
    "Row",
    "SnapshotError",
    "categorize",
    "checkpoint",
    "create_graph",
    "cycle_totals",
    "features",
    "get_output_dir",
    "gather_report",
    "growth",
    "owner",
    "owners",
    "clear_global_line_profiler",
    "load_ipython_extension",
    "on_oom",
    "profile",
    "profile_every",
    "set_output_dir",
    "publish_reports",
    "set_target_gpu",
    "write_autopsy",
    "dump_snapshot",
    "load_snapshot",
    "record_memory_history",
    "snapshot",
    "timeline",
    "to_dot",
    "to_html",
    "track_tensors",
    "observe_cycles",
    "observe_garbage",
    "observe_tensor_cycles",
    "render_svg",
    "get_render_timeout",
    "set_render_timeout",
    "set_observer_errors",
    "warn_tensor_cycles",
]

logger = logging.getLogger("tensorgc")
# Every record of logger "tensorgc" carries record.rank, and "[rank N] " inside a distributed job.
_install_rank_filter(logger)

# Collections during interpreter exit must not call back into a half-torn-down world.
atexit.register(_tensorgc._shutdown)

# Where the interpreter is not one whose collector tensorgc reads (3.14+, $TENSORGC_PORTABLE), say
# once what is off. Attributed to this module, so that -W "ignore:::tensorgc" silences it.
_portable = _portable_message()
if _portable is not None:
    import warnings

    warnings.warn(_portable, PortableModeWarning, stacklevel=1)
del _portable


if TYPE_CHECKING:
    import torch
    from IPython.core.interactiveshell import InteractiveShell


def observe_tensor_cycles(
        callback: Callable[[str], object], *,
        device: Union[str, torch.device, Callable[[torch.Tensor], bool]] = "cuda",
        record_history: bool = True) -> Handle:
    """Drop-in for torch.utils.viz._cycles.observe_tensor_cycles: callback(html) once per
    collection whose garbage keeps tensors of ``device`` alive; the page is self-contained and
    works offline. Returns a Handle.

    Like torch's, it starts the CUDA allocator's history so that the CUDA tensors on the page
    show where they were allocated: only where the observer may see CUDA tensors (``device``
    CUDA, "any" or a predicate), CUDA is available and nothing records yet, with the cheapest
    settings that give a live tensor its stack (record_memory_history("state", context="state",
    stacks="python")); it stops it when the last observer relying on it is removed, unless the
    program took it over (record_memory_history) meanwhile. ``record_history=False`` leaves the
    allocator alone. docs/benchmarks.md gives the cost."""
    from ._history import start_for

    handle = _tensorgc.observe_tensor_cycles(callback, device=device)
    start_for(handle, device, record_history)
    return handle


def warn_tensor_cycles(
        *, device: Union[str, torch.device, Callable[[torch.Tensor], bool], None] = None,
        directory: Union[str, os.PathLike[str], None] = None,
        max_pages: Optional[int] = 20, min_interval: float = 0.0,
        summary_every: Optional[float] = 600.0,
        dedup: Union[bool, CycleDedup] = True, record_history: bool = True) -> Handle:
    """Write each new cycle's report to an HTML file and log a WARNING with its path and summary;
    count the repeats.

    ``device``: whose tensors to watch, as observe_cycles takes it ("cuda", "cpu", "any", a
    device string, a torch.device or a predicate). The default watches what this machine has:
    CUDA tensors where torch.cuda.is_available(), else CPU tensors; an INFO message on logger
    "tensorgc" says which and why. Asking for CUDA on a machine without it logs a WARNING (the
    watch would never report anything).

    Repeats (dedup.py's CycleDedup): a report is made in full (a page and a WARNING) only when it
    holds a cycle signature (the shape of a leak: CycleReport.groups[i]["signature"]) that has
    no page yet, at most ``max_pages`` times (None: no cap) and at least ``min_interval``
    seconds apart; other reports are counted by signature, and every ``summary_every`` seconds
    (None: only at exit) a WARNING line per signature seen since says how often, how many bytes
    and where its first page is; pending counts are also logged at interpreter exit. Reading a
    repeat never makes its page. ``dedup=False`` makes a full report of every reporting
    collection (still within the caps); a CycleDedup instance is used as it is (share one
    between handles, or give it a clock), and the three limits must then be left alone. At most
    1,000 signatures are tracked per handle; cycle_totals() has the process's counts.

    Each page is written whole or not at all (snapshot.atomic_write): to a private temp file
    (mkstemp: O_EXCL, mode 0600) in ``directory``, else the output directory (set_output_dir,
    $TENSORGC_OUTPUT_DIR), else the temporary directory, fsynced, then given a new
    unpredictable name ``tensorgc-cycle-XXXXXXXX.html`` (``tensorgc-cycle-rank3-XXXXXXXX.html``
    in a distributed job) that nothing had (no file is ever overwritten). When the page cannot
    be written (a full disk, a read-only file system, no permission, any OSError; or the page
    itself cannot be made), the one WARNING still carries the summary and says why there is no
    page; no file is left behind, and nothing is raised into the garbage collector; that
    signature may get its page at a later report. Returns the Handle; call it to unregister.

    ``record_history``: as observe_tensor_cycles, the CUDA allocator's history is started (where
    CUDA tensors are watched and nothing records yet) so that pages show allocation stacks, and
    stopped with the last handle relying on it; False leaves the allocator alone.
    """
    from ._devices import NO_CUDA, cuda_available, parse_device
    from ._output import output_dir, ranked
    from .snapshot import atomic_write, write_failure

    if isinstance(dedup, CycleDedup):
        if (max_pages, min_interval, summary_every) != (20, 0.0, 600.0):
            raise ValueError("tensorgc: warn_tensor_cycles: give max_pages, min_interval and "
                             "summary_every to the CycleDedup passed as dedup=, not here")
        counter = dedup
    elif isinstance(dedup, bool):
        counter = CycleDedup(max_pages=max_pages, min_interval=min_interval,
                             summary_every=summary_every, dedup=dedup)
    else:
        raise TypeError(f"tensorgc: warn_tensor_cycles: dedup must be a bool or a CycleDedup, "
                        f"not {type(dedup).__name__}")
    where: Optional[str] = None
    if directory is not None:
        where = os.fspath(directory)
        if not os.path.exists(where):
            raise FileNotFoundError(f"tensorgc: no such directory: {where!r}")
        if not os.path.isdir(where):
            raise NotADirectoryError(f"tensorgc: not a directory: {where!r}")
    why = ""
    asks_cuda = False
    if device is None:
        if cuda_available():
            device, why = "cuda", " (the default: CUDA is available)"
        else:
            device, why = "cpu", f" (the default: no CUDA, {NO_CUDA})"
    elif (isinstance(device, str) and device != "any") or type(device).__name__ == "device":
        try:
            asks_cuda = parse_device(device)[0] == "cuda"
        except ValueError:
            pass  # observe_cycles says what is wrong with it

    def write_and_log(report: CycleReport) -> None:
        verdict = counter.admit(report)  # reads the signatures only: no text, no page
        if verdict.full:
            try:
                text = report.text.rstrip()
            except Exception as exc:  # noqa: BLE001 -- the warning comes anyway
                text = f"tensorgc: no summary: {write_failure(exc)}"
            sigs = ", ".join(f"#{n}" if n else "other" for n in verdict.numbers)
            sigs = f"cycle signature{'s' if len(verdict.numbers) > 1 else ''} {sigs}"
            path: Optional[str] = None
            try:
                html = report.html  # may raise (MemoryError): then no file is even started
                path = atomic_write(where if where is not None else
                                    output_dir(tempfile.gettempdir()),
                                    lambda f: f.write(html),
                                    unique=(ranked("tensorgc-cycle-"), ".html"))
            except Exception as exc:  # noqa: BLE001 -- a missing page must not lose the summary
                counter.reported(verdict, None)
                logger.warning("reference cycles kept tensors alive until gc ran; no page "
                               "written: %s (%s)\n%s", write_failure(exc), sigs, text)
            else:
                counter.reported(verdict, path)
                logger.warning("reference cycles kept tensors alive until gc ran; picture: "
                               "%s (%s)\n%s", path, sigs, text)
        for line in counter.summaries():
            logger.warning("%s", line)

    handle = observe_cycles(write_and_log, device=device)  # raises for a device it refuses
    _keep_until_told(counter, handle)
    from ._history import start_for

    start_for(handle, device, record_history)
    if asks_cuda and not cuda_available():
        logger.warning("tensorgc: warn_tensor_cycles(device=%r) watches CUDA tensors, and "
                       "there are none: %s; device='cpu' (or no device) watches the CPU's",
                       device, NO_CUDA)
    logger.info("tensorgc: watching reference cycles that hold %s tensors%s", device, why)
    return handle


# warn_tensor_cycles' counters and their handles. A removed handle drops its callback, and with
# it its counter; what the counter has not told yet must still be logged at exit. So each is
# kept here, and at the next warn_tensor_cycles call those of removed handles leave, their
# untold counts turned into the lines logged at exit (dedup.tell_at_exit, bounded). Holds the
# active handles and those removed since the last call.
_counters: List[Tuple[CycleDedup, Handle]] = []
_counters_lock = threading.Lock()  # guards _counters (warn_tensor_cycles from several threads)


def _new_counters_lock() -> None:
    global _counters_lock
    _counters_lock = threading.Lock()  # a forked child's: the parent's may be held by a thread


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_counters_lock)


def _keep_until_told(counter: CycleDedup, handle: Handle) -> None:
    from .dedup import tell_at_exit

    with _counters_lock:
        gone = [c for c, h in _counters if not h.active]
        _counters[:] = [(c, h) for c, h in _counters if h.active] + [(counter, handle)]
    for c in gone:
        tell_at_exit(c)


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """`%load_ext tensorgc`: registers the %mlrun / %%mlrun magics (tensorgc/magics.py)."""
    from .magics import load_ipython_extension as load
    load(ipython)
