#!/usr/bin/env python
"""B9 -- loading a large allocator snapshot: the streaming loader's time and peak memory.

Input: ``--snapshot PATH``, or a synthetic snapshot written here (default: 6,000,000 trace
entries, about 1.06 GB). It looks like torch's: entries {action, addr, size, stream, time_us,
compile_context, user_metadata, frames} from an allocation/free simulation (alloc,
free_requested, free_completed, segment_alloc, segment_free, a few oom entries with
device_free), each entry's frames a list of frame dicts shared through the pickle's memo, drawn
from ``--stacks`` distinct stacks of 10 to 30 frames (Python and C++ frames); segments with
blocks whose frames share the same frame dicts. The file is written opcode by opcode (protocol
4 with FRAME, memoized as pickle does), never holding the entries as dicts.

Measured, each in a fresh process (``--repeat`` times, medians):
* ``load_snapshot(path, lean=True)``: wall time and the process's peak RSS (VmHWM), and its RSS
  before the load (the interpreter and tensorgc);
* with ``--with-plain``: ``pickle.load`` of the same file (what memory_viz and the plain loader
  do), the same numbers. It may need many GB;
* with ``--page``: the whole timeline page of the file, ``tensorgc.timeline(path, out)`` (what
  ``tensorgc timeline FILE -o OUT`` does: the streamed load, the replay, the detail data, the
  page written), its time, peak RSS and page size;
* with ``--with-memory-viz``: torch's ``memory_viz trace_plot`` of the same file, as its command
  runs it (pickle.load, trace_plot, the page written), the same numbers.

    python3 bench/b9_large_snapshot.py --repeat 3 --with-plain --json docs/results/b9-cpu.json
    python3 bench/b9_large_snapshot.py --repeat 3 --page --with-memory-viz --keep /tmp/b9
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import statistics
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

MB = 1 << 20
T0 = 1_700_000_000_000_000  # time_us of the first entry (microseconds since the epoch)

# ------------------------------------------------------------------------------ the writer

BINGET = pickle.BINGET
LONG_BINGET = pickle.LONG_BINGET


def get(i: int) -> bytes:
    return BINGET + bytes((i,)) if i < 256 else LONG_BINGET + struct.pack("<I", i)


def enc_int(x: int) -> bytes:
    """An int as pickle (protocol 2+) writes it."""
    if 0 <= x < 256:
        return b"K" + bytes((x,))
    if 0 <= x < 65536:
        return b"M" + struct.pack("<H", x)
    if -(1 << 31) <= x < 1 << 31:
        return b"J" + struct.pack("<i", x)
    enc = pickle.encode_long(x)
    return b"\x8a" + bytes((len(enc),)) + enc


def enc_str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) < 256:
        return b"\x8c" + bytes((len(b),)) + b
    return b"X" + struct.pack("<I", len(b)) + b


def make_frames(rnd: random.Random, nstacks: int):
    """Distinct frame dicts (Python and C++ ones) and stacks of 10 to 30 of them."""
    py_files = [f"/workspace/model/{m}.py" for m in ("layers", "attention", "mlp", "embed",
                                                     "train", "data", "optim", "loss")]
    py_files += [f"/usr/lib/python3.11/site-packages/torch/{m}.py" for m in (
        "nn/modules/module", "nn/functional", "autograd/__init__", "optim/adam", "_tensor")]
    cpp = ["at::native::empty_cuda", "c10::cuda::CUDACachingAllocator::malloc",
           "at::TensorBase::to", "torch::autograd::Engine::evaluate_function",
           "at::native::matmul", "at::native::addmm_out_cuda_impl", "torch::autograd::Node::apply",
           "void at::native::gpu_kernel_impl<at::native::AddFunctor<float> >"]
    frames = []
    for i in range(6000):
        if i % 3 == 2:
            frames.append({"name": f"{rnd.choice(cpp)}<{i}>", "filename": "??", "line": 0})
        else:
            frames.append({"name": f"fn_{i}", "filename": rnd.choice(py_files),
                           "line": rnd.randrange(1, 3000)})
    stacks = []
    for _ in range(nstacks):
        n = rnd.randint(10, 30)
        stacks.append([frames[rnd.randrange(len(frames))] for _ in range(n)])
    return stacks


class Writer:
    """Writes a snapshot pickle: the generic parts through pickle's own pure-Python Pickler
    (its memo and framing), the trace entries as opcodes, memoized as pickle would."""

    def __init__(self, f) -> None:
        self.p = pickle._Pickler(f, protocol=4)

    def start(self, segments, settings) -> None:
        p = self.p
        p.write(pickle.PROTO + bytes((4,)))
        p.framer.start_framing()
        self.w = p.write
        top: dict = {}
        p.write(pickle.EMPTY_DICT)
        p.memoize(top)
        p.write(pickle.MARK)
        p.save("segments")
        p.save(segments)
        p.save("allocator_settings")
        p.save(settings)
        p.save("device_traces")
        self.n = len(p.memo)  # memo indices from here on are counted here
        self.strs = {o: i for i, o in p.memo.values() if isinstance(o, str)}
        self.frames = {id(o): i for i, o in p.memo.values() if isinstance(o, dict)}
        self.stack_bytes: dict = {}

    def memoize(self) -> int:
        self.w(pickle.MEMOIZE)
        self.n += 1
        return self.n - 1

    def s(self, text: str) -> bytes:
        i = self.strs.get(text)
        if i is not None:
            return get(i)
        self.w(enc_str(text))
        self.strs[text] = self.memoize()
        return b""

    def put_str(self, text: str) -> None:
        b = self.s(text)
        if b:
            self.w(b)

    def frame(self, f: dict) -> None:
        i = self.frames.get(id(f))
        if i is not None:
            self.w(get(i))
            return
        self.w(pickle.EMPTY_DICT)
        self.frames[id(f)] = self.memoize()
        self.w(pickle.MARK)
        for k in ("name", "filename", "line"):
            self.put_str(k)
            v = f[k]
            if isinstance(v, str):
                self.put_str(v)
            else:
                self.w(enc_int(v))
        self.w(pickle.SETITEMS)

    def frames_list(self, k: int, stack) -> None:
        self.w(pickle.EMPTY_LIST)
        self.memoize()
        cached = self.stack_bytes.get(k)
        if cached is not None:
            self.w(cached)
            return
        known = all(id(f) in self.frames for f in stack)
        self.w(pickle.MARK)
        for f in stack:
            self.frame(f)
        self.w(pickle.APPENDS)
        if known:
            self.stack_bytes[k] = (pickle.MARK + b"".join(get(self.frames[id(f)]) for f in stack)
                                   + pickle.APPENDS)

    def entry(self, action: str, key2: str, v2: int, size: int, stream: int, t: int,
              k: int, stack) -> None:
        w = self.w
        w(pickle.EMPTY_DICT)
        self.memoize()
        w(pickle.MARK)
        self.put_str("action")
        self.put_str(action)
        self.put_str(key2)
        w(enc_int(v2))
        self.put_str("size")
        w(enc_int(size))
        self.put_str("stream")
        w(enc_int(stream))
        self.put_str("time_us")
        w(enc_int(t))
        self.put_str("compile_context")
        self.put_str("N/A")
        self.put_str("user_metadata")
        self.put_str("")
        self.put_str("frames")
        self.frames_list(k, stack)
        w(pickle.SETITEMS)
        self.p.framer.commit_frame()

    def end(self) -> None:
        self.w(pickle.SETITEMS + pickle.STOP)
        self.p.framer.end_framing()


def write_snapshot(path: str, entries: int, nstacks: int, devices: int = 1, seed: int = 0,
                   segments: int = 2000) -> dict:
    """The synthetic snapshot (see the module's docstring); returns what it holds."""
    rnd = random.Random(seed)
    stacks = make_frames(rnd, nstacks)
    segs = []
    base = 0x7F0000000000
    for i in range(segments):
        addr = base + i * (64 * MB)
        blocks = [{"address": addr + j * (2 * MB), "size": 2 * MB, "requested_size": 2 * MB - 16,
                   "state": "active_allocated" if j % 3 else "inactive",
                   "frames": stacks[(i * 16 + j) % len(stacks)] if j % 3 else []}
                  for j in range(16)]
        segs.append({"device": 0, "address": addr, "total_size": 64 * MB, "allocated_size": 32 * MB,
                     "active_size": 32 * MB, "requested_size": 32 * MB, "stream": 0,
                     "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                     "frames": [], "blocks": blocks})
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                "expandable_segments": False, "roundup_power2_divisions": {"1": 0}}
    per_device = entries // devices
    with open(path, "wb", buffering=1 << 20) as f:
        out = Writer(f)
        out.start(segs, settings)
        out.w(pickle.EMPTY_LIST)
        out.memoize()
        out.w(pickle.MARK)
        t = T0
        for _ in range(devices):
            out.w(pickle.EMPTY_LIST)
            out.memoize()
            live: list = []
            top = base
            written = 0
            while written < per_device:
                out.w(pickle.MARK)
                batch = min(1000, per_device - written)
                b = 0
                while b < batch:
                    t += rnd.randrange(1, 50)
                    r = rnd.random()
                    if r < 1e-6:
                        k = rnd.randrange(nstacks)
                        out.entry("oom", "device_free", rnd.randrange(1 << 30), 1 << 30, 0, t,
                                  k, stacks[k])
                        b += 1
                    elif r < 0.002:
                        k = rnd.randrange(nstacks)
                        act = "segment_alloc" if rnd.random() < 0.6 else "segment_free"
                        out.entry(act, "addr", base + rnd.randrange(1 << 20) * 4096, 64 * MB, 0,
                                  t, k, stacks[k])
                        b += 1
                    elif live and (r < 0.5 or len(live) > 4000) and b + 2 <= batch:
                        a, size, k = live.pop(rnd.randrange(len(live)))
                        out.entry("free_requested", "addr", a, size, 0, t, k, stacks[k])
                        out.entry("free_completed", "addr", a, size, 0, t + 1, k, stacks[k])
                        b += 2
                    else:
                        k = rnd.randrange(nstacks)
                        size = rnd.choice((512, 4096, 65536, 1 << 20, 4 << 20, 16 << 20))
                        top += size + 512
                        live.append((top, size, k))
                        out.entry("alloc", "addr", top, size, 0, t, k, stacks[k])
                        b += 1
                out.w(pickle.APPENDS)
                written += batch
        out.w(pickle.APPENDS)
        out.end()
    return {"entries": per_device * devices, "devices": devices, "stacks": nstacks,
            "bytes": os.path.getsize(path)}


# ------------------------------------------------------------------------------ the workers

def _vm(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def worker(config: dict) -> None:
    path, mode = config["path"], config["mode"]
    if mode == "lean":
        tg = C.import_tensorgc()
        before = _vm("VmRSS")
        t0 = time.perf_counter()
        snap = tg.load_snapshot(path, lean=True, max_bytes=1 << 40)
        dt = time.perf_counter() - t0
        traces = snap["device_traces"]
        info = {"entries": sum(len(t) for t in traces),
                "stacks": len(traces[0].stacks) if traces else 0,
                "kind": type(traces[0]).__name__ if traces else None}
    elif mode == "page":  # the whole `tensorgc timeline FILE -o OUT`: load, replay, page
        tg = C.import_tensorgc()
        out = path + ".tensorgc-timeline.html"
        before = _vm("VmRSS")
        t0 = time.perf_counter()
        tg.timeline(path, out, max_bytes=1 << 40)
        dt = time.perf_counter() - t0
        info = {"page_bytes": os.path.getsize(out)}
    elif mode == "memory_viz":  # torch's trace_plot of the same file, as its command runs it
        from torch.cuda import _memory_viz

        out = path + ".memory_viz.html"
        before = _vm("VmRSS")
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            data = pickle.load(f)
        page = _memory_viz.trace_plot(data)
        with open(out, "w") as f:
            f.write(page)
        dt = time.perf_counter() - t0
        info = {"page_bytes": os.path.getsize(out)}
    else:
        before = _vm("VmRSS")
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            snap = pickle.load(f)
        dt = time.perf_counter() - t0
        info = {"entries": sum(len(t) for t in snap["device_traces"])}
    C.emit_result({"mode": mode, "seconds": dt, "rss_before": before, "peak_rss": _vm("VmHWM"),
                   "rss_after": _vm("VmRSS"), **info})


# ------------------------------------------------------------------------------ the parent

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=6_000_000, help="trace entries to write")
    p.add_argument("--stacks", type=int, default=3000, help="distinct stacks")
    p.add_argument("--devices", type=int, default=1, help="devices the entries are spread over")
    p.add_argument("--snapshot", help="load this file instead of writing one")
    p.add_argument("--keep", help="directory to write the snapshot in (kept; reused when there)")
    p.add_argument("--repeat", type=int, default=3, help="runs per loader, each a fresh process")
    p.add_argument("--with-plain", action="store_true", help="also pickle.load (needs many GB)")
    p.add_argument("--page", action="store_true",
                   help="also the timeline page of the file (tensorgc.timeline(path, out))")
    p.add_argument("--with-memory-viz", action="store_true",
                   help="also torch's memory_viz trace_plot of the file (needs many GB)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for one load")
    p.add_argument("--json", default=None, help="write all results as JSON to this path")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    made = None
    path = args.snapshot
    if path is None:
        work = args.keep or tempfile.mkdtemp(prefix="tensorgc-b9-")
        os.makedirs(work, exist_ok=True)
        path = os.path.join(work, f"b9-{args.entries}-{args.stacks}-{args.devices}.pickle")
        if not os.path.exists(path):
            t0 = time.perf_counter()
            C.log(f"writing {path} ...")
            made = write_snapshot(path, args.entries, args.stacks, args.devices)
            made["write_s"] = time.perf_counter() - t0
            C.log(f"wrote {made['bytes'] / 1e9:.2f} GB in {made['write_s']:.0f} s")
    size = os.path.getsize(path)
    modes = (["lean"] + (["plain"] if args.with_plain else []) + (["page"] if args.page else [])
             + (["memory_viz"] if args.with_memory_viz else []))
    runs: dict = {m: [] for m in modes}
    for r in range(args.repeat):
        for m in modes:  # interleaved run by run
            res = C.run_worker(os.path.abspath(__file__), {"path": path, "mode": m}, args.timeout)
            C.log(f"run {r + 1} {m}: {C.fmt_run(res, args.timeout)} s, peak "
                  f"{(res.get('peak_rss') or 0) / MB:,.0f} MiB")
            runs[m].append(res)
    print(f"### B9 large snapshot: {os.path.basename(path)}, {size / 1e9:.2f} GB, "
          f"{runs['lean'][0].get('entries', 0):,} trace entries\n")
    print("| mode | median s | runs (s) | peak RSS, median | RSS before the load | RSS after |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    names = {"lean": "load_snapshot(lean=True)", "plain": "pickle.load",
             "page": "the timeline page (tensorgc.timeline(path, out))",
             "memory_viz": "memory_viz trace_plot (pickle.load, trace_plot, write)"}
    summary = {}
    for m in modes:
        ok = [x for x in runs[m] if x.get("seconds") is not None and not x.get("timed_out")]
        med = C.median_of(runs[m])
        peak = statistics.median(x["peak_rss"] for x in ok) if ok else None
        summary[m] = {"median_s": med, "peak_rss_median": peak}
        print(f"| {names[m]} | {C.fmt_seconds(med, args.timeout)} | "
              f"{', '.join(C.fmt_run(x, args.timeout) for x in runs[m])} | "
              f"{peak / MB:,.0f} MiB |" if peak else "| {names[m]} | failed | | | | |",
              end="" if peak else "\n")
        if peak:
            print(f" {statistics.median(x['rss_before'] for x in ok) / MB:,.0f} MiB | "
                  f"{statistics.median(x['rss_after'] for x in ok) / MB:,.0f} MiB |")
    for m in ("page", "memory_viz"):
        sizes = [x["page_bytes"] for x in runs.get(m, []) if x.get("page_bytes")]
        if sizes:
            print(f"\n{names[m]}: page {sizes[-1] / MB:,.1f} MiB")
    if "plain" in summary and summary["plain"]["peak_rss_median"] and summary["lean"]["peak_rss_median"]:
        print(f"\npeak RSS plain / lean: "
              f"{summary['plain']['peak_rss_median'] / summary['lean']['peak_rss_median']:.1f}x")
    C.write_json(args.json, {"benchmark": "B9", "config": {k: v for k, v in vars(args).items()
                                                           if k != "worker"},
                             "file": {"path": path, "bytes": size, **(made or {})},
                             "environment": C.environment("cpu"), "runs": runs,
                             "summary": summary})


if __name__ == "__main__":
    main()
