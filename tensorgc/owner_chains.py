"""Why is it still alive: the shortest chain of references from a root to an object.

The cycle detector explains memory kept by reference cycles; most leaks are not cycles but an
owner that lives on: a list of losses that keeps each step's graph, a cache keyed by batch, a
hook registry, a closure on a global. ``owners()`` names that owner for each object, the way the
cycle reports name edges::

    module __main__ .loss_history [3] .grad_fn → MulBackward0 saved self

The search is one breadth-first pass in C (cycles/owners.c) over everything the roots reach,
crossing containers the collector does not track; roots are the modules (``__main__`` first),
every thread's frames (their locals by name, innermost first) and every thread's state dict. An
object no root reaches is either held by something no Python object shows (C code, an
extension's global: said so, with the holder found by the collector's refcount accounting) or
garbage in a reference cycle, waiting for the collector.

Bounds: the pass visits at most ``max_objects`` objects (default 10,000,000) and keeps 16 bytes
for each (a visited gc object is marked in its own header for the length of the pass, where the
interpreter's header layout is known; elsewhere a map adds about 24 bytes each), freed before it
returns; automatic collection is off during the pass and restored after. Chains longer than 256
references keep their root and their last 255.
"""
from __future__ import annotations

import gc
import inspect
import sys
import threading
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _tensorgc

__all__ = ["Chain", "owners", "owner", "DEFAULT_MAX_OBJECTS"]

DEFAULT_MAX_OBJECTS = 10_000_000
_PKG = __name__.rsplit(".", 1)[0]  # "tensorgc": its own frames are never roots


@dataclass(frozen=True)
class Chain:
    """How one object is kept alive.

    ``kind``: "root" (reached from ``root``: a module, a frame, a thread's state), "outside" (held
    by something no Python object shows; ``root`` says which object holds the unexplained
    references), "garbage" (reached by nothing: a reference cycle the collector has not freed
    yet) or "unknown" (the search stopped at ``max_objects`` first). ``edges`` name the
    references from the root to the object. ``others`` counts the other objects that also refer
    to it (each would keep it alive too). ``types`` are the type names along the chain, the
    root's first.
    """
    kind: str
    root: str
    edges: Tuple[str, ...] = ()
    types: Tuple[str, ...] = ()
    others: int = 0

    def __str__(self) -> str:
        s = " ".join((self.root,) + self.edges)
        if self.others:
            s += f" (+{self.others} other referrer{'s' if self.others > 1 else ''})"
        return s

    @property
    def holder(self) -> str:
        """The named owner, fit for grouping: the root and its first reference, e.g.
        ``__main__.loss_history`` or ``train() local cache``."""
        if self.kind != "root" or not self.edges:
            return self.root
        first = self.edges[0]
        if self.root.startswith("module "):
            return self.root[len("module "):] + first
        return f"{self.root} {first}"

    def extend(self, edges: Sequence[str]) -> "Chain":
        """This chain continued by more references (the autograd graph's, say)."""
        return Chain(self.kind, self.root, self.edges + tuple(edges), self.types, self.others)

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "root": self.root, "edges": list(self.edges),
                "types": list(self.types), "others": self.others, "text": str(self)}


def _thread_names() -> Dict[int, str]:
    return {t.ident: t.name for t in threading.enumerate() if t.ident is not None}


def _frame_label(f: Any, thread: str) -> str:
    code = f.f_code
    return f"{code.co_name}() at {code.co_filename}:{f.f_lineno} (thread {thread})"


def _ours(f: Any) -> bool:
    name = f.f_globals.get("__name__", "")
    return isinstance(name, str) and (name == _PKG or name.startswith(_PKG + "."))


def _locals_of(f: Any) -> Optional[Dict[str, Any]]:
    """The frame's locals as a dict that only we hold, or None when they cannot be read
    without running the user's code. A function's frame is read from its slots (the C module:
    frame.f_locals on 3.11 and 3.12 is a dict the frame keeps, which would pin what it holds, and
    which a tracer's trampoline writes back into the frame); 3.13's frame.f_locals is a proxy
    that keeps nothing, so a copy of it serves. A module's or class body's frame gives its
    namespace: a dict as it is, a dict subclass copied at the C level, any other mapping is not
    read (its methods are the user's code)."""
    snap = _tensorgc._frame_locals(f)
    if isinstance(snap, dict):
        return snap
    loc = f.f_locals
    if not f.f_code.co_flags & inspect.CO_OPTIMIZED:  # a namespace (snap is None)
        if type(loc) is dict:
            return loc
        return dict.copy(loc) if isinstance(loc, dict) else None
    return dict(loc)  # 3.13's proxy, or 3.10's f_locals: a copy


def _roots(me: Any) -> Tuple[List[Any], List[str], List[Any]]:
    """(roots, their labels, snapshots of our own frames' locals). A frame's root is a snapshot
    of its locals, so its edges read as local names; our frames are left out."""
    roots: List[Any] = []
    labels: List[str] = []
    mods = sorted(sys.modules.items(), key=lambda kv: kv[0] != "__main__")
    for name, mod in mods:
        if mod is not None:
            roots.append(mod)
            labels.append(f"module {name}")
    names = _thread_names()
    ours: List[Any] = []
    frames = sys._current_frames()
    loc: Optional[Dict[str, Any]] = None
    for tid, top in frames.items():
        thread = names.get(tid, f"#{tid}")
        f: Optional[Any] = top
        while f is not None:
            if f.f_code is _ROOTS_CODE:  # this call: gone before the search runs
                f = f.f_back
                continue
            loc = _locals_of(f)
            if loc is None:
                pass  # a mapping whose methods are the user's: not read
            elif tid == me and _ours(f):
                ours.append(loc)
            elif loc is not f.f_globals:  # a module's code: its module is a root already
                roots.append(loc)
                labels.append(_frame_label(f, thread))
            f = f.f_back
    del frames, top, f, loc
    for tid, d in _tensorgc._thread_states():
        if d is not None:
            roots.append(d)
            labels.append(f"state of thread {names.get(tid, f'#{tid}')}")
    return roots, labels, ours


_ROOTS_CODE = _roots.__code__


def _tidy(label: str, edges: List[str], types: List[str], local: List[bool]) -> None:
    """Frame roots read "local x" rather than "['x']"; a threading.local's per-thread dict reads
    "(thread-local) .x" rather than "→ dict [<weakref.ReferenceType>] ['x']". The per-thread
    dicts are keyed by a weak reference to the thread's dummy up to 3.12 and by the dummy itself
    from 3.13 on (Modules/_threadmodule.c's localdicts)."""
    if edges and edges[0].startswith("['") and edges[0].endswith("']") and " (thread " in label:
        edges[0] = "local " + edges[0][2:-2]
    for i in range(len(edges) - 1):
        if (local[i] and edges[i] == "\u2192 dict"
                and edges[i + 1].startswith(("[<weakref", "[<_thread._localdummy"))):
            del edges[i:i + 2], types[i + 1:i + 3], local[i + 1:i + 3]
            edges.insert(i, "(thread-local)")
            types.insert(i + 1, "dict")
            local.insert(i + 1, False)
            if i + 1 < len(edges) and edges[i + 1].startswith("['") and edges[i + 1].endswith("']"):
                edges[i + 1] = "." + edges[i + 1][2:-2]
            break


def _type_name(o: Any) -> str:
    return type(o).__name__


def _chains(objs: Sequence[Any], max_objects: int) -> List[Chain]:
    if isinstance(max_objects, bool) or not isinstance(max_objects, int):
        raise TypeError("tensorgc.owners: max_objects must be an int, not "
                        f"{type(max_objects).__name__}")
    if max_objects < 1:
        raise ValueError(f"tensorgc.owners: max_objects must be at least 1, not {max_objects}")
    max_objects = min(max_objects, 0xFFFFFFFE)  # the engine's indices are 32-bit
    enabled = gc.isenabled()
    gc.disable()  # the snapshots and lists below must not be collected mid-search
    try:
        me = threading.get_ident()
        first: Dict[int, int] = {}  # an object listed twice is searched for once
        o: Any = None
        targets: List[Any] = []
        for o in objs:
            if id(o) not in first:
                first[id(o)] = len(targets)
                targets.append(o)
        o = None
        roots, labels, ours = _roots(me)
        tracked = gc.get_objects()
        # Our own lists are never roots, and what our frames hold (the reporter's lists of
        # tensors, say) is ours too: never entered, and its references do not make a target
        # look held. The snapshots of our frames' locals come last (subtracted twice).
        mine = [v for d in ours for v in d.values() if id(v) not in first and gc.is_tracked(v)]
        exclude = [objs, targets, roots, labels, ours, mine] + mine + ours
        res = _tensorgc._owner_search(roots, targets, exclude, len(ours), tracked,
                                      max_objects)
        del tracked, exclude, ours, mine
        found, referrers, info = res
        del res
        out: List[Chain] = []
        for i in (first[id(o)] for o in objs):
            item = found[i]
            others = max(0, referrers[i] - 1)
            if item is None:
                if info["truncated"]:
                    out.append(Chain("unknown", f"not reached within max_objects={max_objects}",
                                     others=referrers[i]))
                else:
                    out.append(Chain("outside", "held outside Python by something the collector "
                                     "does not track", others=referrers[i]))
                continue
            kind, n, chain, cut = item
            edges_idx = _tensorgc._owner_labels(chain, cut)
            edges = [e for e, _ in edges_idx]
            along = [chain[0]] + [chain[j] for _, j in edges_idx]
            types = [_type_name(x) for x in along]
            local = [issubclass(type(x), threading.local) for x in along]
            del along
            if kind == "root":
                label = labels[n]
            elif kind == "garbage":
                label = ("unreachable: in a reference cycle the collector has not freed yet: "
                         f"{_type_name(chain[0])}")
            else:
                label = (f"held outside Python ({n} reference{'s' if n != 1 else ''} no Python "
                         f"object shows): {_type_name(chain[0])}")
            _tidy(label, edges, types, local)
            out.append(Chain(kind, label, tuple(edges), tuple(types), others))
            del chain, item
        return out
    finally:
        if enabled:
            gc.enable()


def owners(objs: Iterable[Any], *, max_objects: int = DEFAULT_MAX_OBJECTS) -> List[Chain]:
    """For each object, the shortest chain of references that keeps it alive (see Chain), all
    found in one pass. The objects are only compared by identity."""
    return _chains(list(objs), max_objects)


def owner(obj: Any, *, max_objects: int = DEFAULT_MAX_OBJECTS) -> Chain:
    """owners([obj])[0]."""
    return _chains([obj], max_objects)[0]
