"""MemReporter: where every byte of tensor memory is, by name (pytorch_memlab-compatible API).

The live tensors are found and measured in C (reporter/walk.c: a walk of the collector's object
lists, TensorBase's own descriptors, no isinstance and no warnings); this module gives them
names -- parameters, grads, buffers, optimizer state, tensors saved for backward -- counts
every storage once, and on CUDA maps each storage to its caching-allocator block
(allocator/blocks.c) and reconciles the totals with the driver's view (allocator/device.c).

    reporter = MemReporter(model, optimizer=opt)
    reporter.report(verbose=True)            # memlab's table, plus an explained footer
    rep = reporter.collect(device="cuda:0")  # the same as data: rep.rows, rep.totals

The subpackage tensorgc.reporter is this module; beside it: owner_chains.py (why an object is
still alive: tensorgc.owners), owner_page.py (the owners page, Report.html), growth.py
(checkpoint and growth: what was born and is still alive) and pytest_plugin.py (``pytest
--tensorgc``, loaded through tensorgc/_pytest_entry.py).
"""
from __future__ import annotations

import collections
import gc
import logging
import re
import weakref
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Deque, Dict, Iterable, List, Mapping, NamedTuple, Optional,
                    Sequence, Set, Tuple)

from .. import _tensorgc
from .. import allocator as _alloc
from .._common.units import LEN, ROW_TEMPLATE as _TEMPLATE, readable_size  # readable_size: memlab's name
from .._common.units import table_row as _table_row
from .._common.devices import NO_CUDA, DeviceLike, cuda_available, parse_device

if TYPE_CHECKING:
    import torch

    from ..distributed._summaries import Publisher

Shape = Tuple[Optional[int], ...]
Totals = Dict[str, Any]  # bytes and counts by name (int); on CUDA also the driver's view
Site = Tuple[str, int, int]  # (allocation site, bytes, blocks)
Filter = Optional[Tuple[str, Optional[int]]]
NamedTensor = Tuple["torch.Tensor", str, str]  # (tensor, name, kind)

__all__ = ["MemReporter", "Report", "Row", "KINDS", "AUTO_MAX_OBJECTS", "readable_size",
           "track_tensors"]

logger = logging.getLogger("tensorgc")

KINDS = ("parameter", "grad", "buffer", "optimizer_state", "saved_for_backward", "other")
# The model's and optimizer's own tensors: named by them, never given an owner chain; a tensor
# autograd saved that shares the storage of one of them (a transposed weight) is that tensor.
MODEL_KINDS = frozenset(("parameter", "grad", "buffer", "optimizer_state"))


class Row(NamedTuple):
    """One tensor (or one part of a sparse tensor or a wrapper subclass) in a report. Holds no
    reference to it. (A NamedTuple: a report of a large model makes thousands, and they must be
    cheap.)"""
    name: str
    kind: str
    shape: Optional[Shape]      # None in it for a ragged dimension; None when unreadable
    dtype: str
    device: str
    numel: Optional[int]
    storage_bytes: int          # bytes of its storage, 0 when another row already counted it
    block_bytes: Optional[int]  # the allocator block's size (CUDA), 0 when already counted
    shares_with: Optional[str]  # the row that counted the storage, when not this one
    # how its bytes were counted, e.g. "strided: untyped_storage", "sparse_csr: crow_indices +
    # col_indices + values", "none (meta tensor)" (the tensor's, on each of its part rows)
    storage: Optional[str] = None
    # what keeps it alive, for rows that are not a parameter, grad, buffer or optimizer state:
    # the shortest chain of references from a root (tensorgc.owner_chains.Chain's text), or None
    owner: Optional[str] = None
    holder: Optional[str] = None  # the chain's named owner, e.g. "__main__.loss_history"
    address: Optional[int] = None  # the storage's data address (None when it has none)
    # CUDA with history recorded (record_memory_history): where its block was allocated, the
    # innermost frame outside torch ("train.py:40 train_step"); None elsewhere
    site: Optional[str] = None

    @property
    def used(self) -> int:
        """What the table's "Used MEM" shows: the block on CUDA, the storage elsewhere."""
        return self.block_bytes if self.block_bytes is not None else self.storage_bytes


@dataclass
class Report:
    """What MemReporter.collect() found. ``rows`` per device in table order; ``totals`` per
    device string (bytes; allocator and driver numbers where the device is CUDA)."""
    rows: List[Row]
    totals: Dict[str, Totals]
    sites: Dict[str, List[Site]] = field(default_factory=dict)
    device: Optional[str] = None  # the device filter asked for, as given (None: every device)
    # row index -> tensorgc.Chain, for the rows that have an owner (collect(owners=True))
    chains: Dict[int, Any] = field(default_factory=dict)
    # CUDA: {device: {block address: kind}} of the blocks holding found storages (the first,
    # i.e. named, row's kind; saved_for_backward is reported as "activation")
    block_kinds: Dict[str, Dict[int, str]] = field(default_factory=dict)
    # CUDA: {device: {block address: name}} of the same blocks (the first row's name), for the
    # timeline's side panel
    block_names: Dict[str, Dict[int, str]] = field(default_factory=dict)
    owners: bool = False  # whether owner chains were searched (owners=True, or automatically)
    # how the owners were searched: {"mode": "off"} (owners=False), {"mode": "all"}
    # (owners=True), or the automatic search's {"mode": "auto", "bound", "targets", and once it
    # ran "visited", "truncated", "stopped", "second_pass"}
    owner_search: Dict[str, Any] = field(default_factory=dict)

    def devices(self) -> List[str]:
        return list(self.totals)

    def format(self, verbose: bool = False) -> str:
        lines = [_TEMPLATE.format("Element type", "Size", "Used MEM")]
        if not self.totals:
            lines.append("-" * LEN)
            lines.append(f"no tensors found on {self.device or 'any device'}")
            lines.append("-" * LEN)
        for dev in self.totals:
            lines.append("-" * LEN)
            lines.append(f"Storage on {dev}")
            rows = [r for r in self.rows if r.device == dev]
            for r in rows:
                name = r.name if not (verbose and r.shares_with) else f"{r.name}(->{r.shares_with})"
                if r.storage and r.storage.startswith("none"):
                    name += f" (no storage: {_no_storage(r.storage)})"
                shape = "?" if r.shape is None else str(r.shape) if r.shape else "(1,)"
                lines.extend(_table_row(name, shape, readable_size(r.used)))
            t = self.totals[dev]
            lines.append("-" * LEN)
            if not rows:
                lines.append(f"no tensors found on {dev}")
            lines.append(f"Total Tensors: {t['numel']} elements in {t['tensors']} tensors "
                         f"\tUsed Memory: {readable_size(t['used'])}")
            lines.extend(_footer(dev, t, self.sites.get(dev, []), verbose))
            lines.extend(_held_by(rows, verbose))
            lines.extend(_unnamed_hint(rows, self.owner_search))
            lines.append("-" * LEN)
        return "\n".join(lines)

    @property
    def text(self) -> str:
        return self.format(verbose=False)

    def __str__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        """For notebooks: the totals by category and the rows, as HTML tables (escaped)."""
        from .notebook_html import report_html

        return report_html(self)

    def html(self, title: Optional[str] = None, max_chains: int = 200) -> str:
        """One self-contained HTML page: the owner chains drawn by Graphviz (merged into a tree
        per root, largest first, at most ``max_chains``) and the verbose table."""
        from .owner_page import owners_html

        return owners_html(self, title=title, max_chains=max_chains)

    def to_dict(self) -> Dict[str, Any]:
        """Plain data (lists and dicts: for json.dumps)."""
        return {
            "rows": [dict(r._asdict(), shape=None if r.shape is None else list(r.shape),
                          chain=self.chains[i].to_dict() if i in self.chains else None)
                     for i, r in enumerate(self.rows)],
            "totals": {d: dict(t) for d, t in self.totals.items()},
            "sites": {d: [list(s) for s in v] for d, v in self.sites.items()},
        }


HELD_BY_GROUPS = 20  # holders listed without verbose


def _held_by(rows: Sequence[Row], verbose: bool) -> List[str]:
    """Rows that have an owner, grouped by what holds them (Row.holder: the named owner, or the
    module whose activations a forward in flight keeps): bytes and tensors per holder, largest
    first, one row's chain each (every row's with verbose; the largest HELD_BY_GROUPS holders
    without)."""
    groups: Dict[str, List[Row]] = {}
    for r in rows:
        if r.holder is not None:
            groups.setdefault(r.holder, []).append(r)
    if not groups:
        return []
    out = ["Held by (tensors that are not parameters, grads, buffers or optimizer state):"]
    order = sorted(groups.items(), key=lambda kv: -sum(r.used for r in kv[1]))
    shown_groups = order if verbose else order[:HELD_BY_GROUPS]
    for holder, rs in shown_groups:
        total = sum(r.used for r in rs)
        out.append(f"  {readable_size(total):>10s}  {len(rs):>5d} tensor{'s' if len(rs) != 1 else ' '}"
                   f"  {_cut(_short_frames(holder), 200)}")
        shown = rs if verbose else rs[:1]
        for r in shown:
            out.append(f"{'':19s}{_cut(r.name, 80)}: {_cut(_short_frames(r.owner or ''), 400)}")
        if len(rs) > len(shown):
            out.append(f"{'':19s}\u2026 {len(rs) - len(shown)} more (verbose=True lists them)")
    rest = order[len(shown_groups):]
    if rest:
        nbytes = sum(r.used for _, rs in rest for r in rs)
        out.append(f"  {readable_size(nbytes):>10s}  in {len(rest)} more holders "
                   "(verbose=True lists them)")
    return out


def _unnamed_hint(rows: Sequence[Row], search: Mapping[str, Any]) -> List[str]:
    """The last line of a report whose owner search was not the whole heap's: the bytes of the
    tensors still named Tensor<i>, why, and what names what holds them."""
    mode = search.get("mode", "off")
    if mode == "all":
        return []
    unnamed = [r for r in rows if r.kind == "other" and r.used and r.holder is None]
    if not unnamed:
        return []
    nbytes = sum(r.used for r in unnamed)
    head = (f"Unnamed tensors: {readable_size(nbytes)} in {len(unnamed)} tensor"
            f"{'s' if len(unnamed) != 1 else ''}")
    if mode != "auto":
        return [f"{head}; report(owners=True) names what holds each one."]
    if search.get("truncated"):
        why = (f"the automatic owner search stopped at its bound of {search['bound']:,} objects "
               "before it found them")
    else:
        why = ("no root reaches them (held outside Python, or garbage in a reference cycle: "
               "the automatic search does not tell which)")
    return [f"{head}: {why}; report(owners=True) searches the whole heap."]


_FRAME_AT = re.compile(r" at (?:[^\s()]*/)?([^\s/()]+:\d+) \(thread MainThread\)")


def _short_frames(s: str) -> str:
    """A frame's label as the report prints it: its file's name rather than its path, and the
    main thread unsaid (``forward() at transformer.py:538``)."""
    return _FRAME_AT.sub(r" at \1", s)


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


def _no_storage(how: str) -> str:
    """Why a row holds no bytes, as the cycle report's text says it: "none (meta tensor)" ->
    "meta", "none (storage not readable)" -> "storage not readable"."""
    return how[how.find("(") + 1:how.rfind(")")].removesuffix(" tensor") if "(" in how else how


def _footer(dev: str, t: Totals, sites: Sequence[Site], verbose: bool) -> List[str]:
    R = readable_size
    if "allocated" not in t:
        return [f"Named: {R(t['named_storage'])} of {R(t['storage'])} in "
                f"{t['storages']} storages; views and shared storages counted once."]
    out = [f"The allocated memory on {dev}: {R(t['allocated'])}"]
    a, res = t["allocated"], t["reserved"]
    out.append(f"  allocated {R(a)} = named {R(t['named'])} + unnamed tensors "
               f"{R(t['seen'] - t['named'])} + stack-attributed {R(t['stack_attributed'])} + "
               f"unattributed {R(t['unattributed'])}")
    if t["unattributed"]:
        out.append("    unattributed: blocks with no live tensor object and no recorded stack "
                   "(tensors held only in C++, e.g. autograd buffers); turn on "
                   "torch.cuda.memory._record_memory_history() to see where they come from")
    out.append(f"  reserved {R(res)} >= allocated: {R(res - a)} cached = "
               f"{R(t['inactive_whole'])} free segments (torch.cuda.empty_cache() releases them) + "
               f"{R(t['inactive_split'])} inactive splits (fragmentation) + "
               f"{R(t['pending_free'])} pending free")
    out.append(f"  requested {R(t['requested'])}, rounded up to {R(a)} by the allocator "
               f"(+{R(a - t['requested'])})")
    pu = t.get("process_used", -1)
    if pu is not None and pu >= 0:
        out.append(f"  process uses {R(pu)} on the device (NVML) >= reserved: "
                   f"{R(max(pu - res, 0))} outside PyTorch's allocator (CUDA context, "
                   "library workspaces and handles, other allocators)")
    elif t.get("device_used", -1) >= 0:
        out.append(f"  device used {R(t['device_used'])} by all processes of "
                   f"{R(t['device_total'])} ({t.get('device_source') or 'driver'}); this "
                   "process's share is not visible here")
    if sites:
        out.append("  unnamed blocks by allocation site (recorded stacks):")
        for site, nbytes, count in sites[: (10 if verbose else 3)]:
            out.append(f"    {R(nbytes):>9s} in {count} block(s) at {site}")
    return out


def _parse_device(device: Optional[object]) -> Filter:
    """None, or (type, index or None) for the device filter (_common/devices.py: the syntax the
    whole package shares); DeviceError (a ValueError) when invalid."""
    if device is None:
        return None
    return parse_device(device, "device")


def _warn_no_cuda(filt: Filter, device: Optional[object]) -> None:
    if filt is not None and filt[0] == "cuda" and not cuda_available():
        logger.warning("tensorgc: MemReporter: the report for %s is empty: %s; "
                       "device='cpu' (or None) reports the CPU's tensors", device, NO_CUDA)


def _matches(filt: Filter, dev_type: str, dev_index: Optional[int]) -> bool:
    if filt is None:
        return True
    if filt[0] != dev_type:
        return False
    if filt[1] is None:
        return True
    return (dev_index if dev_index is not None else 0) == filt[1]


def track_tensors(enabled: bool = True) -> bool:
    """Keep an index of live tensors so that reports walk only the young generations (see
    reporter/index.c). Process-wide; costs one walk of generations 0 and 1 per collection of
    generation 1 or 2 while on. Returns whether it is on (False where the collector has no
    generations: free-threaded builds and Python 3.14+, which keep the full walk)."""
    return _tensorgc._track_tensors(bool(enabled))


class MemReporter:
    """Reports the memory of live tensors, named after the model's parameters, grads and
    buffers, the optimizers' state and the autograd nodes that save tensors for backward.

    memlab-compatible: ``MemReporter(model).report(verbose=False, device=None)``. The
    reporter keeps only weak references to the model and the optimizers, and none to tensors.
    """

    def __init__(self, model: Optional[torch.nn.Module] = None, *,
                 optimizer: Optional[torch.optim.Optimizer] = None, pre_collect: bool = False,
                 track: bool = False) -> None:
        import torch

        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        self._model = weakref.ref(model) if model is not None else None
        self._optimizers: List[weakref.ref[torch.optim.Optimizer]] = []
        self.pre_collect = bool(pre_collect)
        if optimizer is not None:
            self.add_optimizer(optimizer)
        if track:
            track_tensors(True)

    def add_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        import torch

        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, not "
                            f"{type(optimizer).__name__}")
        self._optimizers.append(weakref.ref(optimizer))

    # ------------------------------------------------------------------ public

    def report(self, verbose: bool = False, device: Optional[DeviceLike] = None,
               owners: Optional[bool] = None, *, gather: bool = False, group: Any = None,
               dst: int = 0, max_objects: Optional[int] = None) -> None:
        """Print memlab's table for every device (or ``device``), with the explained footer and
        what holds each tensor that is not a parameter, grad, buffer or optimizer state (grouped
        by owner, with subtotals; ``verbose`` lists every chain): ``owners`` as in collect.

        ``gather=True``: a collective instead (every rank of ``group`` calls it): each rank's
        summary of ``device`` from this reporter's names, gathered to rank ``dst``, which
        prints one table of every rank (tensorgc.gather_report; the others print nothing;
        ``owners=None`` is False there). ``max_objects``: the owner search's bound (see
        collect)."""
        _check_owners(owners)
        if gather:
            from ..distributed._summaries import TOP_DEFAULT, gather_summaries, summary_now

            rep = gather_summaries(lambda: summary_now(self, device, TOP_DEFAULT, bool(owners)),
                                   group=group, dst=dst, show=False)
            if rep is not None:
                print(rep.format(verbose=verbose))
            return
        print(self.collect(device=device, owners=owners, max_objects=max_objects)
              .format(verbose=verbose))

    def publish(self, every: float = 60.0, device: Optional[DeviceLike] = None,
                top: int = 20) -> Publisher:
        """Publish this rank's summary (this reporter's names) to the job's store after
        optimizer steps, at most once every ``every`` seconds, for the OOM autopsy of another
        rank to read (tensorgc.publish_reports). Returns the Publisher; ``remove()`` stops it."""
        from ..distributed._summaries import Publisher

        return Publisher(self, every, device, top)

    def collect(self, device: Optional[DeviceLike] = None, owners: Optional[bool] = None, *,
                max_objects: Optional[int] = None) -> Report:
        """The report as data (see Report, Row). A CUDA ``device`` on a machine without CUDA
        gives an empty report and a WARNING on logger "tensorgc" that says why.

        ``owners``: None (the default) names each row that has no name of its own and holds
        bytes by what holds it, with an owner search that ends as soon as each such tensor is
        found and visits at most AUTO_MAX_OBJECTS objects (``max_objects`` when given), so its
        cost stays near the report's own; what it leaves unnamed, the report says, and why.
        True: fill Row.owner and Row.holder for every row that is not a parameter, grad,
        buffer or optimizer state (tensorgc.owners: one pass over the whole heap, about 1.5
        full collections; ``max_objects`` bounds it, None: every object alive). False: no
        search."""
        _check_owners(owners)
        return self._collect(device, True, owners, max_objects)

    def _collect(self, device: Optional[DeviceLike], warn: bool,
                 owners: Optional[bool] = False, max_objects: Optional[int] = None) -> Report:
        _check_owners(owners)
        filt = _parse_device(device)
        if warn:
            _warn_no_cuda(filt, device)
        if self.pre_collect:
            gc.collect()
        # No automatic collection in the middle of a report: it would be timed as ours and
        # could free what we are counting. The user's setting is restored on every path.
        enabled = gc.isenabled()
        gc.disable()
        named: Optional[List[NamedTensor]] = None
        live: Optional[List[torch.Tensor]] = None
        try:
            named = self._named()                  # [(tensor, name, kind)]
            live = _tensorgc._live_tensors()       # every tensor object the collector tracks
            paths: Dict[int, Tuple[Any, str]] = {}
            named.extend(_saved_for_backward(live, named, paths=paths))
            if owners is not False:
                from .owner_chains import _check_max_objects

                _check_max_objects(max_objects)
            owner_of: Dict[int, Any] = {}
            if owners is None:
                auto: Dict[str, Any] = {"mode": "auto", "bound": AUTO_MAX_OBJECTS
                                        if max_objects is None else max_objects, "targets": 0}
                nm, lv, ps = named, live, paths

                def search(targets: List[torch.Tensor]) -> Dict[int, Any]:
                    auto["targets"] = len(targets)
                    got = _owners_of(nm, lv, ps, only={id(t) for t in targets},
                                     max_objects=auto["bound"], auto=auto)
                    # a tensor it did not reach keeps Tensor<i>, and the report's last line
                    # says why, rather than a holder named "not reached"
                    return {k: c for k, c in got.items() if c.kind != "unknown"}

                rep = self._build(named, live, filt, search=search)
                del nm, lv, ps, search
                rep.owners = "visited" in auto  # it ran: something had no name
                rep.owner_search = auto
            else:
                if owners:
                    owner_of = _owners_of(named, live, paths, max_objects=max_objects)
                rep = self._build(named, live, filt, owner_of)
                rep.owners = owners
                rep.owner_search = {"mode": "all" if owners else "off"}
            rep.device = None if device is None else str(device)
            return rep
        finally:
            del named, live  # no tensor outlives the call
            paths = owner_of = None  # type: ignore[assignment]
            if enabled:
                gc.enable()

    # ------------------------------------------------------------------ naming

    def _named(self) -> List[NamedTensor]:
        out: List[NamedTensor] = []
        model = self._model() if self._model is not None else None
        pnames: Dict[int, str] = {}
        if model is not None:
            groups: Dict[int, Tuple[torch.Tensor, List[str]]] = {}
            for name, p in model.named_parameters(remove_duplicate=False):
                groups.setdefault(id(p), (p, []))[1].append(name)
            for param, names in groups.values():
                pnames[id(param)] = "+".join(names)
                out.append((param, pnames[id(param)], "parameter"))
                g = param.grad
                if g is not None:
                    out.append((g, pnames[id(param)] + ".grad", "grad"))
            bgroups: Dict[int, Tuple[torch.Tensor, List[str]]] = {}
            for name, b in model.named_buffers(remove_duplicate=False):
                if b is not None:
                    bgroups.setdefault(id(b), (b, []))[1].append(name)
            for b, names in bgroups.values():
                out.append((b, "+".join(names), "buffer"))
        for ref in self._optimizers:
            opt = ref()
            if opt is None:
                continue
            oname = type(opt).__name__
            k = 0
            for group in opt.param_groups:
                for p in group.get("params", ()):
                    pname = pnames.get(id(p))
                    if pname is None:
                        pname = f"param{k}"
                        if p.grad is not None:
                            out.append((p.grad, f"{oname}.{pname}.grad", "grad"))
                    k += 1
                    state = opt.state.get(p) if hasattr(opt.state, "get") else None
                    for key, v in (state or {}).items():
                        if _is_tensor(v):
                            out.append((v, f"{oname}.{pname}.{key}", "optimizer_state"))
        return out

    # ------------------------------------------------------------------ measuring

    def _build(self, named: List[NamedTensor], live: List[torch.Tensor],
               filt: Filter, owner_of: Optional[Dict[int, Any]] = None,
               search: Optional[Any] = None) -> Report:
        """The report of ``named`` and ``live``. ``owner_of``: id(tensor) -> Chain, the owner
        search's; ``search``: instead, called once with the tensors that have no name of their
        own and hold bytes no named row counts (after each storage is given to its first row),
        returning such a dict (the automatic owner search of collect())."""
        seen_ids: Set[int] = set()
        entries: List[Tuple[torch.Tensor, Optional[str], str]] = []  # (tensor, name, kind)
        for t, name, kind in named:
            if id(t) not in seen_ids:
                seen_ids.add(id(t))
                entries.append((t, name, kind))
        for t in live:
            if id(t) not in seen_ids:
                seen_ids.add(id(t))
                entries.append((t, None, "other"))
        infos = _tensorgc._tensor_rows([e[0] for e in entries])

        # (label, kind, shape, dtype, device, dev_type, dev_index, numel, ptr, nbytes, storage,
        #  chain, shares_with); named[i]: whether row i has a name other than Tensor<i>. The
        # label is the row's own name or None; names are given once the owners are known.
        rows_raw: List[List[Any]] = []
        row_entry: List[int] = []  # row -> index in entries
        row_part: List[Optional[str]] = []  # row -> part of its tensor (".values"), or None
        owner_of = dict(owner_of or {})
        model_ptrs: Dict[Tuple[str, int], str] = {}  # storages of the model's rows -> kind
        for k, ((t, label, kind), info) in enumerate(zip(entries, infos)):
            (ptr, _own, dev, dev_type, dev_index, shape, dtype, numel, _sparse, how, parts,
             nbytes, _none) = info
            if not _matches(filt, dev_type, dev_index) or numel == 0:
                continue
            if kind == "saved_for_backward" and ptr and (dev, ptr) in model_ptrs:
                kind = model_ptrs[(dev, ptr)]  # a saved alias of a parameter
                owner_of.pop(id(t), None)
            if parts:
                # a sparse tensor's indices and values, a wrapper's inner tensors: a row each,
                # so that a storage shared with another tensor is still counted once
                subs = _tensorgc._tensor_rows([sub for _, sub in parts])
                for (part, _), sub in zip(parts, subs):
                    p2, _, d2s, t2, i2, s2, d2, e2, _, _, _, n2, _ = sub
                    rows_raw.append([label, kind, s2, d2, d2s, t2, i2, e2, p2, n2, how, None])
                    row_entry.append(k)
                    row_part.append(part)
                    if kind in MODEL_KINDS and p2:
                        model_ptrs.setdefault((d2s, p2), kind)
                del subs
            else:
                rows_raw.append([label, kind, shape, dtype, dev, dev_type, dev_index, numel, ptr,
                                 nbytes, how, None])
                row_entry.append(k)
                row_part.append(None)
                if kind in MODEL_KINDS and ptr:
                    model_ptrs.setdefault((dev, ptr), kind)

        # each storage once: the first row (named rows come first) counts it
        first_of: Dict[Tuple[str, int], int] = {}
        for i, r in enumerate(rows_raw):
            key = (r[4], r[8])
            if r[8] is None or r[8] == 0:
                r.append(None)
                continue
            if key in first_of:
                r.append(first_of[key])
            else:
                first_of[key] = i
                r.append(None)

        if search is not None:
            # the tensors with no name whose rows count bytes: what the automatic search names
            unnamed: Dict[int, None] = {}  # entry indices, in order
            for i, r in enumerate(rows_raw):
                if r[0] is None and r[12] is None and r[9]:
                    unnamed.setdefault(row_entry[i])
            targets = [entries[k][0] for k in unnamed]
            found = search(targets) if targets else {}
            del targets
            owner_of.update(found)

        # names: the row's own, else its holder's, else Tensor<i> in table order
        counter = 0
        names_of: Dict[int, str] = {}  # entry -> name
        named_row: List[bool] = []
        for i, r in enumerate(rows_raw):
            k = row_entry[i]
            t, label, _ = entries[k]
            chain = owner_of.get(id(t))
            by_holder = _name_by_chain(chain, r[1], label)
            name = names_of.get(k, "")
            if not name:
                if by_holder is not None:
                    name = by_holder
                elif label is None:
                    name = f"{type(t).__name__}{counter}"
                    counter += 1
                else:
                    name = label
                names_of[k] = name
            r[0] = name if row_part[i] is None else f"{name}.{row_part[i]}"
            r[11] = chain if r[1] not in MODEL_KINDS else None
            named_row.append(label is not None or by_holder is not None)
        for r in rows_raw:
            if r[12] is not None:
                r[12] = rows_raw[r[12]][0]
        del names_of

        devices = []
        for r in rows_raw:
            if r[4] not in devices:
                devices.append(r[4])
        block = {}  # row index -> block bytes
        site_of: Dict[int, str] = {}  # row index -> allocation site (CUDA, history recorded)
        block_kinds: Dict[str, Dict[int, str]] = {}
        block_names: Dict[str, Dict[int, str]] = {}
        totals: Dict[str, Totals] = {}
        sites: Dict[str, List[Site]] = {}
        cuda_idx = sorted({(r[6] if r[6] is not None else 0) for r in rows_raw if r[5] == "cuda"})
        if filt is not None and filt[0] == "cuda" and cuda_available():
            import torch

            want = filt[1] if filt[1] is not None else None
            if want is not None:
                cuda_idx = sorted(set(cuda_idx) | {want})
                dev_s = str(torch.device("cuda", want))
                if dev_s not in devices:
                    devices.append(dev_s)
        if cuda_idx:
            segs = _alloc.segments()
            storages, which = [], []
            for i, r in enumerate(rows_raw):
                if r[5] == "cuda" and r[8] and r[12] is None:  # r[12]: shares_with
                    storages.append(((r[6] or 0), r[8], named_row[i]))
                    which.append(i)
            per, ctot, unseen = _alloc.attribute(segs, storages)
            numbered = _alloc.blocks_in_order(segs)
            for i, p in zip(which, per):
                if p is not None:
                    block[i] = p[2] if p[3] else 0
                    frames = numbered[p[0]].get("frames") if 0 <= p[0] < len(numbered) else None
                    if frames:
                        site_of[i] = _alloc._site(frames)
                    kinds = block_kinds.setdefault(rows_raw[i][4], {})
                    kind = rows_raw[i][1]
                    kinds.setdefault(p[1], "activation" if kind == "saved_for_backward" else kind)
                    block_names.setdefault(rows_raw[i][4], {}).setdefault(p[1], rows_raw[i][0])
            for i, r in enumerate(rows_raw):
                if r[5] == "cuda" and i not in block:
                    block[i] = 0
            for idx in cuda_idx:
                dev_s = f"cuda:{idx}"
                tot: Totals = dict(ctot.get(idx, {}))
                if not tot:
                    tot = {k: 0 for k in ("reserved", "allocated", "requested", "pending_free",
                                          "inactive_split", "inactive_whole", "named", "seen",
                                          "stack_attributed", "unattributed")}
                dm = _alloc.device_memory(idx)
                tot["process_used"] = dm["process_used"] if dm["ok"] else -1
                tot["device_used"] = dm["device_used"] if dm["ok"] else -1
                tot["device_total"] = dm["total"] if dm["ok"] else -1
                tot["device_free"] = dm["free"] if dm["ok"] else -1
                tot["device_source"] = dm["source"] if dm["ok"] else dm["error"]
                tot["non_pytorch"] = (tot["process_used"] - tot["reserved"]
                                      if tot["process_used"] >= 0 else None)
                totals[dev_s] = tot
                sites[dev_s] = _alloc.top_sites(segs, [u for u in unseen if u[2] == idx])
        rows: List[Row] = []
        chains: Dict[int, Any] = {}
        append = rows.append
        for dev in devices:
            totals.setdefault(dev, {}).update(numel=0, used=0, storage=0, named_storage=0,
                                              storages=0, unnamed_storages=0, tensors=0)
        for i, (name, kind, shape, dtype, dev, dev_type, _idx, numel, ptr, nbytes, how,
                chain, shares) in enumerate(rows_raw):
            sb = 0 if shares or nbytes is None else nbytes
            bb = block.get(i, 0) if dev_type == "cuda" else None
            if chain is not None:
                chains[len(rows)] = chain
            append(Row(name, kind, shape, dtype, dev, numel, sb, bb, shares, how,
                       None if chain is None else str(chain), _holder_of(chain, kind, name),
                       ptr or None, site_of.get(i)))
            tot = totals[dev]
            tot["numel"] += numel or 0
            tot["used"] += sb if bb is None else bb
            tot["storage"] += sb
            if named_row[i]:
                tot["named_storage"] += sb
            elif sb:
                tot["unnamed_storages"] += 1
            if sb:
                tot["storages"] += 1
            tot["tensors"] += 1
        # devices in first-seen order, CUDA ones included even when only filtered for
        ordered = {d: totals[d] for d in devices if d in totals}
        ordered.update({d: v for d, v in totals.items() if d not in ordered})
        return Report(rows=rows, totals=ordered, sites=sites, block_kinds=block_kinds,
                      block_names=block_names, chains=chains)


def _check_owners(owners: object) -> None:
    if owners is not None and not isinstance(owners, bool):
        raise TypeError("MemReporter: owners must be True, False or None (automatic), not "
                        f"{type(owners).__name__}")


# The automatic owner search (collect(owners=None), the default) visits at most this many
# objects, and ends as soon as every unnamed tensor is found (see docs/api.md: MemReporter).
AUTO_MAX_OBJECTS = 1_000_000


def _owners_of(named: List[NamedTensor], live: List[torch.Tensor],
               paths: Dict[int, Tuple[Any, str]], limit: int = 200000,
               only: Optional[Set[int]] = None, max_objects: Optional[int] = None,
               roots: Optional[Mapping[str, Mapping[str, Any]]] = None,
               auto: Optional[Dict[str, Any]] = None) -> Dict[int, Any]:
    """id(tensor) -> tensorgc.owner_chains.Chain for the tensors that are not a parameter, grad,
    buffer or optimizer state: one search for all of them and for the live tensors with a
    grad_fn. A tensor saved for backward (paths: id -> (node, "saved x")) gets the chain of the
    best-held tensor whose graph reaches the node, continued through the graph: graphs are
    walked from tensors reached from a root first (shortest chain first), so a loss kept in a
    list wins over an intermediate result that only the graph itself keeps.

    ``only`` (ids): the chains of these tensors alone, the same as without it. The search then
    looks for them and for the live tensors whose graph leads to a node that saves one of them
    or feeds one (a leaf's AccumulateGrad): a node takes its chain from the first of the sorted
    starts that reaches it, and the first is among those. ``max_objects``: the search's bound
    (None: the heap's size); ``roots``: {label: {name: object}} roots searched first
    (tensorgc.owners; the pytest plugin's fixture values). A tensor named as a parameter, grad,
    buffer or optimizer state gets no chain, even when a node saves it too: its first name, the
    model's, is its row's. ``auto`` (collect()'s automatic search): the pass ends once every
    target is found and skips the search among unreached objects (see _chains); the dict gets
    the pass's counts."""
    from .owner_chains import _chains

    kinds: Dict[int, str] = {}
    for t, _, kind in named:
        kinds.setdefault(id(t), kind)
    paths = {k: v for k, v in paths.items() if kinds.get(k) not in MODEL_KINDS}
    targets = [t for t in live if kinds.get(id(t), "other") == "other"
               and (only is None or id(t) in only)]
    index = {id(t): i for i, t in enumerate(targets)}
    starts: List[Tuple[Any, Any]] = []  # (tensor, grad_fn)
    if paths:
        for t in live:
            try:
                fn = t.grad_fn
            except Exception:  # noqa: BLE001 -- exotic subclasses
                continue
            if fn is not None:
                starts.append((t, fn))
        if only is not None:
            goals = {id(paths[k][0]) for k in only if k in paths}
            starts = _starts_reaching(starts, goals, set(index), limit)
        for t, fn in starts:
            if id(t) not in index:
                index[id(t)] = len(targets)
                targets.append(t)
    if auto is None:
        chains = _chains(targets, max_objects, named=roots)
    else:
        chains = _chains(targets, max_objects, named=roots, stop_when_found=True,
                         info_out=auto, second_pass=False, frames_first=True)
    out: Dict[int, Any] = {}
    for t, c in zip(targets, chains):
        if kinds.get(id(t), "other") == "other":
            out[id(t)] = c
    if paths:
        rank = {"root": 0, "outside": 1, "garbage": 2, "unknown": 3}
        starts.sort(key=lambda s: (rank.get(chains[index[id(s[0])]].kind, 3),
                                   len(chains[index[id(s[0])]].edges)))
        via: Dict[int, Tuple[Any, List[str]]] = {}  # id(node) -> (chain, references to it)
        keep: List[Any] = []  # nodes stay alive while we walk, so ids are not reused
        queue: Deque[Any] = collections.deque()
        for t, fn in starts:
            if id(fn) in via:
                continue
            via[id(fn)] = (chains[index[id(t)]], [f".grad_fn \u2192 {type(fn).__name__}"])
            queue.append(fn)
            # breadth-first from this start before the next: a better-held start claims
            # everything its graph reaches
            while queue and len(via) < limit:
                node = queue.popleft()
                keep.append(node)
                chain, edges = via[id(node)]
                var = getattr(node, "variable", None)  # AccumulateGrad: the leaf it feeds
                if var is not None and id(var) in index:
                    better = out.get(id(var))
                    if better is None or (better.kind != "root" and chain.kind == "root"):
                        out[id(var)] = chain.extend(edges + ["variable"])
                for k, (child, _) in enumerate(getattr(node, "next_functions", ()) or ()):
                    if child is not None and id(child) not in via:
                        via[id(child)] = (chain, edges + [
                            f".next_functions[{k}] \u2192 {type(child).__name__}"])
                        queue.append(child)
        for key, (node, saved) in paths.items():
            if only is not None and key not in only:
                continue
            got = via.get(id(node))
            if got is not None:
                out[key] = got[0].extend(got[1] + [saved])
        del keep, via, queue
    del targets, chains, starts
    return out


def _name_by_chain(chain: Any, kind: str, label: Optional[str]) -> Optional[str]:
    """A row's name from what holds it, when its chain is a root's: an unnamed tensor is named by
    its holder (``__main__.loss_history[3]``; a leaf reached through another tensor's graph
    ``leaf ← __main__.loss_history[3]``), a tensor saved for backward by its node and the tensor
    whose graph keeps it (``saved by MulBackward0 (self) ← __main__.loss_history[3]``), except in a
    forward pass in progress, where the module its node belongs to says more. None: the row keeps
    its own name (or Tensor<i>)."""
    if chain is None or kind in MODEL_KINDS:
        return None
    if label is None and chain.kind == "outside":
        return "held outside Python"  # only C or C++ code holds it (a saved view's base, say)
    name = chain.name
    if name is None:
        return None
    if label is None:
        through = any(e.startswith(".grad_fn") for e in chain.edges)
        return f"leaf \u2190 {name}" if through else name
    if kind == "saved_for_backward" and not chain.in_flight:
        return f"{label} \u2190 {name}"
    return None


def _holder_of(chain: Any, kind: str, name: str) -> Optional[str]:
    """What a person would call a row's holder: the chain's named owner, or for a tensor saved by
    a forward pass in progress the module its node belongs to (``activations of layers.3 (forward
    in flight)``), so that a forward's activations are counted by module, not as one local."""
    if chain is None:
        return None
    if kind == "saved_for_backward" and chain.in_flight:
        m = _MODULE_IN_NAME.search(name)
        if m:
            return f"activations of {m.group(1)} (forward in flight)"
    return str(chain.holder)


_MODULE_IN_NAME = re.compile(" (?:\u2190|after) (\\S+)$")


def _starts_reaching(starts: List[Tuple[Any, Any]], goals: Set[int], leaves: Set[int],
                     limit: int) -> List[Tuple[Any, Any]]:
    """The (tensor, grad_fn) of ``starts``, in their order, whose graph reaches a node of
    ``goals`` (ids) or an AccumulateGrad of a tensor of ``leaves`` (ids): one walk of the graphs
    from every start that remembers each node's parents, then one walk back from those nodes."""
    parents: Dict[int, List[int]] = {}
    found: List[int] = []
    keep: List[Any] = []  # nodes stay alive while we walk, so ids are not reused
    queue: Deque[Any] = collections.deque()
    for _, fn in starts:
        if id(fn) not in parents:
            parents[id(fn)] = []
            queue.append(fn)
    while queue and len(parents) < limit:
        node = queue.popleft()
        keep.append(node)
        var = getattr(node, "variable", None)
        if id(node) in goals or (var is not None and id(var) in leaves):
            found.append(id(node))
        for child, _ in getattr(node, "next_functions", ()) or ():
            if child is None:
                continue
            up = parents.get(id(child))
            if up is None:
                parents[id(child)] = [id(node)]
                queue.append(child)
            else:
                up.append(id(node))
    reach = set(found)
    todo = list(found)
    while todo:
        for p in parents.get(todo.pop(), ()):
            if p not in reach:
                reach.add(p)
                todo.append(p)
    del keep, queue
    return [(t, fn) for t, fn in starts if id(fn) in reach]


_is_tensor = _tensorgc._is_tensor  # a C type check: no isinstance, no __class__ property

# ---------------------------------------------------------------------- autograd

_SAVED_ATTRS: Dict[type, Tuple[str, ...]] = {}  # grad_fn type -> its _saved_ attributes


def _saved_attrs(node: object) -> Tuple[str, ...]:
    tp = type(node)
    names = _SAVED_ATTRS.get(tp)
    if names is None:
        names = tuple(a for a in dir(node) if a.startswith("_saved_"))
        _SAVED_ATTRS[tp] = names
    return names


def _module_of(node: object, pname_of: Dict[int, str]) -> Optional[str]:
    """Where a node's op ran, from the parameters it accumulates into: "← layers.3" when its
    own inputs include a parameter (directly or through one view/transpose node), "after
    layers.3" when only an op before it does (an activation following that module: the nearest
    one, at most _MODULE_DEPTH ops back, reshapes and views not counted, _MODULE_NODES nodes
    looked at), else None."""
    queue: Deque[Tuple[object, int]] = collections.deque([(node, 0)])
    seen: Set[int] = {id(node)}
    while queue:
        n, ops = queue.popleft()
        for child, _ in getattr(n, "next_functions", ()) or ():
            if child is None:
                continue
            var = getattr(child, "variable", None)
            if var is not None:
                name = pname_of.get(id(var))
                if name:
                    mod = name.split("+")[0].rsplit(".", 1)[0] if "." in name else name
                    # a parameter input, or one through a view of it (Linear's weight goes
                    # through TBackward0); else an op before this one took it
                    own = n is node or (ops == 0 and n in _children(node) and _is_view(n))
                    return f"\u2190 {mod}" if own else f"after {mod}"
                continue
            if id(child) in seen or len(seen) >= _MODULE_NODES:
                continue
            seen.add(id(child))
            if type(child).__name__.startswith(_RESHAPE_NODES):
                queue.appendleft((child, ops))  # a view of the same values: no op further
            elif ops + 1 < _MODULE_DEPTH:
                queue.append((child, ops + 1))
    return None


def _children(node: object) -> List[object]:
    return [c for c, _ in getattr(node, "next_functions", ()) or () if c is not None]


_MODULE_DEPTH = 8  # ops back from a node that saves a tensor, looking for a module's parameter
_MODULE_NODES = 64  # nodes looked at, at most, per node
_RESHAPE_NODES = ("ViewBackward", "UnsafeViewBackward", "ReshapeAliasBackward", "TBackward",
                  "TransposeBackward", "PermuteBackward", "ExpandBackward", "SqueezeBackward",
                  "UnsqueezeBackward", "SelectBackward", "SliceBackward", "CloneBackward",
                  "AliasBackward", "UnbindBackward", "SplitBackward", "SplitWithSizesBackward")

_VIEW_NODES = ("TBackward", "ViewBackward", "TransposeBackward", "PermuteBackward",
               "ExpandBackward", "UnsqueezeBackward", "SqueezeBackward", "ReshapeAliasBackward",
               "ToCopyBackward")


def _is_view(node: object) -> bool:
    return type(node).__name__.startswith(_VIEW_NODES)


def _node_tensors(node: object, hooks: Optional[Set[int]] = None) -> List[Tuple[str, Any]]:
    """(label, tensor) of what an autograd node keeps for backward: its saved tensors
    (``_saved_self``: "self", "tensors[1]") and, for a custom autograd.Function's node (a
    checkpoint's CheckpointFunctionBackward), the tensors its ctx holds as attributes
    ("ctx.fwd_cpu_state"). A saved tensor that a saved_tensors_hooks pair packed (a
    non-reentrant checkpoint's, torch.autograd.graph.save_on_cpu's) is never unpacked -- that
    would run the hook: recompute the forward, copy back to the device --; its packed form is
    named when it is a tensor ("self, packed"); else what the unpack hook's closure keeps to
    rebuild it is (a non-reentrant checkpoint's frame: the inputs its _NoopSaveInputs node saved,
    the RNG states its recompute function keeps: "checkpoint: frame.input_saver
    saved_tensors[0]"), once per hook (``hooks``: the ids of the hooks already read)."""
    out: List[Tuple[str, Any]] = []
    for a in _saved_attrs(node):
        label = a[len("_saved_"):]
        try:
            raw = getattr(node, "_raw" + a, None)
        except Exception:  # noqa: BLE001 -- freed after backward
            continue
        raws = raw if isinstance(raw, (tuple, list)) else (raw,)
        if raw is not None and any(_packed(r) is not _NO_HOOK for r in raws):
            for j, r in enumerate(raws):
                packed = _packed(r)
                sub = label + (f"[{j}]" if len(raws) > 1 else "")
                if packed is _NO_HOOK or packed is _UNKNOWN:
                    continue  # mixed or unreadable: nothing is unpacked
                if not _is_tensor(packed) and not isinstance(packed, (tuple, list)):
                    hook = getattr(r, "unpack_hook", None)
                    if hooks is not None and hook is not None and id(hook) not in hooks:
                        hooks.add(id(hook))
                        out.extend(_hook_tensors(hook))
                    continue
                for k, x in enumerate(packed if isinstance(packed, (tuple, list)) else (packed,)):
                    if x is not None and _is_tensor(x):
                        out.append((f"{sub}, packed" + (f"[{k}]" if isinstance(packed, (tuple, list))
                                                        else ""), x))
            continue
        try:
            v = getattr(node, a)
        except Exception:  # noqa: BLE001 -- freed after backward, or not a tensor
            continue
        vals = v if isinstance(v, (tuple, list)) else (v,)
        for j, x in enumerate(vals):
            if x is not None and _is_tensor(x):
                out.append((label + (f"[{j}]" if len(vals) > 1 else ""), x))
    if _is_custom_node(node):
        try:
            raws = list(getattr(node, "_raw_saved_tensors", None) or ())
            if all(_packed(r) is _NO_HOOK for r in raws):
                vals = tuple(getattr(node, "saved_tensors", None) or ()) if raws else ()
            else:
                vals = ()  # hooks would run: its packed forms are not tensors of ours to name
        except Exception:  # noqa: BLE001 -- freed after backward
            vals = ()
        for j, x in enumerate(vals):
            if x is not None and _is_tensor(x):
                out.append((f"saved_tensors[{j}]", x))
        try:
            ctx = object.__getattribute__(node, "__dict__")
        except Exception:  # noqa: BLE001
            ctx = None
        if type(ctx) is dict:
            for key, v in list(ctx.items())[:_CTX_ATTRS]:
                vals = v if isinstance(v, (tuple, list)) else (v,)
                for j, x in enumerate(vals[:_CTX_ATTRS]):
                    if x is not None and _is_tensor(x):
                        out.append((f"ctx.{_key_label(key)}"
                                    + (f"[{j}]" if isinstance(v, (tuple, list)) else ""), x))
    return out


def _hook_tensors(hook: object) -> List[Tuple[str, Any]]:
    """(label, tensor) of what a saved_tensors_hooks unpack hook keeps to rebuild its tensors:
    tensors in its closure, and one level into the objects there (attributes of a plain
    object, as a checkpoint's _CheckpointFrame; an autograd node's saved tensors, as its
    input_saver's; a function's closure, as its recompute_fn's). Read from __closure__ and
    __dict__ at the C level: no code of the hook's runs."""
    out: List[Tuple[str, Any]] = []
    qual = getattr(hook, "__qualname__", "")
    what = "checkpoint" if isinstance(qual, str) and qual.startswith("_checkpoint_hook") else \
        _cut(str(qual), 40)
    for cname, v in _closure(hook):
        if _is_tensor(v):
            out.append((f"{what}: {cname}", v))
            continue
        if _is_custom_node(v) or type(v).__name__.endswith("Backward0"):
            out.extend((f"{what}: {cname} {lab}", x) for lab, x in _node_tensors(v))
            continue
        try:
            attrs = object.__getattribute__(v, "__dict__")
        except Exception:  # noqa: BLE001 -- no __dict__
            continue
        if type(attrs) is not dict:
            continue
        for key, a in list(attrs.items())[:_CTX_ATTRS]:
            label = f"{what}: {cname}.{_key_label(key)}"
            if _is_tensor(a):
                out.append((label, a))
            elif type(a) in (list, tuple):
                for j, x in enumerate(a[:_CTX_ATTRS]):
                    if type(x).__name__ == "SavedTensor" and _packed(x) is _NO_HOOK:
                        try:
                            x = x.data  # a saved input (torch's SavedTensor: no hook runs)
                        except Exception:  # noqa: BLE001 -- freed
                            continue
                    if x is not None and _is_tensor(x):
                        out.append((f"{label}[{j}]", x))
            elif _is_custom_node(a):
                out.extend((f"{label} {lab}", x) for lab, x in _node_tensors(a))
            elif callable(a) and hasattr(a, "__closure__"):
                for n, x in _closure(a):
                    if _is_tensor(x):
                        out.append((f"{label} {n}", x))
                    elif type(x) in (list, tuple):  # the device RNG states, one a device
                        out.extend((f"{label} {n}[{j}]", y) for j, y in
                                   enumerate(x[:_CTX_ATTRS]) if y is not None and _is_tensor(y))
    return out


def _key_label(key: object) -> str:
    """An attribute's name for a row's label: as it is when it is an identifier, else its repr
    (a newline or a bracket in a name set through setattr cannot break the table), cut to 40."""
    text = key if isinstance(key, str) and key.isidentifier() else repr(key)
    return _cut(text, 40)


def _closure(fn: object) -> List[Tuple[str, Any]]:
    """(name, value) of a Python function's closure cells (empty ones left out)."""
    cells = getattr(fn, "__closure__", None) if type(fn).__name__ == "function" else None
    code = getattr(fn, "__code__", None)
    if not cells or code is None:
        return []
    out = []
    for name, cell in zip(code.co_freevars, cells):
        try:
            out.append((name, cell.cell_contents))
        except ValueError:  # empty
            continue
    return out[:_CTX_ATTRS]


_CTX_ATTRS = 64  # a custom Function's ctx: attributes, and items of each, looked at
_NO_HOOK = object()  # a saved tensor without saved_tensors_hooks: unpacking runs nothing
_UNKNOWN = object()  # hooks may be there, this torch cannot say: not unpacked


def _packed(raw: object) -> object:
    """A SavedTensor's packed form when saved_tensors_hooks packed it, _NO_HOOK when none did,
    _UNKNOWN when this torch does not say (its SavedTensor has no unpack_hook)."""
    try:
        hook = getattr(raw, "unpack_hook")
    except AttributeError:
        return _NO_HOOK  # a torch that does not say: unpacked, as it always was
    except Exception:  # noqa: BLE001 -- freed
        return _UNKNOWN
    if hook is None:
        return _NO_HOOK
    try:
        return getattr(raw, "data")
    except Exception:  # noqa: BLE001
        return _UNKNOWN


def _is_custom_node(node: object) -> bool:
    """A node of a Python autograd.Function (its ctx: torch.autograd.function.BackwardCFunction)."""
    for c in type(node).__mro__:
        if c.__name__ == "BackwardCFunction" and c.__module__ == "torch.autograd.function":
            return True
    return False


def _saved_for_backward(live: Iterable[torch.Tensor], named: Iterable[NamedTensor],
                        limit: int = 200000,
                        paths: Optional[Dict[int, Tuple[Any, str]]] = None
                        ) -> List[NamedTensor]:
    """(tensor, name, kind) for tensors that autograd nodes save for backward, found by walking
    the grad_fn graphs reachable from live tensors. Tensors already named keep their name.
    paths, when given, gets id(saved tensor) -> (the node that saves it, "saved self")."""
    pname_of = {id(t): n for t, n, k in named if k == "parameter"}
    out: List[NamedTensor] = []
    seen_nodes: Set[int] = set()
    queue: Deque[Any] = collections.deque()
    for t in live:
        try:
            fn = t.grad_fn
        except Exception:  # noqa: BLE001 -- exotic subclasses
            continue
        if fn is not None and id(fn) not in seen_nodes:
            seen_nodes.add(id(fn))
            queue.append(fn)
    keep: List[Any] = []  # nodes stay alive while we walk, so ids are not reused
    hooks: Set[int] = set()
    while queue and len(seen_nodes) < limit:
        node = queue.popleft()
        keep.append(node)
        where: Optional[str] = None
        for label, x in _node_tensors(node, hooks):
            if where is None:
                where = _module_of(node, pname_of) or ""
            # its own saved tensors are "saved"; what its ctx or a hook's closure keeps, "kept"
            verb = "kept" if label.startswith("ctx.") or ": " in label else "saved"
            name = f"{verb} by {type(node).__name__} ({label})"
            if where:
                name += f" {where}"
            out.append((x, name, "saved_for_backward"))
            if paths is not None:
                paths[id(x)] = (node, f"{verb} {label}")
        for child, _ in getattr(node, "next_functions", ()) or ():
            if child is not None and id(child) not in seen_nodes:
                seen_nodes.add(id(child))
                queue.append(child)
    del keep
    return out
