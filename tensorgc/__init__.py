"""tensorgc: where your GPU memory is and why it was not freed.

This module is the package's face: it re-exports the API (docs/api.md) from the modules that
define it, each loaded on first use of one of its names, and sets up the "tensorgc" logger; no
module of the package imports it. The C
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
import sys
import types
from typing import TYPE_CHECKING

from . import _tensorgc
from ._common.errors import DeviceError, OutputError, SnapshotError
from ._common.features import Feature, PortableModeWarning, features
from ._common.features import portable_message as _portable_message
from ._common.output import get_output_dir, set_output_dir
from ._common.rank import install_filter as _install_rank_filter
from ._tensorgc import (
    CycleReport,
    GraphvizError,
    Handle,
    get_render_timeout,
    observe_cycles,
    observe_garbage,
    render_svg,
    set_observer_errors,
    set_render_timeout,
)
from ._version import __version__ as __version__  # the type checker reads "as"

# The rest of the API is imported on first use: `import tensorgc` loads the C extension and the
# few small modules above, not the ~50 modules and 750 KB of Python the whole API is. Loading that
# much code leaves the program's heap with holes (the code objects' temporaries) that its young
# garbage then fills, scattered across memory, and every later collection walks it more slowly:
# the detector alone must not cost a program that. Name -> the module that defines it.
_LAZY = {
    "LeanTrace": "allocator._lean",  # a streamed snapshot's device trace
    "Categorizer": "allocator.categories",
    "categorize": "allocator.categories",
    "on_oom": "allocator.oom",
    "write_autopsy": "allocator.oom",
    "dump_snapshot": "allocator.snapshot",
    "load_snapshot": "allocator.snapshot",
    "record_memory_history": "allocator.snapshot",
    "snapshot": "allocator.snapshot",
    "timeline": "allocator.timeline",  # the function shadows the module path
    "CycleDedup": "cycles.dedup",  # repeated leaks in long jobs
    "cycle_totals": "cycles.dedup",
    "Node": "cycles.object_graph",  # torch's _cycles functions
    "create_graph": "cycles.object_graph",
    "to_dot": "cycles.object_graph",
    "to_html": "cycles.object_graph",
    "observe_tensor_cycles": "cycles.observe",
    "warn_tensor_cycles": "cycles.observe",
    "GatheredReport": "distributed.ranks",
    "Publisher": "distributed.ranks",
    "gather_report": "distributed.ranks",
    "publish_reports": "distributed.ranks",
    "LineProfiler": "lineprof",  # memlab's line profiler
    "clear_global_line_profiler": "lineprof",
    "profile": "lineprof",
    "profile_every": "lineprof",
    "set_target_gpu": "lineprof",
    "Courtesy": "lineprof.courtesy",  # memlab's Courtesy
    "Moved": "lineprof.courtesy",
    "MemReporter": "reporter",  # memlab-compatible
    "Report": "reporter",
    "Row": "reporter",
    "track_tensors": "reporter",
    "Checkpoint": "reporter.growth",  # what grows
    "Growth": "reporter.growth",
    "checkpoint": "reporter.growth",
    "growth": "reporter.growth",
    "Chain": "reporter.owner_chains",  # why is it still alive
    "owner": "reporter.owner_chains",
    "owners": "reporter.owner_chains",
    "Forecast": "reporter.watch",  # steady growth in long jobs, and the OOM ahead
    "GrowthWatch": "reporter.watch",
    "warn_memory_growth": "reporter.watch",
}

if TYPE_CHECKING:  # what a type checker reads: the same names, imported at once
    from .allocator._lean import LeanTrace
    from .allocator.categories import Categorizer, categorize
    from .allocator.oom import on_oom, write_autopsy
    from .allocator.snapshot import dump_snapshot, load_snapshot, record_memory_history, snapshot
    from .allocator.timeline import timeline
    from .cycles.dedup import CycleDedup, cycle_totals
    from .cycles.object_graph import Node, create_graph, to_dot, to_html
    from .cycles.observe import observe_tensor_cycles, warn_tensor_cycles
    from .distributed.ranks import GatheredReport, Publisher, gather_report, publish_reports
    from .lineprof import (
        LineProfiler,
        clear_global_line_profiler,
        profile,
        profile_every,
        set_target_gpu,
    )
    from .lineprof.courtesy import Courtesy, Moved
    from .reporter import MemReporter, Report, Row, track_tensors
    from .reporter.growth import Checkpoint, Growth, checkpoint, growth
    from .reporter.owner_chains import Chain, owner, owners
    from .reporter.watch import Forecast, GrowthWatch, warn_memory_growth
else:
    def __getattr__(name: str) -> object:
        """A name of the API, bound here on first use; else a submodule (tensorgc.reporter, or a
        path of the flat layout such as tensorgc.segments), imported."""
        where = _LAZY.get(name)
        if where is not None:
            value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
            globals()[name] = value
            return value
        if name.isidentifier() and not name.startswith("__"):
            try:
                return importlib.import_module(f"{__name__}.{name}")
            except ImportError as e:  # none such, or one that needs what is not installed
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from e
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list:
        return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package's module type: importing a submodule binds it here, except where a function
    of the API has the submodule's name (the flat layout's tensorgc.snapshot, tensorgc.timeline
    and tensorgc.growth): the function keeps the name, loaded now or on first use."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAZY and value is sys.modules.get(f"{self.__name__}.{name}"):
            return  # the import system binding the flat path's module
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

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

def _at_exit() -> None:
    """Collections during interpreter exit must not call back into a half-torn-down world; then
    warn_tensor_cycles' counts not yet told are logged, once no report can add to them.
    Registered here, when the package is imported, so that it runs after the exit functions
    the program registered later, whenever the module counting repeats was first used."""
    _tensorgc._shutdown()
    dedup = sys.modules.get(f"{__name__}.cycles.dedup")
    if dedup is not None:
        dedup._summaries_at_exit()


atexit.register(_at_exit)

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
