#!/usr/bin/env python
"""B1's other half: what the detector costs a program whose young objects mostly survive, and a
full collection of a large heap, with the detector's two ways of finding tensor garbage.

B1 makes only garbage; most programs make objects that live on (building a dataset's index, a
model, a cache), and every young collection then finds survivors and little garbage. The
pre-scan walked everything a collection was about to examine, survivors included, and armed every
full collection (DEBUG_SAVEALL: its whole garbage through gc.garbage); the sentinel looks at the
garbage alone, once the collector found it. In one process, modes alternating round by round
(order reversed every round), automatic gc on, CPU time of the main thread (time.thread_time):

* ``build``: --objects instances of an ordinary class, each holding a small list, appended to a
  list that keeps them (every young collection examines ~700 survivors; a list of 2 ints each);
* ``full``: ``gc.collect()`` of the heap that build left, with --garbage pairs of cyclic garbage
  made just before (no tensor anywhere in it).

Modes: ``plain`` (no detector), ``floor`` (a C no-op on gc.callbacks), ``pre-scan`` and
``sentinel`` (``tensorgc.observe_cycles(cb)`` with the sentinel off / on,
``tensorgc._tensorgc_testing._sentinel``). Prints each mode's median and its median paired
ratio to plain:

    python bench/b1_survivors.py --rounds 9
"""
import argparse
import gc
import operator
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


class Item:
    def __init__(self, i):
        self.i = i
        self.tags = [i, i + 1]


class Pair:
    pass


def build(n):
    keep = []
    t = time.thread_time()
    for i in range(n):
        keep.append(Item(i))
    return time.thread_time() - t, keep


def full(garbage):
    for _ in range(garbage):
        a, b = Pair(), Pair()
        a.other, b.other = b, a
    t = time.thread_time()
    gc.collect()
    return time.thread_time() - t


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--objects", type=int, default=500_000)
    p.add_argument("--garbage", type=int, default=50_000)
    p.add_argument("--modes", default="plain,floor,pre-scan,sentinel")
    args = p.parse_args()
    import torch  # noqa: F401 -- the detector looks for its tensors
    tensorgc = C.import_tensorgc()
    testing = tensorgc._tensorgc_testing
    if not testing._sentinel()["enabled"]:
        raise SystemExit("the sentinel is not available on this interpreter")
    modes = args.modes.split(",")
    times = {m: {"build": [], "full": []} for m in modes}
    gc.collect()
    gc.freeze()  # the interpreter's and torch's objects: the heap is what build makes
    for r in range(args.rounds):
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            remove = None
            if mode == "floor":
                gc.callbacks.append(operator.is_)
            elif mode in ("pre-scan", "sentinel"):
                testing._sentinel(mode == "sentinel")
                remove = tensorgc.observe_cycles(lambda report: report.text)
            try:
                tb, keep = build(args.objects)
                tf = full(args.garbage)
            finally:
                if mode == "floor":
                    gc.callbacks.remove(operator.is_)
                if remove is not None:
                    remove()
                testing._sentinel(True)
            del keep
            gc.collect()
            times[mode]["build"].append(tb)
            times[mode]["full"].append(tf)
    print(f"{args.objects:,} survivors built, then a full collection with {args.garbage:,} "
          f"garbage pairs; {args.rounds} rounds; CPU time; Python {sys.version.split()[0]}")
    print("| mode | build (ms) | vs plain (paired) | full collection (ms) | vs plain (paired) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for m in modes:
        row = [m]
        for what in ("build", "full"):
            med = statistics.median(times[m][what])
            ratio = statistics.median(a / b for a, b in zip(times[m][what], times["plain"][what]))
            row += [f"{med * 1e3:.1f}", f"{ratio:.3f}x"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
