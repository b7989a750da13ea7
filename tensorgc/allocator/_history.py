"""The CUDA allocator's history that observe_tensor_cycles and warn_tensor_cycles start, as
torch's observe_tensor_cycles does, so that the CUDA tensors on their pages say where they were
allocated (cycles/report_tensors.c reads the stacks from torch.cuda.memory._snapshot()).

tensorgc is a guest in the program's process: a history the program records is never replaced,
narrowed or stopped. tensorgc's own is started only where it is useful and nobody records: the
observer may see CUDA tensors (its device is CUDA, "any" or a predicate), CUDA is available, and
torch says no history is being recorded (torch._C._cuda_isHistoryEnabled). Then with the
cheapest settings that give a live tensor its stack: ``enabled="state"`` (no trace of events,
the stacks of what is allocated now), ``context="state"``, ``stacks="python"``. It is stopped
when the last handle that relies on it is removed, unless the program has taken it over.

Who wins, in every order:

* The program recorded first (before or after CUDA's initialization): tensorgc starts nothing.
  Before the initialization torch cannot be asked (its question reads an allocator that does
  not exist yet), so tensorgc's start waits in torch's queue of calls run at the initialization,
  and there, the allocator now existing, asks again and yields.
* The program records after tensorgc started (or queued) its own: the program's call goes
  through unchanged and the history is the program's from then on; tensorgc never restarts,
  narrows or stops it. torch has no question that reads the current settings, so tensorgc
  notes the program's calls instead: once it owns a history it watches torch's switch
  (torch._C._cuda_record_memory_history and its legacy form), a pass-through that changes
  nothing the program asked. A program that stops the history (``enabled=None``) wins too.
* Removing tensorgc's last handle stops only a history tensorgc started and still owns.
* Once the program has set the history itself (torch's switch, or
  tensorgc.record_memory_history), tensorgc leaves the switch to it and starts none of its own
  again, even after the program stopped its own.

Every torch call goes through ``_torch`` (a _Torch), which the tests replace with a fake: the
decisions are tested on machines without CUDA.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Set

from .. import _tensorgc

if TYPE_CHECKING:
    from .._tensorgc import Handle

__all__ = ["start_for", "took_over", "SETTINGS", "started_by_tensorgc", "program_set_it"]

# What tensorgc starts (record_memory_history's keywords).
SETTINGS: Dict[str, Any] = {"enabled": "state", "context": "state", "stacks": "python"}

# torch's switches for the allocator's history: every form of
# torch.cuda.memory._record_memory_history ends in one of them.
_SWITCHES = ("_cuda_record_memory_history", "_cuda_record_memory_history_legacy")

_log = logging.getLogger("tensorgc")


class _Torch:
    """The questions and actions the decision needs, asked of torch."""

    def cuda_available(self) -> bool:
        from .._common.devices import cuda_available
        return cuda_available()

    def recording(self, allocator_ready: bool = False) -> Optional[bool]:
        """Whether the CUDA allocator records its history; None where torch cannot say. Before
        CUDA is initialized torch's question would read an allocator that does not exist yet (a
        segmentation fault in torch 2.11), so it is asked only once torch.cuda says it is
        initialized, or with ``allocator_ready`` from inside the initialization (torch's queued
        calls run after the allocator is made, before torch.cuda calls itself initialized)."""
        import torch

        if not allocator_ready and not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
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
            _switch(**SETTINGS)
            return
        lazy_call: Callable[[Callable[[], None]], None] = getattr(torch.cuda, "_lazy_call")
        lazy_call(_start_at_init)

    def stop(self) -> None:
        _switch(None)

    def watch(self) -> None:
        """Notes, from now on, every call of torch's switches that is not tensorgc's own."""
        import torch

        for name in _SWITCHES:
            current = getattr(torch._C, name, None)
            if current is None or getattr(current, "_tensorgc_watch", False):
                continue
            setattr(torch._C, name, _watching(current))


_torch: _Torch = _Torch()

# The handles relying on the history tensorgc started (by id), and whether tensorgc still owns
# it. An RLock: a handle's removal (which releases) may come from inside a collection that a
# start's allocation triggered, in the same thread; the program's switch, noted under it,
# waits for a start or stop of tensorgc's under way in another thread, so the program's
# settings are the last applied.
_lock = threading.RLock()
_users: Set[int] = set()
_owned = False
_program_set = False  # the program has called torch's switch itself (seen by tensorgc)
# Set while tensorgc itself calls torch's switch in this thread: that call is not the program's.
_tls = threading.local()


def _switch(enabled: Optional[str], **settings: Any) -> None:
    """tensorgc's own call of torch's switch (record_memory_history's work)."""
    from ._recorder import record

    _tls.ours = True
    try:
        record(enabled, **settings)  # type: ignore[arg-type]
    finally:
        _tls.ours = False


def _watching(switch: Callable[..., Any]) -> Callable[..., Any]:
    """torch's switch, unchanged, with the program's calls noted first: the history is then the
    program's, and tensorgc neither starts its own at CUDA's initialization nor stops this."""

    @functools.wraps(switch)
    def watched(*args: Any, **kwargs: Any) -> Any:
        if getattr(_tls, "ours", False):
            return switch(*args, **kwargs)
        with _lock:
            _yield_to_program()
            return switch(*args, **kwargs)

    watched._tensorgc_watch = True  # type: ignore[attr-defined]
    return watched


def _yield_to_program() -> None:
    global _owned, _program_set
    _program_set = True
    if _owned:
        _log.info("tensorgc: the program set the CUDA allocator's history itself; it is the "
                  "program's now, and tensorgc leaves it as the program set it")
    _owned = False
    _users.clear()


def _start_at_init() -> None:
    """Run by torch inside its CUDA initialization when start() came before it: starts the
    history if a handle still relies on it and nobody records: the allocator exists now, so
    torch can be asked, and a history the program asked for before the initialization (which
    torch applies then) is seen. Never raises (torch would fail the program's CUDA
    initialization with it)."""
    global _owned
    try:
        with _lock:
            if not (_owned and _users):
                return
            if _torch.recording(allocator_ready=True) is not False:
                _owned = False  # the program's own history: it stays the program's
                _users.clear()
                return
            _switch(**SETTINGS)
    except Exception as exc:  # noqa: BLE001 -- inside torch's CUDA initialization
        _log.warning("tensorgc: could not start the CUDA allocator's history at CUDA's "
                     "initialization: %s", exc)


def started_by_tensorgc() -> bool:
    """Whether the allocator history now running (or waiting for CUDA's initialization) is one
    tensorgc started and will stop."""
    with _lock:
        return _owned


def program_set_it() -> bool:
    """Whether the program has set the allocator's history itself (seen since tensorgc first
    started its own, or through tensorgc.record_memory_history): tensorgc then leaves the
    switch to the program and starts no history of its own again."""
    with _lock:
        return _program_set


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
    key = id(handle)
    with _lock:
        if not _owned:
            try:
                if _program_set or not _torch.cuda_available() or _torch.recording() is not False:
                    # the program set it, there is no CUDA, or the program records already (or
                    # torch can't say)
                    return False
                _torch.watch()  # before the start: a program's call from now on is seen
                # before the start: a start queued for CUDA's initialization, which may run at
                # once, checks both
                _owned = True
                _users.add(key)
                _torch.start()
            except Exception as exc:  # noqa: BLE001 -- the observer works without stacks
                _owned = False
                _users.discard(key)
                _log.warning("tensorgc: could not start the CUDA allocator's history for the "
                             "cycle pages' allocation stacks: %s", exc)
                return False
            _log.info("tensorgc: started the CUDA allocator's history (%s) so that cycle pages "
                      "show where CUDA tensors were allocated, unless the program records its "
                      "own; record_history=False opts out",
                      ", ".join(f"{k}={v!r}" for k, v in SETTINGS.items()))
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
    with _lock:
        _yield_to_program()
