"""The timeline page's three views in a real browser (Debian's chromium through playwright, one
browser for the module): the Active Memory Timeline, the Allocator State History and the Active
Cached Segment Timeline on one time axis with one selection; colours that match the legend in
every view; stacks on hover with their filters; memory_viz's version strings; the detail slider;
the Compare view; on training-like traces (tests/_traces.py) and on torch's own recordings in
tests/data. What the page shows is read from the DOM, from its canvases' pixels and from
window.tgc (the layout the canvas was painted from); input is real mouse and keyboard events."""
import json
import os
import pickle

import pytest

from _traces import make_trace
from _util import chromium, launch_chromium, open_timeline, run_tensorgc_cli
from tensorgc import load_snapshot
from tensorgc.categories import CATEGORIES
from tensorgc.timeline import CATEGORY_COLORS, timeline_html

sync_api = pytest.importorskip("playwright.sync_api")
if chromium() is None:
    pytest.skip("needs Debian's chromium (make deps installs it)", allow_module_level=True)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
RECORDED = ["h100_small_snapshot.pickle", "transformer-adamw-small-all.pickle",
            "transformer-adamw-small-python.pickle", "transformer-adamw-big-all.pickle",
            "transformer-adamw-big-python.pickle"]
MB = 1 << 20


@pytest.fixture(scope="module")
def browser():
    yield from launch_chromium()


@pytest.fixture(scope="module")
def training():
    """A few steps of a training-like run: its snapshot with torch's recorded stacks (Python and
    C++), its categories inferred from them; and its page."""
    g = make_trace(layers=2, steps=2, d_model=64, stacks="all", seed=1)
    return g, timeline_html(g.snapshot, detail=40)


def open_page(browser, tmp_path, html, name="timeline.html"):
    return open_timeline(browser, tmp_path, html, name, height=1100)


def state(page):
    return page.evaluate("tgc.state()")


def point_of(page, j):
    p = page.evaluate("(j) => tgc.pointOf(j)", j)
    assert p is not None, f"allocation {j} is not drawn"
    return p["x"], p["y"]


def legend_colors(page):
    """{category index: (r, g, b)} of the legend's swatches."""
    out = {}
    for el in page.locator("#tgc-legend g.lg").all():
        cat = int(el.get_attribute("data-cat"))
        fill = el.locator("rect").get_attribute("fill")
        if fill.startswith("#"):
            out[cat] = tuple(bytes.fromhex(fill[1:]))
    return out


def wait_hover(page, what):
    page.wait_for_function("(w) => (document.getElementById('tgc-plot').getAttribute('data-hover')"
                           " || '').startsWith(w)", arg=what)


def test_view_switches_keep_the_range_and_the_selection(browser, tmp_path, training):
    g, html = training
    page, errors = open_page(browser, tmp_path, html)
    n = len(g.snapshot["device_traces"][0])
    page.evaluate(f"tgc.range({n * 0.3}, {n * 0.4})")
    j = page.evaluate("tgc.drawn().filter(function (j) { return tgc.pointOf(j); })"
                      ".sort(function (a, b) { return tgcModel.S[b] - tgcModel.S[a]; })[0]")
    page.mouse.click(*point_of(page, j))
    assert state(page)["sel"] == j
    before = (state(page)["e0"], state(page)["e1"])
    page.click("#tgc-tab-state")
    st = state(page)
    assert (st["e0"], st["e1"]) == before and st["sel"] == j and st["view"] == "state"
    # the selected event is in range, and the pinned allocation's block is drawn there (it is
    # alive after the event the click was at)
    assert before[0] <= st["cur"] <= before[1]
    assert j in page.evaluate("tgc.blocks()")
    page.locator("#tgc-events").evaluate("e => { e.scrollTop = 0; e.dispatchEvent(new Event('scroll')); }")
    first = page.locator("#tgc-events .row").first.get_attribute("data-event")
    assert int(first) == int(before[0])  # the list is the range's events
    page.click("#tgc-tab-segs")
    st = state(page)
    assert (st["e0"], st["e1"]) == before and page.get_attribute("#tgc-plot", "data-mode") == "detail"
    page.click("#tgc-tab-mem")
    st = state(page)
    assert (st["e0"], st["e1"]) == before and st["sel"] == j
    assert page.get_attribute("#tgc-panel", "data-j") == str(j)
    assert errors == []


def test_colours_match_the_legend_in_every_view(browser, tmp_path, training):
    g, html = training
    page, errors = open_page(browser, tmp_path, html)
    legend = legend_colors(page)
    names = page.evaluate("JSON.parse(document.getElementById('tgc-data').textContent).cats.names")
    assert names == [c.replace("_", " ") for c in CATEGORIES]
    assert {CATEGORIES[c] for c in legend} >= {"parameter", "optimizer_state", "activation"}
    for c, rgb in legend.items():
        assert rgb == tuple(bytes.fromhex(CATEGORY_COLORS[CATEGORIES[c]][1:]))
    # every drawn allocation is painted in its category's colour
    checked = 0
    for j in page.evaluate("tgc.drawn()"):
        cat = page.evaluate(f"tgcModel.cat[{j}]")
        p = page.evaluate("(j) => tgc.pointOf(j)", j)
        if p is None or cat not in legend:
            continue
        assert tuple(page.evaluate(f"tgc.pixel({p['x']}, {p['y']})")) == legend[cat], j
        checked += 1
    assert checked >= 20
    # the areas of the allocations not drawn one by one: their category's colour too
    page.locator("#tgc-detail-n").evaluate("(e) => { e.value = 3; e.dispatchEvent(new Event('input')); }")
    box = page.evaluate("tgc.plotBox()")
    areas = 0
    for fx in (0.2, 0.35, 0.5, 0.65, 0.8):
        for fy in (0.95, 0.85, 0.75, 0.65, 0.55, 0.45, 0.35, 0.25):
            x, y = box["x"] + box["width"] * fx, box["y"] + box["height"] * fy
            h = page.evaluate(f"tgc.hit({x}, {y})")
            if h and "area" in h and h["area"] in legend:
                assert tuple(page.evaluate(f"tgc.pixel({x}, {y})")) == legend[h["area"]]
                areas += 1
    assert areas >= 3
    # the Allocator State History's blocks
    page.click("#tgc-tab-state")
    blocks = page.evaluate("tgc.blocks()")
    seen = 0
    for j in blocks[:40]:
        cat = page.evaluate(f"tgcModel.cat[{j}]")
        pend = page.evaluate(f"tgcModel.F[{j}] <= tgc.state().cur")
        p = page.evaluate(f"tgc.blockPoint({j})")
        if cat in legend and not pend and page.evaluate(f"tgcModel.S[{j}]") > 64 << 10:
            assert tuple(page.evaluate(f"tgc.statePixel({p['x']}, {p['y']})")) == legend[cat]
            seen += 1
    assert seen >= 3
    assert errors == []


def test_hover_shows_the_stack_and_the_filters_trim_it(browser, tmp_path, training):
    g, html = training
    page, errors = open_page(browser, tmp_path, html)
    # an activation: made in a forward, through torch's C++ allocator
    j = page.evaluate("tgc.drawn().filter(function (j) { return tgcModel.cat[j] === %d; })[0]"
                      % CATEGORIES.index("activation"))
    page.mouse.move(*point_of(page, j))
    wait_hover(page, f"j{j}")
    tip = page.inner_text("#tgc-tip")
    assert "activation (" in tip and "::" in tip and ".py:" in tip  # C++ and Python frames
    page.mouse.click(*point_of(page, j))
    full = page.inner_text("#tgc-panel")
    page.check("#tgc-f-native")
    trimmed = page.inner_text("#tgc-panel")
    stack = trimmed[trimmed.index("allocated at:"):].splitlines()[1:]
    assert all(".py:" in line or line.startswith("(") or line.startswith("freed")
               or not line for line in stack)
    assert "hidden by the filters" in trimmed and len(trimmed) < len(full)
    page.check("#tgc-f-torch")
    torchless = page.inner_text("#tgc-panel")
    assert "/site-packages/torch/" not in torchless and "train.py" in torchless
    page.uncheck("#tgc-f-native")
    page.uncheck("#tgc-f-torch")
    assert page.inner_text("#tgc-panel") == full
    assert errors == []


def test_repeated_frames_fold_and_long_names_wrap(browser, tmp_path):
    rec = [{"filename": "/w/model.py", "line": 7, "name": "recurse"}] * 6
    cpp = [{"filename": "??", "line": 0, "name": "at::native::" + "VeryLongTemplate<" * 40}]
    trace = [{"action": "alloc", "addr": 0x1000, "size": MB, "stream": 0, "time_us": 1,
              "frames": cpp + rec + [{"filename": "/w/train.py", "line": 1, "name": "main"}]},
             {"action": "alloc", "addr": 0x200000, "size": MB, "stream": 0, "time_us": 2,
              "frames": []}]
    page, errors = open_page(browser, tmp_path, timeline_html({"segments": [],
                                                               "device_traces": [trace]}))
    page.mouse.click(*point_of(page, 0))
    text = page.inner_text("#tgc-panel pre")
    assert "<repeats 5 times>" in text and text.count("recurse") == 1
    pre = page.locator("#tgc-panel pre").first
    assert pre.evaluate("e => e.scrollWidth <= e.clientWidth + 1")  # wrapped, not clipped
    page.uncheck("#tgc-f-fold")
    assert page.inner_text("#tgc-panel pre").count("recurse") == 6
    assert errors == []


def test_version_strings_are_memory_viz_s_and_searchable(browser, tmp_path):
    def e(action, addr, size):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0,
                "frames": [{"filename": "/w/train.py", "line": 2, "name": "step"}]}

    trace = []
    for k in range(3):  # one address three times: b7f0000000000_0, _1 and _2
        trace += [e("alloc", 0x7F0000000000, (k + 1) * MB),
                  e("free_requested", 0x7F0000000000, (k + 1) * MB),
                  e("free_completed", 0x7F0000000000, (k + 1) * MB)]
    trace += [e("alloc", 0x7F0000200000, MB)]
    page, errors = open_page(browser, tmp_path, timeline_html({"segments": [],
                                                               "device_traces": [trace]}))
    assert [page.evaluate(f"tgc.version({j})") for j in range(4)] == [
        "b7f0000000000_0", "b7f0000000000_1", "b7f0000000000_2", "b7f0000200000_0"]
    page.fill("#tgc-search", "b7f0000000000_2")
    page.wait_for_function("document.getElementById('tgc-hits').getAttribute('data-count') === '1'")
    page.fill("#tgc-search", "b7f0000000000")  # the address: all three
    page.wait_for_function("document.getElementById('tgc-hits').getAttribute('data-count') === '3'")
    page.evaluate("tgc.range(0, 3)")  # the count follows the range: the first one only
    assert page.get_attribute("#tgc-hits", "data-count") == "1"
    page.click("#tgc-tab-state")
    rows = page.locator("#tgc-events .row").all_text_contents()
    assert "b7f0000000000_0" in rows[0] and rows[0].split()[1] == "alloc"
    assert "free_completed" in rows[2] and "b7f0000000000_0" in rows[2]
    assert errors == []


def test_the_detail_slider_draws_more_one_by_one(browser, tmp_path, training):
    g, _ = training
    page, errors = open_page(browser, tmp_path, timeline_html(g.snapshot, detail=10))
    assert state(page)["drawn"] == 10 and page.get_attribute("#tgc-plot", "data-mode") == "overview"
    page.locator("#tgc-detail-n").evaluate("(e) => { e.value = 200; e.dispatchEvent(new Event('input')); }")
    st = state(page)
    assert st["drawn"] == min(200, st["inView"]) > 10 and st["K"] == 200
    assert page.inner_text("#tgc-detail-v") == "200"
    assert errors == []


def test_summarized_areas_name_their_category_and_its_largest(browser, tmp_path, training):
    g, _ = training
    page, errors = open_page(browser, tmp_path, timeline_html(g.snapshot, detail=3))
    box = page.evaluate("tgc.plotBox()")
    for fx in (0.3, 0.5, 0.7):
        for fy in (0.95, 0.8, 0.6, 0.4):
            x, y = box["x"] + box["width"] * fx, box["y"] + box["height"] * fy
            h = page.evaluate(f"tgc.hit({x}, {y})")
            if h and "area" in h and h["area"] != 15:
                page.mouse.move(x, y)
                wait_hover(page, "c")
                tip = page.inner_text("#tgc-tip")
                name = CATEGORIES[h["area"]].replace("_", " ")
                assert tip.startswith(name + ":") and "not drawn one by one" in tip
                assert "the largest, b" in tip and "from /home/user/project/train.py:" in tip
                assert errors == []
                return
    pytest.fail("no summarized area found")


def test_the_event_list_selects_by_click_and_keys_and_shows_ooms_and_free_stacks(
        browser, tmp_path, training):
    g, html = training
    trace = g.snapshot["device_traces"][0]
    page, errors = open_page(browser, tmp_path, html)
    page.click("#tgc-tab-state")
    n = len(trace)
    assert state(page)["cur"] == n - 1  # the last event, as memory_viz opens it
    last = page.locator(f'#tgc-events [data-event="{n - 1}"]').inner_text()
    oom = trace[-1]
    assert oom["action"] == "oom"
    assert f"OOM (requested " in last and f"({oom['size']:,} bytes), CUDA has" in last
    assert f"({oom['device_free']:,} bytes) memory free)" in last
    # a free: its own stack (the one that freed it)
    free = max(i for i, e in enumerate(trace) if e["action"] == "free_requested")
    page.evaluate(f"tgc.range({free - 5}, {free + 5})")
    page.locator(f'#tgc-events [data-event="{free}"]').click()
    assert state(page)["cur"] == free
    page.locator(f'#tgc-events [data-event="{free}"]').hover()
    info = page.inner_text("#tgc-info")
    assert "the free's stack:" in info
    want = [f for f in trace[free]["frames"] if f["filename"].endswith(".py")][0]
    assert f"{want['filename']}:{want['line']} {want['name']}" in info
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    assert state(page)["cur"] == free - 2
    assert page.get_attribute("#tgc-segc", "data-event") == str(free - 2)
    page.keyboard.press("ArrowDown")
    assert state(page)["cur"] == free - 1
    assert errors == []


def test_segments_hover_for_their_stack_stream_and_pool(browser, tmp_path, training):
    g, html = training
    page, errors = open_page(browser, tmp_path, html)
    page.click("#tgc-tab-segs")
    assert "stream 0, " in page.inner_text("#tgc-seglegend")
    j = page.evaluate("tgc.drawn()[0]")
    page.mouse.move(*point_of(page, j))
    wait_hover(page, "j")
    tip = page.inner_text("#tgc-tip")
    assert ": segment " in tip and "stream 0" in tip and " pool" in tip and ".py:" in tip
    # the Allocator State History's segments: hover one for its stack
    page.click("#tgc-tab-state")
    gap = page.evaluate("tgc.gapPoint()")
    page.mouse.move(gap["x"], gap["y"])
    page.wait_for_function("(document.getElementById('tgc-segc').getAttribute('data-hover') "
                           "|| '').length > 0")
    info = page.inner_text("#tgc-info")
    assert ": segment " in info and "free in its gaps" in info
    assert errors == []


def test_the_navigator_chooses_the_range(browser, tmp_path, training):
    g, html = training
    page, errors = open_page(browser, tmp_path, html)
    nav = page.locator("#tgc-nav").bounding_box()
    n = len(g.snapshot["device_traces"][0])
    page.mouse.move(nav["x"] + nav["width"] * 0.2, nav["y"] + nav["height"] / 2)
    page.mouse.down()
    page.mouse.move(nav["x"] + nav["width"] * 0.3, nav["y"] + nav["height"] / 2, steps=3)
    page.mouse.up()
    st = state(page)
    assert st["e0"] == pytest.approx(0.2 * n, rel=0.02) and st["e1"] == pytest.approx(0.3 * n, rel=0.02)
    assert errors == []


def test_tensor_names_even_of_freed_blocks(browser, tmp_path):
    g = make_trace(layers=1, steps=2, d_model=32, stacks="python", categorize=True, seed=2)
    page, errors = open_page(browser, tmp_path, timeline_html(g.snapshot, detail=1000))
    trace = g.snapshot["device_traces"][0]
    # the largest grad of the first step: named as it landed, freed by zero_grad; seen just
    # before its free
    first = max((i for i in g.names if g.category_of(i) == "grad" and i < len(trace) / 2),
                key=lambda i: trace[i]["size"])
    j = page.evaluate(f"(function () {{ for (var j = 0; j < tgcModel.N; j++)"
                      f" if (tgcModel.A[j] === {first}) return j; }})()")
    free = page.evaluate(f"tgcModel.F[{j}]")
    page.evaluate(f"tgc.range({free - 3}, {free + 3})")
    page.click("#tgc-tab-state")  # just before its free: click its block
    page.locator(f'#tgc-events [data-event="{free - 1}"]').click()
    p = page.evaluate(f"tgc.blockPoint({j})")
    page.mouse.click(p["x"], p["y"])
    at = page.evaluate(f"tgcModel.A[{j}]")
    panel = page.inner_text("#tgc-panel")
    assert f"name\n{g.names[at]}" in panel and "freed\nevent" in panel
    assert any(e["action"] == "free_requested" and e["addr"] == trace[at]["addr"]
               for e in trace[at + 1:])
    page.click("#tgc-tab-mem")
    page.fill("#tgc-search", g.names[at])
    page.wait_for_function("+document.getElementById('tgc-hits').getAttribute('data-count') >= 1")
    assert errors == []


def test_bytes_of_no_category_are_hatched_and_the_legend_says_so(browser, tmp_path):
    trace = [{"action": "alloc", "addr": 0x1000 + k * MB, "size": MB, "stream": 0,
              "time_us": k, "frames": []} for k in range(30)]
    page, errors = open_page(browser, tmp_path, timeline_html({"segments": [],
                                                               "device_traces": [trace]}))
    assert "no category" in page.text_content("#tgc-legend")
    x, y = point_of(page, 20)
    colours = {tuple(page.evaluate(f"tgc.pixel({x + dx}, {y + dy})"))
               for dx in range(-3, 4) for dy in range(-3, 4)}
    assert colours <= {(0xE3, 0xE6, 0xEA), (0x8D, 0x98, 0xA5)} and len(colours) == 2  # stripes
    assert errors == []


def test_compare_two_snapshots(browser, tmp_path):
    a = make_trace(layers=1, steps=1, d_model=32, stacks="python", seed=3, oom=False)
    b = make_trace(layers=2, steps=2, d_model=32, stacks="python", seed=3, oom=False)
    pa, pb, out = tmp_path / "a.pickle", tmp_path / "b.pickle", tmp_path / "cmp.html"
    pa.write_bytes(pickle.dumps(a.snapshot))
    pb.write_bytes(pickle.dumps(b.snapshot))
    r = run_tensorgc_cli("timeline", str(pa), str(pb), "--compare", "-o", str(out))
    assert r.returncode == 0, r.stderr
    page, errors = open_page(browser, tmp_path, out.read_text(), "cmp.html")
    page.click("#tgc-tab-cmp")
    by_cat = page.locator('table[data-table="by_category"] tr.row').all_text_contents()
    assert any(t.startswith("parameter") for t in by_cat)  # twice the layers: more parameters
    sites = page.locator('table[data-table="by_site"] tr.row')
    assert sites.count() >= 1
    site = sites.first.locator("td").first.inner_text()
    sites.first.click()  # searches for it in the Active Memory Timeline
    assert state(page)["view"] == "mem" and page.input_value("#tgc-search") == site.split(" ")[0]
    page.wait_for_function("+document.getElementById('tgc-hits').getAttribute('data-count') >= 1")
    data = json.loads(out.read_text().split('id="tgc-data">')[1].split("</script>")[0])
    assert data["compare"]["a"]["n"] == len(a.snapshot["device_traces"][0])
    assert data["compare"]["b"]["n"] == len(b.snapshot["device_traces"][0])
    r = run_tensorgc_cli("timeline", str(pa), "--compare", "-o", str(out))
    assert r.returncode == 2 and "two snapshot files" in r.stderr
    assert errors == []


@pytest.mark.slow
@pytest.mark.parametrize("name", RECORDED)
def test_recorded_snapshots_in_every_view(browser, tmp_path, name):
    snap = load_snapshot(os.path.join(DATA, name))
    page, errors = open_page(browser, tmp_path, timeline_html(snap))
    trace = snap["device_traces"][0]
    j = page.evaluate("tgc.drawn().filter(function (j) { return tgcModel.K[j] > 0 &&"
                      " tgc.pointOf(j); }).pop()")
    page.mouse.move(*point_of(page, j))
    wait_hover(page, f"j{j}")
    tip = page.inner_text("#tgc-tip")
    assert ".py:" in tip or "::" in tip
    page.click("#tgc-tab-state")
    assert int(page.get_attribute("#tgc-segc", "data-segments")) >= 1
    assert page.locator("#tgc-events .row").count() >= 1
    assert page.get_attribute("#tgc-segc", "data-event") == str(len(trace) - 1)
    page.click("#tgc-tab-segs")
    assert state(page)["drawn"] >= 1
    if any(e["action"] == "oom" for e in trace):
        assert page.locator(".oom").count() >= 1
    assert errors == []
