#!/usr/bin/env python
"""B1 per shape, as tables: reads the JSON of b1_overhead.py runs (fresh processes) and of
b1_inprocess.py runs (one process, paired), one file per shape (``--shape``), and prints one row
per shape and Python version: the ratios to plain of floor and tensorgc, and, for the in-process
runs of phase-timed builds (``--variant NAME=...`` of a ``make phases`` build), where each build's
time went per loop.

    python bench/b1_shapes_table.py docs/results/b1-shapes/*.json

Fresh processes: the median of the runs' wall-clock loops (B1's figure) and the median of the same
loops' CPU time (``time.thread_time``: what other processes of a shared machine took is left out).
"""
import json
import statistics
import sys


def fresh_rows(docs):
    print("| python | shape | plain (s) | floor | tensorgc | CPU time: floor | CPU time: tensorgc | runs |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for d in docs:
        by = {r["mode"]: [x for x in r["runs"] if not x.get("timed_out") and x.get("loop_seconds")]
              for r in d["results"]}
        wall = {m: statistics.median(x["loop_wall_seconds"][0] for x in rs) for m, rs in by.items()}
        cpu = {m: statistics.median(x["loop_cpu_seconds"][0] for x in rs) for m, rs in by.items()}
        py = d["env"]["python"].split()[0]
        shape = d["config"]["shape"]
        print(f"| {py} | {shape} | {wall['plain']:.3f} | {wall['floor'] / wall['plain']:.3f}x | "
              f"**{wall['tensorgc'] / wall['plain']:.3f}x** | {cpu['floor'] / cpu['plain']:.3f}x | "
              f"{cpu['tensorgc'] / cpu['plain']:.3f}x | {len(by['plain'])} |")


def inprocess_rows(docs):
    print("| python | shape | plain loop (s) | floor (paired) | tensorgc (paired) | tensorgc (medians) | rounds |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for d in docs:
        rows = {r["mode"]: r for r in d["results"]}
        py = d["env"]["python"].split()[0]
        t = rows.get("tensorgc")
        if t is None or "floor" not in rows:
            continue  # an A/B of builds only
        print(f"| {py} | {d['config']['shape']} | {rows['plain']['median_s']:.4f} | "
              f"{rows['floor']['paired_diff_ms']:+.2f} ms ({rows['floor']['paired_ratio']:.3f}x) | "
              f"{t['paired_diff_ms']:+.2f} ms (**{t['paired_ratio']:.3f}x**) | "
              f"{t['ratio_vs_plain']:.3f}x | {d['config']['rounds']} |")


def phase_rows(docs):
    names = ("scan", "island", "exact", "build", "callback", "free")
    print("| shape | build | collections | scan: µs each | scan | island | build | callback | "
          "exact + free | all phases | paired difference to plain | floor (paired) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for d in docs:
        rows = {r["mode"]: r for r in d["results"]}
        for mode, timed in rows.items():
            if "phases" not in timed:
                continue
            ph = {}
            for name in names:
                samples = timed["phases"].get(name, [])
                n = statistics.median(s[0] for s in samples) if samples else 0
                ms = statistics.median(s[1] for s in samples) * 1e3 if samples else 0.0
                ph[name] = (n, ms)
            total = sum(ms for _, ms in ph.values())
            print(f"| {d['config']['shape']} | {mode} | {ph['scan'][0] + ph['island'][0]:g} | "
                  f"{ph['scan'][1] * 1e3 / ph['scan'][0] if ph['scan'][0] else 0:.1f} | "
                  f"{ph['scan'][1]:.2f} ms | {ph['island'][1]:.2f} ms | {ph['build'][1]:.2f} ms | "
                  f"{ph['callback'][1]:.2f} ms | {ph['exact'][1] + ph['free'][1]:.2f} ms | "
                  f"{total:.2f} ms | {timed['paired_diff_ms']:+.2f} ms ({timed['paired_ratio']:.3f}x) | "
                  f"{rows['floor']['paired_diff_ms']:+.2f} ms |")


def main(paths):
    docs = [json.load(open(p)) for p in paths]
    order = ["slots", "dict", "list", "dictobj", "closure", "method", "mixed"]

    def key(d):
        s = d["config"].get("shape", "slots")
        return d["env"]["python"], order.index(s) if s in order else len(order)
    fresh = sorted((d for d in docs if d.get("benchmark") == "B1"), key=key)
    inproc = sorted((d for d in docs if d.get("benchmark") == "B1-inprocess"), key=key)
    if fresh:
        print("#### Fresh processes (b1_overhead.py), first loop\n")
        fresh_rows(fresh)
        print()
    if inproc:
        print("#### One process, paired (b1_inprocess.py)\n")
        inprocess_rows(inproc)
        print()
        if any("phases" in r for d in inproc for r in d["results"]):
            print("#### Where the time goes, per loop (phase-timed build; medians over loops)\n")
            phase_rows(inproc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
