"""What grows: the storages born between two points of a run that are still alive, grouped by
what holds them.

    before = tensorgc.checkpoint()
    for step in range(100):
        train_step()
        if step % 10 == 9:
            g = tensorgc.growth(before)
            logger.info(g.summary())   # one line: bytes, storages, the largest owners
    print(g)                           # the groups with each one's chain

A storage is known by its device, data address and size. One freed and replaced at the same
address with the same size between the two points counts as old (the caching allocator does
that with a step's activations); a leak keeps its storages, so each step's new ones are new.

Each call reads the live tensors from the index of live tensors (reporter/index.c, which
checkpoint() turns on when it is off: one walk of the heap, then kept while a Checkpoint is
alive) and the tensors autograd saved for backward from their graphs, and lists their storages'
keys in C (reporter/storages.c); growth() compares those with the checkpoint's and searches
owners (tensorgc.owners) only when some storage is new, once, for the new ones. A checkpoint
keeps three numbers per storage (and, while it lives, the table its pass built of them) and no
reference to a tensor.
"""
from __future__ import annotations

import gc
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Set, Tuple

from .. import _tensorgc
from .._common.devices import DeviceLike
from .owner_chains import _check_max_objects, _named_roots
from ..reporter import (Filter, MemReporter, NamedTensor, Row, _owners_of, _parse_device,
                       _saved_for_backward, _warn_no_cuda, readable_size)

__all__ = ["Checkpoint", "Growth", "checkpoint", "growth"]

Key = Tuple[str, int, int]  # (device, data address, bytes)


@dataclass(frozen=True)
class Checkpoint:
    """The storages alive at one point (see checkpoint())."""
    keys: FrozenSet[Key]
    device: Optional[str]
    time: float
    nbytes: int


@dataclass
class Growth:
    """The storages alive now that were not at the checkpoint. ``groups``: (holder, bytes,
    storages, one row's whole chain) per owner, largest first; a storage with no owner chain
    (a parameter, grad, buffer or optimizer state of a model named to MemReporter) is grouped by
    its kind."""
    rows: List[Row]
    groups: List[Tuple[str, int, int, str]]
    nbytes: int
    freed: int           # storages alive at the checkpoint (on the device compared) and gone now
    seconds: float       # since the checkpoint
    device: Optional[str] = None
    # by allocation site, where the allocator recorded it (CUDA under
    # tensorgc.record_memory_history): (site, bytes, storages), largest first
    sites: List[Tuple[str, int, int]] = field(default_factory=list)

    def summary(self, top: int = 3) -> str:
        """One line for a log: the growth and its largest owners."""
        head = (f"tensorgc: +{readable_size(self.nbytes)} in {len(self.rows)} storage"
                f"{'s' if len(self.rows) != 1 else ''} born in the last {self.seconds:.1f} s "
                f"and alive ({self.freed} freed)")
        if not self.groups:
            return head
        parts = [f"{h} +{readable_size(b)} ({n})" for h, b, n, _ in self.groups[:top]]
        more = len(self.groups) - top
        return head + ": " + ", ".join(parts) + (f", {more} more" if more > 0 else "")

    def format(self) -> str:
        lines = [self.summary(top=0) if not self.groups else self.summary()]
        for holder, b, n, chain in self.groups:
            lines.append(f"  {readable_size(b):>10s}  {n:>5d}  {holder}")
            if chain and chain != holder:
                lines.append(f"{'':19s}{chain}")
        if self.sites:
            lines.append("  by allocation site:")
            for site, b, n in self.sites:
                lines.append(f"  {readable_size(b):>10s}  {n:>5d}  {site}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def _repr_html_(self) -> str:
        """For notebooks: the summary, the bytes by owner and by site, as HTML (escaped)."""
        from .notebook_html import growth_html

        return growth_html(self)

    def to_dict(self) -> Dict[str, Any]:
        return {"nbytes": self.nbytes, "storages": len(self.rows), "freed": self.freed,
                "seconds": self.seconds, "device": self.device,
                "groups": [{"holder": h, "nbytes": b, "storages": n, "chain": c}
                           for h, b, n, c in self.groups],
                "sites": [{"site": s, "nbytes": b, "storages": n} for s, b, n in self.sites]}


def _key(r: Row) -> Key:
    return (r.device, r.address or 0, r.storage_bytes)


def _tensors(reporter: Optional[MemReporter]
             ) -> Tuple[List[NamedTensor], List[Any], Dict[int, Tuple[Any, str]], List[Any]]:
    """What MemReporter.collect() counts, in its order, without the rows: (named, live, paths,
    tensors): the reporter's named tensors and those autograd saved for backward, every live
    tensor object (from the index), where each saved one is saved, and the named ones' tensors
    followed by the live ones (the list whose storages are keyed). Called with automatic
    collection off."""
    live = _tensorgc._live_tensors()
    named = reporter._named() if reporter is not None else []
    paths: Dict[int, Tuple[Any, str]] = {}
    named.extend(_saved_for_backward(live, named, paths=paths))
    if not named:
        return named, live, paths, live
    tensors = [t for t, _, _ in named]
    tensors.extend(live)
    return named, live, paths, tensors


# id(checkpoint) -> the table of its keys that its pass built (reporter/storages.c), which
# growth() copies rather than reading the keys back; dropped with the checkpoint. A copy or a
# pickled checkpoint has none: its keys are read. Written and read with the GIL, one item at a
# time.
_TABLES: Dict[int, Any] = {}


def _forget(ident: int) -> None:
    """A checkpoint is gone: its table, and its hold on the index."""
    _TABLES.pop(ident, None)
    _tensorgc._index_release()


def checkpoint(device: Optional[DeviceLike] = None) -> Checkpoint:
    """The storages alive now (on ``device``, or every device), to compare with later. Turns
    the index of live tensors on if it is off (one walk of the heap); it then stays on while
    this Checkpoint, or another that needed it, is alive."""
    import torch  # noqa: F401 -- as MemReporter does: it may come before the user imports it

    filt = _parse_device(device)
    _warn_no_cuda(filt, device)
    _tensorgc._index_hold()  # before the read: the index is on for it
    try:
        enabled = gc.isenabled()
        gc.disable()
        try:
            _, _, _, tensors = _tensors(None)
            keys, _, _, nbytes, table = _tensorgc._storage_keys(tensors, filt, None)
            del tensors
        finally:
            if enabled:
                gc.enable()
        cp = Checkpoint(frozenset(keys), None if device is None else str(device),
                        time.monotonic(), nbytes)
    except BaseException:
        _tensorgc._index_release()
        raise
    _TABLES[id(cp)] = table
    weakref.finalize(cp, _forget, id(cp))  # the hold lasts as long as the checkpoint
    return cp


def _before_on(before: Checkpoint, filt: Filter) -> int:
    """How many of the checkpoint's storages are on the devices ``filt`` keeps: all of them
    when it was taken there; a checkpoint of every device compared on one counts that one's."""
    if filt is None or before.device is not None:
        return len(before.keys)
    keeps: Dict[str, bool] = {}
    n = 0
    for dev, _, _ in before.keys:
        keep = keeps.get(dev)
        if keep is None:
            kind, _, index = dev.partition(":")
            keep = keeps[dev] = kind == filt[0] and (
                filt[1] is None or (int(index) if index.isdigit() else 0) == filt[1])
        n += keep
    return n


def growth(before: Checkpoint, device: Optional[DeviceLike] = None, *,
           reporter: Optional[MemReporter] = None,
           roots: Optional[Mapping[str, Mapping[str, Any]]] = None,
           max_objects: Optional[int] = None) -> Growth:
    """The storages born since ``before`` and still alive, grouped by owner (tensorgc.owners).
    ``device`` defaults to the checkpoint's; ``reporter`` (a MemReporter of the model) names
    parameters, grads and optimizer state rather than searching their owners; ``roots`` ({label:
    {name: object}}) are named roots the owner search tries first (tensorgc.owners);
    ``max_objects`` bounds the owner search as in tensorgc.owners (None: every object alive)."""
    if not isinstance(before, Checkpoint):
        raise TypeError(f"tensorgc.growth: before must be a Checkpoint (tensorgc.checkpoint()), "
                        f"not {type(before).__name__}")
    if device is not None and before.device is not None and str(device) != before.device:
        raise ValueError(f"tensorgc.growth: the checkpoint was taken on {before.device}, not "
                         f"{device}: compare on one device (or checkpoint every device)")
    _named_roots(roots)  # a bad one is an error whether or not a search runs
    _check_max_objects(max_objects)
    dev = device if device is not None else before.device
    filt = _parse_device(dev)
    _warn_no_cuda(filt, dev)
    rep = reporter or MemReporter()
    if rep.pre_collect:
        gc.collect()
    _tensorgc._index_hold()
    enabled = gc.isenabled()
    gc.disable()  # no collection in the middle: it could free what we are counting
    named: List[NamedTensor] = []
    live: List[Any] = []
    tensors: List[Any] = []
    try:
        named, live, paths, tensors = _tensors(reporter)
        table = _TABLES.get(id(before))
        keys, where, matched, _, _ = _tensorgc._storage_keys(
            tensors, filt, before.keys if table is None else table)
        freed = _before_on(before, filt) - matched
        new = _new_rows(rep, named, live, paths, tensors, filt, keys, where or [], roots,
                        max_objects)
    finally:
        del named, live, tensors  # no tensor outlives the call
        paths = None  # type: ignore[assignment]
        if enabled:
            gc.enable()
        _tensorgc._index_release()
    groups: Dict[str, List[Row]] = {}
    for r in new:
        groups.setdefault(r.holder or r.kind, []).append(r)
    out = [(h, sum(r.storage_bytes for r in rs), len(rs), rs[0].owner or "")
           for h, rs in groups.items()]
    out.sort(key=lambda g: -g[1])
    by_site: Dict[str, List[int]] = {}
    for r in new:
        if r.site:
            acc = by_site.setdefault(r.site, [0, 0])
            acc[0] += r.storage_bytes
            acc[1] += 1
    sites = sorted(((s, b, n) for s, (b, n) in by_site.items()), key=lambda x: -x[1])
    return Growth(new, out, sum(r.storage_bytes for r in new), freed,
                  time.monotonic() - before.time, None if dev is None else str(dev), sites)


def _new_rows(rep: MemReporter, named: List[NamedTensor], live: List[Any],
              paths: Dict[int, Tuple[Any, str]], tensors: List[Any], filt: Filter,
              keys: List[Key], where: List[int],
              roots: Optional[Mapping[str, Mapping[str, Any]]] = None,
              max_objects: Optional[int] = None) -> List[Row]:
    """MemReporter's rows of the new storages: the rows of the tensors that claim them (each
    storage's first tensor, in MemReporter's order), their owners found in one search for
    those alone. No search when nothing is new."""
    if not keys:
        return []
    n_named = len(named)
    claim = sorted(set(where))
    sub_named = [named[i] for i in claim if i < n_named]
    sub_live = [tensors[i] for i in claim if i >= n_named]
    only: Set[int] = {id(t) for t, _, _ in sub_named}
    only.update(id(t) for t in sub_live)
    owner_of = _owners_of(named, live, paths, only=only, roots=roots, max_objects=max_objects)
    report = rep._build(sub_named, sub_live, filt, owner_of)
    new = set(keys)
    return [r for r in report.rows if r.address and r.storage_bytes and _key(r) in new]
