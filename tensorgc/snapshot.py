"""Allocator snapshots: record, take, dump, and load them safely (issue #4, first part).

* ``record_memory_history(...)`` wraps ``torch.cuda.memory._record_memory_history`` across its
  old (boolean, ``trace_alloc_*``) and new (``enabled="all"``, ``context``, ``stacks``) forms.
* ``snapshot()`` is ``torch.cuda.memory._snapshot()``; ``dump_snapshot(path)`` writes it with
  pickle protocol 4 (so PyTorch's memory_viz reads it too), atomically, mode 0600.
* ``load_snapshot(path)`` never runs code from the file: a restricted unpickler accepts only
  plain containers and scalars (no globals, no reduce, no persistent ids, no extension codes),
  reads at most ``max_bytes`` (so a declared length cannot make it allocate more than the file
  holds), and checks the result has a snapshot's shape. Snapshot files are untrusted input.
"""
from __future__ import annotations

import inspect
import io
import os
import pickle
import sys
import tempfile

__all__ = ["record_memory_history", "snapshot", "dump_snapshot", "load_snapshot",
           "SnapshotError", "DEFAULT_MAX_BYTES"]

DEFAULT_MAX_BYTES = 8 << 30  # 8 GiB: larger files need max_bytes= explicitly


class SnapshotError(ValueError):
    """A snapshot file that cannot be read: truncated, corrupt, oversized, hostile or not a
    snapshot. The message says which, and where."""


def record_memory_history(enabled="all", context="all", stacks="python",
                          max_entries=sys.maxsize, device=None):
    """Start (``enabled="all"`` or ``"state"``) or stop (``enabled=None``) recording the CUDA
    caching allocator's history, with torch's current keyword names on any torch version."""
    import torch

    if enabled not in ("all", "state", None):
        raise ValueError(f"enabled must be 'all', 'state' or None, not {enabled!r}")
    if context not in ("all", "alloc", "state", None):
        raise ValueError(f"context must be 'all', 'alloc', 'state' or None, not {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', not {stacks!r}")
    mem = torch.cuda.memory
    impl = getattr(mem, "_record_memory_history_impl", None)
    params = inspect.signature(impl if impl is not None else mem._record_memory_history).parameters
    if "context" in params and "stacks" in params:
        return mem._record_memory_history(enabled, context=context, stacks=stacks,
                                          max_entries=max_entries, device=device)
    # torch < 2.1: the boolean form
    return mem._record_memory_history(
        enabled is not None,
        record_context=context is not None,
        trace_alloc_max_entries=max_entries if enabled == "all" else 1,
        trace_alloc_record_context=context in ("alloc", "all"),
        device=device,
        record_context_cpp=stacks == "all",
    )


def snapshot():
    """The allocator's state and history (torch's ``_snapshot()`` dict)."""
    import torch

    return torch.cuda.memory._snapshot()


def dump_snapshot(path, snap=None):
    """Write ``snap`` (default: a fresh ``snapshot()``) to ``path`` with pickle protocol 4,
    atomically (a private temp file in the same directory, then a rename), mode 0600."""
    if snap is None:
        snap = snapshot()
    path = os.fspath(path)
    atomic_write(path, lambda f: pickle.dump(snap, f, protocol=4), binary=True)
    return path


def atomic_write(path, write, binary=False):
    """Calls write(file) on a private temp file (mkstemp: 0600, unpredictable name) in path's
    directory, then renames it to path, so readers never see half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tensorgc-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class _PlainUnpickler(pickle.Unpickler):
    """Only what pickle builds without looking anything up: dicts, lists, tuples, sets, str,
    bytes, int, float, bool, None. Every opcode that would import or call something goes
    through find_class or persistent_load, and both refuse."""

    def find_class(self, module, name):
        raise SnapshotError(f"refusing to load {module}.{name}: snapshot files may only hold "
                            "plain containers and scalars (this one tries to import or call code)")

    def persistent_load(self, pid):
        raise SnapshotError("refusing a persistent id: snapshot files may only hold plain "
                            "containers and scalars")


def load_snapshot(path, *, max_bytes=DEFAULT_MAX_BYTES):
    """Read a snapshot file (torch's ``_dump_snapshot`` / ``dump_snapshot``, any protocol up to
    5) without running code from it. Raises SnapshotError with the reason."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if size > max_bytes:
        raise SnapshotError(f"{path}: {size:,} bytes is over the limit of {max_bytes:,} "
                            "(pass max_bytes= to allow it)")
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SnapshotError(f"{path}: grew past the limit of {max_bytes:,} bytes while reading")
    if not data:
        raise SnapshotError(f"{path}: empty file, not a snapshot")
    if data[:1] != b"\x80":
        raise SnapshotError(f"{path}: not a pickle (no protocol header; first byte "
                            f"{data[:1]!r})")
    buf = io.BytesIO(data)  # reads past the end return short: a lying length cannot allocate
    try:
        snap = _PlainUnpickler(buf).load()
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, KeyError, TypeError,
            AttributeError, OverflowError, MemoryError, RecursionError) as exc:
        kind = "truncated" if isinstance(exc, EOFError) or "truncated" in str(exc) else "corrupt"
        raise SnapshotError(f"{path}: {kind} pickle at byte {buf.tell():,} of {len(data):,}: "
                            f"{type(exc).__name__}: {exc}") from None
    if buf.tell() != len(data):
        raise SnapshotError(f"{path}: {len(data) - buf.tell():,} trailing bytes after the pickle")
    return check_snapshot(snap, path)


def check_snapshot(snap, where="snapshot"):
    """The shape of torch's snapshot: a dict with a list of segment dicts (each with a list of
    block dicts) and, optionally, a list of per-device trace lists. Returns snap."""
    if isinstance(snap, list):  # memory_snapshot() and very old dumps: the segments alone
        snap = {"segments": snap, "device_traces": []}
    if not isinstance(snap, dict):
        raise SnapshotError(f"{where}: a snapshot is a dict, not {type(snap).__name__}")
    segs = snap.get("segments")
    if not isinstance(segs, list):
        raise SnapshotError(f"{where}: 'segments' must be a list")
    for i, s in enumerate(segs):
        if not isinstance(s, dict) or not isinstance(s.get("blocks", []), list):
            raise SnapshotError(f"{where}: segment {i} is not a dict with a list of blocks")
    traces = snap.setdefault("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError(f"{where}: 'device_traces' must be a list of lists")
    for d, t in enumerate(traces):
        for j, e in enumerate(t):
            if not isinstance(e, dict):
                raise SnapshotError(f"{where}: trace entry {j} of device {d} is not a dict")
    return snap
