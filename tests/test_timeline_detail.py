"""The timeline page's data (allocator/columns.c, detail.c): a trace read into columns, every
allocation on the trace's own clock (event i: trace entry i), and its varint encoding -- checked
against a plain Python reading of the same trace, decoded here as the page's script decodes it."""
import random

import pytest

from tensorgc import _tensorgc
from tensorgc.timeline import trace_columns

MB = 1 << 20


def ev(action, addr=0, size=0, frames=None, **kw):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0,
         "frames": [{"filename": "/w/train.py", "line": 3, "name": "f"}] if frames is None
         else frames}
    e.update(kw)
    return e


def varints(data, n):
    out, v, shift = [], 0, 0
    for b in data:
        v |= (b & 127) << shift
        shift += 7
        if not b & 128:
            out.append(v)
            v, shift = 0, 0
    assert len(out) == n and shift == 0
    return out


def unzig(v):
    return -((v + 1) >> 1) if v & 1 else v >> 1


def decode(d):
    """The page script's decoding, in Python: (A, F, C, S, X, V, W, K, R) per allocation."""
    n = d["n"]
    dA, dD, S, K, dX, dC, R, V, W = (varints(s, n) for s in d["streams"])
    A, F, C, X, a, x = [], [], [], [], 0, 0
    for j in range(n):
        a += dA[j]
        x = (x + unzig(dX[j]) * d["xunit"]) % 2**64
        A.append(a)
        F.append(a + dD[j] - 1 if dD[j] else -1)
        C.append(F[-1] + dC[j] if dC[j] else -1)
        X.append(x)
    return A, F, C, [s * d["unit"] for s in S], X, V, [unzig(w) for w in W], K, R


def oracle(trace, pre, free_action):
    """The clock and pairing of include/tensorgc/detail.h, in plain Python: rows of (alloc
    position, free position, completion position, size, address, memory_viz version, stream),
    npre, and the entries no allocation accounts for."""
    in_trace = {e["addr"] for e in trace if e["action"] == "alloc"}
    pre = [(a, s) for a, s in pre if a not in in_trace]
    done = {}  # free_completed entries at each address so far
    opened = {a: True for a, _ in pre}
    first = []  # frees with no open allocation: alive from the start
    for e in trace:
        if e["action"] == "alloc":
            opened[e["addr"]] = True
        elif e["action"] == free_action:
            if not opened.pop(e["addr"], False):
                first.append([0, -1, -1, e["size"], e["addr"], done.get(e["addr"], 0),
                              e.get("stream", 0)])
        if e["action"] == "free_completed":
            done[e["addr"]] = done.get(e["addr"], 0) + 1
    rows = list(first)
    opened, pend, u, other, seen = {}, {}, 0, [], {}
    for a, s in pre:
        opened[a] = len(rows)
        rows.append([0, -1, -1, s, a, done.get(a, 0), 0])
    npre = len(rows)
    req = free_action == "free_requested"
    for i, e in enumerate(trace):
        act = e["action"]
        if act == "alloc":
            opened[e["addr"]] = len(rows)
            rows.append([i, -1, -1, e["size"], e["addr"], seen.get(e["addr"], 0),
                         e.get("stream", 0)])
        elif act == free_action:
            j = opened.pop(e["addr"], None)
            if j is None:
                j, u = u, u + 1
            rows[j][1] = i
            if req:
                pend[e["addr"]] = j
            else:
                seen[e["addr"]] = seen.get(e["addr"], 0) + 1
        elif act == "free_completed" and req:
            j = pend.pop(e["addr"], None)
            if j is None:
                other.append(i)
            else:
                rows[j][2] = i
            seen[e["addr"]] = seen.get(e["addr"], 0) + 1
        else:
            other.append(i)
    return rows, npre, other


def detail_of(trace, pre=(), use_req=True, max_stacks=100, max_allocs=-1, raw=False):
    cols = _tensorgc._trace_columns(trace) + (_tensorgc._trace_streams(trace),)
    return cols, _tensorgc._detail(cols, list(pre), use_req, max_stacks, None, max_allocs, 0,
                                   None, raw)


def check(trace, pre=(), use_req=True):
    cols, d = detail_of(trace, pre, use_req)
    A, F, C, S, X, V, W, K, R = decode(d)
    rows, npre, other = oracle(trace, pre, "free_requested" if use_req else "free_completed")
    assert [list(r) for r in zip(A, F, C, S, X, V, W)] == rows
    assert d["events"] == len(trace) and d["n"] == d["total"] == len(rows)
    assert d["npre"] == npre
    assert list(memoryview(d["other"]).cast("I")) == other
    return cols, d, K, R


def test_pairs_reuse_pre_and_unmatched_frees():
    trace = [ev("free_requested", 0x9000, 3 * MB),       # freed, never allocated: from the start
             ev("alloc", 0x1000, 4 * MB), ev("alloc", 0x2000, 2 * MB),
             ev("free_requested", 0x1000, 4 * MB), ev("free_completed", 0x1000, 4 * MB),
             ev("oom"), ev("alloc", 0x1000, MB),         # the address reused
             ev("free_requested", 0x1000, MB), ev("free_requested", 0x1000, MB)]  # twice
    pre = [(0x5000, MB), (0x2000, 2 * MB)]  # 0x2000 is the trace's own allocation
    check(trace, pre)
    check(trace, pre, use_req=False)


def test_random_traces_match_the_oracle():
    rnd = random.Random(7)
    for _ in range(40):
        live, trace = [], []
        for _ in range(rnd.randrange(1, 300)):
            r = rnd.random()
            if live and r < 0.4:
                a, s = live.pop(rnd.randrange(len(live)))
                trace.append(ev(rnd.choice(("free_requested", "free_completed")), a, s))
            elif r < 0.45:
                trace.append(ev("free_requested", rnd.randrange(1, 50) * 512, 512))
            elif r < 0.47:
                trace.append(ev("oom"))
            elif r < 0.5:
                trace.append(ev("segment_alloc", rnd.randrange(1, 50) << 21, 2 * MB))
            elif r < 0.52:
                trace.append(ev("free_completed", rnd.randrange(1, 64) * 512, 512))
            else:
                a, s = rnd.randrange(1, 64) * 512, rnd.randrange(1, 9) * 512
                live.append((a, s))
                trace.append(ev("alloc", a, s, stream=rnd.choice((0, 0, 7))))
        pre = [(rnd.randrange(1, 64) * 512, 512) for _ in range(rnd.randrange(4))]
        check(trace, pre, use_req=rnd.random() < 0.5)


def test_units_and_addresses_at_the_edges():
    # sizes and addresses not multiples of 512: unit 1; addresses near 2**64 and back down
    top = 2**64 - 2
    trace = [ev("alloc", top, 7), ev("alloc", 3, 5), ev("alloc", top - 1, 1), ev("alloc", 0, 2)]
    _, d, _, _ = check(trace)
    assert d["unit"] == 1 and d["xunit"] == 1
    _, d, _, _ = check([ev("alloc", 512 * k, 1024) for k in (9, 1, 2**40)])
    assert d["unit"] == 512 and d["xunit"] == 512


def test_equal_stacks_share_one_id_and_the_bound_holds():
    f = [{"filename": "/w/a.py", "line": 1, "name": "g"}, {"filename": "x.cpp", "line": 0,
                                                           "name": "at::empty"}]
    other = [{"filename": "/w/b.py", "line": 2, "name": "h"}]
    trace = [ev("alloc", 0x1000, 512, frames=[dict(x) for x in f]),   # equal content,
             ev("alloc", 0x2000, 512, frames=[dict(x) for x in f]),   # other lists
             ev("alloc", 0x3000, 512, frames=other), ev("alloc", 0x4000, 512, frames=other),
             ev("alloc", 0x5000, 512, frames=[]), ev("alloc", 0x6000, 512, frames="junk"),
             ev("alloc", 0x7000, 512, frames=[{"filename": 1, "line": "x"}])]
    cols, d, K, _ = check(trace)
    assert K[0] == K[1] != K[2] == K[3] and K[4] == K[5] == 0 and K[6] not in (0, K[0], K[2])
    stacks = cols[5]
    assert stacks[0] == [] and stacks[d["used"][K[0] - 1]] == f
    assert stacks[d["used"][K[2] - 1]] is other
    _, d = detail_of(trace, max_stacks=1)  # past the bound: no stack
    K = decode(d)[7]
    assert K[:4] == [1, 1, 0, 0] and d["used"] == [d["used"][0]]


def test_a_free_has_its_own_stack_and_a_block_from_before_the_trace_its_blocks():
    at_free = [{"filename": "/w/opt.py", "line": 9, "name": "zero_grad"}]
    trace = [ev("alloc", 0x1000, 512), ev("free_requested", 0x1000, 512, frames=at_free),
             ev("free_completed", 0x1000, 512, frames=at_free),
             ev("free_requested", 0x9000, 512, frames=at_free)]  # allocated before the trace
    cols = _tensorgc._trace_columns(trace)
    stacks = list(cols[5]) + [[{"filename": "/w/init.py", "line": 1, "name": "build"}]]
    cols = cols[:5] + (stacks,) + cols[6:]
    d = _tensorgc._detail(cols, [(0x5000, 1024, len(stacks) - 1)], True, 10)
    A, F, C, S, X, V, W, K, R = decode(d)
    # the free of 0x9000 with no alloc, the block from before the trace, then 0x1000
    assert X == [0x9000, 0x5000, 0x1000] and d["npre"] == 2
    assert stacks[d["used"][K[1] - 1]][0]["name"] == "build"
    assert stacks[d["used"][K[2] - 1]][0]["name"] == "f"
    assert [stacks[d["used"][r - 1]][0]["name"] for r in (R[0], R[2])] == ["zero_grad"] * 2
    assert R[1] == 0 and K[0] == 0 and (F[2], C[2]) == (1, 2)
    with pytest.raises(ValueError, match="stack"):
        _tensorgc._detail(cols, [(0x5000, 1024, len(stacks))], True, 10)


def test_memory_viz_versions_count_the_completed_frees_at_an_address():
    trace = []
    for _ in range(3):  # the same address three times: b1000_0, b1000_1, b1000_2
        trace += [ev("alloc", 0x1000, 512), ev("free_requested", 0x1000, 512),
                  ev("free_completed", 0x1000, 512)]
    trace += [ev("alloc", 0x1000, 512), ev("free_requested", 0x1000, 512)]  # b1000_3, pending
    check(trace)
    _, d = detail_of(trace)
    A, F, C, S, X, V, W, K, R = decode(d)
    assert V == [0, 1, 2, 3] and C[3] == -1 and F[3] == len(trace) - 1


def test_the_largest_are_kept_past_a_bound():
    trace = [ev("alloc", 0x1000 * (k + 1), (k % 5 + 1) * 512) for k in range(20)]
    _, d = detail_of(trace, max_allocs=6)
    assert d["total"] == 20 and d["n"] == 6 and sum(d["keep"]) == 6
    A, F, C, S, X, V, W, K, R = decode(d)
    # the four of the largest size, then the first two of the next, in allocation order
    assert A == [3, 4, 8, 9, 14, 19]
    assert S == [4 * 512, 5 * 512, 4 * 512, 5 * 512, 5 * 512, 5 * 512]


def test_the_series_of_a_trace_and_its_peak():
    trace = [ev("alloc", 0x1000, 4 * MB), ev("alloc", 0x2000, 2 * MB), ev("oom", 0, 0),
             ev("free_requested", 0x1000, 4 * MB), ev("alloc", 0x3000, MB)]
    _, d = detail_of(trace, raw=True)
    raw = d["raw"]
    s = _tensorgc._series(raw["a"], raw["f"], raw["s"], len(trace), bytes([1, 2, 3]), 5)
    assert s["max"] == [4 * MB, 6 * MB, 6 * MB, 2 * MB, 3 * MB] and s["at"] == [0, 1, 2, 3, 4]
    assert (s["peak"], s["peak_at"]) == (6 * MB, 1) and s["peak_bycat"][1:3] == [4 * MB, 2 * MB]
    assert s["top"] == [0, 1]  # the largest alive at the peak
    s = _tensorgc._series(raw["a"], raw["f"], raw["s"], len(trace), None, 2)
    assert s["max"] == [6 * MB, 6 * MB] and s["bycat"] is None
    with pytest.raises(ValueError):
        _tensorgc._series(raw["a"], raw["f"], raw["s"], 2, None, 2)  # entries past the trace


def test_segments_made_freed_and_from_before():
    trace = [ev("segment_free", 0x100000, 2 * MB), ev("segment_alloc", 0x200000, 20 * MB),
             ev("alloc", 0x200000, MB), ev("segment_map", 0x800000, 4 * MB),
             ev("free_requested", 0x200000, MB), ev("segment_free", 0x200000, 20 * MB),
             ev("segment_unmap", 0x800000, 4 * MB),
             ev("segment_alloc", "x", 1),  # no numbers: not a segment
             ev("segment_alloc", 0x200000, 20 * MB)]  # the address again: s200000_1
    _, d = detail_of(trace)
    # (start, end, size, address, made by, ended by, memory_viz's version), on trace positions
    assert d["segments"] == [[0, 0, 2 * MB, 0x100000, -1, 0, 0],
                             [1, 5, 20 * MB, 0x200000, 1, 5, 0],
                             [3, 6, 4 * MB, 0x800000, 3, 6, 0],
                             [8, -1, 20 * MB, 0x200000, 8, -1, 1]]
    assert list(memoryview(d["other"]).cast("I")) == [0, 1, 3, 5, 6, 7, 8]


def test_columns_of_a_trace():
    trace = [ev("alloc", 0x1000, 512, time_us=5), ev("free_completed", 0x1000, 512),
             ev("weird_action", 1, 2), ev("oom", time_us=7)]
    del trace[1]["time_us"]
    kind, addr, size, time, stack, stacks, bad, rng = trace_columns(trace)
    assert list(kind) == [1, 3, 0, 4]
    assert list(memoryview(addr).cast("Q")) == [0x1000, 0x1000, 0, 0]
    assert list(memoryview(time).cast("q")) == [5, -2**63, 0, 7]
    # an alloc's stack, and a free's and an OOM's: entries of no kind have none
    assert list(memoryview(stack).cast("I")) == [1, 1, 0, 1] and bad == -1
    trace[0]["time_us"] = "soon"
    assert _tensorgc._trace_columns(trace)[6:] == (0, 0)
    trace[0]["time_us"] = 1 << 63
    assert _tensorgc._trace_columns(trace)[6:] == (0, 1)


@pytest.mark.parametrize("bad", [[{"action": "alloc", "addr": 1}], [{"action": "alloc",
                                 "addr": 1, "size": -1}], [{"action": "free_requested",
                                 "addr": "a", "size": 1}]])
def test_columns_refuse_a_malformed_event(bad):
    with pytest.raises(ValueError, match="allocator snapshot"):
        _tensorgc._trace_columns(bad)


def test_a_frame_lookup_that_runs_code_cannot_free_what_is_read():
    """A key of another type with the hash of 'line' makes each lookup of 'line' run its __eq__:
    code that empties the frames list, or drops the frame's file and name, under the reader."""
    class Key(str):
        armed = []

        def __hash__(self):
            return hash("line")

        def __eq__(self, other):
            while Key.armed:
                Key.armed.pop()()
            return False

        __ne__ = str.__ne__

    def frame(hostile=False):
        f = {"filename": "/w/" + "x" * 40, "name": "n" * 40}
        if hostile:
            f[Key("k")] = 0
        f["line"] = 1
        return f

    lists = []
    for drop in ("list", "fields", "entry"):
        f = frame(hostile=True)
        fr = [f] + [frame() for _ in range(40)]
        e = {"action": "alloc", "addr": 512, "size": 512, "frames": fr}
        act = {"list": fr.clear, "fields": lambda f=f: (f.pop("filename"), f.pop("name")),
               "entry": lambda e=e: e.pop("frames")}[drop]
        Key.armed.append(lambda act=act: (act(), [bytearray(48) for _ in range(500)]))
        lists.append(fr)
        del f, fr
        cols = _tensorgc._trace_columns([e, ev("alloc", 1024, 512)])
        assert len(cols[5]) >= 2 and cols[4][:4] == b"\x01\x00\x00\x00"
    assert not Key.armed


def test_the_last_address_has_its_own_slot():
    """2**64 - 1 (+ 1) is the address table's empty key: an allocation there, its free, a block
    alive at the end there and a segment there still pair up (they crashed the engine)."""
    top = (1 << 64) - 1
    trace = [ev("alloc", top, 512), ev("free_completed", top, 512), ev("alloc", top, 1024),
             ev("free_completed", 5, 7), ev("free_completed", top, 1024)]
    for pre in ((), [(top, 1024)], [(top - 1, 512)]):
        check(trace, pre, use_req=False)
    check([ev("free_requested", top, 512)], [(top, 512)])
    cols = _tensorgc._trace_columns(trace[:2])
    kinds = bytes([5, 6])  # a segment made and freed at that address, in columns given directly
    d = _tensorgc._detail((kinds,) + cols[1:], [], False, 10)
    assert d["segments"] == [[0, 1, 512, top, 0, 1, 0]]
