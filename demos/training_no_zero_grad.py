#!/usr/bin/env python
"""training_no_zero_grad: two classic training-loop bugs, one of them a tensor cycle.

The leak story
--------------
A trainer logs every step into a "window" of ``StepRecord`` objects and prints
a summary every few steps.  Two bugs hide in it:

1. ``optimizer.zero_grad()`` is never called.  Gradients *accumulate* across
   steps (watch the gradient norm climb in the log): the model trains on the sum
   of all past gradients.  This one is not a leak, but it travels with the next.

2. Each ``StepRecord`` keeps the *loss tensor itself* (not ``loss.item()``),
   with its ``grad_fn`` -- so the autograd graph of the step stays alive -- plus
   the logits and the input batch, and a back-reference to the window list
   (``record.window``) so that a record can look at its neighbours.  The window
   list references the records; the records reference the window: a cycle.
   When the trainer starts a new window (``self.window = []``) the old window
   and all its records become cyclic garbage that only the cyclic collector can
   free -- batches, logits and graphs pile up in device memory until it runs.

tensorgc reports the ``list -[i]-> StepRecord -.window-> list`` cycle with all
the tensors hanging off it (loss, logits, inputs) and a fix hint.  The fix:
``optimizer.zero_grad(set_to_none=True)`` every step, store ``loss.item()``
(or ``.detach()``), and do not point records back at their container (use an
index or a ``weakref``).  ``--fixed`` runs the fixed loop: no report.

Model: ``torchvision.models.resnet50`` (random weights, nothing downloaded)
when torchvision is importable, else a small CNN.  On CPU: tiny batch and
images, a few steps (well under a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import weakref

from _common import import_tensorgc, is_cuda, memory_line, mib, pick_device, print_report


class StepRecord:
    """Everything about one step -- including live tensors and a back-reference (the bug)."""

    def __init__(self, step, loss, logits, inputs, window):
        self.step = step
        self.loss = loss          # BUG: a tensor with grad_fn -> keeps the graph alive
        self.logits = logits      # BUG: activations
        self.inputs = inputs      # BUG: the whole batch
        self.window = window      # BUG: back-reference to the list that holds us -> cycle
        window.append(self)

    def previous(self):
        i = self.window.index(self)
        return self.window[i - 1] if i else None


class FixedStepRecord:
    __slots__ = ("step", "loss")

    def __init__(self, step, loss_value):
        self.step = step
        self.loss = loss_value    # a float


def build_model(kind: str, num_classes: int):
    import torch.nn as nn

    if kind in ("auto", "resnet50"):
        try:
            import torchvision

            try:
                model = torchvision.models.resnet50(weights=None, num_classes=num_classes)
            except TypeError:  # old torchvision
                model = torchvision.models.resnet50(pretrained=False, num_classes=num_classes)
            return model, "resnet50"
        except Exception as exc:  # not installed, or installed but broken (e.g. built for another torch)
            if kind == "resnet50":
                raise SystemExit(f"--model resnet50 needs a working torchvision: {exc!r}")
            if not isinstance(exc, ImportError):
                print(f"(torchvision unusable, {type(exc).__name__}: {str(exc)[:120]}; using the small CNN)")
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes),
    )
    return model, "small-cnn"


class Trainer:
    def __init__(self, model, optimizer, window_size, fixed=False):
        self.model = model
        self.optimizer = optimizer
        self.window_size = window_size
        self.fixed = fixed
        self.window = []
        self.loss_fn = __import__("torch").nn.CrossEntropyLoss()

    def grad_norm(self) -> float:
        import torch

        norms = [p.grad.norm() for p in self.model.parameters() if p.grad is not None]
        return float(torch.stack(norms).norm()) if norms else 0.0

    def train_step(self, step, inputs, targets):
        if self.fixed:
            self.optimizer.zero_grad(set_to_none=True)
        # BUG 1 (when not fixed): no optimizer.zero_grad() -> gradients accumulate
        logits = self.model(inputs)
        loss = self.loss_fn(logits, targets)
        loss.backward()
        self.optimizer.step()
        if self.fixed:
            self.window.append(FixedStepRecord(step, loss.item()))
        else:
            StepRecord(step, loss, logits, inputs, self.window)  # BUG 2: cycle holding tensors
        if len(self.window) >= self.window_size:
            self.end_window(step)

    def end_window(self, step):
        if self.fixed:
            mean = sum(r.loss for r in self.window) / len(self.window)
        else:
            import torch

            mean = float(torch.stack([r.loss.detach() for r in self.window]).mean())
        print(f"  step {step + 1:3d}: mean loss {mean:.4f}  grad-norm {self.grad_norm():10.4f}")
        self.window = []  # the old window (list <-> records) is now cyclic garbage


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Training loop without zero_grad that keeps loss/graph in a StepRecord<->list cycle; "
                    "tensorgc reports it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, ...")
    p.add_argument("--model", choices=["auto", "resnet50", "small"], default="auto",
                   help="auto: resnet50 if torchvision is importable, else a small CNN")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: 20 on CUDA, 12 on CPU)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: 32 on CUDA, 2 on CPU)")
    p.add_argument("--image", type=int, default=None, help="image side (default: 224 on CUDA, 64 on CPU)")
    p.add_argument("--window", type=int, default=4, help="steps per logging window")
    p.add_argument("--fixed", action="store_true", help="run the fixed loop (zero_grad, loss.item(), no cycle)")
    p.add_argument("--directory", default=None, help="where HTML pages go (default: the temp dir)")
    p.add_argument("--max-reports", type=int, default=1,
                   help="print full text + write HTML for the first K reports")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads on CPU (0: leave as is)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    tensorgc = import_tensorgc()
    import torch

    device = pick_device(args.device)
    cuda = is_cuda(device)
    if args.threads and not cuda:
        torch.set_num_threads(args.threads)
    steps = args.steps or (20 if cuda else 12)
    batch = args.batch or (32 if cuda else 2)
    image = args.image or (224 if cuda else 64)
    num_classes = 10

    torch.manual_seed(0)
    model, model_name = build_model("small" if args.model == "small" else args.model, num_classes)
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    trainer = Trainer(model, optimizer, args.window, fixed=args.fixed)
    print(f"training_no_zero_grad: device={device} model={model_name} steps={steps} batch={batch} "
          f"image={image} window={args.window} {'FIXED' if args.fixed else 'buggy'}")

    reports, html_paths = [], []

    def on_report(report):
        reports.append(report)
        if len(reports) <= args.max_reports:
            html_paths.append(print_report(report, args.directory, title=f"report #{len(reports)}"))
        else:
            print(f"tensorgc report #{len(reports)}: garbage={report.garbage} "
                  f"tensors={len(report.tensors)} holding {mib(report.nbytes)}")

    handle = tensorgc.observe_cycles(on_report, device=device)
    inputs_alive = []
    t0 = time.perf_counter()
    try:
        for step in range(steps):
            x = torch.randn(batch, 3, image, image, device=device)
            y = torch.randint(0, num_classes, (batch,), device=device)
            inputs_alive.append(weakref.ref(x))
            trainer.train_step(step, x, y)
            del x, y
        if cuda:
            torch.cuda.synchronize()
        train_s = time.perf_counter() - t0
        waiting = sum(r() is not None for r in inputs_alive)
        print(f"trained {steps} steps in {train_s:.1f}s; input batches still alive: {waiting}/{steps} "
              f"(the current window is legitimately alive: {len(trainer.window)} steps)")
        print(f"before final gc.collect(): {memory_line(device)}")
        trainer.window = []
        gc.collect()
        print(f"after  final gc.collect(): {memory_line(device)}")
    finally:
        handle.remove()

    print()
    print(f"tensorgc reports: {len(reports)}")
    for path in html_paths:
        print(f"HTML: {path}")
    if reports:
        first = reports[0]
        tensor_types = sorted({(t["type"], t["dtype"], tuple(t["shape"])) for t in first.tensors})
        print("tensors in the first report:", "; ".join(f"{ty} {dt} {sh}" for ty, dt, sh in tensor_types))
    elif not args.fixed:
        print("PROBLEM: no report for the StepRecord <-> list cycles")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
