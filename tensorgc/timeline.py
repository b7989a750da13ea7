"""The Active Memory Timeline of a snapshot as a self-contained HTML page (SVG drawn here, no
script from anywhere, opens offline). The replay is C (allocator/timeline.c); this module picks
the events, draws polygons and escapes every string that comes from the file.

    html = timeline_html(load_snapshot(path), device="cuda:0", detail=300)

``device`` everywhere here: an index (0), "cuda:N", "cuda" (the first device the snapshot holds)
or a torch.device, as the command line's --device (tensorgc/_devices.py parses both).
"""
from __future__ import annotations

import base64
import hashlib
import html as _html
import os
import sys
from array import array
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _tensorgc
from ._devices import DeviceLike, snapshot_device
from ._lean import P_ACTION, LeanTrace
from ._types import Frame, Snapshot, Trace
from .categories import (HINT_KINDS, HINT_PHASES, NAME_MAX, PHASES, RULES, Inputs, inputs,
                         names_of)
from .reporter import readable_size as R

__all__ = ["timeline", "timeline_html", "replay", "peak_breakdown", "categories_at_peak",
           "classification_inputs"]

WIDTH, HEIGHT, LEFT, TOP = 1200, 420, 70, 10


Replay = Dict[str, Any]  # the C replay's dict (see replay)
StrPath = Union[str, "os.PathLike[str]"]


def replay(snap: Snapshot, device: DeviceLike = "cuda", columns: int = WIDTH, detail: int = 300,
           categories: Optional[Mapping[int, str]] = None,
           names: Optional[Mapping[int, str]] = None) -> Tuple[Replay, Trace]:
    """The C replay of one device's trace: dict with active/peak/small per column, bands
    (alloc_event, free_event, size, col0, col1, offsets, addr, category, rule), ooms and oom_at
    (trace position, event position), max. With anything to classify by (the snapshot's
    "tensorgc_categories", torch's optimizer annotations, ``categories``: {block address: kind}
    of the blocks alive at the end, or the allocations' stacks, from which the categories are
    inferred where nothing recorded says), also cat_active ({category: bytes per column}),
    at_peak ({category: bytes}), peak_event, labels/pre_labels (each allocation's label, see
    categories.describe_label, by trace entry and by block alive at the end), name_index/
    pre_name_index and names (its tensor name), inferred_spans and rules (allocations per
    rule); "marks" says whether phase or grad marks, recorded or inferred, took part (else only
    the named blocks are known), "inferred" whether any category was inferred. A device the
    snapshot does not hold replays an empty trace."""
    tl, trace, _ = _replay(snap, device, columns, detail, categories, names)
    return tl, trace


Columns = Tuple[Any, ...]  # allocator/columns.c's (kind, addr, size, time, stack, stacks, ...)
_KINDS = {"alloc": 1, "free_requested": 2, "free_completed": 3, "oom": 4, "segment_alloc": 5,
          "segment_free": 6, "segment_map": 7, "segment_unmap": 8}  # include/tensorgc/detail.h
_FREE_REQUESTED = 2


def trace_columns(trace: Trace) -> Columns:
    """One device's trace as the C readers' columns: read from a list of entry dicts (C), or
    taken as they are from a streamed trace (LeanTrace), its action codes translated to the
    readers' kinds (an entry without an action is of no kind)."""
    if not isinstance(trace, LeanTrace):
        return _tensorgc._trace_columns(trace if isinstance(trace, list) else list(trace))
    cols = trace.columns()
    table = bytes(_KINDS.get(a, 0) for a in trace.actions) + bytes(256 - len(trace.actions))
    kinds = cols["action"].translate(table)
    present = trace.present()
    if present is not None:  # keep the kinds of the entries that have an action, zero the rest
        has = present.translate(bytes(0xFF if p & P_ACTION else 0 for p in range(256)))
        kinds = (int.from_bytes(kinds, "little") & int.from_bytes(has, "little")).to_bytes(
            len(kinds), "little")
    return (kinds, cols["addr"], cols["size"], cols["time_us"], cols["stack"], trace.stacks,
            -1, 0)


def _replay(snap: Snapshot, device: DeviceLike, columns: int, detail: int,
            categories: Optional[Mapping[int, str]],
            names: Optional[Mapping[int, str]] = None) -> Tuple[Replay, Trace, Columns]:
    traces = snap.get("device_traces") or []
    index = snapshot_device(snap, device, required=False)
    trace: Trace = traces[index] if index < len(traces) else []
    cols = trace_columns(trace)
    use_req = bytes([_FREE_REQUESTED]) in cols[0]
    # every block alive at the end; the replay keeps those whose address the trace never
    # allocates (they predate it)
    blocks = _alive_blocks(snap, index)
    pre = [(b["address"], b["size"]) for b in blocks]
    got = inputs(snap, index, categories, cols=cols, pre_frames=[b.get("frames") for b in blocks],
                 names=names)
    tl = _tensorgc._timeline(cols, pre, int(columns), int(detail), use_req, got.classify)
    cats = tl["categories"]
    rules = tl["rules"] or []
    tl["inferred"] = any(n for r, n in enumerate(rules) if r >= 8)
    tl["marks"] = got.marks or bool(tl["inferred_spans"]) or tl["inferred"]
    tl["inputs"] = got
    tl["names"] = got.names
    tl["use_req"] = use_req
    tl["pre"] = pre
    if tl["cat_active"] is not None:
        tl["cat_active"] = dict(zip(cats, tl["cat_active"]))
        tl["at_peak"] = dict(zip(cats, tl["at_peak"]))
    return tl, trace, cols


def _alive_blocks(snap: Snapshot, index: int) -> List[Dict[str, Any]]:
    """Every block dict of the device allocated at the snapshot."""
    return [b for s in snap.get("segments", []) if s.get("device") == index
            for b in s.get("blocks", [])
            if b.get("state") == "active_allocated" and "address" in b]


def _alive_at_end(snap: Snapshot, index: int) -> List[Tuple[Any, Any]]:
    """(address, size) of every block of the device allocated at the snapshot."""
    return [(b["address"], b["size"]) for b in _alive_blocks(snap, index)]


def peak_breakdown(tl: Replay) -> Optional[str]:
    """'at the peak (event N, 2.1G): activation 1.2G, parameter 800M, ...' (largest first; None
    without categories); "inferred from the stacks" (or "partly") when rules 8-14 gave
    categories."""
    if not tl.get("at_peak"):
        return None
    parts = [f"{k.replace('_', ' ')} {R(v)}"
             for k, v in sorted(tl["at_peak"].items(), key=lambda kv: -kv[1]) if v]
    at = (f"event {tl['peak_event']:,}" if tl["peak_event"] >= 0 else "before the trace")
    rules = tl.get("rules") or []
    how = ""
    if tl.get("inferred"):
        recorded = any(n for r, n in enumerate(rules) if 1 <= r <= 5)
        how = "; partly inferred from the stacks" if recorded else "; inferred from the stacks"
    return f"at the peak ({at}, {R(tl['max'])}{how}): " + (", ".join(parts) or "nothing")


def categories_at_peak(snap: Snapshot, device: DeviceLike = "cuda") -> Optional[str]:
    """The peak's breakdown by category for one device (the replay in one column, no bands), or
    None when the snapshot has nothing to classify by (nothing recorded, no telling stack)."""
    index = snapshot_device(snap, device, required=False)
    return peak_breakdown(_replay(snap, index, 1, 0, None)[0])


SCAN_FRAMES = 256  # frames looked at per stack: a file may repeat one long stack everywhere
TEXT_MAX = 1000  # characters kept of a string from the file: a file may repeat a long one


# Characters of a string from the file that must not reach a page or a terminal as they are:
# C0 controls (NUL, ESC, newlines...), DEL, C1 controls, and the bidirectional marks and
# overrides that make text read in another order than it is stored. Each becomes its escape,
# so the text stays true (a file name with a NUL in it shows \x00) and stays on one line.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({c: f"\\u{c:04x}" for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                             *range(0x2066, 0x206A))})


def _text(v: object) -> str:
    """A field from the file as display text (the one helper every string from a snapshot goes
    through before a page, or a terminal, shows it; a page escapes it for HTML on top): an int,
    or a str cut to TEXT_MAX characters, lone surrogates replaced (the unpickler lets them
    through, UTF-8 output refuses them) and control characters written as escapes (\x00)."""
    if isinstance(v, int):
        return str(v) if -(1 << 63) <= v < 1 << 64 else "?"
    if not isinstance(v, str):
        return "?"
    v = v[:TEXT_MAX]
    if not v.isascii():
        v = v.encode("utf-8", "replace").decode("utf-8")
    if not v.isprintable():  # in C, and true for nearly every name: the common case is free
        v = v.translate(_ESCAPES)[:TEXT_MAX]
    return v


def _frame_list(entry: object) -> List[Frame]:
    frames = entry.get("frames") if isinstance(entry, dict) else None
    if not isinstance(frames, list):
        return []
    return [f for f in frames[:SCAN_FRAMES] if isinstance(f, dict)]


def _frame_lines(entry: object, limit: int) -> List[str]:
    """'file:line name' of the entry's first ``limit`` Python frames (all frames when none is)."""
    frames = _frame_list(entry)
    py = [f for f in frames if isinstance(f.get("filename"), str)
          and f["filename"].endswith(".py")] or frames
    return [f"{_text(f.get('filename', '?'))}:{_text(f.get('line', '?'))} "
            f"{_text(f.get('name', '?'))}" for f in py[:limit]]


def _frames_text(entry: object, limit: int = 8) -> str:
    return "\n".join(_frame_lines(entry, limit))


STACK_MAX = 64  # frames kept per allocation for the side panel
DETAIL_STACKS = 20_000  # distinct stacks the page carries for its detail view (more: "?")
# Allocations the page carries for its detail view, about 15 bytes each; a longer trace gets the
# overview only (its page would pass about 45 MB)
DETAIL_MAX = 3_000_000
SEGMENTS_MAX = 5_000  # segments the page's allocator-state strip knows
NAMES_MAX = 20_000  # tensor names the page carries (of blocks alive at the end)


def _detail_data(snap: Snapshot, tl: Replay, cols: Columns, index: int) -> Dict[str, Any]:
    """Every allocation of the trace on the replay's clock, as the page's detail view reads it
    (allocator/detail.c makes and encodes it, include/tensorgc/detail.h says how): six varint
    streams in base64 (A allocated at, D duration, S size, E trace entry, K stack, X address),
    the stacks they use as text, and the segments alive at some point (start, end or -1, size,
    address), the trace's and the snapshot's, by address."""
    labels = None
    if tl.get("labels") is not None:
        labels = (tl["labels"], tl["pre_labels"], tl["name_index"], tl["pre_name_index"],
                  tl["names"])
    d = _tensorgc._detail(cols, tl["pre"], tl["use_req"], DETAIL_STACKS, labels)
    stacks = cols[5]
    segs = d["segments"]
    made = {sg[3] for sg in segs}
    for sg in snap.get("segments", []):  # alive at the end and never made by the trace
        addr, size = sg.get("address"), sg.get("total_size")
        if sg.get("device") == index and isinstance(addr, int) and isinstance(size, int) \
                and addr not in made:
            segs.append([0, -1, size, addr])
    segs.sort(key=lambda g: g[3])
    out = {"n": d["n"], "events": d["events"], "unit": d["unit"], "xunit": d["xunit"],
           "streams": [base64.b64encode(b).decode("ascii") for b in d["streams"]],
           "stacks": [[]] + [_stack_lines({"frames": stacks[k]}, STACK_MAX) for k in d["used"]],
           "segments": segs[:SEGMENTS_MAX]}
    if d["cats"] is not None:
        # per allocation: its label (category | rule << 4, bit 7: inferred; categories.
        # describe_label), its name index (little-endian uint32, 0: none) into names
        name_index: bytes = d["name_index"]
        if sys.byteorder == "big":
            swapped = array("I", name_index)
            swapped.byteswap()
            name_index = swapped.tobytes()
        out.update({"cats": base64.b64encode(d["cats"]).decode("ascii"),
                    "categories": list(d["categories"]),
                    "rules": {str(r): t for r, t in RULES.items()},
                    "name_index": base64.b64encode(name_index).decode("ascii"),
                    "names": [_text(n) for n in d["names"]]})
    return out


def _stack_lines(entry: object, limit: int) -> List[str]:
    """Every recorded frame (Python and C++), 'file:line name', the first ``limit``."""
    return [f"{_text(f.get('filename', '?'))}:{_text(f.get('line', '?'))} "
            f"{_text(f.get('name', '?'))}" for f in _frame_list(entry)[:limit]]


def _round_ticks(top: float) -> List[float]:
    """Round values for the y axis: multiples of 1, 2 or 5 of a power of 1024's unit."""
    if top <= 0:
        return [0.0]
    unit = 1.0
    while top / unit >= 1024 and unit < 1024.0 ** 5:
        unit *= 1024
    span = top / unit
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500):
        if span / step <= 6:
            break
    return [k * step * unit for k in range(int(span / step) + 1)]


_TOOLBAR = ('<div class="bar"><button id="tgc-reset" type="button">Reset zoom</button> '
            '<input id="tgc-search" type="search" placeholder="search stacks: file or function"> '
            '<span id="tgc-hits"></span><span id="tgc-status"></span></div>')
_UI: List[str] = []
# The allocator's state at the event under the cursor: its segments to scale, blocks coloured
# as in the timeline (drawn by the script; the detail data carries segments and blocks)
_STATE = ('<p id="tgc-state-text" class="state">Hover the timeline to see the allocator\'s '
          "segments at that event (a trace past the detail bound has none)."
          '</p><svg id="tgc-state" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1280 40" '
          'width="100%"></svg>')


def _ui_script() -> str:
    """The page's script (tensorgc/_timeline_ui.js), read once."""
    if not _UI:
        import os

        with open(os.path.join(os.path.dirname(__file__), "_timeline_ui.js"), encoding="utf-8") as f:
            _UI.append(f.read().replace("</", "<\\/"))
    return _UI[0]


def _json_for_html(obj: object) -> str:
    """JSON that can sit inside a <script> element: no '<', '>' or '&' left as such."""
    import json

    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _color(key: str) -> str:
    h = int.from_bytes(hashlib.blake2s(key.encode("utf-8", "replace"), digest_size=4).digest(), "big")
    return f"hsl({h % 360},{55 + h // 360 % 30}%,{55 + h // 10800 % 15}%)"


def _site(entry: object) -> str:
    frames = _frame_list(entry)
    for f in frames:
        name = f.get("filename")
        if isinstance(name, str) and name.endswith(".py") and "/torch/" not in _text(name):
            return f"{_text(name)}:{_text(f.get('line'))}"
    return _text(frames[0].get("filename", "?")) if frames else "?"


CATEGORY_COLORS = {"parameter": "#7b3fb5", "grad": "#d93b3b", "optimizer_state": "#f0a030",
                   "activation": "#3a8fd9", "buffer": "#2a9d8f", "input": "#c2649a",
                   "temporary": "#9ccc65", "other": "#8c8c8c"}
AREA_HEIGHT, AREA_TOP = 150, 24


def _grey(key: str) -> str:
    """A grey a little different per allocation site: "other" bands, still told apart."""
    h = int.from_bytes(hashlib.blake2s(key.encode("utf-8", "replace"), digest_size=4).digest(), "big")
    return f"hsl({h % 360},6%,{60 + h // 360 % 18}%)"


def _num(v: float) -> str:
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _legend(kinds: Iterable[str], x0: float, y0: float) -> str:
    parts = []
    lx = x0
    for kind in kinds:
        fill = CATEGORY_COLORS.get(kind, CATEGORY_COLORS["other"])
        parts.append(f'<rect x="{lx}" y="{y0}" width="10" height="10" fill="{fill}"/>'
                     f'<text x="{lx + 14}" y="{y0 + 9}" class="ax0">'
                     f"{_html.escape(kind.replace('_', ' '))}</text>")
        lx += 24 + 7 * len(kind)
    return "".join(parts)


def _areas_svg(tl: Replay, cols: int) -> str:
    """Categories over time: the active bytes of each category as stacked areas (the bottom
    category first), on the timeline's columns and scale."""
    series = tl["cat_active"]
    names = [n for n in tl["categories"] if any(series[n])]
    top = max(tl["max"], 1)
    ys = AREA_HEIGHT / top
    base = AREA_TOP + AREA_HEIGHT

    def x(c: int) -> str:
        return _num(LEFT + c * WIDTH / cols)

    def ya(v: float) -> str:
        return _num(base - v * ys)

    at = (f"event {tl['peak_event']:,}" if tl["peak_event"] >= 0 else "the start")
    layers, cum = [], [0] * cols
    for n in names:
        cum = [a + b for a, b in zip(cum, series[n])]
        layers.append((n, cum))
    parts = []
    # the top layer first, each lower one drawn over it: what shows of an area is its own band
    for n, cum in reversed(layers):
        yv = [ya(v) for v in cum]
        # a point at the end of each column, except inside flat runs
        pts = [f"{x(0)},{_num(base)}", f"{x(0)},{yv[0]}"]
        for c in range(cols):
            if (c == cols - 1 or yv[c] != yv[c + 1] or (c > 0 and yv[c] != yv[c - 1])):
                pts.append(f"{x(c + 1)},{yv[c]}")
        pts.append(f"{x(cols)},{_num(base)}")
        tip = f"{n.replace('_', ' ')}: {R(tl['at_peak'][n])} at the peak ({at})"
        parts.append(f'<polygon class="a" fill="{CATEGORY_COLORS.get(n, "#8c8c8c")}" points="'
                     + " ".join(pts) + f'"><title>{_html.escape(tip)}</title></polygon>')
    if tl["peak_pos"] >= 0:
        c = min(cols - 1, tl["peak_pos"] * cols // max(tl["events"], 1))
        tip = f"the peak: {R(tl['max'])} at {at}"
        parts.append(f'<line class="pkl" x1="{x(c)}" x2="{x(c)}" y1="{AREA_TOP}" y2="{base}">'
                     f"<title>{_html.escape(tip)}</title></line>")
    ticks = "".join(f'<text x="{LEFT - 6}" y="{ya(top * k / 2)}" class="ax">'
                    f"{_html.escape(R(top * k / 2))}</text>" for k in range(3))
    # in a group of its own, which the page's script zooms and pans with the timeline above
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {LEFT + WIDTH + 10} '
            f'{base + 8}" width="100%">'
            f'<defs><clipPath id="tgc-aclip"><rect x="{LEFT}" y="0" width="{WIDTH}" '
            f'height="{base}"/></clipPath></defs>'
            f'<rect x="{LEFT}" y="{AREA_TOP}" width="{WIDTH}" height="{AREA_HEIGHT}" class="bg"/>'
            '<g clip-path="url(#tgc-aclip)"><g id="tgc-areas">' + "".join(parts) + "</g></g>"
            + ticks + _legend(names, LEFT, 6) + "</svg>")


def timeline_html(snap: Snapshot, device: DeviceLike = "cuda", detail: int = 300,
                  title: Optional[str] = None, columns: int = WIDTH,
                  categories: Optional[Mapping[int, str]] = None,
                  names: Optional[Mapping[int, str]] = None) -> str:
    """The page (str). ``detail``: how many of the largest allocations get their own band (the
    rest is one summarized band), as memory_viz's slider.

    Categories: with the marks of ``tensorgc.categorize`` in the snapshot (its
    "tensorgc_categories"; torch's optimizer-step annotations count too), every band is coloured
    by category (parameter, grad, optimizer state, activation, temporary, other), a second chart
    stacks the categories over time and the summary gives the peak's breakdown. Without marks,
    the blocks alive at the end that are named (the snapshot's "named", or ``categories``:
    {block address: kind} from the MemReporter taken with it, Report.block_kinds[device]) are
    coloured by kind, the others by allocation site.

    Names: the side panel names an allocation alive at the end whose block the MemReporter
    named: ``names`` ({block address: tensor name}, Report.block_names[device]) or the
    snapshot's own (taken with tensorgc.categorize active); each cut to NAME_MAX characters,
    at most NAMES_MAX of them.

    A device the snapshot does not hold is a ValueError (tensorgc.DeviceError) that lists the
    devices it holds: its page would be empty."""
    device = snapshot_device(snap, device)
    tl, trace, tcols = _replay(snap, device, columns, detail, categories, names)
    # the tensors' names of blocks alive at the end (the given ones win), cut and bounded; the
    # page shows one for an allocation alive at the end at that address
    called = dict(names_of(snap, device))
    called.update((a, n) for a, n in (names or {}).items() if isinstance(a, int)
                  and isinstance(n, str))
    called = {a: _text(n[:NAME_MAX]) for a, n in list(called.items())[:NAMES_MAX]}
    cols = len(tl["active"])
    top = max(tl["max"], 1)
    ys = HEIGHT / top
    names = tl["categories"]

    def y(v: float) -> str:
        return f"{TOP + HEIGHT - v * ys:.1f}"

    def x(c: float) -> str:
        return f"{LEFT + c * WIDTH / cols:.1f}"

    parts = []
    allocs: List[Dict[str, Any]] = []  # the page's data of each band (data-i indexes it)
    band_look: Dict[int, List[str]] = {}  # trace entry -> the band's fill and category
    # bands: top edge left to right, bottom edge back; only points where the offset changes
    legend = {}
    for alloc_ev, free_ev, size, c0, c1, offs, addr, cat, rule in tl["bands"]:
        if c1 <= c0:
            continue
        pts_top, pts_bot = [], []
        prev = None
        for k, off in enumerate(offs):
            if off != prev:
                if prev is not None:
                    pts_top.append(f"{x(c0 + k)},{y(prev + size)}")
                    pts_bot.append(f"{x(c0 + k)},{y(prev)}")
                pts_top.append(f"{x(c0 + k)},{y(off + size)}")
                pts_bot.append(f"{x(c0 + k)},{y(off)}")
                prev = off
        if prev is None:  # no column: nothing to draw
            continue
        pts_top.append(f"{x(c1)},{y(prev + size)}")
        pts_bot.append(f"{x(c1)},{y(prev)}")
        entry = trace[alloc_ev] if 0 <= alloc_ev < len(trace) else {}
        when = (f"allocated at event {alloc_ev}" if alloc_ev >= 0 else "allocated before the trace")
        when += f", freed at event {free_ev}" if free_ev >= 0 else ", alive at the end"
        if tl["marks"]:
            kind = names[cat]
            fill = _grey(_site(entry)) if kind == "other" else CATEGORY_COLORS[kind]
            legend[kind] = True
            when += f"; {kind.replace('_', ' ')} ({RULES.get(rule, '?')})"
        else:
            kind = categories.get(addr) if categories and free_ev < 0 else None
            if kind is None and rule == 1:  # named in the snapshot's own categories
                kind = names[cat]
            if kind is not None:
                kind = _text(kind)
                fill = CATEGORY_COLORS.get(kind, CATEGORY_COLORS["other"])
                legend[kind] = True
                when += f"; {kind}"
            else:
                fill = _color(_site(entry))
        tip = f"{R(size)} ({size:,} bytes), {when}\n{_frames_text(entry) or 'no stack recorded'}"
        cat_name = when.split("; ", 1)[1] if "; " in when else ""
        allocs.append({"size": size, "addr": f"0x{addr:x}" if isinstance(addr, int) else "?",
                       "alloc": alloc_ev, "free": free_ev, "cat": cat_name,
                       "name": called.get(addr, "") if free_ev < 0 else "",
                       "frames": _stack_lines(entry, STACK_MAX)})
        if alloc_ev >= 0:
            band_look[alloc_ev] = [fill, cat_name]
        parts.append(f'<polygon class="b" data-i="{len(allocs) - 1}" fill="{fill}" points="'
                     + " ".join(pts_top + pts_bot[::-1])
                     + f'"><title>{_html.escape(tip)}</title></polygon>')
    # the summarized rest, on top of the bands
    if any(tl["small"]):
        upper = [f"{x(c)},{y(a)} {x(c + 1)},{y(a)}" for c, a in enumerate(tl["active"])]
        lower = [f"{x(c + 1)},{y(a - s)} {x(c)},{y(a - s)}"
                 for c, (a, s) in reversed(list(enumerate(zip(tl["active"], tl["small"]))))]
        n_small = tl["allocs"] - len(tl["bands"])
        parts.append('<polygon class="s" points="' + " ".join(upper + lower) + '"><title>'
                     + _html.escape(f"{n_small:,} smaller allocations, summarized "
                                    f"(raise --detail to draw more of them)") + "</title></polygon>")
    peak = " ".join(f"{x(c)},{y(p)} {x(c + 1)},{y(p)}" for c, p in enumerate(tl["peak"]))
    parts.append(f'<polyline class="pk" points="{peak}"><title>peak within each column</title></polyline>')
    cols_per_event = cols / max(tl["events"], 1)
    for i, at in tl["oom_at"]:
        e = trace[i]
        # the column of an OOM: its position on the replay's clock (pre-existing events first)
        c = min(cols - 1, int(at * cols_per_event))
        tip = f"OOM at event {i}: device free {R(e.get('device_free', 0))}\n{_frames_text(e)}"
        parts.append(f'<line class="oom" data-col="{c}" x1="{x(c)}" x2="{x(c)}" y1="{TOP}" '
                     f'y2="{TOP + HEIGHT}"><title>{_html.escape(tip)}</title></line>')
    over = []  # drawn over the plot, not zoomed: legend, y ticks, axes, brush
    if legend:
        order = [k for k in names if k in legend] + [k for k in legend if k not in names]
        over.append(_legend(order, LEFT + 8, TOP + 6))
    over.append('<g id="tgc-yaxis">')
    for v in _round_ticks(top):
        over.append(f'<text x="{LEFT - 6}" y="{y(v)}" class="ax">{_html.escape(R(v))}</text>'
                    f'<line x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{y(v)}" y2="{y(v)}" class="grid"/>')
    over.append("</g>")
    svg = (f'<svg id="tgc-svg" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {LEFT + WIDTH + 10} '
           f'{TOP + HEIGHT + 30}" width="100%">'
           '<defs><clipPath id="tgc-clip"><rect x="' + str(LEFT) + '" y="0" width="' + str(WIDTH)
           + '" height="' + str(TOP + HEIGHT) + '"/></clipPath>'
           '<pattern id="tgc-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#d8dee6"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="#9aa7b4" stroke-width="2"/></pattern></defs>'
           f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH}" height="{HEIGHT}" class="bg"/>'
           '<g clip-path="url(#tgc-clip)"><g id="tgc-plot">' + "".join(parts) + "</g>"
           '<g id="tgc-detail" transform="scale(0.1)"></g></g>'
           + "".join(over)
           + f'<rect id="tgc-brush" class="brush" x="{LEFT}" y="{TOP}" width="0" height="{HEIGHT}" '
           'visibility="hidden"/>'
           f'<g id="tgc-xaxis"><text x="{LEFT}" y="{TOP + HEIGHT + 20}" class="ax0">event 0</text>'
           f'<text x="{LEFT + WIDTH}" y="{TOP + HEIGHT + 20}" class="ax1">event {len(trace):,}</text></g>'
           "</svg>")
    # about 1,000 times along the trace for the axis's seconds (the time column: INT64_MIN where
    # an entry has none)
    times = list(memoryview(tcols[3]).cast("q")[::max(1, len(trace) // 1000)])
    detail_data = _detail_data(snap, tl, tcols, device) if tl["allocs"] <= DETAIL_MAX else None
    page_data = {"left": LEFT, "width": WIDTH, "top": TOP, "height": HEIGHT,
                 "events": tl["events"], "columns": cols, "allocs": allocs, "max": top,
                 "detail": detail_data, "look": band_look,
                 "names": {str(a): n for a, n in called.items()},
                 "times": times if times and min(times) > -2**63 else []}
    head = title or f"Active memory timeline, cuda:{device}"
    summary = (f"{len(trace):,} trace entries; {tl['allocs']:,} allocations; peak {R(tl['max'])}; "
               f"{len(tl['bands'])} largest drawn one by one, the rest summarized on top "
               f"(hatched); {len(tl['ooms'])} OOM event(s) marked in red (click one to zoom to "
               "it). Wheel to zoom, drag to pan, shift-drag to zoom to a range; click an "
               "allocation to pin its size and stack; search matches stacks."
               + ("" if tl["allocs"] <= DETAIL_MAX else
                  f" This trace has more than {DETAIL_MAX:,} allocations: zooming scales the "
                  "overview, and allocations are not drawn one by one."))
    breakdown = peak_breakdown(tl)
    areas = ""
    if tl["cat_active"] is not None:
        areas = ("<h3>Categories over time</h3><p>"
                 + ("The active bytes of each category, on the columns and scale of the "
                    "timeline above; the dashed line is the peak, hover an area for its bytes "
                    "there." if tl["marks"] else
               "Only the blocks named at the snapshot are known here (no phase or grad marks: "
               "tensorgc.categorize records them); the rest is other.")
            + "</p>" + _areas_svg(tl, cols))
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>"
            + _html.escape(head) + "</title><style>"
            "body{font:14px sans-serif;margin:16px;color:#222}"
            ".bg{fill:#fafafa;stroke:#ccc}.b{stroke:#fff;stroke-width:.3}"
            ".b:hover{stroke:#000;stroke-width:1.5}.s{fill:url(#tgc-hatch)}.s:hover{opacity:.8}"
            ".pk{fill:none;stroke:#444;stroke-width:.6}.oom{stroke:#d00;stroke-width:2;cursor:pointer}"
            ".b,.pk,.oom,.pkl{vector-effect:non-scaling-stroke}.b{cursor:pointer}"
            ".pinned{stroke:#000;stroke-width:2.5}.searching .b{opacity:.25}.d{stroke:#fff;stroke-width:.3}"
            ".d:hover{stroke:#000;stroke-width:1.5}.searching .hit{opacity:1;"
            "stroke:#000;stroke-width:1.5}.grid{stroke:#e4e4e4;stroke-width:.5}"
            ".brush{fill:#3a8fd9;fill-opacity:.15;stroke:#3a8fd9}"
            ".tick{font-size:11px;text-anchor:middle}.tickl{stroke:#888}"
            ".state{font-size:12px;color:#444;margin:4px 0}#tgc-state rect.seg{fill:#fff;"
            "stroke:#999;stroke-width:.5}"
            ".bar{margin:6px 0}.bar input{width:22em}.bar span{margin-left:1em;color:#555}"
            ".wrap{display:flex;gap:12px;align-items:flex-start}.main{flex:1;min-width:0}"
            "#tgc-panel{width:26em;max-height:520px;overflow:auto;border:1px solid #ccc;"
            "padding:8px;font-size:12px}#tgc-panel pre{white-space:pre-wrap;font-size:11px}"
            "#tgc-panel dt{font-weight:bold;float:left;width:6em}#tgc-panel dd{margin-left:6.5em}"
            ".a{stroke:none}.a:hover{opacity:.75}.pkl{stroke:#444;stroke-width:1;"
            "stroke-dasharray:3 3}"
            ".ax{font-size:11px;text-anchor:end;dominant-baseline:middle}"
            ".ax0{font-size:11px}.ax1{font-size:11px;text-anchor:end}"
            "</style></head><body><h2>" + _html.escape(head) + "</h2><p>"
            + _html.escape(summary + (f" {breakdown[0].upper() + breakdown[1:]}."
                                      if breakdown else ""))
            + "</p>" + _TOOLBAR + '<div class="wrap"><div class="main">' + svg + _STATE
            + '</div><aside id="tgc-panel">Click an allocation to pin its size, address and '
            "stack here.</aside></div>" + areas
            + '<script type="application/json" id="tgc-data">' + _json_for_html(page_data)
            + "</script><script>" + _ui_script() + "</script></body></html>")


def timeline(snapshot: Union[Snapshot, StrPath, None] = None, path: Optional[StrPath] = None, *,
             device: DeviceLike = "cuda", detail: int = 300, title: Optional[str] = None,
             categories: Optional[Mapping[int, str]] = None,
             names: Optional[Mapping[int, str]] = None, max_bytes: Optional[int] = None) -> str:
    """The Active Memory Timeline page (as ``tensorgc timeline``), from ``snapshot``: a snapshot
    dict, the path of a snapshot file (read with load_snapshot, which never runs code from it;
    ``max_bytes`` as there), or None for the allocator's history now (tensorgc.snapshot(): needs
    CUDA and record_memory_history). Returns the page; with ``path``, writes it there whole or
    not at all (a temp file, then a rename) and returns the path instead. Arguments as
    timeline_html's; a device the snapshot does not hold is a DeviceError."""
    from .snapshot import DEFAULT_MAX_BYTES, atomic_write, load_snapshot
    from .snapshot import snapshot as take

    if snapshot is None:
        snap: Snapshot = take()
    elif isinstance(snapshot, dict):
        snap = snapshot
    elif isinstance(snapshot, (str, os.PathLike)):
        snap = load_snapshot(snapshot, max_bytes=DEFAULT_MAX_BYTES if max_bytes is None
                             else max_bytes, lean=True)  # the page reads the columns
    else:
        raise TypeError("timeline(snapshot=...) takes a snapshot dict, a file path or None, "
                        f"not {type(snapshot).__name__}")
    page = timeline_html(snap, device=device, detail=detail, title=title,
                         categories=categories, names=names)
    if path is None:
        return page
    inputs = [snapshot] if isinstance(snapshot, (str, os.PathLike)) else []
    return atomic_write(path, lambda f: f.write(page), inputs=inputs)


def classification_inputs(snap: Snapshot, device: Any = "cuda") -> Dict[str, Any]:
    """What classifies the allocations of one device, recorded or inferred: {"device",
    "source" ("recorded", "inferred", "recorded+inferred" or None: nothing classifies),
    "recorded": counts of spans (tensorgc.categorize's), annotation_spans (torch's optimizer
    steps), grads (grad marks), named (blocks alive at the end the reporter named), names and
    name_marks; "inferred": None, or {"stacks": distinct stacks, "phases": {phase: stacks},
    "kinds": {kind: stacks}, "spans": [(phase, t0_us, t1_us)] the spans inferred from them},
    "allocations": {rule text: allocations} (the rules that gave the categories)}."""
    index = snapshot_device(snap, device, required=False)
    tl = _replay(snap, index, 1, 0, None)[0]
    got: Inputs = tl["inputs"]
    inferred = None
    if got.infer:
        hints = got.classify[3] if got.classify is not None else b""
        inferred = {"stacks": len(hints),
                    "phases": {p: sum(1 for h in hints if h & 7 == i)
                               for i, p in enumerate(HINT_PHASES)},
                    "kinds": {k: sum(1 for h in hints if h >> 3 == i)
                              for i, k in enumerate(HINT_KINDS)},
                    "spans": [(PHASES[p], t0, t1) for p, t0, t1 in tl["inferred_spans"] or []]}
    rules = tl.get("rules") or []
    used = {RULES.get(r, f"rule {r}"): n for r, n in enumerate(rules) if n}
    recorded_used = any(n for r, n in enumerate(rules) if 1 <= r <= 5)
    inferred_used = any(n for r, n in enumerate(rules) if r >= 8)
    source = (None if got.classify is None else "recorded+inferred"
              if recorded_used and inferred_used else "inferred" if inferred_used
              else "recorded")
    return {"device": index, "source": source, "recorded": got.recorded, "inferred": inferred,
            "allocations": used}
