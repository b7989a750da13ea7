"""Many ranks' snapshots side by side: what ``tensorgc stats`` prints and ``tensorgc timeline``
draws when given several snapshot files or a directory of them (one a rank, as
``tensorgc.dump_snapshot(directory)`` writes them).

Each file is replayed (tensorgc.timeline.replay: the C replay, ``active`` and ``peak`` per
column, ``oom_at``) and reduced to a RankSnapshot, then dropped: a run holds one snapshot at a
time. The page is one offline file (inline SVG and CSS, no script): a summary table that points
at the rank that peaks highest and the one that runs out of memory first, then one chart a
rank on the same axes. The x axis is the wall clock (the traces' ``time_us``) where every trace
has times, else the event number (the replay's clock, each rank's own), and the page says
which. Every string from a file (names, stacks) is cut to a bound and escaped.
"""
from __future__ import annotations

import array
import html as _html
import os
import re
import shlex
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._common.devices import held_text, snapshot_devices
from .._common.types import Snapshot
from .._common.units import readable_size as R

__all__ = ["RankSnapshot", "rank_of", "order_files", "rank_snapshots", "common_clock",
           "pointers", "stats_text", "ranks_html", "MAX_FILES"]

MAX_FILES = 512      # snapshot files one command reads (each is read and dropped in turn)
SCAN_MAX = 100_000   # entries of a directory looked at for them
COLUMNS = 400        # columns of each rank's chart (200 past 64 files: the page stays small)
MARKS_MAX = 50       # OOM markers drawn per rank (the first ones; the table counts them all)
NAME_MAX = 200       # characters of a file name shown
LEFT, WIDTH, TOP, HEIGHT = 90, 1100, 8, 80

_RANK = re.compile(r"rank[-_]?(\d{1,9})(?!\d)", re.I)


def rank_of(path: str) -> Optional[int]:
    """The rank a file's name carries ('snapshot-rank3.pickle' -> 3), else None."""
    m = _RANK.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def order_files(paths: Sequence[str]) -> List[str]:
    """By the rank in the name (rank2 before rank10), then by name; files without a rank in
    their name after those with one."""
    def key(p: str) -> Tuple[int, int, str]:
        r = rank_of(p)
        return (0, r, os.path.basename(p)) if r is not None else (1, 0, os.path.basename(p))
    return sorted(paths, key=key)


def _label_text(v: str, n: int = NAME_MAX) -> str:
    from ..allocator.timeline import _text

    s = _text(v)
    return s if len(s) <= n else s[:n - 1] + "…"


@dataclass
class RankSnapshot:
    """One device of one snapshot file, reduced to what the table and the chart need."""
    path: str
    label: str                      # "rank 3", or the file's name where it carries no rank
    rank: Optional[int]
    device: Optional[int]           # None: the file holds no such device
    note: str = ""                  # why there are no numbers (device missing)
    peak: int = 0                   # the replay's maximum of active bytes
    reserved: int = 0               # at the snapshot: the segments' bytes
    allocated: int = 0              # at the snapshot: the allocated blocks' bytes
    allocs: int = 0                 # alloc entries in the trace
    entries: int = 0                # trace entries
    events: int = 0                 # the replay's clock: blocks alive before it, then events
    ooms: List[Tuple[int, int, Optional[int], str]] = field(default_factory=list)
    # each OOM: (trace entry, event, time_us or None, tooltip); at most MARKS_MAX kept
    oom_count: int = 0
    times: Optional[Tuple[int, int]] = None  # first and last time_us, where every entry has one
    device_name: str = ""           # what the file calls the device ("cpu" for a stand-in)

    @property
    def where(self) -> str:
        """The device as the table shows it: the file's own name for it, else cuda:N."""
        return self.device_name or f"cuda:{self.device}"
    active: List[int] = field(default_factory=list)
    peaks: List[int] = field(default_factory=list)  # peak within each column
    bounds: List[float] = field(default_factory=list)  # column edges: time_us (clock) ...
    bounds_events: List[float] = field(default_factory=list)  # ... and events

    @property
    def first_oom(self) -> Optional[Tuple[int, int, Optional[int], str]]:
        return self.ooms[0] if self.ooms else None


def _reduce(snap: Snapshot, path: str, label: str, rank: Optional[int], index: int,
            totals: Dict[int, Dict[str, int]], columns: int) -> RankSnapshot:
    from ..allocator.timeline import _KINDS, _frames_text, _replay

    # the trace is read through its columns (a streamed trace's as they are): no entry is made
    tl, trace, tcols = _replay(snap, index, columns, 0, None)
    n = int(tl["events"])
    kinds = tcols[0]
    free = _KINDS["free_requested" if tl["use_req"] else "free_completed"]
    counted = (_KINDS["alloc"], free, _KINDS["oom"])
    t = totals.get(index, {})
    out = RankSnapshot(path, label, rank, index, peak=int(tl["max"]),
                       reserved=int(t.get("reserved", 0)), allocated=int(t.get("allocated", 0)),
                       allocs=int(tl["allocs"]), entries=len(trace), events=n,
                       oom_count=len(tl["ooms"]), active=list(tl["active"]),
                       peaks=list(tl["peak"]))
    cols = len(out.active)
    out.bounds_events = [c * n / cols for c in range(cols + 1)]
    times = array.array("q", tcols[3])  # INT64_MIN where an entry has no time
    timed = bool(times) and min(times) > -2**63
    if timed:
        first, last = times[0], max(times)  # the latest time: a file may be out of order
        # the earliest too (not the first entry's): the common clock starts there, so an OOM
        # stamped before the trace's first entry is not shown at a negative "+-0.005 s"
        out.times = (min(times), last)
        # the time of each column's edge: the last event the column holds (blocks alive
        # before the trace are at its first entry's time)
        npre = max(0, n - sum(kinds.count(bytes((k,))) for k in counted))
        edges = [float(first)] * (cols + 1)
        k, c, now = npre, 0, float(first)
        stops = [((c + 1) * n) // cols for c in range(cols)]
        while c < cols and stops[c] <= k:
            c += 1
            edges[c] = now
        for kind, at_us in zip(kinds, times):
            if kind not in counted:
                continue
            k += 1
            now = max(now, float(at_us))
            while c < cols and stops[c] <= k:
                c += 1
                edges[c] = now
        out.bounds = edges
    for i, at in tl["oom_at"][:MARKS_MAX]:
        e = trace[i]
        when = int(e["time_us"]) if timed else None
        tip = (f"OOM at trace entry {i:,} (event {at:,}): device free "
               f"{R(e.get('device_free', 0) or 0)}\n{_frames_text(e, 3)}").rstrip()
        out.ooms.append((int(i), int(at), when, tip))
    return out


# A snapshot's key naming a device index that is not a CUDA device: {index: "cpu"} in a stand-in
# made from CPU tensors (demos/ranks.py --spawn); torch writes no such key.
DEVICE_NAMES = "tensorgc_device_names"


def rank_snapshots(snap: Snapshot, path: str, device: Optional[int] = None,
                   columns: int = COLUMNS, first: bool = False) -> List[RankSnapshot]:
    """The RankSnapshot of each CUDA device the file holds (``first``: of the first one only;
    ``device``: of that one only, and a file without it gets a row that says so)."""
    from .. import allocator

    rank = rank_of(path)
    base = f"rank {rank}" if rank is not None else _label_text(os.path.basename(path), 60)
    held = snapshot_devices(snap)
    _, totals, _ = allocator.attribute(snap["segments"], [])
    want = (held[:1] if first else held) if device is None else [device]
    if not held or (device is not None and device not in held):
        what = "no device" if device is None else f"no cuda:{device}"
        return [RankSnapshot(path, base, rank, None,
                             note=f"{what} in this file (it holds {held_text(held)})")]
    rows = [_reduce(snap, path, base, rank, d, totals, columns) for d in want]
    names = snap.get(DEVICE_NAMES)
    for r in rows:  # a snapshot made for another device (a CPU stand-in) names it
        name = names.get(r.device) if isinstance(names, dict) else None
        if isinstance(name, str) and name:
            r.device_name = _label_text(name, 12)
    # a rank's file holds every device its process touched (NCCL touches the others): the
    # devices where nothing was allocated or reserved are left out while one has something
    used = [r for r in rows if r.peak or r.reserved or r.allocs or r.oom_count]
    return used if used and device is None else rows


def common_clock(rows: Sequence[RankSnapshot]) -> Optional[Tuple[int, int]]:
    """(earliest, latest) time_us over every row, where every row's trace has times and they
    advance; None otherwise (the axis is then the event number)."""
    live = [r for r in rows if r.device is not None]
    if not live or any(r.times is None for r in live):
        return None
    t0 = min(r.times[0] for r in live if r.times)
    t1 = max(r.times[1] for r in live if r.times)
    return (t0, t1) if t1 > t0 else None


def _when(r: RankSnapshot, oom: Tuple[int, int, Optional[int], str],
          clock: Optional[Tuple[int, int]]) -> str:
    if clock is not None and oom[2] is not None:
        return f"+{(oom[2] - clock[0]) / 1e6:.3f} s"
    return f"event {oom[1]:,}"


def _oom_time(r: RankSnapshot) -> int:
    """The first OOM's time_us (a row with an OOM, on a common clock)."""
    return r.first_oom[2] or 0 if r.first_oom is not None else 0


def pointers(rows: Sequence[RankSnapshot], clock: Optional[Tuple[int, int]]) -> List[str]:
    """'rank 2 peaks highest: ...' and 'rank 1 runs out of memory first: ...' (or that none
    does)."""
    live = [r for r in rows if r.device is not None]
    out: List[str] = []
    if not live:
        return ["no file holds a CUDA device to compare"]
    top = max(live, key=lambda r: r.peak)  # the first of equals: the lowest rank
    name = f"{top.label} ({top.where})" if len(live) > len({r.label for r in live}) \
        else top.label
    if len(live) >= 2:
        med = statistics.median(r.peak for r in live)
        over = top.peak - med
        if over <= 0:
            out.append(f"every rank peaks at the same: {R(top.peak)}")
        else:
            pct = f" (+{100.0 * over / med:.0f}%)" if med > 0 else ""
            out.append(f"{name} peaks highest: {R(top.peak)}, +{R(over)}{pct} over the "
                       f"median ({R(med)})")
    else:
        out.append(f"{name} peaks at {R(top.peak)}")
    oomed = [r for r in live if r.first_oom is not None]
    if not oomed:
        out.append("no rank runs out of memory (no OOM entry in any trace)")
    elif clock is not None:
        first = min(oomed, key=_oom_time)
        assert first.first_oom is not None
        others = len(oomed) - 1
        out.append(f"{first.label} runs out of memory first: at {_when(first, first.first_oom, clock)}"
                   f" (wall clock){f'; {others} other rank(s) do too' if others else ''}")
    else:
        listed = ", ".join(f"{r.label} (event {r.first_oom[1]:,})" for r in oomed[:16]
                           if r.first_oom is not None)
        out.append(f"ranks that run out of memory: {listed}; not every trace has times "
                   "(time_us), so which came first is not known")
    return out


def stats_text(rows: Sequence[RankSnapshot], what: str) -> str:
    """`tensorgc stats` of several files: a row per rank and device, then the pointers."""
    clock = common_clock(rows)
    width = max([len(r.label) for r in rows] + [4])
    lines = [f"{what}: {len(rows)} row(s), one per rank and device"
             + (" (ranks from the file names)" if any(r.rank is not None for r in rows) else ""),
             f"{'rank':<{width}s}  {'device':<7s}{'peak':>10s}{'reserved':>10s}"
             f"{'allocated':>11s}{'allocs':>9s}{'OOMs':>6s}  first OOM"]
    for r in rows:
        if r.device is None:
            lines.append(f"{r.label:<{width}s}  {r.note}")
            continue
        first = _when(r, r.first_oom, clock) if r.first_oom else "-"
        lines.append(f"{r.label:<{width}s}  {r.where:<7s}{R(r.peak):>10s}"
                     f"{R(r.reserved):>10s}{R(r.allocated):>11s}{r.allocs:>9,d}"
                     f"{r.oom_count:>6d}  {first}")
    lines.append("-" * 79)
    lines.extend(pointers(rows, clock))
    lines.append("peak: the most active bytes the trace reaches (tensorgc timeline draws it); "
                 "reserved and allocated: at the snapshot; first OOM: "
                 + ("seconds after the earliest trace entry of all files (time_us)"
                    if clock else "the event number in that rank's own trace"))
    lines.append("files:")
    for r in rows:
        lines.append(f"  {r.label}: {_label_text(r.path)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- the page

_STYLE = ("body{font:14px sans-serif;margin:16px;color:#222}table.sum{border-collapse:collapse;"
          "margin:8px 0}table.sum td,table.sum th{border:1px solid #ccc;padding:3px 8px;"
          "text-align:right}table.sum td.l,table.sum th.l{text-align:left}"
          "tr.hi td{background:#fff3cd}tr.first td{background:#fde2e2}"
          ".lead{font-weight:bold}.rank{margin:10px 0 2px}.rank h3{margin:0;font-size:14px}"
          ".open{font-size:12px;color:#555;margin:0 0 6px}.open code{user-select:all}"
          ".bg{fill:#fafafa;stroke:#ccc}.pk{fill:#9cc3e6;stroke:none}"
          ".ac{fill:none;stroke:#1f5f99;stroke-width:1}.oom{stroke:#d00;stroke-width:2}"
          ".dot{fill:#000}.ax{font-size:11px}.ax1{font-size:11px;text-anchor:end}"
          ".ay{font-size:11px;text-anchor:end;dominant-baseline:middle}")


def _num(v: float) -> str:
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _chart(r: RankSnapshot, clock: Optional[Tuple[int, int]], max_events: int,
           top: int) -> str:
    """One rank's SVG: the peak per column as an area, the active bytes at each column's end
    as a line, the rank's peak as a dot and its OOMs as red lines, on the common axes."""
    esc = _html.escape
    span = (clock[1] - clock[0]) if clock else max(max_events, 1)
    base = clock[0] if clock else 0
    edges = r.bounds if clock else r.bounds_events

    def X(v: float) -> str:  # inside the plot, whatever a file's times say
        return _num(LEFT + WIDTH * min(1.0, max(0.0, (v - base) / span)))

    def Y(v: float) -> str:
        return _num(TOP + HEIGHT - HEIGHT * v / max(top, 1))

    bottom = _num(TOP + HEIGHT)
    area = [f"{X(edges[0])},{bottom}"]
    line: List[str] = []
    prev_p = prev_a = None
    for c, (p, a) in enumerate(zip(r.peaks, r.active)):
        x0, x1 = X(edges[c]), X(edges[c + 1])
        if p != prev_p:
            area.append(f"{x0},{Y(p)}")
        if c == len(r.peaks) - 1 or r.peaks[c + 1] != p:
            area.append(f"{x1},{Y(p)}")
        if a != prev_a:
            line.append(f"{x0},{Y(a)}")
        if c == len(r.active) - 1 or r.active[c + 1] != a:
            line.append(f"{x1},{Y(a)}")
        prev_p, prev_a = p, a
    area.append(f"{X(edges[-1])},{bottom}")
    parts = [f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH}" height="{HEIGHT}" class="bg"/>',
             f'<polygon class="pk" points="{" ".join(area)}"/>']
    if line:
        parts.append(f'<polyline class="ac" points="{" ".join(line)}"/>')
    if r.peaks:
        c = max(range(len(r.peaks)), key=lambda k: r.peaks[k])
        cx = (float(X(edges[c])) + float(X(edges[c + 1]))) / 2
        parts.append(f'<circle class="dot" cx="{_num(cx)}" cy="{Y(r.peaks[c])}" r="3">'
                     f"<title>{esc(f'peak {R(r.peak)}')}</title></circle>")
    for i, at, when, tip in r.ooms:
        x = X(when if clock and when is not None else at + 0.5)
        parts.append(f'<line class="oom" x1="{x}" x2="{x}" y1="{TOP}" y2="{bottom}">'
                     f"<title>{esc(tip)}</title></line>")
    if clock:
        left, right = "+0.000 s", f"+{(clock[1] - clock[0]) / 1e6:.3f} s"
    else:
        left, right = "event 0", f"event {max_events:,}"
    parts.append(f'<text x="{LEFT}" y="{TOP + HEIGHT + 14}" class="ax">{esc(left)}</text>'
                 f'<text x="{LEFT + WIDTH}" y="{TOP + HEIGHT + 14}" class="ax1">{esc(right)}'
                 f'</text><text x="{LEFT - 6}" y="{TOP}" class="ay">{esc(R(top))}</text>'
                 f'<text x="{LEFT - 6}" y="{bottom}" class="ay">0</text>')
    return (f'<svg class="rank-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 '
            f'{LEFT + WIDTH + 10} {TOP + HEIGHT + 20}" width="100%">' + "".join(parts)
            + "</svg>")


def ranks_html(rows: Sequence[RankSnapshot], title: str) -> str:
    """The page: the summary table and its pointers, then one chart a rank on the same axes,
    each with the command that opens that rank's full interactive timeline."""
    esc = _html.escape
    clock = common_clock(rows)
    live = [r for r in rows if r.device is not None]
    top = max([r.peak for r in live] + [1])
    max_events = max([r.events for r in live] + [1])
    highest = max(live, key=lambda r: r.peak) if live else None
    oomed = [r for r in live if r.first_oom is not None]
    first = min(oomed, key=_oom_time) if oomed and clock else None
    table = ['<table class="sum"><tr><th class="l">rank</th><th class="l">device</th>'
             "<th>peak</th><th>reserved</th><th>allocated</th><th>allocations</th><th>OOMs</th>"
             '<th class="l">first OOM</th><th class="l">file</th></tr>']
    for r in rows:
        if r.device is None:
            table.append(f'<tr><td class="l">{esc(r.label)}</td><td class="l" colspan="8">'
                         f"{esc(r.note)} ({esc(_label_text(r.path))})</td></tr>")
            continue
        cls = " ".join(k for k, on in (("hi", r is highest), ("first", r is first)) if on)
        when = _when(r, r.first_oom, clock) if r.first_oom else "-"
        table.append(f'<tr class="{cls}"><td class="l">{esc(r.label)}</td><td class="l">'
                     f"{esc(r.where)}</td><td>{R(r.peak)}</td><td>{R(r.reserved)}</td>"
                     f"<td>{R(r.allocated)}</td><td>{r.allocs:,}</td><td>{r.oom_count}</td>"
                     f'<td class="l">{esc(when)}</td><td class="l">'
                     f"{esc(_label_text(os.path.basename(r.path), 80))}</td></tr>")
    table.append("</table>")
    axis = ("x axis: the wall clock (the traces' time_us), from the earliest entry of all files "
            "to the latest: the same time for every rank" if clock else
            "x axis: the event number (not every trace has times, time_us): each rank's own "
            f"events, on one scale of {max_events:,} events")
    about = (f"{axis}. y axis: the same for every rank, 0 to {R(top)}. Light blue: the peak "
             "within each column; dark line: the active bytes at each column's end; the dot: "
             "the rank's peak; red lines: its OOMs (hover for the stack). Reserved and "
             "allocated are at the snapshot.")
    charts = []
    for r in live:
        name = f"rank{r.rank}" if r.rank is not None else "rank"
        cmd = (f"python -m tensorgc timeline {shlex.quote(_label_text(r.path))} "
               f"--device {r.device} -o {name}-timeline.html")
        charts.append(f'<div class="rank"><h3>{esc(r.label)}, {esc(r.where)}: peak '
                      f"{R(r.peak)}, {r.oom_count} OOM(s)"
                      + (f" (the first {MARKS_MAX} drawn)" if r.oom_count > MARKS_MAX else "")
                      + "</h3>" + _chart(r, clock, max_events, top)
                      + '<p class="open">Its full interactive timeline: <code>'
                      + esc(cmd) + "</code></p></div>")
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>" + esc(title)
            + "</title><style>" + _STYLE + "</style></head><body><h2>" + esc(title) + "</h2>"
            + "".join(f'<p class="lead">{esc(p)}</p>' for p in pointers(rows, clock))
            + "".join(table) + f"<p>{esc(about)}</p>" + "".join(charts) + "</body></html>")
