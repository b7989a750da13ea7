#!/usr/bin/env python
"""timeline_training: record a few training steps and draw their Active Memory Timeline.

The story: memory climbs through each forward pass (activations saved for backward), drops
through backward, and the optimizer's state appears after the first step and stays. Under
tensorgc.categorize every allocation is coloured by what it was (parameter, activation, grad,
optimizer state, temporary), and a second chart stacks the categories over time. Recording
the allocator's history costs a little; the page that comes out opens anywhere, offline.

    python demos/timeline_training.py --steps 4 --out /tmp/steps.html   # needs CUDA
"""
from __future__ import annotations

import argparse
import os
import tempfile

from _common import import_tensorgc, pick_device


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--out", default=None, help="the HTML page (default: a new temp file)")
    p.add_argument("--snapshot", default=None, help="also keep the snapshot here")
    args = p.parse_args(argv)

    import torch

    tensorgc = import_tensorgc()
    device = pick_device(args.device)
    if not device.startswith("cuda"):
        print("timeline_training: the allocator history needs CUDA; nothing to draw on", device)
        return 0
    from tensorgc.timeline import timeline_html

    tensorgc.record_memory_history(max_entries=100000)
    try:
        torch.manual_seed(0)
        layers = []
        for _ in range(args.layers):
            layers += [torch.nn.Linear(args.width, args.width), torch.nn.GELU()]
        model = torch.nn.Sequential(*layers).to(device)
        opt = torch.optim.Adam(model.parameters())
        # categories over time: forward, backward and optimizer spans and where each grad lands
        with tensorgc.categorize(model, opt):
            for _ in range(args.steps):
                x = torch.randn(args.batch, args.width, device=device)
                loss = model(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del x, loss
            torch.cuda.synchronize()
            # the marks, and the reporter's names for the blocks alive now, go in the snapshot
            snap = tensorgc.snapshot()
    finally:
        tensorgc.record_memory_history(enabled=None)
    if args.snapshot:
        tensorgc.dump_snapshot(args.snapshot, snap)
    index = torch.cuda.current_device()
    page = timeline_html(snap, device=index, detail=400,
                         title=f"{args.steps} training steps of {args.layers} x "
                               f"Linear({args.width}) + GELU with Adam")
    out = args.out
    if out is None:
        fd, out = tempfile.mkstemp(prefix="tensorgc-timeline-", suffix=".html")
        os.close(fd)
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"timeline: {out} ({len(page.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
