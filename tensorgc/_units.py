"""Sizes as the reports print them (pytorch_memlab's format); re-exported by tensorgc.reporter."""
from __future__ import annotations

import functools

__all__ = ["readable_size"]


@functools.lru_cache(maxsize=4096)  # a model's sizes repeat: most rows hit the cache
def readable_size(num_bytes: float) -> str:
    """memlab's (calmsize's) format: two decimals and a 1024-based unit, e.g. '4.00M'."""
    n = float(num_bytes)
    for unit in ("B", "K", "M", "G", "T", "P"):
        if abs(n) < 1024.0 or unit == "P":
            return f"{n:.2f}{unit}"
        n /= 1024.0
    return f"{n:.2f}P"  # pragma: no cover
