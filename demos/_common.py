"""Helpers shared by the tensorgc demos (not a demo itself).

Every demo is a standalone script run as ``python demos/<name>.py`` from the
repository root (or from anywhere): this module finds the ``tensorgc`` package
(an in-place build in the repository root, or an installed one), picks the
device, and writes report pages to private temporary files.
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_tensorgc():
    """Import tensorgc, preferring an in-place build in the repository root."""
    built_here = glob.glob(os.path.join(ROOT, "tensorgc", "_tensorgc*"))
    if built_here and ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    try:
        import tensorgc  # noqa: F401
    except ImportError:
        if ROOT in sys.path:
            raise
        sys.path.insert(0, ROOT)
        try:
            import tensorgc  # noqa: F401
        except ImportError as exc:
            raise SystemExit(
                f"tensorgc is not importable ({exc}); build the extension first "
                f"(e.g. `make` in {ROOT})"
            ) from exc
    import tensorgc

    if not hasattr(tensorgc, "observe_cycles"):
        raise SystemExit(
            f"tensorgc at {list(getattr(tensorgc, '__path__', []))} has no observe_cycles: "
            f"the extension is not built yet (e.g. `make` in {ROOT})"
        )
    return tensorgc


def pick_device(name: str = "auto") -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'; other names pass through."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def write_html(report, directory: str | None = None) -> str:
    """Write report.html to a new private file (mkstemp: mode 0600, O_EXCL); return its path."""
    fd, path = tempfile.mkstemp(prefix="tensorgc-", suffix=".html", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(report.html)
    return path


def mib(nbytes: int | float) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def print_report(report, directory: str | None = None, *, title: str = "report") -> str:
    """Print the text summary of a CycleReport, write its HTML page, print the path."""
    print(f"---- tensorgc {title} " + "-" * max(0, 50 - len(title)))
    print(report.text.rstrip("\n"))
    path = write_html(report, directory)
    print(f"HTML: {path}")
    print("-" * 64)
    return path


def memory_line(device: str) -> str:
    """One line of allocator numbers for the device (CUDA) or the process (CPU)."""
    import torch

    if is_cuda(device):
        return (
            f"torch.cuda.memory_allocated={mib(torch.cuda.memory_allocated())} "
            f"max_memory_allocated={mib(torch.cuda.max_memory_allocated())} "
            f"memory_reserved={mib(torch.cuda.memory_reserved())}"
        )
    try:
        import resource

        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return f"process peak RSS={mib(peak_kib * 1024)} (CPU: no allocator counters)"
    except Exception:  # pragma: no cover - non-POSIX
        return "(CPU: no allocator counters)"
