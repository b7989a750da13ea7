"""The integrations' shared Watcher (tensorgc/integrations/_core.py) with a logger of the test's
own, no training library: what reaches the logger, the slow-leak forecast (a stand-in for
tensorgc.warn_memory_growth, and the real one where this tensorgc has it), loggers that refuse,
a second integration in one process, and the notebook forms of reports."""
import gc
import os

import pytest

torch = pytest.importorskip("torch")

import tensorgc  # noqa: E402
from tensorgc.integrations import _core  # noqa: E402
from tensorgc.integrations._core import Options, Sink, Watcher  # noqa: E402

LEAK = []


class Node:
    pass


class Recorder(Sink):
    def __init__(self, fail_text=False, fail_scalars=False):
        self.scalar_calls, self.texts = [], []
        self.fail_text, self.fail_scalars = fail_text, fail_scalars

    def scalars(self, values, step):
        if self.fail_scalars:
            raise RuntimeError("this logger refuses")
        self.scalar_calls.append((step, dict(values)))

    def text(self, tag, text, step):
        if self.fail_text:
            raise NotImplementedError("no text here")
        self.texts.append((tag, text, step))

    def merged(self):
        out = {}
        for step, values in self.scalar_calls:
            for k, v in values.items():
                out.setdefault(k, {})[step] = v
        return out


@pytest.fixture
def run(tmp_path):
    """A model, an optimizer and a Watcher on them, stopped afterwards whatever happened."""
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    made = []

    def start(sink=None, **options):
        options.setdefault("directory", str(tmp_path))
        said = []
        w = Watcher(Options(**options), say=said.append)
        w.said = said
        w.start(model, [opt], sink if sink is not None else Recorder())
        made.append(w)
        return w

    def train_step(w, leak=1024):
        LEAK.append(torch.zeros(leak))
        n = Node()
        n.self = n
        n.t = torch.zeros(256)
        del n
        gc.collect()
        model(torch.randn(2, 16)).sum().backward()
        opt.step()
        w.step()

    yield start, train_step, model, opt
    for w in made:
        w.stop()
    LEAK.clear()


def test_reports_reach_the_logger_with_the_leak_and_the_cycles(run):
    start, train_step, model, _ = run
    sink = Recorder()
    w = start(sink, report_every=2)
    for _ in range(4):
        train_step(w)
    got = sink.merged()
    assert set(got["tensorgc/memory/other"]) == {1, 2, 4}
    assert got["tensorgc/memory/other"][4] - got["tensorgc/memory/other"][2] >= 2 * 4096
    assert got["tensorgc/memory/parameter"][1] == 16 * 17 * 4
    assert got["tensorgc/cycles_found"][4] == 4 and got["tensorgc/cycles_bytes"][4] == 4 * 1024
    assert "tensorgc/allocated" in got and "tensorgc/reserved" not in got  # no CUDA here
    (tag, text, step), *_ = [t for t in sink.texts if t[2] == 4]
    assert tag == "tensorgc/memory" and "LEAK" in text
    pages = [s for s in w.said if s.startswith("tensorgc: cycle page ")]
    assert len(pages) == 1 and os.path.exists(pages[0].rsplit(" ", 1)[1])
    w.stop()
    assert not w.started and w.handles == {}


def test_report_every_none_and_zero(run):
    start, train_step, _, _ = run
    sink = Recorder()
    w = start(sink, report_every=0, cycles=False)
    for _ in range(3):
        train_step(w)
    assert [s for s, _ in sink.scalar_calls] == [1]
    w.stop()
    sink = Recorder()
    w = start(sink, report_every=None, cycles=False)
    train_step(w)
    assert sink.scalar_calls == []


class StandIn:
    """What tensorgc.warn_memory_growth returns, for a tensorgc that has none yet."""

    def __init__(self, device, callback, limit):
        self.device, self.callback, self.limit = device, callback, limit
        self.steps = 0
        self.removed = False

    def step(self):
        self.steps += 1
        if self.steps == 3:
            self.callback(type("Forecast", (), {
                "bytes_per_step": 4096, "steps_left": 100, "holders": [("__main__.LEAK", 4096)],
                "text": "grows 4.0 KiB a step, held by __main__.LEAK; out of memory in 100 steps"})())

    def remove(self):
        self.removed = True


def test_growth_forecast_through_a_stand_in(run, monkeypatch):
    made = []

    def warn_memory_growth(device="cuda", *, callback=None, limit=None):
        made.append(StandIn(device, callback, limit))
        return made[-1]

    monkeypatch.setattr(tensorgc, "warn_memory_growth", warn_memory_growth, raising=False)
    start, train_step, _, _ = run
    sink = Recorder()
    w = start(sink, report_every=None, cycles=False, growth_limit=1 << 20)
    for _ in range(3):
        train_step(w)
    (g,) = made
    assert (g.device, g.limit, g.steps) == ("cpu", 1 << 20, 3)
    assert sink.scalar_calls == [(3, {"tensorgc/growth_bytes_per_step": 4096.0,
                                      "tensorgc/growth_steps_left": 100.0})]
    assert [t[0] for t in sink.texts] == ["tensorgc/growth"]
    w.stop()
    assert g.removed


def test_growth_forecast_with_the_real_function(run):
    start, train_step, _, _ = run
    sink = Recorder()
    w = start(sink, report_every=None, cycles=False)
    for _ in range(60):
        train_step(w, leak=1 << 18)  # 1 MiB a step: above the watch's least growth
    got = sink.merged()
    assert got["tensorgc/growth_bytes_per_step"], sink.scalar_calls
    assert max(got["tensorgc/growth_bytes_per_step"].values()) >= (1 << 20) * 0.9
    assert any("LEAK" in t for _, t, _ in sink.texts)


def test_without_growth_function_the_run_goes_on(run, monkeypatch, caplog):
    # a tensorgc without the function: not bound, and not among the names loaded on first use
    monkeypatch.delattr(tensorgc, "warn_memory_growth", raising=False)
    monkeypatch.delitem(tensorgc._LAZY, "warn_memory_growth")
    assert not hasattr(tensorgc, "warn_memory_growth")
    start, train_step, _, _ = run
    w = start(report_every=None, cycles=False)
    train_step(w)
    assert "growth" not in w.handles and not w.failed


def test_a_logger_that_refuses_text_still_gets_scalars(run, caplog):
    caplog.set_level("INFO", logger="tensorgc")
    start, train_step, _, _ = run
    sink = Recorder(fail_text=True)
    w = start(sink, report_every=1, cycles=False)
    train_step(w)
    train_step(w)
    assert [s for s, _ in sink.scalar_calls] == [1, 2]
    assert not w.text_ok
    assert sum("takes no text" in r.getMessage() for r in caplog.records) == 1


def test_a_logger_that_raises_never_reaches_the_loop(run, caplog):
    start, train_step, _, _ = run
    sink = Recorder(fail_scalars=True)
    w = start(sink, report_every=1, cycles=False)
    for _ in range(5):
        train_step(w)  # raises nothing
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 3 and "no more" in refused[-1].getMessage()


def test_a_failing_part_is_logged_once_and_turned_off(run, monkeypatch, caplog):
    start, train_step, _, _ = run
    w = start(report_every=1, cycles=False)
    monkeypatch.setattr(w, "report", lambda: 1 / 0)
    train_step(w)
    train_step(w)
    assert w.failed == {"memory report"}
    assert sum("memory report failed" in r.getMessage() for r in caplog.records) == 1


def test_a_second_integration_in_the_process_stays_idle(run, caplog):
    start, train_step, _, _ = run
    first = start(report_every=None)
    second = start(report_every=None)
    assert first.started and not second.started
    assert "already watching" in caplog.text
    first.stop()
    third = start(report_every=None, cycles=False)
    assert third.started


def test_not_a_model_is_refused_without_raising(tmp_path, caplog):
    w = Watcher(Options(directory=str(tmp_path)), say=lambda s: None)
    w._guard("start", lambda: w.start("not a model", [], Recorder()))
    assert not w.started and _core._running is None
    w.step()
    w.stop()


def test_options_are_checked():
    with pytest.raises(ValueError, match="report_every"):
        Options(report_every=-1).check()
    with pytest.raises(ValueError, match="growth_limit"):
        Options(growth_limit=0).check()
    with pytest.raises(TypeError):
        Options(no_such_option=1)


def test_the_watcher_keeps_no_model_alive(tmp_path):
    import weakref

    model = torch.nn.Linear(4, 4)
    w = Watcher(Options(directory=str(tmp_path), cycles=False), say=lambda s: None)
    w.start(model, [], Recorder())
    ref = weakref.ref(model)
    del model
    assert ref() is None
    w.step()  # the model is gone: no report, no error
    assert not w.failed
    w.stop()


# -- notebook forms --------------------------------------------------------------------------

EVIL = "<script>alert('x')</script>&"


def test_report_html_escapes_names_and_lists_categories():
    ns = {}
    exec(f"holder = {{{EVIL!r}: torch.zeros(64)}}", {"torch": torch}, ns)
    model = torch.nn.Linear(4, 4)
    rep = tensorgc.MemReporter(model).collect(device="cpu", owners=True)
    page = rep._repr_html_()
    assert "<table" in page and "parameter" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    del ns


def test_growth_html_escapes_holders():
    before = tensorgc.checkpoint()
    globals()[EVIL] = torch.zeros(128)
    try:
        g = tensorgc.growth(before)
        page = g._repr_html_()
    finally:
        del globals()[EVIL]
    assert "By owner" in page and "<script>" not in page and "&lt;script&gt;" in page


def test_cycle_report_is_a_sandboxed_iframe():
    got = []
    h = tensorgc.observe_cycles(got.append, device="any")
    try:
        n = Node()
        n.self = n
        n.name = EVIL
        n.t = torch.zeros(8)
        del n
        gc.collect()
    finally:
        h.remove()
    (report,) = got
    page = report._repr_html_()
    assert page.startswith('<iframe sandbox="allow-scripts"') and page.endswith("></iframe>")
    import html as h_

    srcdoc = page.split('srcdoc="', 1)[1].rsplit('"', 1)[0]
    assert "<" not in srcdoc and '"' not in srcdoc
    assert h_.unescape(srcdoc) == report.html


def test_inline_timeline_is_bounded():
    from tensorgc.integrations.notebooks import inline_timeline

    snap = os.path.join(os.path.dirname(__file__), "data", "transformer-adamw-small-all.pickle")
    full = inline_timeline(snap, device=0)
    shown = full._repr_html_()
    assert shown.startswith('<iframe sandbox="allow-scripts"') and "<script" not in shown
    smaller = inline_timeline(snap, device=0, max_bytes=len(full.html) - 1)
    assert smaller.html is not None and len(smaller.html) < len(full.html)
    none = inline_timeline(snap, device=0, max_bytes=1000)
    assert none.html is None and "tensorgc.timeline(snapshot" in none._repr_html_()
    with pytest.raises(ValueError):
        inline_timeline(snap, device=0, max_bytes=0)
