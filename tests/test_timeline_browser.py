"""The timeline page in a real browser: Debian's chromium driven by playwright (pinned by
`make deps`; no browser download). Zoom with the wheel, pan by dragging, zoom to a brushed range,
reset, click an allocation and read the pinned panel, search, jump to an OOM, and check that
hostile names from the file stay text. The page draws on a canvas: what is drawn where is read
through its window.tgc (the layout the canvas was painted from) and checked against the trace;
clicks and hovers are real mouse events at those points. Skipped only where playwright or
chromium is missing."""
import os

import pytest

from _util import chromium, launch_chromium, open_timeline, png_colors
from tensorgc.timeline import timeline_html

sync_api = pytest.importorskip("playwright.sync_api")
if chromium() is None:
    pytest.skip("needs Debian's chromium (make deps installs it)", allow_module_level=True)

MB = 1 << 20


def ev(action, addr, size, name="f", t=0):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": [{"filename": "/w/train.py", "line": 3, "name": name},
                       {"filename": "??", "line": 0, "name": "c10::alloc_cpp_frame"}]}


def training_trace(steps=20, acts=12):
    """Steps of a small training loop: activations allocated in forward, freed in backward; a
    leak of one block per step (`leaky`); an OOM near the end."""
    trace, t, addr = [], 1_000_000, 0x10000000
    for s in range(steps):
        live = []
        for k in range(acts):
            addr += 0x100000
            trace.append(ev("alloc", addr, (k + 1) * MB // 4, name=f"forward_{k}", t=t))
            live.append(addr)
            t += 100
        addr += 0x100000
        trace.append(ev("alloc", addr, 2 * MB, name="leaky", t=t))
        for a in reversed(live):
            trace.append(ev("free_completed", a, 0, name="backward", t=t))
            t += 50
    trace.append({"action": "oom", "addr": 0, "size": 3 * MB, "stream": 0, "time_us": t,
                  "device_free": 123, "frames": [{"filename": "/w/train.py", "line": 9,
                                                   "name": "step_that_ran_out"}]})
    return trace


def snap_of(trace):
    seg = {"device": 0, "address": 0x1000, "total_size": 1 << 30, "stream": 0, "blocks": []}
    return {"segments": [seg], "device_traces": [trace]}


def alive_between(trace, a, b, free="free_completed"):
    """{(address, alloc position)} of the allocations alive at some entry in [a, b]."""
    born, alive = {}, set()
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            born[e["addr"]] = i
        elif e["action"] == free and e["addr"] in born:
            s = born.pop(e["addr"])
            if i > a and s <= b:
                alive.add((e["addr"], s))
    return alive | {(addr, s) for addr, s in born.items() if s <= b}


@pytest.fixture(scope="module")
def browser():
    yield from launch_chromium()


def open_page(browser, tmp_path, html, name="timeline.html"):
    return open_timeline(browser, tmp_path, html, name, height=1000)


def state(page):
    return page.evaluate("tgc.state()")


def shown(page):
    """(first, last) event in view."""
    s = state(page)
    return s["e0"], s["e1"]


def plot_box(page):
    box = page.evaluate("tgc.plotBox()")
    return box["x"], box["y"], box["width"], box["height"]


def zoom_to(page, frac0, frac1):
    """Shift-drag over [frac0, frac1] of the plot's width."""
    x, y, w, h = plot_box(page)
    page.keyboard.down("Shift")
    page.mouse.move(x + w * frac0, y + h * 0.9)
    page.mouse.down()
    page.mouse.move(x + w * frac1, y + h * 0.9, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")


def point_of(page, j):
    p = page.evaluate("(j) => tgc.pointOf(j)", j)
    assert p is not None, f"allocation {j} is not drawn"
    return p["x"], p["y"]


def find(page, predicate_js):
    """The first allocation index j for which predicate_js (a function of (M, j)) is true."""
    return page.evaluate("(src) => { var M = tgc.model(), f = eval(src);"
                         " for (var j = 0; j < M.N; j++) if (f(M, j)) return j; return -1; }",
                         predicate_js)


def test_wheel_zooms_drag_pans_and_reset_restores(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    n = len(trace)
    assert shown(page) == (0, n)
    x, y, w, h = plot_box(page)
    page.mouse.move(x + w / 2, y + h / 2)
    for _ in range(6):
        page.mouse.wheel(0, -200)
    a, b = shown(page)
    assert 0 < a < n / 2 < b < n and b - a < n / 2
    page.mouse.move(x + w / 2, y + h / 2)
    page.mouse.down()
    page.mouse.move(x + w / 4, y + h / 2, steps=5)
    page.mouse.up()
    a2, b2 = shown(page)
    assert a2 > a and b2 - a2 == pytest.approx(b - a, abs=1e-6)  # panned right, same span
    page.click("#tgc-reset")
    assert shown(page) == (0, n)
    ticks = page.locator("#tgc-xaxis text").all_text_contents()
    assert len(ticks) >= 3 and all(t.startswith("event ") and "(+" in t for t in ticks)
    assert errors == []


def test_time_labels_differ_and_the_last_one_fits(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    for a, b in ((0, len(trace)), (100, 140), (200, 207), (300, 302)):
        page.evaluate(f"tgc.range({a}, {b})")
        ticks = page.locator("#tgc-xaxis text").all_text_contents()
        secs = [t.split("(")[1] for t in ticks if "(" in t]
        assert len(secs) == len(set(secs)), ticks  # no "+6.613 s" twice
        events = [int(t.split()[1].replace(",", "")) for t in ticks]
        assert events == sorted(set(events)) and a <= events[0] and events[-1] <= b
        svg = page.locator("#tgc-axes").bounding_box()
        last = page.locator("#tgc-xaxis text").last.bounding_box()
        assert last["x"] + last["width"] <= svg["x"] + svg["width"] + 0.5  # not cut off
    assert errors == []


def test_shift_drag_zooms_to_the_brushed_range_and_pins_nothing(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    n = len(trace)
    zoom_to(page, 0.25, 0.5)
    a, b = shown(page)
    assert a == pytest.approx(n * 0.25, abs=n * 0.02) and b == pytest.approx(n * 0.5, abs=n * 0.02)
    # the page times each zoom for B4 (bench/b4_timeline.py); how long it took is B4's figure
    assert float(page.get_attribute("#tgc-plot", "data-zoom-ms")) >= 0
    # the drag started on an allocation: a brush is no click
    assert state(page)["sel"] == -1 and page.get_attribute("#tgc-panel", "data-j") is None
    assert errors == []


def test_a_click_right_after_a_zoom_pins_the_allocation_under_the_cursor(browser, tmp_path):
    """Zoomed in to a few pixels an event, an allocation starts at its own entry: a click just
    right of its alloc entry's edge pins it, just left of it does not (the overview drew each
    allocation one event late, so a click there landed in a gap or on another)."""
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    at = next(i for i, e in enumerate(trace) if e["action"] == "alloc"
              and e["frames"][0]["name"] == "leaky" and i > 300)
    x, y, w, h = plot_box(page)
    page.mouse.move(page.evaluate(f"tgc.xOfEvent({at})"), y + h / 2)
    for _ in range(14):  # zoom in around it with the wheel, then click at once
        page.mouse.wheel(0, -200)
    a, b = shown(page)
    assert a < at < b and b - a < 60
    j = find(page, f"(function (M, j) {{ return M.A[j] === {at}; }})")
    px = page.evaluate(f"tgc.xOfEvent({at})")
    width = page.evaluate(f"tgc.xOfEvent({at + 1})") - px
    _, cy = point_of(page, j)
    page.mouse.click(px + 0.2 * width, cy)
    assert state(page)["sel"] == j
    assert "leaky" in page.inner_text("#tgc-panel")
    page.mouse.click(px - 0.2 * width, cy)  # the entry before: j is not there yet
    assert state(page)["sel"] != j and "leaky" not in page.inner_text("#tgc-panel")
    assert errors == []


def test_click_pins_the_allocation_and_search_outlines_matches(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=1000))
    j = find(page, "(function (M, j) { return tgc.stack(M.K[j])[0].endsWith(' leaky'); })")
    page.mouse.click(*point_of(page, j))
    panel = page.inner_text("#tgc-panel")
    assert "size" in panel and "bytes" in panel and "address" in panel and "0x" in panel
    assert page.evaluate(f"tgc.version({j})") in panel  # b<hex>_<n>, as memory_viz names it
    assert "/w/train.py:3 leaky" in panel and "c10::alloc_cpp_frame" in panel
    page.fill("#tgc-search", "leaky")
    page.wait_for_function("document.getElementById('tgc-hits').getAttribute('data-count')")
    assert int(page.get_attribute("#tgc-hits", "data-count")) == 20  # one leak per step
    # outlined, never painted over: the match keeps its colour, the rest is veiled
    cx, cy = point_of(page, j)
    assert page.evaluate(f"tgc.overlayPixel({cx}, {cy})")[3] == 0
    assert page.evaluate(f"tgc.pixel({cx}, {cy})") != [0, 0, 0]
    other = find(page, "(function (M, j) { return tgc.stack(M.K[j])[0].endsWith(' forward_11'); })")
    ox, oy = point_of(page, other)
    assert page.evaluate(f"tgc.overlayPixel({ox}, {oy})")[3] > 0
    # the count follows the range in view
    n = len(trace)
    page.evaluate(f"tgc.range({n * 0.4}, {n * 0.6})")
    a, b = shown(page)
    leaks = [(addr, s) for addr, s in alive_between(trace, a, b - 1)
             if trace[s]["frames"][0]["name"] == "leaky"]
    assert int(page.get_attribute("#tgc-hits", "data-count")) == len(leaks) < 20
    page.fill("#tgc-search", "no such frame anywhere")
    page.wait_for_function("document.getElementById('tgc-hits').textContent.startsWith('0 ')")
    page.fill("#tgc-search", "")
    page.wait_for_function("document.getElementById('tgc-hits').textContent === ''")
    assert errors == []


def test_an_oom_button_zooms_to_it_and_its_line_stays_zoomed(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    page.locator(".oom").first.click()
    a, b = shown(page)
    n = len(trace)
    assert b - a < n / 10 and a < n - 1 <= b
    assert page.get_attribute("#tgc-plot", "data-mode") == "detail"
    x, y, w, h = plot_box(page)
    ox = page.evaluate(f"tgc.xOfEvent({n - 1} + 0.5)")
    assert page.evaluate(f"tgc.overlayPixel({ox}, {y + h / 2})")[:3] == [221, 0, 0]  # red
    page.mouse.move(ox, y + h / 2)
    page.wait_for_function("document.getElementById('tgc-plot').getAttribute('data-hover') === 'oom'")
    tip = page.inner_text("#tgc-tip")
    assert f"OOM at event {n - 1:,}" in tip and "requested 3.00 MiB" in tip
    assert "123 B (123 bytes) free" in tip and "step_that_ran_out" in tip
    assert errors == []


def test_hostile_names_stay_text(browser, tmp_path):
    evil = "<img src=x onerror=window.__pwned=1></script><script>window.__pwned=2</script>"
    trace = [ev("alloc", 0x1000, MB, name=evil), ev("alloc", 0x200000, 2 * MB, name="ok")]
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=5))
    page.mouse.click(*point_of(page, 0))
    page.fill("#tgc-search", "onerror")
    page.mouse.move(*point_of(page, 0))
    page.wait_for_function("document.getElementById('tgc-plot').getAttribute('data-hover')")
    assert page.evaluate("window.__pwned === undefined")
    assert evil in page.inner_text("#tgc-panel") and evil in page.inner_text("#tgc-tip")
    assert errors == []


def test_a_zoomed_screenshot_is_not_blank(browser, tmp_path):
    page, _ = open_page(browser, tmp_path, timeline_html(snap_of(training_trace()), detail=50))
    x, y, w, h = plot_box(page)
    page.mouse.move(x + w / 3, y + h / 2)
    for _ in range(4):
        page.mouse.wheel(0, -200)
    shot = tmp_path / "zoomed.png"
    page.screenshot(path=str(shot))
    assert len(png_colors(shot)) > 20


def test_zoomed_in_every_allocation_is_drawn_and_nothing_stays_summarized(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=5))
    assert page.get_attribute("#tgc-plot", "data-mode") == "overview"
    assert state(page)["drawn"] == 5  # the 5 largest, the rest as areas
    zoom_to(page, 0.40, 0.45)
    assert page.get_attribute("#tgc-plot", "data-mode") == "detail"
    a, b = shown(page)
    alive = alive_between(trace, int(a), int(-(-b // 1)) - 1)
    st = state(page)
    assert st["drawn"] == st["inView"] == len(alive) > 5  # each on its own
    drawn = page.evaluate("tgc.drawn().map(function (j) { return tgcModel.A[j]; })")
    assert sorted(drawn) == sorted(s for _, s in alive)
    page.mouse.click(*point_of(page, page.evaluate("tgc.drawn()[0]")))
    panel = page.inner_text("#tgc-panel")
    assert "allocated" in panel and "/w/train.py:3" in panel
    page.click("#tgc-reset")
    assert page.get_attribute("#tgc-plot", "data-mode") == "overview"
    assert errors == []


def test_the_detail_view_stacks_in_allocation_order(browser, tmp_path):
    """alloc a (1M), alloc b (2M), free a: b drops from 1M to 0 at the free; c (1M) then goes
    on top of b."""
    trace = [ev("alloc", 0x1000, MB, name="a"), ev("alloc", 0x200000, 2 * MB, name="b"),
             ev("free_completed", 0x1000, 0), ev("alloc", 0x400000, MB, name="c")]
    trace += [ev("alloc", 0x800000 + k * 0x1000, 512, name="pad") for k in range(40)]
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    page.evaluate("tgc.range(0, 8)")
    assert page.get_attribute("#tgc-plot", "data-mode") == "detail"

    def offsets(j):  # the offsets (bytes under it) where they change, and their columns
        o = page.evaluate(f"tgc.offsets({j})")
        return o["verts"][1::2], o["verts"][0::2]

    b_off, b_cols = offsets(1)
    assert b_off == [MB, 0]  # on a, then on the floor once a is freed
    x2 = page.evaluate("tgc.xOfEvent(2)") - page.evaluate("tgc.plotBox().x")
    assert b_cols[1] / page.evaluate("tgc.offsets(1).dpr") == pytest.approx(x2, abs=1.01)
    assert offsets(2)[0] == [2 * MB]  # c sits on b
    assert errors == []


def test_hovering_shows_the_allocator_state_at_that_event(browser, tmp_path):
    """Three segments: one made at the start of the trace, one there before it (alive at the
    end, never made in the trace), one made halfway. The Allocator State History after the last
    event draws the segments alive then and the blocks alive in them."""
    def seg(addr, size):
        return {"action": "segment_alloc", "addr": addr, "size": size, "stream": 0,
                "time_us": 0, "frames": [{"filename": "/w/train.py", "line": 1, "name": "grow"}]}

    trace = [seg(0x40000000, 8 * MB)]
    trace += [ev("alloc", 0x40000000 + k * MB, MB, name=f"b{k}") for k in range(6)]
    trace += [ev("free_completed", 0x40000000 + k * MB, 0) for k in range(3)]
    trace += [ev("alloc", 0x80000000 + k * MB, MB, name=f"c{k}") for k in range(4)]
    trace += [seg(0xC0000000, 2 * MB), ev("alloc", 0xC0000000, MB, name="d")]
    trace += [ev("alloc", 0x40000000 + 7 * MB, MB // 2, name=f"e{k}") for k in range(1)]
    snap = snap_of(trace)
    snap["segments"] = [{"device": 0, "address": a, "total_size": n, "stream": 0, "blocks": []}
                        for a, n in ((0x40000000, 8 * MB), (0x80000000, 4 * MB),
                                     (0xC0000000, 2 * MB))]
    page, errors = open_page(browser, tmp_path, timeline_html(snap, detail=50))
    page.click("#tgc-tab-state")
    page.wait_for_selector("#tgc-segc[data-event]")
    last = len(trace) - 1
    assert page.get_attribute("#tgc-segc", "data-event") == str(last)
    assert page.get_attribute("#tgc-segc", "data-segments") == "3"
    assert page.get_attribute("#tgc-segc", "data-blocks") == "9"  # 3 + 4 + 1 + 1
    assert int(page.get_attribute("#tgc-segc", "data-allocated")) == 8 * MB + MB // 2
    assert int(page.get_attribute("#tgc-segc", "data-reserved")) == 14 * MB
    # an event among the first allocations: two segments (the one made later is not there)
    page.locator(f'#tgc-events [data-event="{4}"]').click()
    assert page.get_attribute("#tgc-segc", "data-segments") == "2"
    assert page.get_attribute("#tgc-segc", "data-blocks") == "4"
    page.keyboard.press("ArrowDown")
    assert page.get_attribute("#tgc-segc", "data-event") == "5"
    assert page.get_attribute("#tgc-segc", "data-blocks") == "5"
    assert "sel" in page.get_attribute('#tgc-events [data-event="5"]', "class")
    j = page.evaluate("tgc.blocks()[0]")
    page.mouse.move(*page.evaluate(f"(j) => {{ var p = tgc.blockPoint(j); return [p.x, p.y]; }}", j))
    page.wait_for_function("document.getElementById('tgc-segc').getAttribute('data-hover')")
    assert "/w/train.py:3 b0" in page.inner_text("#tgc-info")
    assert errors == []


def test_the_panel_names_a_block_the_reporter_named(browser, tmp_path):
    trace = training_trace(steps=4)
    leaks = [e["addr"] for e in trace if e["action"] == "alloc" and e["frames"][0]["name"] == "leaky"]
    names = {leaks[0]: "model.cache[0] <i>", leaks[-1]: "opt.state['w']"}
    html = timeline_html(snap_of(trace), detail=50, names=names)
    assert "<i>" not in html
    page, errors = open_page(browser, tmp_path, html)
    for addr, name in ((leaks[0], "model.cache[0] <i>"), (leaks[-1], "opt.state['w']")):
        j = find(page, f"(function (M, j) {{ return M.X[j] === {addr}; }})")
        page.mouse.click(*point_of(page, j))
        assert f"name\n{name}" in page.inner_text("#tgc-panel")
    # a freed allocation is not named: its address may be another tensor's now
    page.evaluate("tgc.range(0, 40)")
    freed = page.evaluate("tgc.drawn().filter(function (j) { return tgcModel.F[j] < 1e15; })[0]")
    page.mouse.click(*point_of(page, freed))
    text = page.inner_text("#tgc-panel")
    assert "freed\nevent" in text and "name\n" not in text
    assert errors == []


def canvas_rgb(page):
    """The plot canvas's pixels: (width, height, bytes RGBA row by row)."""
    import base64

    got = page.evaluate("""() => {
        var c = document.getElementById('tgc-canvas'), d = c.getContext('2d')
            .getImageData(0, 0, c.width, c.height).data, s = '';
        for (var i = 0; i < d.length; i += 32768)
            s += String.fromCharCode.apply(null, d.subarray(i, i + 32768));
        return [c.width, c.height, btoa(s)];
    }""")
    return got[0], got[1], base64.b64decode(got[2])


def test_every_column_stacks_the_allocations_alive_there(browser, tmp_path):
    """Each pixel column, checked against a stacking computed here: the allocations shown
    there (from their first column to the one they leave at) in the order they came in, each
    on those below it, in its category's colour or hatched where it has none; white above.
    Frees in the middle of the stack move those above them down, including hatched ones."""
    import random

    rnd = random.Random(5)
    trace, live, addr = [], [], 0x10000000
    for i in range(160):
        if live and rnd.random() < 0.45:
            a = live.pop(rnd.randrange(len(live)))
            trace.append(ev("free_completed", a, 0, t=i))
        else:
            addr += 0x1000000
            live.append(addr)
            trace.append(dict(ev("alloc", addr, rnd.randint(1, 24) * MB // 4, t=i), frames=[]))
    kinds = ("parameter", "grad", "activation", "buffer")
    cats = {a: kinds[k % 4] for k, a in enumerate(live)}  # alive at the end; the freed: none
    page, errors = open_page(browser, tmp_path,
                             timeline_html(snap_of(trace), detail=1000, categories=cats))
    legend = {}
    for el in page.locator("#tgc-legend g.lg").all():
        fill = el.locator("rect").get_attribute("fill")
        if fill.startswith("#"):
            legend[int(el.get_attribute("data-cat"))] = tuple(bytes.fromhex(fill[1:]))
    light, dark = (0xE3, 0xE6, 0xEA), (0x8D, 0x98, 0xA5)
    for a, b in ((0, len(trace)), (37, 121), (60.3, 71.8)):
        page.evaluate(f"tgc.range({a}, {b})")
        st = state(page)
        assert page.get_attribute("#tgc-plot", "data-mode") == "detail"
        drawn = page.evaluate("tgc.drawn()")
        items = []
        for j in drawn:
            o = page.evaluate(f"tgc.offsets({j})")
            cat = page.evaluate(f"tgcModel.cat[{j}]")
            items.append((o["p0"], j, o["p1"], page.evaluate(f"tgcModel.S[{j}]"), cat))
        items.sort()  # the order they came in: by first column, then by allocation
        w, h, px = canvas_rgb(page)
        ys = h / st["ymax"]

        def row(y):
            return -int(-(h - y * ys - 0.5) // 1)  # ceil

        checked = hatched = 0
        for p in range(w):
            y = 0
            for p0, j, p1, size, cat in items:
                if not p0 <= p < p1:
                    continue
                r0, r1 = max(0, row(y + size)), row(y)
                y += size
                if r1 - r0 < 2:
                    continue
                r = (r0 + r1) // 2
                got = tuple(px[(r * w + p) * 4:(r * w + p) * 4 + 3])
                if cat == 15:
                    want = dark if (p + r) % 6 < 2 else light
                    hatched += 1
                else:
                    want = legend[cat]
                assert got == want, (p, r, j, cat)
                checked += 1
            top = row(y)
            if top >= 2:
                r = top - 2
                assert tuple(px[(r * w + p) * 4:(r * w + p) * 4 + 3]) == (255, 255, 255), (p, r)
        assert checked > w and hatched > w / 4
    assert errors == []
