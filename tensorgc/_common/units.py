"""Sizes and table rows as the reports print them (pytorch_memlab's format); re-exported by
tensorgc.reporter, and shared with the table of every rank (tensorgc/distributed/_summaries.py)."""
from __future__ import annotations

import functools
from typing import List

__all__ = ["readable_size", "table_row", "LEN", "ROW_TEMPLATE"]

LEN = 79  # a table's width, its rules
ROW_TEMPLATE = "{:<40s}{:>20s}{:>10s}"  # name, size (shape), used memory


@functools.lru_cache(maxsize=4096)  # a model's sizes repeat: most rows hit the cache
def readable_size(num_bytes: float) -> str:
    """memlab's (calmsize's) format: two decimals and a 1024-based unit, e.g. '4.00M'."""
    n = float(num_bytes)
    for unit in ("B", "K", "M", "G", "T", "P"):
        if abs(n) < 1024.0 or unit == "P":
            return f"{n:.2f}{unit}"
        n /= 1024.0
    return f"{n:.2f}P"  # pragma: no cover


def table_row(name: str, shape: str, used: str) -> List[str]:
    """memlab's row; a name too long for its column goes on a line of its own, so the size
    columns stay aligned."""
    if len(name) < 40 and len(shape) < 20:
        return [ROW_TEMPLATE.format(name, shape, used)]
    return [name, ROW_TEMPLATE.format("", shape, used)]
