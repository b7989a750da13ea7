"""The plain-C graph engine (graph/graph.c), driven through ctypes without any Python object
graph: Tarjan on rings, chains and self-loops, the cycle/path/target roles, grouping, and the
bounded pick. It is the same shared object the extension loads."""
import ctypes
import random

import pytest

import tensorgc._tensorgc as ext

NONE = 0xFFFFFFFF
ROLE_CYCLE, ROLE_PATH, ROLE_TARGET = 1, 2, 4
u32p = ctypes.POINTER(ctypes.c_uint32)
u8p = ctypes.POINTER(ctypes.c_uint8)


class Graph(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("m", ctypes.c_uint32),
                ("out_off", u32p), ("out_dst", u32p), ("in_off", u32p), ("in_src", u32p)]


class Analysis(ctypes.Structure):
    _fields_ = [("scc", u32p), ("nscc", ctypes.c_uint32), ("cyclic", u8p), ("role", u8p),
                ("group", u32p), ("ngroups", ctypes.c_uint32), ("kept", ctypes.c_uint32)]


lib = ctypes.CDLL(ext.__file__)
lib.tgc_graph_build.argtypes = [ctypes.POINTER(Graph), ctypes.c_uint32, ctypes.c_uint32, u32p, u32p]
lib.tgc_graph_free.argtypes = [ctypes.POINTER(Graph)]
lib.tgc_scc.argtypes = [ctypes.POINTER(Graph), u32p, u32p]
lib.tgc_analyze.argtypes = [ctypes.POINTER(Graph), u8p, ctypes.POINTER(Analysis)]
lib.tgc_analysis_free.argtypes = [ctypes.POINTER(Analysis)]


class Bridge(ctypes.Structure):
    _fields_ = [("frm", ctypes.c_uint32), ("to", ctypes.c_uint32), ("count", ctypes.c_uint32)]


bridgep = ctypes.POINTER(Bridge)
lib.tgc_pick.argtypes = [ctypes.POINTER(Graph), ctypes.POINTER(Analysis), ctypes.c_uint32,
                         ctypes.c_uint32, u8p, bridgep, ctypes.c_size_t, u8p]
lib.tgc_pick.restype = ctypes.c_long
lib.tgc_chains.argtypes = [ctypes.POINTER(Graph), ctypes.POINTER(Analysis), ctypes.c_uint32,
                           ctypes.c_uint32, u8p, ctypes.POINTER(bridgep), ctypes.POINTER(ctypes.c_size_t)]
lib.tgc_chains.restype = ctypes.c_long
libc = ctypes.CDLL(None)
libc.free.argtypes = [ctypes.c_void_p]


class Engine:
    """Owns one built graph and (optionally) its analysis; frees both."""

    def __init__(self, n, edges):
        self.n = n
        src = (ctypes.c_uint32 * max(len(edges), 1))(*[s for s, _ in edges])
        dst = (ctypes.c_uint32 * max(len(edges), 1))(*[d for _, d in edges])
        self.g = Graph()
        assert lib.tgc_graph_build(ctypes.byref(self.g), n, len(edges), src, dst) == 0
        self.a = None

    def scc(self):
        out = (ctypes.c_uint32 * max(self.n, 1))()
        count = ctypes.c_uint32()
        assert lib.tgc_scc(ctypes.byref(self.g), out, ctypes.byref(count)) == 0
        return list(out)[: self.n], count.value

    def analyze(self, targets):
        flags = (ctypes.c_uint8 * max(self.n, 1))(*[1 if v in targets else 0 for v in range(self.n)])
        self.a = Analysis()
        assert lib.tgc_analyze(ctypes.byref(self.g), flags, ctypes.byref(self.a)) == 0
        return self.a

    def roles(self):
        return [self.a.role[v] for v in range(self.n)]

    def groups(self):
        return [self.a.group[v] for v in range(self.n)]

    def pick(self, group, budget, skip=None, bridges=()):
        draw = (ctypes.c_uint8 * max(self.n, 1))()
        skip_arr = (ctypes.c_uint8 * max(self.n, 1))(*skip) if skip is not None else None
        br = (Bridge * max(len(bridges), 1))(*[Bridge(f, t, c) for f, t, c in bridges])
        picked = lib.tgc_pick(ctypes.byref(self.g), ctypes.byref(self.a), group, budget,
                              skip_arr, br, len(bridges), draw)
        return picked, {v for v in range(self.n) if draw[v]}

    def chains(self, group, keep, hidden=()):
        skip = (ctypes.c_uint8 * max(self.n, 1))(*[1 if v in hidden else 0 for v in range(self.n)])
        out = bridgep()
        nb = ctypes.c_size_t()
        skipped = lib.tgc_chains(ctypes.byref(self.g), ctypes.byref(self.a), group, keep, skip,
                                 ctypes.byref(out), ctypes.byref(nb))
        bridges = [(out[i].frm, out[i].to, out[i].count) for i in range(nb.value)]
        libc.free(out)
        return skipped, [skip[v] for v in range(self.n)], bridges

    def close(self):
        if self.a is not None:
            lib.tgc_analysis_free(ctypes.byref(self.a))
        lib.tgc_graph_free(ctypes.byref(self.g))


@pytest.fixture
def engine():
    made = []

    def make(n, edges):
        e = Engine(n, edges)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def components(scc):
    comps = {}
    for v, c in enumerate(scc):
        comps.setdefault(c, set()).add(v)
    return sorted(map(frozenset, comps.values()), key=min)


def test_scc_two_cycles_and_a_chain(engine):
    # 0<->1 -> 2 -> 3<->4<->5->3 ; 6 alone
    e = engine(7, [(0, 1), (1, 0), (1, 2), (2, 3), (3, 4), (4, 5), (5, 3)])
    scc, count = e.scc()
    assert count == 4
    assert components(scc) == [frozenset({0, 1}), frozenset({2}), frozenset({3, 4, 5}), frozenset({6})]
    # numbered sinks first: a component's successors have smaller numbers
    assert scc[3] < scc[2] < scc[0]


def test_scc_matches_bruteforce_on_random_graphs(engine):
    rng = random.Random(1234)
    for _ in range(30):
        n = rng.randint(1, 40)
        edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, 3 * n))]
        scc, _ = engine(n, edges).scc()
        reach = [{v} for v in range(n)]
        changed = True
        while changed:  # transitive closure, the slow obvious way
            changed = False
            for s, d in edges:
                for v in range(n):
                    if s in reach[v] and not reach[d] <= reach[v]:
                        reach[v] |= reach[d]
                        changed = True
        for u in range(n):
            for v in range(n):
                assert (scc[u] == scc[v]) == (v in reach[u] and u in reach[v]), (n, edges, u, v)


def test_million_node_ring_needs_no_recursion(engine):
    n = 1_000_000
    e = engine(n, [(v, (v + 1) % n) for v in range(n)])
    scc, count = e.scc()
    assert count == 1 and len(set(scc)) == 1


def test_roles_cycle_path_target(engine):
    # cycle 0<->1, path 1 -> 2 -> 3 (target); 4 -> 0 (a referrer of the cycle, not on a path);
    # 5<->6 a tensor-free cycle
    e = engine(7, [(0, 1), (1, 0), (1, 2), (2, 3), (4, 0), (5, 6), (6, 5)])
    e.analyze({3})
    roles = e.roles()
    assert roles[0] == ROLE_CYCLE and roles[1] == ROLE_CYCLE
    assert roles[2] == ROLE_PATH
    assert roles[3] == ROLE_PATH | ROLE_TARGET
    assert roles[4] == 0 and roles[5] == 0 and roles[6] == 0
    assert e.a.kept == 4 and e.a.ngroups == 1


def test_target_inside_the_cycle_and_self_loop(engine):
    e = engine(3, [(0, 0), (1, 2), (2, 1)])
    e.analyze({0, 2})
    roles = e.roles()
    assert roles[0] == ROLE_CYCLE | ROLE_TARGET  # a target in the cycle needs no path
    assert roles[1] & ROLE_CYCLE and roles[2] & ROLE_TARGET
    assert e.a.ngroups == 2 and e.groups()[0] != e.groups()[1]


def test_shortest_path_is_kept_not_the_detour(engine):
    # cycle 0<->1; 0 -> 2 -> 3 -> 9 (long) and 1 -> 9 (short)
    e = engine(10, [(0, 1), (1, 0), (0, 2), (2, 3), (3, 9), (1, 9)])
    e.analyze({9})
    roles = e.roles()
    assert roles[9] & ROLE_TARGET
    assert roles[2] == 0 and roles[3] == 0


def test_unreached_target_and_acyclic_garbage_dropped(engine):
    e = engine(3, [(0, 1), (1, 2)])
    e.analyze({2})
    assert e.a.kept == 0 and e.a.ngroups == 0


def test_thousand_identical_leaks_are_thousand_groups(engine):
    edges = []
    for k in range(1000):
        a, b, t = 3 * k, 3 * k + 1, 3 * k + 2
        edges += [(a, b), (b, a), (a, t)]
    e = engine(3000, edges)
    e.analyze({3 * k + 2 for k in range(1000)})
    assert e.a.ngroups == 1000 and e.a.kept == 3000


def test_pick_is_bounded_and_starts_at_the_target(engine):
    n = 10_000
    edges = [(v, (v + 1) % n) for v in range(n)] + [(5000, n)]
    e = engine(n + 1, edges)
    e.analyze({n})
    assert e.a.kept == n + 1
    picked, drawn = e.pick(0, 200)
    assert picked == 200 == len(drawn)
    assert n in drawn and 5000 in drawn  # the tensor and its holder
    assert 4999 in drawn and 5001 in drawn  # the ring around the holder, both directions


def test_empty_graph(engine):
    e = engine(0, [])
    assert e.scc() == ([], 0)
    e.analyze(set())
    assert e.a.kept == 0


lib.tgc_relevant.argtypes = [ctypes.POINTER(Graph), u8p, u8p]
lib.tgc_relevant.restype = ctypes.c_long


def test_relevant_is_ancestors_plus_their_forward_closure(engine):
    # 0<->1 holds target 2; 2 -> 3 (tensor's own referent); 4 -> 0 (referrer); 5<->6 unrelated;
    # 7 -> 5 (refers to the unrelated pair only)
    e = engine(8, [(0, 1), (1, 0), (1, 2), (2, 3), (4, 0), (5, 6), (6, 5), (7, 5)])
    target = (ctypes.c_uint8 * 8)(*[1 if v == 2 else 0 for v in range(8)])
    keep = (ctypes.c_uint8 * 8)()
    assert lib.tgc_relevant(ctypes.byref(e.g), target, keep) == 5
    assert [v for v in range(8) if keep[v]] == [0, 1, 2, 3, 4]


def ring_with_tensor(n):
    """A ring 0 -> 1 -> ... -> n-1 -> 0 whose node 0 holds the target n."""
    return [(i, (i + 1) % n) for i in range(n)] + [(0, n)]


def test_chains_shorten_a_long_ring_to_its_ends_and_one_bridge():
    n = 10_000
    e = Engine(n + 1, ring_with_tensor(n))
    try:
        e.analyze({n})
        skipped, skip, bridges = e.chains(0, 4)
        # nodes 1 .. n-1 form the chain (0 has two out-edges, n is the target)
        assert skipped == n - 1 - 8
        assert bridges == [(4, n - 4, n - 1 - 8)]
        assert [v for v in range(n + 1) if not skip[v]] == [0, 1, 2, 3, 4, n - 4, n - 3, n - 2, n - 1, n]
        picked, drawn = e.pick(0, 300, skip, bridges)
        assert drawn == {0, 1, 2, 3, 4, n - 4, n - 3, n - 2, n - 1, n} and picked == 10
    finally:
        e.close()


def test_chains_leave_short_chains_hidden_nodes_and_pure_rings_alone():
    e = Engine(10, ring_with_tensor(9))
    try:
        e.analyze({9})
        assert e.chains(0, 4)[0] == 0  # 8 chain nodes <= 2 * 4 + 1
    finally:
        e.close()
    # a chain through a hidden node is cut there: neither half is long enough
    n = 14
    e = Engine(n + 1, ring_with_tensor(n))
    try:
        e.analyze({n})
        skipped, skip, bridges = e.chains(0, 4, hidden={7})
        assert skipped == 0 and bridges == [] and skip[7] == 1
    finally:
        e.close()


def test_pick_follows_bridges_and_never_picks_skipped_nodes():
    n = 50
    e = Engine(n + 1, ring_with_tensor(n))
    try:
        e.analyze({n})
        skip = [0] * (n + 1)
        for v in range(5, 46):
            skip[v] = 2
        picked, drawn = e.pick(0, 100, skip, [(4, 46, 41)])
        assert drawn == set(range(0, 5)) | set(range(46, 51))
        picked, drawn = e.pick(0, 100, skip, [])
        assert drawn == set(range(0, 5)) | set(range(46, 51))  # reached the other way round
        picked, drawn = e.pick(0, 3, skip, [(4, 46, 41)])
        assert picked == 3 and not drawn & set(range(5, 46))
    finally:
        e.close()
