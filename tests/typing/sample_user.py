"""A training script that uses every public entry point of tensorgc, written as a user would.

tests/test_typing.py type-checks it with ``mypy --strict`` (the package's annotations and the C
module's stub must describe it without a complaint) and runs it (on the CPU where there is no
CUDA), so that what type-checks is also what works.

    python tests/typing/sample_user.py [OUTPUT_DIR]
"""
from __future__ import annotations

import gc
import logging
import os
import sys
import tempfile
from typing import Dict, List, Optional

import torch
from IPython.core.interactiveshell import InteractiveShell

import tensorgc
from tensorgc import (Categorizer, Courtesy, CycleReport, DeviceError, Forecast,
                      GatheredReport, GraphvizError, GrowthWatch, Handle, LineProfiler, MemReporter, Moved, Publisher, Report,
                      Row, SnapshotError)
from tensorgc.cli import main as tensorgc_command
from tensorgc.lineprof import LineStats
from tensorgc.segments import segments_html
from tensorgc.timeline import categories_at_peak, timeline_html

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
log = logging.getLogger("train")


class Net(torch.nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(width, width)
        self.fc2 = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.fc1(x).relu()
        out: torch.Tensor = self.fc2(hidden)
        return out


class Node:
    """What leaks: an object graph with a cycle that holds a tensor."""

    def __init__(self, payload: Optional[torch.Tensor] = None) -> None:
        self.payload = payload
        self.other: Optional[Node] = None


def leak_a_cycle() -> None:
    a, b = Node(torch.zeros(256, device=DEVICE)), Node()
    a.other, b.other = b, a


def train_step(model: Net, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.item())


@tensorgc.profile
def evaluate(model: Net, x: torch.Tensor) -> float:
    with torch.no_grad():
        return float(model(x).mean().item())


@tensorgc.profile_every(output_interval=2, columns=("rss_bytes.all.peak",))
def warm_up(model: Net, x: torch.Tensor) -> None:
    model(x)


def watch_cycles(out: str) -> List[CycleReport]:
    reports: List[CycleReport] = []

    def keep(report: CycleReport) -> None:
        reports.append(report)
        first = report.tensors[0]
        log.info("cycle: %s, %d bytes, shape %s on %s", report.groups[0]["cycle"],
                 report.nbytes, first["shape"], first["device"])

    pages: List[str] = []
    with tensorgc.observe_cycles(keep, device=DEVICE) as handle:
        garbage: Handle = tensorgc.observe_garbage(lambda objects: None)
        pages_handle = tensorgc.observe_tensor_cycles(pages.append, device=DEVICE)
        leak_a_cycle()
        gc.collect()
        garbage.remove()
        pages_handle()
    assert not handle.active and reports and pages and pages[0].startswith("<!DOCTYPE html>")
    # CUDA if there is one, else the CPU; pages go to the output directory, repeats are counted
    counter = tensorgc.CycleDedup(max_pages=5, min_interval=0.0, summary_every=None)
    before = tensorgc.set_output_dir(out)
    try:
        assert tensorgc.get_output_dir() == os.path.abspath(out)
        warn = tensorgc.warn_tensor_cycles(dedup=counter)
        for _ in range(2):
            leak_a_cycle()
            gc.collect()
        warn.remove()
    finally:
        tensorgc.set_output_dir(before)
    signature: str = reports[0].groups[0]["signature"]
    mine: Dict[str, int] = counter.totals()
    totals: Dict[str, int] = tensorgc.cycle_totals()
    assert mine["reports"] == 1 and mine["seen"] == 2 and totals["seen"] >= 2
    log.info("cycle signature %s: #%d", signature, counter.number(signature))
    page = reports[0].html
    svg: str = reports[0].svg
    assert page and svg and reports[0].generation >= 0
    previous = tensorgc.set_render_timeout(5.0)
    try:
        tensorgc.render_svg("digraph { loss -> grad }")
    except GraphvizError as exc:
        log.warning("no picture: %s", exc)
    finally:
        tensorgc.set_render_timeout(previous)
    assert tensorgc.get_render_timeout() == previous
    return reports


def report_memory(model: Net, opt: torch.optim.Optimizer) -> Report:
    tensorgc.track_tensors(True)
    try:
        reporter = MemReporter(model, optimizer=opt)
        reporter.report(verbose=True, device=DEVICE)
        rep = reporter.collect(device=DEVICE)  # owners=None: the automatic owner search
        off = reporter.collect(device=DEVICE, owners=False)
        searched: bool = rep.owners
        how: str = rep.owner_search["mode"]
        log.info("search %s (%s), %s without", searched, how, off.owner_search["mode"])
    finally:
        tensorgc.track_tensors(False)
    biggest: Row = max(rep.rows, key=lambda r: r.used)
    shape = biggest.shape or ()
    log.info("largest tensor: %s %s, %d bytes", biggest.name, tuple(shape), biggest.used)
    for dev in rep.devices():
        log.info("%s: %d bytes in %d storages", dev, rep.totals[dev]["used"],
                 rep.totals[dev]["storages"])
    assert "rows" in rep.to_dict() and rep.text == str(rep)
    try:
        reporter.collect(device="gpu")
    except DeviceError as exc:  # a ValueError naming the argument
        log.info("%s", exc)
    return rep


def profile_lines(model: Net, opt: torch.optim.Optimizer, x: torch.Tensor) -> LineStats:
    tensorgc.set_target_gpu("cuda:0")
    with LineProfiler(train_step, target_gpu=0) as profiler:
        train_step(model, opt, x)
    profiler.add_function(evaluate)
    stats = profiler.display(columns=profiler.columns()[:2])
    profiler.print_stats(train_step, stream=sys.stdout)
    log.info("%d lines recorded from %s", profiler.lines_recorded, profiler.source)
    evaluate(model, x)
    for _ in range(2):
        warm_up(model, x)
    tensorgc.clear_global_line_profiler()
    return stats


def record_and_draw(model: Net, opt: torch.optim.Optimizer, x: torch.Tensor, out: str) -> str:
    path = os.path.join(out, "run.pickle")
    with tensorgc.categorize(model, opt) as marks:
        handle: Categorizer = marks
        if torch.cuda.is_available():
            tensorgc.record_memory_history(max_entries=100_000)
            try:
                train_step(model, opt, x)
                tensorgc.dump_snapshot(path)
            finally:
                tensorgc.record_memory_history(enabled=None)
        else:  # the allocator's snapshot is CUDA's: write one by hand to read back
            train_step(model, opt, x)
            frames = [{"filename": __file__, "line": 1, "name": "train_step"}]
            made: Dict[str, object] = {
                "segments": [{"device": 0, "address": 1 << 20, "total_size": 2 << 20,
                              "segment_type": "large",
                              "blocks": [{"address": 1 << 20, "size": 1 << 20,
                                          "requested_size": 1 << 20,
                                          "state": "active_allocated", "frames": frames}]}],
                "device_traces": [[{"action": "alloc", "addr": 1 << 20, "size": 1 << 20,
                                    "time_us": 1, "frames": frames}]]}
            tensorgc.dump_snapshot(path, made)
        log.info("%d spans marked", len(handle.marks()["spans"]))
    snap = tensorgc.load_snapshot(path, max_bytes=1 << 30)
    page = timeline_html(snap, device="cuda", detail=100)
    with open(os.path.join(out, "timeline.html"), "w", encoding="utf-8") as f:
        f.write(page)
    written: str = tensorgc.timeline(path, os.path.join(out, "timeline-of-file.html"), detail=50)
    log.info("timeline at %s", written)
    segments = segments_html(snap, device=0, at=len(snap["device_traces"][0]))
    assert segments.startswith("<!DOCTYPE html>")
    log.info("categories at the peak: %s", categories_at_peak(snap, "cuda:0"))
    try:
        tensorgc.load_snapshot(__file__)
    except SnapshotError as exc:
        log.info("not a snapshot: %s", exc)
    assert tensorgc_command(["stats", path]) == 0
    return path


def lend_the_device() -> Moved:
    with Courtesy(DEVICE, pin_memory=False) as courtesy:
        moved = courtesy.moved
        assert moved is not None and courtesy.yielded == (moved.storages > 0)
    return courtesy.restored or Moved(0, 0, 0)


def after_an_oom(model: Net, opt: torch.optim.Optimizer, out: str) -> str:
    if torch.cuda.is_available():
        stop = tensorgc.on_oom(out, model=model, optimizer=opt)
        stop()
    path, verdict = tensorgc.write_autopsy(out, "cpu", model=model, optimizer=opt,
                                           reason="by hand")
    log.info("autopsy in %s: %s", path, verdict)
    return path


def across_ranks(model: Net, opt: torch.optim.Optimizer, snap_path: str, out: str) -> int:
    """Every rank of a torchrun job calls this; alone, this process is the only rank."""
    gathered: Optional[GatheredReport] = tensorgc.gather_report(
        DEVICE, reporter=MemReporter(model, optimizer=opt), top=5, show=False)
    assert gathered is not None  # on dst (rank 0), and alone
    log.info("%s; spread %s", gathered.highest_line(), gathered.spread()["allocated"])
    assert gathered.to_dict()["ranks"][0]["rank"] == gathered.ranks[0]["rank"]
    MemReporter(model, optimizer=opt).report(device=DEVICE, gather=True, dst=0)
    with tensorgc.publish_reports(every=60.0, model=model, optimizer=opt) as pub:
        publisher: Publisher = pub
        log.info("published: %s", publisher.publish())  # False alone: no job, no store
    ranks_dir = os.path.join(out, "ranks")
    os.makedirs(ranks_dir, exist_ok=True)
    mine = tensorgc.dump_snapshot(ranks_dir, tensorgc.load_snapshot(snap_path))
    assert os.path.basename(mine) in ("snapshot.pickle", "snapshot-rank0.pickle")
    return tensorgc_command(["stats", ranks_dir, snap_path])


def watch_growth(model: Net, opt: torch.optim.Optimizer, x: torch.Tensor, out: str) -> int:
    """A watch over a loop that leaks: the forecasts it made, through the callback."""
    seen: List[Forecast] = []

    def tell(fc: Forecast) -> None:
        left = "unknown" if fc.steps_left is None else f"{fc.steps_left} steps"
        log.info("%.0f bytes a step, %s left, %s", fc.bytes_per_step, left, fc.holders[:1])
        seen.append(fc)
    kept: List[torch.Tensor] = []
    with tensorgc.warn_memory_growth(DEVICE, callback=tell, limit=1 << 34,
                                     directory=out) as watch:
        w: GrowthWatch = watch
        for _ in range(60):
            train_step(model, opt, x)
            kept.append(torch.empty(1 << 18, device=DEVICE))
    log.info("watch: %s", w.stats())
    return len(seen)


def in_a_notebook(shell: InteractiveShell) -> None:
    """%load_ext tensorgc does this: the %mlrun and %%mlrun magics."""
    tensorgc.load_ipython_extension(shell)


def main(argv: List[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    out = argv[1] if len(argv) > 1 else tempfile.mkdtemp(prefix="tensorgc-sample-")
    log.info("tensorgc %s on %s", tensorgc.__version__, DEVICE)
    model = Net().to(DEVICE)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(32, 64, device=DEVICE)
    gc.disable()  # the cycles are collected when this script says so
    try:
        reports = watch_cycles(out)
    finally:
        gc.enable()
    rep = report_memory(model, opt)
    stats = profile_lines(model, opt, x)
    snapshot_path = record_and_draw(model, opt, x, out)
    restored = lend_the_device()
    autopsy = after_an_oom(model, opt, out)
    assert across_ranks(model, opt, snapshot_path, out) == 0
    assert watch_growth(model, opt, x, out) == 1
    print(f"sample: {len(reports)} cycle report(s); {len(rep.rows)} rows; "
          f"{len(stats.functions)} profiled function(s); snapshot {snapshot_path}; "
          f"restored {restored.nbytes} bytes; autopsy {autopsy}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
