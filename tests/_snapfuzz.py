"""A seeded mutation fuzzer that holds the two snapshot loaders to one answer.

``load_snapshot(path, lean=True)`` (the streaming pickle machine, allocator/pickstream.c) and
``load_snapshot(path, lean=False)`` (the pre-scan, allocator/pickscan.c, then the restricted
unpickler) must agree on every file: both refuse it with the same exception type, or both load
it into equal data (a LeanTrace compared as the list of its entry dicts). Messages must not carry
the file's newlines or control characters.

The seeds are valid snapshot pickles made here (traces with frames, segments with blocks, the
old ``history`` form of blocks and the new one, protocols 2 to 5, with and without FRAMEs) and
the H100 sample. A mutant is a seed with one to three mutations: byte flips, truncations,
insertions, deletions, opcodes duplicated, removed, swapped or replaced, FRAME lengths changed,
inserted MARK, SETITEMS, APPEND and other opcodes at opcode boundaries.

Used by tests/test_snapshot_differential.py; as a program it runs the large-scale search:

    python3 tests/_snapfuzz.py --seed 1 --count 70000 [--save DIR] [--jobs 2]

and prints the disagreements by category. No torch needed.
"""
from __future__ import annotations

import math
import os
import pickle
import pickletools
import random
import re
import struct
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "data", "h100_small_snapshot.pickle")
MB = 1 << 20

# ---------------------------------------------------------------------------------- seeds


def _frame(name: str, line: int, filename: str = "/w/train.py") -> Dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


def new_form(shared: bool = True) -> Dict[str, Any]:
    """A snapshot as torch >= 2.1 writes it (``_record_memory_history(enabled="all")``): segments
    with blocks and their frames, per-device traces with time_us, frames, compile_context and
    user_metadata, an OOM entry, an empty device, allocator settings."""
    a = [_frame("step", 7), _frame("forward", 12, "/w/model.py"),
         _frame("at::native::empty_cuda", 0, "??")]
    b = [_frame("load", 3, "/w/data.py")]

    def fr(x: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return x if shared else [dict(f) for f in x]

    blocks = [{"address": 0x7000_0000, "size": 2 * MB, "requested_size": 2 * MB - 8,
               "state": "active_allocated", "frames": fr(a)},
              {"address": 0x7020_0000, "size": 2 * MB, "requested_size": 0,
               "state": "inactive", "frames": []}]
    seg = {"device": 0, "address": 0x7000_0000, "total_size": 4 * MB, "allocated_size": 2 * MB,
           "active_size": 2 * MB, "requested_size": 2 * MB - 8, "stream": 0,
           "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
           "frames": fr(b), "blocks": blocks}
    t0 = [{"action": "segment_alloc", "addr": 0x7000_0000, "size": 4 * MB, "stream": 0,
           "time_us": 10, "frames": fr(a), "compile_context": "N/A", "user_metadata": ""},
          {"action": "alloc", "addr": 0x7000_0000, "size": 2 * MB, "stream": 0, "time_us": 11,
           "frames": fr(a), "compile_context": "N/A", "user_metadata": ""},
          {"action": "alloc", "addr": 0x7020_0000, "size": MB, "stream": 7, "time_us": 12,
           "frames": fr(b), "compile_context": "0/1", "user_metadata": "phase=fwd"},
          {"action": "oom", "device_free": 123, "size": 8 * MB, "stream": 0, "time_us": 13,
           "frames": fr(b)},
          {"action": "free_requested", "addr": 0x7020_0000, "size": MB, "stream": 7,
           "time_us": 14, "frames": []},
          {"action": "free_completed", "addr": 0x7020_0000, "size": MB, "stream": 7,
           "time_us": 15}]
    t1 = [{"action": "alloc", "addr": 0x9000_0000, "size": 512, "stream": 0, "time_us": 20,
           "frames": fr(b)},
          {"action": "free_requested", "addr": 0x9000_0000, "size": 512, "stream": 0,
           "time_us": (1 << 40) + 3, "frames": fr(a)}]
    return {"segments": [seg], "device_traces": [t0, t1, []],
            "allocator_settings": {"expandable_segments": False, "roundup": {"1": 0},
                                   "max_split_size": -1, "ratio": 0.5}}


def old_form() -> Dict[str, Any]:
    """A snapshot as torch < 2.1 wrote it (the boolean ``_record_memory_history(True,
    trace_alloc_max_entries=...)``): blocks with a ``history`` of (addr, real_size, frames),
    trace entries without time_us, frames with line numbers only."""
    f = [_frame("main", 40), _frame("run", 9, "/w/loop.py")]
    blocks = [{"size": 1024, "state": "active_allocated",
               "history": [{"addr": 0x5000, "real_size": 1000, "frames": f}]},
              {"size": 3072, "state": "inactive"}]
    seg = {"device": 1, "address": 0x5000, "total_size": 4096, "allocated_size": 1024,
           "active_size": 1024, "stream": 0, "segment_type": "small", "blocks": blocks}
    trace = [{"action": "segment_alloc", "addr": 0x5000, "size": 4096, "stream": 0,
              "frames": f},
             {"action": "alloc", "addr": 0x5000, "size": 1024, "stream": 0, "frames": f},
             {"action": "free", "addr": 0x5400, "size": 512, "stream": 0, "frames": []}]
    return {"segments": [seg], "device_traces": [[], trace],
            "allocator_settings": {"garbage_collection_threshold": 0.8, "limit": 1 << 70}}


def _strip_frames(data: bytes) -> bytes:
    """The same pickle without its FRAME opcodes (what a pickler that does not frame writes)."""
    out, last = [], 0
    for op, _arg, pos in pickletools.genops(data):
        if op.name == "FRAME":
            at = int(pos or 0)  # genops gives every opcode's offset when reading bytes
            out.append(data[last:at])
            last = at + 9
    out.append(data[last:])
    return b"".join(out)


def _many_frames(obj: Any) -> bytes:
    """Protocol 4 with a FRAME every few opcodes: the pure-Python pickler frames by size; a
    smaller frame size makes several frames of a small snapshot."""
    class Small(pickle._Pickler):  # type: ignore[name-defined,misc]
        pass

    import io
    buf = io.BytesIO()
    p = Small(buf, protocol=4)
    old = pickle._Framer._FRAME_SIZE_TARGET  # type: ignore[attr-defined]
    pickle._Framer._FRAME_SIZE_TARGET = 64  # type: ignore[attr-defined]
    try:
        p.dump(obj)
    finally:
        pickle._Framer._FRAME_SIZE_TARGET = old  # type: ignore[attr-defined]
    return buf.getvalue()


def seeds() -> List[Tuple[str, bytes]]:
    """(name, bytes) of every seed pickle, each a valid snapshot both loaders read alike."""
    out: List[Tuple[str, bytes]] = []
    for proto in (2, 4, 5):
        out.append((f"new-p{proto}", pickle.dumps(new_form(), protocol=proto)))
    out.append(("new-own-frames-p4", pickle.dumps(new_form(shared=False), protocol=4)))
    out.append(("new-p4-unframed", _strip_frames(pickle.dumps(new_form(), protocol=4))))
    out.append(("new-p4-optimized", pickletools.optimize(pickle.dumps(new_form(), protocol=4))))
    out.append(("new-p4-many-frames", _many_frames(new_form())))
    # protocols 0 and 1 behind a PROTO header (load_snapshot reads files that start with one):
    # the text opcodes (INT, LONG, FLOAT, STRING, UNICODE, GET, PUT), one of them in a FRAME
    body = pickle.dumps(old_form(), protocol=0)
    out.append(("old-p0-body", b"\x80\x02" + body))
    out.append(("old-p0-framed", b"\x80\x04\x95" + struct.pack("<Q", len(body)) + body))
    out.append(("new-p1-body", b"\x80\x02" + pickle.dumps(new_form(), protocol=1)))
    out.append(("old-p2", pickle.dumps(old_form(), protocol=2)))
    out.append(("old-p4", pickle.dumps(old_form(), protocol=4)))
    out.append(("segments-only-p4", pickle.dumps(new_form()["segments"], protocol=4)))
    with open(SAMPLE, "rb") as f:
        out.append(("h100-sample", f.read()))
    return out


# ---------------------------------------------------------------------------------- mutations

# Whole opcodes (with their arguments) to insert at an opcode boundary: the structural ones the
# machine must refuse or follow, and scalars that shift the stack.
INSERTS: Tuple[bytes, ...] = (
    b"(", b"(", b"u", b"u", b"a", b"a", b"s", b"e", b"d", b"l", b"t", b"0", b"1", b"2",
    b"}", b"]", b")", b"\x8f", b"\x90", b"\x91", b"\x85", b"\x86", b"\x87", b"\x94", b".",
    b"N", b"\x88", b"\x89", b"K\x05", b"M\x00\x01", b"J\xff\xff\xff\xff", b"\x8a\x00",
    b"\x8a\x09" + b"\xff" * 8 + b"\x00", b"\x8c\x06action", b"\x8c\x06frames",
    b"\x8c\x0ddevice_traces", b"\x8c\x08segments", b"\x8c\x04addr", b"\x8c\x01\n",
    b"h\x00", b"h\x01", b"h\x03", b"q\x00", b"q\x02", b"j\x00\x00\x00\x00",
    b"\x95" + struct.pack("<Q", 0), b"\x95" + struct.pack("<Q", 5),
    b"I1\n", b"I01\n", b"L5L\n", b"F1.5\n", b"Vx\n", b"S'x'\n", b"g0\n", b"p0\n",
    b"G" + struct.pack(">d", math.nan), b"C\x01z", b"B\x00\x00\x00\x00", b"\x80\x04",
    b"\x8c\x02\x1b\r", b"c\nx\r\n",
)
# Opcode bytes to put in place of another (structural ones mostly).
REPLACE: bytes = b"()}]ulstdae0123N\x85\x86\x87\x88\x89\x8f\x90\x91\x94.hqKC\x8c"
FRAME = 0x95


def opcodes(data: bytes) -> List[Tuple[int, int]]:
    """(start, end) of each opcode of a valid pickle, arguments included."""
    starts = [int(pos or 0) for _op, _arg, pos in pickletools.genops(data)]
    return list(zip(starts, starts[1:] + [len(data)]))


Mutator = Callable[[random.Random, bytearray, List[Tuple[int, int]]], str]


def _flip(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    for _ in range(r.randint(1, 3)):
        b[r.randrange(len(b))] = r.randrange(256)
    return "flip"


def _bit(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    i = r.randrange(len(b))
    b[i] ^= 1 << r.randrange(8)
    return "bit"


def _truncate(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    if len(b) > 1:
        del b[r.randrange(1, len(b)):]
    return "truncate"


def _insert_bytes(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    i = r.randrange(len(b) + 1)
    b[i:i] = bytes(r.randrange(256) for _ in range(r.randint(1, 8)))
    return "insert-bytes"


def _delete(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    i = r.randrange(len(b))
    del b[i:i + r.randint(1, 16)]
    return "delete"


def _boundary(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> Tuple[int, int]:
    """A random opcode's span, clipped to the bytes as they are now."""
    start, end = ops[r.randrange(len(ops))]
    start = min(start, len(b))
    return start, min(end, len(b))


def _dup_op(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    s, e = _boundary(r, b, ops)
    b[e:e] = b[s:e]
    return "dup-op"


def _remove_op(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    s, e = _boundary(r, b, ops)
    del b[s:e]
    return "remove-op"


def _swap_ops(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    k = r.randrange(len(ops) - 1)
    (s1, e1), (s2, e2) = ops[k], ops[k + 1]
    if e2 <= len(b):
        b[s1:e2] = b[s2:e2] + b[s1:e1]
    return "swap-ops"


def _replace_op(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    s, _e = _boundary(r, b, ops)
    if s < len(b):
        b[s] = REPLACE[r.randrange(len(REPLACE))]
    return "replace-op"


def _insert_op(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    s, _e = _boundary(r, b, ops)
    b[s:s] = INSERTS[r.randrange(len(INSERTS))]
    return "insert-op"


def _splice(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    s, _ = _boundary(r, b, ops)
    k = r.randrange(len(ops))
    k2 = min(len(ops), k + r.randint(1, 6))
    piece = bytes(b[ops[k][0]:ops[k2 - 1][1]])
    b[s:s] = piece
    return "splice"


def _frame_len(r: random.Random, b: bytearray, ops: List[Tuple[int, int]]) -> str:
    frames = [s for s, e in ops if e - s == 9 and s + 9 <= len(b) and b[s] == FRAME]
    if not frames:
        return _insert_op(r, b, ops)
    s = r.choice(frames)
    (n,) = struct.unpack("<Q", bytes(b[s + 1:s + 9]))
    choice = r.randrange(6)
    new = (n + r.randint(1, 40) if choice == 0 else max(0, n - r.randint(1, 40)) if choice == 1
           else 0 if choice == 2 else len(b) - s - 9 + r.randint(-2, 2) if choice == 3
           else r.randrange(1 << 64) if choice == 4 else n ^ (1 << r.randrange(64)))
    b[s + 1:s + 9] = struct.pack("<Q", max(0, new) & ((1 << 64) - 1))
    return "frame-len"


MUTATORS: Tuple[Tuple[Mutator, int], ...] = (
    (_flip, 4), (_bit, 2), (_truncate, 1), (_insert_bytes, 1), (_delete, 1), (_dup_op, 2),
    (_remove_op, 2), (_swap_ops, 1), (_replace_op, 2), (_insert_op, 4), (_splice, 1),
    (_frame_len, 2))
_TABLE = [m for m, w in MUTATORS for _ in range(w)]


def mutate(r: random.Random, data: bytes, ops: List[Tuple[int, int]]) -> Tuple[str, bytes]:
    """(the mutations' names, the mutant) from one to three mutations of data."""
    b = bytearray(data)
    names = []
    for _ in range(r.choice((1, 1, 1, 2, 2, 3))):
        if not b:
            break
        names.append(r.choice(_TABLE)(r, b, ops))
    return "+".join(names), bytes(b)


def mutants(seed: int, count: int, base: Optional[Sequence[Tuple[str, bytes]]] = None,
            first: int = 0) -> Iterator[Tuple[int, str, str, bytes]]:
    """(index, seed name, mutation names, bytes) of mutants first to first + count: each one is
    the same for a seed whatever the others (a random generator of its own)."""
    base = list(base) if base is not None else seeds()
    parsed = [(name, data, opcodes(data)) for name, data in base]
    for i in range(first, first + count):
        r = random.Random(seed * 1_000_003 + i)
        name, data, ops = parsed[i % len(parsed)]
        how, m = mutate(r, data, ops)
        yield i, name, how, m


# ---------------------------------------------------------------------------------- comparing

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def outcome(path: str, lean: bool) -> Tuple[str, Any]:
    """("ok", the snapshot) or ("err", (exception type, message))."""
    from tensorgc import load_snapshot
    try:
        return "ok", load_snapshot(path, lean=lean)
    except RecursionError as exc:  # never expected: reported as its own kind
        return "err", (type(exc), f"RecursionError: {exc}"[:200])
    except Exception as exc:  # noqa: BLE001 -- any exception is an outcome to compare
        return "err", (type(exc), str(exc))


_MISSING = object()


def same(a: Any, b: Any) -> bool:
    """Structural equality with exact types (1, 1.0 and True differ; NaN equals NaN), a
    LeanTrace read as the list of its entries, and cycles allowed."""
    from tensorgc import LeanTrace
    seen = set()
    work = [(a, b)]
    while work:
        x, y = work.pop()
        if isinstance(x, LeanTrace):
            x = list(x)
        if isinstance(y, LeanTrace):
            y = list(y)
        if type(x) is not type(y):
            return False
        if isinstance(x, (list, tuple, dict, set, frozenset)):
            key = (id(x), id(y))
            if key in seen:
                continue
            seen.add(key)
            if len(x) != len(y):
                return False
            if isinstance(x, dict):
                # keys by type and repr (1 and True, or two NaNs, are told apart); not by order:
                # the streaming loader makes a trace's frame dicts in one order of its own
                ky = {(type(k), repr(k)): k for k in y}
                for k in x:
                    j = ky.get((type(k), repr(k)), _MISSING)
                    if j is _MISSING:
                        return False
                    work.append((x[k], y[j]))
            elif isinstance(x, (set, frozenset)):
                if x != y:
                    return False
            else:
                work.extend(zip(x, y))
        elif isinstance(x, float):
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                return False
        elif x != y:
            return False
    return True


def message_fault(msg: str) -> Optional[str]:
    """Why a refusal's message is unfit (a raw control character from the file), or None."""
    m = _CONTROL.search(msg)
    return f"control character {m.group()!r} in the message" if m else None


# The one refusal docs/api.md lets the streaming loader make alone: a layout pickle.dump never
# writes (an entry shared through the memo, a frames list memoized twice or changed after use),
# refused with a message that names lean=False, which reads it.
DOCUMENTED = "plain loads, lean refuses a layout it documents (use lean=False)"
ALLOWED = frozenset({DOCUMENTED})
_DOCUMENTED_WORDS = "the streaming loader does not read this (load_snapshot(..., lean=False) does)"


def verdict(lean: Tuple[str, Any], plain: Tuple[str, Any]) -> Optional[str]:
    """None when the two outcomes agree, else the disagreement's kind."""
    if lean[0] == "ok" and plain[0] == "ok":
        return None if same(lean[1], plain[1]) else "both load, different data"
    if lean[0] != plain[0]:
        if lean[0] == "ok":
            return "lean loads, plain refuses"
        return DOCUMENTED if _DOCUMENTED_WORDS in lean[1][1] else "plain loads, lean refuses"
    (lt, lm), (pt, pm) = lean[1], plain[1]
    if lt is not pt:
        return f"both refuse: {lt.__name__} vs {pt.__name__}"
    for side, msg in (("lean", lm), ("plain", pm)):
        if message_fault(msg):
            return f"both refuse: a control character in {side}'s message"
    return None


def compare(path: str) -> Tuple[Optional[str], Tuple[str, Any], Tuple[str, Any]]:
    """(None when the loaders agree, else the disagreement's kind; lean's and plain's outcome)."""
    lean, plain = outcome(path, True), outcome(path, False)
    return verdict(lean, plain), lean, plain


def signature(result: Tuple[str, Any]) -> str:
    """An outcome with the file's path, numbers and quoted text taken out: what tells kinds of
    refusal apart ("SnapshotError: corrupt pickle at byte N of N: UnpicklingError: ...")."""
    if result[0] == "ok":
        return "loaded"
    t, msg = result[1]
    msg = msg.split(": ", 1)[1] if msg.startswith(os.sep) and ": " in msg else msg
    msg = re.sub(r"refusing to load .*", "refusing to load NAME", msg, flags=re.S)
    msg = re.sub(r"'[^']*'", "Q", re.sub(r"\d[\d,]*", "N", re.sub(r"0x[0-9a-f]+", "X", msg)))
    return f"{t.__name__}: {msg[:90]}"


def minimise(data: bytes, keep: Callable[[bytes], bool], budget: int = 3000) -> bytes:
    """A smaller data for which keep() still holds: spans removed, halves first, then ever
    smaller ones down to single bytes, while any removal keeps it (at most `budget` tries)."""
    tries = 0
    size = max(1, len(data) // 2)
    while tries < budget:
        i, removed = 0, False
        while i < len(data) and tries < budget:
            cand = data[:i] + data[i + size:]
            tries += 1
            if cand and keep(cand):
                data, removed = cand, True
            else:
                i += size
        if size == 1 and not removed:
            break
        size = max(1, size // 2) if not removed else size
    return data


def describe(result: Tuple[str, Any]) -> str:
    if result[0] == "ok":
        return "loaded"
    t, msg = result[1]
    return f"{t.__name__}: {msg}"


def run(seed: int, count: int, directory: str, budget: Optional[float] = None,
        minimum: int = 0, base: Optional[Sequence[Tuple[str, bytes]]] = None,
        on_disagree: Optional[Callable[[int, str, str, bytes, str, Any, Any], None]] = None,
        ) -> Dict[str, Any]:
    """Loads `count` mutants both ways (stopping once `budget` seconds have passed, after at
    least `minimum`). Returns {"ran": n, "loaded": both loaded, "seconds": s, "disagree": [(i,
    seed name, mutations, bytes, kind, lean, plain)]}."""
    path = os.path.join(directory, "mutant.pickle")
    start = time.monotonic()
    bad: List[Tuple[int, str, str, bytes, str, Any, Any]] = []
    ran = loaded = 0
    for i, name, how, data in mutants(seed, count, base):
        if budget is not None and ran >= minimum and time.monotonic() - start > budget:
            break
        with open(path, "wb") as f:
            f.write(data)
        kind, lean, plain = compare(path)
        ran += 1
        loaded += lean[0] == plain[0] == "ok"
        if kind is not None:
            bad.append((i, name, how, data, kind, lean, plain))
            if on_disagree is not None:
                on_disagree(i, name, how, data, kind, lean, plain)
    return {"ran": ran, "loaded": loaded, "seconds": time.monotonic() - start, "disagree": bad}


# ---------------------------------------------------------------------------------- the program


def _worker(args: Tuple[int, int, int, str]) -> List[Tuple[Any, ...]]:
    seed, first, count, directory = args
    sub = os.path.join(directory, f"w{first}")
    os.makedirs(sub, exist_ok=True)
    out = []
    path = os.path.join(sub, "mutant.pickle")
    for i, name, how, data in mutants(seed, count, first=first):
        with open(path, "wb") as f:
            f.write(data)
        kind, lean, plain = compare(path)
        if kind is not None:
            out.append((i, name, how, data, kind, signature(lean), signature(plain),
                        describe(lean)[:300], describe(plain)[:300]))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse
    import collections
    import importlib.util
    import multiprocessing
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--save", help="a directory for each disagreeing mutant (and a .txt beside)")
    ap.add_argument("--show", type=int, default=2, help="examples printed per category")
    ap.add_argument("--by-message", action="store_true",
                    help="categories by the kind of disagreement and both refusals' words")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("tensorgc") is None:  # else the one PYTHONPATH names
        sys.path.insert(0, os.path.dirname(HERE))
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        step = -(-args.count // args.jobs)
        chunks = [(args.seed, k, min(step, args.count - k), tmp)
                  for k in range(0, args.count, step)]
        if args.jobs > 1:
            with multiprocessing.Pool(args.jobs) as pool:
                found = [x for part in pool.map(_worker, chunks) for x in part]
        else:
            found = [x for c in chunks for x in _worker(c)]
    by = collections.defaultdict(list)
    for x in found:
        by[(x[4], x[5], x[6]) if args.by_message else x[4]].append(x)
    allowed = sum(x[4] in ALLOWED for x in found)
    print(f"seed {args.seed}: {args.count} mutants, {len(found)} disagree, {allowed} of them as "
          f"documented ({time.monotonic() - start:.0f} s)")
    for key, xs in sorted(by.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(xs):6d}  {key}")
        for i, name, how, data, *_rest, lm, pm in xs[:args.show]:
            print(f"          #{i} {name} {how} ({len(data)} bytes)")
            print(f"            lean:  {lm[:160]!r}")
            print(f"            plain: {pm[:160]!r}")
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        for i, name, how, data, kind, _sl, _sp, lm, pm in found:
            with open(os.path.join(args.save, f"{args.seed}-{i}.pickle"), "wb") as f:
                f.write(data)
            with open(os.path.join(args.save, f"{args.seed}-{i}.txt"), "w") as f:
                f.write(f"{name} {how}\n{kind}\nlean: {lm}\nplain: {pm}\n")
    return 1 if len(found) > allowed else 0


if __name__ == "__main__":
    sys.exit(main())
