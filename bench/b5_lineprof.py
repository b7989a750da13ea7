#!/usr/bin/env python
"""B5 -- the line profiler: what it costs code that is not profiled, and what a profiled line
costs, side by side with pytorch_memlab's LineProfiler in the same run.

Part 1, unprofiled code: a pure-Python workload (calls, loops, dicts; about 0.1 s) timed in a
fresh interpreter per run pinned to one core (the fastest of 5 calls in it, 2 when slow), interleaved,
``--repeat`` runs per mode:
  plain               torch imported, nothing else
  control             the same as plain: the difference between two equal modes is the noise
  tensorgc            + ``import tensorgc``
  tensorgc+profile    + ``@tensorgc.profile`` on another function (the global profiler is on)
  memlab              + ``import pytorch_memlab`` (it enables a global tracer when CUDA is up)
  memlab+profile      + ``@pytorch_memlab.profile`` on another function
Ratios are to plain's median.

Part 2, a profiled line: a function whose loop runs ``--lines`` simple lines, timed without a
profiler and under each profiler (interleaved, one process); cost per line = (profiled -
plain) / lines recorded. On CUDA both read torch.cuda.memory_stats' counters; without CUDA
memlab's profiler records nothing (its enable() returns), and tensorgc's reads process memory.

    python bench/b5_lineprof.py --repeat 7 --json docs/results/b5.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the in-place build

MODES = ["plain", "control", "tensorgc", "tensorgc+profile", "memlab", "memlab+profile"]

WORKER = r'''
import os, sys, time, json
mode = sys.argv[1]
if len(sys.argv) > 2 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(sys.argv[2])})  # every run on the same core
import torch
if torch.cuda.is_available():
    torch.ones(1, device="cuda")  # CUDA up, as in a training job
if mode == "control":  # plain again, run as its own mode: the noise between two equal modes
    pass

elif mode.startswith("tensorgc"):
    import tensorgc
    if mode.endswith("+profile"):
        @tensorgc.profile
        def other():
            return 1
        other()
elif mode.startswith("memlab"):
    import pytorch_memlab
    if mode.endswith("+profile"):
        @pytorch_memlab.profile
        def other():
            return 1
        other()

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def work():
    d = {}
    for i in range(600000):
        d[i % 97] = d.get(i % 97, 0) + i
    s = sum(fib(k) for k in range(23))
    words = [str(i) for i in range(200000)]
    return s + len("".join(words)) + len(d)

work()
times = []
while len(times) < 5 and (len(times) < 2 or sum(times) < 2.0):
    t0 = time.perf_counter()
    work()
    times.append(time.perf_counter() - t0)
# the fastest of up to five (two when slow): a run a neighbour slowed down is not the code's cost
print("RESULT " + json.dumps({"seconds": min(times), "all": times}))
'''


def run_mode(mode: str, script: str) -> float | None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    core = sorted(os.sched_getaffinity(0))[-1] if hasattr(os, "sched_getaffinity") else None
    p = subprocess.run([sys.executable, script, mode] + ([str(core)] if core is not None else []),
                       capture_output=True, text=True, timeout=600, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["seconds"]
    print(f"[{mode}] failed: {p.stderr[-600:]}", file=sys.stderr)
    return None


def body(n):
    s = 0
    for i in range(n):
        s += i
        s ^= 1
        s -= 1
    return s


def per_line(lines: int, repeat: int):
    import torch
    import tensorgc
    cuda = torch.cuda.is_available()
    if cuda:
        torch.ones(1, device="cuda")
    n = max(1, lines // 4)  # the for line and three body lines per iteration
    try:
        from pytorch_memlab import LineProfiler as MemlabLP
    except Exception as exc:  # noqa: BLE001 (not installed, or its pandas import failed)
        MemlabLP = None
        print(f"pytorch_memlab's LineProfiler unavailable: {exc}", file=sys.stderr)
    res = {"plain": [], "tensorgc": [], "memlab": [], "tensorgc_lines": 0, "memlab_lines": 0}
    body(n)
    for _ in range(repeat):
        t0 = time.perf_counter()
        body(n)
        res["plain"].append(time.perf_counter() - t0)

        lp = tensorgc.LineProfiler(body)
        with lp:
            t0 = time.perf_counter()
            body(n)
            res["tensorgc"].append(time.perf_counter() - t0)
        res["tensorgc_lines"] = lp.lines_recorded
        res["tensorgc_source"] = lp.source

        if MemlabLP is not None and cuda:
            ml = MemlabLP(body)
            with ml:
                t0 = time.perf_counter()
                body(n)
                res["memlab"].append(time.perf_counter() - t0)
            res["memlab_lines"] = len(ml._raw_line_records)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lines", type=int, default=8000, help="line events per profiled call")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    out = {"python": sys.version.split()[0]}
    try:
        import torch
        out["torch"] = torch.__version__
        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    try:
        from importlib.metadata import version
        out["pytorch_memlab"] = version("pytorch_memlab")
    except Exception:  # noqa: BLE001
        out["pytorch_memlab"] = None

    runs = {m: [] for m in modes}
    # a file, not -c: memlab's profile() reads the decorated function's source
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "b5_worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        for _ in range(args.repeat):
            for m in modes:  # interleaved: drift hits every mode alike
                runs[m].append(run_mode(m, script))
    med = {m: statistics.median([v for v in r if v is not None]) if any(
        v is not None for v in r) else None for m, r in runs.items()}
    base = med.get("plain")
    print(f"## B5 part 1: unprofiled code (work(), best of 5 per run, s), median of {args.repeat} runs, "
          f"Python {out['python']}, torch {out.get('torch')}, {out.get('gpu', 'no GPU')}\n")
    print("| mode | median s | vs plain | runs |")
    print("|---|---:|---:|---|")
    for m in modes:
        ratio = f"{med[m] / base:.3f}x" if med[m] and base else "n/a"
        rs = ", ".join("err" if v is None else f"{v:.3f}" for v in runs[m])
        print(f"| {m} | {med[m] if med[m] is None else f'{med[m]:.3f}'} | {ratio} | {rs} |")

    pl = per_line(args.lines, args.repeat)
    p0 = statistics.median(pl["plain"])
    print(f"\n## B5 part 2: cost per profiled line, {pl['tensorgc_lines']} line events per "
          f"call, median of {args.repeat}\n")
    print("| profiler | source | median s | per line (us) | lines recorded |")
    print("|---|---|---:|---:|---:|")
    print(f"| none | - | {p0:.4f} | - | - |")
    t = statistics.median(pl["tensorgc"])
    tl = (t - p0) / max(pl["tensorgc_lines"], 1) * 1e6
    print(f"| tensorgc | {pl['tensorgc_source']} | {t:.4f} | {tl:.2f} | {pl['tensorgc_lines']} |")
    ml = None
    if pl["memlab"]:
        m = statistics.median(pl["memlab"])
        ml = (m - p0) / max(pl["memlab_lines"], 1) * 1e6
        print(f"| pytorch_memlab {out['pytorch_memlab']} | torch.cuda.memory_stats() | {m:.4f} | "
              f"{ml:.2f} | {pl['memlab_lines']} |")
        print(f"\nmemlab / tensorgc per line: **{ml / tl:.1f}x**")
    else:
        print("| pytorch_memlab | (records nothing without CUDA, or not importable) | - | - | - |")
    out.update(part1={"runs": runs, "median": med}, part2=pl,
               per_line_us={"tensorgc": tl, "memlab": ml})
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
