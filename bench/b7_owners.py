#!/usr/bin/env python
"""B7 -- what naming the owner of 1,000 leaked objects costs, vs one gc.collect() and objgraph.

Setup (per run, in a fresh interpreter, with ``gc.disable()`` so that nothing else collects): a
heap of ``--heap`` (1,000,000) live gc-tracked objects (``_common.build_heap``, as B1 and B2),
pushed to the oldest generation, and ``--leaks`` (1,000) leaked objects (``--leak``: CPU tensors,
``torch.empty(16)``, or small slotted instances), each held by one realistic owner, the kinds
taking turns:

* ``list``     -- a global list: ``LOSS_HISTORY.append(leak)``;
* ``cache``    -- a dict cache keyed by int: ``BATCH_CACHE[i] = leak``;
* ``registry`` -- an attribute of an instance kept in a module-level registry:
  ``HOOK_REGISTRY.append(hook)``, ``hook.saved = leak``;
* ``closure``  -- a closure cell of a global function: ``on_step_<i> = make_callback(leak)``;
* ``class``    -- a class attribute's dict: ``Trainer.checkpoints[f"step{i}"] = leak``.

``--owner-padding N`` puts N entries that are not leaks in each of those lists and dicts (and N
hooks in the registry) first, as a real loss history or cache holds more than what leaks from it.
The benchmark keeps only weak references to the leaks, so its own frame is no second owner.
Timed with ``time.perf_counter``, one after the other in the same process, in each run:

1. ``gc.collect()`` -- one full collection of that heap: the reference;
2. ``tensorgc.owners(leaks)`` -- all 1,000 chains in one call;
3. objgraph's ``find_backref_chain(leak, objgraph.is_proper_module)`` on a sample of
   ``--objgraph-sample`` (10) leaks, spread over the owner kinds; its per-leak mean times
   ``--leaks`` is the extrapolated time for all of them (it calls ``gc.collect()`` itself, then
   one ``gc.get_referrers`` -- a scan of every tracked object -- per object it expands).

``--deep``: one more leak, held only by the heap's last object (``heap[-1].value``), the heap
being a local of the measuring function (its caller's frame, which ``owners()`` searches last):
``owners([that leak])`` visits the whole heap before it reaches it, the case the default bound
(``max_objects=None``: the heap's size) is for. Timed alone, after the others; its chain must be
of kind ``root`` and end in ``local heap [N] .value``, and the number of objects it visited is
reported beside the bound a fixed default of 10,000,000 would have been.

Then one more ``owners()`` call with ``tensorgc._tensorgc._owner_search`` wrapped, and
``gc.get_objects()`` timed alone: where the call's time goes (the C search, the rest in Python).

Checks, so that no figure measures a search that found nothing: every owners() chain is of kind
``root`` and its holder names the leak's real owner (``__main__.LOSS_HISTORY``, ...), and every
sampled objgraph chain runs from the ``__main__`` module through that same owner object to the
leak. A run that fails a check is an error, not a time.

Runs: ``--repeat`` fresh processes (default 5), medians reported, capped by ``--timeout``
seconds for the objgraph sample. Output: a markdown table on stdout (median, ratio, every run),
JSON to ``--json``, progress on stderr.

    python3 bench/b7_owners.py --repeat 5
    python3 bench/b7_owners.py --leak object --heap 100000 --repeat 1    # quick, without torch
    python3 bench/b7_owners.py --owner-padding 10000 --repeat 3 --objgraph-sample 5  # big owners
    python3 bench/b7_owners.py --heap 10000000 --leak object --objgraph-sample 0 --deep  # 10M
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import sys
import time
import weakref

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

KINDS = ("list", "cache", "registry", "closure", "class")
# the owner each kind's leaks must be charged to (a global of this module, the worker's __main__)
OWNER_NAME = {"list": "LOSS_HISTORY", "cache": "BATCH_CACHE", "registry": "HOOK_REGISTRY",
              "closure": "on_step_{i}", "class": "Trainer"}

LOSS_HISTORY: list = []
BATCH_CACHE: dict = {}
HOOK_REGISTRY: list = []


class Hook:
    def __init__(self, saved):
        self.saved = saved


class Trainer:
    checkpoints: dict = {}


class Leak:
    """The small leaked object of ``--leak object`` (weakly referable, gc-tracked)."""

    __slots__ = ("payload", "__weakref__")

    def __init__(self, i):
        self.payload = [i]


def make_callback(leak):
    def on_step():
        return leak

    return on_step


def pad_owners(n: int) -> None:
    """``n`` more entries (floats; hooks holding a float) in each container that owns leaks, before
    the leaks: a loss history or a cache holds more than what leaks from it."""
    LOSS_HISTORY.extend(0.5 + i for i in range(n))
    BATCH_CACHE.update((-1 - i, 0.5 + i) for i in range(n))
    HOOK_REGISTRY.extend(Hook(0.5 + i) for i in range(n))
    Trainer.checkpoints.update((f"pad{i}", 0.5 + i) for i in range(n))


def make_leaks(n: int, kind: str) -> tuple:
    """(weak references to the leaks, the kind of each, the id of each one's owner object, its
    name). Ids, not the owners: a list of them would be a second owner of the registry's leaks."""
    g = globals()
    if kind == "tensor":
        import torch

        def new(i):
            return torch.empty(16)
    else:
        new = Leak
    refs, kinds, owner_objs, names = [], [], [], []
    for i in range(n):
        k = KINDS[i % len(KINDS)]
        leak = new(i)
        if k == "list":
            LOSS_HISTORY.append(leak)
            owner = LOSS_HISTORY
        elif k == "cache":
            BATCH_CACHE[i] = leak
            owner = BATCH_CACHE
        elif k == "registry":
            owner = Hook(leak)
            HOOK_REGISTRY.append(owner)
        elif k == "closure":
            owner = g[f"on_step_{i}"] = make_callback(leak)
        else:
            Trainer.checkpoints[f"step{i}"] = leak
            owner = Trainer
        refs.append(weakref.ref(leak))
        kinds.append(k)
        owner_objs.append(id(owner))
        names.append(OWNER_NAME[k].format(i=i))
    return refs, kinds, owner_objs, names


def pick_sample(kinds: list, n: int) -> list:
    """``n`` leak indices, the owner kinds taking turns, spread evenly within each kind."""
    by_kind = {k: [i for i, x in enumerate(kinds) if x == k] for k in KINDS}
    want = {k: 0 for k in KINDS}
    for j in range(min(n, len(kinds))):
        want[KINDS[j % len(KINDS)]] += 1
    out = []
    for k in KINDS:
        idx, m = by_kind[k], want[k]
        out += [idx[(s * len(idx)) // m] for s in range(m)] if m and idx else []
    return sorted(out)


def check_owners(chains, refs, kinds, names) -> dict:
    bad = []
    prefix = __name__ + "."  # the owners are this module's globals ("__main__" in the worker)
    for i, ch in enumerate(chains):
        holder = ch.holder
        if ch.kind != "root" or not holder.startswith(prefix) or holder[len(prefix):] != names[i]:
            bad.append({"leak": i, "kind": kinds[i], "owner": names[i], "chain": str(ch),
                        "chain_kind": ch.kind})
    examples = {}
    for i, ch in enumerate(chains):
        examples.setdefault(kinds[i], str(ch))
    return {"ok": not bad and len(chains) == len(refs), "bad": bad[:5], "n_bad": len(bad),
            "others_max": max((ch.others for ch in chains), default=0), "examples": examples}


def deep_leak(heap: list, owners, search_mod, leak_kind: str) -> dict:
    """--deep: a leak only the heap's last object holds, found after the whole heap; its time,
    chain and the objects visited. ``heap`` is the caller's local: owners() searches it last."""
    if leak_kind == "tensor":
        import torch

        heap[-1].value = torch.empty(16)
    else:
        heap[-1].value = Leak(-1)
    ref = weakref.ref(heap[-1].value)
    real = search_mod._owner_search
    seen = {}

    def counted(*a):
        res = real(*a)
        seen["visited"] = res[2].get("visited")
        seen["bound"] = a[5]
        return res

    search_mod._owner_search = counted
    try:
        t0 = time.perf_counter()
        chain = owners([ref()])[0]
        took = time.perf_counter() - t0
    finally:
        search_mod._owner_search = real
    text = str(chain)
    ok = chain.kind == "root" and text.endswith(f"local heap [{len(heap) - 1}] .value")
    heap[-1].value = 0
    return {"deep_s": took, "deep_ok": ok, "deep_chain": text, "deep_visited": seen.get("visited"),
            "deep_bound": seen.get("bound")}


def worker(cfg: dict) -> None:
    leak_kind = cfg["leak"]
    if leak_kind == "tensor":
        import torch  # noqa: F401 -- imported before the heap, as a real program would
    tensorgc = C.import_tensorgc()
    owners = tensorgc.owners
    search_mod = importlib.import_module("tensorgc._tensorgc")
    objgraph = importlib.import_module("objgraph") if cfg["objgraph_sample"] else None

    gc.disable()
    heap = C.build_heap(cfg["heap"])
    pad_owners(cfg.get("owner_padding", 0))
    refs, kinds, owner_objs, names = make_leaks(cfg["leaks"], leak_kind)
    gc.collect()
    C.settle()
    tracked = len(gc.get_objects())  # heap + leaks + everything the interpreter (and torch) hold

    # 1. the reference: one full collection
    t0 = time.perf_counter()
    collected = gc.collect()
    gc_s = time.perf_counter() - t0

    # 2. every leak's owner, one call (the genexpr hands over the leaks and keeps none)
    t0 = time.perf_counter()
    chains = owners(r() for r in refs)
    owners_s = time.perf_counter() - t0
    check = check_owners(chains, refs, kinds, names)
    del chains

    # where an owners() call goes (a second call, untimed as a whole above)
    breakdown = {}
    t0 = time.perf_counter()
    objs = gc.get_objects()
    breakdown["get_objects_s"] = time.perf_counter() - t0
    del objs
    # the C search wrapped for one more call; gc.get_objects() (which owners() calls for its
    # second pass) timed alone. (A wrapper around the root listing would itself be a frame the
    # listing sees, so the rest is timed as one: roots, gc.get_objects(), the chains' labels.)
    real = search_mod._owner_search
    seen = {}

    def timed_search(*a):
        s0 = time.perf_counter()
        res = real(*a)
        seen["search_s"] = time.perf_counter() - s0
        if isinstance(res, tuple) and len(res) == 3 and isinstance(res[2], dict):
            seen["info"] = dict(res[2])
        return res

    search_mod._owner_search = timed_search
    try:
        t0 = time.perf_counter()
        again = owners(r() for r in refs)
        breakdown["total_s"] = time.perf_counter() - t0
    finally:
        search_mod._owner_search = real
    again_ok = check_owners(again, refs, kinds, names)["ok"]
    del again
    breakdown["search_s"] = seen.get("search_s")
    breakdown.update(seen.get("info", {}))
    breakdown["python_s"] = breakdown["total_s"] - (breakdown["search_s"] or 0.0)

    if cfg.get("deep"):
        breakdown.update(deep_leak(heap, owners, search_mod, leak_kind))

    # 3. objgraph, on a sample
    sample = pick_sample(kinds, cfg["objgraph_sample"])
    done = [0]
    og_times, og_bad = [], []
    extra = {"gc_collect_s": gc_s, "owners_s": owners_s, "owners_check": check, "breakdown": breakdown,
             "tracked_objects": tracked, "objgraph_leak_s": og_times,
             "objgraph_version": getattr(objgraph, "__version__", None)}
    C.arm_timeout(cfg["timeout"], done, len(sample), extra)
    main_mod = sys.modules["__main__"]
    for i in sample:
        leak = refs[i]()
        t0 = time.perf_counter()
        chain = objgraph.find_backref_chain(leak, objgraph.is_proper_module)
        og_times.append(time.perf_counter() - t0)
        if not (len(chain) > 1 and chain[0] is main_mod and chain[-1] is leak
                and any(id(x) == owner_objs[i] for x in chain)):
            og_bad.append({"leak": i, "kind": kinds[i], "types": [type(x).__name__ for x in chain]})
        del chain, leak
        done[0] += 1
    C.disarm_timeout()
    per_leak = statistics.fmean(og_times) if og_times else None
    result = {**extra, "timed_out": False, "seconds": owners_s, "collected": collected,
              "owners_again_ok": again_ok, "objgraph_sample": sample, "objgraph_ok": not og_bad,
              "objgraph_bad": og_bad[:5],
              "objgraph_per_leak_s": per_leak,
              "objgraph_all_s": per_leak * len(refs) if per_leak is not None else None,
              "leaks_alive": sum(r() is not None for r in refs)}
    deep_ok = not cfg.get("deep") or breakdown.get("deep_ok")
    if not (check["ok"] and again_ok and not og_bad and deep_ok):
        result["error"] = "a check failed: " + json.dumps({"owners": check["bad"], "objgraph": og_bad[:3],
                                                           "deep": breakdown.get("deep_chain")})
    C.emit_result(result)
    del heap


# --------------------------------------------------------------------------- parent

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="B7: tensorgc.owners() of 1,000 leaks vs one gc.collect() and objgraph.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--heap", type=int, default=1_000_000, help="live heap size (gc-tracked objects)")
    p.add_argument("--leaks", type=int, default=1_000, help="leaked objects, each with one owner")
    p.add_argument("--leak", choices=["auto", "tensor", "object"], default="auto",
                   help="what leaks: torch.empty(16) on CPU, a small slotted instance, or "
                        "auto (tensor when torch imports)")
    p.add_argument("--owner-padding", type=int, default=0,
                   help="entries that are not leaks in each owning list, dict and registry (first)")
    p.add_argument("--objgraph-sample", type=int, default=10,
                   help="leaks timed with objgraph.find_backref_chain (0: skip objgraph)")
    p.add_argument("--deep", action="store_true",
                   help="also time the owner of a leak only the heap's last object holds")
    p.add_argument("--repeat", type=int, default=5, help="runs, each a fresh subprocess")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for one run's objgraph sample")
    p.add_argument("--json", default=None, help="write all results as JSON to this path")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _med(runs, key):
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def _ms(v):
    return "-" if v is None else f"{1000 * v:,.1f}"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0

    leak = args.leak
    if leak == "auto":
        try:
            import torch  # noqa: F401
            leak = "tensor"
        except ImportError:
            leak = "object"
    if args.objgraph_sample:
        try:
            import objgraph  # noqa: F401
        except ImportError:
            raise SystemExit("B7 needs objgraph (make bench installs the pinned version; "
                             "--objgraph-sample 0 runs without it)")
    env = C.environment("cpu")
    C.log(f"[B7] heap={args.heap:,} leaks={args.leaks:,} ({leak}) objgraph sample={args.objgraph_sample} "
          f"repeat={args.repeat} timeout={args.timeout:g}s")

    runs = []
    script = os.path.abspath(__file__)
    for r in range(args.repeat):
        cfg = {"heap": args.heap, "leaks": args.leaks, "leak": leak, "owner_padding": args.owner_padding,
               "objgraph_sample": args.objgraph_sample, "timeout": args.timeout,
               "deep": args.deep}
        res = C.run_worker(script, cfg, args.timeout)
        runs.append(res)
        msg = (f"gc.collect {_ms(res.get('gc_collect_s'))} ms, owners {_ms(res.get('owners_s'))} ms, "
               f"objgraph {_ms(res.get('objgraph_per_leak_s'))} ms/leak")
        if res.get("timed_out"):
            msg += f" (objgraph timed out, {len(res.get('objgraph_leak_s') or [])} leaks done)"
        if res.get("error"):
            msg += f" ERROR {res['error']}"
        C.log(f"[B7] run {r + 1}/{args.repeat}: {msg}")
        if res.get("stderr_tail"):
            C.log("     stderr: " + res["stderr_tail"].strip().replace("\n", "\n     "))

    good = [r for r in runs if not r.get("error") and r.get("owners_s") is not None]
    og_runs = [r for r in good if not r.get("timed_out") and r.get("objgraph_per_leak_s") is not None]
    gc_med, ow_med = _med(good, "gc_collect_s"), _med(good, "owners_s")
    og_leak = _med(og_runs, "objgraph_per_leak_s")
    og_all = _med(og_runs, "objgraph_all_s")
    ratio_gc = ow_med / gc_med if gc_med and ow_med is not None else None
    ratio_og = og_all / ow_med if og_all and ow_med else None
    paired = [r["owners_s"] / r["gc_collect_s"] for r in good if r.get("gc_collect_s")]
    paired_med = statistics.median(paired) if paired else None
    bd = {k: _med([r["breakdown"] for r in good], k)
          for k in ("total_s", "search_s", "python_s", "get_objects_s", "visited")}

    def runs_ms(key, rs=good):
        return ", ".join(_ms(r.get(key)) for r in rs)

    pad = f", {args.owner_padding:,} more entries in each owner" if args.owner_padding else ""
    print(f"### B7 owners: {args.leaks:,} leaks ({leak}){pad} on a {args.heap:,}-object heap")
    print()
    print(f"python {env['python']}, torch {env.get('torch')}, objgraph "
          f"{next((r.get('objgraph_version') for r in good), '?')}, {env.get('cpu_count')} CPUs, "
          f"repeat={args.repeat} ({len(good)} good)")
    print()
    tracked = next((r["tracked_objects"] for r in good if r.get("tracked_objects")), None)
    if tracked:
        also = " + torch" if leak == "tensor" else ""
        print(f"gc-tracked objects alive: {tracked:,} (heap + leaks + interpreter{also})")
        print()
    print("| measurement | median (ms) | vs gc.collect() | runs (ms) |")
    print("| --- | ---: | ---: | --- |")
    print(f"| `gc.collect()`, full | {_ms(gc_med)} | 1.00x | {runs_ms('gc_collect_s')} |")
    print(f"| `owners()` of {args.leaks:,} leaks, one call | {_ms(ow_med)} | "
          f"{f'{ratio_gc:.2f}x' if ratio_gc else 'n/a'} | {runs_ms('owners_s')} |")
    again = _med([r["breakdown"] for r in good], "total_s")
    print(f"| `owners()` again, same process (the breakdown's call) | {_ms(again)} | "
          f"{f'{again / gc_med:.2f}x' if again and gc_med else 'n/a'} | "
          f"{', '.join(_ms(r['breakdown'].get('total_s')) for r in good)} |")
    if args.objgraph_sample:
        print(f"| objgraph `find_backref_chain`, per leak (mean of {args.objgraph_sample}) | {_ms(og_leak)} | "
              f"{f'{og_leak / gc_med:.2f}x' if og_leak and gc_med else 'n/a'} | "
              f"{runs_ms('objgraph_per_leak_s', og_runs)} |")
        print(f"| objgraph, extrapolated to {args.leaks:,} leaks | {_ms(og_all)} | "
              f"{f'{og_all / gc_med:.0f}x' if og_all and gc_med else 'n/a'} | {runs_ms('objgraph_all_s', og_runs)} |")
    print()
    print(f"owners / gc.collect: **{f'{ratio_gc:.2f}x' if ratio_gc else 'n/a'}** (target <= 2x; "
          f"median of each run's own ratio {f'{paired_med:.2f}x' if paired_med else 'n/a'}: "
          f"{', '.join(f'{x:.2f}' for x in paired)}); "
          f"objgraph for all leaks / owners: **{f'{ratio_og:.0f}x' if ratio_og else 'n/a'}**")
    print()
    visited = f"{bd['visited']:,.0f}" if bd["visited"] is not None else "?"
    print(f"where an owners() call goes (medians, ms): total {_ms(bd['total_s'])}; C search "
          f"{_ms(bd['search_s'])} ({visited} objects visited); "
          f"the rest in Python {_ms(bd['python_s'])} (roots, labels; gc.get_objects() alone takes "
          f"{_ms(bd['get_objects_s'])})")
    print()
    if args.deep:
        deep = [r["breakdown"] for r in good if r["breakdown"].get("deep_s") is not None]
        d_med = _med(deep, "deep_s")
        vis = _med(deep, "deep_visited")
        bound = _med(deep, "deep_bound")
        print(f"--deep: `owners()` of a leak only the heap's last object holds: {_ms(d_med)} ms "
              f"median ({f'{d_med / gc_med:.2f}x' if d_med and gc_med else 'n/a'} of gc.collect; "
              f"runs {', '.join(_ms(r.get('deep_s')) for r in deep)}); "
              f"{f'{vis:,.0f}' if vis else '?'} objects visited, default bound "
              f"{f'{bound:,.0f}' if bound else '?'} (a fixed 10,000,000 would "
              f"{'not reach it' if vis and vis > 10_000_000 else 'reach it'}); chain "
              f"`{deep[0]['deep_chain'] if deep else '?'}`")
        print()
    ex = next((r["owners_check"]["examples"] for r in good), {})
    if ex:
        print("| owner kind | chain (first leak of the kind) |")
        print("| --- | --- |")
        for k in KINDS:
            if k in ex:
                print(f"| {k} | `{ex[k]}` |")
        print()
    bad = [r for r in runs if r.get("error")]
    if bad:
        print(f"{len(bad)} run(s) failed: {bad[0]['error'][:500]}")
        print()
    sys.stdout.flush()
    C.write_json(args.json, {"benchmark": "B7", "config": {**{k: v for k, v in vars(args).items() if k != "worker"},
                                                           "leak": leak},
                             "env": env,
                             "summary": {"gc_collect_median_s": gc_med, "owners_median_s": ow_med,
                                         "owners_vs_gc_collect": ratio_gc,
                                         "owners_vs_gc_collect_per_run_median": paired_med,
                                         "objgraph_per_leak_median_s": og_leak,
                                         "objgraph_all_median_s": og_all,
                                         "objgraph_all_vs_owners": ratio_og, "owners_breakdown": bd},
                             "runs": runs})
    return 0 if good and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
