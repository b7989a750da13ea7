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
   checkpoint; the run's figure is the median call;
3. ``checkpoint`` -- ``tensorgc.checkpoint()`` ``--calls`` times more, the index on (held by the
   first checkpoint); the median call;
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
another commit, e.g. exported with ``git archive`` and built with ``make build``): the same
measurement of the code before a change. Runs: ``--repeat`` fresh processes (default 5), medians
of the runs' figures. Output: a markdown table on stdout, JSON to ``--json``, progress on stderr.

    python3 bench/b10_growth.py --repeat 5 --json docs/results/b10-cpu.json
    python3 bench/b10_growth.py --repeat 3 --calls 3 --tests 3 --root /tmp/tensorgc-before
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

    calls = []
    for _ in range(cfg["calls"]):
        t0 = time.perf_counter()
        g = tensorgc.growth(before)
        calls.append(time.perf_counter() - t0)
        if g.rows:
            raise SystemExit(f"growth found {len(g.rows)} new storages, expected none: "
                             f"{g.summary()}")
    res["growth_s"] = calls

    calls = []
    for _ in range(cfg["calls"]):
        t0 = time.perf_counter()
        c = tensorgc.checkpoint()
        calls.append(time.perf_counter() - t0)
        del c
    res["checkpoint_s"] = calls

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
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed for one run")
    p.add_argument("--json", default=None, help="write all results as JSON to this path")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    root = os.path.abspath(args.root) if args.root else ""
    cfg = {"tensors": args.tensors, "heap": args.heap, "calls": args.calls, "tests": args.tests,
           "root": root}
    env = C.environment("cpu")
    runs = []
    for i in range(args.repeat):
        C.log(f"B10 run {i + 1}/{args.repeat}")
        runs.append(C.run_worker(os.path.abspath(__file__), cfg, args.timeout))
    ok = [r for r in runs if "growth_s" in r and not r.get("error")]
    bad = [r for r in runs if r not in ok]

    def per_run(name, f=_median_ms):
        return [f(r[name]) if isinstance(r[name], list) else 1e3 * r[name] for r in ok]

    tests = f"median of {args.tests} tests"
    rows = [("checkpoint(), the first (it turns the index on)", per_run("first_checkpoint_s")),
            (f"growth(), nothing new (median of {args.calls} calls)", per_run("growth_s")),
            (f"checkpoint(), index on (median of {args.calls} calls)", per_run("checkpoint_s")),
            ("growth(), 10 new (one owner search)", per_run("growth_new_s")),
            (f"pytest test call, plugin off ({tests})", per_run("plugin_off_s")),
            (f"pytest test call, `--tensorgc` ({tests})", per_run("plugin_on_s"))]
    over = [b - a for a, b in zip(rows[4][1], rows[5][1])]
    rows.append(("plugin overhead per test (with - without)", over))
    print(f"### B10 growth: {args.tensors:,} live CPU tensors, nothing new"
          + (f", tensorgc from {root}" if root else ""))
    print()
    print(f"python {env['python']}, torch {env.get('torch')}, {env['cpu_count']} CPUs; "
          f"gc-tracked objects alive: {ok[0]['tracked']:,}" if ok else "no run succeeded")
    print()
    print("| measurement | median (ms) | runs (ms) |")
    print("| --- | ---: | --- |")
    for name, vals in rows:
        if vals:
            print(f"| {name} | {statistics.median(vals):.1f} | "
                  f"{', '.join(f'{v:.1f}' for v in vals)} |")
    print()
    if bad:
        why = bad[0].get("error") or bad[0].get("stderr_tail")
        print(f"{len(bad)} run(s) failed: {str(why)[:800]}")
        print()
    C.write_json(args.json, {"benchmark": "B10", "config": {**cfg, "repeat": args.repeat},
                             "environment": env, "runs": runs})
    return 0 if ok and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
