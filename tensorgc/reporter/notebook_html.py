"""The notebook forms (_repr_html_) of a MemReporter report and of a growth: HTML tables, every
string from the program (names, holders, chains, sites) escaped, the rows bounded. It reads the
objects it is given and imports none of its neighbours (reporter/__init__.py and growth.py call
it)."""
from __future__ import annotations

import html
from typing import Any, List

from .._common.units import readable_size

MAX_ROWS = 200      # rows per table; the rest counted
CELL_MAX = 300      # characters per cell

_STYLE = ("<style>.tgc-t{border-collapse:collapse;font-family:monospace;font-size:12px}"
          ".tgc-t td,.tgc-t th{padding:1px 8px;text-align:left;vertical-align:top}"
          ".tgc-t td.n{text-align:right}.tgc-t caption{text-align:left;font-weight:bold}</style>")


def _e(v: Any) -> str:
    s = "" if v is None else str(v)
    if len(s) > CELL_MAX:
        s = s[:CELL_MAX] + "\u2026"
    return html.escape(s, quote=True)


def _table(caption: str, head: List[str], rows: List[List[Any]], numeric: List[int],
           more: int = 0) -> str:
    out = [f'<table class="tgc-t"><caption>{_e(caption)}</caption><tr>']
    out.extend(f"<th>{_e(h)}</th>" for h in head)
    out.append("</tr>")
    for r in rows:
        out.append("<tr>")
        out.extend(f'<td class="n">{_e(v)}</td>' if i in numeric else f"<td>{_e(v)}</td>"
                   for i, v in enumerate(r))
        out.append("</tr>")
    if more:
        out.append(f'<tr><td colspan="{len(head)}">\u2026 {more} more rows</td></tr>')
    out.append("</table>")
    return "".join(out)


def report_html(rep: Any) -> str:
    """A Report: per device, its totals by category and its rows (name, kind, shape, dtype,
    bytes, holder), largest first."""
    parts = [_STYLE]
    if not rep.totals:
        parts.append(f"<p>no tensors found on {_e(rep.device or 'any device')}</p>")
    for dev, t in rep.totals.items():
        rows = [r for r in rep.rows if r.device == dev]
        kinds: dict[str, int] = {}
        for r in rows:
            kinds[r.kind] = kinds.get(r.kind, 0) + r.used
        head = f"Storage on {dev}: {readable_size(t['used'])} in {t['tensors']} tensors"
        if dev.startswith("cuda") and t.get("allocated") is not None:
            head += f"; allocated {readable_size(t['allocated'])}"
            if t.get("reserved") is not None:
                head += f", reserved {readable_size(t['reserved'])}"
        parts.append(_table(head, ["category", "bytes", "size"],
                            [[k, b, readable_size(b)] for k, b in
                             sorted(kinds.items(), key=lambda kv: -kv[1])], [1, 2]))
        order = sorted(rows, key=lambda r: -r.used)
        shown = order[:MAX_ROWS]
        parts.append(_table(
            f"Tensors on {dev}", ["name", "kind", "shape", "dtype", "used", "held by"],
            [[r.name, r.kind, "?" if r.shape is None else tuple(r.shape), r.dtype,
              readable_size(r.used), r.owner or r.holder or ""] for r in shown],
            [4], more=len(order) - len(shown)))
    return "".join(parts)


def growth_html(g: Any) -> str:
    """A Growth: its summary, then the bytes by owner (with the chain) and by allocation site."""
    parts = [_STYLE, f"<p>{_e(g.summary())}</p>"]
    groups = list(g.groups)
    parts.append(_table("By owner", ["holder", "size", "storages", "chain"],
                        [[h, readable_size(b), n, c if c != h else ""]
                         for h, b, n, c in groups[:MAX_ROWS]], [1, 2],
                        more=max(0, len(groups) - MAX_ROWS)))
    if g.sites:
        sites = list(g.sites)
        parts.append(_table("By allocation site", ["site", "size", "storages"],
                            [[s, readable_size(b), n] for s, b, n in sites[:MAX_ROWS]], [1, 2],
                            more=max(0, len(sites) - MAX_ROWS)))
    return "".join(parts)
