"""Types of tensorgc's C extension (cycles/module.c, reporter/*.c, allocator/binding.c).

The public part is re-exported by ``tensorgc``: CycleReport, Handle, GraphvizError,
observe_garbage, observe_cycles, observe_tensor_cycles, render_svg, set_render_timeout,
get_render_timeout. The ``_``-prefixed functions below are the ones tensorgc's own Python
modules call (the reporter's walk, the allocator's replays, the snapshot checks, the line
profiler's core); they are no API. Test-only functions are left out.
"""
from types import CodeType, FrameType, TracebackType
from typing import AbstractSet, Any, Callable, Literal, Sequence, TypeAlias, TypedDict, TypeGuard, final, overload

import torch

# --------------------------------------------------------------------------- the cycle detector

_Shape = tuple[int | None, ...] | None  # None in it: a ragged dimension; None: not readable


class _TensorInfo(TypedDict):
    """One tensor a cycle kept alive (CycleReport.tensors)."""

    shape: _Shape
    dtype: str
    device: str
    nbytes: int
    data_ptr: int
    stack: str | None
    type: str
    storage: str


class _GroupInfo(TypedDict):
    """One group of identical cycles (CycleReport.groups)."""

    count: int
    objects: int
    tensors: int
    nbytes: int
    hint: str
    cycle: str
    drawn: bool
    signature: str  # the leak's shape, 16 hex digits (tensorgc.dedup)


@final
class CycleReport:
    """What one garbage collection found: reference cycles that kept tensors alive."""

    @property
    def text(self) -> str: ...
    @property
    def dot(self) -> str: ...
    @property
    def tensors(self) -> list[_TensorInfo]: ...
    @property
    def groups(self) -> list[_GroupInfo]: ...
    @property
    def edges(self) -> list[tuple[str, str, str]]: ...
    @property
    def hints(self) -> list[str]: ...
    @property
    def svg(self) -> str: ...
    @property
    def html(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def objects(self) -> int: ...
    @property
    def garbage(self) -> int: ...
    @property
    def generation(self) -> int: ...
    def _repr_html_(self) -> str: ...


@final
class Handle:
    """A registered observer. Call it, or use it as a context manager, to remove it."""

    @property
    def active(self) -> bool: ...
    def remove(self) -> None: ...
    def __call__(self) -> None: ...
    def __enter__(self) -> "Handle": ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]: ...


class GraphvizError(RuntimeError):
    """Graphviz could not lay out or render a graph."""


# device: "cuda", "cpu", "any", a device string such as "cuda:1", a torch.device, or a
# predicate(tensor) -> bool
_DeviceFilter = str | torch.device | Callable[[torch.Tensor], bool]


def observe_garbage(observer: Callable[[list[Any]], object], /) -> Handle: ...
def observe_cycles(callback: Callable[[CycleReport], object], *,
                   device: _DeviceFilter = "cuda") -> Handle: ...
def observe_tensor_cycles(callback: Callable[[str], object], *,
                          device: _DeviceFilter = "cuda") -> Handle: ...
def render_svg(dot: str, /) -> str: ...
def set_render_timeout(seconds: float, /) -> float: ...
def get_render_timeout() -> float: ...

# --------------------------------------------------------------------------- internal

def _shutdown() -> None: ...

# the reporter's walk (reporter/walk.c, reporter/index.c)
_TensorRow = tuple[
    int | None,            # the own storage's address (None: no plain storage)
    int | None,            # its bytes
    str,                   # device, e.g. "cuda:0"
    str,                   # device type
    int | None,            # device index
    _Shape,
    str,                   # dtype, e.g. "float32"
    int | None,            # numel
    bool,                  # sparse
    str,                   # how the bytes were counted
    tuple[tuple[str | None, torch.Tensor], ...] | None,  # the tensors holding the bytes
    int,                   # bytes
    str | None,            # why nothing is counted
]

def _live_tensors() -> list[torch.Tensor]: ...
def _owner_search(roots: Sequence[object], targets: Sequence[object], exclude: Sequence[object],
                  n_twice: int, tracked: Sequence[object] | None, max_objects: int, /
                  ) -> tuple[list[tuple[str, int, tuple[Any, ...], int] | None], list[int],
                             dict[str, int]]: ...
def _owner_labels(chain: tuple[Any, ...], cut: int, /) -> list[tuple[str, int]]: ...
def _thread_states() -> list[tuple[int, dict[str, Any] | None]]: ...
def _frame_locals(frame: FrameType, /) -> dict[str, Any] | None | Any: ...
def _track_tensors(enabled: object, /) -> bool: ...
def _index_hold() -> bool: ...
def _index_release() -> None: ...
# checkpoint() and growth()'s storage keys (reporter/storages.c)
_StorageKey = tuple[str, int, int]  # (device, data address, bytes)
_KeysTable = tuple[bytes, tuple[str, ...]]  # an earlier call's keys, for a later call's before
def _storage_keys(
    tensors: list[torch.Tensor], device: tuple[str, int | None] | None,
    before: AbstractSet[_StorageKey] | _KeysTable | None, /
) -> tuple[list[_StorageKey], list[int] | None, int, int, _KeysTable | None]: ...
def _is_tensor(obj: object, /) -> TypeGuard[torch.Tensor]: ...
def _tensor_rows(tensors: list[torch.Tensor], /) -> list[_TensorRow]: ...

# the allocator (allocator/binding.c)
_Block = tuple[int, int, int, bool]  # (block number, address, size, first storage in it)

def _alloc_attribute(
    segments: list[dict[str, Any]], storages: list[tuple[int, int, bool]], /
) -> tuple[list[_Block | None], dict[int, dict[str, int]], list[tuple[int, int, int]]]: ...


class _DeviceMemory(TypedDict):
    ok: bool
    ordinal: int
    total: int
    free: int
    device_used: int
    process_used: int
    nvml: bool
    name: str
    source: str
    error: str


def _device_memory(ordinal: int, /) -> _DeviceMemory: ...
# (kind, addr, size, time, stack, stacks, bad_time, bad_range): allocator/columns.c
_TraceColumns: TypeAlias = tuple[bytes, bytes, bytes, bytes, bytes, list[Any], int, int]
def _trace_columns(trace: list[dict[str, Any]], /) -> _TraceColumns: ...
def _timeline(cols: tuple[Any, ...], pre: list[tuple[int, int]], columns: int, detail: int,
              use_free_requested: bool, classify: Any = None, /) -> dict[str, Any]: ...
def _detail(cols: tuple[Any, ...], pre: list[tuple[int, int]], use_free_requested: bool,
            max_stacks: int, /) -> dict[str, Any]: ...
def _segmap(trace: list[dict[str, Any]], segments: list[dict[str, Any]], device: int, upto: int,
            use_free_requested: bool, /) -> list[tuple[int, int, int, int]]: ...
def _pickle_scan(data: bytes, /) -> tuple[int, int, int, int, int]: ...
def _check_trace(trace: list[Any], start: int, seen: set[int], /) -> int: ...
def _pickle_stream(
    fd: int, size: int, max_bytes: int, make_trace: Callable[[int], Any], seed: int, /
) -> tuple[int, int, int, int, int, int, bytes, Any]: ...

# the line profiler's core (reporter/binding.c, reporter/lineprof_*.c)

@final
class _LineProfiler:
    def __init__(self) -> None: ...
    def add_code(self, code: CodeType, /) -> None: ...
    @overload
    def set_source(self, kind: Literal["rss"], /) -> None: ...
    @overload
    def set_source(self, kind: Literal["cuda"], device: int, stats: Callable[[int], object],
                   reset: Callable[[int], object], /) -> None: ...
    def enable(self) -> None: ...
    def disable(self) -> None: ...
    def clear(self, forget_codes: bool, /) -> None: ...
    def records(self) -> list[tuple[CodeType, int, int, tuple[int, ...], tuple[int, ...]]]: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def source(self) -> str: ...
    @property
    def device(self) -> int: ...
    @property
    def lines(self) -> int: ...
    @property
    def errors(self) -> int: ...
    @property
    def peak_resettable(self) -> bool: ...
    @property
    def open_frames(self) -> int: ...


def _lp_start(code: CodeType, offset: int, /) -> None: ...
def _lp_resume(code: CodeType, offset: int, exception: object = None, /) -> None: ...
def _lp_line(code: CodeType, line: int, /) -> None: ...
def _lp_leave(code: CodeType, offset: int, value: object, /) -> None: ...
def _lp_settrace(on: object, /) -> None: ...
def _lp_thread_hook(frame: FrameType, event: str, arg: Any, /) -> None: ...
