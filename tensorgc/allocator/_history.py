"""The CUDA allocator's history that observe_tensor_cycles and warn_tensor_cycles start, as
torch's observe_tensor_cycles does, so that the CUDA tensors on their pages say where they were
allocated (cycles/report_tensors.c reads the stacks from torch.cuda.memory._snapshot()).

Started only where it is useful and nobody records yet: the observer may see CUDA tensors (its
device is CUDA, "any" or a predicate), CUDA is available, and torch says no history is being
recorded (torch._C._cuda_isHistoryEnabled). Then with the cheapest settings that give a live
tensor its stack: ``enabled="state"`` (no trace of events, the stacks of what is allocated now),
``context="state"``, ``stacks="python"`` (torch's starts ``"all"`` with C++ frames and a
100,000-entry trace). It is stopped when the last handle that relies on it is removed, unless
the program took it over meanwhile (record_memory_history, tensorgc's, started or stopped it).

Every torch call goes through ``_torch`` (a _Torch), which the tests replace with a fake: the
decisions are tested on machines without CUDA.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Set

from .. import _tensorgc

if TYPE_CHECKING:
    from .._tensorgc import Handle

__all__ = ["start_for", "took_over", "SETTINGS", "started_by_tensorgc"]

# What tensorgc starts (record_memory_history's keywords).
SETTINGS: Dict[str, Any] = {"enabled": "state", "context": "state", "stacks": "python"}

_log = logging.getLogger("tensorgc")


class _Torch:
    """The three questions and two actions the decision needs, asked of torch."""

    def cuda_available(self) -> bool:
        from .._common.devices import cuda_available
        return cuda_available()

    def recording(self) -> Optional[bool]:
        """Whether the CUDA allocator records its history; None where torch cannot say. Before
        CUDA is initialized nothing records (and torch's question would read an allocator that
        does not exist yet: a segmentation fault in torch 2.11)."""
        import torch

        if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untyped in torch
            return False
        ask: Optional[Callable[[], object]] = getattr(torch._C, "_cuda_isHistoryEnabled", None)
        if ask is None:
            return None
        try:
            return bool(ask())
        except Exception:  # noqa: BLE001 -- a torch that cannot say is treated as recording
            return None

    def start(self) -> None:
        """Starts the history now, or, before CUDA is initialized, when it is (torch's queue of
        calls run at its lazy initialization: the allocator's devices exist only then)."""
        import torch

        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untyped in torch
            from ._recorder import record
            record(**SETTINGS)
            return
        lazy_call: Callable[[Callable[[], None]], None] = getattr(torch.cuda, "_lazy_call")
        lazy_call(_start_at_init)

    def stop(self) -> None:
        from ._recorder import record
        record(None)


_torch: _Torch = _Torch()

# The handles relying on the history tensorgc started (by id), and whether tensorgc still owns
# it. An RLock: a handle's removal (which releases) may come from inside a collection that a
# start's allocation triggered, in the same thread.
_lock = threading.RLock()
_users: Set[int] = set()
_owned = False


def _start_at_init() -> None:
    """Run by torch inside its CUDA initialization when start() came before it: starts the
    history if a handle still relies on it and the program has not started its own meanwhile.
    Never raises (torch would fail the program's CUDA initialization with it)."""
    global _owned
    try:
        with _lock:
            if not (_owned and _users):
                return
            if _torch.recording() is not False:
                _owned = False  # the program's own history: it stays the program's
                return
            from ._recorder import record
            record(**SETTINGS)
    except Exception as exc:  # noqa: BLE001 -- inside torch's CUDA initialization
        _log.warning("tensorgc: could not start the CUDA allocator's history at CUDA's "
                     "initialization: %s", exc)


def started_by_tensorgc() -> bool:
    """Whether the allocator history now running is one tensorgc started (and will stop)."""
    with _lock:
        return _owned


def _watches_cuda(device: object) -> bool:
    """Whether an observer with this device filter may see CUDA tensors."""
    if device is None or callable(device) or device == "any":
        return True
    if type(device).__name__ == "device":
        return getattr(device, "type", None) == "cuda"
    return isinstance(device, str) and (device == "cuda" or device.startswith("cuda:"))


def start_for(handle: Handle, device: object, record_history: bool) -> bool:
    """Starts the history for ``handle`` when it should (above), or counts ``handle`` as one
    more user of a history tensorgc started; arranges for the handle's removal to stop it when
    it is the last. Returns whether the handle relies on tensorgc's history. Never raises for
    torch's sake: a start that fails is logged, and the observer works without stacks."""
    global _owned
    if not record_history or not _watches_cuda(device) or not handle.active:
        return False
    with _lock:
        if not _owned:
            try:
                if not _torch.cuda_available() or _torch.recording() is not False:
                    return False  # no CUDA, or the program records already (or torch can't say)
                _torch.start()
            except Exception as exc:  # noqa: BLE001 -- the observer works without stacks
                _log.warning("tensorgc: could not start the CUDA allocator's history for the "
                             "cycle pages' allocation stacks: %s", exc)
                return False
            _owned = True
            _log.info("tensorgc: started the CUDA allocator's history (%s) so that cycle pages "
                      "show where CUDA tensors were allocated; record_history=False opts out",
                      ", ".join(f"{k}={v!r}" for k, v in SETTINGS.items()))
        key = id(handle)
        _users.add(key)
    _tensorgc._on_remove(handle, lambda: _release(key))
    return True


def _release(key: int) -> None:
    global _owned
    with _lock:
        _users.discard(key)
        if _users or not _owned:
            return
        _owned = False
        try:
            if _torch.recording() is not False:
                _torch.stop()
        except Exception as exc:  # noqa: BLE001 -- called from a handle's removal
            _log.warning("tensorgc: could not stop the CUDA allocator's history it had started: "
                         "%s", exc)


def took_over() -> None:
    """The program started or stopped the history itself (record_memory_history): from now on it
    is the program's, and removing the observers leaves it as it is."""
    global _owned
    with _lock:
        _owned = False
        _users.clear()
