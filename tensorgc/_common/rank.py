"""Which rank of a distributed job this process is: from torch.distributed where it is
initialised, else from the launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE as torchrun,
torch.multiprocessing launchers and SLURM wrappers set them). Never imports torch: a process
that has not imported torch.distributed has no process group to ask. RankFilter puts the rank
into every record of logger "tensorgc"."""
from __future__ import annotations

import logging
import os
import sys
from typing import NamedTuple, Optional

__all__ = ["RankInfo", "RankFilter", "current_rank", "install_filter", "rank_info",
           "rank_tag"]


class RankInfo(NamedTuple):
    rank: int
    local_rank: int
    world_size: int
    source: str  # "torch.distributed" or "environment"


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    if v is None or not v.strip().isdigit():  # absent, empty, negative or not a number: unset
        return None
    return int(v.strip())


def rank_info() -> Optional[RankInfo]:
    """This process's rank, or None outside a distributed job. torch.distributed's answer comes
    first (the group may have been made with explicit ranks and no environment); LOCAL_RANK
    falls back to the rank when the launcher did not set it."""
    dist = sys.modules.get("torch.distributed")
    local = _env_int("LOCAL_RANK")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            r, w = int(dist.get_rank()), int(dist.get_world_size())
            return RankInfo(r, r if local is None else local, w, "torch.distributed")
    except Exception:  # noqa: BLE001 -- a group torn down meanwhile: the environment decides
        pass
    env_rank, env_world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if env_rank is None and env_world is None and local is None:
        return None
    rank = env_rank if env_rank is not None else local if local is not None else 0
    return RankInfo(rank, rank if local is None else local, env_world if env_world else rank + 1,
                    "environment")


# The rank torch.distributed gave last (None before any group): a job launched without RANK in
# the environment (torch.multiprocessing.spawn) loses its rank with destroy_process_group(), yet
# what the process writes and logs afterwards (the summaries at exit) is still that rank's.
# One assignment of an int: no lock.
_group_rank: Optional[int] = None


def current_rank() -> Optional[int]:
    """The rank that names and log records carry: rank_info()'s; once the process group is gone
    and the environment names no rank, the rank the group had; None outside a job."""
    global _group_rank
    info = rank_info()
    if info is None:
        return _group_rank
    if info.source == "torch.distributed":
        _group_rank = info.rank
    return info.rank


def rank_tag() -> str:
    """"rank<N>" inside a distributed job, "" outside: the part of file names that says which
    rank wrote them (current_rank)."""
    rank = current_rank()
    return "" if rank is None else f"rank{rank}"


class RankFilter(logging.Filter):
    """On logger "tensorgc": gives every record ``record.rank`` (this process's rank, an int, or
    None outside a distributed job) and, inside a job, starts its message with ``[rank N] `` so
    that any handler's default format shows it (``%(rank)s`` in a format of your own). The rank
    is looked up for each record (current_rank: torch.distributed's state and the environment,
    a few microseconds), never cached, so a process group made after import is seen at the next
    record; after destroy_process_group the group's rank stays. Never raises and never drops a
    record; a record that passes twice is changed once."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            if getattr(record, _DONE, False):
                return True
            setattr(record, _DONE, True)
            rank = current_rank()
            record.rank = rank
            if rank is not None:
                msg = record.msg if isinstance(record.msg, str) else str(record.msg)
                record.msg = f"[rank {rank}] {msg}"  # getMessage() formats str(msg) % args alike
        except Exception:  # noqa: BLE001 -- a log record must never fail because of its rank
            pass
        return True


_DONE = "_tensorgc_rank_done"
_MARK = "_tensorgc_rank_filter"


def install_filter(logger: logging.Logger) -> logging.Filter:
    """Adds one RankFilter to ``logger`` (the package does, for "tensorgc", at import); a second
    call, or a reload of the package, finds the one there and adds none."""
    for f in logger.filters:
        if getattr(f, _MARK, False) and isinstance(f, logging.Filter):
            return f  # ours, perhaps from before a reload
    f = RankFilter()
    setattr(f, _MARK, True)
    logger.addFilter(f)
    return f
