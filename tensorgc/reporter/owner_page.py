"""The owners page: MemReporter's report as one self-contained HTML file, with the chains that
hold its unnamed tensors drawn by Graphviz (the cycle detector's render worker, under its
timeout).

    rep = tensorgc.MemReporter(model).collect()
    open("owners.html", "w").write(rep.html())

The chains are merged into one tree per root (a list that holds forty tensors is drawn once,
with forty leaves), the largest owners first. Bounds: at most ``max_chains`` chains drawn (the
rest are counted), 40 references per chain (the middle of a longer one is drawn as "…"), every
label cut to 80 characters; every string from the user's objects is escaped for DOT and HTML.
Without Graphviz's worker, or past its timeout, the page keeps the table and says why the
drawing is missing. No network: no script, no font, no link leaves the file.
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol, Sequence, Set, Tuple

from .._common.units import readable_size

if TYPE_CHECKING:
    from .owner_chains import Chain


class Report(Protocol):
    """What the page reads of a tensorgc.reporter.Report (which imports this module lazily, so
    this one names it by shape rather than importing it back)."""
    @property
    def rows(self) -> Sequence[Any]: ...

    @property
    def chains(self) -> Dict[int, Any]: ...

    def format(self, verbose: bool = False) -> str: ...

__all__ = ["owners_html", "owners_dot"]

LABEL_MAX = 80
EDGES_MAX = 40


def _cut(s: str, n: int = LABEL_MAX) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


def _dot(s: str) -> str:
    """A DOT double-quoted string's inside: backslashes and quotes escaped, line breaks spaced
    (Graphviz reads \\n, \\l and \\r as layout escapes, so no backslash survives unescaped)."""
    s = _cut(s).replace("\\", "\\\\").replace('"', '\\"')
    return "".join(" " if ord(ch) < 32 or ch == "\x7f" else ch for ch in s)


def _steps(chain: "Chain") -> List[str]:
    edges = list(chain.edges)
    if len(edges) > EDGES_MAX:
        half = EDGES_MAX // 2
        edges = edges[:half] + ["…"] + edges[-half:]
    return edges


def owners_dot(report: Report, max_chains: int = 200) -> Tuple[str, int]:
    """(DOT source, chains left out) for the report's owner chains."""
    items = [(r, report.chains[i]) for i, r in enumerate(report.rows) if i in report.chains]
    items.sort(key=lambda rc: -rc[0].used)
    left_out = max(0, len(items) - max_chains)
    items = items[:max_chains]
    ids: Dict[Tuple[str, ...], str] = {}
    nodes: List[str] = []
    edges: List[str] = []
    seen: Set[str] = set()

    def node(path: Tuple[str, ...], label: str, shape: str) -> str:
        nid = ids.get(path)
        if nid is None:
            nid = f"n{len(ids)}"
            ids[path] = nid
            nodes.append(f'  {nid} [label="{_dot(label)}", shape={shape}];')
        return nid

    for k, (row, chain) in enumerate(items):
        path: Tuple[str, ...] = (chain.kind, chain.root)
        prev = node(path, chain.root, "box, style=filled, fillcolor=\"#dfe8f5\"")
        steps = _steps(chain)
        for j, step in enumerate(steps):
            path = path + (step,)
            tname = chain.types[j + 1] if j + 1 < len(chain.types) and step != "…" else ""
            last = j == len(steps) - 1
            if last:
                break
            ref, arrow, target = step.partition(" \u2192 ")  # ".grad_fn → MulBackward0"
            nid = node(path, tname or (target if arrow else step), "ellipse")
            edge = f'  {prev} -> {nid} [label="{_dot(ref if arrow and ref else step)}"];'
            if edge not in seen:  # a shared prefix is drawn once
                seen.add(edge)
                edges.append(edge)
            prev = nid
        leaf = f"n{len(ids)}"
        ids[("leaf", str(k))] = leaf
        nodes.append(f'  {leaf} [label="{_dot(row.name)}  {_dot(readable_size(row.used))}", '
                     'shape=note, style=filled, fillcolor="#fbe3c9"];')
        last_step = steps[-1] if steps else ""
        edges.append(f'  {prev} -> {leaf} [label="{_dot(last_step)}"];')
    dot = ("digraph owners {\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
           "  edge [fontname=\"Helvetica\", fontsize=9];\n" + "\n".join(nodes + edges) + "\n}\n")
    return dot, left_out


def owners_html(report: Report, title: Optional[str] = None, max_chains: int = 200) -> str:
    """The page (see the module's docstring)."""
    from .._tensorgc import GraphvizError, render_svg

    if max_chains < 1:
        raise ValueError(f"tensorgc: max_chains must be at least 1, not {max_chains}")
    dot, left_out = owners_dot(report, max_chains)
    if report.chains:
        try:
            picture = render_svg(dot)
            start = picture.find("<svg")
            picture = picture[start:] if start >= 0 else picture
        except GraphvizError as exc:
            picture = (f"<p class=note>The drawing is missing: {html.escape(str(exc))}. The "
                       "chains are in the table below.</p>")
    else:
        picture = "<p class=note>No tensor here needs an owner: every one is named.</p>"
    more = (f"<p class=note>{left_out} smaller chain{'s' if left_out != 1 else ''} left out of "
            "the drawing; the table lists every one.</p>" if left_out else "")
    t = html.escape(_cut(title or "tensorgc: what holds the memory", 200))
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f"<title>{t}</title><style>body{{font-family:sans-serif;margin:1.5em}}"
            "pre{font-size:12px;background:#f6f6f6;padding:1em;overflow:auto}"
            ".note{color:#555}svg{max-width:100%;height:auto}</style></head><body>"
            f"<h1>{t}</h1><h2>Owner chains</h2>{picture}{more}"
            f"<h2>The report</h2><pre>{html.escape(report.format(verbose=True))}</pre>"
            "</body></html>\n")
