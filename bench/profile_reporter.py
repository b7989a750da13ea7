#!/usr/bin/env python
"""Where MemReporter.collect() spends its time, piece by piece (median of --repeat), on the B3
setup: a 1M-object heap and 100 x Linear(1024) + Adam after one step.

    python bench/profile_reporter.py --repeat 7
"""
import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def _quiet(fn):
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        fn()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--heap", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--device", default="auto")
    p.add_argument("--track", action="store_true", help="with tensorgc.track_tensors() on")
    args = p.parse_args()
    import torch

    tensorgc = C.import_tensorgc()
    from tensorgc import allocator, reporter

    device = C.resolve_device(args.device)
    heap = C.build_heap(args.heap)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(100)]).to(device)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(64, 1024, device=device)).sum().backward()
    opt.step()
    gc.collect()
    tensorgc.track_tensors(args.track)
    r = tensorgc.MemReporter(model, optimizer=opt)
    live = tensorgc._tensorgc._live_tensors()
    named = r._named()
    pieces = {
        "_live_tensors (C walk)": lambda: tensorgc._tensorgc._live_tensors(),
        "gc.get_objects (reference)": lambda: gc.get_objects(),
        "_named": lambda: r._named(),
        "_saved_for_backward": lambda: reporter._saved_for_backward(live, named),
        "_tensor_rows": lambda: tensorgc._tensorgc._tensor_rows(live),
    }
    if device.startswith("cuda"):
        segs = allocator.segments()
        pieces["allocator.segments"] = lambda: allocator.segments()
        pieces["attribute (C)"] = lambda: allocator.attribute(segs, [(0, t.data_ptr(), True) for t in live[:0]])
        pieces["device_memory (driver+NVML)"] = lambda: allocator.device_memory(0)
        pieces["top_sites"] = lambda: allocator.top_sites(segs, [])
    pieces["collect (all)"] = lambda: r.collect()
    rep = r.collect()
    pieces["format"] = lambda: rep.format(verbose=False)
    pieces["report (collect + format + print)"] = lambda: _quiet(r.report)
    print(f"track_tensors: {args.track}; "
          f"python {sys.version.split()[0]}, torch {torch.__version__}, device={device}, "
          f"{len(gc.get_objects()):,} tracked, {len(live)} live tensors, repeat={args.repeat}")
    print("| piece | median (ms) | min (ms) |")
    print("| --- | ---: | ---: |")
    for name, fn in pieces.items():
        ts = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            x = fn()
            ts.append(time.perf_counter() - t0)
            del x
        print(f"| {name} | {statistics.median(ts) * 1e3:.2f} | {min(ts) * 1e3:.2f} |")
    del heap


if __name__ == "__main__":
    main()
