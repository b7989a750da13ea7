"""Notebook forms: a snapshot's timeline inline in a cell. The other objects display themselves
(their _repr_html_): a MemReporter report and a growth as tables, a CycleReport as its page in a
sandboxed iframe, the line profiler's table; the magics (%load_ext tensorgc) are as they were.
docs/integrations/notebooks.md describes them."""
from __future__ import annotations

import html
import os
from typing import Any, Dict, Optional, Union

MAX_BYTES = 4 * 1024 * 1024   # the page kept in a notebook cell, at most
# (detail, columns) tried in turn until the page fits
_SIZES = ((300, 1200), (100, 600), (30, 300))


class InlinePage:
    """An HTML page shown in a cell: ``_repr_html_`` is the page as the srcdoc of an iframe
    sandboxed to its own script (escaped: nothing of it reaches the notebook's document);
    ``html`` the page itself (None when it was over the bound), ``note`` why there is none."""

    def __init__(self, page: Optional[str], title: str, height: int, note: str = "") -> None:
        self.html = page
        self.title = title
        self.height = height
        self.note = note

    def _repr_html_(self) -> str:
        if self.html is None:
            return f"<p>{html.escape(self.note)}</p>"
        return (f'<iframe sandbox="allow-scripts" title="{html.escape(self.title)}" '
                f'style="width:100%;height:{int(self.height)}px;border:1px solid #ccc" '
                f'srcdoc="{html.escape(self.html, quote=True)}"></iframe>')

    def __repr__(self) -> str:
        size = "none" if self.html is None else f"{len(self.html)} characters"
        return f"<InlinePage {self.title!r}: {size}>"


def inline_timeline(snapshot: Union[Dict[str, Any], str, "os.PathLike[str]", None] = None, *,
                    device: Any = "cuda", title: Optional[str] = None,
                    max_bytes: int = MAX_BYTES, height: int = 640) -> InlinePage:
    """The timeline page of ``snapshot`` (a dict, a snapshot file's path, or None: the
    allocator's history now) for a cell, at most ``max_bytes`` characters: a page over it is
    made again with fewer columns and less detail, and past the smallest the cell says so and
    how to write the page to a file instead. Errors as tensorgc.timeline's."""
    from ..allocator.timeline import timeline_html

    if not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be an int >= 1, not {max_bytes!r}")
    snap = snapshot
    if not isinstance(snap, dict):
        from ..allocator.snapshot import load_snapshot, snapshot as take

        snap = take() if snap is None else load_snapshot(snap, lean=True)
    name = title or "tensorgc timeline"
    size = 0
    for detail, columns in _SIZES:
        page = timeline_html(snap, device=device, detail=detail, title=title, columns=columns)
        size = len(page)
        if size <= max_bytes:
            return InlinePage(page, name, height)
    return InlinePage(None, name, height,
                      f"tensorgc: the timeline page is {size:,} characters even at its smallest, "
                      f"over max_bytes={max_bytes:,}: write it to a file with "
                      "tensorgc.timeline(snapshot, 'timeline.html') and open that instead")
