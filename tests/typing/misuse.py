"""Mistakes the type checker must catch: each line marked `# E: code` is one mypy --strict
reports with that error code, and no other line is (tests/test_typing.py). If the annotations
or the C module's stub fell back to Any, these would pass unnoticed."""
from __future__ import annotations

import torch

import tensorgc
from tensorgc import CycleReport, MemReporter

report = MemReporter(torch.nn.Linear(2, 2)).collect(device="cpu")
report.rows[0].nbytes  # E: attr-defined
total: str = report.rows[0].used  # E: assignment
MemReporter().collect(owners="yes")  # E: arg-type
tensorgc.set_render_timeout("5s")  # E: arg-type
seconds: str = tensorgc.get_render_timeout()  # E: assignment
tensorgc.observe_cycles(lambda r: None, device=3)  # E: arg-type
tensorgc.load_snapshot("run.pickle", max_bytes="1G")  # E: arg-type
tensorgc.record_memory_history(enabled="yes")  # E: arg-type
tensorgc.Courtesy("cpu", pin_memory="yes")  # E: arg-type
tensorgc.LineProfiler(len, target_gpu=1.5)  # E: arg-type
tensorgc.categorize(optimizer=torch.nn.Linear(2, 2))  # E: arg-type
tensorgc.set_output_dir(3)  # E: arg-type
tensorgc.warn_tensor_cycles(max_pages="20")  # E: arg-type
pages: str = tensorgc.cycle_totals()["reports"]  # E: assignment


def on_report(r: CycleReport) -> str:
    return r.tensors[0]["nbytes"]  # E: return-value


def on_page(r: CycleReport) -> None:
    r.tensors[0]["bytes"]  # E: typeddict-item


path, verdict = tensorgc.write_autopsy("/tmp", "cpu")
verdict + 1  # E: operator
