"""Which rank of a distributed job this process is: from torch.distributed where it is
initialised, else from the launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE as torchrun,
torch.multiprocessing launchers and SLURM wrappers set them). Never imports torch: a process
that has not imported torch.distributed has no process group to ask."""
from __future__ import annotations

import os
import sys
from typing import NamedTuple, Optional

__all__ = ["RankInfo", "rank_info", "rank_tag"]


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
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None and world is None and local is None:
        return None
    if rank is None:
        rank = local if local is not None else 0
    return RankInfo(rank, rank if local is None else local, world if world else rank + 1,
                    "environment")


def rank_tag() -> str:
    """"rank<N>" inside a distributed job, "" outside: the part of file names that says which
    rank wrote them."""
    info = rank_info()
    return "" if info is None else f"rank{info.rank}"
