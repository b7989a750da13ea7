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
Each call walks the live tensors once (MemReporter's walk) and growth() searches their owners
once (tensorgc.owners); a checkpoint keeps three numbers per storage and no reference.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from ._devices import DeviceLike
from .reporter import MemReporter, Row, readable_size

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
    freed: int           # storages alive at the checkpoint and gone now
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

    def to_dict(self) -> Dict[str, Any]:
        return {"nbytes": self.nbytes, "storages": len(self.rows), "freed": self.freed,
                "seconds": self.seconds, "device": self.device,
                "groups": [{"holder": h, "nbytes": b, "storages": n, "chain": c}
                           for h, b, n, c in self.groups],
                "sites": [{"site": s, "nbytes": b, "storages": n} for s, b, n in self.sites]}


def _storages(device: Optional[DeviceLike], owners: bool,
              reporter: Optional[MemReporter]) -> List[Row]:
    rep = (reporter or MemReporter())._collect(device, True, owners)
    return [r for r in rep.rows if r.address and r.storage_bytes]


def _key(r: Row) -> Key:
    return (r.device, r.address or 0, r.storage_bytes)


def checkpoint(device: Optional[DeviceLike] = None) -> Checkpoint:
    """The storages alive now (on ``device``, or every device), to compare with later."""
    rows = _storages(device, False, None)
    return Checkpoint(frozenset(_key(r) for r in rows), None if device is None else str(device),
                      time.monotonic(), sum(r.storage_bytes for r in rows))


def growth(before: Checkpoint, device: Optional[DeviceLike] = None, *,
           reporter: Optional[MemReporter] = None) -> Growth:
    """The storages born since ``before`` and still alive, grouped by owner (tensorgc.owners).
    ``device`` defaults to the checkpoint's; ``reporter`` (a MemReporter of the model) names
    parameters, grads and optimizer state rather than searching their owners."""
    if not isinstance(before, Checkpoint):
        raise TypeError(f"tensorgc.growth: before must be a Checkpoint (tensorgc.checkpoint()), "
                        f"not {type(before).__name__}")
    if device is not None and before.device is not None and str(device) != before.device:
        raise ValueError(f"tensorgc.growth: the checkpoint was taken on {before.device}, not "
                         f"{device}: compare on one device (or checkpoint every device)")
    dev = device if device is not None else before.device
    rows = _storages(dev, True, reporter)
    now = {_key(r) for r in rows}
    new = [r for r in rows if _key(r) not in before.keys]
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
    return Growth(new, out, sum(r.storage_bytes for r in new), len(before.keys - now),
                  time.monotonic() - before.time, None if dev is None else str(dev), sites)
