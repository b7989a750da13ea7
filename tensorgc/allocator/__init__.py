"""The caching allocator's and the device's view of memory, for the reporter.

``segments(device)`` reads the allocator's state (cheap form when torch has it);
``attribute(...)`` maps storages to blocks in C (allocator/blocks.c); ``device_memory(i)``
asks the CUDA driver and NVML, loaded at run time (allocator/device.c). Nothing here imports
torch.cuda state on machines without CUDA.

The subpackage tensorgc.allocator is this module; beside it, the tools over the allocator's
snapshot and trace: snapshot.py (record, dump and load; _lean.py a streamed trace as columns;
_history.py and _recorder.py the allocator history), categories.py (categories over time),
timeline.py (the timeline page; page/ holds its script), segmap.py (the segment map page),
flamegraph.py (flame graphs of the allocator's state) and oom.py (the OOM autopsy).
"""
from __future__ import annotations

import inspect
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, List, Optional, Sequence, Tuple

from .. import _tensorgc
from .._common.types import Block, Frame, Segment

if TYPE_CHECKING:  # the stub's names (tensorgc/_tensorgc.pyi); the module has no such objects
    from .._tensorgc import _Block, _DeviceMemory

__all__ = ["segments", "attribute", "device_memory", "top_sites"]


def _snapshot_fn() -> Callable[[], List[Segment]]:
    import torch

    fn: Optional[Callable[..., List[Segment]]] = getattr(torch.cuda.memory, "memory_snapshot",
                                                         None)
    try:
        if fn is not None and "include_traces" in inspect.signature(fn).parameters:
            # Segments and their blocks' frames without the trace ring: the cheap form.
            cheap = fn
            return lambda: cheap(include_traces=False)
    except (TypeError, ValueError):
        pass
    return lambda: list(torch.cuda.memory._snapshot()["segments"])


_SNAPSHOT: Optional[Callable[[], List[Segment]]] = None


def segments(device_index: Optional[int] = None) -> List[Segment]:
    """The allocator's segments (list of dicts, torch's snapshot format), all devices or one."""
    global _SNAPSHOT
    import torch

    if not torch.cuda.is_available():
        return []
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untyped in torch
        return []
    if _SNAPSHOT is None:
        _SNAPSHOT = _snapshot_fn()
    segs = _SNAPSHOT()
    if device_index is not None:
        segs = [s for s in segs if s.get("device") == device_index]
    return segs


def attribute(
    segs: Iterable[Segment], storages: Iterable[Tuple[int, int, bool]]
) -> Tuple[List[Optional[_Block]], dict[int, dict[str, int]], List[Tuple[int, int, int]]]:
    """storages: [(device_index, data_ptr, named)] -> (per_storage, totals, unseen); see
    ``_tensorgc._alloc_attribute``."""
    return _tensorgc._alloc_attribute(list(segs), list(storages))


def blocks_in_order(segs: Iterable[Segment]) -> List[Block]:
    """The block dicts in snapshot order (the numbering ``attribute`` uses)."""
    out: List[Block] = []
    for s in segs:
        out.extend(s.get("blocks", ()))
    return out


def top_sites(segs: Iterable[Segment], unseen: Iterable[Tuple[int, int, int]],
              limit: int = 5) -> List[Tuple[str, int, int]]:
    """The allocation sites (innermost frame outside torch) of allocated blocks no storage
    was found in, largest total first: [(site, bytes, blocks)]."""
    blocks = blocks_in_order(segs)
    total: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for number, size, _device in unseen:
        frames = blocks[number].get("frames") or []
        if not frames:
            continue
        site = _site(frames)
        total[site] += size
        count[site] += 1
    return [(site, nbytes, count[site]) for site, nbytes in total.most_common(limit)]


def _site(frames: Sequence[Frame]) -> str:
    def fmt(f: Frame) -> str:
        return f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '?')}"

    for f in frames:
        name = str(f.get("filename", ""))
        if name.endswith(".py") and "/torch/" not in name:
            return fmt(f)
    for f in frames:
        if str(f.get("filename", "")).endswith(".py"):
            return fmt(f)
    return fmt(frames[0])


def device_memory(index: int) -> _DeviceMemory:
    """The driver's and NVML's numbers for one CUDA device (dict; ok False without a driver)."""
    return _tensorgc._device_memory(int(index))
