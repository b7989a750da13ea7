"""The allocator's segment map at any event of a snapshot's trace (or at an OOM), as a
self-contained HTML page: one row per segment, its live allocations drawn where they sit, hover
for size and stack. The reconstruction is C (allocator/segmap.c); strings from the file are
escaped.

    html = segments_html(load_snapshot(path), at=12345)     # after trace[:12345]
    html = segments_html(load_snapshot(path), oom=0)        # just before the first OOM
"""
from __future__ import annotations

import html as _html
from typing import Any, Dict, List, Optional, Tuple

from .. import _tensorgc
from .._common.devices import DeviceLike, snapshot_device
from ._lean import LeanTrace, action_counts, as_list, positions
from .._common.types import Snapshot, Trace
from .._common.units import readable_size as R
from .timeline import _color, _frame_list, _frames_text, _site

__all__ = ["segments_html", "segment_map"]

ROW, WIDTH, LEFT, MAX_ROWS = 18, 1000, 150, 2000


Span = Tuple[int, int, int]  # (address, size, event; -1: before the trace)


def segment_map(snap: Snapshot, device: DeviceLike = "cuda", at: Optional[int] = None,
                oom: Optional[int] = None) -> Tuple[int, List[Span], List[Span], Trace]:
    """(upto, segments, allocations, trace): the state after trace[:upto]; segments and
    allocations as (addr, size, event) with event -1 when it predates the trace. ``device``: an
    index, "cuda:N", "cuda" (the first device the snapshot holds) or a torch.device; one the
    snapshot does not hold has no segments."""
    device = snapshot_device(snap, device, required=False)
    traces = snap.get("device_traces") or []
    trace = traces[device] if device < len(traces) else []
    if oom is not None:
        ooms = positions(trace, "oom")
        if not ooms:
            raise ValueError(f"oom={oom!r}: no OOM event in the trace of cuda:{device}")
        if not isinstance(oom, int) or isinstance(oom, bool) or not -len(ooms) <= oom < len(ooms):
            raise ValueError(f"oom={oom!r}: the trace of cuda:{device} has {len(ooms)} OOM "
                             "event(s)")
        upto = ooms[oom]
    elif at is not None:
        if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= len(trace):
            raise ValueError(f"at={at!r} is outside the trace of cuda:{device} "
                             f"(0..{len(trace)})")
        upto = at
    else:
        upto = len(trace)
    use_req = (action_counts(trace).get("free_requested", 0) > 0 if isinstance(trace, LeanTrace)
               else any(e.get("action") == "free_requested" for e in trace))
    # the reconstruction reads a list of dicts: a LeanTrace's entries are made for it (as_list)
    items = _tensorgc._segmap(as_list(trace), snap.get("segments", []), device, upto, use_req)
    segs = [(a, s, e) for k, a, s, e in items if k == 0]
    allocs = [(a, s, e) for k, a, s, e in items if k == 1]
    return upto, segs, allocs, trace


def _block_frames(snap: Snapshot, device: int) -> Dict[Tuple[int, int], Dict[str, Any]]:
    """{(address, size): the block's dict} of the snapshot's live blocks that carry frames: the
    stacks of a history recorded with enabled="state" (whose trace keeps one entry), and of
    allocations older than the trace."""
    out: Dict[Tuple[int, int], Dict[str, Any]] = {}
    for seg in snap.get("segments", []):
        if not isinstance(seg, dict) or seg.get("device", device) != device:
            continue
        start = seg.get("address")
        if not isinstance(start, int):
            continue
        addr: int = start
        for b in seg.get("blocks", []):
            if not isinstance(b, dict):
                break
            size = b.get("size")
            if not isinstance(size, int):
                break
            if b.get("state") == "active_allocated" and b.get("frames"):
                out[(addr, size)] = b
            addr += size
    return out


SITES = 20  # allocation sites listed under the map


def _oom_request(trace: Trace, upto: int) -> Tuple[int, Optional[int]]:
    """(the size the OOM entry asked for, the device's free bytes it recorded or None)."""
    entry = trace[upto] if 0 <= upto < len(trace) else {}
    size = entry.get("size") if isinstance(entry, dict) else None
    free = entry.get("device_free") if isinstance(entry, dict) else None
    return (size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0,
            free if isinstance(free, int) and not isinstance(free, bool) else None)


def _gap(sa: int, ss: int, addr: int, size: int, y: int, request: int, gaps: List[int]) -> str:
    """A free block of a segment at an OOM, outlined: red when too small for the request."""
    gaps.append(size)
    x0 = LEFT + (addr - sa) * WIDTH / max(ss, 1)
    w = max(size * WIDTH / max(ss, 1), 0.5)
    small = size < request
    tip = (f"free {R(size)} at +{addr - sa:#x} of the segment: "
           + (f"too small for the request of {R(request)}" if small else
              f"as large as the request of {R(request)}"))
    return (f'<rect class="g{"" if small else " fit"}" x="{x0:.1f}" y="{y + 2}" '
            f'width="{w:.1f}" height="{ROW - 4}"><title>{_html.escape(tip)}</title></rect>')


def segments_html(snap: Snapshot, device: DeviceLike = "cuda", at: Optional[int] = None,
                  oom: Optional[int] = None, title: Optional[str] = None) -> str:
    """The page (str) of the segment map after trace[:at] (default: the end) or just before the
    ``oom``-th OOM. A device the snapshot does not hold is a ValueError (tensorgc.DeviceError)
    that lists the devices it holds: its page would be empty. Each allocation's stack is its
    trace entry's, else (a history recorded with enabled="state", or an allocation older than
    the trace) the stack of the snapshot's block at the same address and size; the largest
    allocation sites (file:line) are listed under the map."""
    device = snapshot_device(snap, device)
    upto, segs, allocs, trace = segment_map(snap, device=device, at=at, oom=oom)
    blocks = _block_frames(snap, device)
    request = _oom_request(trace, upto) if oom is not None else None
    gaps: List[int] = []  # the sizes of the free blocks of the segments drawn
    sites: Dict[str, List[int]] = {}
    rows = segs[:MAX_ROWS]
    parts = []
    j = 0
    allocs = sorted(allocs)
    for r, (sa, ss, se) in enumerate(rows):
        y = 10 + r * ROW
        used = 0
        inner = []
        while j < len(allocs) and allocs[j][0] < sa:
            j += 1
        k = j
        free_at = sa  # the end of the last allocation: a free block runs from there
        while k < len(allocs) and allocs[k][0] < sa + ss:
            a, s, e = allocs[k]
            if request is not None and a > free_at:
                inner.append(_gap(sa, ss, free_at, a - free_at, y, request[0], gaps))
            free_at = max(free_at, a + s)
            used += s
            entry = trace[e] if 0 <= e < len(trace) else {}
            if not _frame_list(entry):
                entry = blocks.get((a, s), entry)
            x0 = LEFT + (a - sa) * WIDTH / max(ss, 1)
            w = max(s * WIDTH / max(ss, 1), 0.5)
            tip = (f"{R(s)} at +{a - sa:#x} of the segment; "
                   + (f"allocated at event {e}" if e >= 0 else "allocated before the trace")
                   + f"\n{_frames_text(entry) or 'no stack recorded'}")
            site = _site(entry)
            tally = sites.setdefault(site, [0, 0])
            tally[0] += s
            tally[1] += 1
            inner.append(f'<rect class="a" x="{x0:.1f}" y="{y + 2}" width="{w:.1f}" '
                         f'height="{ROW - 4}" fill="{_color(site)}">'
                         f"<title>{_html.escape(tip)}</title></rect>")
            k += 1
        if request is not None and sa + ss > free_at:
            inner.append(_gap(sa, ss, free_at, sa + ss - free_at, y, request[0], gaps))
        j = k  # drawn once: segments from a file may overlap, each row would redraw them all
        parts.append(f'<rect class="s" x="{LEFT}" y="{y + 1}" width="{WIDTH}" height="{ROW - 2}">'
                     f"<title>{_html.escape(f'segment {sa:#x}: {R(ss)}, {R(used)} allocated')}"
                     "</title></rect>")
        parts.extend(inner)
        parts.append(f'<text x="{LEFT - 6}" y="{y + ROW / 2}" class="ax">'
                     f"{_html.escape(f'{R(ss)} ({R(used)} used)')}</text>")
    h = 20 + len(rows) * ROW
    where = (f"just before OOM event {upto}" if oom is not None
             else f"after trace entry {upto - 1:,}" if upto else "before the first trace entry")
    head = title or f"Allocator segments of cuda:{device}, {where}"
    total = sum(s for _, s, _ in segs)
    live = sum(s for _, s, _ in allocs)
    summary = (f"{len(segs)} segments, {R(total)} reserved, {len(allocs)} allocations, "
               f"{R(live)} allocated ({where}; {len(trace):,} trace entries)."
               + (f" The first {MAX_ROWS} segments are drawn." if len(segs) > MAX_ROWS else "")
               + " Each row is one segment scaled to the width; hover an allocation for its "
               "size and stack.")
    if request is not None:
        size, free = request
        fit = sum(g >= size for g in gaps)
        summary += (f" The request that failed: {R(size)}"
                    + (f", with {R(free)} free on the device" if free is not None else "")
                    + f". Free blocks in these segments: {len(gaps):,}"
                    + (f", the largest {R(max(gaps))}" if gaps else "")
                    + ("; every one too small for the request (red outline)." if not fit else
                       f"; {fit:,} as large as the request (green outline: the allocator did not "
                       "use them, as they belong to another stream or pool, or rounding made "
                       "the request larger), the rest too small (red outline)."))
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {LEFT + WIDTH + 10} {h}" '
           f'width="100%">' + "".join(parts) + "</svg>")
    top = sorted(sites.items(), key=lambda kv: (-kv[1][0], kv[0]))[:SITES]
    legend = "".join(
        f'<tr><td><span class="k" style="background:{_color(site)}"></span>'
        f"{_html.escape(site)}</td><td class=\"n\">{_html.escape(R(nbytes))}</td>"
        f'<td class="n">{count:,}</td></tr>' for site, (nbytes, count) in top)
    if legend:
        more = len(sites) - len(top)
        legend = ("<h3>Allocation sites of the segments drawn</h3><table><tr><th>site (the first "
                  "frame outside torch)</th><th>allocated</th><th>allocations</th></tr>"
                  + legend + "</table>"
                  + (f"<p>{more:,} more sites.</p>" if more > 0 else ""))
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>" + _html.escape(head)
            + "</title><style>body{font:14px sans-serif;margin:16px;color:#222}"
            ".s{fill:#eee;stroke:#bbb}.g{fill:#fff;stroke:#c62828;stroke-width:1.2}"
            ".g.fit{stroke:#2e7d32}.a{stroke:#fff;stroke-width:.3}.a:hover{stroke:#000;"
            "stroke-width:1.5}.ax{font-size:11px;text-anchor:end;dominant-baseline:middle}"
            "table{border-collapse:collapse}td,th{padding:2px 8px;text-align:left}"
            "td.n{text-align:right}.k{display:inline-block;width:10px;height:10px;"
            "margin-right:6px}"
            "</style></head><body><h2>" + _html.escape(head) + "</h2><p>" + _html.escape(summary)
            + "</p>" + svg + legend + "</body></html>")
