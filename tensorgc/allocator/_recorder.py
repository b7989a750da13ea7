"""torch.cuda.memory._record_memory_history across torch's two forms of it: the work of
tensorgc.record_memory_history (snapshot.py), and of the history observe_tensor_cycles starts and
stops (_history.py), which must not count as the program's own call."""
from __future__ import annotations

import inspect
import logging
import sys
from typing import Callable, Literal, Optional

from .._common.devices import DeviceLike, cuda_available, require_cuda

__all__ = ["check_history_args", "record"]


def check_history_args(enabled: object, context: object, stacks: object) -> None:
    if enabled not in ("all", "state", None):
        raise ValueError(f"enabled must be 'all', 'state' or None, not {enabled!r}")
    if context not in ("all", "alloc", "state", None):
        raise ValueError(f"context must be 'all', 'alloc', 'state' or None, not {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', not {stacks!r}")


def record(enabled: Optional[Literal["all", "state"]] = "all",
           context: Optional[Literal["all", "alloc", "state"]] = "all",
           stacks: Literal["python", "all"] = "python",
           max_entries: int = sys.maxsize,
           device: Optional[DeviceLike] = None) -> None:
    """record_memory_history's work (snapshot.py), without making the history the program's:
    _history.py starts and stops its own through this."""
    check_history_args(enabled, context, stacks)
    if not cuda_available():
        if enabled is None:
            logging.getLogger("tensorgc").debug("tensorgc: record_memory_history(enabled=None): "
                                                "no CUDA, nothing was recording")
            return None
        require_cuda("record_memory_history", "the history it records is the CUDA caching "
                     "allocator's")
    import torch

    mem = torch.cuda.memory
    torch_record: Callable[..., None] = mem._record_memory_history  # two forms: see below
    impl = getattr(mem, "_record_memory_history_impl", None)
    params = inspect.signature(impl if impl is not None else torch_record).parameters
    if "context" in params and "stacks" in params:
        return torch_record(enabled, context=context, stacks=stacks, max_entries=max_entries,
                            device=device)
    # torch < 2.1: the boolean form
    return torch_record(
        enabled is not None,
        record_context=context is not None,
        trace_alloc_max_entries=max_entries if enabled == "all" else 1,
        trace_alloc_record_context=context in ("alloc", "all"),
        device=device,
        record_context_cpp=stacks == "all",
    )
