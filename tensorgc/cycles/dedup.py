"""Repeated leaks in long jobs: each shape of cycle reported in full once, then counted.

A cycle's *signature* is the shape of its leak: the types and edge labels of the references
inside it, without addresses, ids, tensor sizes or the number of instances (computed in C with
the report: ``CycleReport.groups[i]["signature"]``, cycles/report_sig.c). ``CycleDedup`` keeps,
per signature, how many cycles and tensor bytes were seen and where its page is, and decides for
each report whether it deserves a page and a WARNING (a signature without a page yet, within
``max_pages`` and ``min_interval``) or only counts; ``summaries()`` gives the summary lines that
are due. ``warn_tensor_cycles`` uses one per handle; ``cycle_totals()`` adds up every one in the
process. Everything here is bounded: at most MAX_SIGNATURES signatures are tracked per CycleDedup
and numbered per process (the rest go to one "other" bucket), and a summary has at most
SUMMARY_LINES lines about single signatures.

Thread safety: one re-entrant lock guards every CycleDedup and the process totals (a forked
child makes a new one). A gc callback
may run in any thread, and also inside a locked section of the same thread (an allocation there
can start a collection); such a nested call does not touch the tables mid-update: it leaves its
counts in a short list that the next call takes in. Nothing here raises into the collector for a
report it cannot read: such a report counts as one cycle of signature "?".
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Callable, Dict, List, NamedTuple, Optional, Tuple

if TYPE_CHECKING:
    from .._tensorgc import CycleReport

__all__ = ["CycleDedup", "Verdict", "cycle_totals", "tell_at_exit", "MAX_SIGNATURES",
           "SUMMARY_LINES"]

MAX_SIGNATURES = 1000  # signatures tracked per CycleDedup, and numbered per process
SUMMARY_LINES = 20     # lines about single signatures per summary; the rest in one line
_CYCLE_CHARS = 200     # characters of a cycle's text in a summary line
_DEFERRED_MAX = 1000   # reports left by nested calls before the next call takes them in

logger = logging.getLogger("tensorgc")

# Guards everything below and every CycleDedup's fields. Re-entrant: see the module doc.
_LOCK = threading.RLock()
_busy = False                     # a locked section is updating the tables
_numbers: Dict[str, int] = {}     # signature -> its number in this process (1, 2, ...)
_totals = {"reports": 0, "seen": 0, "bytes": 0}
_other_seen = False               # a signature went to an "other" bucket somewhere
_all: "weakref.WeakSet[CycleDedup]" = weakref.WeakSet()  # for the summaries at exit
_EXIT_LINES = 200                 # summary lines of retired CycleDedups kept for the exit
_exit_lines: List[str] = []
_exit_dropped = 0                 # lines past _EXIT_LINES, counted instead


def cycle_totals() -> Dict[str, int]:
    """This process's counts over every CycleDedup (every warn_tensor_cycles handle, removed
    ones included): ``{"reports": full reports made (a page and a WARNING, or a WARNING saying
    why there is no page), "seen": cycles seen (each instance of a leak counts), "bytes": the
    tensor bytes they held, "signatures": distinct signatures seen}``. Signatures are counted up
    to MAX_SIGNATURES (1,000); beyond, all the others count as one."""
    with _LOCK:
        return {"reports": _totals["reports"], "seen": _totals["seen"],
                "bytes": _totals["bytes"],
                "signatures": len(_numbers) + (1 if _other_seen else 0)}


def _number(signature: str) -> int:
    """The signature's number in this process, a new one when it has none; 0 when
    MAX_SIGNATURES are numbered already (the "other" bucket). Under _LOCK."""
    global _other_seen
    n = _numbers.get(signature)
    if n is None:
        if len(_numbers) >= MAX_SIGNATURES:
            _other_seen = True
            return 0
        n = _numbers[signature] = len(_numbers) + 1
    return n


def iec_bytes(n: int) -> str:
    """A size as the reports write it: "96 B", "5.0 MiB", "1.2 GiB"."""
    if n < 1024:
        return f"{n} B"
    v, unit = float(n), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        v /= 1024.0
        if v < 1024.0:
            break
    return f"{v:.1f} {unit}"


def _printable(s: str, limit: int) -> str:
    """s cut to limit characters (an ellipsis and the true length when cut), with control
    characters as '?': a class name with a newline cannot make a log line of its own."""
    if len(s) > limit:
        s = f"{s[:limit]}\u2026 ({len(s)} chars)"
    return "".join(ch if ch.isprintable() else "?" for ch in s)


class Verdict(NamedTuple):
    """What CycleDedup.admit decided for one report."""

    full: bool                    # report it in full: a page and a WARNING
    numbers: Tuple[int, ...]      # its signatures' numbers in this process (0: "other")
    new: Tuple[int, ...]          # those reported in full now for the first time
    why: str                      # when not full, why: "seen before", "max_pages", ...
    keys: Tuple[str, ...]         # the signatures reported now (for reported())


class _Sig:
    """One signature's counts in one CycleDedup."""

    __slots__ = ("key", "number", "cycle", "page", "no_page", "seen", "nbytes", "pending_seen",
                 "pending_bytes", "repeat")

    def __init__(self, key: str, number: int, cycle: str) -> None:
        self.key = key                    # the signature
        self.number = number
        self.cycle = cycle                # the cycle's text, cut (_CYCLE_CHARS)
        self.page: Optional[str] = None   # its first page, once written
        self.no_page = ""                 # why it has no page yet (for the summary)
        self.seen = 0                     # cycles seen, since first seen
        self.nbytes = 0                   # their tensor bytes
        self.pending_seen = 0             # not yet in a summary line nor a full report
        self.pending_bytes = 0
        self.repeat = Verdict(False, (number,), (), "seen before", ())  # a report of it alone


Item = Tuple[str, int, int, str]  # (signature, cycles, bytes, cycle text) of one group


class CycleDedup:
    """Counts cycle reports by signature and rate-limits the full ones; thread-safe.

    ``admit(report)`` counts the report's cycles and returns a Verdict: ``full`` when the report
    holds a signature that has no page yet (with ``dedup=False``: always), fewer than
    ``max_pages`` full reports were made (None: no cap), and ``min_interval`` seconds have
    passed since the last one; otherwise the cycles are only counted. A signature left without
    a page by ``min_interval`` or by a page that could not be written gets one at a later report
    within the caps; past ``max_pages`` none does. After a full report, ``reported(verdict,
    path)`` records its page (None: not written). ``summaries()`` returns the summary lines due:
    every ``summary_every`` seconds (None: only ``summaries(final=True)``, which every live
    CycleDedup runs at interpreter exit, logging on "tensorgc") while some counts are not in a
    line yet, one line per such signature, e.g.

        tensorgc: cycle signature #3 seen 412 times, 1.2 GiB in all since the first report
        (first at /tmp/tensorgc-cycle-k2j4x0qa.html); 40 times (120.0 MiB) since the last
        summary: Node -.other-> Node -.other-> Node

    Bounds: at most MAX_SIGNATURES (1,000) signatures tracked, each a few hundred bytes (its
    number, counts, page path and the cycle's text cut at 200 characters); the signatures past
    that share one "other" bucket, counted but never reported in full. A summary has at most
    SUMMARY_LINES (20) signature lines, the ones seen most since the last summary; one more line
    sums up the rest. ``clock`` (seconds, monotonic) is for tests.

    Bad arguments: TypeError or ValueError naming the argument."""

    def __init__(self, *, max_pages: Optional[int] = 20, min_interval: float = 0.0,
                 summary_every: Optional[float] = 600.0, dedup: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_pages is not None and (isinstance(max_pages, bool) or
                                      not isinstance(max_pages, int)):
            raise TypeError(f"tensorgc: max_pages must be an int or None, not "
                            f"{type(max_pages).__name__}")
        if max_pages is not None and max_pages < 0:
            raise ValueError(f"tensorgc: max_pages must be >= 0 or None, not {max_pages}")
        _seconds("min_interval", min_interval, zero=True)
        if summary_every is not None:
            _seconds("summary_every", summary_every, zero=False)
        if not isinstance(dedup, bool):
            raise TypeError(f"tensorgc: dedup must be a bool, not {type(dedup).__name__}")
        if not callable(clock):
            raise TypeError("tensorgc: clock must be a callable returning seconds")
        self.max_pages = max_pages
        self.min_interval = float(min_interval)
        self.summary_every = None if summary_every is None else float(summary_every)
        self.dedup = dedup
        self._clock = clock
        self._sigs: Dict[str, _Sig] = {}
        self._pending: Dict[str, _Sig] = {}   # signatures with counts not in a line yet
        self._other = [0, 0, 0, 0]            # seen, bytes, pending seen, pending bytes
        self._reports = 0
        self._last_full: Optional[float] = None
        self._last_summary = clock()
        self._deferred: List[List[Item]] = []  # from nested calls (module doc)
        with _LOCK:
            _all.add(self)

    # -- counting -------------------------------------------------------------------------

    def admit(self, report: CycleReport) -> Verdict:
        """Counts the report's cycles by signature and says whether to report it in full."""
        items = _items(report)
        now = self._clock()
        global _busy
        with _LOCK:
            if _busy:  # inside a locked section of this thread: count it later
                if len(self._deferred) < _DEFERRED_MAX:
                    self._deferred.append(items)
                return Verdict(False, (), (), "counted later", ())
            _busy = True
            try:
                return self._admit(items, now)
            finally:
                _busy = False

    def _admit(self, items: List[Item], now: float) -> Verdict:
        if len(items) == 1 and self.dedup and not self._deferred:
            # the steady state of a long job: one shape, reported already
            key, n, b, _ = items[0]
            s = self._sigs.get(key)
            if s is not None and s.page is not None:
                _totals["seen"] += n
                _totals["bytes"] += b
                s.seen += n
                s.nbytes += b
                s.pending_seen += n
                s.pending_bytes += b
                self._pending[key] = s
                return s.repeat
        if self._deferred:
            deferred, self._deferred = self._deferred, []
            for its in deferred:  # counted, never reported: told by the next summary
                for s, n, b in self._count(its):
                    self._add_pending(s, n, b)
        sigs = self._count(items)
        numbers = tuple(sorted({s.number if s is not None else 0 for s, _, _ in sigs}))
        fresh = [s for s, _, _ in sigs if s is not None and (not self.dedup or s.page is None)]
        why = ""
        if not fresh:
            why = "seen before" if any(s is not None for s, _, _ in sigs) else "other"
        elif self.max_pages is not None and self._reports >= self.max_pages:
            why = "max_pages"
        elif self._last_full is not None and now - self._last_full < self.min_interval:
            why = "min_interval"
        if why:
            for s, n, b in sigs:
                self._add_pending(s, n, b)
                if s is not None and s.page is None and why in ("max_pages", "min_interval"):
                    s.no_page = why
            return Verdict(False, numbers, (), why, ())
        self._reports += 1
        _totals["reports"] += 1
        self._last_full = now
        new = []
        for s, n, b in sigs:
            if s is not None and s in fresh:
                if s.page is None:
                    new.append(s.number)
            else:  # an old signature in the same report: counted as seen again
                self._add_pending(s, n, b)
        return Verdict(True, numbers, tuple(sorted(new)), "", tuple(s.key for s in fresh))

    def _count(self, items: List[Item]) -> List[Tuple[Optional[_Sig], int, int]]:
        """Adds the items to the tables; the _Sig each went to (None: the "other" bucket),
        one per signature, with the report's counts. Under _LOCK."""
        merged: Dict[str, List[int]] = {}
        texts: Dict[str, str] = {}
        for key, n, b, cycle in items:
            m = merged.setdefault(key, [0, 0])
            m[0] += n
            m[1] += b
            texts.setdefault(key, cycle)
        out: List[Tuple[Optional[_Sig], int, int]] = []
        for key, (n, b) in merged.items():
            _totals["seen"] += n
            _totals["bytes"] += b
            s = self._sigs.get(key)
            if s is None:
                number = _number(key) if len(self._sigs) < MAX_SIGNATURES else 0
                if number:
                    s = self._sigs[key] = _Sig(key, number,
                                               _printable(texts[key], _CYCLE_CHARS))
                else:
                    global _other_seen
                    _other_seen = True
            if s is None:
                self._other[0] += n
                self._other[1] += b
            else:
                s.seen += n
                s.nbytes += b
            out.append((s, n, b))
        return out

    def _add_pending(self, s: Optional[_Sig], n: int, b: int) -> None:
        if s is None:
            self._other[2] += n
            self._other[3] += b
            return
        s.pending_seen += n
        s.pending_bytes += b
        self._pending[s.key] = s

    def reported(self, verdict: Verdict, page: Optional[str]) -> None:
        """Records the page of a full report (None: it could not be written, so its new
        signatures may get a page at a later report)."""
        global _busy
        with _LOCK:
            busy, _busy = _busy, True
            try:
                for key in verdict.keys:
                    s = self._sigs.get(key)
                    if s is not None and s.page is None:
                        s.page = page
                        s.no_page = "" if page is not None else "not written"
            finally:
                _busy = busy

    # -- summaries and totals -------------------------------------------------------------

    def summaries(self, *, final: bool = False) -> List[str]:
        """The summary lines due now: when ``summary_every`` seconds have passed since the last
        summary (or since this CycleDedup was made) and some counts are in no line yet; with
        ``final``, whatever is pending, now. Each line's counts are then taken as told."""
        now = self._clock()
        if not final and (self.summary_every is None or
                          now - self._last_summary < self.summary_every):
            return []  # the common case, without the lock: one reading of a float
        global _busy
        with _LOCK:
            busy, _busy = _busy, True
            try:
                return self._summaries(now)
            finally:
                _busy = busy

    def _summaries(self, now: float) -> List[str]:
        """Under _LOCK, with _busy set."""
        if not self._pending and not self._other[2]:
            return []
        self._last_summary = now
        pending = sorted(self._pending.values(), key=lambda s: (-s.pending_seen, s.number))
        self._pending = {}
        lines = [self._line(s) for s in pending[:SUMMARY_LINES]]
        rest = pending[SUMMARY_LINES:]
        if rest:
            lines.append(f"tensorgc: {len(rest)} more cycle signatures seen "
                         f"{sum(s.pending_seen for s in rest):,} times "
                         f"({iec_bytes(sum(s.pending_bytes for s in rest))}) since the last "
                         "summary")
        if self._other[2]:
            lines.append(f"tensorgc: other cycle signatures (past the {MAX_SIGNATURES:,} "
                         f"tracked) seen {self._other[0]:,} times, "
                         f"{iec_bytes(self._other[1])} in all; {self._other[2]:,} times "
                         f"({iec_bytes(self._other[3])}) since the last summary")
        for s in pending:
            s.pending_seen = s.pending_bytes = 0
        self._other[2] = self._other[3] = 0
        return lines

    def _line(self, s: _Sig) -> str:
        if s.page is not None:
            where = f"since the first report (first at {s.page})"
        elif s.no_page == "max_pages":
            where = f"since first seen (no page: max_pages={self.max_pages} reached)"
        elif s.no_page == "min_interval":
            where = (f"since first seen (no page yet: min_interval={self.min_interval:g} s "
                     "between pages)")
        elif s.no_page == "not written":
            where = "since first seen (no page yet: it could not be written)"
        else:
            where = "since first seen (no page)"
        times = "time" if s.seen == 1 else "times"
        return (f"tensorgc: cycle signature #{s.number} seen {s.seen:,} {times}, "
                f"{iec_bytes(s.nbytes)} in all {where}; {s.pending_seen:,} "
                f"{'time' if s.pending_seen == 1 else 'times'} ({iec_bytes(s.pending_bytes)}) "
                f"since the last summary: {s.cycle or '(too large to spell out)'}")

    def totals(self) -> Dict[str, int]:
        """This CycleDedup's counts, as cycle_totals() gives the process's."""
        global _busy
        with _LOCK:
            busy, _busy = _busy, True
            try:
                sigs = list(self._sigs.values())
                return {"reports": self._reports,
                        "seen": sum(s.seen for s in sigs) + self._other[0],
                        "bytes": sum(s.nbytes for s in sigs) + self._other[1],
                        "signatures": len(sigs) + (1 if self._other[0] else 0)}
            finally:
                _busy = busy

    def number(self, signature: str) -> int:
        """The number of a signature this CycleDedup tracks, 0 when it tracks none such."""
        with _LOCK:
            s = self._sigs.get(signature)
            return 0 if s is None else s.number


def _seconds(name: str, value: object, zero: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"tensorgc: {name} must be a number of seconds, not "
                        f"{type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise ValueError(f"tensorgc: {name} must be a finite number of seconds "
                         f"{'>= 0' if zero else '> 0'}, not {value!r}")


def _items(report: CycleReport) -> List[Item]:
    """(signature, cycles, bytes, cycle text) per group of the report, read from its groups
    (never its text or page); one item of signature "?" for a report that cannot be read."""
    try:
        items = [(str(g["signature"]), int(g["count"]), int(g["nbytes"]), str(g["cycle"]))
                 for g in report.groups]
        if items:
            return items
    except Exception:  # noqa: BLE001 -- a report that cannot be read still counts
        pass
    try:
        nbytes = int(report.nbytes)
    except Exception:  # noqa: BLE001
        nbytes = 0
    return [("?", 1, nbytes, "")]


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) gets a lock of its own: the parent's may have been
    held by another thread at the fork, and nobody in the child would ever release it."""
    global _LOCK, _busy
    _LOCK = threading.RLock()
    _busy = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def tell_at_exit(dedup: CycleDedup) -> None:
    """Takes what ``dedup`` has not told yet into the lines logged at interpreter exit, so that
    it can be let go (warn_tensor_cycles does, for a removed handle's). At most 200 lines are
    kept; past that they are counted, and the count is logged."""
    global _exit_dropped
    lines = dedup.summaries(final=True)
    with _LOCK:
        room = max(0, _EXIT_LINES - len(_exit_lines))
        _exit_lines.extend(lines[:room])
        _exit_dropped += len(lines) - min(room, len(lines))


def _summaries_at_exit() -> None:
    """Logs what every CycleDedup has not told yet. Never raises."""
    try:
        with _LOCK:
            dedups = list(_all)
            lines, _exit_lines[:] = list(_exit_lines), []
        for d in dedups:
            lines += d.summaries(final=True)
        if _exit_dropped:
            lines.append(f"tensorgc: {_exit_dropped:,} more summary lines of removed "
                         "warn_tensor_cycles handles were not kept")
        for line in lines:
            logger.warning("%s", line)
    except Exception:  # noqa: BLE001 -- at exit, a failing handler must not add a traceback
        pass
