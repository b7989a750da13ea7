"""The timeline page in a real browser: Debian's chromium driven by playwright (pinned by
`make deps`; no browser download). Zoom with the wheel, pan by dragging, zoom to a brushed range,
reset, click an allocation and read the pinned panel, search stacks, jump to an OOM, and check
that hostile names from the file stay text. Skipped only where playwright or chromium is
missing."""
import os
import re

import pytest

from _util import chromium, png_colors
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
    trace.append({"action": "oom", "addr": 0, "size": 0, "stream": 0, "time_us": t,
                  "device_free": 123, "frames": []})
    return trace


def snap_of(trace):
    seg = {"device": 0, "address": 0x1000, "total_size": 1 << 30, "stream": 0, "blocks": []}
    return {"segments": [seg], "device_traces": [trace]}


@pytest.fixture(scope="module")
def browser():
    env_preload = os.environ.pop("LD_PRELOAD", None)  # chromium hangs under make asan's
    try:
        with sync_api.sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            try:
                yield b
            finally:
                b.close()
    finally:
        if env_preload is not None:
            os.environ["LD_PRELOAD"] = env_preload


def open_page(browser, tmp_path, html):
    path = tmp_path / "timeline.html"
    path.write_text(html)
    page = browser.new_page(viewport={"width": 1500, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("#tgc-svg[data-ready]")
    return page, errors


def shown(page):
    """(first, last) event in view, from the status line."""
    words = page.inner_text("#tgc-status").replace(",", "").split()
    return int(words[1]), int(words[3])


def plot_box(page):
    box = page.locator("#tgc-svg rect.bg").bounding_box()
    return box["x"], box["y"], box["width"], box["height"]


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
    assert a2 > a and b2 - a2 == pytest.approx(b - a, abs=2)  # panned right, same span
    page.click("#tgc-reset")
    assert shown(page) == (0, n)
    ticks = page.locator("#tgc-xaxis .tick").all_text_contents()
    assert len(ticks) >= 3 and all(t.startswith("event ") and "(+" in t for t in ticks)
    assert errors == []


def test_shift_drag_zooms_to_the_brushed_range(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    n = len(trace)
    x, y, w, h = plot_box(page)
    page.keyboard.down("Shift")
    page.mouse.move(x + w * 0.25, y + h / 2)
    page.mouse.down()
    page.mouse.move(x + w * 0.5, y + h / 2, steps=5)
    page.mouse.up()
    page.keyboard.up("Shift")
    a, b = shown(page)
    assert a == pytest.approx(n * 0.25, abs=n * 0.02) and b == pytest.approx(n * 0.5, abs=n * 0.02)
    assert float(page.get_attribute("#tgc-svg", "data-zoom-ms")) < 100
    assert errors == []


def test_click_pins_the_allocation_and_search_highlights(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=1000))
    page.locator('#tgc-plot [data-i]').first.dispatch_event("click")
    panel = page.inner_text("#tgc-panel")
    assert "size" in panel and "bytes" in panel and "address" in panel and "0x" in panel
    assert "/w/train.py:3" in panel and "c10::alloc_cpp_frame" in panel  # Python and C++ frames
    assert page.locator("#tgc-plot .pinned").count() == 1
    page.fill("#tgc-search", "leaky")
    hits = int(page.inner_text("#tgc-hits").split()[0])
    assert hits == 20  # one leaked block per step, each drawn on its own
    assert page.locator("#tgc-plot .hit").count() == hits
    page.fill("#tgc-search", "no such frame anywhere")
    assert page.inner_text("#tgc-hits") == "0 matches"
    page.fill("#tgc-search", "")
    assert page.locator("#tgc-plot .hit").count() == 0
    assert errors == []


def test_an_oom_marker_zooms_to_the_oom(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    page.locator(".oom").first.dispatch_event("click")
    a, b = shown(page)
    n = len(trace)
    assert b - a < n / 10 and b >= n - n / 20
    assert errors == []


def test_hostile_names_stay_text(browser, tmp_path):
    evil = "<img src=x onerror=window.__pwned=1></script><script>window.__pwned=2</script>"
    trace = [ev("alloc", 0x1000, MB, name=evil), ev("alloc", 0x200000, 2 * MB, name="ok")]
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=5))
    page.locator('#tgc-plot [data-i]').first.dispatch_event("click")
    page.fill("#tgc-search", "onerror")
    assert page.evaluate("window.__pwned === undefined")
    assert evil in page.inner_text("#tgc-panel")
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


def zoom_to(page, frac0, frac1):
    """Shift-drag over [frac0, frac1] of the plot's width."""
    x, y, w, h = plot_box(page)
    page.keyboard.down("Shift")
    page.mouse.move(x + w * frac0, y + h / 2)
    page.mouse.down()
    page.mouse.move(x + w * frac1, y + h / 2, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")


def test_zoomed_in_every_allocation_is_drawn_and_nothing_stays_summarized(browser, tmp_path):
    trace = training_trace()
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=5))
    assert page.get_attribute("#tgc-svg", "data-mode") == "overview"
    assert page.locator("#tgc-plot .s").count() == 1  # the summarized rest, zoomed out
    zoom_to(page, 0.40, 0.45)
    assert page.get_attribute("#tgc-svg", "data-mode") == "detail"
    a, b = map(float, page.get_attribute("#tgc-svg", "data-range").split())
    # the allocations alive somewhere in (a, b) on the replay's clock (here: trace positions)
    born, alive = {}, set()
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            born[e["addr"]] = i
        elif e["action"] == "free_completed":
            s = born.pop(e["addr"])
            if i > a and s < b:
                alive.add((e["addr"], s))
    alive |= {(addr, s) for addr, s in born.items() if s < b}
    drawn = page.locator("#tgc-detail [data-j]").count()
    assert drawn == len(alive) > 5  # more than the overview's 5 bands: each on its own
    page.locator("#tgc-detail [data-j]").first.dispatch_event("click")
    panel = page.inner_text("#tgc-panel")
    assert "trace entry" in panel and "/w/train.py:3" in panel
    page.fill("#tgc-search", "leaky")
    hits = int(page.inner_text("#tgc-hits").split()[0])
    assert 0 < hits < drawn
    page.click("#tgc-reset")
    assert page.get_attribute("#tgc-svg", "data-mode") == "overview"
    assert errors == []


def test_the_detail_view_stacks_in_allocation_order(browser, tmp_path):
    """alloc a (1M), alloc b (2M), free a: b drops from 1M to 0 at the free; c (1M) then goes
    on top of b."""
    trace = [ev("alloc", 0x1000, MB, name="a"), ev("alloc", 0x200000, 2 * MB, name="b"),
             ev("free_completed", 0x1000, 0), ev("alloc", 0x400000, MB, name="c")]
    trace += [ev("alloc", 0x800000 + k * 0x1000, 512, name="pad") for k in range(40)]
    page, errors = open_page(browser, tmp_path, timeline_html(snap_of(trace), detail=50))
    zoom_to(page, 0.0, 0.2)
    assert page.get_attribute("#tgc-svg", "data-mode") == "detail"
    floor = 10 + 420  # the plot's bottom: offset 0

    def ys(name):
        j = page.evaluate(
            "(n) => { var D = window.tgcDetail;"
            " for (var j = 0; j < D.K.length; j++) if (D.stacks[D.K[j]][0].endsWith(' ' + n))"
            " return j; return -1; }", name)
        # the path's y values: M's, V's and L's (H keeps y); the detail group is drawn in
        # tenths of a unit (scale(0.1))
        d = page.get_attribute(f'#tgc-detail [data-j="{j}"]', "d")
        ys = [float(m[1:].split()[-1]) for m in re.findall(r"[MVL][-\d. ]+", d)]
        return sorted({round(floor - y / 10, 1) for y in ys})

    b = ys("b")  # heights above the floor: a's top (1M) and b's (3M), then 0 and 2M
    assert b[0] == 0 and len(b) == 4
    unit = b[1]  # one MB on this zoom's scale
    assert [round(v / unit, 2) for v in b] == [0, 1, 2, 3]
    c = ys("c")
    assert [round(v / unit, 2) for v in c] == [2, 3]  # c sits on b
    assert errors == []


def test_the_categories_chart_follows_the_zoom(browser, tmp_path):
    from tensorgc.categories import KEY

    # three steps' phases as tensorgc.categorize records them: forward, backward, optimizer
    trace, spans, t = [], [], 100
    for s in range(3):
        spans.append(["forward", t, t + 100])
        for k in range(6):
            trace.append(ev("alloc", 0x100000 * (10 * s + k + 1), MB, t=t + 10 + k))
        spans.append(["backward", t + 200, t + 300])
        for k in range(6):
            trace.append(ev("free_completed", 0x100000 * (10 * s + k + 1), MB, t=t + 210 + k))
        t += 1000
    snap = snap_of(trace)
    snap[KEY] = {"version": 1, "spans": spans, "grads": [], "named": {}}
    page, errors = open_page(browser, tmp_path, timeline_html(snap, detail=100))
    assert page.locator("#tgc-areas polygon").count() > 0
    zoom_to(page, 0.2, 0.6)
    tf = page.get_attribute("#tgc-plot", "transform")
    assert "scale(" in tf and page.get_attribute("#tgc-areas", "transform") == tf
    assert errors == []


def test_hovering_shows_the_allocator_state_at_that_event(browser, tmp_path):
    """Three segments: one made at the start of the trace, one there before it (alive at the
    end, never made in the trace), one made halfway. At the hovered event the strip draws the
    segments alive then, to scale, and the blocks alive in them."""
    def seg(addr, size):
        return {"action": "segment_alloc", "addr": addr, "size": size, "stream": 0,
                "time_us": 0, "frames": []}

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
    x, y, w, h = plot_box(page)
    page.mouse.move(x + w * 0.999, y + h / 2)  # the last event: 3 + 4 + 1 + 1 blocks alive
    page.wait_for_function("document.getElementById('tgc-state').getAttribute('data-event')")
    text = page.inner_text("#tgc-state-text")
    assert "3 segments, 14M reserved, 9 blocks allocated (8.5M)" in text
    widths = [float(page.locator("#tgc-state rect.seg").nth(k).get_attribute("width"))
              for k in range(3)]
    assert widths[0] == pytest.approx(2 * widths[1], rel=0.01) == pytest.approx(4 * widths[2],
                                                                                rel=0.01)
    page.mouse.move(x + w * 0.25, y + h / 2)  # among the first allocations: two segments
    page.wait_for_timeout(150)
    assert "2 segments, 12M reserved" in page.inner_text("#tgc-state-text")
    page.locator("#tgc-state rect[data-j]").first.dispatch_event("click")
    assert "/w/train.py:3 b" in page.inner_text("#tgc-panel")
    assert errors == []


def test_the_panel_names_a_block_the_reporter_named(browser, tmp_path):
    trace = training_trace(steps=4)
    leaks = [e["addr"] for e in trace if e["action"] == "alloc" and e["frames"][0]["name"] == "leaky"]
    names = {leaks[0]: "model.cache[0] <i>", leaks[-1]: "opt.state['w']"}
    html = timeline_html(snap_of(trace), detail=50, names=names)
    assert "<i>" not in html
    page, errors = open_page(browser, tmp_path, html)
    # the overview's band of the first leak
    i = page.evaluate("(a) => JSON.parse(document.getElementById('tgc-data').textContent)"
                      ".allocs.findIndex(function (d) { return d.addr === a; })", f"0x{leaks[0]:x}")
    page.locator(f'#tgc-plot [data-i="{i}"]').dispatch_event("click")
    assert "name\nmodel.cache[0] <i>" in page.inner_text("#tgc-panel")
    # the detail view's polygon of the last leak: named too; a freed allocation is not
    zoom_to(page, 0.9, 1.0)
    assert page.get_attribute("#tgc-svg", "data-mode") == "detail"
    j = page.evaluate("(a) => { var D = window.tgcDetail; for (var j = 0; j < D.X.length; j++)"
                      " if (D.X[j] === a) return j; return -1; }", leaks[-1])
    page.locator(f'#tgc-detail [data-j="{j}"]').dispatch_event("click")
    assert "name\nopt.state['w']" in page.inner_text("#tgc-panel")
    freed = page.evaluate("() => { var D = window.tgcDetail, els = document.querySelectorAll("
                          "'#tgc-detail [data-j]'); for (var k = 0; k < els.length; k++) {"
                          " var j = +els[k].getAttribute('data-j'); if (D.F[j] >= 0) return j; }"
                          " return -1; }")
    assert freed >= 0
    page.locator(f'#tgc-detail [data-j="{freed}"]').dispatch_event("click")
    text = page.inner_text("#tgc-panel")
    assert "freed\nevent" in text and "name\n" not in text
    assert errors == []
