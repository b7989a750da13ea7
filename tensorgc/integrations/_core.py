"""What every training-loop integration does, whatever the loop: the Watcher starts the cycle
detector, the OOM autopsy and the slow-leak forecast, reports memory at the first step and at an
interval, and hands what it finds to a Sink, the loop's logger seen through one small interface
(lightning.py, transformers.py, accelerate.py each make one).

A guest in the training job: every part is started, stepped and stopped inside its own guard,
so no exception leaves tensorgc for the loop (each is logged once on logger "tensorgc" and that
part turns itself off); the program's own history, output directory, callbacks and loggers are
never replaced.
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from .._common.output import get_output_dir
from .._common.rank import rank_info

log = logging.getLogger("tensorgc")

KINDS = ("parameter", "grad", "buffer", "optimizer_state", "saved_for_backward", "other")
TEXT_MAX = 64 * 1024      # a text sent to a logger is cut here
PAGES_MAX = 1000          # page paths remembered (each printed once)

# The Watcher running in this process, if any: a second one (a callback added twice, two
# trainers at once) stays idle rather than start the detector twice. Set and cleared on the
# training thread.
_running: "Optional[Watcher]" = None


@dataclass
class Options:
    """What a Watcher does; each integration's constructor takes these as keyword arguments.

    directory: where pages and autopsies go. None: tensorgc's output directory when the program
      set one (set_output_dir, TENSORGC_OUTPUT_DIR), else the loop's log directory + /tensorgc,
      else a new temporary directory.
    cycles: the cycle detector with its pages (warn_tensor_cycles); cycles_device: its device
      filter (None: the model's device, where the loop's tensors live); max_pages: pages per
      process.
    record_history: the allocator's history at tensorgc's cheap setting, for the pages' stacks
      (CUDA only; never over a history the program records).
    oom: the OOM autopsy on each rank (CUDA only).
    growth: slow-leak warnings with a forecast (tensorgc.warn_memory_growth, stepped after each
      optimizer step); growth_limit: the bytes the forecast counts down to (None: none).
    report_every: a memory report by category and holder at the first step and every N steps
      after (0: the first step only; None: never); owners: the report names what holds each
      tensor that is not a parameter, grad, buffer or optimizer state (one owner search a report).
    gather: in a distributed job, rank 0 logs every rank's row (gather_report, a collective every
      rank runs at the same step).
    text: tables as text where the logger takes text (TensorBoard); prefix: the scalars' names.
    """
    directory: Optional[str] = None
    cycles: bool = True
    cycles_device: Any = None
    max_pages: int = 20
    record_history: bool = True
    oom: bool = True
    growth: bool = True
    growth_limit: Optional[int] = None
    report_every: Optional[int] = 500
    owners: bool = True
    gather: bool = True
    text: bool = True
    prefix: str = "tensorgc/"

    def check(self) -> None:
        if self.report_every is not None and (not isinstance(self.report_every, int)
                                              or isinstance(self.report_every, bool)
                                              or self.report_every < 0):
            raise ValueError(f"report_every must be an int >= 0 or None, not {self.report_every!r}")
        if self.growth_limit is not None and (not isinstance(self.growth_limit, int)
                                              or self.growth_limit <= 0):
            raise ValueError(f"growth_limit must be a number of bytes > 0 or None, "
                             f"not {self.growth_limit!r}")
        if not isinstance(self.prefix, str):
            raise TypeError(f"prefix must be a str, not {type(self.prefix).__name__}")


class Sink:
    """The loop's logger. scalars() and text() are called on every rank; a sink logs only where
    its logger does (rank 0 for Lightning's loggers, Accelerate's trackers and the Trainer's
    integrations). A sink raising is caught by the Watcher: its text is turned off after a
    failure, its scalars after three."""

    def scalars(self, values: Dict[str, float], step: int) -> None:
        raise NotImplementedError

    def text(self, tag: str, text: str, step: int) -> None:
        """Text (a table) where the logger takes it; nothing elsewhere."""


def growth_function() -> Optional[Callable[..., Any]]:
    """tensorgc.warn_memory_growth where this tensorgc has it. Read from the package already
    imported (importing any submodule runs it first), never by importing it again."""
    face = sys.modules.get("tensorgc")
    return getattr(face, "warn_memory_growth", None)


def model_device(model: Any) -> str:
    """"cuda:N" for a model whose first parameter is on CUDA device N, else "cpu"."""
    try:
        for p in model.parameters():
            d = p.device
            if d.type == "cuda":
                return f"cuda:{d.index if d.index is not None else 0}"
            return "cpu"
    except Exception:  # noqa: BLE001 -- not a module: the CPU
        pass
    return "cpu"


def torch_optimizer(opt: Any) -> Any:
    """The torch.optim.Optimizer inside a wrapper (Accelerate's AcceleratedOptimizer, Lightning's
    LightningOptimizer: each keeps it as ``.optimizer``), or None."""
    import torch

    for _ in range(4):
        inner = getattr(opt, "optimizer", None)  # AcceleratedOptimizer is an Optimizer itself
        if inner is None or inner is opt:
            break
        opt = inner
    return opt if isinstance(opt, torch.optim.Optimizer) else None


def _cut(text: str, n: int = TEXT_MAX) -> str:
    return text if len(text) <= n else text[:n] + f"\n... ({len(text) - n} more characters)"


class Watcher:
    """One training run's tensorgc: start(), step() after each optimizer step, stop()."""

    def __init__(self, options: Options, *, name: str = "tensorgc",
                 say: Callable[[str], None] = print) -> None:
        options.check()
        self.options = options
        self.name = name
        self.say = say
        self.sink: Optional[Sink] = None
        # weak references: a run that never reaches stop() (an Accelerate loop) must not keep
        # its model and optimizer alive
        self._model: Callable[[], Any] = _none
        self._optimizers: List[Callable[[], Any]] = []
        self.device = "cpu"
        self.directory: Optional[str] = None
        self.started = False
        self.steps = 0
        self.at = 0
        self.handles: Dict[str, Any] = {}
        self.failed: Set[str] = set()
        self.sink_failures = 0
        self.text_ok = True
        self.pages: Set[str] = set()
        self.pages_before: Set[str] = set()  # pages in the directory before the run: not ours
        self.reports_at_start = 0
        self.seen_at_start = 0
        self.bytes_at_start = 0
        self.last_reports = 0
        self.forecast: Any = None
        self.last_report: Any = None
        self.last_gathered: Any = None
        self.announced = False

    @property
    def model(self) -> Any:
        return self._model()

    @property
    def optimizers(self) -> List[Any]:
        return [o for o in (r() for r in self._optimizers) if o is not None]

    # -- guards -------------------------------------------------------------------------------
    def _guard(self, part: str, fn: Callable[[], Any]) -> Any:
        """fn(), or None when it raised: the exception logged once (with its traceback) and the
        part turned off for the rest of the run."""
        if part in self.failed:
            return None
        try:
            return fn()
        except Exception:  # noqa: BLE001 -- never into the training loop
            self.failed.add(part)
            log.warning("%s: %s failed and is off for the rest of this run", self.name, part,
                        exc_info=True)
            return None

    def _scalars(self, values: Dict[str, float], step: int) -> None:
        if self.sink is None or not values or self.sink_failures >= 3:
            return
        named = {self.options.prefix + k: float(v) for k, v in values.items()}
        try:
            self.sink.scalars(named, step)
        except Exception as e:  # noqa: BLE001 -- a logger that refuses: ours stay out of it
            self.sink_failures += 1
            log.warning("%s: the logger refused tensorgc's scalars (%s: %s)%s", self.name,
                        type(e).__name__, e,
                        "; no more are sent to it" if self.sink_failures >= 3 else "")

    def _text(self, tag: str, text: str, step: int) -> None:
        if self.sink is None or not self.options.text or not self.text_ok:
            return
        try:
            self.sink.text(self.options.prefix + tag, _cut(text), step)
        except Exception as e:  # noqa: BLE001 -- a logger without text: scalars only
            self.text_ok = False
            log.info("%s: the logger takes no text (%s: %s); tensorgc sends it scalars only",
                     self.name, type(e).__name__, e)

    # -- the run ------------------------------------------------------------------------------
    def start(self, model: Any, optimizers: Sequence[Any], sink: Optional[Sink],
              log_dir: Optional[str] = None) -> None:
        """Once per run (a second start of a running Watcher is ignored)."""
        global _running
        if self.started:
            return
        if not isinstance(model, _module_type()):
            raise TypeError(f"the model must be a torch.nn.Module, not {type(model).__name__}")
        if _running is not None and _running is not self:
            log.warning("%s: another tensorgc integration is already watching this process "
                        "(%s); this one stays idle", self.name, _running.name)
            return
        _running = self
        self.started = True
        self.steps = 0
        self.at = 0
        self._model = _weak(model)
        self._optimizers = [_weak(o) for o in map(torch_optimizer, optimizers) if o is not None]
        self.sink = sink
        self.device = model_device(model)
        self.directory = self._guard("output directory", lambda: self._directory(log_dir))
        totals = self._guard("cycle counts", _cycle_totals) or {}
        self.reports_at_start = self.last_reports = totals.get("reports", 0)
        self.seen_at_start = totals.get("seen", 0)
        self.bytes_at_start = totals.get("bytes", 0)
        opts = self.options
        if opts.cycles and self.directory is not None:
            self.pages_before = set(self._guard("cycle pages", self._page_files) or ())
            self._guard("cycle detector", self._start_cycles)
        if opts.oom and self.device.startswith("cuda") and self.directory is not None:
            self._guard("OOM autopsy", self._start_oom)
        if opts.growth:
            self._guard("memory growth", self._start_growth)
        if self.directory is not None:
            where = "" if (info := rank_info()) is None else f" (rank {info.rank})"
            self.say(f"{self.name}: cycle pages and OOM autopsies{where} go to {self.directory}")

    def _directory(self, log_dir: Optional[str]) -> str:
        d = self.options.directory or get_output_dir()
        if d is None and log_dir:
            d = os.path.join(log_dir, "tensorgc")
        if d is None:
            d = tempfile.mkdtemp(prefix="tensorgc-")
        d = os.path.abspath(d)
        os.makedirs(d, 0o700, exist_ok=True)
        return d

    def _start_cycles(self) -> None:
        from ..cycles.observe import warn_tensor_cycles

        self.handles["cycles"] = warn_tensor_cycles(
            device=self.device if self.options.cycles_device is None else self.options.cycles_device,
            directory=self.directory,
            max_pages=self.options.max_pages, record_history=self.options.record_history)

    def _start_oom(self) -> None:
        import torch

        if not torch.cuda.is_available():
            return
        from ..allocator.oom import on_oom

        opt = self.optimizers[0] if self.optimizers else None
        self.handles["oom"] = on_oom(self.directory, model=self.model, optimizer=opt)

    def _start_growth(self) -> None:
        fn = growth_function()
        if fn is None:
            log.info("%s: this tensorgc has no warn_memory_growth: no slow-leak forecast",
                     self.name)
            return
        self.handles["growth"] = fn(self.device, callback=self._on_forecast,
                                    limit=self.options.growth_limit)

    def _on_forecast(self, forecast: Any) -> None:
        """warn_memory_growth's callback: the forecast goes to the logger at once."""
        self.forecast = forecast
        values: Dict[str, float] = {"growth_bytes_per_step": getattr(forecast, "bytes_per_step", 0)}
        left = getattr(forecast, "steps_left", None)
        if left is not None:
            values["growth_steps_left"] = left
        self._scalars(values, self.at)
        text = getattr(forecast, "text", None)
        if text:
            self._text("growth", str(text), self.at)

    def step(self, at: Optional[int] = None) -> None:
        """After an optimizer step: the forecast's step, a report when one is due, new pages.
        ``at``: the loop's own step number, which the logger is given (default: steps seen)."""
        if not self.started:
            return
        self.steps += 1
        self.at = self.steps if at is None else at
        g = self.handles.get("growth")
        if g is not None:
            self._guard("memory growth", g.step)
        every = self.options.report_every
        if every is not None and (self.steps == 1 or (every > 0 and self.steps % every == 0)):
            self._guard("memory report", self.report)
        self._guard("cycle pages", self._announce_pages)

    def report(self) -> None:
        """The memory report now: scalars (allocated, reserved, by category, cycles), the table
        as text, and on rank 0 of a distributed job every rank's row."""
        from ..reporter import MemReporter

        opts = self.options
        model = self.model
        if model is None:  # the run's model is gone: nothing of it to report
            return
        reporter = MemReporter(model)
        for o in self.optimizers:
            reporter.add_optimizer(o)
        info = rank_info()
        if opts.gather and info is not None and info.world_size > 1 and _group_ready():
            self._guard("gathered report", lambda: self._gather(reporter))
        rep = reporter.collect(device=self.device, owners=opts.owners)
        self.last_report = rep
        values = memory_scalars(rep, self.device)
        values.update(self.cycle_scalars())
        self._scalars(values, self.at)
        self._text("memory", rep.format(), self.at)

    def _gather(self, reporter: Any) -> None:
        from ..distributed.ranks import gather_report

        g = gather_report(self.device, reporter=reporter, show=False)
        if g is None:  # not rank 0
            return
        self.last_gathered = g
        values: Dict[str, float] = {}
        for s in g.ranks:
            if isinstance(s, dict) and isinstance(s.get("allocated"), int):
                values[f"rank{s['rank']}/allocated"] = s["allocated"]
        self._scalars(values, self.at)
        self._text("ranks", g.text, self.at)

    def cycle_scalars(self) -> Dict[str, float]:
        t = _cycle_totals()
        return {"cycles_found": t["seen"] - self.seen_at_start,
                "cycles_bytes": t["bytes"] - self.bytes_at_start}

    def _announce_pages(self) -> None:
        """Prints each new cycle page's path once; looks only when the detector reported."""
        if self.directory is None or "cycles" not in self.handles:
            return
        reports = _cycle_totals()["reports"]
        if reports == self.last_reports:
            return
        self.last_reports = reports
        self._scalars(self.cycle_scalars(), self.at)
        for path in self._page_files():
            if path not in self.pages and path not in self.pages_before and len(self.pages) < PAGES_MAX:
                self.pages.add(path)
                self.say(f"{self.name}: cycle page {path}")

    def _page_files(self) -> List[str]:
        """This rank's cycle pages in the directory (other ranks' may share it)."""
        from .._common.output import ranked

        mine = ranked("tensorgc-cycle-")
        out = []
        for entry in os.scandir(self.directory or "."):
            n = entry.name
            if (n.startswith(mine) and n.endswith(".html")
                    and (mine != "tensorgc-cycle-" or not n.startswith("tensorgc-cycle-rank"))):
                out.append(entry.path)
        return out

    def stop(self) -> None:
        """At the end of the run: the last pages announced, every part removed."""
        if not self.started:
            return
        self._guard("cycle pages", self._announce_pages)
        for part, h in list(self.handles.items()):
            self._guard(f"removing {part}", h if part == "oom" else h.remove)
        self.handles.clear()
        self.started = False
        global _running
        if _running is self:
            _running = None
        self._model = _none
        self._optimizers = []


def _none() -> Any:
    return None


def _weak(obj: Any) -> Callable[[], Any]:
    if obj is None:
        return _none
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _cycle_totals() -> Dict[str, int]:
    from ..cycles.dedup import cycle_totals

    return cycle_totals()


def _module_type() -> type:
    import torch

    return torch.nn.Module


def _group_ready() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # noqa: BLE001
        return False


def memory_scalars(rep: Any, device: str) -> Dict[str, float]:
    """allocated (CUDA: the allocator's; elsewhere the bytes of the tensors found), reserved
    (CUDA), and the bytes of each category (parameter, grad, ...)."""
    values: Dict[str, float] = {}
    t = rep.totals.get(device)
    if t is not None:
        if device.startswith("cuda") and t.get("allocated") is not None:
            values["allocated"] = t["allocated"]
            if t.get("reserved") is not None:
                values["reserved"] = t["reserved"]
        else:
            values["allocated"] = t["used"]
    by_kind = dict.fromkeys(KINDS, 0)
    for r in rep.rows:
        if r.device == device:
            by_kind[r.kind] = by_kind.get(r.kind, 0) + r.used
    values.update({f"memory/{k}": v for k, v in by_kind.items()})
    return values
