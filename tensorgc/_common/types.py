"""Type aliases shared by tensorgc's modules (no code; imports nothing of tensorgc).

A snapshot is torch's dict (``torch.cuda.memory._snapshot()``; ``load_snapshot`` checks its
shape): "segments" (a list of segment dicts, each with a list of block dicts), "device_traces"
(per device, a sequence of trace entry dicts: a list, or a LeanTrace from the streaming loader)
and other keys. Its values are only as typed as the file was, so the dicts stay
``dict[str, Any]``.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence

__all__ = ["Snapshot", "Segment", "Block", "TraceEntry", "Frame", "Trace"]

Snapshot = Dict[str, Any]
Segment = Dict[str, Any]
Block = Dict[str, Any]
TraceEntry = Dict[str, Any]
Frame = Dict[str, Any]
Trace = Sequence[TraceEntry]  # a list, or a LeanTrace (tensorgc/allocator/_lean.py)
