"""Why is it still alive: the shortest chain of references from a root to an object.

The cycle detector explains memory kept by reference cycles; most leaks are not cycles but an
owner that lives on: a list of losses that keeps each step's graph, a cache keyed by batch, a
hook registry, a closure on a global. ``owners()`` names that owner for each object, the way the
cycle reports name edges::

    module __main__ .loss_history [3] .grad_fn → MulBackward0 saved self

The search is one breadth-first pass in C (graph/owners.c) over everything the roots reach,
crossing containers the collector does not track; roots are the caller's named ones (``roots=``:
the pytest plugin's fixtures), the modules (``__main__`` first), every thread's frames (their
locals by name, innermost first) and every thread's state dict. An
object no root reaches is either held by something no Python object shows (C code, an
extension's global: said so, with the holder found by the collector's refcount accounting) or
garbage in a reference cycle, waiting for the collector.

``owner()`` and ``owners()`` search their caller's own frame last: it names the holder only of
what nothing else holds (``owner(t)`` while the caller holds ``t`` names whatever else keeps
``t``, not the caller's local).

Bounds: the pass visits at most ``max_objects`` objects and keeps 16 bytes for each (a visited gc
object is marked in its own header for the length of the pass, where the interpreter's header
layout is known; elsewhere a map adds about 24 bytes each), freed before it returns. The default
(None) comes from the heap's size: the interpreter's small-object blocks
(``sys.getallocatedblocks()``: one for each object of up to 512 bytes) or twice the objects the
collector tracks, whichever is larger, plus 100,000: room for every container alive, tracked or
not (only containers count; a large untracked one, a tuple of 60 atoms or more, is in neither
number). Automatic collection is off during the pass and restored after. Chains longer than 256
references keep their root, the two references after it and the last 252; the edge between says
how many were left out.
"""
from __future__ import annotations

import gc
import inspect
import sys
import threading
import types
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .. import _tensorgc

__all__ = ["Chain", "owners", "owner"]


def __getattr__(name: str) -> Any:
    """DEFAULT_MAX_OBJECTS, the fixed bound that was the default: deprecated, the default is now
    the heap's size (max_objects=None)."""
    if name == "DEFAULT_MAX_OBJECTS":
        import warnings

        warnings.warn("tensorgc.owner_chains.DEFAULT_MAX_OBJECTS is deprecated: max_objects=None "
                      "(the default) bounds the search by the heap's size", DeprecationWarning,
                      stacklevel=2)
        return 10_000_000
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_PKG = __name__.split(".", 1)[0]  # "tensorgc": its own frames are never roots
_FOLD = 4  # a run of this many references of one kind or more is shown as its first, count, last
_NAME_MAX = 72  # a row's name from its chain: longer ones keep their holder and their last step


def _default_max_objects(n_tracked: int) -> int:
    """The bound of a pass when none is given: room for every container alive (the pass counts
    containers only). Each object of up to 512 bytes is one of the interpreter's small-object
    blocks, tracked or not (``sys.getallocatedblocks()`` counts them, and is 0 where the
    allocator is the C library's); the tracked objects, doubled, cover the untracked containers
    there."""
    n = max(sys.getallocatedblocks(), 2 * n_tracked) + 100_000
    return min(n, 0xFFFFFFFE)


def _check_max_objects(max_objects: Optional[int]) -> None:
    if max_objects is None:
        return
    if isinstance(max_objects, bool) or not isinstance(max_objects, int):
        raise TypeError("tensorgc.owners: max_objects must be an int or None, not "
                        f"{type(max_objects).__name__}")
    if max_objects < 1:
        raise ValueError(f"tensorgc.owners: max_objects must be at least 1, not {max_objects}")


def _edge_kind(e: str) -> Optional[str]:
    """What a run of references is folded by: the attribute (".next_functions[0] → AddmmBackward0"
    -> ".next_functions"), "[]" for an item; None for a reference never folded."""
    if e.startswith("."):
        return e.split("[", 1)[0].split(" ", 1)[0]
    if e.startswith("[") and e.endswith("]"):
        return "[]"
    return None


def _folded(edges: Sequence[str]) -> List[str]:
    """Runs of _FOLD or more references of one kind (an autograd graph's .next_functions, a linked
    list's .next, nested lists) as their first and last with the count between."""
    out: List[str] = []
    i, n = 0, len(edges)
    while i < n:
        kind = _edge_kind(edges[i])
        j = i + 1
        while kind is not None and j < n and _edge_kind(edges[j]) == kind:
            j += 1
        if j - i >= _FOLD:
            what = "items" if kind == "[]" else kind
            out.extend((edges[i], f"\u2026 {j - i - 2} more {what} \u2026", edges[j - 1]))
        else:
            out.extend(edges[i:j])
        i = j
    return out


_MODULE_DICTS = ("._modules", "._parameters", "._buffers")


def _module_paths(edges: Sequence[str], types: Sequence[str]) -> List[str]:
    """A module's submodules, parameters and buffers as torch names them: ``.layers.0.weight``
    rather than ``._modules['layers']._modules['0']._parameters['weight']``."""
    out: List[str] = []
    i = 0
    while i < len(edges):
        e = edges[i]
        key = edges[i + 1] if i + 1 < len(edges) else ""
        if (e in _MODULE_DICTS and i + 1 < len(types) and types[i + 1] == "dict"
                and key.startswith("['") and key.endswith("']") and "'" not in key[2:-2]):
            out.append("." + key[2:-2])
            i += 2
        else:
            out.append(e)
            i += 1
    return out


def _join(head: str, edges: Sequence[str]) -> str:
    """A compact path: ".x" and "[k]" stick to what precedes them, anything else is spaced."""
    parts = [head]
    for e in edges:
        after_gap = parts[-1].endswith("\u2026")  # "… 8 more .next …" stands apart
        parts.append(e if e.startswith((".", "[")) and not after_gap else " " + e)
    return "".join(parts)


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
        return self.text()

    def text(self, fold: bool = True) -> str:
        """The whole line: the root and each reference; ``fold``: a run of four or more
        references of one kind (an autograd graph's ``.next_functions``) as its first and last
        with the count between."""
        s = " ".join([self.root] + (_folded(self.edges) if fold else list(self.edges)))
        if self.others:
            s += f" (+{self.others} other referrer{'s' if self.others > 1 else ''})"
        return s

    @property
    def name(self) -> Optional[str]:
        """What a person would call the object, for a table's row: ``__main__.loss_history[3]``,
        ``train() local batch['x']``, the holder and the last reference when that is long; None
        unless the chain is a root's. A tensor saved for backward is named by the tensor whose
        graph keeps it (the chain up to its ``.grad_fn``)."""
        if self.kind != "root":
            return None
        edges = list(self.edges)
        for i, e in enumerate(edges):
            if e.startswith(".grad_fn"):
                edges = edges[:i]
                break
        edges = _module_paths(edges, self.types)
        root = self.root
        if root.startswith("module "):
            head = root[len("module "):]
        elif " at " in root and root.endswith(")") and " (thread " in root:
            head = root.split(" at ", 1)[0]  # "train()": the frame's function
        else:
            head = root
        if not edges:
            return head
        full = _join(head, edges)
        if len(full) <= _NAME_MAX:
            return full
        folded = _join(head, _folded(edges))
        if len(folded) <= _NAME_MAX or len(edges) < 3:
            return folded
        return _join(head, [edges[0], "\u2026", edges[-1]])

    @property
    def in_flight(self) -> bool:
        """Whether the chain runs through the autograd graph of a local variable of running
        code (``forward() local x .grad_fn → ...``): a forward pass in progress, whose
        activations are the graph's until backward frees them."""
        return (self.kind == "root" and len(self.edges) >= 2 and " (thread " in self.root
                and self.edges[0].startswith("local ") and self.edges[1].startswith(".grad_fn"))

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
                "types": list(self.types), "others": self.others, "text": self.text(fold=False)}


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
    frame.f_locals on 3.10-3.12 is a dict the frame keeps, the one locals() returned, which
    reading it would update and which would pin what it holds, and which a tracer's trampoline
    writes back into the frame); 3.13's frame.f_locals is a proxy that keeps nothing, so a copy
    of it serves. A module's or class body's frame gives its
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
    return dict(loc)  # 3.13's proxy: a copy


def _roots(me: Any, late_caller: bool,
           named: Sequence[Tuple[str, Any]] = ()) -> Tuple[List[Any], List[str], List[Any], int]:
    """(roots, their labels, snapshots of our own frames' locals, how many roots at the end are
    late). A frame's root is a snapshot of its locals, so its edges read as local names; our
    frames are left out. ``named``: (label, object) roots of the caller's, first. With
    ``late_caller`` the first frame of this thread that is not ours (whoever called us) comes
    last, searched from only after everything else."""
    roots: List[Any] = [o for _, o in named]
    labels: List[str] = [label for label, _ in named]
    mods = sorted(sys.modules.items(), key=lambda kv: kv[0] != "__main__")
    for name, mod in mods:
        if mod is not None:
            roots.append(mod)
            labels.append(f"module {name}")
    names = _thread_names()
    ours: List[Any] = []
    late: List[Tuple[Any, str]] = []
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
            if tid == me and _ours(f):
                if loc is not None:
                    ours.append(loc)
            elif loc is None:
                late_caller = late_caller and tid != me  # a mapping of the user's: not read
            elif loc is f.f_globals:  # a module's code: its module is a root already
                late_caller = late_caller and tid != me
            elif late_caller and tid == me:
                late.append((loc, _frame_label(f, thread)))
                late_caller = False
            else:
                roots.append(loc)
                labels.append(_frame_label(f, thread))
            f = f.f_back
    del frames, top, f, loc
    for tid, d in _tensorgc._thread_states():
        if d is not None:
            roots.append(d)
            labels.append(f"state of thread {names.get(tid, f'#{tid}')}")
    for loc, label in late:
        roots.append(loc)
        labels.append(label)
    return roots, labels, ours, len(late)


_ROOTS_CODE = _roots.__code__
_GENERATORS = ("generator", "coroutine", "async_generator")


def _thread_of_local(dummies: Any, ldict: Any, names: Dict[int, str]) -> Optional[str]:
    """The thread whose values of a threading.local are ``ldict``, found from the local's map of
    per-thread dicts (``dummies``: keyed by a weak reference to a dummy object that the thread's
    state dict holds; from 3.13 on by the dummy itself, which no state dict shows); None when it
    cannot be told."""
    if type(dummies) is not dict:
        return None
    key = next((k for k, v in dummies.items() if v is ldict), None)
    token = key() if isinstance(key, weakref.ref) else key
    if token is None:
        return None
    for tid, d in _tensorgc._thread_states():
        if type(d) is dict and any(v is token for v in d.values()):
            return names.get(tid, f"#{tid}")
    return None


def _tidy(label: str, edges: List[str], types: List[str], along: List[Any]) -> None:
    """Frame roots read "local x" rather than "['x']"; a threading.local's per-thread dict reads
    "(thread-local, thread T) .x" rather than "→ dict [<weakref.ReferenceType>] ['x']"; a
    generator's or coroutine's local names its function: "batches() local cache". ``along``:
    the objects the edges come from, the root's first (edges[i] leads from along[i] to
    along[i + 1]). The per-thread dicts are keyed by a weak reference to the thread's dummy up
    to 3.12 and by the dummy itself from 3.13 on (Modules/_threadmodule.c's localdicts)."""
    if edges and edges[0].startswith("['") and edges[0].endswith("']") and " (thread " in label:
        edges[0] = "local " + edges[0][2:-2]
    for i, e in enumerate(edges):
        if types[i] in _GENERATORS and e.startswith("local "):
            fn = getattr(along[i], "__qualname__", None)  # a C getter: these types are final
            if isinstance(fn, str):
                edges[i] = f"{fn}() {e}"
    for i in range(len(edges) - 1):
        if (issubclass(type(along[i]), threading.local) and edges[i] == "\u2192 dict"
                and edges[i + 1].startswith(("[<weakref", "[<_thread._localdummy"))
                and i + 2 < len(along)):
            thread = _thread_of_local(along[i + 1], along[i + 2], _thread_names())
            del edges[i:i + 2], types[i + 1:i + 3], along[i + 1:i + 3]
            edges.insert(i, "(thread-local)" if thread is None else
                         f"(thread-local, thread {thread})")
            types.insert(i + 1, "dict")
            along.insert(i + 1, None)
            if i + 1 < len(edges) and edges[i + 1].startswith("['") and edges[i + 1].endswith("']"):
                edges[i + 1] = "." + edges[i + 1][2:-2]
            break


def _type_name(o: Any) -> str:
    return type(o).__name__


Roots = Mapping[str, Mapping[str, Any]]  # {label: {name: object}}: named roots, searched first
_LABEL_MAX = 200  # a named root's label is cut here: it starts every chain from the root


def _named_roots(roots: Optional[Roots]) -> Tuple[List[str], List[Dict[str, Any]]]:
    """(labels, namespaces) of the caller's named roots, each label cut to _LABEL_MAX characters
    and each namespace a dict of our own (a root is entered, and what our frames hold directly
    is not: the dicts are only in a list)."""
    if roots is None:
        return [], []
    if not isinstance(roots, Mapping):
        raise TypeError("tensorgc: roots must be a mapping {label: {name: object}}, not "
                        f"{type(roots).__name__}")
    labels: List[str] = []
    spaces: List[Dict[str, Any]] = []
    for label, space in roots.items():
        if not isinstance(label, str) or not isinstance(space, Mapping):
            raise TypeError("tensorgc: roots must map a str label to a mapping of names "
                            f"to objects, not {type(label).__name__} to {type(space).__name__}")
        labels.append(label[:_LABEL_MAX])
        spaces.append(dict(space))
    return labels, spaces


# 3.10 keeps a call's arguments on the caller's value stack until the call returns, where no
# traversal sees them (3.11+ hands them to the callee's frame, whose locals the search reads):
# owner(x) discounts that one reference, else x held only from C would read as held twice, and
# x in an uncollected cycle as held from outside.
_CALL_KEEPS_ARGS = sys.version_info < (3, 11)


def _chains(objs: Sequence[Any], max_objects: Optional[int], late_caller: bool = False,
            named: Optional[Roots] = None, held_by_call: Sequence[Any] = (),
            stop_when_found: bool = False, info_out: Optional[Dict[str, int]] = None,
            second_pass: bool = True, frames_first: bool = False) -> List[Chain]:
    """The chains of ``objs``; ``late_caller``: our caller's frame is searched last (owner(),
    owners()); ``named``: {label: {name: object}} roots searched first (the pytest plugin's
    fixtures); ``held_by_call``: objects our caller's call holds one reference to that no
    traversal shows (owner()'s argument on 3.10). ``stop_when_found``: the pass ends once every
    object is found (MemReporter's automatic search): each chain is still the shortest, but
    ``others`` is not counted (0). ``info_out``: gets the pass's counts (visited, truncated,
    second_pass, stopped) and its bound. ``second_pass=False``: no search among the objects the
    roots do not reach (it lists every tracked object first): an object not reached is "unknown"
    rather than held outside Python or garbage. ``frames_first`` (with stop_when_found, without
    late_caller or the second pass): a first pass from the roots that are not modules (the named
    ones, the frames, the threads' states) that enters no module and no module's namespace,
    then, for what it did not find, the whole search within what is left of ``max_objects``: a
    tensor a running frame holds is found without walking every module's namespace first (its
    chain is the shortest from the frames, where a module may hold it by a shorter one)."""
    _check_max_objects(max_objects)
    if frames_first and (late_caller or second_pass or not stop_when_found):
        raise ValueError("frames_first goes with stop_when_found, without late_caller or the "
                         "second pass")
    named_labels, named_spaces = _named_roots(named)
    n_named = len(named_labels)
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
        # named roots first: at an equal distance the first root wins
        roots, labels, ours, n_late = _roots(me, late_caller,
                                             list(zip(named_labels, named_spaces)))
        tracked: Optional[List[Any]] = gc.get_objects() if second_pass else None
        bound = (max_objects if max_objects is not None else
                 _default_max_objects(len(tracked) if tracked is not None else
                                      len(gc.get_objects())))
        bound = min(bound, 0xFFFFFFFE)  # the engine's indices are 32-bit
        # Our own lists are never roots, and what our frames hold (the reporter's lists of
        # tensors, say) is ours too: never entered, and its references do not make a target
        # look held. The snapshots of our frames' locals come last (subtracted twice).
        mine = [v for d in ours for v in d.values() if id(v) not in first and gc.is_tracked(v)]
        # A list of the call's arguments, subtracted twice like the snapshots: once for its own
        # references, once for the caller's. Made after the snapshots, so none of them lists it
        # (an object in `mine` is subtracted once).
        ours = ours + ([list(held_by_call)] if held_by_call else [])
        if frames_first:
            found, referrers, info = _frames_then_all(roots, labels, n_named, targets, objs, ours,
                                                      mine, bound)
        else:
            exclude = [objs, targets, roots, labels, ours, mine] + mine + ours
            res = _tensorgc._owner_search(roots, targets, exclude, len(ours), tracked, bound,
                                          n_late, stop_when_found)
            del exclude
            found, referrers, info = res
            del res
        del tracked, ours, mine
        if info_out is not None:
            info_out.update(info, bound=bound)
        if info["stopped"]:
            referrers = [min(r, 1) for r in referrers]  # partial counts: not shown
        out: List[Chain] = []
        for i in (first[id(o)] for o in objs):
            item = found[i]
            others = max(0, referrers[i] - 1)
            if item is None:
                if info["truncated"]:
                    out.append(Chain("unknown", f"not reached within max_objects={bound}",
                                     others=referrers[i]))
                elif not second_pass:
                    out.append(Chain("unknown", "not reached from a root (held outside Python or "
                                     "garbage: the search that tells which was not run)",
                                     others=referrers[i]))
                else:
                    out.append(Chain("outside", "held outside Python by something the collector "
                                     "does not track", others=referrers[i]))
                continue
            kind, n, chain, cut, dropped = item
            edges_idx = _tensorgc._owner_labels(chain, cut)
            edges = [e for e, _ in edges_idx]
            if cut:
                edges = [f"\u2026 {dropped} references left out \u2026" if e == "\u2026" else e
                         for e in edges]
            along = [chain[0]] + [chain[j] for _, j in edges_idx]
            types = [_type_name(x) for x in along]
            if kind == "root":
                label = labels[n]
                if n < n_named and edges and edges[0].startswith("['") and edges[0].endswith("']"):
                    edges[0] = edges[0][2:-2]  # a named root's name: "session-scoped fixture x"
            elif kind == "garbage":
                label = ("unreachable: in a reference cycle the collector has not freed yet: "
                         f"{_type_name(chain[0])}")
            else:
                label = (f"held outside Python ({n} reference{'s' if n != 1 else ''} no Python "
                         f"object shows): {_type_name(chain[0])}")
            _tidy(label, edges, types, along)
            del along
            out.append(Chain(kind, label, tuple(edges), tuple(types), others))
            del chain, item
        return out
    finally:
        if enabled:
            gc.enable()


_MODULE_DICT: Any = vars(types.ModuleType)["__dict__"]  # the C getter: no module's code runs


def _frames_then_all(roots: List[Any], labels: List[str], n_named: int, targets: List[Any],
                     objs: Any, ours: List[Any], mine: List[Any], bound: int
                     ) -> Tuple[List[Any], List[int], Dict[str, int]]:
    """_chains(frames_first=True)'s two passes, as one _owner_search's (found, referrers, info):
    first from the roots that are not modules, no module or module namespace entered; then from
    every root, for the targets the first did not find, within what is left of ``bound``."""
    is_mod = [i >= n_named and lab.startswith("module ") for i, lab in enumerate(labels)]
    keep = [i for i, m in enumerate(is_mod) if not m]
    first_roots = [roots[i] for i in keep]
    mods = [roots[i] for i, m in enumerate(is_mod) if m]
    spaces: List[Any] = []
    for m in mods:
        try:
            spaces.append(_MODULE_DICT.__get__(m))
        except Exception:  # noqa: BLE001 -- not a module after all
            continue
    exclude = ([objs, targets, roots, labels, ours, mine, first_roots, mods, spaces] + mods
               + spaces + mine + ours)
    found, referrers, info = _tensorgc._owner_search(first_roots, targets, exclude, len(ours),
                                                     None, bound, 0, True)
    del exclude, spaces, mods
    # a root's index, as the caller's labels number them
    found = [None if f is None else
             (f[0], keep[f[1]] if f[0] == "root" else f[1], f[2], f[3], f[4]) for f in found]
    left = [j for j, f in enumerate(found) if f is None]
    info = dict(info)
    if left and not info["truncated"] and bound > info["visited"]:
        rest = [targets[j] for j in left]
        exclude = [objs, targets, roots, labels, ours, mine, rest, first_roots] + mine + ours
        f2, r2, i2 = _tensorgc._owner_search(roots, rest, exclude, len(ours), None,
                                             bound - info["visited"], 0, True)
        del exclude, rest
        for j, f, r in zip(left, f2, r2):
            found[j] = f
            referrers[j] = r
        info["visited"] += i2["visited"]
        info["truncated"] = i2["truncated"]
        info["stopped"] = i2["stopped"]
        info["passes"] = 2
    else:
        info["passes"] = 1
        if left and bound <= info["visited"]:
            info["truncated"] = 1  # the first pass used the whole bound
    info["stopped"] = int(all(f is not None for f in found))
    return found, referrers, info


def owners(objs: Iterable[Any], *, max_objects: Optional[int] = None,
           roots: Optional[Roots] = None) -> List[Chain]:
    """For each object, the shortest chain of references that keeps it alive (see Chain), all
    found in one pass. The objects are only compared by identity. The caller's own frame is
    searched last: its locals name a holder only of what nothing else holds. ``max_objects``:
    the most objects the pass visits (None: every object alive; see the module's docstring).
    ``roots``, {label: {name: object}}: named roots searched before the others (first at an
    equal distance); a chain from one reads ``label name ...`` and its holder is ``label
    name``."""
    return _chains(list(objs), max_objects, late_caller=True, named=roots)


def owner(obj: Any, *, max_objects: Optional[int] = None,
          roots: Optional[Roots] = None) -> Chain:
    """owners([obj])[0]: what keeps ``obj`` alive besides the caller's own frame."""
    return _chains([obj], max_objects, late_caller=True, named=roots,
                   held_by_call=(obj,) if _CALL_KEEPS_ARGS else ())[0]
