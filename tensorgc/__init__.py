"""tensorgc: where your GPU memory is and why it was not freed.

The cycle detector and the reporter's walk are C (tensorgc._tensorgc); this package adds the
file-writing warning, the reporter's naming (reporter.py) and the allocator helpers
(allocator.py), and re-exports the API. See docs/api.md.
"""
from __future__ import annotations

import atexit
import logging
import os
import tempfile
from typing import TYPE_CHECKING, Callable, Optional, Union

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
    observe_tensor_cycles,
    render_svg,
    set_render_timeout,
)
from .reporter import MemReporter, Report, Row, track_tensors  # noqa: E402  (memlab-compatible)
from .oom import on_oom, write_autopsy  # noqa: E402
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
from ._lean import LeanTrace  # noqa: E402  (a streamed snapshot's device trace)
from .snapshot import (  # noqa: E402
    SnapshotError,
    dump_snapshot,
    load_snapshot,
    record_memory_history,
    snapshot,
)

__all__ = [
    "Categorizer",
    "Chain",
    "Checkpoint",
    "Courtesy",
    "CycleReport",
    "DeviceError",
    "GraphvizError",
    "Growth",
    "Handle",
    "LeanTrace",
    "LineProfiler",
    "MemReporter",
    "Moved",
    "Report",
    "Row",
    "SnapshotError",
    "categorize",
    "checkpoint",
    "growth",
    "owner",
    "owners",
    "clear_global_line_profiler",
    "load_ipython_extension",
    "on_oom",
    "profile",
    "profile_every",
    "set_target_gpu",
    "write_autopsy",
    "dump_snapshot",
    "load_snapshot",
    "record_memory_history",
    "snapshot",
    "track_tensors",
    "observe_cycles",
    "observe_garbage",
    "observe_tensor_cycles",
    "render_svg",
    "get_render_timeout",
    "set_render_timeout",
    "warn_tensor_cycles",
]

logger = logging.getLogger("tensorgc")

# Collections during interpreter exit must not call back into a half-torn-down world.
atexit.register(_tensorgc._shutdown)


if TYPE_CHECKING:
    import torch
    from IPython.core.interactiveshell import InteractiveShell


def warn_tensor_cycles(
        *, device: Union[str, torch.device, Callable[[torch.Tensor], bool], None] = None,
        directory: Union[str, os.PathLike[str], None] = None) -> Handle:
    """Write each cycle report to a new HTML file and log a WARNING with its path and summary.

    ``device``: whose tensors to watch, as observe_cycles takes it ("cuda", "cpu", "any", a
    device string, a torch.device or a predicate). The default watches what this machine has:
    CUDA tensors where torch.cuda.is_available(), else CPU tensors; an INFO message on logger
    "tensorgc" says which and why. Asking for CUDA on a machine without it logs a WARNING (the
    watch would never report anything).

    Each page is written whole or not at all (snapshot.atomic_write): to a private temp file
    (mkstemp: O_EXCL, mode 0600) in ``directory`` or the temporary directory, fsynced, then
    given a new unpredictable name ``tensorgc-cycle-XXXXXXXX.html`` that nothing had (no file
    is ever overwritten). When the page cannot be written (a full disk, a read-only file
    system, no permission, any OSError; or the page itself cannot be made), the one WARNING
    still carries the summary and says why there is no page; no file is left behind, and
    nothing is raised into the garbage collector. Returns the Handle; call it to unregister.
    """
    from ._devices import NO_CUDA, cuda_available, parse_device
    from .snapshot import atomic_write, write_failure

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
        try:
            text = report.text.rstrip()
        except Exception as exc:  # noqa: BLE001 -- the warning comes anyway
            text = f"tensorgc: no summary: {write_failure(exc)}"
        try:
            html = report.html  # may raise (MemoryError): then no file is even started
            path = atomic_write(tempfile.gettempdir() if where is None else where,
                                lambda f: f.write(html), unique=("tensorgc-cycle-", ".html"))
        except Exception as exc:  # noqa: BLE001 -- a missing page must not lose the summary
            logger.warning("reference cycles kept tensors alive until gc ran; no page written: "
                           "%s\n%s", write_failure(exc), text)
            return
        logger.warning("reference cycles kept tensors alive until gc ran; picture: %s\n%s",
                       path, text)

    handle = observe_cycles(write_and_log, device=device)  # raises for a device it refuses
    if asks_cuda and not cuda_available():
        logger.warning("tensorgc: warn_tensor_cycles(device=%r) watches CUDA tensors, and "
                       "there are none: %s; device='cpu' (or no device) watches the CPU's",
                       device, NO_CUDA)
    logger.info("tensorgc: watching reference cycles that hold %s tensors%s", device, why)
    return handle


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """`%load_ext tensorgc`: registers the %mlrun / %%mlrun magics (tensorgc/magics.py)."""
    from .magics import load_ipython_extension as load
    load(ipython)
