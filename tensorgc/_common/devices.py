"""One parser of devices for the whole package: the Python API (MemReporter, Courtesy, the line
profiler's target_gpu, the timeline and segment pages) and every ``tensorgc`` subcommand's
``--device`` read the same syntax through it.

    0, "0"            CUDA device 0 (an index is a CUDA device, as in torch.device(0))
    "cuda"            CUDA, no index: all CUDA devices for a filter; for a snapshot, the first
                      device it holds
    "cuda:1"          CUDA device 1
    "cpu"             the CPU (where it means something: a filter, Courtesy)
    torch.device(...) the same, as torch says

Other torch device types ("mps", "xpu", "meta", ...) are accepted where a filter takes them,
checked by torch.device. Errors are DeviceError (a ValueError) and name the argument or the
command line option they came from (``what``). Nothing here imports torch for the forms above,
so the command line stays quick.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Tuple, Union

from .errors import DeviceError

if TYPE_CHECKING:
    import torch

    DeviceLike = Union[int, str, torch.device]
else:
    DeviceLike = Union[int, str, Any]

__all__ = ["DeviceLike", "DeviceError", "parse_device", "cuda_index", "snapshot_devices",
           "snapshot_device", "held_text", "SNAPSHOT_WHY", "cuda_available", "require_cuda",
           "NO_CUDA"]

NO_CUDA = "torch.cuda.is_available() is False on this machine"

_SPEC = re.compile(r"([a-z][a-z0-9_]*)(?::([0-9]{1,9}))?\Z")


def _syntax(what: str) -> str:
    """The forms accepted, as said to a caller (an argument) or on the command line (--opt)."""
    if what.startswith("-"):
        return "an index (0), cuda or cuda:N"
    return "an index (0), 'cuda', 'cuda:N' or a torch.device"


def _shown(device: object) -> str:
    """The value as given: a plain string as it is (a command line's word), else its repr."""
    if isinstance(device, str) and device.isprintable() and 0 < len(device) <= 60:
        return device
    r = repr(device)
    return r if len(r) <= 60 else r[:57] + "..."


def _is_torch_device(device: object) -> bool:
    tp = type(device)
    return tp.__name__ == "device" and tp.__module__ == "torch"


def parse_device(device: object, what: str = "device") -> Tuple[str, Optional[int]]:
    """(type, index or None) of ``device`` (see the module docstring); DeviceError naming
    ``what`` (an argument, or a command line option such as "--device") when it is none."""
    if _is_torch_device(device):
        index = getattr(device, "index", None)
        return str(getattr(device, "type")), index if isinstance(index, int) else None
    if isinstance(device, bool) or not isinstance(device, (int, str)):
        raise DeviceError(f"{what} must be {_syntax(what)}, or cpu; not "
                          f"{type(device).__name__} {_shown(device)}")
    if isinstance(device, int):
        if device < 0:
            raise DeviceError(f"{what} {device}: a device index is >= 0")
        return "cuda", device
    spec = device.strip()
    if spec.isascii() and spec.isdigit() and len(spec) <= 9:
        return "cuda", int(spec)
    if spec.startswith("-") and spec[1:].isascii() and spec[1:].isdigit():
        raise DeviceError(f"{what} {spec}: a device index is >= 0")
    m = _SPEC.match(spec)
    if m is None:
        raise DeviceError(f"{what} {_shown(device)} is not a device: give {_syntax(what)}, "
                          "or cpu")
    kind, index = m.group(1), m.group(2)
    if kind not in ("cuda", "cpu"):
        # another of torch's device types (mps, xpu, meta, privateuseone...): torch knows
        import torch

        try:
            torch.device(spec)
        except (RuntimeError, ValueError):
            raise DeviceError(f"{what} {_shown(device)} is not a device: give {_syntax(what)}, "
                              "or cpu") from None
    return kind, int(index) if index is not None else None


def cuda_index(device: object, what: str = "device",
               why: str = "a CUDA device is needed here") -> Optional[int]:
    """The CUDA device index of ``device`` (None for a bare "cuda"); DeviceError naming ``what``
    and saying ``why`` for the CPU or any other device type."""
    kind, index = parse_device(device, what)
    if kind != "cuda":
        raise DeviceError(f"{what} {_shown(device)}: {why}, not {kind} (give {_syntax(what)})")
    return index


SNAPSHOT_WHY = "a snapshot holds the CUDA caching allocator's devices"


def snapshot_devices(snap: Mapping[str, Any]) -> List[int]:
    """The CUDA devices a snapshot holds, in order: those with a segment or a trace entry."""
    found = set()
    for s in snap.get("segments") or ():
        dev = s.get("device") if isinstance(s, dict) else None
        if isinstance(dev, int) and not isinstance(dev, bool) and dev >= 0:
            found.add(dev)
    traces = snap.get("device_traces") or ()
    for i, trace in enumerate(traces if isinstance(traces, list) else ()):
        if trace:
            found.add(i)
    return sorted(found)


def held_text(devices: List[int]) -> str:
    """'cuda:0, cuda:1', or that it holds none."""
    if not devices:
        return "no device (no segment and no trace entry)"
    return ", ".join(f"cuda:{d}" for d in devices)


def snapshot_device(snap: Mapping[str, Any], device: object, what: str = "device",
                    where: str = "the snapshot", *, required: bool = True) -> int:
    """The index of the CUDA device ``device`` names in ``snap`` ("cuda": the first device it
    holds). With ``required``, a device the snapshot does not hold is a DeviceError that lists
    the ones it does hold (an empty page would say nothing)."""
    held = snapshot_devices(snap)
    try:
        index = cuda_index(device, what, SNAPSHOT_WHY)
    except DeviceError as exc:
        raise DeviceError(f"{exc}; {where} holds {held_text(held)}") from None
    if index is None:
        index = held[0] if held else 0
    if required and index not in held:
        given = _shown(device)
        named = given if given == f"cuda:{index}" else f"{given} (cuda:{index})"
        raise DeviceError(f"{what} {named} is not in {where}, which holds {held_text(held)}")
    return index


def cuda_available() -> bool:
    """torch.cuda.is_available(), and False where asking fails (a broken driver is no CUDA)."""
    import torch

    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def require_cuda(call: str, instead: str = "") -> None:
    """RuntimeError naming ``call`` when there is no CUDA: what torch raises then is an
    AttributeError from deep inside torch.cuda (a CPU build has no _cuda_* functions), or an
    error at CUDA's initialization. ``instead``: what to do on this machine."""
    if not cuda_available():
        raise RuntimeError(f"tensorgc: {call} needs CUDA; {NO_CUDA}"
                           + (f" ({instead})" if instead else ""))
