"""Line-by-line memory profiler with pytorch_memlab's API: LineProfiler, profile, profile_every,
set_target_gpu, clear_global_line_profiler.

The work is C (reporter/lineprof.c folds the readings; reporter/lineprof_events.c takes them). On
Python 3.12+ the events come from sys.monitoring for the registered code objects only, so the
rest of the program runs at full speed even while a profiler is enabled; on 3.10/3.11 a C trace
function listens on the threads it is installed on. Nothing is traced until a function is
decorated or a profiler is enabled.

The source of each reading is the CUDA caching allocator of the target device
(torch.cuda.memory_stats: every key is a column) when CUDA is available, else the process's
resident memory (rss_bytes.all.current / .peak). Each "X.current" key also gives "X.delta", the
change over the line. Peaks are per line: the source's peak counter is reset at each event of a
profiled function, as memlab does (torch.cuda.max_memory_allocated() is per line while a
profiler runs).

    with LineProfiler(train_step) as lp:
        train_step()
    lp.print_stats()

The subpackage tensorgc.lineprof is this module; beside it: magics.py (``%load_ext tensorgc``:
%mlrun and %%mlrun) and courtesy.py (memlab's Courtesy: tensors moved off the GPU and back).
"""
from __future__ import annotations

import atexit
import functools
import html as _html
import inspect
import linecache
import logging
import sys
import threading
from types import CodeType, FrameType, TracebackType
from typing import (Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple, Type,
                    TypedDict, TypeVar, Union, cast, overload)

from .. import _tensorgc
from .._common.devices import DeviceLike, cuda_index
from .._common.units import readable_size

__all__ = ["LineProfiler", "LineStats", "profile", "profile_every", "set_target_gpu",
           "clear_global_line_profiler", "global_line_profiler", "DEFAULT_COLUMNS"]

DEFAULT_COLUMNS = ("active_bytes.all.peak", "reserved_bytes.all.peak")
RSS_COLUMNS = ("rss_bytes.all.peak", "rss_bytes.all.delta")
_log = logging.getLogger("tensorgc")

F = TypeVar("F", bound=Callable[..., Any])
Columns = Union[str, Sequence[str]]
# which functions display() shows: one, its qualified name, or a list of them; None for all
Functions = Union[None, str, Callable[..., Any], Sequence[Union[str, Callable[..., Any]]]]


class FunctionRecord(TypedDict):
    """One profiled function in LineStats.functions: its code, the function, and per line
    number (hits, the columns' values)."""
    code: CodeType
    func: Callable[..., Any]
    lines: Dict[int, Tuple[int, List[int]]]


def _monitoring() -> Any:
    """sys.monitoring (3.12+; typed here as Any: the type checker may target 3.11)."""
    return getattr(sys, "monitoring")


def _code_of(func: object) -> CodeType:
    """The code object to watch: functions, methods, static/class methods, partials' targets."""
    f: Any = func
    while isinstance(f, functools.partial):
        f = f.func
    if isinstance(f, (staticmethod, classmethod)):
        f = f.__func__
    f = getattr(f, "__func__", f)  # bound methods
    code = getattr(f, "__code__", None)
    if code is None or not inspect.iscode(code):
        raise TypeError(f"cannot profile {func!r}: it has no Python code object "
                        "(a builtin or a C function?)")
    return code


def _device_index(gpu: DeviceLike) -> int:
    """target_gpu as an index: 0, "0", "cuda:1", "cuda" (device 0) or a torch.device (the
    package's one device syntax, tensorgc/_common/devices.py)."""
    index = cuda_index(gpu, "target_gpu", "the line profiler reads a CUDA device's allocator "
                                          "(without CUDA it reads the process's memory itself)")
    return 0 if index is None else index


def _cuda_available() -> bool:
    torch: Any = sys.modules.get("torch")
    if torch is None:
        try:
            import torch as imported
        except ImportError:
            return False
        torch = imported
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver is "no CUDA" for the profiler
        return False


class _Events:
    """Routes the interpreter's events to the C entry points: sys.monitoring on 3.12+, the C
    trace function before. Shared by every profiler and every thread: protected by `lock`, which
    LineProfiler's enable, disable, add_function and clear hold (the GIL alone would not do: a
    thread switch can fall between the read and the write of a count)."""

    lock = threading.RLock()
    LOCAL = 0
    watched: Dict[int, List[Any]] = {}  # id(code) -> [code, enabled profilers watching it]
    tool: Optional[int] = None
    enabled = 0                      # enabled profilers
    prev_thread_hook: Optional[Callable[..., Any]] = None

    @classmethod
    def _acquire_tool(cls) -> None:
        mon = _monitoring()
        for tid in (3, 4, mon.PROFILER_ID):
            try:
                mon.use_tool_id(tid, "tensorgc")
            except ValueError:
                continue
            E = mon.events
            mon.register_callback(tid, E.PY_START, _tensorgc._lp_start)
            mon.register_callback(tid, E.PY_RESUME, _tensorgc._lp_resume)
            mon.register_callback(tid, E.PY_THROW, _tensorgc._lp_resume)
            mon.register_callback(tid, E.LINE, _tensorgc._lp_line)
            mon.register_callback(tid, E.PY_RETURN, _tensorgc._lp_leave)
            mon.register_callback(tid, E.PY_YIELD, _tensorgc._lp_leave)
            mon.register_callback(tid, E.PY_UNWIND, _tensorgc._lp_leave)
            # unwinding and throwing cannot be asked per code object; the C side drops the
            # events of code no profiler watches after one pointer comparison
            mon.set_events(tid, E.PY_UNWIND | E.PY_THROW)
            cls.LOCAL = E.PY_START | E.PY_RESUME | E.LINE | E.PY_RETURN | E.PY_YIELD
            cls.tool = tid
            return
        raise RuntimeError("tensorgc's line profiler found no free sys.monitoring tool id "
                           "(3, 4 and the profiler's are taken)")

    @classmethod
    def _release_tool(cls) -> None:
        mon = _monitoring()
        E = mon.events
        mon.set_events(cls.tool, 0)
        for ev in (E.PY_START, E.PY_RESUME, E.PY_THROW, E.LINE, E.PY_RETURN, E.PY_YIELD,
                   E.PY_UNWIND):
            mon.register_callback(cls.tool, ev, None)
        mon.free_tool_id(cls.tool)
        cls.tool = None

    @classmethod
    def watch(cls, code: CodeType) -> None:
        ent = cls.watched.get(id(code))
        if ent is not None:
            ent[1] += 1
            return
        cls.watched[id(code)] = [code, 1]
        if cls.tool is not None:
            _monitoring().set_local_events(cls.tool, code, cls.LOCAL)

    @classmethod
    def unwatch(cls, code: CodeType) -> None:
        ent = cls.watched.get(id(code))
        if ent is None:
            return
        ent[1] -= 1
        if ent[1] <= 0:
            del cls.watched[id(code)]
            if cls.tool is not None:
                _monitoring().set_local_events(cls.tool, code, 0)

    @classmethod
    def start(cls, codes: Sequence[CodeType]) -> None:
        if MONITORING and cls.tool is None:
            cls._acquire_tool()
            for code, _ in cls.watched.values():
                _monitoring().set_local_events(cls.tool, code, cls.LOCAL)
        for code in codes:
            cls.watch(code)
        cls.enabled += 1
        if not MONITORING and cls.enabled == 1:
            _tensorgc._lp_settrace(True)
            cls.prev_thread_hook = threading.gettrace() if hasattr(threading, "gettrace") else None
            threading.settrace(_thread_hook)

    @classmethod
    def stop(cls, codes: Sequence[CodeType]) -> None:
        for code in codes:
            cls.unwatch(code)
        cls.enabled -= 1
        if cls.enabled == 0:
            if MONITORING and cls.tool is not None:
                cls._release_tool()
            elif not MONITORING:
                _tensorgc._lp_settrace(False)
                if threading.gettrace() is _thread_hook:  # else a hook set since stays
                    threading.settrace(cls.prev_thread_hook)
                cls.prev_thread_hook = None


MONITORING = hasattr(sys, "monitoring")


def _thread_hook(frame: FrameType, event: str, arg: Any) -> Any:
    """threading.settrace's hook (3.10/3.11). The program's own thread hook runs first, as if
    the profiler were not there, on the tracer threading.settrace would have given the thread
    (it may put its own on the thread: coverage's does); then the C tracer goes on top of
    whatever the thread has, and calls that first on every event."""
    prev = _Events.prev_thread_hook
    result = None
    sys.settrace(prev)  # in place of this hook: the thread's tracer without the profiler
    if prev is not None:
        result = prev(frame, event, arg)
    _tensorgc._lp_thread_hook(frame, event, arg)
    return result


class LineProfiler:
    """Profile the memory of each line of the given functions (pytorch_memlab's LineProfiler).

    LineProfiler(*functions, target_gpu=0): the source is torch.cuda.memory_stats(target_gpu)
    when CUDA is available, else the process's resident memory; ``source`` says which. Use it as
    a context manager, or enable()/disable(). Records fold over calls: peaks keep the max,
    deltas and counters add up; a profiled function called from a profiled line is charged to
    that line too.
    """

    def __init__(self, *functions: Callable[..., Any], target_gpu: DeviceLike = 0) -> None:
        self._core = _tensorgc._LineProfiler()
        self._funcs: Dict[int, Tuple[CodeType, Callable[..., Any]]] = {}  # id(code) -> (code, func)
        self._target = _device_index(target_gpu)
        self.enabled = False
        for func in functions:
            self.add_function(func)

    # -- memlab's API ---------------------------------------------------------------------
    @property
    def target_gpu(self) -> int:
        return self._target

    @target_gpu.setter
    def target_gpu(self, gpu: DeviceLike) -> None:
        self._target = _device_index(gpu)
        if self.enabled and self._core.source == "cuda":
            self._set_source()

    def add_function(self, func: F) -> F:
        """Watch this function's lines (also while enabled). Returns it, so it decorates."""
        code = _code_of(func)
        with _Events.lock:
            if id(code) not in self._funcs:
                self._funcs[id(code)] = (code, func)
                self._core.add_code(code)
                if self.enabled:
                    _Events.watch(code)
        return func

    def _set_source(self) -> None:
        if _cuda_available():
            import torch
            torch.cuda.init()  # type: ignore[no-untyped-call]  # the counters need it first
            n = torch.cuda.device_count()
            if self._target >= n:
                raise ValueError(f"target_gpu {self._target} does not exist: {n} CUDA device(s)")
            self._core.set_source("cuda", self._target, torch._C._cuda_memoryStats,
                                  torch._C._cuda_resetPeakMemoryStats)
        else:
            self._core.set_source("rss")

    def enable(self) -> None:
        """Start profiling the registered functions."""
        with _Events.lock:
            if self.enabled:
                return
            self._set_source()
            self._core.enable()
            try:
                _Events.start([c for c, _ in self._funcs.values()])
            except BaseException:
                self._core.disable()
                raise
            self.enabled = True

    def disable(self) -> None:
        """Stop profiling; lines still running are not recorded."""
        with _Events.lock:
            if not self.enabled:
                return
            self.enabled = False
            try:
                _Events.stop([c for c, _ in self._funcs.values()])
            finally:
                self._core.disable()

    def __enter__(self) -> LineProfiler:
        self.enable()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.disable()

    def clear(self) -> None:
        """Forget the records and the functions (memlab's clear)."""
        with _Events.lock:
            was = self.enabled
            self.disable()
            self._core.clear(True)
            self._funcs.clear()
            if was:
                self.enable()

    @property
    def source(self) -> str:
        """Where the numbers come from, in words."""
        if self._core.source == "cuda":
            return f"cuda:{self._core.device} (torch.cuda.memory_stats)"
        note = "" if self._core.peak_resettable else "; peaks are the process's, not per line"
        return f"process resident memory (no CUDA: /proc/self/statm, getrusage{note})"

    @property
    def lines_recorded(self) -> int:
        return self._core.lines

    def columns(self) -> List[str]:
        """Every valid column name for this profiler's source."""
        keys = list(self._core.keys)
        return keys + [k[:-len("current")] + "delta" for k in keys if k.endswith(".current")]

    def display(self, func: Functions = None, columns: Columns = DEFAULT_COLUMNS) -> LineStats:
        """The records as an object with a text form (str) and _repr_html_ (for notebooks).
        ``func``: a function, a qualified name, or a list of them; None for all."""
        return LineStats(self, func, columns)

    def print_stats(self, func: Functions = None, columns: Columns = DEFAULT_COLUMNS,
                    stream: Optional[TextIO] = None) -> None:
        """Print the text table to ``stream`` (sys.stdout)."""
        (stream or sys.stdout).write(str(self.display(func, columns)))


class LineStats:
    """What display() returns: str() is the text table, _repr_html_ the notebook's."""

    def __init__(self, prof: LineProfiler, func: Functions, columns: Columns) -> None:
        self.source: str = prof.source
        self.columns: List[str] = self._resolve_columns(prof, columns)
        keys = list(prof._core.keys)
        self._index: List[Tuple[str, int]] = []
        self.functions: List[FunctionRecord] = []
        if not keys:  # never enabled: nothing was recorded
            return
        for col in self.columns:
            if col.endswith(".delta"):
                self._index.append(("b", keys.index(col[:-len("delta")] + "current")))
            else:
                k = keys.index(col)
                leaf = col.rsplit(".", 1)[-1]
                self._index.append(("a" if leaf in ("peak", "current") else "b", k))
        wanted = self._wanted(func)
        by_code: Dict[int, FunctionRecord] = {}
        for code, line, hits, maxes, sums in prof._core.records():
            entry = prof._funcs.get(id(code))
            if entry is None or (wanted is not None and not self._match(entry[1], wanted)):
                continue
            vals = [(maxes if which == "a" else sums)[k] for which, k in self._index]
            by_code.setdefault(id(code), {"code": code, "func": entry[1], "lines": {}})[
                "lines"][line] = (hits, vals)
        self.functions = list(by_code.values())

    @staticmethod
    def _resolve_columns(prof: LineProfiler, columns: Columns) -> List[str]:
        cols = [columns] if isinstance(columns, str) else list(columns)
        valid = prof.columns()
        if not valid:
            return cols  # never enabled: nothing to show, nothing to check against
        if prof._core.source == "rss" and cols[:2] == list(DEFAULT_COLUMNS):
            cols = list(RSS_COLUMNS) + cols[2:]  # memlab's defaults are CUDA's
        bad = [c for c in cols if c not in valid]
        if bad:
            raise ValueError(f"unknown column(s) {', '.join(map(repr, bad))} for source "
                             f"{prof.source}; valid columns: {', '.join(valid)}")
        return cols

    @staticmethod
    def _wanted(func: Functions) -> Optional[List[Union[str, CodeType]]]:
        if func is None:
            return None
        items = func if isinstance(func, (list, tuple, set)) else [func]
        return [f if isinstance(f, str) else _code_of(f) for f in items]

    @staticmethod
    def _match(f: Callable[..., Any], wanted: Sequence[Union[str, CodeType]]) -> bool:
        code = _code_of(f)
        return any(w is code or (isinstance(w, str) and w == getattr(f, "__qualname__", ""))
                   for w in wanted)

    def _rows(self, fn: FunctionRecord
              ) -> List[Tuple[int, Optional[int], Optional[List[int]], str]]:
        """(line, hits or None, values or None, source text) for every line of the function, and
        for every recorded line that the source found does not cover."""
        code = fn["code"]
        try:
            src, start = inspect.getsourcelines(code)
        except Exception:  # OSError, TypeError; TokenError, SyntaxError... from a file that no
            src, start = [], 0  # longer holds the code: the recorded lines are shown below
        out: List[Tuple[int, Optional[int], Optional[List[int]], str]] = []
        for i, text in enumerate(src):
            ln = start + i
            hits, vals = fn["lines"].get(ln, (None, None))
            out.append((ln, hits, vals, text.rstrip("\n")))
        shown = {row[0] for row in out}
        out += [(ln, *fn["lines"][ln], linecache.getline(code.co_filename, ln).rstrip("\n"))
                for ln in fn["lines"] if ln not in shown]
        out.sort(key=lambda row: row[0])
        return out

    def _fmt(self, col: str, v: Optional[int]) -> str:
        if v is None:
            return ""
        return readable_size(v) if "bytes" in col else f"{v:,}"

    def __str__(self) -> str:
        if not self.functions:
            return "No data collected\n"
        parts = []
        for fn in self.functions:
            rows = self._rows(fn)
            cells = [[str(ln), "" if h is None else str(h)]
                     + [self._fmt(c, None if vals is None else vals[i])
                        for i, c in enumerate(self.columns)] for ln, h, vals, _ in rows]
            heads = ["line", "hits"] + list(self.columns)
            width = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(heads)]
            name = getattr(fn["func"], "__qualname__", fn["code"].co_name)
            out = [f"## {name}  ({fn['code'].co_filename}; {self.source})", "",
                   "  ".join(h.rjust(w) for h, w in zip(heads, width)) + "  code"]
            for r, (_, _, _, text) in zip(cells, rows):
                out.append("  ".join(c.rjust(w) for c, w in zip(r, width)) + "  " + text)
            parts.append("\n".join(out) + "\n")
        return "\n\n".join(parts)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.functions:
            return "<p>No data collected</p>"
        colors = ["#4878d0", "#ee854a", "#6acc64", "#d65f5f", "#956cb4"]
        esc = _html.escape
        html = []
        for fn in self.functions:
            rows = self._rows(fn)
            top = [max([abs(v[i]) for _, _, v, _ in rows if v is not None] or [1]) or 1
                   for i in range(len(self.columns))]
            name = getattr(fn["func"], "__qualname__", fn["code"].co_name)
            h = [f'<h3 style="font-family:monospace">{esc(name)}</h3>'
                 f"<p>{esc(fn['code'].co_filename)}; {esc(self.source)}</p>"
                 '<table style="border-collapse:collapse"><tr><th>line</th><th>hits</th>'
                 + "".join(f"<th>{esc(c)}</th>" for c in self.columns)
                 + '<th style="text-align:left">code</th></tr>']
            for ln, hits, vals, text in rows:
                tds = []
                for i, c in enumerate(self.columns):
                    v = None if vals is None else vals[i]
                    pct = 0 if v is None else min(100, round(100 * abs(v) / top[i]))
                    bg = (f"background:linear-gradient(90deg,{colors[i % len(colors)]} {pct}%,"
                          f"transparent {pct}%)" if pct else "")
                    tds.append(f'<td style="text-align:right;padding:0 6px;{bg}">'
                               f"{esc(self._fmt(c, v))}</td>")
                h.append(f"<tr><td>{ln}</td><td>{'' if hits is None else hits}</td>"
                         + "".join(tds)
                         + f'<td style="font-family:monospace;white-space:pre;text-align:left">'
                         f"{esc(text)}</td></tr>")
            h.append("</table>")
            html.append("".join(h))
        return "\n".join(html)


# -- the module-level profiler (memlab's profile / profile_every) ------------------------------

global_line_profiler = LineProfiler()


def clear_global_line_profiler() -> None:
    """Forget everything the global profiler recorded and watched."""
    global_line_profiler.clear()


def set_target_gpu(gpu_id: DeviceLike) -> None:
    """The device the global profiler reads (an index or a torch.device); may be switched
    between profiled calls, even inside one."""
    global_line_profiler.target_gpu = gpu_id


_scope_depth = [0]


def _while_called(func: F) -> F:
    """The global profiler on for the decorated function. With sys.monitoring (3.12+) it is
    simply enabled, which costs the rest of the program nothing, and ``func`` is returned as
    is. Before 3.12 a C tracer would slow every frame of the thread, so the function is wrapped
    and tracing is on only while a decorated function runs."""
    if MONITORING:
        global_line_profiler.enable()
        return func

    @functools.wraps(func)
    def traced(*args: Any, **kwargs: Any) -> Any:
        with _Events.lock:  # the depth is shared by threads
            outer = _scope_depth[0] == 0 and not global_line_profiler.enabled
            if outer:
                global_line_profiler.enable()
            _scope_depth[0] += 1
        try:
            return func(*args, **kwargs)
        finally:
            with _Events.lock:
                _scope_depth[0] -= 1
                if outer:
                    global_line_profiler.disable()

    return cast(F, traced)


@overload
def profile(func: F, columns: Columns = DEFAULT_COLUMNS) -> F: ...
@overload
def profile(func: None = None, columns: Columns = DEFAULT_COLUMNS) -> Callable[[F], F]: ...


def profile(func: Optional[F] = None,
            columns: Columns = DEFAULT_COLUMNS) -> Union[F, Callable[[F], F]]:
    """Decorator: profile ``func`` line by line with the global profiler, and print its table
    when the interpreter exits (also after a KeyboardInterrupt). Returns ``func`` itself on
    Python 3.12+ (a thin wrapper before: see _while_called)."""
    if func is None:  # @profile(columns=...)
        def with_columns(f: F) -> F:
            return profile(f, columns=columns)
        return with_columns
    global_line_profiler.add_function(func)
    wrapped = _while_called(func)
    atexit.register(_print_stats_safely, func, columns)  # never turn a clean exit into a traceback
    return wrapped


def _print_stats_safely(func: Callable[..., Any], columns: Columns) -> None:
    """The global profiler's table of ``func``; a failure to print is logged, never raised."""
    try:
        global_line_profiler.print_stats(func, columns)
    except Exception as exc:
        _log.warning("tensorgc: could not print the line profile of %r: %s", func, exc)


def profile_every(output_interval: int = 1, enable: bool = True,
                  columns: Columns = DEFAULT_COLUMNS) -> Callable[[F], F]:
    """Decorator: profile with the global profiler and print the table after every
    ``output_interval``-th call. ``enable=False`` leaves the function untouched."""
    if not isinstance(output_interval, int) or output_interval < 1:
        raise ValueError(f"output_interval must be an int >= 1, not {output_interval!r}")

    def inner(func: F) -> F:
        if not enable:
            return func
        global_line_profiler.add_function(func)
        inner_func = _while_called(func)
        calls = [0]

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return inner_func(*args, **kwargs)
            finally:
                calls[0] += 1
                if calls[0] % output_interval == 0:  # the call's result or exception stands
                    _print_stats_safely(func, columns)

        setattr(run, "cur_idx", calls)  # memlab keeps a counter on the function
        return cast(F, run)

    return inner
