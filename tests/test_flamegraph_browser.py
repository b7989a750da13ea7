"""The flame graph page in a real browser (playwright driving Debian's chromium): a click zooms
into a frame, and beneath it only the frames it stands on are drawn, full width."""
import pytest

from _util import chromium, launch_chromium
from tensorgc import flamegraph as fg

sync_api = pytest.importorskip("playwright.sync_api")
if not chromium():
    pytest.skip("needs Debian's chromium (make deps installs it)", allow_module_level=True)

HOSTILE = '</title><script>alert(1)</script>"&\x1b]8;;'
# two roots' worth of frames side by side: zooming into one must hide its cousins beneath it
STACKS = {
    ("stream_0", "seg_a", "train.py:10:step", "model.py:5:forward"): 300,
    ("stream_0", "seg_a", "train.py:10:step", "adam.py:238:step"): 100,
    ("stream_0", "seg_a", "data.py:7:" + HOSTILE): 200,
    ("stream_0", "seg_b", "transformer.py:968:_sa_block", "attn.py:1:softmax"): 400,
    ("stream_1", "seg_c", "loss.py:3:backward"): 250,
}


@pytest.fixture(scope="module")
def browser():
    yield from launch_chromium()


def drawn(page):
    """(name, x, width, depth) of every frame on display, by the page's own geometry."""
    return page.evaluate("""() => [].slice.call(document.querySelectorAll('g.f'))
        .filter(g => getComputedStyle(g).display !== 'none')
        .map(g => [g.getAttribute('data-n'), +g.querySelector('rect').getAttribute('x'),
                   +g.querySelector('rect').getAttribute('width'), +g.getAttribute('data-d')])""")


def open_page(browser, tmp_path, html):
    path = tmp_path / "fg.html"
    path.write_text(html)
    page = browser.new_page(viewport={"width": 1400, "height": 500})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (errors.append("dialog " + d.message), d.dismiss()))
    page.goto(path.as_uri())
    return page, errors


def click(page, name):
    page.locator("g.f", has=page.locator("title", has_text=name)).first.click()


def no_overlap(frames):
    by_depth = {}
    for n, x, w, d in frames:
        by_depth.setdefault(d, []).append((x, x + w, n))
    for d, spans in by_depth.items():
        spans.sort()
        for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
            assert a1 <= b0 + 0.6, f"depth {d}: {an} and {bn} overlap ({spans})"


def test_zoom_draws_beneath_a_frame_only_what_it_stands_on(browser, tmp_path):
    page, errors = open_page(browser, tmp_path, fg.render(STACKS, format="html", title=HOSTILE))
    try:
        before = drawn(page)
        assert {n for n, *_ in before} >= {"seg_a", "seg_b", "seg_c", "stream_1"}
        click(page, "train.py:10:step")
        after = drawn(page)
        names = {n: (x, w, d) for n, x, w, d in after}
        # beneath: the frames it stands on, full width; its cousins hidden
        assert set(n for n, x, w, d in after if d < 3) == {"all", "stream_0", "seg_a"}, after
        for n in ("all", "stream_0", "seg_a"):
            assert names[n][0] == pytest.approx(10, abs=0.1) and names[n][1] > 1100, names[n]
        # the zoomed frame full width, what stands on it shared out, nothing beside it
        zx, zw, _ = names["train.py:10:step"]
        assert zx == pytest.approx(10, abs=0.1) and zw == pytest.approx(names["all"][1], abs=1)
        assert set(n for n, x, w, d in after if d >= 3) == {
            "train.py:10:step", "model.py:5:forward", "adam.py:238:step"}, after
        assert names["model.py:5:forward"][1] == pytest.approx(3 * names["adam.py:238:step"][1],
                                                               rel=0.02)
        no_overlap(after)

        # a click on the root resets; then a zoom into the other stream's frame
        page.locator("g.f[data-d='0']").click()
        assert sorted(drawn(page)) == sorted(before)
        click(page, "loss.py:3:backward")
        assert {n for n, *_ in drawn(page)} == {"all", "stream_1", "seg_c", "loss.py:3:backward"}
        no_overlap(drawn(page))
        assert not errors, errors
    finally:
        page.close()


def test_hostile_frame_names_zoom_as_text(browser, tmp_path):
    page, errors = open_page(browser, tmp_path, fg.render(STACKS, format="html", title=HOSTILE))
    try:
        click(page, "data.py:7:")
        frames = drawn(page)
        deepest = [n for n, x, w, d in frames if d == 3]
        assert len(deepest) == 1 and deepest[0].startswith("data.py:7:</title><script>")
        label = page.evaluate("() => [].slice.call(document.querySelectorAll('g.f text'))"
                              ".map(t => t.textContent).join('\\n')")
        assert "<script>alert(1)</script>" in label     # shown as text, never run
        assert page.evaluate("() => document.querySelectorAll('script').length") == 1
        no_overlap(frames)
        assert not errors, errors
    finally:
        page.close()
