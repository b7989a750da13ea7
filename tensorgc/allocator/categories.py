"""Categories over time: which allocations were parameters, grads, optimizer state, inputs,
activations or temporaries, for every allocation of a trace, not only those alive at the snapshot.

``categorize(model, optimizer)`` puts cheap hooks on the model and the optimizer that note, in
memory and on the allocator's clock (unix microseconds, as trace entries' ``time_us``), when each
forward, backward and optimizer step ran, where each parameter's grad landed and the names of
the parameters, grads and optimizer states. ``snapshot()`` attaches these marks to the snapshot
under ``"tensorgc_categories"`` (with the reporter's names of the blocks alive then), so a dumped
file is self-describing; the C replay (allocator/timeline.c) turns them into a category per
allocation. Where nothing was recorded (a snapshot torch wrote alone), the categories are
inferred from the allocations' stacks (allocator/infer.c: the phase each stack ran in and what
it says of its block; the replay's rules 8-14). This module also validates the key of a file
(untrusted input) and gathers the replay's inputs, recorded and inferred.

    with tensorgc.categorize(model, opt):
        train(...)
        tensorgc.dump_snapshot("run.pickle")
"""
from __future__ import annotations

import logging
import threading
import time
import weakref
from array import array
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Literal, Mapping, NamedTuple,
                    Optional, Sequence, Tuple, TypedDict, Union)

from .. import _tensorgc
from .._common.errors import SnapshotError
from .._common.types import Snapshot

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

__all__ = ["categorize", "Categorizer", "PHASES", "CATEGORIES", "MAX_MARKS",
           "describe_label"]

logger = logging.getLogger("tensorgc")

PHASES = ("forward", "backward", "optimizer")  # codes 0, 1, 2: TGC_PHASE_* of timeline.h
# TGC_CAT_* of timeline.h, in stacking order (bottom first); the replay returns the same tuple.
# "other" stays last: it names nothing. The codes are not persisted (a page carries the names).
CATEGORIES = ("parameter", "buffer", "optimizer_state", "grad", "workspace", "input", "output",
              "activation", "temporary", "other")
# the reporter's kinds that are a category under another name: a tensor saved for backward is an
# activation (alive at the end: the snapshot was taken, or the OOM hit, with a graph alive)
ALIASES = {"saved_for_backward": "activation"}
MAX_MARKS = 1_000_000  # per kind (spans, grads): past it the oldest are dropped and counted
VERSION = 1
KEY = "tensorgc_categories"
_INT64 = (-(1 << 63), 1 << 63)

Span = Tuple[int, int, int]       # (phase code, t0_us, t1_us)
GradMark = Tuple[int, int, int]   # (device, storage address, t_us)
NameMark = Tuple[int, int, int, str]  # (device, storage address, t_us, name)
Named = Dict[int, Dict[int, str]]  # {device: {block address: category}}
Parsed = Tuple[List[Span], List[GradMark], Named, Dict[str, int]]
ReplayInputs = Tuple[List[Span], List[Tuple[int, int]], List[Tuple[int, int]]]


class Dropped(TypedDict, total=False):
    spans: int
    grads: int
    names: int


class Marks(TypedDict):
    """What Categorizer.marks() returns (the snapshot key without "named")."""
    version: int
    spans: List[List[Any]]   # [phase name, t0_us, t1_us]
    grads: List[List[int]]   # [device (-1: CPU), storage address, t_us]
    name_marks: List[List[Any]]  # [device, storage address, t_us, name]
    dropped: Dropped


class SnapshotKey(Marks, total=False):
    """The value snapshot() stores under KEY: every active handle's marks, the blocks' kinds
    (named) and the tensors' names (names: {device: {block address: name}})."""
    named: Named
    names: Dict[int, Dict[int, str]]


NAME_MAX = 200  # characters of a tensor's name kept in the snapshot and shown on the page
OPEN = (1 << 63) - 1  # the end of a span still open at the snapshot (INT64_MAX in the replay)


class _Ring:
    """Rows of a few ints in compact arrays (one per column), the oldest overwritten past ``cap``
    (and counted). Appends come from autograd's threads too: a lock keeps the columns aligned."""

    def __init__(self, cap: int, codes: str) -> None:
        self.cap = cap
        self.codes = codes
        self.lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        self.cols: Tuple[array[int], ...] = tuple(array(c) for c in self.codes)
        self.next = 0  # once full: the oldest row, overwritten next
        self.dropped = 0

    def append(self, *row: int) -> None:
        with self.lock:
            cols = self.cols
            if len(cols[0]) < self.cap:
                for c, v in zip(cols, row):
                    c.append(v)
                return
            i = self.next
            for c, v in zip(cols, row):
                c[i] = v
            self.next = (i + 1) % self.cap
            self.dropped += 1

    def rows(self) -> Tuple[List[List[int]], int]:
        with self.lock:
            i = self.next
            cols = [c[i:] + c[:i] for c in self.cols]
            dropped = self.dropped
        return [list(r) for r in zip(*(c.tolist() for c in cols))], dropped


# handles not removed yet (a handle no hook refers to is gone too)
_ACTIVE: weakref.WeakSet[Categorizer] = weakref.WeakSet()
_ACTIVE_LOCK = threading.Lock()


def _now() -> int:
    return time.time_ns() // 1000  # the clock of trace entries' time_us


class Categorizer:
    """The handle ``categorize`` returns: ``remove()`` (or leave the ``with`` block) takes the
    hooks off; ``marks()`` is what ``snapshot()`` attaches; ``errors`` counts hook failures
    (each is logged once, then counted; a hook never raises into the training loop)."""

    def __init__(self, model: Optional[torch.nn.Module],
                 optimizer: Optional[torch.optim.Optimizer], max_marks: int) -> None:
        import torch

        if model is None and optimizer is None:
            raise ValueError("categorize() needs a model, an optimizer or both")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, not "
                            f"{type(optimizer).__name__}")
        if not isinstance(max_marks, int) or max_marks < 1:
            raise ValueError(f"max_marks must be an int >= 1, not {max_marks!r}")
        # weak: the hooks the model holds refer to this handle, which must not keep it alive
        self._model = weakref.ref(model) if model is not None else None
        self._optimizer = weakref.ref(optimizer) if optimizer is not None else None
        self._spans = _Ring(max_marks, "qqq")   # phase code, t0, t1
        self._grads = _Ring(max_marks, "qQq")   # device (-1: CPU), storage address, time
        self._names = _Ring(max_marks, "qQqq")  # device, storage address, time, name id
        self._name_list: List[str] = []         # name id -> name (cut to NAME_MAX)
        self._name_ids: Dict[str, int] = {}
        # id(parameter) -> (a weak reference to it, its name): the parameter's own name in the
        # model (or its place in the optimizer's groups), checked by identity when read
        self._pnames: Dict[int, Tuple[Any, str]] = {}
        self._named_at: Dict[Tuple[int, str], int] = {}  # (id(param), state key) -> address
        self._state_count = -1  # len(optimizer.state) when the states were last named
        self._hooks: List[RemovableHandle] = []
        self._active = True
        self._fw_open: Dict[int, int] = {}   # thread id -> start of the forward running on it
        self._bw_lock = threading.Lock()
        self._bw_open: Optional[int] = None  # start of the backward in progress (end queued)
        self._opt_open: Optional[int] = None
        self.errors = 0
        self.skipped: List[str] = []  # what this torch could not hook (said once)
        try:
            self._register(torch, model, optimizer)
        except BaseException:
            self.remove()
            raise
        with _ACTIVE_LOCK:
            _ACTIVE.add(self)

    # ------------------------------------------------------------------ registration

    def _register(self, torch: Any, model: Optional[torch.nn.Module],
                  optimizer: Optional[torch.optim.Optimizer]) -> None:
        params: Dict[int, Any] = {}
        if model is not None:
            self._hooks.append(model.register_forward_pre_hook(self._forward_pre))
            self._hooks.append(model.register_forward_hook(self._forward))
            for name, p in model.named_parameters():
                params.setdefault(id(p), p)
                self._pnames.setdefault(id(p), (weakref.ref(p), name))
        if optimizer is not None:
            for g, group in enumerate(optimizer.param_groups):
                for i, p in enumerate(group.get("params", ())):
                    params.setdefault(id(p), p)
                    if isinstance(p, torch.Tensor):
                        self._pnames.setdefault(id(p), (weakref.ref(p), f"param_groups.{g}.{i}"))
            if hasattr(optimizer, "register_step_pre_hook"):  # torch >= 2.0
                self._hooks.append(optimizer.register_step_pre_hook(self._step_pre))
                self._hooks.append(optimizer.register_step_post_hook(self._step_post))
            else:
                self.skipped.append("optimizer step hooks (torch < 2.0)")
        for p in params.values():
            if not isinstance(p, torch.Tensor) or not p.requires_grad:
                continue
            if not hasattr(p, "register_post_accumulate_grad_hook"):  # torch < 2.1
                self.skipped.append("grad marks (torch < 2.1: no post-accumulate-grad hooks)")
                break
            self._hooks.append(p.register_post_accumulate_grad_hook(self._grad))
        if self.skipped:
            logger.info("tensorgc.categorize: not recorded on this torch: %s",
                        "; ".join(self.skipped))

    def _failed(self, where: str) -> None:
        self.errors += 1
        if self.errors == 1:
            try:
                logger.exception("tensorgc.categorize: the %s hook failed (later failures are "
                                 "only counted in .errors)", where)
            except Exception:  # noqa: BLE001 -- a logging handler may raise too
                pass

    # ------------------------------------------------------------------ hooks

    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        if not self._active:
            return None
        try:
            self._fw_open[threading.get_ident()] = _now()
            if self._bw_open is not None and not self._in_backward():
                # a backward that never reached its end (it raised): its end is unknown
                with self._bw_lock:
                    self._bw_open = None
        except Exception:  # noqa: BLE001
            self._failed("forward pre")
        return None

    def _forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self._active:
            return None
        try:
            t1 = _now()
            t0 = self._fw_open.pop(threading.get_ident(), None)
            if t0 is not None:
                self._spans.append(0, t0, t1)
            out = _first_tensor(output)
            fn = getattr(out, "grad_fn", None) if out is not None else None
            if fn is not None and hasattr(fn, "register_prehook"):  # torch >= 2.0
                # fires when backward reaches the output: the backward's start. Registered on
                # the node, so the graph, not this handle, decides how long it lives.
                fn.register_prehook(self._backward_pre)
        except Exception:  # noqa: BLE001
            self._failed("forward")
        return None

    @staticmethod
    def _in_backward() -> bool:
        import torch

        get = getattr(torch._C, "_current_graph_task_id", None)
        return get is not None and bool(get() != -1)

    def _backward_pre(self, grad_outputs: Any) -> None:
        if not self._active:
            return None
        try:
            import torch

            with self._bw_lock:
                if self._bw_open is not None:
                    return None  # this backward's end is queued already (several outputs)
                self._bw_open = _now()
            # runs when this backward's graph task is done, on the thread that ran it
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_end)
        except Exception:  # noqa: BLE001
            with self._bw_lock:
                self._bw_open = None
            self._failed("backward pre")
        return None

    def _backward_end(self) -> None:
        try:
            t1 = _now()
            with self._bw_lock:
                t0, self._bw_open = self._bw_open, None
            if t0 is not None and self._active:
                self._spans.append(1, t0, t1)
        except Exception:  # noqa: BLE001
            self._failed("backward end")

    def _pname(self, p: Any) -> Optional[str]:
        entry = self._pnames.get(id(p))
        return entry[1] if entry is not None and entry[0]() is p else None

    def _name_id(self, name: str) -> int:
        name = name[:NAME_MAX]
        nid = self._name_ids.get(name)
        if nid is None:  # two threads at once may append it twice: the id is the first
            nid = self._name_ids.setdefault(name, len(self._name_list))
            if nid == len(self._name_list):
                self._name_list.append(name)
        return nid

    def _grad(self, p: torch.Tensor) -> None:
        if not self._active:
            return
        try:
            g = p.grad
            if g is None:
                return
            # the storage's start, which is the allocation's address (a grad that is a view of a
            # bucket, as DDP's gradient_as_bucket_view makes, marks the bucket)
            addr = g.data_ptr() - int(g.storage_offset()) * g.element_size()
            t = _now()
            dev = g.get_device()
            self._grads.append(dev, addr, t)
            name = self._pname(p)
            if name is not None:  # every step: a grad set to None comes back as a new block
                self._names.append(dev, addr, t, self._name_id(name + ".grad"))
        except Exception:  # noqa: BLE001
            self._failed("grad")

    def _name_states(self, optimizer: Any) -> None:
        """Name marks for the parameters and their optimizer states, when the optimizer holds
        states it had not (its first step: they are made then and keep their blocks)."""
        import torch

        state = getattr(optimizer, "state", None)
        if not isinstance(state, Mapping) or len(state) == self._state_count:
            return
        self._state_count = len(state)
        t = _now()
        for group in optimizer.param_groups:
            for p in group.get("params", ()):
                name = self._pname(p)
                if name is None or not isinstance(p, torch.Tensor):
                    continue
                tensors = [("", p)] + [(str(k), v) for k, v in state.get(p, {}).items()
                                       if isinstance(v, torch.Tensor)]
                for key, v in tensors:
                    if v.device.type == "cpu" or v.numel() == 0:
                        continue  # torch's Adam keeps its step count on the CPU
                    addr = v.data_ptr() - int(v.storage_offset()) * v.element_size()
                    if self._named_at.get((id(p), key)) == addr:
                        continue
                    self._named_at[(id(p), key)] = addr
                    self._names.append(v.get_device(), addr, t,
                                       self._name_id(f"{name}.{key}" if key else name))

    def _step_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._active:
            return None
        try:
            self._opt_open = _now()
        except Exception:  # noqa: BLE001
            self._failed("optimizer step pre")
        return None

    def _step_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._active:
            return
        try:
            t0, self._opt_open = self._opt_open, None
            if t0 is not None:
                self._spans.append(2, t0, _now())
            self._name_states(optimizer)
        except Exception:  # noqa: BLE001
            self._failed("optimizer step")

    # ------------------------------------------------------------------ public

    def marks(self) -> Marks:
        """The marks as the snapshot key holds them (without "named"): a dict with version,
        spans [[phase, t0_us, t1_us]], grads [[device, addr, t_us]], name_marks [[device, addr,
        t_us, name]] and dropped counts. Spans still open (a snapshot inside a forward, a
        backward, a step: an OOM) end now."""
        rows, sd = self._spans.rows()
        grads, gd = self._grads.rows()
        names, nd = self._names.rows()
        table = list(self._name_list)
        name_marks = [[d, a, t, table[i]] for d, a, t, i in names if 0 <= i < len(table)]
        spans: List[List[Any]] = [[PHASES[p], t0, t1] for p, t0, t1 in rows]
        now = _now()
        for t0 in list(self._fw_open.values()):
            spans.append(["forward", t0, max(now, t0)])
        for phase, t_open in (("backward", self._bw_open), ("optimizer", self._opt_open)):
            if t_open is not None:
                spans.append([phase, t_open, max(now, t_open)])
        return {"version": VERSION, "spans": spans, "grads": grads, "name_marks": name_marks,
                "dropped": {"spans": sd, "grads": gd, "names": nd}}

    @property
    def dropped(self) -> int:
        return self._spans.dropped + self._grads.dropped + self._names.dropped

    def clear(self) -> None:
        """Forget the marks recorded so far (the hooks stay)."""
        for ring in (self._spans, self._grads, self._names):
            with ring.lock:
                ring.clear()
        self._named_at.clear()
        self._state_count = -1

    def model(self) -> Optional[torch.nn.Module]:
        return self._model() if self._model is not None else None

    def optimizer(self) -> Optional[torch.optim.Optimizer]:
        return self._optimizer() if self._optimizer is not None else None

    def remove(self) -> None:
        """Take every hook off. Hooks on autograd graphs still alive stay there, inert."""
        self._active = False
        hooks, self._hooks = self._hooks, []
        for h in hooks:
            h.remove()
        with _ACTIVE_LOCK:
            _ACTIVE.discard(self)

    @property
    def active(self) -> bool:
        return self._active

    def __enter__(self) -> Categorizer:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.remove()
        return False

    def __repr__(self) -> str:
        return (f"<tensorgc.Categorizer {'active' if self._active else 'removed'}: "
                f"{len(self._spans.cols[0])} spans, {len(self._grads.cols[0])} grad marks, "
                f"{self.dropped} dropped>")


def _first_tensor(output: Any, depth: int = 0) -> Optional[torch.Tensor]:
    """The output itself, or the first tensor in a tuple, list or dict of them (one level)."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if depth == 0:
        items = (output.values() if isinstance(output, dict)
                 else output if isinstance(output, (tuple, list)) else ())
        for v in items:
            t = _first_tensor(v, 1)
            if t is not None and t.grad_fn is not None:
                return t
    return None


def categorize(model: Optional[torch.nn.Module] = None,
               optimizer: Optional[torch.optim.Optimizer] = None, *,
               max_marks: int = MAX_MARKS) -> Categorizer:
    """Record when the forward, backward and optimizer steps run and where grads land, so that
    the timeline colours every allocation by category. Returns the handle (a context manager;
    ``remove()`` ends it). ``tensorgc.snapshot()`` attaches the marks of the active handles."""
    return Categorizer(model, optimizer, max_marks)


def active() -> List[Categorizer]:
    """The handles not removed yet."""
    with _ACTIVE_LOCK:
        return [h for h in _ACTIVE if h.active]


def snapshot_key(
        named: Optional[Mapping[Union[int, str], Mapping[int, str]]] = None,
        names: Optional[Mapping[Union[int, str], Mapping[int, str]]] = None
) -> Optional[SnapshotKey]:
    """The value ``snapshot()`` stores under KEY: every active handle's marks merged, and
    ``named`` ({device index or "cuda:N": {addr: kind}}, as Report.block_kinds) and ``names``
    ({device: {addr: tensor name}}, as Report.block_names; default for both: a MemReporter
    collect of the handles' models and optimizers, the blocks of the live tensors). None
    without an active handle."""
    handles = active()
    if not handles:
        return None
    key: SnapshotKey = {"version": VERSION, "spans": [], "grads": [], "name_marks": [],
                        "dropped": {"spans": 0, "grads": 0, "names": 0}}
    for h in handles:
        m = h.marks()
        key["spans"] += m["spans"]
        key["grads"] += m["grads"]
        key["name_marks"] += m["name_marks"]
        got, total = m["dropped"], key["dropped"]
        total["spans"] = total.get("spans", 0) + got.get("spans", 0)
        total["grads"] = total.get("grads", 0) + got.get("grads", 0)
        total["names"] = total.get("names", 0) + got.get("names", 0)
    found: Tuple[Named, Dict[int, Dict[int, str]]] = (
        _named_now(handles) if named is None or names is None else ({}, {}))
    given: Mapping[Any, Mapping[int, str]] = found[0] if named is None else named
    out: Named = {}
    key["named"] = out
    for d, blocks in given.items():
        dev = _device_index(d)
        if dev is not None and isinstance(blocks, Mapping):
            out.setdefault(dev, {}).update(
                (a, ALIASES.get(k, k)) for a, k in blocks.items()
                if _int(a, 0, (1 << 64) - 1)
                and ALIASES.get(k, k) in CATEGORIES[:-1])  # "other" names nothing
    given_names: Mapping[Any, Mapping[int, str]] = found[1] if names is None else names
    out_names: Dict[int, Dict[int, str]] = {}
    for d, blocks in given_names.items():
        dev = _device_index(d)
        if dev is not None and isinstance(blocks, Mapping):
            out_names.setdefault(dev, {}).update(
                (a, n[:NAME_MAX]) for a, n in blocks.items()
                if _int(a, 0, (1 << 64) - 1) and isinstance(n, str))
    if out_names:
        key["names"] = out_names
    return key


def _device_index(d: object) -> Optional[int]:
    """A CUDA device index from 0 or "cuda:0" (Report.block_kinds' keys), else None."""
    if isinstance(d, int) and _int(d, 0, 128):
        return d
    if isinstance(d, str) and d.startswith("cuda:") and d[5:].isdigit() and int(d[5:]) < 128:
        return int(d[5:])
    return None


def _named_now(handles: Sequence[Categorizer]) -> Tuple[Named, Dict[int, Dict[int, str]]]:
    """({device index: {block address: kind}}, {device index: {block address: name}}) from the
    reporter, or empty ones when it fails (logged)."""
    from ..reporter import MemReporter

    named: Named = {}
    names: Dict[int, Dict[int, str]] = {}
    for h in handles:
        try:
            model, opt = h.model(), h.optimizer()
            rep = MemReporter(model, optimizer=opt).collect(device="cuda")
        except Exception:  # noqa: BLE001 -- the snapshot itself must not be lost to this
            logger.warning("tensorgc: naming the blocks for the snapshot's categories failed",
                           exc_info=True)
            continue
        for dev, kinds in rep.block_kinds.items():
            index = _device_index(dev)
            if index is None:
                continue
            blocks = named.setdefault(index, {})
            for addr, kind in kinds.items():
                blocks.setdefault(addr, kind)
            called = names.setdefault(index, {})
            for addr, name in rep.block_names.get(dev, {}).items():
                called.setdefault(addr, name)
    return named, names


# ---------------------------------------------------------------------- reading (untrusted)

def _int(v: object, lo: int = _INT64[0], hi: int = _INT64[1]) -> bool:
    return type(v) is int and lo <= v < hi  # exact int: bool is not a time


def _cut(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def parse(value: object, where: str = "snapshot",
          nbytes: Optional[int] = None) -> Optional[Parsed]:
    """The snapshot's KEY, checked: (spans [(phase code, t0, t1)], grads [(device, addr, t)],
    named {device: {addr: kind}}, dropped). Wrong types or values raise SnapshotError naming the
    field; a version other than 1 returns None (a newer tensorgc wrote it: ignored, with a
    warning). nbytes: the file's size, which bounds the rows a file can honestly hold."""
    def bad(msg: str) -> SnapshotError:
        return SnapshotError(f"{where}: {KEY}: {msg}")

    if not isinstance(value, dict):
        raise bad(f"must be a dict, not {type(value).__name__}")
    version = value.get("version")
    if not _int(version):
        raise bad("'version' must be an int")
    if version != VERSION:
        logger.warning("tensorgc: %s: %s version %d is not %d: ignored", where, KEY, version,
                       VERSION)
        return None
    spans, grads = value.get("spans", []), value.get("grads", [])
    named, dropped = value.get("named", {}), value.get("dropped", {})
    for name, v, kind in (("spans", spans, list), ("grads", grads, list), ("named", named, dict),
                          ("dropped", dropped, dict)):
        if not isinstance(v, kind):
            raise bad(f"'{name}' must be a {kind.__name__}, not {type(v).__name__}")
    for dev in named:
        if not _int(dev, -1, 128) or not isinstance(named[dev], dict):
            raise bad(f"'named' must map device indices to dicts (key {_cut(dev)})")
    if nbytes is not None:
        # a list repeated through the pickle's memo costs a few bytes per repeat: refuse walks
        # longer than the file
        count = len(spans) + len(grads) + sum(len(b) for b in named.values())
        if count > nbytes:
            raise bad(f"{count:,} rows in {nbytes:,} bytes: the file repeats lists through the memo")
    out_spans = []
    codes = {p: i for i, p in enumerate(PHASES)}
    for i, s in enumerate(spans):
        if (not isinstance(s, (list, tuple)) or len(s) != 3 or s[0] not in codes
                or not _int(s[1]) or not _int(s[2]) or s[1] > s[2]):
            raise bad(f"span {i} must be [phase, t0, t1] with phase one of {', '.join(PHASES)} "
                      f"and int times t0 <= t1, not {_cut(s)}")
        out_spans.append((codes[s[0]], s[1], s[2]))
    out_grads = []
    for i, g in enumerate(grads):
        if (not isinstance(g, (list, tuple)) or len(g) != 3 or not _int(g[0], -1, 128)
                or not _int(g[1], 0, (1 << 64) - 1) or not _int(g[2])):
            raise bad(f"grad mark {i} must be [device, addr, t] of ints, not {_cut(g)}")
        out_grads.append((g[0], g[1], g[2]))
    out_named: Named = {}
    for dev, blocks in named.items():
        d = out_named[dev] = {}
        for addr, kind in blocks.items():
            if not _int(addr, 0, (1 << 64) - 1) or kind not in CATEGORIES:
                raise bad(f"named block {_cut(addr)} of device {dev}: an int address and one of "
                          f"{', '.join(CATEGORIES)}, not {_cut(kind)}")
            d[addr] = kind
    for k, v in dropped.items():
        if not _int(v, 0):
            raise bad(f"'dropped' counts must be ints >= 0 ({_cut(k)}: {_cut(v)})")
    _parse_names(value.get("names", {}), bad, nbytes)
    _parse_name_marks(value.get("name_marks", []), bad, nbytes)
    return out_spans, out_grads, out_named, dropped


def _parse_name_marks(marks: object, bad: Callable[[str], SnapshotError],
                      nbytes: Optional[int]) -> List[NameMark]:
    """KEY's "name_marks", checked: [(device, address, t_us, name)], each name cut to NAME_MAX."""
    if not isinstance(marks, list):
        raise bad(f"'name_marks' must be a list, not {type(marks).__name__}")
    if nbytes is not None and len(marks) > nbytes:
        raise bad(f"{len(marks):,} name marks in {nbytes:,} bytes: the file repeats lists "
                  "through the memo")
    out: List[NameMark] = []
    for i, m in enumerate(marks):
        if (not isinstance(m, (list, tuple)) or len(m) != 4 or not _int(m[0], -1, 128)
                or not _int(m[1], 0, (1 << 64) - 1) or not _int(m[2])
                or not isinstance(m[3], str)):
            raise bad(f"name mark {i} must be [device, addr, t, name] (ints and a str), "
                      f"not {_cut(m)}")
        out.append((m[0], m[1], m[2], m[3][:NAME_MAX]))
    return out


def _parse_names(names: object, bad: Callable[[str], SnapshotError],
                 nbytes: Optional[int]) -> Dict[int, Dict[int, str]]:
    """KEY's "names", checked: {device: {block address: name}}, each name cut to NAME_MAX."""
    if not isinstance(names, dict):
        raise bad(f"'names' must be a dict, not {type(names).__name__}")
    out: Dict[int, Dict[int, str]] = {}
    for dev, blocks in names.items():
        if not _int(dev, -1, 128) or not isinstance(blocks, dict):
            raise bad(f"'names' must map device indices to dicts (key {_cut(dev)})")
    count = sum(len(b) for b in names.values())
    if nbytes is not None and count > nbytes:
        raise bad(f"{count:,} names in {nbytes:,} bytes: the file repeats dicts through the memo")
    for dev, blocks in names.items():
        d = out[dev] = {}
        for addr, name in blocks.items():
            if not _int(addr, 0, (1 << 64) - 1) or not isinstance(name, str):
                raise bad(f"name of block {_cut(addr)} of device {dev}: an int address and a "
                          f"str, not {_cut(name)}")
            d[addr] = name[:NAME_MAX]
    return out


def name_marks_of(snap: object, device: int) -> List[Tuple[int, int, str]]:
    """[(block address, t_us, tensor name)] of one device from the snapshot's KEY: names given
    while the run went (a grad named at each step, an optimizer state when it was made); [] for
    none or a malformed KEY (load_snapshot's to refuse)."""
    value = snap.get(KEY) if isinstance(snap, dict) else None
    if not isinstance(value, dict) or value.get("version") != VERSION:
        return []
    try:
        marks = _parse_name_marks(value.get("name_marks", []), SnapshotError, None)
    except SnapshotError:
        return []
    return [(a, t, n) for d, a, t, n in marks if d == device]


def names_of(snap: object, device: int) -> Dict[int, str]:
    """{block address: tensor name} of one device from the snapshot's KEY ({} without any; a
    malformed KEY is load_snapshot's to refuse, and gives {} here)."""
    value = snap.get(KEY) if isinstance(snap, dict) else None
    if not isinstance(value, dict) or value.get("version") != VERSION:
        return {}
    try:
        return _parse_names(value.get("names", {}), SnapshotError, None).get(device, {})
    except SnapshotError:
        return {}


OPTIMIZER_ANNOTATION = "Optimizer.step#"  # torch's record_function name of every step


def annotation_spans(snap: object) -> List[Span]:
    """Optimizer-step spans [(2, t0, t1)] from torch's external_annotations (START/END pairs by
    name and device, recorded with no setup). Malformed entries are skipped: the list is torch's,
    and only well-formed ones can mean anything. A START without its END is still open at the
    snapshot (an OOM inside the step): it stays open, to OPEN."""
    notes = snap.get("external_annotations") if isinstance(snap, dict) else None
    if not isinstance(notes, list):
        return []
    ok = [a for a in notes if isinstance(a, dict) and isinstance(a.get("name"), str)
          and a["name"].startswith(OPTIMIZER_ANNOTATION) and a.get("stage") in ("START", "END")
          and _int(a.get("time_us"))]
    ok.sort(key=lambda a: a["time_us"])
    open_: Dict[Tuple[Any, Any], List[int]] = {}
    spans: List[Span] = []
    for a in ok:
        key = (a["name"], a.get("device"))
        key = key if all(isinstance(k, (str, int)) for k in key) else (a["name"], None)
        if a["stage"] == "START":
            open_.setdefault(key, []).append(a["time_us"])
        elif open_.get(key):
            spans.append((2, open_[key].pop(), a["time_us"]))
    for starts in open_.values():
        spans += [(2, t0, OPEN) for t0 in starts]
    return spans


# An allocation's label (the replay's, and the page's "cats"): its category in the low 4 bits,
# the rule that gave it in the high 4 (timeline.h); rules 8-15 are inferred from the stacks, so
# bit 7 says "inferred". Rule 0: not classified.
LABEL_INFERRED = 0x80
# why the replay gave an allocation its category (timeline.h's rules)
RULES = {0: "not classified", 1: "named by the reporter at the snapshot",
         2: "a grad landed in it", 3: "allocated in an optimizer step",
         4: "allocated in a forward", 5: "allocated in a backward",
         6: "allocated outside forward, backward and steps",
         8: "inferred from the stack: made by Module.to, a module's constructor or torch.nn.init",
         9: "inferred from the stack: AccumulateGrad made it or zero_grad freed it",
         10: "inferred from the stacks: allocated in an optimizer step",
         11: "inferred from the stacks: allocated in a forward",
         12: "inferred from the stacks: allocated in a backward",
         13: "inferred from the stack: made by the training loop between the phases",
         14: "inferred from the stack: a library's workspace (cuBLAS, cuBLASLt, cuDNN)",
         15: "inferred from the stack: made before the trace, freed by a backward"}
_SPAN_RULES = (3, 4, 5, 10, 11, 12)
MAX_NAMES = 50_000  # distinct tensor names one replay carries (more: unnamed)
HINT_PHASES = ("unknown", "frameless", "outside", "forward", "backward", "optimizer")  # infer.h
HINT_KINDS = ("plain", "parameter", "buffer", "grad", "workspace", "ungrad", "recompute")


def describe_label(label: int) -> str:
    """'activation (inferred from the stacks: allocated in a forward, alive after it)': what an
    allocation's label (the replay's ``labels``, the page's ``cats``) says."""
    cat, rule = label & 15, label >> 4
    name = CATEGORIES[cat] if cat < len(CATEGORIES) else "?"
    why = RULES.get(rule, f"rule {rule}")
    if rule in _SPAN_RULES:
        why += (", freed inside it" if name == "temporary" else
                ", alive after the backward that followed, until the next result"
                if name == "output" else
                " by a checkpoint's recompute, used after it" if name == "activation"
                and rule == 12 else
                ", alive after it" if name != "other" else
                ", kept past the next forward and a step" if rule == 11 else
                ", alive after it but not freed by zero_grad" if rule == 12 else ", alive after it")
    elif rule == 13:
        why += ", alive into the next forward" if name == "input" else ", freed before the next"
    return f"{name.replace('_', ' ')} ({why})"


class Inputs(NamedTuple):
    """What the replay classifies with, for one device (see inputs())."""
    classify: Optional[Tuple[Any, ...]]  # _tensorgc._timeline's classify argument, or None
    marks: bool        # recorded phase or grad marks take part
    infer: bool        # the stacks' hints take part
    names: List[str]   # names[i]: the tensor name of name index i; names[0] == "" (none)
    recorded: Dict[str, int]  # counts of the recorded inputs, by kind


def stack_hints(stacks: List[Any]) -> bytes:
    """One hint per stack (a list of frames lists; include/tensorgc/infer.h): the phase it ran
    in (HINT_PHASES, the low 3 bits), what it says of its block (HINT_KINDS, bits 3-5) and, in
    bit 6, whether a checkpoint's recompute ran it."""
    return _tensorgc._stack_hints(stacks if isinstance(stacks, list) else list(stacks))


def _telling(hints: Optional[bytes]) -> bool:
    """Whether any hint can classify: a phase (forward, backward, optimizer) or a kind."""
    if not hints:
        return False
    told = hints.translate(bytes(0 if (h & 7) < 3 and not (h >> 3) else 1 for h in range(256)))
    return told.count(1) > 0


def inputs(snap: Snapshot, device: int, categories: Optional[Mapping[int, str]] = None,
           cols: Optional[Sequence[Any]] = None, pre_frames: Optional[Sequence[Any]] = None,
           names: Optional[Mapping[int, str]] = None) -> Inputs:
    """The replay's inputs for one device. Recorded: the snapshot's KEY (validated here too: a
    dict handed over without load_snapshot), torch's optimizer annotations, ``categories``
    ({addr: kind} of the blocks alive at the end, a MemReporter's; it wins over the file's).
    Inferred: the hints of the trace's stacks (``cols``: its columns, timeline.trace_columns)
    and of the blocks alive at the end (``pre_frames``: their frames lists, in the order of the
    replay's ``pre``), used where the recorded ones say nothing. Names: the KEY's name marks and
    names, and ``names`` ({addr: name} of blocks alive at the end; wins over the file's)."""
    parsed = parse(snap[KEY]) if isinstance(snap, dict) and KEY in snap else None
    spans, grads, named = [], [], {}
    if parsed is not None:
        spans = list(parsed[0])
        grads = [(a, t) for d, a, t in parsed[1] if d == device]
        named = dict(parsed[2].get(device, {}))
    annotations = annotation_spans(snap)
    recorded = {"spans": len(spans), "annotation_spans": len(annotations), "grads": len(grads)}
    spans += annotations
    if categories:
        named.update((a, k) for a, k in categories.items() if isinstance(a, int))
    traces = (snap.get("device_traces") or []) if isinstance(snap, dict) else []
    trace = traces[device] if isinstance(traces, list) and 0 <= device < len(traces) else []
    if not (trace and all(isinstance(e, dict) and _int(e.get("time_us"))
                          for e in (trace[0], trace[-1]))):
        spans, grads = [], []  # a trace without times (old torch): no time can be matched
    codes = {c: i for i, c in enumerate(CATEGORIES)}
    named_rows = [(a, codes[ALIASES.get(k, k)]) for a, k in named.items()
                  if ALIASES.get(k, k) in codes and ALIASES.get(k, k) != "other"
                  and _int(a, 0, (1 << 64) - 1)]
    recorded["named"] = len(named_rows)
    # the stacks: a trace whose times the columns found bad is replayed without them
    hints = pre_hints = None
    if cols is not None and len(cols) > 5 and not (len(cols) > 7 and cols[6] >= 0):
        hints = stack_hints(cols[5])
        if pre_frames:
            # a block's frames are empty when it predates the recording: that says nothing
            told = stack_hints([f if isinstance(f, list) else [] for f in pre_frames])
            pre_hints = bytes(h if isinstance(f, list) and f else 0
                              for h, f in zip(told, pre_frames))
        if not (_telling(hints) or _telling(pre_hints)):
            hints = pre_hints = None
    infer = hints is not None
    # names: while the run went, then those of the blocks alive at the end
    table: List[str] = [""]
    ids: Dict[str, int] = {"": 0}

    def nid(name: str) -> int:
        i = ids.get(name)
        if i is None:
            if len(table) > MAX_NAMES:
                return 0
            i = ids[name] = len(table)
            table.append(name)
        return i

    name_rows: List[Tuple[int, Optional[int], int]] = [
        (a, t, nid(n)) for a, t, n in name_marks_of(snap, device)]
    recorded["name_marks"] = len(name_rows)
    end = dict(names_of(snap, device))
    end.update((a, n[:NAME_MAX]) for a, n in (names or {}).items()
               if _int(a, 0, (1 << 64) - 1) and isinstance(n, str))
    recorded["names"] = len(end)
    name_rows += [(a, None, nid(n)) for a, n in end.items()]
    marks = bool(spans or grads)
    if not (marks or named_rows or infer):
        return Inputs(None, False, False, table, recorded)
    classify = (spans, grads, named_rows, hints, pre_hints, name_rows)
    return Inputs(classify, marks, infer, table, recorded)


def replay_inputs(snap: Snapshot, device: int,
                  categories: Optional[Mapping[int, str]] = None
                  ) -> Tuple[Optional[ReplayInputs], bool]:
    """The recorded part of the C replay's classify argument for one device, or None when
    nothing recorded classifies: (spans, grads, named) from the snapshot's KEY, torch's
    optimizer annotations and ``categories`` (see inputs(), which adds the stacks' hints and
    the names). Also says whether there were marks (spans or grads) at all."""
    got = inputs(snap, device, categories)
    if got.classify is None:
        return None, False
    spans, grads, named = got.classify[:3]
    return (spans, grads, named), got.marks
