"""The timeline page of a snapshot: one self-contained HTML file (no script from anywhere, opens
offline) with memory_viz's three views on one time axis -- the Active Memory Timeline, the
Allocator State History and the Active Cached Segment Timeline -- and, given a second snapshot,
what is alive in one and not in the other.

The trace is read into columns (allocator/columns.c, or the streaming loader's), every
allocation is paired with its free on the trace's own clock (allocator/detail.c: entry i happens
at "event i"), stacks are interned as frame ids (allocator/page.c), and the page carries all of
it as compressed varint streams that page/timeline_ui.js decodes and draws on a canvas.
Every string from the file goes through ``_text`` (cut, control characters escaped) and reaches
the page as JSON text that the script puts in the DOM with textContent, or escaped for HTML.

    html = timeline_html(load_snapshot(path), device="cuda:0", detail=300)

``device`` everywhere here: an index (0), "cuda:N", "cuda" (the first device the snapshot holds)
or a torch.device, as the command line's --device (tensorgc/_common/devices.py parses both).

Bounds (whatever the file holds, the page stays bounded): DETAIL_MAX allocations (the largest,
when a trace has more), DETAIL_STACKS distinct stacks, STACK_FRAMES frames a stack and
FRAME_IDS_MAX frame ids in all, FRAME_TEXT_MAX characters of frame text, TEXT_MAX characters a
string, NAMES_MAX names of NAME_MAX characters, SEGMENTS_MAX segments, EVENTS_MAX entries that no
allocation accounts for (OOMs, segment events, ...), OOM_MARKS OOM buttons in the markup.
"""
from __future__ import annotations

import base64
import bisect
import hashlib
import html as _html
import os
import zlib
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .. import _tensorgc
from .._common.devices import DeviceLike, snapshot_device
from ._lean import P_ACTION, LeanTrace
from .._common.types import Frame, Snapshot, Trace
from .categories import (CATEGORIES, HINT_KINDS, HINT_PHASES, NAME_MAX, PHASES, RULES, Inputs,
                         describe_label, inputs, names_of)
from .._common.units import readable_size as R

__all__ = ["timeline", "timeline_html", "replay", "peak_breakdown", "categories_at_peak",
           "classification_inputs"]

WIDTH = 1200  # the replay's default columns (tensorgc.timeline.replay)


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


def _page_columns(trace: Trace, cols: Columns) -> Columns:
    """The columns with the stream column after them (allocator/columns.c reads it there)."""
    if isinstance(trace, LeanTrace):
        stream = trace.columns()["stream"]
    else:
        stream = _tensorgc._trace_streams(trace if isinstance(trace, list) else list(trace))
    return tuple(cols[:8]) + (stream,)


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


# ------------------------------------------------------------------------------- the page

DETAIL_MAX = 3_000_000  # allocations a page carries (a longer trace: the largest, and a note)
DETAIL_STACKS = 20_000  # distinct stacks a page carries (more: "no stack recorded")
STACK_FRAMES = 256  # frames kept of each stack (deeper: the page says how many more)
FRAME_IDS_MAX = 2_000_000  # frame ids in all the stacks
FRAME_TEXT_MAX = 4_000_000  # characters of frame text (distinct frames past it: "?")
SEGMENTS_MAX = 20_000  # segments the page knows
EVENTS_MAX = 100_000  # trace entries no allocation accounts for (OOMs, segment events, ...)
NAMES_MAX = 50_000  # tensor names the page carries
OOM_MARKS = 1_000  # OOM buttons in the page's markup (all OOMs are in its data)
SERIES_COLUMNS = 2_000  # columns of a snapshot's curve where the page carries one
FALLBACK_BANDS = 100_000  # allocations the replay classifies for the page without categories
COMPRESS_OVER = 16_384  # bytes of binary data past which the page carries it deflated

CATEGORY_COLORS = {"parameter": "#7b3fb5", "grad": "#d93b3b", "optimizer_state": "#f0a030",
                   "activation": "#3a8fd9", "buffer": "#2a9d8f", "input": "#c2649a",
                   "temporary": "#9ccc65", "other": "#b8860b", "workspace": "#6b7b8c",
                   "output": "#00b4d8"}
# colours for category names of another source (a caller's kinds, a newer classifier)
_MORE_COLORS = ("#e377c2", "#17becf", "#bcbd22", "#8c564b", "#ff7f0e", "#1f77b4", "#2ca02c")
NO_CATEGORY = 15  # the page's category index of an allocation of no category (hatched)

# frame flags (the page's filters)
F_NATIVE, F_TORCH, F_NOISE = 1, 2, 4
# memory_viz's frames it never shows (the unwinder, the interpreter's C frames)
_NOISE_NAMES = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
                "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_")
_NOISE_FILES = ("core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c",
                "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c",
                "cpython/abstract.h")
_TORCH_FILES = ("/torch/", "\\torch\\", "torch/csrc", "aten/src", "c10/", "libtorch", "libc10")
_TORCH_NAMES = ("torch::", "c10::", "at::", "at_", "THP", "caffe2::", "c10d::")


def _frame_flags(file: object, name: object) -> int:
    f = file if isinstance(file, str) else ""
    n = name if isinstance(name, str) else ""
    native = not (f.endswith(".py") or f.startswith("<"))
    flags = F_NATIVE if native else 0
    if any(t in f for t in _TORCH_FILES) or f.startswith("torch/") or (
            native and any(n.startswith(t) or f" {t}" in n for t in _TORCH_NAMES)):
        flags |= F_TORCH
    if native and (any(t in n for t in _NOISE_NAMES) or any(t in f for t in _NOISE_FILES)):
        flags |= F_NOISE
    return flags


def _varints(values: Iterable[int]) -> bytes:
    out = bytearray()
    for v in values:
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)


def _hex(addr: object) -> str:
    return f"{addr:x}" if isinstance(addr, int) and 0 <= addr < 1 << 64 else "?"


def _json_for_html(obj: object) -> str:
    """JSON that can sit inside a <script> element: no '<', '>' or '&' left as such."""
    import json

    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


class _Model:
    """One device's trace reduced to what a page carries (see _model)."""

    def __init__(self) -> None:
        self.data: Dict[str, Any] = {}
        self.parts: List[Tuple[str, str, bytes]] = []  # (name, format, bytes)
        self.trace: Trace = []
        self.n = 0
        self.d: Dict[str, Any] = {}
        self.cats: Optional[bytearray] = None  # per allocation (all of them), NO_CATEGORY: none
        self.cat_names: List[str] = []
        self.stack_text: Dict[int, List[str]] = {}
        self.frames: List[Tuple[str, str, int]] = []  # (file:line, name, flags)
        self.stack_ids: List[List[int]] = []  # dense stack id - 1 -> frame ids
        self.names: List[str] = []
        self.name_of: Dict[int, int] = {}  # allocation -> index into names + 1
        self.peak = 0
        self.peak_at = -1
        self.peak_bycat: Dict[str, int] = {}
        self.top: List[int] = []
        self.ooms: List[List[Any]] = []
        self.marks = False
        self.inferred = False
        self.recorded = False
        self.got: Any = None


def _labels_of(m: _Model, snap: Snapshot, index: int, cols: Columns,
               blocks: List[Dict[str, Any]], use_req: bool,
               categories: Optional[Mapping[int, str]],
               names: Optional[Mapping[int, str]]) -> Optional[Tuple[Any, ...]]:
    """The replay's label (category | rule << 4) and name index of every trace entry and block
    alive at the end, for _detail to give each allocation its own; None when nothing classifies
    (nothing recorded, no telling stack). Sets m.marks and m.inferred as the replay says."""
    pre = [(b["address"], b["size"]) for b in blocks]
    got = inputs(snap, index, categories, cols=cols, pre_frames=[b.get("frames") for b in blocks],
                 names=names)
    m.got = got
    if got.classify is None:
        return None
    tl = _tensorgc._timeline(cols, pre, 1, 0, use_req, got.classify)
    rules = tl["rules"] or []
    m.inferred = any(n for r, n in enumerate(rules) if r >= 8)
    m.recorded = any(n for r, n in enumerate(rules) if 1 <= r <= 5)
    m.marks = got.marks or bool(tl["inferred_spans"]) or m.inferred
    if tl.get("labels") is None:
        return None
    return (tl["labels"], tl["pre_labels"], tl["name_index"], tl["pre_name_index"], got.names)


def _cats_of(m: _Model, categories: Optional[Mapping[int, str]]) -> None:
    """Every allocation's label (m.cats: the category in the low four bits, the rule in the high
    four, rule 0: of no category) and the category names, from the detail engine; then the
    caller's kinds of blocks alive at the end (``categories``) win for those blocks, under the
    caller's name (cut, escaped) when it is none of ours."""
    d = m.d
    total = d["total"]
    names = list(d.get("categories") or CATEGORIES)
    cats = bytearray(d["cats"]) if isinstance(d.get("cats"), (bytes, bytearray)) else None
    if categories:
        raw = d["raw"]
        f = memoryview(raw["f"]).cast("Q")
        x = memoryview(raw["x"]).cast("Q")
        want = {a: _text(k)[:40] for a, k in categories.items() if isinstance(a, int)}
        if cats is None:
            cats = bytearray(total)
        for j in range(total):
            if f[j] == 2**64 - 1 and x[j] in want:
                kind = {"saved_for_backward": "activation"}.get(want[x[j]], want[x[j]])
                if kind not in names:
                    if len(names) >= NO_CATEGORY:
                        continue
                    names.append(kind)
                cats[j] = names.index(kind) | 1 << 4
    if cats is not None and not m.marks:
        # with no phase known, "outside forward, backward and steps" says nothing: of no
        # category (hatched), as the summary says
        cats = bytearray(cats.translate(bytes(0 if c >> 4 == 6 else c for c in range(256))))
    m.cats = cats
    m.cat_names = names


def _frames_of(m: _Model, stacks: List[Any], used: List[int]) -> None:
    """The stacks the page shows (dense id k: stacks[used[k - 1]]) as frame ids, and the
    distinct frames as text with their flags, within the page's bounds."""
    frames, ids, lens, full = _tensorgc._stack_frames(stacks, used, STACK_FRAMES, FRAME_IDS_MAX)
    text, budget = [], FRAME_TEXT_MAX
    for key in frames:
        if key is None:
            text.append(("?", "?", F_NATIVE))
            continue
        file, line, name = key
        where, what = f"{_text(file)}:{_text(line)}", _text(name)
        budget -= len(where) + len(what)
        if budget < 0:
            where, what = "?", "(frame text past the page's bound)"
        text.append((where, what, _frame_flags(file, name)))
    m.frames = text
    m.parts.append(("FI", "u32", ids))
    m.parts.append(("FL", "u32", lens))
    m.parts.append(("FF", "u32", full))
    lv = memoryview(lens).cast("I")
    iv = memoryview(ids).cast("I")
    pos = 0
    m.stack_ids = []
    for u in range(len(lv)):
        m.stack_ids.append(list(iv[pos:pos + lv[u]]))
        pos += lv[u]


def _stack_lines_of(m: _Model, k: int, limit: int = 64) -> List[str]:
    """'file:line name' of dense stack k (0: none)."""
    if k <= 0 or k > len(m.stack_ids):
        return []
    return [f"{m.frames[f][0]} {m.frames[f][1]}" for f in m.stack_ids[k - 1][:limit]]


def _site_of(m: _Model, k: int) -> str:
    """Where an allocation of dense stack k was made: its first frame of the user's Python code
    (not native, not torch's), else its first Python frame, else its first frame."""
    if k <= 0 or k > len(m.stack_ids):
        return "no stack recorded"
    ids = m.stack_ids[k - 1]
    for unwanted in (F_NATIVE | F_TORCH | F_NOISE, F_NATIVE, F_NOISE, 0):
        for f in ids:
            if not m.frames[f][2] & unwanted:
                return f"{m.frames[f][0]} {m.frames[f][1]}"
    return "no stack recorded"


def _model(snap: Snapshot, index: int, categories: Optional[Mapping[int, str]] = None,
           names: Optional[Mapping[int, str]] = None, columns: int = 1,
           max_allocs: Optional[int] = None, top: int = 0) -> _Model:
    """One device's page data: the C engines' output, its categories, stacks, names, segments
    and the entries no allocation accounts for."""
    m = _Model()
    traces = snap.get("device_traces") or []
    trace: Trace = traces[index] if index < len(traces) else []
    m.trace = trace
    cols = _page_columns(trace, trace_columns(trace))
    use_req = bytes([_FREE_REQUESTED]) in cols[0]
    n = len(cols[0])
    m.n = n
    # the blocks alive at the end, with their stacks (a block from before the trace has no
    # alloc entry: the block's own frames say where it was made)
    blocks = _alive_blocks(snap, index)
    labels = _labels_of(m, snap, index, cols, blocks, use_req, categories, names)
    stacks = list(cols[5])
    pre_k: List[Tuple[int, int, int]] = []
    for b in blocks:
        fr = b.get("frames")
        k = 0
        if isinstance(fr, list) and fr:
            k = len(stacks)
            stacks.append(fr)
        pre_k.append((b["address"], b["size"], k))
    pcols = tuple(cols[:5]) + (stacks,) + tuple(cols[6:])
    d = _tensorgc._detail(pcols, pre_k, use_req, DETAIL_STACKS, labels,
                          DETAIL_MAX if max_allocs is None else max_allocs,  # max_allocs
                          0, None, True, max(0, top))  # columns, cats, raw, top
    m.d = d
    _cats_of(m, categories)
    raw = d["raw"]
    d["series"] = _tensorgc._series(raw["a"], raw["f"], raw["s"], n,
                                    bytes(m.cats) if m.cats is not None else None,
                                    max(1, min(columns, n))) if n else None
    total, kept = d["total"], d["n"]
    keep = d["keep"]
    # per allocation: category, name
    if m.cats is not None:
        cats = bytes(m.cats) if keep is None else bytes(
            c for c, k in zip(m.cats, keep) if k)
        m.parts.append(("CT", "u8", cats))
    # the stacks: every dense id the allocations use, then those of segments and other entries
    used = list(d["used"])
    dense = {cid: i + 1 for i, cid in enumerate(used)}
    stack_col = memoryview(cols[4]).cast("I")

    def dense_of(cid: int) -> int:
        if cid == 0:
            return 0
        if cid not in dense:
            if len(used) >= DETAIL_STACKS + 2 * EVENTS_MAX:
                return 0
            used.append(cid)
            dense[cid] = len(used)
        return dense[cid]

    kinds = cols[0]
    addrs = memoryview(cols[1]).cast("Q")
    sizes = memoryview(cols[2]).cast("Q")
    streams = memoryview(cols[8]).cast("q")
    lean = trace if isinstance(trace, LeanTrace) else None
    devfree = memoryview(lean.columns()["device_free"]).cast("Q") if lean is not None else None
    other = memoryview(d["other"]).cast("I")
    events = []
    for i in other[:EVENTS_MAX]:
        kd = kinds[i]
        if kd == 0:
            events.append([i, 0, "", 0, 0, 0, 0, _text(_action_of(trace, i))])
            continue
        extra, size = 0, sizes[i]
        if kd == _KINDS["oom"]:
            if devfree is not None:
                extra = devfree[i]
            else:  # the columns of a list hold no OOM's numbers: its entry does
                e = trace[i]
                v = e.get("device_free") if isinstance(e, dict) else None
                extra = v if isinstance(v, int) and 0 <= v < 1 << 64 else 0
                v = e.get("size") if isinstance(e, dict) else None
                size = v if isinstance(v, int) and 0 <= v < 1 << 64 else 0
            m.ooms.append([i, size, extra])
        events.append([i, kd, _hex(addrs[i]), size, streams[i], dense_of(stack_col[i]),
                       extra, ""])
    # segments: the trace's, then those alive at the end that it never made
    segs = []
    made = set()
    seg_info = {}
    for s in snap.get("segments", []):
        if s.get("device") == index and isinstance(s.get("address"), int):
            seg_info[s["address"]] = s
    segfree_at: Dict[int, int] = {}
    for start, end, size, addr, by, ended, version in d["segments"][:SEGMENTS_MAX]:
        made.add(addr)
        if ended >= 0:
            segfree_at[addr] = segfree_at.get(addr, 0) + 1
        info = seg_info.get(addr, {}) if end < 0 else {}
        k = dense_of(stack_col[by]) if by >= 0 else 0
        stream = streams[by] if by >= 0 else (streams[ended] if ended >= 0 else 0)
        expandable = (kinds[by] == _KINDS["segment_map"]) if by >= 0 else False
        pool, guessed = _pool(info, size)
        segs.append([start, end, size, _hex(addr), stream, pool, k, version,
                     1 if expandable else 0, guessed])
    for addr, s in seg_info.items():
        if addr in made or len(segs) >= SEGMENTS_MAX:
            continue
        size = s.get("total_size")
        if not isinstance(size, int) or size < 0:
            continue
        fr = s.get("frames")
        k = 0
        if isinstance(fr, list) and fr and len(used) < DETAIL_STACKS + 2 * EVENTS_MAX:
            stacks.append(fr)
            used.append(len(stacks) - 1)
            k = len(used)
        stream = s.get("stream") if isinstance(s.get("stream"), int) else 0
        pool, guessed = _pool(s, size)
        segs.append([0, -1, size, _hex(addr), stream, pool, k, segfree_at.get(addr, 0),
                     1 if s.get("is_expandable") is True else 0, guessed])
    _frames_of(m, stacks, used)
    # names: the detail engine's of every allocation, else those the reporter gave the blocks
    # alive at the end (the page finds them by address)
    called: Dict[int, str] = {}
    if isinstance(d.get("names"), list) and isinstance(d.get("name_index"), (bytes, bytearray)) \
            and len(d["names"]) > 1:
        m.names = [_text(v)[:NAME_MAX] for v in d["names"][:NAMES_MAX]]
        m.parts.append(("NI", "u32", _name_index(d["name_index"], keep, len(m.names),
                                                 len(d["names"]))))
    else:
        called = dict(names_of(snap, index))
        called.update((a, v) for a, v in (names or {}).items() if isinstance(a, int)
                      and isinstance(v, str))
        called = {a: _text(v[:NAME_MAX]) for a, v in list(called.items())[:NAMES_MAX]}
    for t, (name, fmt, blob) in enumerate(_streams_of(d)):
        m.parts.insert(t, (name, fmt, blob))
    series = d["series"]
    if series is not None:
        m.peak, m.peak_at = series["peak"], series["peak_at"]
        m.top = list(series["top"])
        for c, v in enumerate(series["peak_bycat"]):
            if v:
                key = m.cat_names[c] if m.cats is not None and c < len(m.cat_names) else ""
                m.peak_bycat[key] = m.peak_bycat.get(key, 0) + v
    m.data = {
        "n": n, "allocs": kept, "total": total, "npre": d["npre"], "unit": d["unit"],
        "xunit": d["xunit"], "free": "free_requested" if use_req else "free_completed",
        "t0": d["t0"], "timed": d["timed"],
        "cats": _legend_data(m), "frames": m.frames, "segs": segs, "events": events,
        "names": m.names, "names_at": {_hex(a): v for a, v in called.items()},
        "top": d["top"],  # the `top` largest: what the first paint draws one by one
        "stacks_cut": max(0, len(d["used"]) - DETAIL_STACKS) if len(d["used"]) > DETAIL_STACKS
        else 0, "events_cut": max(0, len(other) - EVENTS_MAX),
    }
    m.parts.append(("T", "var", d["times"]))
    return m


def _action_of(trace: Trace, i: int) -> object:
    e = trace[i]
    return e.get("action") if isinstance(e, dict) else None


def _pool(info: Mapping[str, Any], size: int) -> Tuple[str, int]:
    """A segment's pool, and 1 when it is guessed: the snapshot's segment_type (and private pool
    id) where it knows the segment; else the caching allocator's rule (2 MiB segments are the
    small pool's, the others the large pool's)."""
    kind = info.get("segment_type") if isinstance(info, Mapping) else None
    pool = info.get("segment_pool_id") if isinstance(info, Mapping) else None
    if isinstance(kind, str):
        out = _text(kind)[:20]
        if isinstance(pool, (tuple, list)) and any(pool):
            out += " (private pool " + ",".join(_text(p)[:20] for p in pool[:2]) + ")"
        return out, 0
    return ("small" if size == 2 << 20 else "large"), 1


def _name_index(index: bytes, keep: Optional[bytes], limit: int, names: int) -> bytes:
    """The detail engine's per-allocation name index (uint32, 0: none) of the kept ones; those
    past the `limit` names the page carries read 0."""
    from array import array

    if keep is None and names <= limit:
        return bytes(index)  # every index points into the names, all carried
    v = array("I", index)
    if keep is not None:
        v = array("I", (x for x, k in zip(v, keep) if k))
    return array("I", (x if x < limit else 0 for x in v)).tobytes()


def _streams_of(d: Mapping[str, Any]) -> List[Tuple[str, str, bytes]]:
    return [(name, "var", blob) for name, blob in zip("ADSKXCRVW", d["streams"])]


def _legend_data(m: _Model) -> Dict[str, Any]:
    """The categories' names and colours, and what each label present says (the category and
    why: categories.describe_label)."""
    names = [n if isinstance(n, str) else "?" for n in m.cat_names]
    colors = [CATEGORY_COLORS.get(n, _MORE_COLORS[i % len(_MORE_COLORS)])
              for i, n in enumerate(names)]
    labels = {}
    for label in sorted(set(m.cats or b"")):
        cat, rule = label & 15, label >> 4
        if rule == 0 or cat >= len(names):
            continue
        labels[str(label)] = (describe_label(label) if cat < len(CATEGORIES)
                              and names[cat] == CATEGORIES[cat] else
                              f"{_text(names[cat])} ({RULES.get(rule, '?')})")
    return {"names": [_text(n).replace("_", " ") for n in names], "colors": colors,
            "labels": labels, "known": m.cats is not None, "marks": m.marks}


FIRST_PARTS = ("A", "D", "S", "CT")  # what the page's first paint reads: they come first


def _blob(parts: List[Tuple[str, str, bytes]]) -> Dict[str, Any]:
    """The binary parts as one base64 text (deflated past COMPRESS_OVER bytes: the page inflates
    it with the browser's DecompressionStream), with each part's name, format and length; the
    parts of the first paint first, so that it can start before the rest is inflated."""
    parts = sorted(parts, key=lambda p: (p[0] not in FIRST_PARTS,
                                         FIRST_PARTS.index(p[0]) if p[0] in FIRST_PARTS else 0))
    raw = b"".join(p[2] for p in parts)
    z = len(raw) > COMPRESS_OVER
    body = zlib.compress(raw, 1) if z else raw
    return {"z": z, "b64": base64.b64encode(body).decode("ascii"),
            "parts": [[name, fmt, len(b)] for name, fmt, b in parts]}


def _peak_table(m: _Model) -> str:
    """The largest allocations alive at the peak, as an HTML table (the page's answer before its
    script runs)."""
    if not m.top:
        return ""
    raw = m.d["raw"]
    s = memoryview(raw["s"]).cast("Q")
    k = memoryview(raw["k"]).cast("I")
    a = memoryview(raw["a"]).cast("Q")
    x = memoryview(raw["x"]).cast("Q")
    rows = []
    for j in m.top:
        cat = "no category"
        if m.cats is not None and m.cats[j] >> 4 and (m.cats[j] & 15) < len(m.cat_names):
            cat = _text(m.cat_names[m.cats[j] & 15]).replace("_", " ")
            if m.cats[j] >> 4 and m.marks and (m.cats[j] & 15) < len(CATEGORIES):
                cat = describe_label(m.cats[j])
        when = (f"event {a[j]:,}" if j >= m.d["npre_total"] else "before the trace")
        rows.append(f"<tr><td>{_html.escape(R(s[j]))}</td><td>{_html.escape(cat)}</td>"
                    f"<td>{_html.escape(when)}</td><td><code>b{x[j]:x}</code></td>"
                    f"<td>{_html.escape(_site_of(m, k[j]))}</td></tr>")
    return ('<table class="peak"><caption>The largest allocations alive at the peak</caption>'
            "<tr><th>size</th><th>category</th><th>allocated</th><th>address</th>"
            "<th>where</th></tr>" + "".join(rows) + "</table>")


def _legend_svg(m: _Model, breakdown: Dict[str, int], at: str) -> str:
    """The legend: one swatch per category present (its colour in every view), its bytes at the
    peak in its title, and the hatch of bytes of no category."""
    names = m.data["cats"]["names"]
    colors = m.data["cats"]["colors"]
    present = set()
    if m.cats is not None:
        present = {c & 15 for c in set(m.cats)}
    items, x = [], 0
    for i, (n, col) in enumerate(zip(names, colors)):
        if i not in present:
            continue
        b = breakdown.get(m.cat_names[i], 0)
        tip = f"{n}: {R(b)} at the peak ({at})"
        items.append(f'<g class="lg" data-cat="{i}"><title>{_html.escape(tip)}</title>'
                     f'<rect x="{x}" y="2" width="12" height="12" fill="{col}"/>'
                     f'<text x="{x + 16}" y="12">{_html.escape(n)}</text></g>')
        x += 26 + 7 * len(n)
    if m.cats is None or NO_CATEGORY in present or any((c & 15) >= len(names) for c in present):
        label = ("no category (nothing to classify by: tensorgc.categorize records it)"
                 if m.cats is None else "no category")
        b = breakdown.get("", 0)
        items.append(f'<g class="lg" data-cat="{NO_CATEGORY}"><title>'
                     + _html.escape(f"bytes of no category: hatched; {R(b)} at the peak ({at})")
                     + f'</title><rect x="{x}" y="2" width="12" height="12" '
                     'fill="url(#tgc-hatch)" stroke="#777" stroke-width=".5"/>'
                     f'<text x="{x + 16}" y="12">{_html.escape(label)}</text></g>')
        x += 26 + 7 * len(label)
    return (f'<svg id="tgc-legend" xmlns="http://www.w3.org/2000/svg" width="{x + 10}" '
            'height="16"><defs><pattern id="tgc-hatch" width="6" height="6" '
            'patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" '
            'height="6" fill="#e3e6ea"/><line x1="0" y1="0" x2="0" y2="6" stroke="#8d98a5" '
            'stroke-width="2"/></pattern></defs>' + "".join(items) + "</svg>")


def _breakdown(m: _Model) -> Dict[str, int]:
    """Bytes per category at the peak ("" for no category)."""
    return dict(m.peak_bycat)


def _summary(m: _Model, breakdown: Dict[str, int], detail: int) -> str:
    d = m.d
    at = f"event {m.peak_at:,}" if m.peak_at >= 0 else "before the trace"
    text = (f"{m.n:,} trace entries; {d['total']:,} allocations; peak {R(m.peak)} at {at}; "
            f"{len(m.ooms)} OOM event(s). The {detail:,} largest allocations in view are drawn "
            "one by one (Detail), the rest as one area per category.")
    if d["n"] < d["total"]:
        text += (f" This trace has {d['total']:,} allocations, more than the page's bound of "
                 f"{d['n']:,}: it carries the {d['n']:,} largest, the rest are summarized.")
    parts = [f"{k.replace('_', ' ') if k else 'no category'} {R(v)}"
             for k, v in sorted(breakdown.items(), key=lambda kv: -kv[1]) if v]
    how = ""
    if m.inferred:
        how = "; partly inferred from the stacks" if m.recorded else "; inferred from the stacks"
    if m.cats is not None and parts:
        text += f" At the peak ({at}, {R(m.peak)}{how}): " + ", ".join(parts) + "."
    if m.cats is not None and not m.marks:
        text += (" Only the blocks named at the snapshot are known here (no phase or grad "
                 "marks: tensorgc.categorize records them); the rest has no category.")
    return text


_UI: List[str] = []


def _ui_script() -> str:
    """The page's script (page/timeline_ui.js, then page/timeline_views.js beside this file:
    one function in two files), read once."""
    if not _UI:
        parts = []
        here = os.path.join(os.path.dirname(__file__), "page")
        for name in ("timeline_ui.js", "timeline_views.js"):
            with open(os.path.join(here, name), encoding="utf-8") as f:
                parts.append(f.read())
        _UI.append("\n".join(parts).replace("</", "<\\/"))
    return _UI[0]


_STYLE = (
    "body{font:14px sans-serif;margin:12px 16px;color:#222}h2{margin:4px 0 6px}"
    ".summary{margin:4px 0;max-width:80em}.tabs{margin:8px 0 4px;display:flex;gap:4px}"
    ".tabs button{font:inherit;padding:4px 10px;border:1px solid #bbb;background:#f4f4f4;"
    "border-radius:4px 4px 0 0;cursor:pointer}.tabs button[aria-selected=true]{background:#fff;"
    "border-bottom-color:#fff;font-weight:bold}.bar{margin:4px 0;display:flex;flex-wrap:wrap;"
    "gap:4px 12px;align-items:center}.bar input[type=search]{width:20em}"
    ".bar label{white-space:nowrap}#tgc-status,#tgc-hits{color:#555}"
    "#tgc-legend{font-size:12px;vertical-align:middle}.ooms{margin:2px 0;font-size:12px}"
    ".ooms button{font:inherit;color:#b00;border:1px solid #d99;background:#fff5f5;margin:1px;"
    "cursor:pointer}.wrap{display:flex;gap:12px;align-items:flex-start}.main{flex:1;min-width:0}"
    ".plot{position:relative;height:440px;user-select:none}.plot canvas{position:absolute;left:0;"
    "top:0}.plot svg{position:absolute;left:0;top:0;pointer-events:none;overflow:visible}"
    ".tick{font-size:11px;text-anchor:middle;fill:#333}.ytick{font-size:11px;text-anchor:end;"
    "dominant-baseline:middle;fill:#333}.nav{position:relative;height:64px;margin-top:4px}"
    ".nav canvas{position:absolute;left:0;top:0}.navlabel{font-size:12px;color:#444;margin-top:4px}#tgc-panel{width:27em;max-height:640px;"
    "overflow:auto;border:1px solid #ccc;padding:8px;font-size:12px}"
    "#tgc-panel dt{font-weight:bold;float:left;width:6.5em;clear:left}"
    "#tgc-panel dd{margin-left:7em;word-break:break-all}"
    ".from{font-weight:bold;margin:2px 0}pre.stack{white-space:pre-wrap;word-break:break-all;font-size:11px;margin:4px 0}"
    "pre.stack .n{color:#777}pre.stack .t{color:#555}pre.stack .r{color:#999;font-style:italic}"
    ".tip{position:fixed;z-index:9;max-width:46em;max-height:70vh;overflow:hidden;"
    "background:#fffffa;border:1px solid #999;box-shadow:2px 2px 6px #0003;padding:6px;"
    "font-size:12px;pointer-events:none}.tip pre{white-space:pre-wrap;word-break:break-all;"
    "margin:4px 0 0;font-size:11px}.state{display:grid;grid-template-columns:minmax(40em,1fr) 1fr;"
    "gap:8px;height:600px}.events{overflow:auto;font:12px monospace;border:1px solid #ccc;"
    "position:relative;outline:none}.events div.row{position:absolute;left:0;right:0;height:16px;"
    "line-height:16px;white-space:pre;padding-left:4px;cursor:pointer}.events div.sel"
    "{background:#edc949}.events div.oomrow{color:#b00}.events div.hov{background:#eef}"
    ".segpane{position:relative;border:1px solid #ccc;overflow:hidden}"
    "#tgc-info{white-space:pre-wrap;word-break:break-all;font:11px monospace;max-height:220px;"
    "overflow:auto;border:1px solid #ddd;padding:4px;margin:6px 0}table.cmp,table.peak"
    "{border-collapse:collapse;font-size:12px;margin:6px 0}table.cmp td,table.cmp th,"
    "table.peak td,table.peak th{border:1px solid #ddd;padding:2px 6px;text-align:left}"
    "table.cmp td.b,table.peak td:first-child{text-align:right}table.cmp tr.row{cursor:pointer}"
    "caption{text-align:left;font-weight:bold}.note{color:#555;font-size:12px}"
    "#tgc-seglegend span.sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 10px;"
    "vertical-align:middle}"
    "[hidden]{display:none!important}")


def _tabs(compare: bool) -> str:
    views = [("mem", "Active Memory Timeline"), ("state", "Allocator State History"),
             ("segs", "Active Cached Segment Timeline")]
    if compare:
        views.append(("cmp", "Compare"))
    return ('<nav class="tabs" role="tablist">' + "".join(
        f'<button type="button" role="tab" data-view="{v}" id="tgc-tab-{v}" '
        f'aria-selected="{"true" if k == 0 else "false"}">{t}</button>'
        for k, (v, t) in enumerate(views)) + "</nav>")


_BAR = ('<div class="bar"><button id="tgc-reset" type="button">Reset zoom</button>'
        '<label title="how many allocations in view are drawn one by one, the largest first; '
        'the rest are drawn as one area per category">Detail <input id="tgc-detail-n" '
        'type="range" min="0" max="{max}" value="{val}"> <span id="tgc-detail-v">{val}</span>'
        '</label><input id="tgc-search" type="search" placeholder="search: stack text, name, '
        'address or b7f..._0"> <span id="tgc-hits"></span>'
        '<label><input type="checkbox" id="tgc-f-native"> hide C++ frames</label>'
        '<label><input type="checkbox" id="tgc-f-torch"> hide torch internals</label>'
        '<label><input type="checkbox" id="tgc-f-fold" checked> fold repeated frames</label>'
        '<label title="the unwinder\'s and the interpreter\'s own frames, as memory_viz hides '
        'them"><input type="checkbox" id="tgc-f-noise" checked> hide interpreter frames</label>'
        '<span id="tgc-status"></span></div>')


def _views_html(categories: bool) -> str:
    plot = ('<div class="plot" id="tgc-plot"><canvas id="tgc-canvas"></canvas>'
            '<canvas id="tgc-overlay"></canvas><svg id="tgc-axes" '
            'xmlns="http://www.w3.org/2000/svg"><g id="tgc-yaxis"></g><g id="tgc-xaxis"></g>'
            "</svg></div>")
    nav = ('<div class="navlabel">{label}</div><div class="nav" id="tgc-nav" '
           'title="the whole trace: drag to choose a range"><canvas id="tgc-navc"></canvas>'
           '<canvas id="tgc-navo"></canvas></div>')
    state = ('<section id="tgc-view-state" hidden><div class="state"><div class="events" '
             'id="tgc-events" tabindex="0"><div id="tgc-events-in"></div></div><div '
             'class="segpane" id="tgc-segpane"><canvas id="tgc-segc"></canvas></div></div>'
             '<pre id="tgc-info">Select an event (click, or the arrow keys) to see the '
             "allocator's segments after it; hover an event, a segment or a block for its "
             "stack.</pre></section>")
    cmp_ = ('<section id="tgc-view-cmp" hidden><div class="plot" id="tgc-cmpplot" '
            'style="height:260px"><canvas id="tgc-cmpc"></canvas></div><div id="tgc-cmp">'
            "</div></section>")
    label = ("Categories over time, the whole trace (drag to choose a range)" if categories
             else "The whole trace (drag to choose a range)")
    return ('<section id="tgc-view-plot">' + plot + "</section>" + state + cmp_
            + nav.format(label=label))


def _page(title: str, summary: str, legend: str, ooms: List[List[Any]], data: Dict[str, Any],
          detail: int, peak_table: str, compare: bool, notes: str = "") -> str:
    oom_html = ""
    if ooms:
        oom_html = ('<div class="ooms">' + "".join(
            f'<button type="button" class="oom" data-event="{i}" title="zoom to it">'
            f"OOM at event {i:,}: requested {_html.escape(R(size))}, "
            f"{_html.escape(R(free))} free</button>" for i, size, free in ooms[:OOM_MARKS])
            + (f" and {len(ooms) - OOM_MARKS:,} more" if len(ooms) > OOM_MARKS else "")
            + "</div>")
    bar = _BAR.format(max=max(1, min(data["allocs"], 20000)), val=max(0, min(detail, 20000)))
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>"
            + _html.escape(title) + "</title><style>" + _STYLE + "</style></head><body>"
            + "<h2>" + _html.escape(title) + "</h2><p class=\"summary\">"
            + _html.escape(summary) + "</p>" + notes + _tabs(compare) + bar
            + '<div class="bar" id="tgc-legend-bar">' + legend
            + '<span id="tgc-seglegend" hidden></span></div>' + oom_html
            + '<div class="wrap"><div class="main">' + _views_html(data["cats"]["known"])
            + '</div><aside id="tgc-panel">Click an allocation, a block or an event to pin it '
            "here: its size, address, category, name and stack.</aside></div>"
            + '<div id="tgc-tip" class="tip" hidden></div>' + peak_table
            + '<script type="application/json" id="tgc-data">' + _json_for_html(data)
            + "</script><script>" + _ui_script() + "</script></body></html>")


def _page_data(m: _Model, detail: int) -> Dict[str, Any]:
    data = dict(m.data)
    data["detail"] = max(0, int(detail))
    data["blob"] = _blob(m.parts)
    data["ooms"] = m.ooms
    return data


def timeline_html(snap: Snapshot, device: DeviceLike = "cuda", detail: int = 300,
                  title: Optional[str] = None, columns: int = WIDTH,
                  categories: Optional[Mapping[int, str]] = None,
                  names: Optional[Mapping[int, str]] = None,
                  baseline: Optional[Snapshot] = None) -> str:
    """The page (str): the Active Memory Timeline, the Allocator State History and the Active
    Cached Segment Timeline of one device, on one time axis (the trace position, "event N").
    ``detail``: how many of the largest allocations in view are drawn one by one (the rest:
    one area per category), as memory_viz's slider, which the page has too.

    Categories: every allocation is coloured by its category, the same colour in every view:
    the detail engine's categories where it gives them; with the marks of
    ``tensorgc.categorize`` in the snapshot (its "tensorgc_categories"; torch's optimizer-step
    annotations count too), the replay's; without marks, the blocks alive at the end that are
    named (the snapshot's "named", or ``categories``: {block address: kind} from the
    MemReporter taken with it, Report.block_kinds[device]). Bytes of no category are hatched.

    Names: the detail engine's names of every allocation where it gives them; else those of the
    blocks alive at the end that the MemReporter named: ``names`` ({block address: tensor
    name}, Report.block_names[device]) or the snapshot's own (taken with tensorgc.categorize
    active); each cut to NAME_MAX characters, at most NAMES_MAX of them.

    ``baseline``: another snapshot of the same device: the page also shows its curve on the
    same axis and what is alive at the end of this snapshot and not of the baseline, by
    category, name and allocation site (the Compare view). ``columns`` is kept for callers of
    the former page and no longer used.

    A device the snapshot does not hold is a ValueError (tensorgc.DeviceError) that lists the
    devices it holds: its page would be empty."""
    index = snapshot_device(snap, device)
    m = _model(snap, index, categories, names, columns=SERIES_COLUMNS if baseline else 1,
               top=min(max(0, int(detail)), 20000))
    breakdown = _breakdown(m)
    at = f"event {m.peak_at:,}" if m.peak_at >= 0 else "before the trace"
    head = title or f"Active memory timeline, cuda:{index}"
    data = _page_data(m, detail)
    notes = ""
    if baseline is not None:
        bindex = snapshot_device(baseline, index, required=False)
        mb = _model(baseline, bindex, None, None, columns=SERIES_COLUMNS)
        data["compare"] = _compare_data(mb, m)
        notes = ('<p class="note">Compared with a baseline snapshot: its curve is drawn over '
                 "this one's, and the Compare view lists what is alive at the end of this "
                 "snapshot and not of the baseline.</p>")
    return _page(head, _summary(m, breakdown, detail), _legend_svg(m, breakdown, at), m.ooms,
                 data, detail, _peak_table(m), baseline is not None, notes)


# ------------------------------------------------------------------------------- comparing

def _alive_groups(m: _Model) -> Dict[Tuple[str, str, str], List[int]]:
    """The allocations alive at the end of a model's trace, by (category, name, site):
    [count, bytes]."""
    raw = m.d["raw"]
    f = memoryview(raw["f"]).cast("Q")
    s = memoryview(raw["s"]).cast("Q")
    k = memoryview(raw["k"]).cast("I")
    x = memoryview(raw["x"]).cast("Q")
    names_at = {a: v for a, v in m.data.get("names_at", {}).items()}
    name_idx = None
    for name, fmt, blob in m.parts:
        if name == "NI" and m.d.get("keep") is None:
            name_idx = memoryview(blob).cast("I")
    sites: Dict[int, str] = {}
    out: Dict[Tuple[str, str, str], List[int]] = {}
    alive = 2**64 - 1
    for j in range(m.d["total"]):
        if f[j] != alive:
            continue
        c = m.cats[j] & 15 if m.cats is not None else NO_CATEGORY
        cat = _text(m.cat_names[c]).replace("_", " ") if c < len(m.cat_names) else "no category"
        if name_idx is not None:
            name = m.names[name_idx[j]] if 0 < name_idx[j] < len(m.names) else ""
        else:
            name = names_at.get(_hex(x[j]), "")
        if k[j] not in sites:
            sites[k[j]] = _site_of(m, k[j])
        row = out.setdefault((cat, name, sites[k[j]]), [0, 0])
        row[0] += 1
        row[1] += s[j]
    return out


COMPARE_ROWS = 200  # rows of each table of the Compare view


def _compare_data(a: _Model, b: _Model) -> Dict[str, Any]:
    """What is alive at the end of b and not of a, by category, name and allocation site (an
    allocation is matched by those three and its size: the two runs' addresses differ), and both
    curves."""
    ga, gb = _alive_groups(a), _alive_groups(b)

    def table(field: int) -> List[List[Any]]:
        acc: Dict[str, List[int]] = {}
        for groups, sign in ((gb, 1), (ga, -1)):
            for key, (count, size) in groups.items():
                row = acc.setdefault(key[field], [0, 0, 0, 0])
                if sign > 0:
                    row[0] += count
                    row[1] += size
                else:
                    row[2] += count
                    row[3] += size
        rows: List[List[Any]] = [[k, *v] for k, v in acc.items()
                                 if v[1] != v[3] or v[0] != v[2]]
        rows.sort(key=lambda r: -(int(r[2]) - int(r[4])))
        return rows[:COMPARE_ROWS]

    def curve(m: _Model) -> Dict[str, Any]:
        series = m.d.get("series") or {"max": [], "at": []}
        return {"n": m.n, "max": series["max"], "at": series["at"], "peak": m.peak,
                "peak_at": m.peak_at}

    only = sum(v[1] for v in gb.values()) - sum(v[1] for v in ga.values())
    return {"a": curve(a), "b": curve(b), "by_category": table(0), "by_name": table(1),
            "by_site": table(2), "alive_a": sum(v[1] for v in ga.values()),
            "alive_b": sum(v[1] for v in gb.values()), "delta": only}


def timeline(snapshot: Union[Snapshot, StrPath, None] = None, path: Optional[StrPath] = None, *,
             device: DeviceLike = "cuda", detail: int = 300, title: Optional[str] = None,
             categories: Optional[Mapping[int, str]] = None,
             names: Optional[Mapping[int, str]] = None, max_bytes: Optional[int] = None,
             baseline: Union[Snapshot, StrPath, None] = None) -> str:
    """The timeline page (as ``tensorgc timeline``), from ``snapshot``: a snapshot dict, the path
    of a snapshot file (read with load_snapshot, which never runs code from it; ``max_bytes`` as
    there), or None for the allocator's history now (tensorgc.snapshot(): needs CUDA and
    record_memory_history). ``baseline``: a snapshot dict or path to compare with (as
    ``tensorgc timeline A B --compare``: A is the baseline). Returns the page; with ``path``,
    writes it there whole or not at all (a temp file, then a rename) and returns the path
    instead. Arguments as timeline_html's; a device the snapshot does not hold is a
    DeviceError."""
    from .snapshot import DEFAULT_MAX_BYTES, atomic_write, load_snapshot
    from .snapshot import snapshot as take

    def load(s: Union[Snapshot, StrPath, None], what: str) -> Snapshot:
        if isinstance(s, dict):
            return s
        if isinstance(s, (str, os.PathLike)):
            return load_snapshot(s, max_bytes=DEFAULT_MAX_BYTES if max_bytes is None
                                 else max_bytes, lean=True)  # the page reads the columns
        raise TypeError(f"timeline({what}=...) takes a snapshot dict, a file path or None, "
                        f"not {type(s).__name__}")

    snap = take() if snapshot is None else load(snapshot, "snapshot")
    base = None if baseline is None else load(baseline, "baseline")
    page = timeline_html(snap, device=device, detail=detail, title=title,
                         categories=categories, names=names, baseline=base)
    if path is None:
        return page
    inputs = [p for p in (snapshot, baseline) if isinstance(p, (str, os.PathLike))]
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
                    "kinds": {k: sum(1 for h in hints if (h >> 3) & 7 == i)
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
