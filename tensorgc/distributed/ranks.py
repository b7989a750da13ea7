"""Distributed jobs: every rank's memory in one table, and each rank's latest summary kept in
the job's store for the OOM autopsy of another rank. The machinery (the summary, the collective,
the store) is in _summaries.py beside it, which MemReporter's own options use too; this module
adds the MemReporter each call needs.

    tensorgc.gather_report(reporter=tensorgc.MemReporter(model, optimizer=opt))  # every rank
    tensorgc.publish_reports(every=60, model=model, optimizer=opt)               # each rank
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from .._common.devices import DeviceLike
from ._summaries import (KEY_PREFIX, MAX_SUMMARY_BYTES, TOP_DEFAULT, TOP_MAX, GatheredReport,
                         Publisher, _check_top, gather_summaries, peer_summaries, summary_now)
from ..reporter import MemReporter

if TYPE_CHECKING:
    import torch

__all__ = ["GatheredReport", "Publisher", "gather_report", "publish_reports", "peer_summaries",
           "KEY_PREFIX", "TOP_MAX", "MAX_SUMMARY_BYTES"]


def gather_report(device: Optional[DeviceLike] = None, *, group: Any = None, dst: int = 0,
                  all_ranks: bool = False, top: int = TOP_DEFAULT,
                  reporter: Optional[MemReporter] = None, owners: bool = False,
                  show: bool = True) -> Optional[GatheredReport]:
    """Every rank's memory in one table, on rank ``dst``. A collective: every rank of ``group``
    (default: the whole job) must call it, as with torch's collectives; a rank that does not
    leaves the others waiting for the group's timeout.

    Each rank summarises ``device`` (default: torch.cuda.current_device() where CUDA is, else
    the CPU) with ``reporter`` (default: a MemReporter without a model: every tensor found,
    unnamed), keeping its ``top`` largest tensors, and the summaries travel with
    torch.distributed.gather_object to ``dst`` (a global rank), or with all_gather_object to
    every rank when ``all_ranks``. Returns the GatheredReport on ``dst`` (every rank with
    ``all_ranks``) and None on the others; with ``show``, ``dst`` prints its table. Each rank
    also publishes its summary to the job's store (see publish_reports).

    NCCL: call torch.cuda.set_device(local_rank) first (torch's object collectives run on the
    current device). Outside a distributed job (torch.distributed not initialised) it reports
    this process as the only rank.

    Errors: ``group`` not a ProcessGroup (TypeError) or one this rank is not in (ValueError),
    ``dst`` not a rank of the group, ``top`` outside 0..TOP_MAX: raised before the collective.
    A ``device`` this rank does not have (DeviceError) is raised after it, so the other ranks
    still get their table, with this rank's row saying why it is missing."""
    top = _check_top(top)
    chosen = reporter if reporter is not None else MemReporter()
    return gather_summaries(lambda: summary_now(chosen, device, top, owners), group=group,
                            dst=dst, all_ranks=all_ranks, show=show)


def publish_reports(every: float = 60.0, *, model: Optional[torch.nn.Module] = None,
                    optimizer: Optional[torch.optim.Optimizer] = None,
                    device: Optional[DeviceLike] = None, top: int = TOP_DEFAULT) -> Publisher:
    """Publish this rank's memory summary to the job's store after optimizer steps, at most
    once every ``every`` seconds; see Publisher. ``model``/``optimizer`` name the tensors, as
    MemReporter's. Each publication costs one MemReporter walk (on the training thread, after
    the step) and one store write (in a daemon thread)."""
    return Publisher(MemReporter(model, optimizer=optimizer), every, device, top)
