"""The detector's Python half: observe_tensor_cycles (torch's drop-in: the page to a callback)
and warn_tensor_cycles (each new cycle's page written to a file and a WARNING logged, repeats
counted by dedup.py's CycleDedup). The collection hook, the reports and their pages are C
(cycles/ at the repository's root); the CUDA allocator's history they start and stop is
allocator/_history.py's.
"""
from __future__ import annotations

import logging
import os
import tempfile
import threading
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple, Union

from .. import _tensorgc
from .._common.devices import NO_CUDA, cuda_available, parse_device
from .._common.output import output_dir, ranked
from .._tensorgc import CycleReport, Handle, observe_cycles
from ..allocator._history import start_for
from .dedup import CycleDedup, tell_at_exit

if TYPE_CHECKING:
    import torch

__all__ = ["observe_tensor_cycles", "warn_tensor_cycles"]

logger = logging.getLogger("tensorgc")


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
    allocator alone. docs/benchmarks.md gives the cost.

    The default device is torch's, "cuda": on a machine without CUDA it would see nothing, so
    one WARNING on logger "tensorgc" says so (device="cpu" or "any" watches the CPU's)."""
    handle = _tensorgc.observe_tensor_cycles(callback, device=device)
    start_for(handle, device, record_history)
    if _asks_cuda(device) and not cuda_available():
        logger.warning("tensorgc: observe_tensor_cycles(device=%r) watches CUDA tensors, and "
                       "there are none: %s; device='cpu' or 'any' watches the CPU's", device,
                       NO_CUDA)
    return handle


def _asks_cuda(device: object) -> bool:
    """Whether ``device`` names CUDA tensors only ("cuda", "cuda:1", 0, a torch.device)."""
    if not ((isinstance(device, str) and device != "any") or type(device).__name__ == "device"):
        return False
    try:
        return parse_device(device)[0] == "cuda"
    except ValueError:
        return False  # observe_cycles said what is wrong with it


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
    else:
        asks_cuda = _asks_cuda(device)
    # here, not when tensorgc is imported (tensorgc/__init__.py says why), nor in a collection
    from ..allocator.snapshot import atomic_write, write_failure

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
    with _counters_lock:
        gone = [c for c, h in _counters if not h.active]
        _counters[:] = [(c, h) for c, h in _counters if h.active] + [(counter, handle)]
    for c in gone:
        tell_at_exit(c)
