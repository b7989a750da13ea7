"""tensorgc: where your GPU memory is and why it was not freed.

This module is the package's face: it re-exports the API (docs/api.md) from the modules that
define it and sets up the "tensorgc" logger; no module of the package imports it. The C
extension (tensorgc._tensorgc) holds the engines; the Python parts sit in subpackages that mirror
its subsystems and the tools a user knows:

    cycles/       the detector's Python half: observe_tensor_cycles, warn_tensor_cycles and their
                  counting of repeats (dedup), torch's _cycles functions (object_graph)
    reporter/     MemReporter (the package's own module), owner chains and their page, growth,
                  the pytest plugin
    allocator/    the allocator's blocks (the package's own module), snapshots, categories, the
                  timeline, segment map and flame graph pages, the OOM autopsy
    lineprof/     the line profiler (the package's own module), %mlrun, Courtesy
    distributed/  several ranks: gather_report, publish_reports, the ranks' pages
    cli/          the tensorgc command, one module per subcommand
    _common/      what every part uses: devices, errors, output directory, rank, units, types

The flat layout's module paths (tensorgc.snapshot, tensorgc.timeline, tensorgc.segments, ...)
still import: each is a module that hands out the real one (see snapshot.py).
"""
from __future__ import annotations

import atexit
import importlib
import logging
from typing import TYPE_CHECKING

# The flat layout's module paths, imported before the names below are bound: each hands out its
# module, and makes it an attribute of this package; a function of the same name (snapshot,
# timeline, growth) is bound after it and so keeps the attribute, as it always did.
for _path in ("categories", "courtesy", "dedup", "growth", "object_graph", "oom", "owner_chains",
              "ranks", "snapshot", "timeline"):
    importlib.import_module(f"{__name__}.{_path}")
del _path

from . import _tensorgc  # noqa: E402
from ._common.errors import DeviceError, OutputError, SnapshotError  # noqa: E402
from ._common.features import Feature, PortableModeWarning, features  # noqa: E402
from ._common.features import portable_message as _portable_message  # noqa: E402
from ._common.output import get_output_dir, set_output_dir  # noqa: E402
from ._common.rank import install_filter as _install_rank_filter  # noqa: E402
from ._tensorgc import (  # noqa: E402
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
from ._version import __version__ as __version__  # noqa: E402  (the type checker reads "as")
from .allocator._lean import LeanTrace  # noqa: E402  (a streamed snapshot's device trace)
from .allocator.categories import Categorizer, categorize  # noqa: E402  (categories over time)
from .allocator.oom import on_oom, write_autopsy  # noqa: E402
from .allocator.snapshot import (  # noqa: E402
    dump_snapshot,
    load_snapshot,
    record_memory_history,
    snapshot,
)
from .allocator.timeline import timeline  # noqa: E402  (the function shadows the module path)
from .cycles.dedup import CycleDedup, cycle_totals  # noqa: E402  (repeated leaks in long jobs)
from .cycles.object_graph import Node, create_graph, to_dot, to_html  # noqa: E402  (torch's)
from .cycles.observe import observe_tensor_cycles, warn_tensor_cycles  # noqa: E402
from .distributed.ranks import (  # noqa: E402
    GatheredReport,
    Publisher,
    gather_report,
    publish_reports,
)
from .lineprof import (  # noqa: E402  (memlab's line profiler)
    LineProfiler,
    clear_global_line_profiler,
    profile,
    profile_every,
    set_target_gpu,
)
from .lineprof.courtesy import Courtesy, Moved  # noqa: E402  (memlab's Courtesy)
from .reporter import MemReporter, Report, Row, track_tensors  # noqa: E402  (memlab-compatible)
from .reporter.growth import Checkpoint, Growth, checkpoint, growth  # noqa: E402  (what grows)
from .reporter.owner_chains import Chain, owner, owners  # noqa: E402  (why is it still alive)
from .reporter.watch import (  # noqa: E402  (steady growth in long jobs, and the OOM ahead)
    Forecast,
    GrowthWatch,
    warn_memory_growth,
)

__all__ = [
    "Categorizer",
    "Chain",
    "Checkpoint",
    "Courtesy",
    "CycleDedup",
    "CycleReport",
    "DeviceError",
    "Feature",
    "Forecast",
    "GatheredReport",
    "GraphvizError",
    "Growth",
    "GrowthWatch",
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
    "warn_memory_growth",
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
    from IPython.core.interactiveshell import InteractiveShell


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """`%load_ext tensorgc`: registers the %mlrun / %%mlrun magics (tensorgc/lineprof/magics.py)."""
    from .lineprof.magics import load_ipython_extension as load
    load(ipython)
