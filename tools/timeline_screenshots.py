#!/usr/bin/env python
"""The documentation's screenshots of the timeline page, one per view, in headless Chromium
(playwright driving Debian's chromium, as the tests do).

The snapshot: tests/data/transformer-adamw-big-all.pickle, torch's own recording of three
training steps of a TransformerEncoder with AdamW and an OOM (tools/record_training_snapshot.py,
an H200), its categories inferred from its stacks; the Compare view sets it beside the small
recording of the same run.

    python3 tools/timeline_screenshots.py docs/img

writes timeline-memory.png (the Active Memory Timeline, a band hovered), timeline-pinned.png
(the second step zoomed in, an activation pinned), timeline-state.png (the Allocator State
History in the second backward, a block hovered), timeline-segments.png (the Active Cached
Segment Timeline) and timeline-compare.png (the Compare view).
"""
from __future__ import annotations

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from _util import chromium  # noqa: E402
from tensorgc import load_snapshot  # noqa: E402
from tensorgc.categories import CATEGORIES  # noqa: E402
from tensorgc.timeline import timeline_html  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data")


def main(out_dir: str) -> None:
    from playwright.sync_api import sync_playwright

    os.makedirs(out_dir, exist_ok=True)
    big = load_snapshot(os.path.join(DATA, "transformer-adamw-big-all.pickle"))
    small = load_snapshot(os.path.join(DATA, "transformer-adamw-small-all.pickle"))
    work = tempfile.mkdtemp(prefix="tensorgc-shots-")
    page_path = os.path.join(work, "timeline.html")
    with open(page_path, "w", encoding="utf-8") as f:
        f.write(timeline_html(big, title="Three training steps of a TransformerEncoder with "
                                         "AdamW, recorded by torch on an H200", baseline=small))
    n = len(big["device_traces"][0])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 980})
        page.goto("file://" + page_path)
        page.wait_for_selector("#tgc-plot[data-full]")

        def shot(name: str) -> None:
            page.wait_for_timeout(300)
            page.screenshot(path=os.path.join(out_dir, name))
            print("wrote", os.path.join(out_dir, name))

        def band(kind: str) -> int:
            """A drawn allocation of category `kind`, tall enough to point at."""
            return page.evaluate(
                "(c) => tgc.drawn().filter(function (j) { return tgcModel.cat[j] === c &&"
                " tgc.pointOf(j); }).sort(function (a, b) { return tgcModel.S[b] -"
                " tgcModel.S[a]; })[0]",
                CATEGORIES.index(kind))

        # the whole run, an activation hovered
        pt = page.evaluate("(j) => tgc.pointOf(j)", band("activation"))
        page.mouse.move(pt["x"], pt["y"])
        shot("timeline-memory.png")
        # the second step, zoomed in, an activation pinned
        page.mouse.move(10, 10)
        page.evaluate(f"tgc.range({n * 0.36}, {n * 0.56})")
        j = band("activation")
        pt = page.evaluate("(j) => tgc.pointOf(j)", j)
        page.mouse.click(pt["x"], pt["y"])
        page.check("#tgc-f-native")  # the panel's stack without its C++ frames
        page.mouse.move(10, 10)
        shot("timeline-pinned.png")
        page.uncheck("#tgc-f-native")
        # the Allocator State History in that step's backward, a block hovered
        page.click("#tgc-tab-state")
        page.wait_for_timeout(200)
        blocks = page.evaluate("tgc.blocks()")
        big_block = max(blocks, key=lambda b: page.evaluate(f"tgcModel.S[{b}]"))
        bp = page.evaluate(f"tgc.blockPoint({big_block})")
        page.mouse.move(bp["x"], bp["y"])
        shot("timeline-state.png")
        # the Active Cached Segment Timeline of the whole run
        page.click("#tgc-tab-segs")
        page.click("#tgc-reset")
        shot("timeline-segments.png")
        # what is alive at the end of the big run and not of the small one
        page.click("#tgc-tab-cmp")
        shot("timeline-compare.png")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "img"))
