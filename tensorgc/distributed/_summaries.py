"""The memory of every rank of a distributed job, the part that needs no MemReporter class (so
that MemReporter's own options can use it): one rank's summary made from a Report, the
collective that gathers the summaries (GatheredReport), the store they are published to, and
the reading of the other ranks' summaries for the OOM autopsy. The public functions are in
tensorgc/distributed/ranks.py (gather_report, publish_reports); see there and docs/api.md.

* The summaries travel with ``torch.distributed.gather_object`` to ``dst`` (``all_gather_object``
  with ``all_ranks=True``): a collective, every rank of the group takes part.
* A Publisher writes this rank's latest summary to the store key ``tensorgc/summary/rank<N>``
  after an optimizer step, at most once per ``every`` seconds; gathering writes it too. Writes go
  through one daemon thread, so a store that stops answering never holds up training.
* ``peer_summaries(wait=..., max_peers=...)`` reads the others' keys for the OOM autopsy
  (allocator/oom.py): an OOM happens on one rank only, where no collective can run. Keys are
  looked up with ``store.check`` (a missing key is never waited for), in one daemon thread the
  caller waits for at most ``wait`` seconds.

A summary is plain data (JSON in the store, a pickle in the collective) of at most
MAX_SUMMARY_BYTES: the totals, and the ``top`` largest tensors (at most TOP_MAX), each name cut to
NAME_MAX characters.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple,
                    Union)

from .._common.devices import NO_CUDA, DeviceError, DeviceLike, cuda_available, parse_device
from .._common.rank import rank_info
from .._common.units import LEN, readable_size as R, table_row
from ..cycles import dedup as _dedup  # the module: cycle_totals is looked up when called

if TYPE_CHECKING:
    import torch

Summary = Dict[str, Any]
# A MemReporter and its Report, as this module reads them (it imports no reporter: MemReporter
# itself uses this module): reporter._collect(device, warn, owners) -> Report, with .totals
# {device: {name: int}} and .rows (Row: name, kind, shape, dtype, device, used)
Reporter = Any
AReport = Any

__all__ = ["GatheredReport", "Publisher", "gather_summaries", "summary_now", "summary_of",
           "peer_summaries", "KEY_PREFIX", "TOP_DEFAULT", "TOP_MAX", "MAX_SUMMARY_BYTES"]

logger = logging.getLogger("tensorgc")

KEY_PREFIX = "tensorgc/summary/rank"  # + the global rank: one store key per rank
TOP_DEFAULT = 20
TOP_MAX = 100          # tensors a summary may carry
NAME_MAX = 200         # characters kept of a tensor's name
TEXT_MAX = 300         # characters kept of any other string (an error, a host name)
MAX_SUMMARY_BYTES = 64 << 10  # a summary's JSON; a larger value in the store is refused
PEERS_MAX = 32         # other ranks the autopsy reads, nearest ranks first
TABLE_RANKS = 16       # ranks whose top tensors the table lists (more: the highest ones)
TABLE_ROWS = 3         # tensors a rank shows in the table (verbose: all it sent)


# ---------------------------------------------------------------------- one rank's summary


def _cut(v: object, n: int = TEXT_MAX) -> str:
    s = v if isinstance(v, str) else str(v)
    return s if len(s) <= n else s[:n - 1] + "…"


def _resolve_device(device: Optional[DeviceLike]) -> str:
    """The device a summary describes, as "cpu" or "cuda:N"; DeviceError naming ``device``
    when it is not a device, or not one of this machine's."""
    if device is None:
        if cuda_available():
            import torch

            return f"cuda:{torch.cuda.current_device()}"
        return "cpu"
    kind, index = parse_device(device, "device")
    if kind == "cpu":
        return "cpu"
    if kind != "cuda":
        raise DeviceError(f"device {device!s}: the reports are of CUDA devices or the CPU, "
                          f"not {kind}")
    if not cuda_available():
        raise DeviceError(f"device {device!s} is not on this machine: {NO_CUDA} (give "
                          "device='cpu' for the CPU's tensors)")
    import torch

    count = torch.cuda.device_count()
    if index is None:
        index = torch.cuda.current_device()
    if index >= count:
        raise DeviceError(f"device {device!s} is not on this machine, which has {count} CUDA "
                          f"device(s): cuda:0 to cuda:{count - 1}")
    return f"cuda:{index}"


def _check_top(top: object) -> int:
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= TOP_MAX:
        raise ValueError(f"top must be an int from 0 to {TOP_MAX}, not {top!r}")
    return top


def _cycles_held() -> Tuple[int, bool]:
    """Bytes of the tensors reference cycles held, as warn_tensor_cycles counted them since it
    began (tensorgc.cycle_totals()["bytes"]); (0, False) where that fails: the column then
    reads 0 and the table says so."""
    try:
        return int(_dedup.cycle_totals()["bytes"]), True
    except Exception:  # noqa: BLE001 -- a missing column, never a failed report
        return 0, False


def _identity() -> Summary:
    """Who this process is: rank, local rank, world size, host, pid."""
    info = rank_info()
    return {"rank": info.rank if info else 0, "local_rank": info.local_rank if info else 0,
            "world_size": info.world_size if info else 1,
            "host": _cut(socket.gethostname(), 64), "pid": os.getpid()}


def summary_of(rep: AReport, device: str, top: int = TOP_DEFAULT) -> Summary:
    """This rank's summary from a MemReporter Report of ``device`` ("cpu" or "cuda:N"): on CUDA
    allocated and reserved are torch.cuda.memory_allocated/reserved of the device; on the CPU
    allocated is the bytes of the CPU tensors the walk found and reserved is None. ``named``:
    the bytes of the tensors the reporter named (parameters, grads, buffers, optimizer state,
    saved for backward)."""
    t = rep.totals.get(device, {})
    if device.startswith("cuda"):
        import torch

        index = int(device.split(":", 1)[1])
        allocated = int(torch.cuda.memory_allocated(index))
        reserved: Optional[int] = int(torch.cuda.memory_reserved(index))
        named = int(t.get("named", t.get("named_storage", 0)) or 0)
    else:
        allocated, reserved = int(t.get("storage", 0) or 0), None
        named = int(t.get("named_storage", 0) or 0)
    rows = sorted((r for r in rep.rows if r.device == device and r.used > 0),
                  key=lambda r: -r.used)[:top]
    cycles, known = _cycles_held()
    out = _identity()
    out.update({
        "device": device, "time": time.time(), "allocated": allocated, "reserved": reserved,
        "named": named, "cycles_held": cycles, "cycles_known": known,
        "tensors": int(t.get("tensors", 0) or 0),
        "top": [{"name": _cut(r.name, NAME_MAX), "kind": r.kind,
                 "shape": None if r.shape is None else [d if isinstance(d, int) else None
                                                         for d in r.shape][:16],
                 "dtype": _cut(r.dtype, 40), "bytes": int(r.used)} for r in rows],
    })
    return out


def summary_now(reporter: Reporter, device: Optional[DeviceLike], top: int,
                owners: bool = False) -> Tuple[Summary, Optional[BaseException]]:
    """This rank's summary of ``device`` from ``reporter`` (a MemReporter): (summary, None), or
    (a summary that says what failed, the exception): a bad ``device`` is the caller's to raise
    (DeviceError); anything else (a failed walk) is kept in the summary and logged."""
    try:
        dev = _resolve_device(device)
    except DeviceError as exc:
        return dict(_identity(), device=_cut(str(device), 40), time=time.time(),
                    error=_cut(str(exc))), exc
    try:
        rep = reporter._collect(dev, False, owners)
        return summary_of(rep, dev, top), None
    except Exception as exc:  # noqa: BLE001 -- one rank's failure is a row, not a stalled job
        logger.warning("tensorgc: this rank's memory summary failed: %s: %s",
                       type(exc).__name__, exc)
        return dict(_identity(), device=dev, time=time.time(),
                    error=_cut(f"{type(exc).__name__}: {exc}")), None


# The fields a summary read back from the store may have, and their types: anything else is
# dropped, a wrong type makes the summary unreadable (a rank of another version wrote it).
_INT_FIELDS = ("rank", "local_rank", "world_size", "pid", "allocated", "named", "cycles_held",
               "tensors")
_ROW_FIELDS = {"name": str, "kind": str, "dtype": str, "bytes": int}


def _clean(d: object) -> Summary:
    """A summary from the store, checked and bounded; ValueError saying what is wrong."""
    if not isinstance(d, dict):
        raise ValueError(f"not a dict but {type(d).__name__}")
    out: Summary = {}
    for k in _INT_FIELDS:
        v = d.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{k!r} is not an int")
        out[k] = v
    res = d.get("reserved")
    if res is not None and (isinstance(res, bool) or not isinstance(res, int)):
        raise ValueError("'reserved' is not an int")
    out["reserved"] = res
    when = d.get("time")
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        raise ValueError("'time' is not a number")
    out["time"] = float(when)
    out["cycles_known"] = bool(d.get("cycles_known"))
    out["device"] = _cut(d.get("device", "?"), 64)
    out["host"] = _cut(d.get("host", "?"), 64)
    if "error" in d:
        out["error"] = _cut(d["error"])
    rows = d.get("top", [])
    if not isinstance(rows, list):
        raise ValueError("'top' is not a list")
    out["top"] = []
    for r in rows[:TOP_MAX]:
        if not isinstance(r, dict) or any(not isinstance(r.get(k), t) for k, t in
                                          _ROW_FIELDS.items()):
            raise ValueError("a row of 'top' is not a tensor's row")
        shape = r.get("shape")
        out["top"].append({"name": _cut(r["name"], NAME_MAX), "kind": _cut(r["kind"], 40),
                           "dtype": _cut(r["dtype"], 40), "bytes": int(r["bytes"]),
                           "shape": [x if isinstance(x, int) and not isinstance(x, bool)
                                     else None for x in shape[:16]]
                           if isinstance(shape, list) else None})
    return out


def _encode(summary: Summary) -> bytes:
    """JSON bytes of at most MAX_SUMMARY_BYTES (rows dropped from the end until it fits)."""
    s = dict(summary)
    while True:
        data = json.dumps(s, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        if len(data) <= MAX_SUMMARY_BYTES or not s.get("top"):
            return data[:MAX_SUMMARY_BYTES]
        s["top"] = s["top"][: len(s["top"]) // 2]


# ---------------------------------------------------------------------- the gathered report


@dataclass
class GatheredReport:
    """What gather_report returns on ``dst``: one summary dict per rank of the group, in the
    group's order. Each has rank, local_rank, world_size, host, pid, device, time (seconds
    since the epoch, the rank's clock), allocated, reserved (None on the CPU), named,
    cycles_held (cycles_known: whether tensorgc.cycle_totals was there to ask), tensors, and
    top (the largest tensors: name, kind, shape, dtype, bytes); a rank whose summary failed has
    ``error`` instead of the numbers."""
    ranks: List[Summary]
    backend: str = "none"
    dst: int = 0
    # where a summary was read from the store, not gathered (the OOM autopsy): rank -> why it
    # is missing, for the ranks that published nothing or could not be read
    missing: Dict[int, str] = field(default_factory=dict)

    def _ok(self) -> List[Summary]:
        return [r for r in self.ranks if "error" not in r]

    def spread(self) -> Dict[str, Optional[int]]:
        """Max − min over the ranks with a summary, per column (reserved: None where a rank
        has none, i.e. a CPU report)."""
        ok = self._ok()
        out: Dict[str, Optional[int]] = {}
        for k in ("allocated", "reserved", "named", "cycles_held", "tensors"):
            vals = [r.get(k) for r in ok]
            out[k] = (max(vals) - min(vals)  # type: ignore[type-var,operator]
                      if vals and all(isinstance(v, int) for v in vals) else None)
        return out

    def highest(self) -> Optional[Dict[str, Any]]:
        """The rank that allocates the most, and by how much over the median of all ranks:
        {"rank", "allocated", "median", "over", "percent"} (percent None for a median of 0);
        None with fewer than two ranks."""
        ok = self._ok()
        if len(ok) < 2:
            return None
        top = max(ok, key=lambda r: (r["allocated"], -r["rank"]))
        med = statistics.median(r["allocated"] for r in ok)
        over = top["allocated"] - med
        return {"rank": top["rank"], "allocated": top["allocated"], "median": med,
                "over": over, "percent": 100.0 * over / med if med > 0 else None}

    def format(self, verbose: bool = False) -> str:
        """The table (memlab's style): a row per rank, the spread, the highest rank, then each
        rank's largest tensors (TABLE_ROWS each, every row it sent with ``verbose``; with more
        than TABLE_RANKS ranks only the highest ones, unless ``verbose``)."""
        aged = any("age" in r for r in self.ranks)
        n = len(self.ranks)
        head = (f"Memory by rank: {n} rank{'s' if n != 1 else ''}"
                + (f" ({self.backend}), gathered on rank {self.dst}" if self.backend != "none"
                   else ""))
        lines = [head, "-" * LEN,
                 f"{'rank':>5s}  {'device':<8s}{'allocated':>11s}{'reserved':>11s}{'named':>11s}"
                 f"{'cycles held':>13s}{'tensors':>9s}" + (f"{'age':>9s}" if aged else "")]

        def size(v: Optional[int]) -> str:
            return "n/a" if v is None else R(v)

        for r in self.ranks:
            age = f"{r['age']:>7.1f} s" if "age" in r else ""
            if "error" in r:
                lines.append(f"{r['rank']:>5d}  {_cut(r.get('device', '?'), 8):<8s}"
                             f"  no report: {_cut(r['error'], 120)}")
                continue
            lines.append(f"{r['rank']:>5d}  {_cut(r['device'], 8):<8s}{R(r['allocated']):>11s}"
                         f"{size(r['reserved']):>11s}{R(r['named']):>11s}"
                         f"{R(r['cycles_held']):>13s}{r['tensors']:>9d}" + (f"{age:>9s}" if aged else ""))
        for rank, why in sorted(self.missing.items()):
            lines.append(f"{rank:>5d}  {_cut(why, 120)}")
        lines.append("-" * LEN)
        if len(self._ok()) >= 2:
            s = self.spread()
            lines.append(f"{'max - min':<15s}{size(s['allocated']):>11s}{size(s['reserved']):>11s}"
                         f"{size(s['named']):>11s}{size(s['cycles_held']):>13s}"
                         f"{s['tensors'] if s['tensors'] is not None else 'n/a':>9}")
            lines.append(self.highest_line())
            lines.append("-" * LEN)
        if not any(r.get("cycles_known") for r in self._ok()):
            lines.append("cycles held: unknown (cycle_totals() failed)")
        shown = self._ok()
        if len(shown) > TABLE_RANKS and not verbose:
            shown = sorted(shown, key=lambda r: -r["allocated"])[:TABLE_RANKS // 4]
            lines.append(f"Largest tensors of the {len(shown)} highest ranks "
                         "(verbose=True lists every rank's)")
        elif shown:
            lines.append("Largest tensors by rank" + ("" if verbose else
                         f" ({TABLE_ROWS} each; verbose=True lists all each rank sent)"))
        for r in shown:
            lines.append(f"rank {r['rank']} ({r['device']}, {r.get('host', '?')}, pid "
                         f"{r.get('pid', '?')})")
            rows = r["top"] if verbose else r["top"][:TABLE_ROWS]
            for t in rows:
                shape = "?" if t["shape"] is None else str(tuple(t["shape"])) if t["shape"] \
                    else "(1,)"
                lines.extend(table_row(t["name"], shape, R(t["bytes"])))
            if not rows:
                lines.append("  no tensors")
        lines.append("-" * LEN)
        return "\n".join(lines)

    def highest_line(self) -> str:
        """'rank 3 is highest: +1.20G (+18%) over the median (6.50G)', or that they are equal."""
        h = self.highest()
        if h is None:
            return "one rank: nothing to compare"
        if h["over"] <= 0:
            return f"every rank allocates the same: {R(h['allocated'])}"
        pct = f" (+{h['percent']:.0f}%)" if h["percent"] is not None else ""
        return (f"rank {h['rank']} is highest: +{R(h['over'])}{pct} over the median "
                f"({R(h['median'])})")

    @property
    def text(self) -> str:
        return self.format()

    def __str__(self) -> str:
        return self.text

    def to_dict(self) -> Dict[str, Any]:
        """Plain data (for json.dumps): the ranks' dicts, the spread and the highest rank."""
        return {"ranks": [dict(r, top=[dict(t) for t in r.get("top", [])]) for r in self.ranks],
                "backend": self.backend, "dst": self.dst, "spread": self.spread(),
                "highest": self.highest(), "missing": dict(self.missing)}


# ---------------------------------------------------------------------- the collective


def _dist() -> Any:
    """torch.distributed where a process group is initialised, else None."""
    import torch.distributed as dist

    try:
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # noqa: BLE001
        pass
    return None


def _group_ranks(dist: Any, group: Any) -> List[int]:
    """The global ranks of ``group`` (None: the default group); TypeError or ValueError naming
    ``group`` when it is not a group, or this process is not a member of it."""
    if group is None:
        return list(range(dist.get_world_size()))
    if isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER:
        raise ValueError(f"group: this process (rank {dist.get_rank()}) is not a member of the "
                         "group (torch.distributed.new_group returned NON_GROUP_MEMBER here); "
                         "only the group's members call gather_report with it")
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed ProcessGroup or None, not "
                        f"{type(group).__name__}")
    ranks = [int(r) for r in dist.get_process_group_ranks(group)]
    if dist.get_rank() not in ranks:
        raise ValueError(f"group: this process (rank {dist.get_rank()}) is not a member of the "
                         f"group, whose ranks are {_ranks_text(ranks)}")
    return ranks


def _ranks_text(ranks: Sequence[int]) -> str:
    if list(ranks) == list(range(len(ranks))):
        return f"0 to {len(ranks) - 1}" if len(ranks) > 1 else "0"
    shown = ", ".join(str(r) for r in ranks[:16])
    return shown + (f", ... ({len(ranks)} ranks)" if len(ranks) > 16 else "")


def _check_dst(dst: object, ranks: Sequence[int]) -> int:
    if isinstance(dst, bool) or not isinstance(dst, int):
        raise TypeError(f"dst must be an int (a global rank), not {type(dst).__name__}")
    if dst not in ranks:
        raise ValueError(f"dst {dst} is not a rank of the group, whose ranks are "
                         f"{_ranks_text(ranks)}")
    return dst


def _warn_nccl_device(dist: Any, group: Any, device: str) -> None:
    """NCCL's object collectives run on torch.cuda.current_device(): a job that did not call
    torch.cuda.set_device puts every rank's buffers on cuda:0 (or hangs). Warn, don't raise:
    the other ranks are already on their way into the collective."""
    try:
        if dist.get_backend(group) != "nccl" or not cuda_available():
            return
        import torch

        current = torch.cuda.current_device()
        want = int(device.split(":", 1)[1]) if device.startswith("cuda:") else None
        info = rank_info()
        local = info.local_rank if info is not None else None
        if (want is not None and want != current) or (want is None and local and current == 0):
            logger.warning("tensorgc: gather_report over NCCL uses torch.cuda.current_device() "
                           "(cuda:%d) for its buffers; call torch.cuda.set_device(%s) on each "
                           "rank first, as torch's object collectives require", current,
                           want if want is not None else "local_rank")
    except Exception:  # noqa: BLE001 -- a hint, never a failure
        pass


def gather_summaries(make: Callable[[], Tuple[Summary, Optional[BaseException]]], *,
                     group: Any = None, dst: int = 0, all_ranks: bool = False,
                     show: bool = True) -> Optional[GatheredReport]:
    """The collective of tensorgc.gather_report (see there): checks ``group`` and ``dst`` (raised
    before the collective), makes this rank's summary with ``make()`` (summary_now), gathers the
    summaries to ``dst`` (every rank with ``all_ranks``) and hands this rank's to the store
    writer; raises make()'s exception (a bad device) after the collective. Outside a process
    group: this process alone."""
    dist = _dist()
    if dist is None:
        if group is not None:
            raise ValueError("group: torch.distributed is not initialised in this process, so "
                             "there is no group to gather over (call init_process_group first)")
        _check_dst(dst, [0])
        summary, err = make()
        if err is not None:
            raise err
        alone = GatheredReport([summary])
        if show:
            print(alone.format())
        return alone
    ranks = _group_ranks(dist, group)
    dst = _check_dst(dst, ranks)
    me = dist.get_rank()
    summary, err = make()
    _warn_nccl_device(dist, group, summary.get("device", ""))
    gathered: Optional[List[Any]]
    if all_ranks:
        gathered = [None] * len(ranks)
        dist.all_gather_object(gathered, summary, group=group)
    else:
        gathered = [None] * len(ranks) if me == dst else None
        dist.gather_object(summary, gathered, dst=dst, group=group)
    if err is not None:
        raise err
    _publish(dist, summary)
    if gathered is None:
        return None
    rep = GatheredReport([dict(s) for s in gathered], backend=str(dist.get_backend(group)),
                         dst=dst)
    if show and me == dst:
        print(rep.format())
    return rep


# ---------------------------------------------------------------------- the store


def _default_store() -> Any:
    """The job's store (torch.distributed's default group's), or None outside a job."""
    dist: Any = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        get = getattr(dist.distributed_c10d, "_get_default_store", None)
        return get() if get is not None else None
    except Exception:  # noqa: BLE001 -- torn down meanwhile
        return None


class _StoreWriter:
    """Writes summaries to the store from one daemon thread, the latest one first: a caller
    hands over (store, key, value) and returns at once, so a store that stops answering holds
    up this thread, never training. One pending write at most: a newer one replaces it."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._pending: Optional[Tuple[Any, str, bytes]] = None  # guarded by _cv
        self._busy = False  # a write is in progress (guarded by _cv)
        self._thread: Optional[threading.Thread] = None
        self.written = 0
        self.failed = 0
        self.last_error: Optional[str] = None

    def put(self, store: Any, key: str, value: bytes) -> None:
        with self._cv:
            self._pending = (store, key, value)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tensorgc-store-writer",
                                                daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def flush(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for the pending write; whether it is done."""
        with self._cv:
            return self._cv.wait_for(lambda: self._pending is None and not self._busy,
                                     max(0.0, float(timeout)))

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._pending is not None)
                assert self._pending is not None
                store, key, value = self._pending
                self._pending, self._busy = None, True
            try:
                store.set(key, value)
                self.written += 1
            except Exception as exc:  # noqa: BLE001 -- the store went away: nothing to do
                self.failed += 1
                self.last_error = _cut(f"{type(exc).__name__}: {exc}")
                logger.debug("tensorgc: publishing a summary to the store failed: %s",
                             self.last_error)
            finally:
                del store, value
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _after_fork(self) -> None:
        self.__init__()  # type: ignore[misc]  # the child has no writer thread and a new lock


_WRITER = _StoreWriter()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WRITER._after_fork)


def _publish(dist: Any, summary: Summary) -> bool:
    """Hands this rank's summary to the store writer; False outside a job."""
    store = _default_store()
    if store is None:
        return False
    try:
        rank = int(dist.get_rank())
    except Exception:  # noqa: BLE001
        return False
    _WRITER.put(store, f"{KEY_PREFIX}{rank}", _encode(summary))
    return True


class Publisher:
    """Publishes this rank's summary to the job's store (key ``tensorgc/summary/rank<N>``)
    after an optimizer step, at most once every ``every`` seconds (the first step publishes),
    so that the OOM autopsy of another rank can read it. Made by tensorgc.publish_reports or
    MemReporter.publish (``reporter``: the MemReporter whose names the summary uses);
    ``remove()`` (or calling it) stops it."""

    def __init__(self, reporter: Reporter, every: float, device: Optional[DeviceLike],
                 top: int) -> None:
        import torch.optim.optimizer as optim

        if isinstance(every, bool) or not isinstance(every, (int, float)) or not every >= 0:
            raise ValueError(f"every must be a number of seconds >= 0, not {every!r}")
        self.every = float(every)
        self.top = _check_top(top)
        self.device = device
        self._reporter = reporter
        self._last = -float("inf")
        self.published = 0
        self.failures = 0
        self.active = True
        self._warned = False
        self._handle = optim.register_optimizer_step_post_hook(self._after_step)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        now = time.monotonic()
        if not self.active or now - self._last < self.every:
            return
        self._last = now
        try:
            self.publish()
        except BaseException as exc:  # noqa: BLE001 -- never into the user's optimizer step
            self.failures += 1
            if not self._warned:
                self._warned = True
                try:
                    logger.warning("tensorgc: publishing this rank's memory summary failed "
                                   "(said once): %s: %s", type(exc).__name__, exc)
                except Exception:  # noqa: BLE001
                    pass

    def publish(self) -> bool:
        """Summarises now and hands the summary to the store writer (which writes it from its
        own thread); False where there is no process group to publish to. Raises DeviceError
        for a device this machine does not have."""
        dist = _dist()
        if dist is None:
            return False
        summary, err = summary_now(self._reporter, self.device, self.top)
        if err is not None:
            raise err
        if _publish(dist, summary):
            self.published += 1
            return True
        return False

    def flush(self, timeout: float = 5.0) -> bool:
        """Waits up to ``timeout`` seconds until the last summary is in the store (or failed);
        whether the writer is idle."""
        return _WRITER.flush(timeout)

    def remove(self) -> None:
        self.active = False
        self._handle.remove()

    def __call__(self) -> None:
        self.remove()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


# ---------------------------------------------------------------------- reading the others

# A read of the store that did not return in time (a store that stopped answering): its thread
# is left to finish on its own, and no other read starts while it is alive (no pile of threads).
_STUCK: List[threading.Thread] = []


def _peer_order(me: int, world: int, limit: int) -> List[int]:
    """The other ranks, nearest first (rank-1, rank+1, rank-2, ...): on most launchers the
    nearest ranks share this rank's host."""
    out: List[int] = []
    for d in range(1, world):
        for r in (me - d, me + d):
            if 0 <= r < world and len(out) < limit:
                out.append(r)
    return out


def peer_summaries(*, wait: float = 2.0, max_peers: int = PEERS_MAX,
                   store: Any = None, rank: Optional[int] = None,
                   world_size: Optional[int] = None) -> Tuple[List[Summary], Dict[int, str], str]:
    """The latest summaries the other ranks published (at most ``max_peers``, nearest ranks
    first), read from the job's store without waiting for a missing key: (summaries, missing,
    note). Each summary gets ``age`` (seconds since it was made, by this host's clock);
    ``missing`` maps a rank to why it has none. The reads run in one daemon thread that the
    caller waits for at most ``wait`` seconds in all; what it did not read by then is missing.
    Never raises."""
    try:
        wait = max(0.0, float(wait))
        if store is None:
            store = _default_store()
        info = rank_info()
        me = rank if rank is not None else (info.rank if info else 0)
        world = world_size if world_size is not None else (info.world_size if info else 1)
    except Exception as exc:  # noqa: BLE001
        return [], {}, f"the other ranks were not asked: {_cut(exc)}"
    if store is None:
        return [], {}, ("the other ranks were not asked: no process group in this process "
                        "(torch.distributed is not initialised), so no store to read")
    order = _peer_order(me, world, max(0, int(max_peers)))
    if not order:
        return [], {}, "no other rank in this job"
    _STUCK[:] = [t for t in _STUCK if t.is_alive()]
    if _STUCK:
        return [], {r: "not read" for r in order}, (
            "the other ranks were not asked: an earlier read of the store has not returned "
            "(the store stopped answering)")
    lock = threading.Lock()
    got: Dict[int, Union[Summary, str]] = {}  # guarded by lock; closed once the caller gave up
    closed = [False]

    def read() -> None:
        for r in order:
            key = f"{KEY_PREFIX}{r}"
            try:
                if not store.check([key]):  # never get() a key that is not there: it waits
                    value: Union[Summary, str] = "nothing published (the rank calls neither " \
                                                 "gather_report nor publish_reports)"
                else:
                    raw = store.get(key)
                    if len(raw) > MAX_SUMMARY_BYTES:
                        value = f"unreadable: {len(raw):,} bytes, over {MAX_SUMMARY_BYTES:,}"
                    else:
                        try:
                            value = _clean(json.loads(bytes(raw).decode("utf-8")))
                        except (ValueError, UnicodeDecodeError) as exc:
                            value = f"unreadable: {_cut(exc, 100)}"
            except Exception as exc:  # noqa: BLE001 -- the store failed: stop asking it
                with lock:
                    if not closed[0]:
                        got[r] = f"the store failed: {_cut(f'{type(exc).__name__}: {exc}', 120)}"
                return
            with lock:
                if closed[0]:
                    return
                got[r] = value

    t0 = time.monotonic()
    th = threading.Thread(target=read, name="tensorgc-peer-read", daemon=True)
    th.start()
    th.join(wait)
    with lock:
        closed[0] = True
        result = dict(got)
    took = time.monotonic() - t0
    if th.is_alive():
        _STUCK.append(th)
    now = time.time()
    summaries: List[Summary] = []
    missing: Dict[int, str] = {}
    for r in order:
        v = result.get(r)
        if isinstance(v, dict):
            v["age"] = max(0.0, now - v["time"])
            summaries.append(v)
        elif isinstance(v, str):
            missing[r] = v
        else:
            missing[r] = f"not read: the store did not answer within {wait:g} s"
    note = (f"asked the job's store for {len(order)} other rank(s) of {world} "
            f"(keys {KEY_PREFIX}<N>, nearest ranks first, at most {max_peers}); "
            f"{len(summaries)} had published a summary; {took:.2f} s of at most {wait:g} s")
    if th.is_alive():
        note += "; the store did not answer in time, and was left"
    return summaries, missing, note
