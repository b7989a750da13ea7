#!/usr/bin/env python
"""B1 -- overhead of a cycle detector on a program that makes lots of cyclic garbage.

Setup (per run, in a fresh interpreter): a heap of N live gc-tracked objects
(slotted instances, each pointing at an earlier one) is built and pushed to the
oldest generation with one ``gc.collect()``.  Then the timed loop makes
``--pairs`` pairs of tensor-FREE cyclic garbage (``a.other = b; b.other = a``, made by
a Python function ``make_pair()``, as real code allocates inside calls),
with ``--tensor-cycles`` (100) tensor self-cycles interleaved evenly (an object
holding a small tensor of the device and itself).  Automatic gc stays ENABLED:
the collector runs as allocations trigger it, which is the realistic case, and
every young collection finds garbage.

``--shape`` picks the garbage (default ``slots``, the pairs above): ``dict`` (pairs of ordinary
instances with an instance dict, each also holding a small list: what real programs make),
``list`` (two lists holding each other), ``dictobj`` (two plain dicts), ``closure`` (two nested
functions, each calling the other: functions, cells, closure tuples), ``method`` (two instances
each storing a bound method of itself, ``self.cb = self.method``), ``mixed`` (one of each of
those five per step).

Modes (each run in its own subprocess, ``--repeat`` times, median reported):

* ``plain``    -- no detector.
* ``tensorgc`` -- ``tensorgc.observe_cycles(cb, device=<dev>)``; ``cb`` reads
  ``report.text`` (``--access``: none/text/html).
* ``tensorgc-callbacks`` -- the same with the resident sentinel switched off
  (``tensorgc._tensorgc_testing._resident(False)``): the detector's hook stays on
  ``gc.callbacks`` and plants its sentinel at every "start".
* ``tensorgc-prescan`` -- the same with the sentinel switched off
  (``tensorgc._tensorgc_testing._sentinel(False)``): the pre-scan walks what each collection is
  about to examine, proves islands, and arms the rest, as where no sentinel can be planted.
* ``tensorgc-noisland`` -- the pre-scan path with islands switched off
  (``tensorgc._tensorgc_testing._young_island(False)``): every young collection that could hold a tensor
  is armed (DEBUG_SAVEALL).
* ``tensorgc-noscan`` -- the same with the young-generation pre-scan switched off
  (``tensorgc._tensorgc_testing._young_scan(False)``): every collection is armed, as before it existed.
* ``floor``    -- no detector; a C no-op (``operator.is_``) on ``gc.callbacks``: what CPython
  spends calling any gc callback (twice per collection), which no detector there can avoid.
* ``import``   -- ``import tensorgc`` and nothing else: what loading the package costs the loop
  (a different heap layout, more modules) apart from the detector's own work.
* ``torch``    -- PyTorch's own detector.  On CUDA:
  ``torch.utils.viz._cycles.observe_tensor_cycles(cb)``.  That function is CUDA-only
  (it calls ``torch.cuda.memory._record_memory_history`` and a CUDA allocator snapshot
  and only looks for CUDA tensors), so on CPU the benchmark uses torch's
  ``observe_garbage`` with an observer that does what ``observe_tensor_cycles``'s does
  for the right device: when the garbage holds a tensor of the device, build the graph
  (``create_graph``) and render it (``to_html``), then call ``cb(html)``.  The dominant
  cost, ``observe_garbage`` itself (DEBUG_SAVEALL plus forced *full* collections after
  every collection that found garbage), is the same code either way.

With ``--loops K`` a run times the loop K times in its process and keeps the fastest (torch's
detector: always one loop), which filters bursts of load from elsewhere on a shared machine;
every loop's time is in the JSON (``loop_seconds``).

Each run's measured section is capped by ``--timeout`` seconds (reported as ``>T s``
with how far it got); after a timeout the remaining repeats of that (heap, mode) are
skipped unless ``--no-skip-after-timeout``.  Times are ``time.perf_counter`` seconds (with
``--clock cpu``: ``time.thread_time``, the main thread's CPU time, which leaves out the time other
processes of a shared machine had the core; the timeout stays wall-clock)
of the loop only (interpreter start, torch import and heap build are not timed).

Output: a markdown table (one row per heap and mode: median seconds, ratio vs the
``plain`` median of the same invocation, every run, reports seen, collections per
generation during the loop, gc-tracked objects alive when the loop starts -- the heap
plus what the interpreter and torch already hold, ~165k on CPython 3.11 + torch 2.13
CPU) on stdout, JSON to ``--json``, progress on stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

MODES = ("plain", "floor", "import", "tensorgc", "tensorgc-callbacks", "tensorgc-prescan",
         "tensorgc-noisland", "tensorgc-noscan", "torch")


# --------------------------------------------------------------------------- worker

class Pair:
    __slots__ = ("other",)


def make_pair():
    """One pair of tensor-free cyclic garbage.

    A Python-level function on purpose: real code allocates inside function calls, and
    torch's ``observe_garbage`` does its work from a ``sys.setprofile`` hook on the next
    call event after a collection.  A loop with no call events would postpone (and
    batch) torch's work -- keeping DEBUG_SAVEALL on meanwhile -- which is not what
    happens in a real program.
    """
    a = Pair()
    b = Pair()
    a.other = b
    b.other = a


class Node:
    """An ordinary class: its instances have an instance dict."""


def make_dict_pair():
    a = Node()
    b = Node()
    a.other = b
    b.other = a
    a.items = [0, 1]  # each also holds a small list of its own
    b.items = [2, 3]


def make_list_pair():
    a = []
    b = [a]
    a.append(b)


def make_dictobj_pair():
    a = {}
    b = {"peer": a}
    a["peer"] = b


def make_closure_pair():
    def f():
        return g

    def g():
        return f


class Handler:
    """A bound method stored on its own instance: instance -> method -> instance."""

    def __init__(self):
        self.cb = self.method

    def method(self):
        return None


def make_method_pair():
    Handler()
    Handler()


def make_mixed():
    """One of each of the other shapes but slots: five steps' garbage in one."""
    make_dict_pair()
    make_list_pair()
    make_dictobj_pair()
    make_closure_pair()
    make_method_pair()


# --shape: what one step of the loop makes (default: slots, B1's original garbage)
SHAPES = {"slots": make_pair, "dict": make_dict_pair, "list": make_list_pair,
          "dictobj": make_dictobj_pair, "closure": make_closure_pair, "method": make_method_pair,
          "mixed": make_mixed}


class TensorCycle:
    def __init__(self, tensor):
        self.tensor = tensor
        self.me = self


def worker(cfg: dict) -> None:
    import torch

    device = cfg["device"]
    mode = cfg["mode"]
    pairs = cfg["pairs"]
    n_tc = cfg["tensor_cycles"]
    numel = cfg["tensor_numel"]
    access = cfg["access"]
    make = SHAPES[cfg.get("shape", "slots")]

    heap = C.build_heap(cfg["heap"])
    stats = {"reports": 0, "report_tensors": 0, "report_nbytes": 0, "callback_errors": 0, "first_error": None}

    def tensorgc_cb(report):
        try:
            stats["reports"] += 1
            stats["report_tensors"] += len(report.tensors)
            stats["report_nbytes"] += report.nbytes
            if access == "text":
                len(report.text)
            elif access == "html":
                len(report.html)
        except Exception as exc:  # noqa: BLE001
            stats["callback_errors"] += 1
            stats["first_error"] = stats["first_error"] or repr(exc)

    def torch_cb(html):
        stats["reports"] += 1
        len(html)

    remove = None
    detector = "none"
    if mode in ("tensorgc", "tensorgc-callbacks", "tensorgc-prescan", "tensorgc-noisland",
                "tensorgc-noscan"):
        tensorgc = C.import_tensorgc()
        if mode == "tensorgc-callbacks":
            tensorgc._tensorgc_testing._resident(False)  # the hook stays on gc.callbacks
        elif mode != "tensorgc":
            tensorgc._tensorgc_testing._sentinel(False)
        if mode == "tensorgc-noisland":
            tensorgc._tensorgc_testing._young_island(False)
        if mode == "tensorgc-noscan":
            tensorgc._tensorgc_testing._young_scan(False)  # arm every collection, as before the pre-scan
        remove = tensorgc.observe_cycles(tensorgc_cb, device=device)
        detector = f"tensorgc.observe_cycles(cb, device={device!r}), cb reads report.{access}"
    elif mode == "torch":
        remove, detector = C.install_torch_detector(device, torch_cb)
    elif mode == "floor":
        import operator
        gc.callbacks.append(operator.is_)
        remove = lambda: gc.callbacks.remove(operator.is_)  # noqa: E731
        detector = "operator.is_ on gc.callbacks"
    elif mode == "import":
        C.import_tensorgc()
        detector = "import tensorgc, no observer"
    elif mode != "plain":
        raise SystemExit(f"unknown mode {mode}")

    # warm up the tensor path (first allocation on the device, lazy imports)
    TensorCycle(torch.ones(numel, device=device))
    gc.collect()  # heap -> oldest generation; nothing pending
    C.settle()  # let torch's deferred (sys.setprofile) work for that collection run now
    tracked = len(gc.get_objects())  # heap + everything torch & co. keep alive
    stats.update({"reports": 0, "report_tensors": 0, "report_nbytes": 0})
    assert gc.isenabled()

    every = max(1, pairs // n_tc) if n_tc else 0
    offset = every // 2
    # --loops: the same loop K times in this process, keeping the fastest, so a burst of load
    # from elsewhere on the machine does not decide a run (torch's detector: one loop, capped)
    loops = 1 if mode == "torch" else max(1, cfg.get("loops", 1))
    loop_seconds, wall_seconds, cpu_seconds = [], [], []
    first = None
    for _ in range(loops):
        stats.update({"reports": 0, "report_tensors": 0, "report_nbytes": 0})
        made = 0
        progress = [0]
        before = C.gc_collections()
        extra = {"mode": mode, "heap": cfg["heap"], "shape": cfg.get("shape", "slots"),
                 "detector": detector}
        t0 = C.arm_timeout(cfg["timeout"], progress, pairs, extra)
        cpu0 = time.thread_time()
        for i in range(pairs):
            make()
            if every and i % every == offset and made < n_tc:
                TensorCycle(torch.ones(numel, device=device))
                made += 1
            if not i & 1023:
                progress[0] = i
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        wall_seconds.append(time.perf_counter() - t0)
        cpu_seconds.append(time.thread_time() - cpu0)
        loop_seconds.append(cpu_seconds[-1] if cfg.get("clock") == "cpu" else wall_seconds[-1])
        C.disarm_timeout()
        after = C.gc_collections()
        if first is None:
            first = {"stats": dict(stats), "made": made,
                     "gc_collections": [y - x for x, y in zip(before, after)]}
    result = {
        **extra,
        "timed_out": False,
        "seconds": min(loop_seconds),
        "loop_seconds": loop_seconds,
        "loop_wall_seconds": wall_seconds,  # both clocks, whichever --clock chose
        "loop_cpu_seconds": cpu_seconds,
        "tensor_cycles_made": first["made"],
        "tracked_objects": tracked,
        "gc_collections": first["gc_collections"],
        **first["stats"],
    }
    if mode.startswith("tensorgc"):
        # what the detector decided per collection (counters since import; the warm-up is one)
        result["young_scan"] = tensorgc._tensorgc_testing._young_scan()
        result["seeded_split"] = tensorgc._tensorgc_testing._seeded_split()
        result["young_island"] = tensorgc._tensorgc_testing._young_island()
    if remove is not None:
        remove()
    C.emit_result(result)
    del heap


# --------------------------------------------------------------------------- parent

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="B1: detector overhead with automatic gc on a program making lots of cyclic garbage.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--heaps", default="100000,1000000", help="comma-separated live-heap sizes")
    p.add_argument("--loops", type=int, default=1,
                   help="timed loops per run (one process); a run's time is its fastest loop "
                        "(torch's detector always runs one)")
    p.add_argument("--modes", default="plain,tensorgc,torch", help=f"comma-separated, from {','.join(MODES)}")
    p.add_argument("--repeat", type=int, default=5, help="runs per (heap, mode), each a fresh subprocess")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds allowed for one run's timed loop (0: none)")
    p.add_argument("--pairs", type=int, default=300_000, help="tensor-free garbage pairs made in the loop")
    p.add_argument("--shape", choices=sorted(SHAPES), default="slots",
                   help="the garbage: slots (__slots__ pairs), dict (ordinary instances, each with a "
                        "small list), list, dictobj (plain dicts), closure, method (a bound method "
                        "on its instance), mixed (one of each but slots per step)")
    p.add_argument("--tensor-cycles", type=int, default=100, help="tensor self-cycles interleaved in the loop")
    p.add_argument("--tensor-numel", type=int, default=1024, help="elements (float32) of each cycle's tensor")
    p.add_argument("--access", choices=["none", "text", "html"], default="text",
                   help="what the tensorgc callback reads from each report")
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, cuda:0, ...")
    p.add_argument("--json", default=None, help="write all results as JSON to this path")
    p.add_argument("--no-skip-after-timeout", action="store_true",
                   help="keep running the remaining repeats of a (heap, mode) after a timeout")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="what a loop's time is: wall (time.perf_counter) or cpu (time.thread_time, "
                        "the main thread's CPU time: time other processes had the core left out)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0

    heaps = [int(h.replace("_", "")) for h in args.heaps.split(",") if h]
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r}; choose from {MODES}")
    if "plain" not in modes:
        modes.insert(0, "plain")  # needed for the ratio
    device = C.resolve_device(args.device)
    env = C.environment(device)
    C.log(f"[B1] device={device} shape={args.shape} heaps={heaps} modes={modes} repeat={args.repeat} "
          f"pairs={args.pairs} timeout={args.timeout:g}s python={env['python']} torch={env.get('torch')}")

    runs = {(h, m): [] for h in heaps for m in modes}
    skipped = set()
    script = os.path.abspath(__file__)
    for h in heaps:
        for r in range(args.repeat):
            for m in modes:
                if (h, m) in skipped:
                    continue
                cfg = {"mode": m, "heap": h, "pairs": args.pairs, "tensor_cycles": args.tensor_cycles,
                       "tensor_numel": args.tensor_numel, "access": args.access, "device": device,
                       "timeout": args.timeout, "loops": args.loops, "shape": args.shape,
                       "clock": args.clock}
                res = C.run_worker(script, cfg, args.timeout)
                runs[(h, m)].append(res)
                msg = C.fmt_run(res, args.timeout)
                if res.get("error"):
                    msg += f" ERROR {res['error']}"
                C.log(f"[B1] heap={h:>9,} mode={m:<8} run {r + 1}/{args.repeat}: {msg} s"
                      f"  reports={res.get('reports')} gc={res.get('gc_collections')}")
                if res.get("stderr_tail"):
                    C.log("     stderr: " + res["stderr_tail"].strip().replace("\n", "\n     "))
                if res.get("timed_out") and not args.no_skip_after_timeout:
                    skipped.add((h, m))
                    if r + 1 < args.repeat:
                        C.log(f"[B1] heap={h:,} mode={m}: timed out, skipping its remaining repeats")

    # ---- report
    print(f"### B1 overhead: {args.pairs:,} garbage pairs ({args.shape}) + {args.tensor_cycles} "
          f"tensor self-cycles, automatic gc, device={device}")
    print()
    print(f"python {env['python']}, torch {env.get('torch')}, {env.get('cpu_count')} CPUs, "
          f"gc threshold {env.get('gc_threshold')}, repeat={args.repeat}, timeout={args.timeout:g}s, "
          f"loops={args.loops} (a run's time: its fastest loop), clock={args.clock}")
    print()
    print("| heap | mode | median (s) | vs plain | runs (s) | reports | gc collections g0/g1/g2 | tracked objects |")
    print("| ---: | --- | ---: | ---: | --- | ---: | --- | ---: |")
    results = []
    for h in heaps:
        base = C.median_of(runs[(h, "plain")])
        for m in modes:
            rs = runs[(h, m)]
            med = C.median_of(rs)
            ok = [r for r in rs if not r.get("timed_out") and r.get("seconds") is not None]
            reports = ok[0].get("reports") if ok else None
            colls = "/".join(map(str, ok[0]["gc_collections"])) if ok else "-"
            print(f"| {h:,} | {m} | {C.fmt_seconds(med, args.timeout)} | {C.fmt_ratio(med, base, args.timeout)} | "
                  f"{', '.join(C.fmt_run(r, args.timeout) for r in rs)} | "
                  f"{reports if reports is not None else '-'} | {colls} | "
                  f"{format(ok[0]['tracked_objects'], ',') if ok and ok[0].get('tracked_objects') else '-'} |")
            results.append({"heap": h, "mode": m, "median_s": med,
                            "ratio_vs_plain": (med / base) if (med is not None and base) else None,
                            "runs": rs})
    sys.stdout.flush()
    C.write_json(args.json, {"benchmark": "B1", "config": {k: v for k, v in vars(args).items() if k != "worker"},
                             "modes": modes, "env": env, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
