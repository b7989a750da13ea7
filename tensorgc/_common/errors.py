"""The exceptions that several of tensorgc's modules raise, in a module that imports nothing of
tensorgc: snapshot.py (reading files) and categories.py (checking the categories a file holds)
both raise SnapshotError, and data flows one way, snapshot -> categories -> here."""
from __future__ import annotations

__all__ = ["SnapshotError", "DeviceError", "OutputError"]


class SnapshotError(ValueError):
    """A snapshot file that cannot be read: truncated, corrupt, oversized, hostile or not a
    snapshot. The message says which, and where."""


class DeviceError(ValueError):
    """A device that is not valid where it was given (a malformed one, a CPU where only CUDA
    devices mean something, or one that a snapshot does not hold). The message names the
    argument (or the command line option) and, for a snapshot, the devices it does hold."""


class OutputError(ValueError):
    """An output path that tensorgc will not write to, found before anything was written: only a
    regular file (new, or one it may overwrite) is ever replaced, never a device, a FIFO, a
    socket, a directory or the input being read. The message names the path and says why."""
