#!/usr/bin/env python
"""What `import tensorgc` costs a program: its time, the modules it loads, and the holes it
leaves in the heap.

Loading Python code frees temporaries (the bytes and tuples a code object is made from) between
the objects that stay; the freed blocks stay in pymalloc's pools among live ones, and the young
objects the program allocates afterwards fill them first, scattered over more memory than a
fresh pool would hold them in: every later young collection walks them more slowly (B1 in fresh
processes, docs/benchmarks.md). Each run is a fresh interpreter that imports torch (when it is
installed), collects, reads ``sys._debugmallocstats()``, imports tensorgc, collects and reads it
again: the free blocks gained in the small size classes are the holes the import left.

    python3 bench/micro_import.py --repeat 5

By default the bytecode is cached, as pip leaves an installed package (bench/_common.py's
worker_env); ``--bytecode source`` compiles every module at import instead, as a process does
where ``PYTHONDONTWRITEBYTECODE`` is set and no cache exists: compiling leaves holes of its own.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import shutil
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

CHILD = r"""
import gc, json, os, re, sys, time
def stats():
    r, w = os.pipe()
    saved = os.dup(2)
    os.dup2(w, 2)
    sys._debugmallocstats()
    os.dup2(saved, 2)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    free = {}
    for line in b"".join(chunks).decode().splitlines():
        m = re.match(r"\s+\d+\s+(\d+)\s+\d+\s+\d+\s+(\d+)$", line)
        if m:
            free[int(m.group(1))] = int(m.group(2))
    return free
try:
    import torch  # noqa: F401  (the program's own imports come first)
except ImportError:
    pass
gc.collect()
before, mods = stats(), set(sys.modules)
t0 = time.perf_counter()
import tensorgc  # noqa: E402
took = time.perf_counter() - t0
gc.collect()
after = stats()
print(json.dumps({"seconds": took, "modules": len(set(sys.modules) - mods),
                  "holes": {s: after.get(s, 0) - before.get(s, 0) for s in after}}))
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5, help="fresh interpreters")
    p.add_argument("--json", default=None, help="write the runs as JSON to this path")
    p.add_argument("--bytecode", choices=("cached", "source"), default="cached",
                   help="cached: as installed (default); source: compiled in every process")
    args = p.parse_args(argv)
    if args.bytecode == "cached":
        env = C.worker_env()
        empty = None
    else:
        # tensorgc's bytecode ignored and none written; torch's (site-packages) still read
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPYCACHEPREFIX", None)
        empty = tempfile.TemporaryDirectory()
        shutil.copytree(os.path.join(ROOT, "tensorgc"), os.path.join(empty.name, "tensorgc"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        env["PYTHONPATH"] = empty.name
    runs = []
    try:
        for _ in range(args.repeat):
            r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                               cwd=empty.name if empty else ROOT, timeout=300, env=env)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                return 1
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    finally:
        if empty is not None:  # on every way out: a failed or timed-out run too
            empty.cleanup()
    secs = statistics.median(r["seconds"] for r in runs)
    print(f"python {sys.version.split()[0]}, bytecode {args.bytecode}: `import tensorgc` "
          f"{secs * 1e3:.1f} ms (median of {len(runs)}), {runs[0]['modules']} modules loaded\n")
    print("| size class (bytes) | free blocks the import left (median) |")
    print("| ---: | ---: |")
    for size in (16, 32, 48, 64, 80, 96, 112, 128):
        print(f"| {size} | {statistics.median(r['holes'].get(str(size), 0) for r in runs):+.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python": sys.version, "bytecode": args.bytecode, "runs": runs}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
