"""The OOM autopsy: when CUDA runs out of memory, write down why, without having planned for it.

``tensorgc.on_oom(directory)`` attaches an observer to PyTorch's caching allocator (it runs
after the allocator gave up and released its lock, before OutOfMemoryError is raised). Each OOM
writes, into a new private subdirectory ``oom-<time>-<pid>-cuda<N>/``
(``oom-<time>-rank<R>-<pid>-cuda<N>/`` in a distributed job) of the directory given, else the
output directory (set_output_dir, $TENSORGC_OUTPUT_DIR), else the temporary directory:

* ``snapshot.pickle``: the allocator's state and history (protocol 4; memory_viz reads it too);
* ``timeline.html`` and ``segments.html``: the Active Memory Timeline and the segment map just
  before the OOM (when history recording was on: ``tensorgc.record_memory_history()``); under
  ``tensorgc.categorize`` the timeline is coloured by category over time and README.txt gives
  the peak's breakdown;
* ``memreport.txt``: the MemReporter's verbose table for the device;
* ``gc.txt`` (and ``cycles-<i>.html``): whether a garbage collection right now frees device
  memory, and the cycle reports of the tensors it frees;
* ``ranks.txt`` (in a distributed job): which rank this is, its own summary and the latest
  summaries the other ranks published to the job's store (distributed/ranks.py: an OOM happens
  on one rank, so no collective can ask them; the store is read without waiting for a missing key,
  for at most ``peers_wait`` seconds in all).

and logs a WARNING on logger "tensorgc" with the directory and the one-line verdict. The observer
never raises (a failure is logged), and an OOM inside the autopsy does not start another.

Each file is written whole or not at all (snapshot.atomic_write). A file that cannot be written
(a full disk, a read-only file system, no permission) is left out and the others are still
written; README.txt and the WARNING say which files are missing and why. When the autopsy's
directory cannot be created, the observer logs one WARNING that says so, without a traceback.
"""
from __future__ import annotations

import gc
import logging
import os
import threading
import time
import traceback
import weakref
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple, Union

from .._common.devices import DeviceLike, parse_device, require_cuda

if TYPE_CHECKING:
    import torch

    from .._tensorgc import CycleReport
    from ..reporter import Report

StrPath = Union[str, "os.PathLike[str]"]
Missing = List[Tuple[str, str]]  # (file name, why it was not written)

__all__ = ["on_oom", "write_autopsy"]

logger = logging.getLogger("tensorgc")

# One autopsy at a time in the process: an OOM inside one (the observer of another on_oom, or
# another thread) is skipped, never waited for (a thread waiting here would hold up its OOM).
_AUTOPSY = threading.Lock()


def write_autopsy(directory: Optional[StrPath] = None, device: DeviceLike = "cuda:0", *,
                  model: Optional[torch.nn.Module] = None,
                  optimizer: Optional[torch.optim.Optimizer] = None,
                  reason: Optional[str] = None, peers_wait: float = 2.0) -> Tuple[str, str]:
    """Write the autopsy files for ``device`` into a new subdirectory of ``directory`` (None: the
    output directory, set_output_dir or $TENSORGC_OUTPUT_DIR, else the temporary directory) and
    return (path, verdict). Usable by hand too (``device="cpu"`` writes the report and the gc
    check). In a distributed job the files say which rank wrote them, and ranks.txt holds the
    other ranks' published summaries, read from the job's store for at most ``peers_wait``
    seconds.

    A file that cannot be written is left out (no partial file): README.txt notes it, and one
    WARNING on logger "tensorgc" lists the missing files and why. A directory that cannot be
    created raises the OSError (naming it)."""
    _check_wait(peers_wait)
    if parse_device(device, "device")[0] == "cuda":
        require_cuda(f"write_autopsy(device={device!r})", "give device='cpu' for the report and "
                     "the gc check of the CPU's tensors")
    missing: Missing = []
    path, verdict = _write_autopsy(_where(directory), device, model, optimizer, reason,
                                   missing, peers_wait)
    if missing:
        logger.warning("tensorgc: the OOM autopsy in %s is missing %s", path, _listed(missing))
    return path, verdict


def _where(directory: Optional[StrPath]) -> str:
    """The directory an autopsy goes under: the one given, else the output directory (made when
    missing), else the temporary directory."""
    if directory is not None:
        return os.fspath(directory)
    import tempfile

    from .._common.output import output_dir
    return output_dir(tempfile.gettempdir())


def _check_wait(peers_wait: object) -> float:
    if isinstance(peers_wait, bool) or not isinstance(peers_wait, (int, float)) \
            or not 0 <= peers_wait <= 60:
        raise ValueError(f"peers_wait must be a number of seconds from 0 to 60, not "
                         f"{peers_wait!r}")
    return float(peers_wait)


def _listed(missing: Missing) -> str:
    return ", ".join(f"{name} ({why})" for name, why in missing)


def _rank_words() -> str:
    """' on rank 3 of 8' inside a distributed job, '' outside."""
    from .._common.rank import rank_info

    try:
        info = rank_info()
    except Exception:  # noqa: BLE001
        return ""
    return "" if info is None else f" on rank {info.rank} of {info.world_size}"


def _write_autopsy(directory: str, device: DeviceLike, model: Optional[torch.nn.Module],
                   optimizer: Optional[torch.optim.Optimizer], reason: Optional[str],
                   missing: Missing, peers_wait: float = 2.0) -> Tuple[str, str]:
    """write_autopsy's work; appends (file name, why) to ``missing`` for each file it could not
    write. Raises an OSError only where the autopsy's directory cannot be created."""
    import torch

    from .._tensorgc import observe_cycles
    from .._common.units import readable_size as R
    from ..reporter import MemReporter
    from .snapshot import atomic_write, dump_snapshot, write_failure

    kind, index = parse_device(device, "device")
    is_cuda = kind == "cuda"
    dev = torch.device(kind, index) if index is not None else torch.device(kind)
    index = dev.index if dev.index is not None else (torch.cuda.current_device() if is_cuda else 0)
    if is_cuda:
        dev = torch.device("cuda", index)
    os.makedirs(directory, 0o700, exist_ok=True)  # a new one private too (mode: the last part)
    from .._common.output import ranked

    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(directory, f"{ranked(f'oom-{stamp}-')}{os.getpid()}-{dev.type}{index}")
    n = 0
    while True:
        try:
            os.mkdir(path + (f"-{n}" if n else ""), 0o700)
            path += f"-{n}" if n else ""
            break
        except FileExistsError:
            n += 1
    on_rank = _rank_words()
    notes = [f"tensorgc OOM autopsy for {dev}{on_rank}" + (f": {reason}" if reason else "")]

    def lost(name: str, exc: BaseException) -> None:
        why = write_failure(exc)
        missing.append((name, why))
        notes.append(f"{name} not written: {why}")

    def put(name: str, text: str) -> None:
        try:
            atomic_write(os.path.join(path, name), lambda f: f.write(text))
        except Exception as exc:  # noqa: BLE001 -- a full disk loses this file, not the others
            lost(name, exc)

    def step(what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 -- one missing file must not lose the others
            notes.append(f"{what} failed:\n{traceback.format_exc(limit=4)}")

    kinds: Dict[int, str] = {}
    names: Dict[int, str] = {}
    reports: List[Report] = []

    def report() -> None:
        # no warning of its own: the autopsy's notes say what failed
        rep = MemReporter(model, optimizer=optimizer)._collect(str(dev), False, True)
        reports.append(rep)
        kinds.update(rep.block_kinds.get(str(dev), {}))
        names.update(rep.block_names.get(str(dev), {}))
        head = f"MemReporter of {dev}{on_rank}\n" if on_rank else ""
        put("memreport.txt", head + rep.format(verbose=True) + "\n")
    step("the MemReporter table", report)

    if on_rank:
        def other_ranks() -> None:
            text, line = _ranks_text(reports[0] if reports else None, str(dev), peers_wait)
            notes.append(line)
            put("ranks.txt", text)
        step("the other ranks' summaries", other_ranks)

    if is_cuda:
        def snap_files() -> None:
            from .._common.devices import snapshot_devices
            from .segmap import segments_html
            from .snapshot import snapshot
            from .timeline import categories_at_peak, timeline_html

            # the marks of tensorgc.categorize, if one is active, and the reporter's names
            # taken above travel in the file, so its timeline is coloured by category anywhere
            snap = snapshot(named={index: kinds}, names={index: names})
            try:
                dump_snapshot(os.path.join(path, "snapshot.pickle"), snap)
            except OSError as exc:
                lost("snapshot.pickle", exc)
            traces = snap.get("device_traces") or []
            if index < len(traces) and traces[index]:
                put("timeline.html", timeline_html(snap, device=index, categories=kinds,
                                                   names=names))
                line = categories_at_peak(snap, index)
                if line:
                    notes.append(f"categories {line}")
                has_oom = any(e.get("action") == "oom" for e in traces[index])
                put("segments.html", segments_html(snap, device=index,
                                                   oom=-1 if has_oom else None))
            else:
                if index in snapshot_devices(snap):
                    put("segments.html", segments_html(snap, device=index))
                else:
                    notes.append(f"the allocator's snapshot holds nothing of {dev} (no segment, "
                                 "no trace entry): no segments.html")
                notes.append("no allocation history: call tensorgc.record_memory_history() "
                             "early in the run to get the timeline and stacks")
        step("the snapshot", snap_files)

    verdict = ["no verdict"]

    def gc_check() -> None:
        reports: List[CycleReport] = []
        before = torch.cuda.memory_allocated(index) if is_cuda else 0
        with observe_cycles(reports.append, device=str(dev)):
            found = gc.collect()
        after = torch.cuda.memory_allocated(index) if is_cuda else 0
        held = sum(r.nbytes for r in reports)
        lines = [f"gc.collect() found {found} unreachable objects"]
        if is_cuda:
            lines.append(f"memory_allocated on {dev}: {R(before)} -> {R(after)} "
                         f"({R(before - after)} freed)")
        for i, r in enumerate(reports):
            try:
                page = r.html
            except Exception as exc:  # noqa: BLE001 -- (MemoryError) the text is in gc.txt
                lost(f"cycles-{i}.html", exc)
            else:
                put(f"cycles-{i}.html", page)
            lines.append(r.text)
        if held:
            verdict[0] = (f"reference cycles held {R(held)} of tensors on {dev}: a gc.collect() "
                          "freed them (see cycles-*.html)")
        elif is_cuda and before > after:
            verdict[0] = f"a gc.collect() freed {R(before - after)} on {dev}"
        else:
            verdict[0] = "a garbage collection would not free device memory"
        lines.insert(0, verdict[0])
        put("gc.txt", "\n".join(lines) + "\n")
    step("the gc check", gc_check)
    put("README.txt", "\n\n".join(notes) + "\n")  # when it fails, only the log has the notes
    return path, verdict[0]


def _ranks_text(rep: Optional[Report], device: str, wait: float) -> Tuple[str, str]:
    """ranks.txt (which rank this is, its summary, the other ranks' latest published ones) and
    README.txt's line about it. Reads the job's store for at most ``wait`` seconds."""
    import socket

    from .._common.rank import rank_info
    from ..distributed._summaries import GatheredReport, peer_summaries, summary_of

    info = rank_info()
    assert info is not None
    own = summary_of(rep, device) if rep is not None else {
        "rank": info.rank, "device": device, "error": "the MemReporter table failed"}
    own["age"] = 0.0
    peers, absent, note = peer_summaries(wait=wait)
    table = GatheredReport(sorted([own] + peers, key=lambda r: r["rank"]),
                           missing=absent).format()
    text = (f"This autopsy is rank {info.rank}'s (of {info.world_size}; local rank "
            f"{info.local_rank}; host {socket.gethostname()[:64]}, pid {os.getpid()}; rank from "
            f"{info.source}).\n"
            "An OOM happens on one rank, so the other ranks cannot be asked through a collective: "
            "their latest summaries were read from the job's store, where each rank that calls "
            "tensorgc.gather_report or tensorgc.publish_reports keeps one (age: seconds since "
            "it was made, by this host's clock).\n"
            f"{note}.\n\n{table}\n")
    line = (f"ranks.txt: this is rank {info.rank} of {info.world_size}; {len(peers)} other "
            f"rank(s) had published a summary")
    return text, line


class _Observer:
    """The callable torch keeps. Inactive after remove(); never raises."""

    def __init__(self, directory: Optional[str],
                 model: Optional[weakref.ref[torch.nn.Module]],
                 optimizer: Optional[weakref.ref[torch.optim.Optimizer]],
                 peers_wait: float = 2.0) -> None:
        self.directory = directory  # None: the output directory at each OOM
        self.peers_wait = peers_wait
        self.model = model
        self.optimizer = optimizer
        self.active = True
        self.busy = False  # an OOM inside the autopsy must not start another
        self.count = 0

    def __call__(self, device: int, alloc: int, device_allocated: int,
                 device_free: int) -> None:
        if not self.active or self.busy or not _AUTOPSY.acquire(blocking=False):
            return
        self.busy = True
        try:
            from .._common.units import readable_size as R

            reason = (f"asked for {R(alloc)} with {R(device_allocated)} allocated and "
                      f"{R(device_free)} free on the device")
            model = self.model() if self.model is not None else None
            opt = self.optimizer() if self.optimizer is not None else None
            missing: Missing = []
            try:
                path, verdict = _write_autopsy(_where(self.directory), f"cuda:{device}", model,
                                               opt, reason, missing, self.peers_wait)
            except OSError as exc:  # its directory: each file's failure is in `missing`
                logger.warning("tensorgc: CUDA out of memory on cuda:%s%s (%s); no autopsy "
                               "written, its directory could not be created: %s",
                               device, _rank_words(), reason, exc)
                return
            self.count += 1
            logger.warning("tensorgc: CUDA out of memory on cuda:%s%s (%s); autopsy in %s%s: %s",
                           device, _rank_words(), reason, path,
                           f" (not written: {_listed(missing)})" if missing else "", verdict)
        except BaseException:  # noqa: BLE001 -- raising into the allocator is not an option
            try:  # a logging filter or handler may raise too
                logger.exception("tensorgc: the OOM autopsy failed")
            except BaseException:  # noqa: BLE001
                pass
        finally:
            self.busy = False
            _AUTOPSY.release()

    def remove(self) -> None:
        self.active = False


def _autopsy_dir(directory: StrPath) -> str:
    """``directory`` as an absolute path, made (with its parents) when missing, as every writer
    of tensorgc makes its file's place; an OSError of one line where it cannot be."""
    where = os.path.abspath(os.fspath(directory))
    shown = repr(where if len(where) <= 300 else where[:300] + "...")  # escaped, one line
    if os.path.isdir(where):
        return where
    if os.path.lexists(where):
        raise NotADirectoryError(f"tensorgc: on_oom: {shown} exists and is not a "
                                 "directory")
    try:
        os.makedirs(where, 0o700, exist_ok=True)  # private, as write_autopsy makes one
    except OSError as exc:
        raise type(exc)(exc.errno, f"tensorgc: on_oom cannot make the directory "
                        f"{shown}: {exc.strerror or exc}") from None
    return where


def on_oom(directory: Optional[StrPath] = None, *, model: Optional[torch.nn.Module] = None,
           optimizer: Optional[torch.optim.Optimizer] = None,
           peers_wait: float = 2.0) -> Callable[[], None]:
    """Write an autopsy (see the module doc) into ``directory`` at every CUDA out-of-memory error
    from now on; without one, into the output directory as it is at that error (set_output_dir,
    $TENSORGC_OUTPUT_DIR), else the temporary directory. Returns a function that turns it off.
    ``model`` and ``optimizer`` (weakly held) name the tensors in the MemReporter table.
    ``peers_wait``: the most seconds an autopsy in a distributed job waits for the job's store
    (ranks.txt)."""
    import torch

    require_cuda("on_oom", "it watches the CUDA caching allocator's out-of-memory errors; "
                 "write_autopsy(directory, 'cpu') writes the report and the gc check by hand")
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        raise RuntimeError("tensorgc: on_oom needs a torch with "
                           "torch._C._cuda_attach_out_of_memory_observer (PyTorch 2.0 or later)")
    where = None if directory is None else _autopsy_dir(directory)
    obs = _Observer(where,
                    weakref.ref(model) if model is not None else None,
                    weakref.ref(optimizer) if optimizer is not None else None,
                    _check_wait(peers_wait))
    attach(obs)
    return obs.remove
