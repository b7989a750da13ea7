"""Courtesy: give a device's memory back for a while, then take it again (memlab's API).

    c = Courtesy()                # device="cuda": every CUDA device; or "cuda:1", "cpu", ...
    moved = c.yield_memory()      # Moved(nbytes, tensors, storages, skipped); device memory freed
    ...                           # another job uses the GPU
    c.restore()                   # everything back on its device, bit for bit

    with Courtesy("cuda:0") as c: # yields on enter, restores on exit (exceptions too)
        ...

What is moved: every live tensor on the device that the package's C walk of the collector's
object lists finds (reporter/walk.c), plus, reached from each of them, its ``.grad`` (grads
often have no Python wrapper until asked for, so the walk cannot see them) and its view base
(``._base``, often alive only inside the view). Parameters, grads, buffers, optimizer state and
any other tensor a Python object holds are covered; memlab's version fails on parameters whose
grad is None, this one does not.

How: tensors are grouped by storage (device, data_ptr), so views and tied parameters are copied
once. Each storage's bytes are copied once (``untyped_storage``: every dtype, bool and complex
included, bit for bit) into a host storage: pinned memory when the source is CUDA (copied with
``non_blocking=True``, between two synchronizes of each device: the first so that writes on any
stream are in, the second so that the copies are), a plain CPU storage when the source is
the CPU (``device="cpu"``, which is how CI runs the whole mechanism). Every tensor that used the
storage is then re-pointed at the host storage with its own offset, size and stride, in place
(its ``.data`` is replaced; see "set_ vs .data" below). The tensor objects keep their identity,
class, ``requires_grad``, hooks and autograd version counter: ``nn.Parameter`` objects stay the
ones the optimizer holds, views stay views of their base, tied parameters stay one storage.
Then ``torch.cuda.empty_cache()`` (CUDA). ``restore()`` copies each host storage into a new
storage on the original device (same index) and re-points the same tensors again.

Decisions:

- References: while yielded, Courtesy holds strong references to the tensors it moved and to
  their host storages. A tensor dropped by the program meanwhile stays alive until restore(),
  which still copies it back (one transient device allocation) and then lets it go. This is
  what memlab's dictionary of tensors does too and it makes restore() exact and simple; weak
  references would not be reliable for grads and view bases, whose Python wrappers come and go
  while C++ keeps the tensor.
- Idempotence: ``yield_memory()`` while already yielded raises RuntimeError (with device="cpu" a
  second walk would find the host copies and move them again). ``restore()`` with nothing
  yielded is a no-op that returns ``Moved(0, 0, 0, 0)``, so it is safe in ``finally`` blocks and
  after a manual restore inside ``with``.
- Skipped, with one WARNING on logger "tensorgc" per yield that says why and how many bytes
  stay (never an exception): tensors with no plain storage (sparse COO/CSR, nested, wrapper
  subclasses), quantized tensors, efficient zero tensors; storages that are not resizable
  (memory owned by someone else: ``torch.from_numpy``, DLPack, ``share_memory_()``, CUDA IPC,
  ``from_blob``), since re-pointing would break the sharing; and storages referenced by a
  tensor the walk cannot see (``torch._C._storage_Use_Count`` above the tensors found: a live
  autograd graph's saved outputs, DDP buckets, C++ caches), since moving them would free nothing
  and break the aliasing. Meta tensors never match a "cpu" or "cuda" filter. A storage is moved
  with all of its tensors or not at all.
- set_ vs .data: ``t.set_(host_storage, offset, size, stride)`` refuses a storage of another
  device ("Attempted to set the storage of a tensor on device cuda:0 to a storage on different
  device cpu") and bumps the version counter, so a backward after a yield/restore pair would
  raise "modified by an inplace operation". ``.data = view`` (``VariableHooks::set_data``, what
  memlab uses) changes device, keeps the version counter and ignores
  ``allow_tensor_metadata_change``. The view is built with ``set_`` on a fresh tensor (under
  ``no_grad``, or ``inference_mode`` for inference tensors) and carries the conj/neg bits.
- Autograd: because version counters are kept, a graph built before ``yield_memory()`` can
  still run backward after ``restore()`` (tested): parameters saved as inputs come back bit for
  bit, saved outputs are not moved (see skipped). Backward while yielded mixes devices and
  fails. Courtesy is meant for between steps, like memlab's.
- restore() allocates every device storage before it re-points anything: if the device is full
  (someone else took the memory), it raises with everything still on the host and can be called
  again. A tensor whose storage was replaced while yielded (``t.data = ...``, ``t.set_(...)``)
  is left as it is, with a warning; in-place changes of the host copy, a resize included, are
  kept.
- Host memory: pinned blocks come from PyTorch's caching host allocator, which rounds each up
  to a power of two (measured on an H100, torch 2.11: a 17 MiB request holds 32 MiB), so while
  yielded the host may hold up to twice the bytes moved; ``Courtesy(pin_memory=False)`` takes
  exactly the bytes, with slower, synchronous copies. After restore() of CUDA storages, unused
  pinned host blocks are returned (``torch._C._host_emptyCache`` where torch has it).

Not seen, so not moved: tensors held only by C++ (a live graph's saved tensors, DDP buckets,
CUDA graph pools), and tensor objects frozen with ``gc.freeze()`` (the walk does not visit the
permanent generation). A Python storage object kept by user code (``s = t.untyped_storage()``)
keeps the old storage alive. Copies run on each device's current stream, after a device-wide
synchronize; call Courtesy from the thread that owns the tensors, with no other thread using
them. CUDA graphs captured on the tensors hold their old addresses: capture again after restore.
memlab has no module-level helper for Courtesy; neither does this module.
"""
from __future__ import annotations

import gc
import logging
from types import TracebackType
from typing import (TYPE_CHECKING, Any, Dict, List, Literal, NamedTuple, Optional, Sequence,
                    Set, Tuple, Type)

from .. import _tensorgc
from .._common.devices import NO_CUDA, DeviceLike, cuda_available
from ..reporter import _matches, _parse_device, readable_size

if TYPE_CHECKING:
    import torch
    from torch import Tensor, UntypedStorage  # for functions whose local `torch` is _torch()

    from .._tensorgc import _TensorRow

    # (device, tensors, their storages, the storage to copy, bytes)
    _Plan = Tuple[torch.device, List[torch.Tensor], List[torch.UntypedStorage],
                  torch.UntypedStorage, int]
    # one storage's tensors: [(tensor, walk row, why it cannot move or None)]
    _Members = List[Tuple[torch.Tensor, _TensorRow, Optional[str]]]

__all__ = ["Courtesy", "Moved"]

logger = logging.getLogger("tensorgc")


class Moved(NamedTuple):
    """What yield_memory() moved to the host, or what restore() moved back."""
    nbytes: int       # bytes of the storages, each counted once
    tensors: int      # tensor objects re-pointed
    storages: int     # storages copied
    skipped: int = 0  # tensors left where they were (see the module docstring for why)


class _Group:
    """One storage: its device, the tensors that use it, and its host copy while yielded."""
    __slots__ = ("device", "tensors", "host")

    def __init__(self, device: torch.device, tensors: List[torch.Tensor],
                 host: torch.UntypedStorage) -> None:
        self.device = device    # torch.device the storage came from
        self.tensors = tensors  # [tensor]
        self.host = host        # UntypedStorage on the CPU (pinned when device is CUDA)


_SPARSE_LAYOUTS: Tuple[Any, ...] = ()


def _torch() -> Any:
    """torch, with the sparse layouts of this version looked up once. (Any: this module works
    with TensorBase's descriptors, which torch's annotations do not describe.)"""
    global _SPARSE_LAYOUTS
    import torch

    if not _SPARSE_LAYOUTS:
        names = ("sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")
        _SPARSE_LAYOUTS = tuple(getattr(torch, n) for n in names if hasattr(torch, n))
    return torch


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over a whole untyped storage."""
    torch = _torch()
    t: Tensor = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    return t


def _repoint(t: torch.Tensor, storage: torch.UntypedStorage) -> None:
    """Make ``t`` use ``storage`` (any device) with its own offset, size and stride, in place:
    same object, same autograd meta and version counter (see "set_ vs .data")."""
    torch = _torch()
    TB = torch._C.TensorBase
    ctx = torch.inference_mode() if TB.is_inference(t) else torch.no_grad()
    with ctx:
        n = torch.empty(0, dtype=TB.dtype.__get__(t), device=storage.device)
        n.set_(storage, TB.storage_offset(t), TB.size(t), TB.stride(t))
        if TB.is_conj(t):
            n = n.conj()
        if TB.is_neg(t):
            n = torch._neg_view(n)
    TB.data.__set__(t, n)


def _reached(t: torch.Tensor) -> List[torch.Tensor]:
    """The view base and the grad of ``t`` (those that exist). A grad is read only where it
    can be without a warning (leaves, retains_grad). Reading ``grad_fn`` (which is_leaf does)
    raises for some views (created in no_grad, base modified in place since): then no grad."""
    torch = _torch()
    TB = torch._C.TensorBase
    out = []
    try:
        base = TB._base.__get__(t)
    except Exception:  # noqa: BLE001 -- exotic subclasses
        base = None
    if base is not None:
        out.append(base)
    try:
        g = (TB.grad.__get__(t)
             if TB.is_leaf.__get__(t) or TB.retains_grad.__get__(t) else None)
    except Exception:  # noqa: BLE001
        g = None
    if g is not None:
        out.append(g)
    return out


def _sparse_nbytes(t: torch.Tensor) -> int:
    """Bytes of a sparse tensor's parts (for the warning); 0 for what cannot be read."""
    total = 0
    for f in ("_indices", "_values", "crow_indices", "col_indices", "ccol_indices",
              "row_indices", "values"):
        if f == "values" and total:
            break  # COO's values() is _values()
        try:
            total += int(getattr(t, f)().untyped_storage().nbytes())
        except Exception:  # noqa: BLE001 -- each layout has only some of the parts
            pass
    return total


def _unmovable(t: torch.Tensor, row: _TensorRow) -> Optional[str]:
    """Why this tensor cannot be moved, or None."""
    torch = _torch()
    TB = torch._C.TensorBase
    if row[8] or TB.layout.__get__(t) in _SPARSE_LAYOUTS:
        return "sparse"
    if row[0] is None:
        return "no plain storage (nested, wrapper subclass or other layout)"
    if TB.layout.__get__(t) != torch.strided or TB.is_nested.__get__(t):
        return "no plain storage (nested, wrapper subclass or other layout)"
    if TB.is_quantized.__get__(t):
        return "quantized"
    if TB._is_zerotensor(t):
        return "efficient zero tensor"
    has_names = getattr(t, "has_names", None)
    if has_names is not None and has_names():  # pragma: no cover
        return "named tensor"
    return None


class _Skips:
    """Skipped tensors by reason, for one WARNING."""

    def __init__(self) -> None:
        self.by_reason: Dict[str, List[int]] = {}  # reason -> [tensors, storages, bytes]
        self.tensors = 0

    def add(self, reason: str, ntensors: int, nstorages: int = 0,
            nbytes: Optional[int] = 0) -> None:
        r = self.by_reason.setdefault(reason, [0, 0, 0])
        r[0] += ntensors
        r[1] += nstorages
        r[2] += nbytes or 0
        self.tensors += ntensors

    def log(self, what: str) -> None:
        if not self.by_reason:
            return
        parts = [f"{n} tensor(s) in {s} storage(s), {readable_size(b)}: {reason}"
                 for reason, (n, s, b) in self.by_reason.items()]
        logger.warning("tensorgc: Courtesy %s left %d tensor(s) where they were: %s",
                       what, self.tensors, "; ".join(parts))


class Courtesy:
    """Moves every tensor of a device (parameters, grads, optimizer state, views, tied
    parameters) to host memory and back, in place. Pinned host memory is used when the source
    is CUDA. With ``device="cpu"`` the tensors are already in host memory: each storage is
    copied into a new CPU storage and back (the whole mechanism, with nothing freed; how CI
    tests it), and the log says so. On a machine without CUDA, a CUDA device has nothing to
    yield (a WARNING says why). See the module docstring for what is moved, what is skipped
    and why.

    ``pin_memory=False``: pageable host memory for CUDA sources too. Pinned blocks come from
    PyTorch's caching host allocator, which rounds each one up to a power of two (a 86 MiB
    weight takes 128 MiB of host memory while yielded); pageable memory takes exactly the
    bytes moved, and its copies are synchronous and slower.

    memlab-compatible: ``Courtesy()``, ``yield_memory()``, ``restore()``, ``with Courtesy():``.
    """

    def __init__(self, device: DeviceLike = "cuda", *, pin_memory: bool = True) -> None:
        filt = _parse_device(device)
        if filt is None or filt[0] not in ("cuda", "cpu"):
            raise ValueError(f"Courtesy moves the tensors of a 'cuda' or 'cpu' device, not "
                             f"{device!r}")
        self._filter = filt
        self.device = device
        self.pin_memory = bool(pin_memory)
        self._groups: List[_Group] = []
        self.moved: Optional[Moved] = None     # the last yield_memory()'s result
        self.restored: Optional[Moved] = None  # the last restore()'s result

    @property
    def yielded(self) -> bool:
        """Whether storages are on the host, waiting for restore()."""
        return bool(self._groups)

    def __repr__(self) -> str:
        state = (f"yielded {len(self._groups)} storages" if self._groups else "not yielded")
        return f"Courtesy(device={self.device!r}, {state})"

    def __enter__(self) -> Courtesy:
        self.yield_memory()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        self.restore()
        return False

    # ------------------------------------------------------------------ yield

    def yield_memory(self) -> Moved:
        """Move every matching tensor's storage to the host and free the device's cache.
        Returns ``Moved(nbytes, tensors, storages, skipped)``. Raises RuntimeError when already
        yielded."""
        if self._groups:
            raise RuntimeError(f"tensorgc: Courtesy already yielded {len(self._groups)} "
                               "storage(s); call restore() first")
        if self._filter[0] == "cuda" and not cuda_available():
            logger.warning("tensorgc: Courtesy(%r) has nothing to yield: %s, so no tensor is on "
                           "a CUDA device", self.device, NO_CUDA)
            self.moved = Moved(0, 0, 0, 0)
            return self.moved
        torch = _torch()
        skips = _Skips()
        candidates = self._find(skips)              # {key: [(tensor, row)]}
        plans = self._plan(candidates, skips)       # [(device, [tensor], [storage], src, nbytes)]
        del candidates
        cuda_idx = sorted({p[0].index or 0 for p in plans if p[0].type == "cuda"})
        for i in cuda_idx:                          # writes on any stream are done
            torch.cuda.synchronize(i)
        pin = self.pin_memory
        hosts = [self._host_copy(p[3], p[4], pin and p[0].type == "cuda") for p in plans]
        for i in cuda_idx:                          # the copies are done
            torch.cuda.synchronize(i)
        groups = self._repoint_all(plans, hosts, skips)
        moved_bytes = sum(int(g.host.nbytes()) for g in groups)
        moved_tensors = sum(len(g.tensors) for g in groups)
        self._groups = groups
        del plans, hosts  # the last references to the device storages
        if cuda_idx and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        skips.log("yield_memory()")
        self.moved = Moved(moved_bytes, moved_tensors, len(groups), skips.tensors)
        if self._filter[0] == "cpu":
            logger.info("tensorgc: Courtesy(%r) copied %s in %d storage(s) (%d tensors) into "
                        "new CPU storages and re-pointed the tensors at them; CPU tensors "
                        "already live in host memory, so nothing left a device and no memory "
                        "was freed", self.device, readable_size(moved_bytes), len(groups),
                        moved_tensors)
        else:
            pinned = all(g.host.is_pinned() for g in groups)
            logger.info("tensorgc: Courtesy(%r) moved %s in %d storage(s) (%d tensors) to %s "
                        "host memory and emptied the device's cache", self.device,
                        readable_size(moved_bytes), len(groups), moved_tensors,
                        "pinned" if pinned else "pageable")
        return self.moved

    @staticmethod
    def _repoint_all(plans: Sequence[_Plan], hosts: Sequence[torch.UntypedStorage],
                     skips: _Skips) -> List[_Group]:
        """Re-points each group's tensors at its host copy; a group that fails is put back.
        (A function of its own: no loop variable outlives it to keep a device storage.)"""
        torch = _torch()
        groups: List[_Group] = []
        with torch._C.DisableTorchFunctionSubclass():
            for (dev, ts, sts, _src, nbytes), host in zip(plans, hosts):
                done: List[Tensor] = []
                try:
                    for t in ts:
                        _repoint(t, host)
                        done.append(t)
                except Exception as exc:  # noqa: BLE001 -- put the group back, skip it
                    for t2, st in zip(done, sts):
                        _repoint(t2, st)
                    skips.add(f"could not be re-pointed ({type(exc).__name__}: {exc})",
                              len(ts), 1, nbytes)
                    continue
                groups.append(_Group(dev, ts, host))
        return groups

    def _find(self, skips: _Skips) -> Dict[Tuple[Any, ...], _Members]:
        """The matching tensors, with their grads and view bases, grouped by storage."""
        torch = _torch()
        TB = torch._C.TensorBase
        filt = self._filter
        enabled = gc.isenabled()
        gc.disable()  # no collection (and no finalizer) between the walk and the grouping
        try:
            live = _tensorgc._live_tensors()
            rows = _tensorgc._tensor_rows(live)
            found: List[Tuple[Tensor, _TensorRow]] = []
            seen: Set[int] = set()
            for t, row in zip(live, rows):
                if _matches(filt, row[3], row[4]):
                    seen.add(id(t))
                    found.append((t, row))
            del live, rows
            i = 0
            with torch._C.DisableTorchFunctionSubclass():
                while i < len(found):  # grads and bases: the closure over what was found
                    extra: List[Tensor] = []
                    for t, _row in found[i:]:
                        for g in _reached(t):
                            if id(g) not in seen:
                                seen.add(id(g))
                                extra.append(g)
                    i = len(found)
                    if extra:
                        for t, row in zip(extra, _tensorgc._tensor_rows(extra)):
                            if _matches(filt, row[3], row[4]):
                                found.append((t, row))
                groups: Dict[Tuple[Any, ...], _Members] = {}
                for t, row in found:
                    why = _unmovable(t, row)
                    if why is not None and row[0] is None:
                        skips.add(why, 1, 0, _sparse_nbytes(t) if why == "sparse" else 0)
                        continue
                    dev = torch.device(row[3], row[4])
                    # zero-byte storages have no address: one group per storage object
                    key = ((dev, row[0]) if row[0] else
                           (dev, "empty", TB.untyped_storage(t)._cdata))
                    groups.setdefault(key, []).append((t, row, why))
            return groups
        finally:
            if enabled:
                gc.enable()

    def _plan(self, groups: Dict[Tuple[Any, ...], _Members], skips: _Skips) -> List[_Plan]:
        """Checks each storage group: every tensor movable, storages resizable and referenced by
        no tensor the walk did not find. Returns the groups to move."""
        torch = _torch()
        TB = torch._C.TensorBase
        use_count = torch._C._storage_Use_Count
        plans: List[_Plan] = []
        with torch._C.DisableTorchFunctionSubclass():
            for (dev, *_), members in groups.items():
                ts = [m[0] for m in members]
                why = next((m[2] for m in members if m[2] is not None), None)
                impls: Dict[int, List[Any]] = {}  # StorageImpl address -> [storage, tensors]
                sts: List[UntypedStorage] = []  # each tensor's, to put it back
                if why is None:
                    for t in ts:
                        s = TB.untyped_storage(t)
                        ent = impls.get(s._cdata)
                        if ent is None:
                            impls[s._cdata] = ent = [s, 0]
                        ent[1] += 1
                        sts.append(ent[0])
                nbytes = max((e[0].nbytes() for e in impls.values()), default=0)
                if why is None:
                    for addr, (s, n) in impls.items():
                        if not s.resizable():
                            why = ("storage not resizable (memory owned elsewhere: numpy, "
                                   "DLPack, shared memory, from_blob)")
                            break
                        # the tensors found + the storage object held here
                        if use_count(addr) > n + 1:
                            why = ("storage also used by tensors the walk cannot see "
                                   "(autograd graph, C++ buffers): moving it would free nothing")
                            break
                if why is not None:
                    if not nbytes:
                        nbytes = max((m[1][1] or 0 for m in members), default=0)
                    skips.add(why, len(ts), 1, nbytes)
                    continue
                src = max(impls.values(), key=lambda e: e[0].nbytes())[0]
                plans.append((dev, ts, sts, src, nbytes))
        return plans

    @staticmethod
    def _host_copy(src: torch.UntypedStorage, nbytes: int,
                   pinned: bool) -> torch.UntypedStorage:
        """A host storage with src's bytes (copy queued, non-blocking when pinned)."""
        torch = _torch()
        host = None
        if pinned:
            try:
                host = torch.empty((nbytes,), dtype=torch.uint8, pin_memory=True)
            except RuntimeError as exc:
                logger.warning("tensorgc: Courtesy could not pin %s of host memory (%s); using "
                               "pageable memory", readable_size(nbytes), exc)
        if host is None:
            host = torch.empty((nbytes,), dtype=torch.uint8)
        if nbytes:
            host.copy_(_bytes_of(src)[:nbytes], non_blocking=pinned and host.is_pinned())
        storage: UntypedStorage = host.untyped_storage()
        return storage

    # ------------------------------------------------------------------ restore

    @staticmethod
    def _restore_all(groups: Sequence[_Group], cuda_idx: Sequence[int]
                     ) -> Tuple[List[_Group], Tuple[int, int, int], _Skips]:
        """Copies every group back, then re-points; returns (pending groups, (bytes, tensors,
        storages), skips). Raises with nothing re-pointed when a device storage cannot be had.
        (A function of its own: no loop variable outlives it to keep a host copy.)"""
        torch = _torch()
        # 1. every device storage first: a full device leaves everything yielded
        dev_storages: List[UntypedStorage] = []
        try:
            for g in groups:
                n = g.host.nbytes()  # the host copy may have grown while yielded
                d = torch.empty((n,), dtype=torch.uint8, device=g.device)
                if n:
                    d.copy_(_bytes_of(g.host), non_blocking=g.host.is_pinned())
                dev_storages.append(d.untyped_storage())
                d = None
        except BaseException:
            dev_storages.clear()
            d = None
            if cuda_idx and torch.cuda.is_initialized():
                torch.cuda.empty_cache()
            raise
        for i in cuda_idx:
            torch.cuda.synchronize(i)
        # 2. re-point
        TB = torch._C.TensorBase
        skips = _Skips()
        pending: List[_Group] = []
        nbytes, ntensors, nstorages = 0, 0, 0
        with torch._C.DisableTorchFunctionSubclass():
            for g, d in zip(groups, dev_storages):
                hid = g.host._cdata
                ours = [t for t in g.tensors if TB.untyped_storage(t)._cdata == hid]
                if len(ours) < len(g.tensors):
                    skips.add("storage replaced while yielded", len(g.tensors) - len(ours))
                done = []
                try:
                    for t in ours:
                        _repoint(t, d)
                        done.append(t)
                except Exception as exc:  # noqa: BLE001 -- keep the group on the host
                    for t in done:
                        _repoint(t, g.host)
                    logger.error("tensorgc: Courtesy.restore() could not re-point a tensor "
                                 "(%s: %s); its storage stays on the host", type(exc).__name__,
                                 exc)
                    pending.append(g)
                    continue
                nbytes += d.nbytes()
                ntensors += len(ours)
                nstorages += 1
        return pending, (nbytes, ntensors, nstorages), skips

    def restore(self) -> Moved:
        """Copy every yielded storage back to a new storage on its device and re-point its
        tensors. Returns ``Moved`` of what came back; a no-op (zeros) when nothing is yielded.
        Raises (with everything still on the host) when the device memory cannot be had."""
        if not self._groups:
            logger.debug("tensorgc: Courtesy.restore(): nothing is yielded")
            self.restored = Moved(0, 0, 0, 0)
            return self.restored
        torch = _torch()
        groups = self._groups
        cuda_idx = sorted({g.device.index or 0 for g in groups if g.device.type == "cuda"})
        pending, counts, skips = self._restore_all(groups, cuda_idx)
        self._groups = pending
        del groups  # the last references to the host copies
        if cuda_idx:
            host_empty = getattr(torch._C, "_host_emptyCache", None)
            if host_empty is not None:
                host_empty()  # the pinned blocks just released go back to the system
        nbytes, ntensors, nstorages = counts
        skips.log("restore()")
        self.restored = Moved(nbytes, ntensors, nstorages, skips.tensors)
        if self._filter[0] == "cpu":
            logger.info("tensorgc: Courtesy(%r) copied %s in %d storage(s) (%d tensors) back "
                        "into new CPU storages (CPU tensors never left host memory)", self.device,
                        readable_size(nbytes), nstorages, ntensors)
        else:
            logger.info("tensorgc: Courtesy(%r) restored %s in %d storage(s) (%d tensors) from "
                        "host memory to their devices", self.device, readable_size(nbytes),
                        nstorages, ntensors)
        if pending:
            raise RuntimeError(f"tensorgc: Courtesy.restore() left {len(pending)} storage(s) "
                               "on the host (see the log); call restore() again")
        return self.restored
