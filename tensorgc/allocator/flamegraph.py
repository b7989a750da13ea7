"""Flame graphs of the CUDA allocator's state, drawn here, offline: what torch.cuda._memory_viz's
``segments`` and ``memory`` draw (and ``compare``), without downloading flamegraph.pl.

    svg = segments(snap)        # stream; segment; block state; the stack that allocated it
    svg = memory(snap)          # stream; block state; stack (every segment together)
    svg = compare(before, after)  # the segments only in one of two snapshots
    html = segments(snap, format="html")   # the same, in a page: click a frame to zoom
    _save_segment_usage("out.svg")         # torch.cuda.memory's name: this process's state

Each block of the snapshot's segments counts its bytes under its stack (the frames torch
recorded when it was allocated: record_memory_history(...) before allocating), outermost frame
at the bottom; bytes of a block that no stack accounts for are ``<gaps>``, blocks without frames
``<non-python>``. Frames read ``file.py:line:function`` (the full path in the tooltip), C++
frames of the interpreter's and torch's dispatch machinery are left out, as torch's are.

Bounds, whatever the snapshot: at most FRAMES_PER_STACK frames per stack (the innermost, under
one "… N outer frames" frame), STACKS_MAX distinct stacks (the rest of a state's bytes under
"<more stacks>"), every string cut at LABEL_MAX characters and escaped for XML, at most
RECTS_MAX frames drawn (the narrowest left out first: a frame narrower than a tenth of a pixel
is never drawn) and a page of at most PAGE_MAX bytes.
"""
from __future__ import annotations

import hashlib
import html as _html
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .._common.devices import DeviceLike, cuda_index, require_cuda
from .._common.types import Snapshot
from .._common.units import readable_size
from .timeline import _text

__all__ = ["segments", "memory", "compare", "folded", "render", "_save_segment_usage",
           "_save_memory_usage", "FRAMES_PER_STACK", "STACKS_MAX", "RECTS_MAX", "LABEL_MAX",
           "PAGE_MAX"]

FRAMES_PER_STACK = 64
STACKS_MAX = 50_000
RECTS_MAX = 20_000
LABEL_MAX = 300
PAGE_MAX = 8 << 20

WIDTH, ROW, TOP, BOTTOM = 1200, 17, 48, 24

Stack = Tuple[str, ...]

# C++ frames that only say how the call got there: the unwinder, the interpreter's eval loop and
# call machinery, torch's dispatcher. Left out of every stack; a Python frame never is.
_SKIP_IN_NAMES = ("unwind::", "CapturedTraceback", "gather_with_cpp", "__libc_start_main")
_SKIP_NAME_STARTS = ("PyEval_", "_PyEval_", "PyObject_", "_PyObject_", "PyFunction_",
                     "_PyFunction_")
_SKIP_FILES = ("ceval.c", "pycore_ceval.h", "Objects/call.c", "Objects/methodobject.c",
               "pythonrun.c", "Modules/main.c", "cpython/abstract.h", "core/boxing",
               "/Register", "/Redispatch")


def _skipped(name: str, func: str) -> bool:
    if name.endswith(".py") or name.startswith("<frozen "):
        return False
    return (func == "_start" or func.startswith(_SKIP_NAME_STARTS)
            or any(s in func for s in _SKIP_IN_NAMES) or any(s in name for s in _SKIP_FILES))


def _frame(f: object) -> Optional[Tuple[str, str]]:
    """(full, short) text of a frame dict, None for one left out."""
    if not isinstance(f, dict):
        return None
    name, func, line = f.get("filename"), f.get("name"), f.get("line")
    name_s, func_s = _text(name)[:LABEL_MAX], _text(func)[:LABEL_MAX]
    if _skipped(name_s, func_s):
        return None
    line_s = _text(line)
    return f"{name_s}:{line_s}:{func_s}", f"{name_s.rsplit('/', 1)[-1]}:{line_s}:{func_s}"


class _Folded:
    """Bytes by stack, bounded: STACKS_MAX distinct stacks, FRAMES_PER_STACK frames each."""

    def __init__(self) -> None:
        self.bytes: Dict[Stack, int] = {}
        self.short: Dict[str, str] = {}

    def add(self, prefix: Sequence[str], frames: Optional[List[Any]], nbytes: int) -> None:
        if nbytes <= 0:
            return
        if frames is None:
            tail: List[str] = []
        elif not frames:
            tail = ["<non-python>"]
        else:
            tail = []
            for f in reversed(frames):  # outermost first: the flame's base
                t = _frame(f)
                if t is not None:
                    tail.append(t[0])
                    self.short.setdefault(t[0], t[1])
            if len(tail) > FRAMES_PER_STACK:
                outer = len(tail) - (FRAMES_PER_STACK - 1)
                tail = [f"\u2026 {outer} outer frames"] + tail[outer:]
            if not tail:
                tail = ["<non-python>"]
        key = tuple(prefix) + tuple(tail)
        if key not in self.bytes and len(self.bytes) >= STACKS_MAX:
            key = tuple(prefix) + ("<more stacks>",)
        self.bytes[key] = self.bytes.get(key, 0) + nbytes


def _block_parts(b: Mapping[str, Any]) -> List[Tuple[Optional[List[Any]], int]]:
    """(frames or None, bytes) of one block: its allocation's stack and requested size, then
    what is left of the block as ``<gaps>`` (frames None: the caller names it)."""
    size = b.get("size", 0)
    size = size if isinstance(size, int) and size > 0 else 0
    parts: List[Tuple[Optional[List[Any]], int]] = []
    accounted = 0
    history = b.get("history")
    if "frames" not in b and isinstance(history, list):  # snapshots before torch 2.1
        for h in history:
            if isinstance(h, dict) and isinstance(h.get("real_size"), int):
                frames = h.get("frames")
                parts.append((frames if isinstance(frames, list) else [], h["real_size"]))
                accounted += h["real_size"]
    else:
        frames = b.get("frames")
        req = b.get("requested_size", size)
        req = req if isinstance(req, int) and 0 <= req <= size else size
        parts.append((frames if isinstance(frames, list) else [], req))
        accounted = req
    if size > accounted:
        parts.append((None, size - accounted))
    return parts


def _add_blocks(fold: _Folded, prefix: List[str], blocks: object) -> None:
    for b in blocks if isinstance(blocks, list) else []:
        if not isinstance(b, dict):
            continue
        state = _text(b.get("state", "?"))[:LABEL_MAX]
        for frames, nbytes in _block_parts(b):
            if frames is None:
                fold.add(prefix + [state, "<gaps>"], None, nbytes)
            else:
                fold.add(prefix + [state], frames, nbytes)


def _segments_of(snap: object, device: Optional[DeviceLike]) -> List[Dict[str, Any]]:
    segs = snap.get("segments") if isinstance(snap, dict) else snap
    if not isinstance(segs, list):
        raise ValueError("a snapshot (torch.cuda.memory._snapshot()) or its list of segments")
    index = None if device is None else cuda_index(device)
    return [s for s in segs if isinstance(s, dict)
            and (index is None or s.get("device", index) == index)]


def folded(snap: Union[Snapshot, List[Dict[str, Any]]], *, by: str = "segments",
           device: Optional[DeviceLike] = None) -> Dict[Stack, int]:
    """The bytes of every stack, as a flame graph draws them (``by``: "segments" or "memory";
    ``device``: only that CUDA device's segments, default all). Keys are tuples of frames, the
    base first: ``("stream_0", "seg_0x7f...", "active_allocated", "train.py:12:step", ...)``."""
    return _fold(snap, by, device).bytes


def _fold(snap: object, by: str, device: Optional[DeviceLike]) -> _Folded:
    if by not in ("segments", "memory"):
        raise ValueError(f"by must be 'segments' or 'memory', not {by!r}")
    fold = _Folded()
    for seg in _segments_of(snap, device):
        prefix = [f"stream_{_text(seg.get('stream', 0))}"]
        if by == "segments":
            addr = seg.get("address")
            prefix.append(f"seg_{addr:#x}" if isinstance(addr, int) else "seg_?")
        _add_blocks(fold, prefix, seg.get("blocks"))
    return fold


# ---------------------------------------------------------------------------------- drawing

class _Node:
    __slots__ = ("name", "total", "children")

    def __init__(self, name: str) -> None:
        self.name = name
        self.total = 0
        self.children: Dict[str, _Node] = {}


def _tree(stacks: Mapping[Stack, int]) -> _Node:
    root = _Node("all")
    for stack, nbytes in stacks.items():
        node = root
        node.total += nbytes
        for name in stack:
            child = node.children.get(name)
            if child is None:
                child = node.children[name] = _Node(name)
            child.total += nbytes
            node = child
    return root


def _color(name: str, depth: int) -> str:
    if name.startswith(("stream_", "seg_", "only_")) or depth == 0:
        return "hsl(210,30%,78%)"
    if name in ("inactive", "<gaps>"):
        return "hsl(0,0%,82%)"
    if name.startswith("active_"):
        return "hsl(200,45%,70%)"
    if name.startswith(("<", "\u2026")):
        return "hsl(45,30%,80%)"
    h = int.from_bytes(hashlib.blake2s(name.encode("utf-8", "replace"),
                                       digest_size=4).digest(), "big")
    return f"hsl({h % 55},{70 + h // 55 % 25}%,{55 + h // 1375 % 15}%)"


def _layout(root: _Node, min_w: float) -> Tuple[List[Tuple[_Node, float, float, int, int]], int]:
    """(node, x, width, depth, parent) of each frame drawn, and the depth reached; parent is the
    index in the list of the frame drawn beneath (-1 for the root)."""
    out: List[Tuple[_Node, float, float, int, int]] = []
    scale = WIDTH / root.total if root.total else 0.0
    todo = [(root, 0.0, 0, -1)]
    deepest = 0
    while todo:
        node, x, depth, parent = todo.pop()
        w = node.total * scale
        if w < min_w:
            continue
        me = len(out)
        out.append((node, x, w, depth, parent))
        deepest = max(deepest, depth)
        cx = x
        for name in sorted(node.children):  # alphabetical, as flame graphs merge
            child = node.children[name]
            todo.append((child, cx, depth + 1, me))
            cx += child.total * scale
    return out, deepest


def _label(name: str, short: Mapping[str, str], w: float) -> str:
    text = short.get(name, name)
    fit = int((w - 6) / 6.5)
    if fit < 3:
        return ""
    return text if len(text) <= fit else text[:fit - 2] + ".."


def _svg(fold: _Folded, title: str, min_w: float) -> str:
    root = _tree(fold.bytes)
    frames, deepest = _layout(root, min_w)
    height = TOP + (deepest + 1) * ROW + BOTTOM
    total = root.total or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH + 20}" height="{height}" '
             f'viewBox="0 0 {WIDTH + 20} {height}" font-family="Verdana,sans-serif" '
             'font-size="11">',
             '<rect width="100%" height="100%" fill="#fdfdf8"/>',
             f'<text x="{(WIDTH + 20) / 2:.0f}" y="22" text-anchor="middle" font-size="15">'
             f"{_html.escape(title)}</text>",
             f'<text x="10" y="{height - 8}" fill="#555">{readable_size(root.total)} in '
             f"{len(fold.bytes):,} stacks"
             + (f"; {RECTS_MAX:,} frames at most are drawn" if len(frames) >= RECTS_MAX else "")
             + "</text>"]
    for i, (node, x, w, depth, parent) in enumerate(frames):
        y = height - BOTTOM - (depth + 1) * ROW
        full = node.name if depth else "all"
        tip = (f"{full} ({readable_size(node.total)}, {node.total:,} bytes, "
               f"{100 * node.total / total:.2f}%)")
        parts.append(f'<g class="f" id="f{i}" data-p="{parent}" data-x="{x:.2f}" '
                     f'data-w="{w:.2f}" data-d="{depth}" '
                     f'data-n="{_html.escape(fold.short.get(full, full))}"><title>'
                     f'{_html.escape(tip)}</title><rect x="{x + 10:.2f}" y="{y}" '
                     f'width="{max(w - 0.5, 0.1):.2f}" height="{ROW - 1}" rx="2" '
                     f'fill="{_color(full, depth)}"/><text x="{x + 13:.2f}" y="{y + 12}">'
                     f"{_html.escape(_label(full, fold.short, w))}</text></g>")
    parts.append("</svg>")
    return "\n".join(parts)


# A click zooms into a frame: it and what is stacked on it fill the width; beneath it only the
# frames it stands on (its parents, found by data-p) are drawn, full width; the rest are hidden.
_ZOOM = """<script>
(function(){var W=%d,gs=[].slice.call(document.querySelectorAll('g.f'));
function fit(g,x,w){var r=g.querySelector('rect'),t=g.querySelector('text'),n=g.getAttribute('data-n');
r.setAttribute('x',(x+10).toFixed(2));r.setAttribute('width',Math.max(w-0.5,0.1).toFixed(2));
t.setAttribute('x',(x+13).toFixed(2));var k=Math.floor((w-6)/6.5);
t.textContent=k<3?'':(n.length<=k?n:n.slice(0,k-2)+'..');}
function zoom(z){var zx=+z.getAttribute('data-x'),zw=+z.getAttribute('data-w'),zd=+z.getAttribute('data-d');
var under={},p=z.getAttribute('data-p'),seen=0;
while(p!==null&&p!=='-1'&&seen++<gs.length){under[p]=1;var q=document.getElementById('f'+p);p=q?q.getAttribute('data-p'):null;}
gs.forEach(function(g){var x=+g.getAttribute('data-x'),w=+g.getAttribute('data-w'),d=+g.getAttribute('data-d');
if(d<zd){if(under[g.id.slice(1)]){g.style.display='';fit(g,0,W);}else{g.style.display='none';}return;}
if(x+w<=zx+1e-6||x>=zx+zw-1e-6){g.style.display='none';return;}
g.style.display='';fit(g,(x-zx)*W/zw,w*W/zw);});}
gs.forEach(function(g){g.style.cursor='pointer';g.addEventListener('click',function(){zoom(g);});});
})();
</script>"""


def render(stacks: Mapping[Stack, int], *, title: str = "Flame graph", format: str = "svg",
           short: Optional[Mapping[str, str]] = None) -> str:
    """The flame graph of ``stacks`` (bytes by stack, the base first: folded()'s result), as a
    self-contained SVG (``format="svg"``) or HTML page ("html", where a click on a frame zooms
    into it). Within the module's bounds (RECTS_MAX frames, PAGE_MAX bytes)."""
    fold = _Folded()
    for stack, nbytes in stacks.items():
        key = tuple(_text(s)[:LABEL_MAX] for s in stack)
        if key not in fold.bytes and len(fold.bytes) >= STACKS_MAX:
            key = key[:1] + ("<more stacks>",)
        if isinstance(nbytes, int) and nbytes > 0:
            fold.bytes[key] = fold.bytes.get(key, 0) + nbytes
    if short:
        fold.short.update(short)
    return _draw(fold, title, format)


def _draw(fold: _Folded, title: str, format: str) -> str:
    if format not in ("svg", "html"):
        raise ValueError(f"format must be 'svg' or 'html', not {format!r}")
    title = _text(title)[:LABEL_MAX]
    min_w = 0.1
    while True:
        root = _tree(fold.bytes)
        frames, _ = _layout(root, min_w)
        if len(frames) <= RECTS_MAX:
            svg = _svg(fold, title, min_w)
            if len(svg) <= PAGE_MAX - 4096 or min_w > WIDTH:
                break
        min_w *= 2
    if format == "svg":
        return '<?xml version="1.0" encoding="utf-8"?>\n' + svg + "\n"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"generator\" content=\"tensorgc\"><title>" + _html.escape(title)
            + "</title><style>body{margin:12px;font:14px sans-serif;color:#222}"
            "g.f:hover rect{stroke:#000;stroke-width:.8}</style></head><body>\n<p>Hover a frame "
            "for its bytes; click one to zoom into it (the frames below it reset the zoom).</p>\n"
            + svg + "\n" + (_ZOOM % WIDTH) + "\n</body></html>\n")


def segments(snapshot: Union[Snapshot, List[Dict[str, Any]]], *, device: Optional[DeviceLike] = None,
             format: str = "svg", title: Optional[str] = None) -> str:
    """torch.cuda._memory_viz.segments, drawn here: every segment's blocks by the stack that
    allocated them (stream; segment address; block state; frames). ``snapshot``: a snapshot
    dict (torch.cuda.memory._snapshot(), load_snapshot) or its list of segments; ``device``:
    one CUDA device's segments (default every device's)."""
    return _draw(_fold(snapshot, "segments", device),
                 title or "Allocator segments by allocation stack", format)


def memory(snapshot: Union[Snapshot, List[Dict[str, Any]]], *, device: Optional[DeviceLike] = None,
           format: str = "svg", title: Optional[str] = None) -> str:
    """torch.cuda._memory_viz.memory, drawn here: the memory of every segment together, by
    stream, block state and the stack that allocated it: where the program's CUDA memory
    comes from."""
    return _draw(_fold(snapshot, "memory", device),
                 title or "CUDA memory by allocation stack", format)


def compare(before: Union[Snapshot, List[Dict[str, Any]]],
            after: Union[Snapshot, List[Dict[str, Any]]], *, format: str = "svg",
            title: Optional[str] = None) -> str:
    """torch.cuda._memory_viz.compare, drawn here: the segments (by address and size) only in
    ``before`` (under ``only_before``) or only in ``after`` (``only_after``), by stack."""
    def key(s: Mapping[str, Any]) -> Tuple[Any, Any]:
        return s.get("address"), s.get("total_size")

    a, b = _segments_of(before, None), _segments_of(after, None)
    ka, kb = {key(s) for s in a}, {key(s) for s in b}
    fold = _Folded()
    for side, segs, other in (("only_before", a, kb), ("only_after", b, ka)):
        for seg in segs:
            if key(seg) in other:
                continue
            addr = seg.get("address")
            prefix = [side, f"stream_{_text(seg.get('stream', 0))}",
                      f"seg_{addr:#x}" if isinstance(addr, int) else "seg_?"]
            _add_blocks(fold, prefix, seg.get("blocks"))
    return _draw(fold, title or "Segments only before or only after", format)


def _write(filename: Union[str, "os.PathLike[str]"], text: str) -> None:
    from .snapshot import atomic_write

    atomic_write(filename, lambda f: f.write(text))


def _this_process() -> Snapshot:
    require_cuda("_save_segment_usage", "pass the snapshot of another machine")
    import torch

    snap: Snapshot = torch.cuda.memory._snapshot()
    return snap


def _format_of(filename: Union[str, "os.PathLike[str]"]) -> str:
    return "html" if os.fspath(filename).lower().endswith((".html", ".htm")) else "svg"


def _save_segment_usage(filename: Union[str, "os.PathLike[str]"] = "output.svg",
                        snapshot: Optional[Snapshot] = None) -> None:
    """torch.cuda.memory._save_segment_usage, offline: segments(snapshot) written to
    ``filename`` (SVG; a page where it ends with .html), replaced whole or not at all (only a
    regular file is replaced: snapshot.atomic_write). Default snapshot: this process's
    (torch.cuda.memory._snapshot(), which needs CUDA)."""
    snap = snapshot if snapshot is not None else _this_process()
    _write(filename, segments(snap, format=_format_of(filename)))


def _save_memory_usage(filename: Union[str, "os.PathLike[str]"] = "output.svg",
                       snapshot: Optional[Snapshot] = None) -> None:
    """torch.cuda.memory._save_memory_usage, offline: memory(snapshot), written as
    _save_segment_usage writes."""
    snap = snapshot if snapshot is not None else _this_process()
    _write(filename, memory(snap, format=_format_of(filename)))

