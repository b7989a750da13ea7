"""warn_memory_growth: a watch over a long job that notices memory growing steadily from step to
step, names what holds the growth (growth.py's checkpoint/growth) and forecasts when the device
runs out. Beside it: growth.py (what it calls to name holders), owner_chains.py (the chains).

Per step it takes one sample (watch_page.py draws the page; the trend test is _Trend, plain
arithmetic over a bounded window). Only when the trend says "steady growth" does it take a
checkpoint and, a few steps apart, two growth() calls, within a time budget.
"""
from __future__ import annotations

import ctypes
import logging
import math
import os
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Deque, Dict, FrozenSet, List, Optional,
                    Tuple, Union)

from .._common.devices import DeviceLike, parse_device
from .._common.output import output_dir, ranked
from .._common.rank import current_rank
from ..allocator.snapshot import atomic_write, write_failure
from .growth import Checkpoint, Growth, checkpoint, growth
from .watch_page import page_html

if TYPE_CHECKING:
    import torch

__all__ = ["Forecast", "GrowthWatch", "warn_memory_growth"]

logger = logging.getLogger("tensorgc")

_NAME_CUT = 200      # characters of a holder's name kept
_MAX_HOLDERS = 10    # holders named in a report
_SERIES = 1024       # points of the page's series (halved, keeping minima, when full)


def _size(n: float) -> str:
    """1024-based, one decimal: '32.0 MiB'."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024.0 or unit == "TiB":
            return f"{v:.0f} B" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024.0
    return f"{v:.1f} TiB"  # pragma: no cover


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _cut(s: str, n: int = _NAME_CUT) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


@dataclass
class Forecast:
    """What a report says (callback(forecast)): ``bytes_per_step`` (the trend), ``steps_left``
    (at this rate, steps until the device, or ``limit``, runs out; None when neither is known),
    ``holders`` ((name, bytes a step), largest first), ``text`` (the WARNING's paragraph)."""
    bytes_per_step: float
    steps_left: Optional[int]
    holders: List[Tuple[str, float]]
    text: str
    seconds_left: Optional[float] = None  # steps_left at the recent seconds a step
    since_step: int = 0                   # the first step of the growth, as far as seen
    step: int = 0                         # the step the report was made at
    device: str = ""
    rank: Optional[int] = None
    page: Optional[str] = None            # the page's path (None: none written, text says why)
    chains: List[str] = field(default_factory=list)  # each holder's owner chain, same order


class _Trend:
    """The trend test over the last ``window`` samples: ``blocks`` blocks of equal length, each
    reduced to its minimum (a step's transient memory, an evaluation's, a long sequence's, sits
    above the minimum and is ignored). Growth is steady when every block's minimum is above the
    one before by at least half the average rise a block and the average rise a step is at
    least ``min_rate``: one jump (optimizer state, a cache filled once, a queue filling up)
    raises one block and fails it; noise rarely gives five steady rises in a row. O(window) a
    call, bounded memory."""

    def __init__(self, window: int, blocks: int, min_rate: float) -> None:
        self.window = window
        self.blocks = blocks
        self.block = window // blocks
        self.min_rate = min_rate
        self.samples: Deque[Tuple[int, float]] = deque(maxlen=window)

    def push(self, step: int, value: float) -> None:
        self.samples.append((step, value))

    def clear(self) -> None:
        self.samples.clear()

    def rate(self) -> Optional[float]:
        """Bytes a step when the window holds steady growth, else None."""
        if len(self.samples) < self.window:
            return None
        vals = [v for _, v in self.samples]
        L = self.block
        mins = [min(vals[i * L:(i + 1) * L]) for i in range(self.blocks)]
        rise = mins[-1] - mins[0]
        per_block = rise / (self.blocks - 1)
        rate = per_block / L
        if not rate >= self.min_rate:  # NaN-proof
            return None
        if any(b - a < 0.5 * per_block for a, b in zip(mins, mins[1:])):
            return None
        return rate


class _Series:
    """(step, bytes) for the page: every step until full, then pairs merged (the smaller kept,
    the step-minimum view the trend reads), so it spans the whole run in at most _SERIES
    points."""

    def __init__(self) -> None:
        self.points: List[Tuple[int, float]] = []
        self.stride = 1
        self._pending: Optional[Tuple[int, float]] = None
        self._count = 0

    def add(self, step: int, value: float) -> None:
        cur = self._pending
        cur = (step, value) if cur is None or value < cur[1] else cur
        self._count += 1
        if self._count < self.stride:
            self._pending = cur
            return
        self._pending, self._count = None, 0
        self.points.append(cur)
        if len(self.points) >= _SERIES:
            pts = self.points
            self.points = [min(pts[i:i + 2], key=lambda p: p[1]) for i in range(0, len(pts), 2)]
            self.stride *= 2


# --- sampling: what a step costs us ---------------------------------------------------------

class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _malloc_sampler() -> Optional[Callable[[], float]]:
    """glibc's mallinfo2(): the bytes malloc has handed out and not had back (uordblks, in its
    arenas, plus hblkhd, mapped on their own), which is where torch's CPU allocator takes every
    CPU storage, saved-for-backward ones included; freed memory malloc keeps (its cache) does
    not count. About 5 us a call. None where the C library has no mallinfo2 (glibc < 2.33,
    musl)."""
    try:
        libc = ctypes.CDLL(None)
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []

    def sample() -> float:
        m = fn()
        return float(m.uordblks + m.hblkhd)
    return sample


def _tensor_sampler() -> Callable[[], float]:
    """The bytes of the live CPU tensors' storages, each storage once, from the index of live
    tensors (reporter/index.c, held on by the watch): one read of the young generations and the
    index, then the storages' keys in C. Misses what only autograd's graphs hold; costs about
    1 us a live tensor."""
    from .. import _tensorgc

    def sample() -> float:
        tensors = _tensorgc._live_tensors()
        try:
            return float(_tensorgc._storage_keys(tensors, ("cpu", None), None)[3])
        finally:
            del tensors
    return sample


def _cuda_sampler(index: int) -> Callable[[], float]:
    """The allocator's "allocated_bytes.all.current" counter. torch.cuda.memory_allocated gives
    the same number through memory_stats(), which flattens and sorts every counter into a new
    dict first (tens of microseconds a call); torch's own nested dict is read instead where
    torch has it."""
    import torch

    raw = getattr(torch._C, "_cuda_memoryStats", None)

    def sample() -> float:
        if raw is not None:
            try:
                return float(raw(index)["allocated_bytes"]["all"]["current"])
            except (KeyError, TypeError):
                pass
        return float(torch.cuda.memory_allocated(index))
    return sample


def _headroom(dev: str, index: Optional[int], current: float,
              limit: Optional[float]) -> Tuple[Optional[float], str]:
    """(bytes left before running out, where that figure comes from)."""
    if limit is not None:
        return limit - current, f"the limit of {_size(limit)}"
    if dev != "cuda":
        return None, ""
    try:
        import torch
        free, total = torch.cuda.mem_get_info(index)
        cached = torch.cuda.memory_reserved(index) - torch.cuda.memory_allocated(index)
        return float(free + max(cached, 0)), (f"the device's {_size(total)} "
                                              f"({_size(free)} free, {_size(max(cached, 0))} "
                                              f"cached by the allocator)")
    except Exception:  # noqa: BLE001 -- no memory info: no forecast
        return None, ""


# --- the watch --------------------------------------------------------------------------------

@dataclass
class _Probe:
    """An investigation under way: the checkpoint at step ``start`` and what growth() said."""
    start: int
    rate: float
    cp: Optional[Checkpoint]
    first: Optional[Growth] = None
    first_step: int = 0
    spent: float = 0.0


class GrowthWatch:
    """The handle warn_memory_growth returns: ``remove()`` (or ``with``), ``step()`` for a loop
    without a torch optimizer, ``active``, ``reports`` (the Forecasts made), ``stats()``."""

    def __init__(self, device: str, dev_type: str, index: Optional[int],
                 sample: Callable[[], float], source: str, *,
                 callback: Optional[Callable[[Forecast], object]], limit: Optional[float],
                 warmup: int, window: int, blocks: int, confirm: int, min_rate: float,
                 budget: float, allowance: float, directory: Optional[str], page: bool,
                 max_objects: Optional[int], clock: Callable[[], float]) -> None:
        self.device = device
        self._dev_type = dev_type
        self._index = index
        self._sample = sample
        self.source = source
        self._callback = callback
        self._limit = limit
        self._warmup = warmup
        self._confirm = confirm
        self._min_rate = min_rate
        self._budget = budget
        self._allowance = allowance
        self._directory = directory
        self._page = page
        self._max_objects = max_objects
        self._clock = clock
        self._trend = _Trend(window, blocks, min_rate)
        self._series = _Series()
        self._times: Deque[float] = deque(maxlen=window)  # step timestamps, for seconds a step
        self._lock = threading.RLock()  # guards everything below; step() from any thread
        self._active = True
        self._steps = 0
        self._manual = False  # step() was called: the optimizer hook no longer counts steps
        self._leader: Optional[Any] = None  # weakref to the optimizer whose step counts
        self._probe: Optional[_Probe] = None
        self._cooldown_until = 0
        self._started = clock()
        self._spent = 0.0         # seconds in investigations
        self._sample_seconds = 0.0
        self._investigations = 0
        self._bad_samples = 0
        self._reported: List[FrozenSet[str]] = []  # holder sets told, bounded
        self._holder_series: Dict[str, List[Tuple[int, float]]] = {}
        self.reports: List[Forecast] = []
        self._hook: Any = None
        self._index_held = False

    # the public face

    @property
    def active(self) -> bool:
        return self._active

    def step(self) -> None:
        """One training step done: sample and decide. Never raises (what goes wrong is logged
        on logger "tensorgc"). Once called, the optimizer hook stops counting steps for this
        watch, so a loop that calls it beside an optimizer counts each step once."""
        self._manual = True
        self._guarded_step()

    def remove(self) -> None:
        """Stops the watch: the optimizer hook goes, an investigation's checkpoint is dropped.
        Safe to call twice, from the callback, or from another thread."""
        with self._lock:
            self._active = False
            hook, self._hook = self._hook, None
            self._probe = None
            held, self._index_held = self._index_held, False
        if hook is not None:
            try:
                hook.remove()
            except Exception:  # noqa: BLE001
                pass
        if held:
            from .. import _tensorgc
            _tensorgc._index_release()

    def __enter__(self) -> "GrowthWatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def stats(self) -> Dict[str, Any]:
        """What the watch cost and did: steps, seconds sampling, investigations and their
        seconds, reports, samples refused (not a finite number of bytes >= 0)."""
        return {"steps": self._steps, "sample_seconds": self._sample_seconds,
                "investigations": self._investigations, "investigation_seconds": self._spent,
                "reports": len(self.reports), "bad_samples": self._bad_samples,
                "source": self.source}

    # the optimizer's hook

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._manual or not self._active:
            return
        leader = self._leader() if self._leader is not None else None
        if leader is None:
            try:
                self._leader = weakref.ref(optimizer)
            except TypeError:
                self._leader = None
        elif leader is not optimizer:
            return  # several optimizers: one step is the first one's
        self._guarded_step()

    def _guarded_step(self) -> None:
        try:
            told = self._step()
        except Exception:  # noqa: BLE001 -- the tool never hurts the job
            logger.exception("tensorgc: warn_memory_growth: a step's check failed; the job "
                             "goes on")
            return
        if told is not None:
            self._tell(told)

    def _step(self) -> Optional[Forecast]:
        with self._lock:
            if not self._active:
                return None
            self._steps += 1
            step = self._steps
            t0 = self._clock()
            try:
                value = float(self._sample())
            finally:
                self._sample_seconds += self._clock() - t0
            if not (math.isfinite(value) and value >= 0):
                self._bad_samples += 1
                if self._bad_samples == 1:
                    logger.warning("tensorgc: warn_memory_growth: a sample of %s was %r, not a "
                                   "number of bytes; such samples are skipped", self.device,
                                   value)
                return None
            self._times.append(t0)
            self._series.add(step, value)
            if step <= self._warmup:
                return None
            self._trend.push(step, value)
            rate = self._trend.rate()
            probe = self._probe
            if probe is None:
                if rate is None or step < self._cooldown_until or not self._may_spend():
                    return None
                self._begin(step, rate)
                return None
            looks = step - probe.start == self._confirm or step - probe.start >= 2 * self._confirm
            if not looks:
                return None
            if rate is None:  # the growth stopped while we looked: not steady after all
                self._end(step)
                return None
            if step - probe.start == self._confirm:
                self._first_look(step, probe)
                return None
            return self._second_look(step, probe, rate, value)

    def _may_spend(self) -> bool:
        elapsed = self._clock() - self._started
        return self._spent <= self._allowance + self._budget * elapsed

    def _begin(self, step: int, rate: float) -> None:
        t = self._clock()
        try:
            cp = checkpoint(self.device)
        finally:
            self._spent += self._clock() - t
        self._investigations += 1
        self._probe = _Probe(step, rate, cp)

    def _growth(self, probe: _Probe) -> Optional[Growth]:
        if probe.cp is None:
            return None
        t = self._clock()
        try:
            return growth(probe.cp, max_objects=self._max_objects)
        finally:
            self._spent += self._clock() - t

    def _first_look(self, step: int, probe: _Probe) -> None:
        probe.first = self._growth(probe)
        probe.first_step = step

    def _end(self, step: int) -> None:
        self._probe = None  # drops the checkpoint, and its hold on the index
        self._cooldown_until = step + self._trend.window

    def _second_look(self, step: int, probe: _Probe, rate: float,
                     value: float) -> Optional[Forecast]:
        second = self._growth(probe)
        first = probe.first
        self._end(step)
        if second is None or first is None:
            return None
        span = step - probe.first_step
        before = {h: (b, n) for h, b, n, _ in first.groups}
        holders: List[Tuple[str, float, float, str]] = []  # name, bytes a step, storages, chain
        for h, b, n, chain in second.groups:
            b0, n0 = before.get(h, (0, 0))
            if b > b0:
                holders.append((h, (b - b0) / span, (n - n0) / span, chain))
        holders.sort(key=lambda x: -x[1])
        named = sum(x[1] for x in holders)
        if named < 0.5 * self._min_rate:
            return None  # the sampled growth is no tensor storage that lives on
        holders = [x for x in holders if x[1] >= 0.05 * named][:_MAX_HOLDERS]
        key = frozenset(h for h, _, _, _ in holders)
        if key in self._reported:
            return None
        self._reported.append(key)
        del self._reported[:-100]
        for h, per, _, _ in holders:
            pts = self._holder_series.setdefault(h, [])
            pts.append((step, per))
            del pts[:-100]
        return self._forecast(step, rate, value, holders)

    def _since(self, rate: float) -> int:
        """The first step of the growth: back through the page's series while each point is
        below the next by at least half the rate."""
        pts = self._series.points
        i = len(pts) - 1
        while i > 0:
            s1, v1 = pts[i]
            s0, v0 = pts[i - 1]
            if v1 - v0 < 0.5 * rate * (s1 - s0) or s0 <= self._warmup:
                break
            i -= 1
        return max(pts[i][0] if pts else 1, 1)

    def _seconds_a_step(self) -> Optional[float]:
        ts = list(self._times)
        if len(ts) < 2:
            return None
        gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
        return gaps[len(gaps) // 2]

    def _forecast(self, step: int, rate: float, value: float,
                  holders: List[Tuple[str, float, float, str]]) -> Forecast:
        since = self._since(rate)
        room, of_what = _headroom(self._dev_type, self._index, value, self._limit)
        steps_left: Optional[int] = None
        seconds_left: Optional[float] = None
        if room is not None:
            steps_left = max(int(room / rate), 0)
            per = self._seconds_a_step()
            if per is not None:
                seconds_left = steps_left * per
        rank = current_rank()
        who = f"rank {rank}'s " if rank is not None else ""
        parts = []
        for h, per_step, n, chain in holders:
            kind = _holder_type(chain)
            count = (f"+{n:.3g} tensor{'s' if n != 1 else ''} a step, " if n > 0 else
                     "one storage growing, ")
            parts.append(f"{_cut(h)}{f' ({kind})' if kind else ''}: {count}"
                         f"{_size(per_step)} a step"
                         + (f" [{_cut(chain, 400)}]" if chain and chain != h else ""))
        held = "; ".join(parts) if parts else "no holder named"
        if steps_left is not None:
            when = (f"at this rate {who}{self.device} runs out in about {steps_left:,} steps"
                    + (f" (about {_duration(seconds_left)})" if seconds_left is not None else "")
                    + f", from {of_what}")
        elif self._dev_type == "cuda":
            text_limit = "the device gave no memory information; pass limit= (bytes)"
            when = f"no forecast: {text_limit}"
        else:
            when = (f"no forecast: {self.device} has no memory total to run out of; pass "
                    f"limit= (bytes) for one")
        text = (f"tensorgc: {who}{self.device} memory grows by {_size(rate)} a step since step "
                f"{since} (now {_size(value)} at step {step}); held by {held}; {when}")
        fc = Forecast(rate, steps_left, [(_cut(h), per) for h, per, _, _ in holders], text,
                      seconds_left, since, step, self.device, rank,
                      chains=[_cut(c, 2000) for _, _, _, c in holders])
        return fc

    def _tell(self, fc: Forecast) -> None:
        """The report: the page, the WARNING, the callback (outside the lock: the callback may
        call remove() or step())."""
        path: Optional[str] = None
        why = ""
        if self._page:
            try:
                html = page_html(fc, list(self._series.points), dict(self._holder_series))
                where = self._directory if self._directory is not None else output_dir(
                    tempfile.gettempdir())
                path = atomic_write(where, lambda f: f.write(html),
                                    unique=(ranked("tensorgc-growth-"), ".html"))
            except Exception as exc:  # noqa: BLE001 -- the warning comes anyway
                why = write_failure(exc)
        fc.page = path
        fc.text += (f"; picture: {path}" if path else f"; no page written: {why}" if why else "")
        with self._lock:
            self.reports.append(fc)
            del self.reports[:-100]
        logger.warning("%s", fc.text)
        if self._callback is not None:
            try:
                self._callback(fc)
            except Exception:  # noqa: BLE001
                logger.exception("tensorgc: warn_memory_growth: the callback raised; the job "
                                 "goes on")


def _holder_type(chain: str) -> str:
    """The type of a module global's holder ("module __main__ .history [3]" -> "list"), read
    from sys.modules without calling user code; "" for any other chain."""
    if not chain.startswith("module "):
        return ""
    parts = chain.split(" ")
    if len(parts) < 3 or not parts[2].startswith("."):
        return ""
    mod = sys.modules.get(parts[1])
    d = getattr(mod, "__dict__", None)
    if not isinstance(d, dict):
        return ""
    obj = d.get(parts[2][1:], _MISSING)
    return "" if obj is _MISSING else _cut(type(obj).__name__, 80)


_MISSING = object()


def warn_memory_growth(device: Optional[DeviceLike] = "cuda", *,
                       callback: Optional[Callable[[Forecast], object]] = None,
                       limit: Optional[float] = None, warmup: int = 5, window: int = 30,
                       confirm: int = 4, min_bytes_per_step: float = 64 * 1024,
                       budget: float = 0.01, allowance: float = 5.0,
                       directory: Union[str, os.PathLike[str], None] = None,
                       page: bool = True, max_objects: Optional[int] = None,
                       sample: Optional[Callable[[], float]] = None,
                       optimizer_hook: bool = True,
                       clock: Callable[[], float] = time.monotonic) -> GrowthWatch:
    """Warn when memory grows steadily from step to step; name what holds it; forecast the OOM.

    After each optimizer step (torch's global optimizer step hook; the first optimizer that
    steps counts), or each ``step()`` on the returned handle, one sample of ``device``'s
    memory: CUDA, torch.cuda.memory_allocated (the allocator's counter: its cache never
    counts); CPU, glibc's in-use heap bytes (mallinfo2), else the live CPU tensors' storages
    from the index of live tensors. ``sample``: a function of no arguments giving bytes,
    instead. See docs/api.md for the trend test, its parameters and what it costs."""
    if device is None:
        device = "cuda"
    kind, index = parse_device(device)
    if kind not in ("cuda", "cpu") and sample is None:
        raise ValueError(f"tensorgc: warn_memory_growth: no sampler for device {device!r}; "
                         f"pass sample= (a function giving bytes)")
    for name, v in (("warmup", warmup), ("window", window), ("confirm", confirm)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"tensorgc: warn_memory_growth: {name} must be an int >= 0, "
                             f"not {v!r}")
    if window < 12:
        raise ValueError(f"tensorgc: warn_memory_growth: window must be at least 12 steps, "
                         f"not {window}")
    if confirm < 1:
        raise ValueError("tensorgc: warn_memory_growth: confirm must be at least 1 step")
    if limit is not None and not (isinstance(limit, (int, float)) and math.isfinite(limit)
                                  and limit > 0):
        raise ValueError(f"tensorgc: warn_memory_growth: limit must be a number of bytes > 0, "
                         f"not {limit!r}")
    if not (min_bytes_per_step > 0 and math.isfinite(min_bytes_per_step)):
        raise ValueError("tensorgc: warn_memory_growth: min_bytes_per_step must be > 0")
    if not (0 <= budget <= 1 and allowance >= 0):
        raise ValueError("tensorgc: warn_memory_growth: budget must be in [0, 1] and "
                         "allowance >= 0")
    if callback is not None and not callable(callback):
        raise TypeError("tensorgc: warn_memory_growth: callback must be callable")
    where: Optional[str] = None
    if directory is not None:
        where = os.fspath(directory)
        if not os.path.isdir(where):
            raise NotADirectoryError(f"tensorgc: warn_memory_growth: not a directory: "
                                     f"{where!r}")
    import torch
    held = False
    if sample is not None:
        if not callable(sample):
            raise TypeError("tensorgc: warn_memory_growth: sample must be callable")
        fn, source = sample, "the sample function given"
    elif kind == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"tensorgc: warn_memory_growth(device={device!r}): "
                             f"torch.cuda.is_available() is False; device='cpu' watches the "
                             f"CPU's memory")
        if index is None:
            index = torch.cuda.current_device()
        fn, source = _cuda_sampler(index), "torch.cuda.memory_allocated"
    else:
        m = _malloc_sampler()
        if m is not None:
            fn, source = m, "malloc's in-use bytes (mallinfo2)"
        else:
            from .. import _tensorgc
            held = _tensorgc._index_hold()
            if not held:
                _tensorgc._index_release()
            fn, source = _tensor_sampler(), "the live CPU tensors' storages"
    name = kind if index is None else f"{kind}:{index}"
    w = GrowthWatch(name, kind, index, fn, source, callback=callback,
                    limit=float(limit) if limit is not None else None, warmup=warmup,
                    window=window - window % 6, blocks=6, confirm=confirm,
                    min_rate=float(min_bytes_per_step), budget=float(budget),
                    allowance=float(allowance), directory=where, page=page,
                    max_objects=max_objects, clock=clock)
    w._index_held = held
    if optimizer_hook:
        import torch.optim.optimizer as _opt

        # torch's hook table holds the watch until remove(): a handle not kept still watches
        w._hook = _opt.register_optimizer_step_post_hook(w._on_optimizer_step)
    logger.info("tensorgc: watching %s memory for steady growth (%s a step)", name, source)
    return w
