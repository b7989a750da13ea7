#!/usr/bin/env python
"""B10 -- what tensorgc.checkpoint(), tensorgc.growth() and the pytest plugin cost with many live
tensors and nothing new.

Setup, per run in a fresh interpreter: torch imported, a heap of ``--heap`` (0) more gc-tracked
objects (``_common.build_heap``, as B1 to B8), ``--tensors`` (50,000) live CPU tensors
(``torch.empty(4)``, each its own storage) held by a module-level list, one ``gc.collect()``;
automatic collection stays on, as in a program. Timed with ``time.perf_counter``, in order:

1. ``first checkpoint`` -- ``tensorgc.checkpoint()`` with nothing holding the index of live
   tensors on: it turns the index on (one walk of the heap) and reads every storage;
2. ``growth`` -- ``tensorgc.growth(before)`` ``--calls`` (7) times, nothing new since the
   checkpoint; the run's figure is the median call, in wall-clock time and in the thread's CPU
   time (``time.thread_time``: on a shared machine, the less disturbed of the two);
3. ``checkpoint`` -- ``tensorgc.checkpoint()`` ``--calls`` times more, the index on (held by the
   first checkpoint); the median call, both ways;
4. ``growth, 10 new`` -- 10 more tensors appended to a module-level list, then one growth() call:
   the owner search for the new storages included. Checked: it must report exactly those 10
   storages, held by that list (a run that fails the check is an error, not a time).

Then the pytest plugin, in each run: ``python -m pytest -p tensorgc.pytest_plugin`` on a
generated directory whose conftest holds ``--tensors`` live tensors and whose ``--tests`` (10)
tests each make and free one small tensor, once without ``--tensorgc`` and once with it; each
test's "call" duration is read from pytest's reports (the plugin's checkpoint and growth run
inside the call phase), and the run's figures are the median call without and with the plugin.
The difference is the plugin's overhead per test.

``--root PATH`` imports tensorgc from PATH instead of this checkout (an in-place build of
another commit, e.g. exported with ``git archive`` and built with ``make build``); ``--before
PATH`` runs PATH's as well, run by run in turn with this checkout's, so that the machine's drift
hits both alike: the same measurement of the code before a change. Runs: ``--repeat`` fresh
processes of each (default 5), medians of the runs' figures. Output: a markdown table on stdout,
JSON to ``--json``, progress on stderr.

    python3 bench/b10_growth.py --repeat 5 --json docs/results/b10-cpu.json
    git archive REV | tar -x -C /tmp/tensorgc-before && make -C /tmp/tensorgc-before build
    python3 bench/b10_growth.py --repeat 3 --calls 5 --tests 5 --before /tmp/tensorgc-before
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

KEEP: list = []   # the live tensors
LEAKS: list = []  # the "10 new" step's tensors

CONFTEST = '''
import json, os, torch
KEEP = [torch.empty(4) for _ in range({tensors})]
def pytest_runtest_logreport(report):
    if report.when == "call":
        with open(os.environ["B10_DURATIONS"], "a") as f:
            f.write(json.dumps(report.duration) + "\\n")
'''

TESTS = '''
import torch
def make_test(i):
    def test():
        t = torch.ones(16)
        del t
    return test
for _i in range({tests}):
    globals()[f"test_{{_i}}"] = make_test(_i)
'''


def _median_ms(xs):
    return 1e3 * statistics.median(xs)


def plugin_calls(root: str, tensors: int, tests: int, on: bool) -> list:
    """The call durations (s) of a pytest session of ``tests`` trivial tests, ``tensors`` tensors
    alive, with the plugin on or off."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "conftest.py"), "w") as f:
            f.write(CONFTEST.format(tensors=tensors))
        with open(os.path.join(d, "test_b10.py"), "w") as f:
            f.write(TESTS.format(tests=tests))
        out = os.path.join(d, "durations.jsonl")
        env = dict(os.environ, B10_DURATIONS=out,
                   PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "tensorgc.pytest_plugin", d] + (["--tensorgc"] if on else [])
        r = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pytest exit {r.returncode}: {r.stdout[-2000:]}{r.stderr[-2000:]}")
        with open(out) as f:
            return [json.loads(line) for line in f]


def worker(cfg: dict) -> None:
    import torch

    if cfg["root"]:
        sys.path.insert(0, cfg["root"])
        import tensorgc
    else:
        tensorgc = C.import_tensorgc()
    if cfg["root"] and not tensorgc.__file__.startswith(os.path.abspath(cfg["root"])):
        raise SystemExit(f"tensorgc imported from {tensorgc.__file__}, not {cfg['root']}")
    heap = C.build_heap(cfg["heap"])
    KEEP.extend(torch.empty(4) for _ in range(cfg["tensors"]))
    gc.collect()
    tracked = len(gc.get_objects())
    res = {"tracked": tracked, "tensorgc_file": tensorgc.__file__}

    t0 = time.perf_counter()
    before = tensorgc.checkpoint()
    res["first_checkpoint_s"] = time.perf_counter() - t0
    assert len(before.keys) >= cfg["tensors"], len(before.keys)

    calls, cpu = [], []
    for _ in range(cfg["calls"]):
        t0, c0 = time.perf_counter(), time.thread_time()
        g = tensorgc.growth(before)
        calls.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        if g.rows:
            raise SystemExit(f"growth found {len(g.rows)} new storages, expected none: "
                             f"{g.summary()}")
    res["growth_s"], res["growth_cpu_s"] = calls, cpu

    calls, cpu = [], []
    for _ in range(cfg["calls"]):
        t0, c0 = time.perf_counter(), time.thread_time()
        c = tensorgc.checkpoint()
        calls.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        del c
    res["checkpoint_s"], res["checkpoint_cpu_s"] = calls, cpu

    LEAKS.extend(torch.ones(8) for _ in range(10))
    t0 = time.perf_counter()
    g = tensorgc.growth(before)
    res["growth_new_s"] = time.perf_counter() - t0
    holders = {h: n for h, _, n, _ in g.groups}
    if len(g.rows) != 10 or holders != {"__main__.LEAKS": 10}:
        raise SystemExit(f"growth after 10 leaks: {g.summary()}")
    del before, g, heap

    root = cfg["root"] or C.ROOT
    res["plugin_off_s"] = plugin_calls(root, cfg["tensors"], cfg["tests"], False)
    res["plugin_on_s"] = plugin_calls(root, cfg["tensors"], cfg["tests"], True)
    C.emit_result(res)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tensors", type=int, default=50_000, help="live CPU tensors")
    p.add_argument("--heap", type=int, default=0, help="more live gc-tracked objects")
    p.add_argument("--calls", type=int, default=7,
                   help="growth() and checkpoint() calls timed in a run")
    p.add_argument("--tests", type=int, default=10, help="tests in each pytest session")
    p.add_argument("--repeat", type=int, default=5, help="runs, each a fresh process")
    p.add_argument("--root", default="", help="import tensorgc from this directory")
    p.add_argument("--before", default="",
                   help="also run tensorgc from this directory, run by run in turn with --root's")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed for one run")
    p.add_argument("--json", default=None, help="write all results as JSON to this path")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _rows(ok: list, calls: int, tests: int) -> list:
    """(measurement, its figure of each run) for the table."""
    def per_run(name):
        return [_median_ms(r[name]) if isinstance(r[name], list) else 1e3 * r[name] for r in ok]

    each = f"median of {tests} tests"
    rows = [("checkpoint(), the first (it turns the index on)", per_run("first_checkpoint_s")),
            (f"growth(), nothing new (median of {calls} calls)", per_run("growth_s")),
            ("growth(), nothing new: the thread's CPU time", per_run("growth_cpu_s")),
            (f"checkpoint(), index on (median of {calls} calls)", per_run("checkpoint_s")),
            ("checkpoint(), index on: the thread's CPU time", per_run("checkpoint_cpu_s")),
            ("growth(), 10 new (one owner search)", per_run("growth_new_s")),
            (f"pytest test call, plugin off ({each})", per_run("plugin_off_s")),
            (f"pytest test call, `--tensorgc` ({each})", per_run("plugin_on_s"))]
    over = [b - a for a, b in zip(rows[6][1], rows[7][1])]
    rows.append(("plugin overhead per test (with - without)", over))
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    roots = [os.path.abspath(args.root) if args.root else ""]
    if args.before:
        roots.append(os.path.abspath(args.before))
    env = C.environment("cpu")
    runs: dict = {root: [] for root in roots}
    for i in range(args.repeat):
        for root in roots:  # in turn, run by run: the machine's drift hits both alike
            C.log(f"B10 run {i + 1}/{args.repeat}" + (f" ({root})" if root else ""))
            cfg = {"tensors": args.tensors, "heap": args.heap, "calls": args.calls,
                   "tests": args.tests, "root": root}
            runs[root].append(C.run_worker(os.path.abspath(__file__), cfg, args.timeout))
    ok = {root: [r for r in rs if "growth_s" in r and not r.get("error")]
          for root, rs in runs.items()}
    bad = [r for rs in runs.values() for r in rs if "growth_s" not in r or r.get("error")]
    tables = {root: _rows(ok[root], args.calls, args.tests) for root in roots}
    first = next((rs[0] for rs in ok.values() if rs), None)
    print(f"### B10 growth: {args.tensors:,} live CPU tensors, nothing new")
    print()
    if first is None:
        print("no run succeeded")
    else:
        print(f"python {env['python']}, torch {env.get('torch')}, {env['cpu_count']} CPUs; "
              f"gc-tracked objects alive: {first['tracked']:,}")
    print()
    names = [root or "this checkout" for root in roots]
    print("| measurement | " + " | ".join(f"{n}: median (ms) | runs (ms)" for n in names)
          + (" | before / this |" if len(roots) > 1 else " |"))
    print("| --- |" + " ---: | --- |" * len(roots) + (" ---: |" if len(roots) > 1 else ""))
    for k, (name, _) in enumerate(tables[roots[0]]):
        cells, meds = [], []
        for root in roots:
            vals = tables[root][k][1]
            med = statistics.median(vals) if vals else None
            meds.append(med)
            cells.append(f"{med:.1f} | {', '.join(f'{v:.1f}' for v in vals)}" if vals else "- | -")
        ratio = ""
        if len(roots) > 1:
            a, b = meds[0], meds[1]
            ratio = (f" {b / a:.0f}x |" if b >= 10 * a else f" {b / a:.2f}x |") \
                if a and b and a > 1 else " - |"
        print(f"| {name} | " + " | ".join(cells) + " |" + ratio)
    print()
    if bad:
        why = bad[0].get("error") or bad[0].get("stderr_tail")
        print(f"{len(bad)} run(s) failed: {str(why)[:800]}")
        print()
    C.write_json(args.json, {"benchmark": "B10",
                             "config": {"tensors": args.tensors, "heap": args.heap,
                                        "calls": args.calls, "tests": args.tests,
                                        "repeat": args.repeat, "roots": roots},
                             "environment": env, "runs": runs})
    return 0 if first is not None and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
