#!/usr/bin/env python
"""B3 -- MemReporter: speed on a large heap, and (CUDA) accuracy against the allocator.

Setup (one process): a heap of ``--heap`` live gc-tracked objects (default 1M), and a
training model: ``--layers`` x Linear(``--width``) (default 100 x 1024) with Adam after one step, on the
device.

Speed: ``report()`` wall time (stdout to /dev/null) of tensorgc's MemReporter(model,
optimizer=opt) (the default, owners=None, and owners=False: no owner search) and of
pytorch_memlab's MemReporter(model) (+ add_optimizer), interleaved,
``--repeat`` times each; medians, and the ratio measured in this run. memlab is loaded from its
installed files (if its package __init__ needs pandas, which it does for its line profiler, only
its mem_reporter module is loaded, unchanged). FutureWarnings raised during each report are
counted.

Accuracy (CUDA only): ``torch.cuda.memory._record_memory_history()`` on, then a forward pass
with a hook in the middle layer that collects the report while the autograd graph is alive.
Reported: memory_allocated(), tensorgc's total, named / unnamed-tensor / stack-attributed /
unattributed bytes, and memlab's "Used Memory" for the same state.

    python bench/b3_reporter.py --repeat 7 --json docs/results/b3-cpu.json
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.util
import io
import os
import statistics
import sys
import time
import types
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def load_memlab():
    """pytorch_memlab's MemReporter, or (None, why)."""
    try:
        from pytorch_memlab import MemReporter  # noqa: F401
        return MemReporter, "pytorch_memlab"
    except ImportError as exc:
        why = str(exc)
    spec = importlib.util.find_spec("pytorch_memlab")
    if spec is None or not spec.submodule_search_locations:
        return None, f"pytorch_memlab not installed ({why})"
    pkg = types.ModuleType("pytorch_memlab")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["pytorch_memlab"] = pkg
    try:
        mod = importlib.import_module("pytorch_memlab.mem_reporter")
    except ImportError as exc:
        return None, f"pytorch_memlab.mem_reporter: {exc}"
    return mod.MemReporter, f"pytorch_memlab.mem_reporter (package __init__ skipped: {why})"


def memlab_version():
    try:
        from importlib.metadata import version
        return version("pytorch_memlab")
    except Exception:  # noqa: BLE001
        return None


def make_model(args, device):
    """The benchmark's model: layers x Linear(width), with Adam after one step."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width)
                                  for _ in range(args.layers)]).to(device)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(args.batch, args.width, device=device)).sum().backward()
    opt.step()
    return model, opt


def timed(fn):
    sink = io.StringIO()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(sink):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
    fw = sum(1 for x in w if issubclass(x.category, (FutureWarning, DeprecationWarning)))
    return dt, fw, sink.getvalue()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heap", type=int, default=1_000_000)
    p.add_argument("--layers", type=int, default=100)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--device", default="auto")
    p.add_argument("--json")
    p.add_argument("--print-report", action="store_true", help="print tensorgc's verbose report")
    p.add_argument("--no-memlab", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--accuracy-only", action="store_true",
                   help="(internal) the CUDA accuracy run, in a fresh process with history on")
    args = p.parse_args()
    if args.accuracy_only:
        return accuracy_main(args)

    import torch

    tensorgc = C.import_tensorgc()
    device = C.resolve_device(args.device)
    ML, ml_how = load_memlab()

    heap = C.build_heap(args.heap)
    model, opt = make_model(args, device)
    gc.collect()
    tracked = len(gc.get_objects())

    def ours():
        r = tensorgc.MemReporter(model, optimizer=opt)
        r.report()

    def ours_off():
        r = tensorgc.MemReporter(model, optimizer=opt)
        r.report(owners=False)

    def theirs():
        r = ML(model)
        r.add_optimizer(opt)
        r.report()

    res = {"tensorgc": [], "tensorgc, owners=False": [], "tensorgc, track_tensors() on": [],
           "memlab": []}
    warn = {k: 0 for k in res}
    for _ in range(args.repeat):
        for name, fn in (("tensorgc", ours), ("tensorgc, owners=False", ours_off),
                         ("tensorgc, track_tensors() on", ours), ("memlab", theirs)):
            if name == "memlab" and ML is None:
                continue
            # the index is process-wide: on only for its own row (turning it on walks once,
            # outside the timed call, as it would once per process)
            tensorgc.track_tensors(name.endswith("on"))
            dt, fw, _ = timed(fn)
            res[name].append(dt)
            warn[name] = max(warn[name], fw)
    tensorgc.track_tensors(False)
    med = {k: statistics.median(v) if v else None for k, v in res.items()}

    env = C.environment(device)
    print(f"### B3 MemReporter speed: {args.layers} x Linear({args.width}) + Adam after one step on "
          f"{device}, {tracked:,} gc-tracked objects\n")
    print(f"python {env.get('python')}, torch {torch.__version__}, memlab: {ml_how} "
          f"{memlab_version() or ''}, repeat={args.repeat} (interleaved)\n")
    print("| reporter | median report() (ms) | runs (ms) | FutureWarnings per report | vs memlab |")
    print("| --- | ---: | --- | ---: | ---: |")
    for k in res:
        if not res[k]:
            print(f"| {k} | n/a | {ml_how} | | |")
            continue
        ratio = (f"{med['memlab'] / med[k]:.1f}x faster" if k != "memlab" and med["memlab"] else "")
        print(f"| {k} | {med[k] * 1e3:.1f} | {', '.join(f'{x * 1e3:.1f}' for x in res[k])} | "
              f"{warn[k]} | {ratio} |")

    acc = None
    if device.startswith("cuda"):
        # A fresh process that records allocation history from its first CUDA allocation, as a
        # user chasing memory would: blocks no tensor owns (cuBLAS workspaces) then have stacks.
        import json
        import subprocess

        cmd = [sys.executable, os.path.abspath(__file__), "--accuracy-only", "--device", device,
               "--layers", str(args.layers), "--width", str(args.width), "--batch", str(args.batch)]
        if ML is None:
            cmd.append("--no-memlab")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        line = [x for x in proc.stdout.splitlines() if x.startswith(C.RESULT_PREFIX)]
        if not line:
            print(f"\naccuracy run failed: {proc.stderr[-2000:]}")
        else:
            acc = json.loads(line[-1][len(C.RESULT_PREFIX):])
            print_accuracy(tensorgc, acc, device, args)
    C.write_json(args.json, {"env": env, "runs": res, "median": med, "warnings": warn,
                             "accuracy": {k: v for k, v in (acc or {}).items()},
                             "tracked": tracked, "args": vars(args)})
    del heap


def print_accuracy(tensorgc, acc, device, args):
    print(f"\n### B3 accuracy mid-forward (graph alive, history recording on), {device}\n")
    R = tensorgc.reporter.readable_size
    a = acc["memory_allocated"]
    print("| quantity | bytes | readable | share of memory_allocated() |")
    print("| --- | ---: | ---: | ---: |")
    for k in ("memory_allocated", "tensorgc_total", "named", "unnamed_tensors",
              "stack_attributed", "unattributed", "named_plus_stack", "memlab_used"):
        v = acc.get(k)
        if v is None:
            continue
        print(f"| {k} | {v:,} | {R(v)} | {100.0 * v / a:.2f}% |")
    print(f"\ntotal equals memory_allocated(): {acc['tensorgc_total'] == a}; "
          f"named + stack-attributed = {100.0 * acc['named_plus_stack'] / a:.2f}%")
    if args.print_report:
        print("\n```\n" + acc["report_text"] + "\n```")


def accuracy_main(args):
    import torch

    tensorgc = C.import_tensorgc()
    device = C.resolve_device(args.device)
    torch.cuda.memory._record_memory_history(max_entries=100000)
    ML = None if args.no_memlab else load_memlab()[0]
    model, opt = make_model(args, device)
    acc = accuracy(tensorgc, ML, model, opt, args, device)
    C.emit_result(acc)


def accuracy(tensorgc, ML, model, opt, args, device):
    import torch

    out = {}
    try:
        x = torch.randn(args.batch, args.width, device=device)
        mid = model[len(model) // 2]

        def hook(mod, inp, outp):
            torch.cuda.synchronize()
            out["memory_allocated"] = torch.cuda.memory_allocated()
            rep = tensorgc.MemReporter(model, optimizer=opt).collect(device=device)
            out["report_text"] = rep.format(verbose=True)
            t = rep.totals[str(torch.device(device)) if ":" in device else "cuda:0"]
            out["tensorgc_total"] = t["allocated"]
            out["named"] = t["named"]
            out["unnamed_tensors"] = t["seen"] - t["named"]
            out["stack_attributed"] = t["stack_attributed"]
            out["unattributed"] = t["unattributed"]
            out["named_plus_stack"] = t["named"] + t["stack_attributed"]
            if ML is not None:
                r = ML(model)
                r.add_optimizer(opt)
                _, _, text = timed(r.report)
                dev = None
                for line in text.splitlines():
                    if line.startswith("Storage on "):
                        dev = line[len("Storage on "):].strip()
                    elif "Used Memory:" in line and dev is not None and dev.startswith("cuda"):
                        out["memlab_used_text"] = line.split("Used Memory:")[1].strip()
                out["memlab_used"] = _parse_size(out.get("memlab_used_text"))
        h = mid.register_forward_hook(hook)
        y = model(x)
        h.remove()
        del y
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return out


def _parse_size(s):
    if not s:
        return None
    units = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        return int(float(s[:-1]) * units[s[-1]])
    except (KeyError, ValueError):
        return None


if __name__ == "__main__":
    main()
