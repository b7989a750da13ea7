"""LeanTrace: one device's allocator trace held as columns, as the streaming loader
(``load_snapshot(path, lean=True)``, allocator/pickstream.c) reads it.

A trace of millions of entries as Python dicts costs about 460 bytes an entry. A LeanTrace holds
50: one element per entry in each column (native-endian arrays in bytes objects), the actions as
a small table, and the frames lists interned, one list per distinct stack, shared by every entry
that has that stack. It is a ``Sequence`` of entry dicts: ``len()``, ``trace[i]``, slices and
iteration make the dicts on access (``{"action", "addr", "size", "stream", "time_us",
"frames", ...}``; ``"device_free"`` on OOM entries), with ``frames`` the shared list of the
entry's stack. Every field the file held is kept: the columns hold the fields tensorgc reads,
the other ones (torch's ``compile_context`` and ``user_metadata``, or a value a column cannot
hold) are kept as sets shared between entries; equal frames lists share one list, equal frames
one dict.

C consumers read ``trace.columns()``; see LeanTrace.columns.
"""
from __future__ import annotations

from collections import Counter
from typing import (Any, Dict, Iterable, Iterator, List, Literal, Mapping, Optional, Sequence,
                    Tuple, Union, overload)

from .._common.types import Frame, TraceEntry

__all__ = ["LeanTrace", "COLUMNS", "TIME_ABSENT", "action_counts", "positions", "as_list"]

# The columns' names and their array codes (struct's, native byte order), in this order.
_Code = Literal["B", "Q", "q", "I"]
COLUMNS: Tuple[Tuple[str, _Code], ...] = (
    ("action", "B"), ("addr", "Q"), ("size", "Q"), ("time_us", "q"), ("stream", "q"),
    ("device_free", "Q"), ("stack", "I"))
_WIDTH = {"B": 1, "Q": 8, "q": 8, "I": 4}
TIME_ABSENT = -(1 << 63)  # time_us where an entry has none

# Which fields an entry has (pickstream.h's TGC_PS_P_*): a column's 0 may be absent or 0.
P_ADDR, P_SIZE, P_STREAM, P_TIME, P_DEVFREE, P_FRAMES, P_FRAMES_NONE, P_ACTION = (
    1, 2, 4, 8, 16, 32, 64, 128)
_P_PLAIN = P_ACTION | P_ADDR | P_SIZE | P_STREAM | P_FRAMES  # every entry torch writes has these

_FRAME_FIELDS = (("filename", str), ("name", str), ("line", int))


class LeanTrace(Sequence[TraceEntry]):
    """One device's trace entries as columns (see the module's docstring).

    ``LeanTrace(columns, actions, stacks)`` makes one from columns (``columns()``'s shape; every
    entry then has action, addr, size, stream and frames, time_us where it is not TIME_ABSENT
    and device_free on "oom" entries); ``LeanTrace.from_entries(entries)`` from entry dicts."""

    __slots__ = ("_cols", "_views", "actions", "stacks", "_present", "_extra", "_extras",
                 "_fault_text", "_checked", "_n")

    _cols: Dict[str, bytes]
    _views: Dict[str, "memoryview[int]"]
    actions: Tuple[str, ...]
    stacks: List[List[Frame]]
    _present: Optional[bytes]
    _extra: Optional["memoryview[int]"]
    _extras: List[Dict[Any, Any]]
    _fault_text: Optional[str]
    _checked: bool
    _n: int

    def __init__(self, columns: Optional[Mapping[str, bytes]] = None,
                 actions: Sequence[str] = (), stacks: Optional[List[List[Frame]]] = None) -> None:
        self._fill(columns or {name: b"" for name, _ in COLUMNS}, tuple(actions),
                   stacks if stacks is not None else [[]], None, None, [{}], None)

    @classmethod
    def _shell(cls, device: int) -> "LeanTrace":
        """An empty trace the loader puts in the snapshot at once and fills at the end."""
        return cls()

    def _fill(self, columns: Mapping[str, bytes], actions: Tuple[str, ...],
              stacks: List[List[Frame]], present: Optional[bytes], extra: Optional[bytes],
              extras: List[Dict[Any, Any]], fault: Optional[str], checked: bool = False) -> None:
        """Sets the columns and tables. checked: the loader checked every entry as it read it
        (fault: the first faulty one's message, or None), so _fault need not look again."""
        missing = [name for name, _ in COLUMNS if name not in columns]
        if missing:
            raise ValueError(f"LeanTrace: columns {missing} are missing")
        n = len(columns["action"])
        views: Dict[str, memoryview[int]] = {}
        for name, code in COLUMNS:
            data = columns[name]
            if not isinstance(data, bytes) or len(data) != n * _WIDTH[code]:
                raise ValueError(f"LeanTrace: column {name!r} must be {n} elements of "
                                 f"{_WIDTH[code]} bytes")
            views[name] = memoryview(data).cast(code)
        if present is not None and len(present) != n:
            raise ValueError("LeanTrace: one presence byte per entry")
        if extra is not None and len(extra) != 4 * n:
            raise ValueError("LeanTrace: one extra id per entry")
        self._cols = {name: columns[name] for name, _ in COLUMNS}
        self._views = views
        self.actions = actions
        self.stacks = stacks
        self._present = present
        self._extra = memoryview(extra).cast("I") if extra is not None else None
        self._extras = extras
        self._fault_text = fault
        self._checked = checked
        self._n = n

    @classmethod
    def from_entries(cls, entries: Iterable[Mapping[str, Any]]) -> "LeanTrace":
        """The entries (dicts of torch's shape, checked as check_snapshot checks them) as a
        LeanTrace: equal frames lists share one stack, the fields no column holds are kept."""
        from array import array

        cols = {name: array(code) for name, code in COLUMNS}
        present = bytearray()
        extra = array("I")
        actions: Dict[str, int] = {}
        stacks: List[List[Frame]] = [[]]
        stack_ids: Dict[Tuple[Any, ...], int] = {(): 0}
        extras: List[Dict[Any, Any]] = [{}]
        extra_ids: Dict[Tuple[Any, ...], int] = {(): 0}
        frame_objs: Dict[Tuple[Any, ...], Frame] = {}
        known = {"action", "addr", "size", "stream", "time_us", "device_free", "frames"}

        def key_of(d: Mapping[Any, Any]) -> Tuple[Any, ...]:
            """A hashable key for a dict's items (an unhashable value by its identity)."""
            out = []
            for k, v in d.items():
                try:
                    hash(v)
                except TypeError:
                    v = ("id", id(v))  # the dict kept in the table keeps it alive
                out.append((type(k), k, type(v), v))
            return tuple(out)

        for j, e in enumerate(entries):
            if not isinstance(e, Mapping):
                raise ValueError(f"LeanTrace: entry {j} is {type(e).__name__}, not dict")
            p = 0
            action = e.get("action")
            code = 0
            if isinstance(action, str):
                p |= P_ACTION
                code = actions.setdefault(action, len(actions))
                if code > 255:
                    raise ValueError("LeanTrace: more than 256 distinct actions")
            rest = {k: v for k, v in e.items() if k not in known}
            vals: Dict[str, int] = {}
            for name, bit in (("addr", P_ADDR), ("size", P_SIZE), ("device_free", P_DEVFREE)):
                v = e.get(name)
                if isinstance(v, int) and 0 <= v < 1 << 64:
                    p |= bit
                    vals[name] = v
                elif name in e:
                    rest[name] = v
            for name, bit in (("stream", P_STREAM), ("time_us", P_TIME)):
                v = e.get(name)
                if isinstance(v, int) and -(1 << 63) <= v < 1 << 63:
                    p |= bit
                    vals[name] = v
                elif name in e:
                    rest[name] = v
            frames = e.get("frames", ())
            sid = 0
            if frames is None:
                p |= P_FRAMES_NONE
            elif isinstance(frames, list):
                p |= P_FRAMES
                if not all(isinstance(f, dict) for f in frames):
                    raise ValueError(f"LeanTrace: entry {j} has a frame that is not a dict")
                fkeys = [key_of(f) for f in frames]
                skey = tuple(fkeys)
                sid = stack_ids.get(skey, -1)
                if sid < 0:
                    sid = stack_ids[skey] = len(stacks)
                    stacks.append([frame_objs.setdefault(k, dict(f))
                                   for k, f in zip(fkeys, frames)])
            elif "frames" in e:
                rest["frames"] = frames
            key = key_of(rest)
            xid = extra_ids.get(key, -1)
            if xid < 0:
                xid = extra_ids[key] = len(extras)
                extras.append(rest)
            cols["action"].append(code)
            cols["addr"].append(vals.get("addr", 0))
            cols["size"].append(vals.get("size", 0))
            cols["device_free"].append(vals.get("device_free", 0))
            cols["stream"].append(vals.get("stream", 0))
            cols["time_us"].append(vals.get("time_us", TIME_ABSENT))
            cols["stack"].append(sid)
            present.append(p)
            extra.append(xid)
        t = cls()
        t._fill({name: a.tobytes() for name, a in cols.items()}, tuple(actions), stacks,
                bytes(present), extra.tobytes(), extras, None)
        return t

    # ------------------------------------------------------------------ the sequence

    def __len__(self) -> int:
        return self._n

    def _flags(self, i: int) -> int:
        if self._present is not None:
            return self._present[i]
        v = self._views
        p = _P_PLAIN | (P_TIME if v["time_us"][i] != TIME_ABSENT else 0)
        a = v["action"][i]
        if a < len(self.actions) and self.actions[a] == "oom":
            p |= P_DEVFREE
        return p

    def _entry(self, i: int) -> TraceEntry:
        v = self._views
        p = self._flags(i)
        e: TraceEntry = {}
        if p & P_ACTION:
            e["action"] = self.actions[v["action"][i]]
        if p & P_ADDR:
            e["addr"] = v["addr"][i]
        if p & P_DEVFREE:
            e["device_free"] = v["device_free"][i]
        if p & P_SIZE:
            e["size"] = v["size"][i]
        if p & P_STREAM:
            e["stream"] = v["stream"][i]
        if p & P_TIME:
            e["time_us"] = v["time_us"][i]
        if p & P_FRAMES:
            e["frames"] = self.stacks[v["stack"][i]]
        elif p & P_FRAMES_NONE:
            e["frames"] = None
        if self._extra is not None:
            x = self._extra[i]
            if x:
                e.update(self._extras[x])
        return e

    @overload
    def __getitem__(self, i: int) -> TraceEntry: ...

    @overload
    def __getitem__(self, i: slice) -> List[TraceEntry]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[TraceEntry, List[TraceEntry]]:
        """An entry dict, made now (a new dict each time; its frames list is shared); a slice
        is a list of them."""
        if isinstance(i, slice):
            return [self._entry(k) for k in range(*i.indices(self._n))]
        k = i.__index__()
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError("LeanTrace index out of range")
        return self._entry(k)

    def __iter__(self) -> Iterator[TraceEntry]:
        for i in range(self._n):
            yield self._entry(i)

    def __eq__(self, other: object) -> bool:
        """Equal to a trace (a list or a LeanTrace) of equal entries."""
        if not isinstance(other, (LeanTrace, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable as they are

    def __repr__(self) -> str:
        return (f"LeanTrace({self._n:,} entries, {len(self.actions)} actions, "
                f"{len(self.stacks):,} stacks)")

    def __reduce__(self) -> Tuple[Any, ...]:
        # pickled as the list it reads as (load_snapshot refuses the class it would name)
        return (list, (list(self),))

    # ------------------------------------------------------------------ for C consumers

    def columns(self) -> Dict[str, bytes]:
        """The columns: bytes of native-endian (little-endian on x86 and ARM) arrays, one element
        per entry: "action" uint8 (an index into ``actions``), "addr" uint64, "size" uint64,
        "time_us" int64 (TIME_ABSENT, INT64_MIN, where absent), "stream" int64, "device_free"
        uint64, "stack" uint32 (an index into ``stacks``; ``stacks[0]`` is ``[]``, no frames).
        An absent addr, size, stream or device_free reads 0. The same bytes objects each time."""
        return dict(self._cols)

    def present(self) -> Optional[bytes]:
        """Which fields each entry has (a byte per entry, the P_* bits), or None where every
        entry has them all."""
        return self._present

    def count_actions(self) -> "Counter[str]":
        """How many entries have each action (from the action column: no entry is made)."""
        data = self._cols["action"]
        counts: Counter[str] = Counter()
        no_action = 0
        if self._present is not None:
            no_action = sum(1 for p in self._present if not p & P_ACTION)
        for code, name in enumerate(self.actions):
            n = data.count(bytes((code,)))
            if n:
                counts[name] += n
        if no_action and self.actions:  # entries without an action read code 0
            counts[self.actions[0]] -= no_action
            if counts[self.actions[0]] <= 0:
                del counts[self.actions[0]]
        return counts

    def positions(self, action: str) -> List[int]:
        """The indices of the entries whose action is ``action``, in order."""
        if action not in self.actions:
            return []
        code = bytes((self.actions.index(action),))
        data, i = self._cols["action"], 0
        out: List[int] = []
        while True:
            i = data.find(code, i)
            if i < 0:
                return out
            if self._present is None or self._present[i] & P_ACTION:
                out.append(i)
            i += 1

    def _fault(self) -> Optional[str]:
        """The first faulty entry in check_snapshot's words (as the loader found it), or for a
        trace made by hand a fault of its tables (actions, frames); None when all is well."""
        if self._checked or self._fault_text is not None:
            return self._fault_text
        for a in self.actions:
            if not isinstance(a, str):
                return f"a LeanTrace action is {type(a).__name__}, not str"
        for k, stack in enumerate(self.stacks):
            if not isinstance(stack, list):
                return f"LeanTrace stack {k} is {type(stack).__name__}, not list"
            for j, f in enumerate(stack):
                if not isinstance(f, dict):
                    return f"LeanTrace stack {k}: frame {j} is {type(f).__name__}, not dict"
                for key, kind in _FRAME_FIELDS:
                    v = f.get(key)
                    if v is not None and not isinstance(v, kind):
                        return (f"LeanTrace stack {k}: frame {j} '{key}' is "
                                f"{type(v).__name__}, not {kind.__name__}")
        if self._n and (max(self._views["stack"]) >= len(self.stacks) or
                        max(self._views["action"]) >= max(len(self.actions), 1)):
            return "LeanTrace: a stack or action index past its table"
        return None


def action_counts(trace: Sequence[TraceEntry]) -> "Counter[object]":
    """How many entries of a trace (a list or a LeanTrace) have each action (entries without
    one are not counted)."""
    if isinstance(trace, LeanTrace):
        return Counter(dict(trace.count_actions()))
    return Counter(e.get("action") for e in trace if isinstance(e, dict) and "action" in e)


def positions(trace: Sequence[TraceEntry], action: str) -> List[int]:
    """The indices of a trace's entries whose action is ``action``, in order."""
    if isinstance(trace, LeanTrace):
        return trace.positions(action)
    return [i for i, e in enumerate(trace) if isinstance(e, dict) and e.get("action") == action]


def as_list(trace: Sequence[TraceEntry]) -> List[TraceEntry]:
    """The trace as a list of entry dicts, for the C functions that take a list (the timeline's
    replay, the segment map): a LeanTrace's entries are made here, all of them."""
    return trace if isinstance(trace, list) else list(trace)
