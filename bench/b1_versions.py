#!/usr/bin/env python
"""B1 on several Python versions side by side: one run, one machine, versions interleaved.

Each measurement is B1's worker (bench/b1_overhead.py: a 1,000,000-object heap, 300,000 pairs of
tensor-free cyclic garbage and 100 tensor self-cycles, automatic gc on) in a fresh process, timing
its first loop only. A round runs every version, each version its modes back to back (plain, then
tensorgc; the order flips every round); the versions' order rotates from round to round, so drift
on the machine lands on every version and mode alike. Per version, each round gives one paired
ratio (tensorgc / plain of the same round, measured seconds apart); the table shows their median,
their interquartile range and extremes, the ratio of the medians, and a bootstrap 95% interval of
that ratio (rounds resampled).

Interpreters: ``--python 3.12=/path/to/python`` (repeatable); by default, for each of 3.10-3.13,
the first of /opt/tensorgc-venv-X.Y, /opt/tensorgc-bench-venv-X.Y, pythonX.Y on PATH, pyenv's,
and python3, that is that version and imports torch. Each needs tensorgc built in place for it
(``make build PYTHON=...``): the worker imports the repository's tensorgc/.

    python3 bench/b1_versions.py --rounds 12 --json docs/results/b1-versions/cpu.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

VERSIONS = ("3.10", "3.11", "3.12", "3.13")
B1 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "b1_overhead.py")
PROBE = ("import sys, sysconfig, json; import torch; "
         "print(json.dumps([f'{sys.version_info[0]}.{sys.version_info[1]}', sys.version.split()[0], "
         "torch.__version__, sysconfig.get_config_var('EXT_SUFFIX')]))")


def probe(python: str) -> list | None:
    """[X.Y, full version, torch version, extension suffix], or None when it cannot run B1."""
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def candidates(version: str) -> list[str]:
    home = os.path.expanduser("~")
    out = [f"/opt/tensorgc-venv-{version}/bin/python", f"/opt/tensorgc-bench-venv-{version}/bin/python",
           shutil.which(f"python{version}") or ""]
    out += sorted(glob.glob(os.path.join(os.environ.get("PYENV_ROOT", os.path.join(home, ".pyenv")),
                                         "versions", version + ".*", "bin", f"python{version}")))
    out.append(shutil.which("python3") or "")
    return [p for p in out if p and os.path.exists(p)]


def find_interpreters(given: list[str], wanted: list[str]) -> dict:
    found = {}
    for item in given:
        version, _, path = item.partition("=")
        info = probe(path)
        if info is None or info[0] != version:
            raise SystemExit(f"--python {item}: not a Python {version} that imports torch")
        found[version] = (path, info)
    for version in wanted:
        if version in found:
            continue
        for path in candidates(version):
            info = probe(path)
            if info is not None and info[0] == version:
                found[version] = (path, info)
                break
    return found


def built_for(suffix: str) -> bool:
    return os.path.exists(os.path.join(C.ROOT, "tensorgc", "_tensorgc" + suffix))


def quantile(xs: list, q: float) -> float:
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def bootstrap_ratio(plain: list, det: list, iters: int = 4000, seed: int = 1) -> tuple:
    """95% interval of median(det) / median(plain), resampling rounds (pairs kept together)."""
    rng = random.Random(seed)
    n = len(plain)
    vals = []
    for _ in range(iters):
        idx = [rng.randrange(n) for _ in range(n)]
        vals.append(statistics.median(det[i] for i in idx) / statistics.median(plain[i] for i in idx))
    return quantile(vals, 0.025), quantile(vals, 0.975)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--python", action="append", default=[], metavar="X.Y=PATH",
                   help="the interpreter for version X.Y (repeatable); others are looked for")
    p.add_argument("--versions", default=",".join(VERSIONS), help="comma-separated X.Y")
    p.add_argument("--rounds", type=int, default=12, help="rounds (each: every version, every mode)")
    p.add_argument("--modes", default="plain,tensorgc", help="B1 modes; plain comes first")
    p.add_argument("--heap", type=int, default=1_000_000)
    p.add_argument("--pairs", type=int, default=300_000)
    p.add_argument("--tensor-cycles", type=int, default=100)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--allow-missing", action="store_true",
                   help="measure the versions found instead of stopping when one is missing")
    p.add_argument("--json", default=None, help="write every run and the summary here")
    args = p.parse_args(argv)

    wanted = [v for v in args.versions.split(",") if v]
    modes = [m for m in args.modes.split(",") if m]
    if modes[0] != "plain":
        modes = ["plain"] + [m for m in modes if m != "plain"]
    found = find_interpreters(args.python, wanted)
    missing = [v for v in wanted if v not in found]
    unbuilt = [v for v in wanted if v in found and not built_for(found[v][1][3])]
    for v in unbuilt:
        C.log(f"[B1v] {v}: tensorgc is not built for {found[v][0]} "
              f"(make build PYTHON={found[v][0]})")
    for v in missing:
        C.log(f"[B1v] {v}: no interpreter of that version that imports torch")
    if (missing or unbuilt) and not args.allow_missing:
        return 2
    versions = [v for v in wanted if v in found and v not in unbuilt]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    C.log(f"[B1v] versions {versions}, modes {modes}, rounds {args.rounds}, load {load}")

    runs = {(v, m): [] for v in versions for m in modes}
    started = time.time()
    for r in range(args.rounds):
        k = r % len(versions)
        order = versions[k:] + versions[:k]
        for v in order:
            python = found[v][0]
            ms = modes if r % 2 == 0 else modes[::-1]
            for m in ms:
                cfg = {"mode": m, "heap": args.heap, "pairs": args.pairs,
                       "tensor_cycles": args.tensor_cycles, "tensor_numel": 1024, "access": "text",
                       "device": "cpu", "timeout": args.timeout, "loops": 1}
                res = C.run_worker(B1, cfg, args.timeout, python=python)
                res["round"] = r
                res["load1"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
                runs[(v, m)].append(res)
                msg = C.fmt_run(res, args.timeout)
                if res.get("error") or res.get("stderr_tail"):
                    msg += f" ERROR {res.get('error')} {res.get('stderr_tail', '')[-300:]}"
                C.log(f"[B1v] round {r + 1}/{args.rounds} {v} {m:<9} {msg} s")

    print(f"### B1 by Python version: heap {args.heap:,}, {args.pairs:,} pairs + "
          f"{args.tensor_cycles} tensor self-cycles, automatic gc, CPU tensors; first loop of "
          f"fresh processes, {args.rounds} rounds, versions interleaved")
    print()
    print(f"{os.cpu_count()} CPUs; 1-minute load at the start {load}; "
          f"{(time.time() - started) / 60:.1f} min")
    print()
    head = "| Python | torch | plain, median (s) |"
    for m in modes[1:]:
        head += f" {m}, median (s) | {m} / plain: paired median [IQR] (min-max) | ratio of medians [95% CI] |"
    print(head)
    print("|" + " --- |" * (3 + 3 * (len(modes) - 1)))
    summary = []
    for v in versions:
        info = found[v][1]
        ok_rounds = [r for r in range(args.rounds)
                     if all(runs[(v, m)][r].get("seconds") is not None
                            and not runs[(v, m)][r].get("timed_out") for m in modes)]
        plain = [runs[(v, "plain")][r]["seconds"] for r in ok_rounds]
        row = f"| {info[1]} | {info[2]} | {statistics.median(plain):.4f} |" if plain else f"| {info[1]} | {info[2]} | error |"
        entry = {"version": info[1], "python": found[v][0], "torch": info[2], "rounds_ok": len(ok_rounds),
                 "plain_median_s": statistics.median(plain) if plain else None, "modes": {}}
        for m in modes[1:]:
            det = [runs[(v, m)][r]["seconds"] for r in ok_rounds]
            if not det:
                row += " error | | |"
                continue
            ratios = [d / q for d, q in zip(det, plain)]
            med = statistics.median(ratios)
            q1, q3 = quantile(ratios, 0.25), quantile(ratios, 0.75)
            rom = statistics.median(det) / statistics.median(plain)
            lo, hi = bootstrap_ratio(plain, det)
            row += (f" {statistics.median(det):.4f} | **{med:.3f}x** [{q1:.3f}-{q3:.3f}] "
                    f"({min(ratios):.3f}-{max(ratios):.3f}) | {rom:.3f}x [{lo:.3f}-{hi:.3f}] |")
            entry["modes"][m] = {"median_s": statistics.median(det), "paired_median": med,
                                 "paired_iqr": [q1, q3], "paired_range": [min(ratios), max(ratios)],
                                 "ratio_of_medians": rom, "ratio_ci95": [lo, hi]}
        print(row)
        summary.append(entry)
    sys.stdout.flush()
    C.write_json(args.json, {
        "benchmark": "B1 by Python version",
        "config": {k: v for k, v in vars(args).items()},
        "cpu_count": os.cpu_count(), "load1_at_start": load,
        "summary": summary,
        "runs": {f"{v} {m}": rs for (v, m), rs in runs.items()},
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
