"""warn_memory_growth on training loops of a tiny model: five kinds of leak, each reported within
50 steps of its start at 1 MiB a step or more, naming its holder; seven kinds of memory that
moves without leaking, silent over 2,000 steps; and a held-out variant of every kind (other
sizes, names, rates, starts) with the same answer. Then what must not break it: threads, a
callback that removes the watch, names of any length, samples that are not bytes, a device
with no memory information.

Objects a scenario keeps live in a fresh module registered in sys.modules (`mod`), so holders
read "tgc_watch_fixture.NAME". The tensors are on the suite's device (TENSORGC_TEST_DEVICE)."""
import collections
import logging
import os
import random
import threading

import pytest

from _util import DEVICE, IS_CUDA, fresh_module

torch = pytest.importorskip("torch")

import tensorgc  # noqa: E402
from tensorgc.reporter import watch as watch_mod  # noqa: E402

MOD = "tgc_watch_fixture"
MiB = 1 << 20


@pytest.fixture
def mod():
    yield from fresh_module(MOD, collect=False)


@pytest.fixture(autouse=True)
def one_thread():
    """torch's intra-op threads at one: a tiny model's 2,000 steps on a busy 2-core machine
    otherwise spend their time waiting for each other."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def pages(tmp_path):
    d = tmp_path / "pages"
    d.mkdir()
    return d


def floats(mib):
    """A tensor of ``mib`` MiB on the suite's device (its memory untouched: cheap)."""
    return torch.empty(int(mib * MiB) // 4, device=DEVICE)


class Loop:
    """A tiny model and optimizer; step(i) runs one training step on a small batch and calls
    what the scenario adds (``extra(i, out)``) after the forward."""

    def __init__(self, mod, *, optimizer="sgd", width=16, extra=None, accumulate=1):
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                         torch.nn.Linear(width, 1)).to(DEVICE)
        cls = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
        self.opt = cls(self.model.parameters(), lr=1e-3)
        self.extra = extra
        self.accumulate = accumulate
        self.width = width
        mod.model = self.model

    def step(self, i):
        for _ in range(self.accumulate):
            x = torch.randn(8, self.width, device=DEVICE)
            out = self.model(x)
            if self.extra is not None:
                self.extra(i, out)
            out.mean().backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def run(loop, steps, pages, *, manual=False, stop_at_report=True, **kw):
    """Runs ``steps`` steps under a watch; returns (the forecasts, the watch)."""
    got = []
    w = tensorgc.warn_memory_growth(DEVICE, callback=got.append, directory=pages,
                                    optimizer_hook=not manual, **kw)
    try:
        for i in range(steps):
            loop.step(i)
            if manual:
                w.step()
            if got and stop_at_report:
                break
    finally:
        w.remove()
    return got, w


# --- five leaks, and a held-out variant of each ---------------------------------------------

def leak_losses(mod, name, mib, start):
    """A list of losses kept with their graphs: a second loss (for logging) that keeps its
    graph's saved activations."""
    setattr(mod, name, [])
    held = getattr(mod, name)
    n = int(mib * MiB) // 4 // 64

    scale = torch.ones((), device=DEVICE, requires_grad=True)

    def extra(i, out):
        if i >= start:
            a = torch.randn(n, 64, device=DEVICE)
            held.append((a * scale).sum() + out.mean())  # mul saves a for scale's grad
    return extra


def leak_cache(mod, name, mib, start):
    """A dict caching activations by step."""
    setattr(mod, name, {})
    cache = getattr(mod, name)

    def extra(i, out):
        if i >= start:
            cache[f"step{i}"] = floats(mib) + out.detach().mean()
    return extra


def leak_hook(mod, name, mib, start, attr=None):
    """A forward hook that appends each output it sees (of a layer that makes mib MiB)."""
    if attr:
        setattr(mod, name, type("Recorder", (), {})())
        setattr(getattr(mod, name), attr, [])
        store = getattr(getattr(mod, name), attr)
    else:
        setattr(mod, name, [])
        store = getattr(mod, name)
    big = torch.nn.Linear(64, 64).to(DEVICE)
    rows = int(mib * MiB) // 4 // 64
    big.register_forward_hook(lambda m, inp, out: store.append(out.detach()))
    mod.big_layer = big

    def extra(i, out):
        if i >= start:
            with torch.no_grad():
                big(torch.zeros(rows, 64, device=DEVICE))
    return extra


class AppendMetric:
    def __init__(self):
        self.preds = []

    def update(self, x):
        self.preds.append(x)


class CatMetric:
    """Accumulates by concatenation: one storage, replaced by a larger one each step."""

    def __init__(self):
        self.total = torch.empty(0, device=DEVICE)

    def update(self, x):
        self.total = torch.cat([self.total, x])


def leak_metric(mod, name, mib, start, cls=AppendMetric):
    setattr(mod, name, cls())
    metric = getattr(mod, name)

    def extra(i, out):
        if i >= start:
            metric.update(floats(mib).fill_(1.0))
    return extra


def leak_closure(mod, name, mib, start):
    """A closure that keeps each step's batch (a list in its enclosing scope)."""
    def make():
        seen = []

        def prepare(i):
            batch = floats(mib)
            seen.append(batch)
            return batch
        return prepare
    setattr(mod, name, make())
    prepare = getattr(mod, name)

    def extra(i, out):
        if i >= start:
            prepare(i)
    return extra


LEAKS = [
    # (id, maker, holder, MiB a step, start, manual step(), maker's extra arguments)
    ("losses", leak_losses, "history", 1, 0, False, {}),
    ("losses-heldout", leak_losses, "val_losses", 2.5, 120, True, {}),
    ("cache", leak_cache, "cache", 1, 0, False, {}),
    ("cache-heldout", leak_cache, "feature_store", 1.5, 300, True, {}),
    ("hook", leak_hook, "captured", 1, 0, False, {}),
    ("hook-heldout", leak_hook, "recorder", 3, 77, True, {"attr": "outputs"}),
    ("metric", leak_metric, "metric", 1, 0, False, {}),
    ("metric-heldout", leak_metric, "running_total", 2, 200, True, {"cls": CatMetric}),
    ("closure", leak_closure, "train_batch", 1, 0, False, {}),
    ("closure-heldout", leak_closure, "make_inputs", 4, 50, True, {}),
]


@pytest.mark.parametrize("case", LEAKS, ids=[c[0] for c in LEAKS])
def test_a_leak_is_reported_within_50_steps_naming_its_holder(mod, pages, case, caplog):
    _, maker, holder, mib, start, manual, more = case
    loop = Loop(mod, extra=maker(mod, holder, mib, start, **more))
    with caplog.at_level(logging.WARNING, logger="tensorgc"):
        got, w = run(loop, start + 60, pages, manual=manual, limit=64 << 30)
    assert len(got) == 1, w.stats()
    fc = got[0]
    assert fc.step - start <= 50, (fc.step, start)
    assert fc.bytes_per_step >= 0.9 * mib * MiB, fc.text
    name, per = fc.holders[0]
    assert name == f"{MOD}.{holder}", fc.holders
    assert per == pytest.approx(mib * MiB, rel=0.35), fc.holders
    assert fc.steps_left is not None and 0 < fc.steps_left < (64 << 30) / (0.9 * mib * MiB)
    assert f"{MOD}.{holder}" in fc.text and "runs out in about" in fc.text
    # the growth began at the leak's start, or at the end of the warm-up the watch skips
    assert fc.since_step - 1 <= max(start, 5) + 6, (fc.since_step, start)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING
              and "memory grows by" in r.getMessage()]
    assert len(warned) == 1 and fc.page and fc.page in warned[0].getMessage()
    with open(fc.page, encoding="utf-8") as f:
        page = f.read()
    assert f"{MOD}.{holder}" in page and "<svg" in page


# --- seven kinds of memory that moves without leaking, and a held-out variant of each -------

def warmup(mod, steps, mib):
    """Buffers made lazily over the first ``steps`` steps, then reused."""
    mod.buffers = []

    def extra(i, out):
        if i < steps:
            mod.buffers.append(floats(mib))
    return extra


def late_state(mod, at):
    """A second part of the model unfrozen at step ``at``: its optimizer's state appears once."""
    head = torch.nn.Linear(512, 512).to(DEVICE)
    mod.head_opt = torch.optim.Adam(head.parameters(), lr=1e-3)

    def extra(i, out):
        if i >= at:
            head(torch.randn(1, 512, device=DEVICE)).sum().backward()
            mod.head_opt.step()
            mod.head_opt.zero_grad()
    return extra


def caching(mod, seed, top_mib):
    """Temporaries of changing sizes, freed each step: the allocator keeps their memory (its
    cache, which the watch does not count) and nothing lives on."""
    rnd = random.Random(seed)

    def extra(i, out):
        t = floats(rnd.uniform(0.5, top_mib))
        u = floats(rnd.uniform(0.5, top_mib)) if i % 3 else None
        del t, u
    return extra


def periodic_eval(mod, every, batches, no_grad):
    """An evaluation every ``every`` steps, its last outputs kept until the next one."""
    mod.last_eval = None
    mod.scores = []

    def extra(i, out):
        if i % every == every - 1:
            outs = []
            ctx = torch.no_grad() if no_grad else torch.enable_grad()
            with ctx:
                for _ in range(batches):
                    outs.append(floats(1) + 1)
            mod.last_eval = outs
            mod.scores.append(float(len(outs)))
    return extra


def variable_lengths(mod, seed, lo, hi):
    """Batches of random sequence lengths, the last one kept until the next."""
    rnd = random.Random(seed)

    def extra(i, out):
        mod.last_batch = torch.empty(rnd.randint(lo, hi), 1024, device=DEVICE)
    return extra


def bounded_queue(mod, maxlen, mib, start):
    mod.recent = collections.deque(maxlen=maxlen)

    def extra(i, out):
        if i >= start:
            mod.recent.append(floats(mib))
    return extra


NON_LEAKS = [
    # (id, make(mod) -> extra, Loop's arguments, manual step())
    ("warmup", lambda m: warmup(m, 8, 2), {}, False),
    ("warmup-heldout", lambda m: warmup(m, 20, 1.5), {}, True),
    ("optimizer-state", lambda m: None, {"optimizer": "adam", "width": 256}, False),
    ("optimizer-state-heldout", lambda m: late_state(m, 500), {}, True),
    ("caching-allocator", lambda m: caching(m, 1, 8), {}, False),
    ("caching-allocator-heldout", lambda m: caching(m, 7, 20), {}, True),
    ("periodic-eval", lambda m: periodic_eval(m, 50, 5, True), {}, False),
    ("periodic-eval-heldout", lambda m: periodic_eval(m, 37, 3, False), {}, True),
    ("grad-accumulation", lambda m: None, {"accumulate": 4, "width": 64}, False),
    ("grad-accumulation-heldout", lambda m: None, {"accumulate": 3, "width": 96}, True),
    ("variable-lengths", lambda m: variable_lengths(m, 3, 16, 512), {}, False),
    ("variable-lengths-heldout", lambda m: variable_lengths(m, 11, 1, 2048), {}, True),
    ("bounded-queue", lambda m: bounded_queue(m, 8, 1, 0), {}, False),
    ("bounded-queue-heldout", lambda m: bounded_queue(m, 16, 2, 200), {}, True),
]


@pytest.mark.parametrize("case", NON_LEAKS, ids=[c[0] for c in NON_LEAKS])
def test_memory_that_moves_without_leaking_is_silent_over_2000_steps(mod, pages, case, caplog):
    _, make, loop_args, manual = case
    loop = Loop(mod, extra=make(mod), **loop_args)
    with caplog.at_level(logging.WARNING, logger="tensorgc"):
        got, w = run(loop, 2000, pages, manual=manual, stop_at_report=False)
    assert got == [], [fc.text for fc in got]
    assert w.stats()["steps"] == 2000  # every step was seen: silence is not blindness
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert os.listdir(pages) == []


def test_grad_accumulation_counted_per_micro_batch_is_silent(mod, pages):
    """step() after every micro-batch (not the optimizer's): memory goes up and down within
    each optimizer step."""
    loop = Loop(mod, width=128)
    got = []
    w = tensorgc.warn_memory_growth(DEVICE, callback=got.append, directory=pages,
                                    optimizer_hook=False)
    with w:
        for i in range(2000):
            x = torch.randn(8, 128, device=DEVICE)
            loop.model(x).mean().backward()
            w.step()
            if i % 4 == 3:
                loop.opt.step()
                loop.opt.zero_grad(set_to_none=True)
    assert got == [] and w.stats()["steps"] == 2000


def test_a_second_leak_is_a_new_report_and_a_repeat_is_not(mod, pages):
    mod.a, mod.b = [], []

    def extra(i, out):
        mod.a.append(floats(1))
        if i >= 150:
            mod.b.append(floats(2))
    loop = Loop(mod, extra=extra)
    got, w = run(loop, 400, pages, stop_at_report=False, allowance=60.0)
    assert [fc.holders[0][0] for fc in got][:1] == [f"{MOD}.a"]
    assert len(got) == 2, [fc.holders for fc in got]
    assert {h for h, _ in got[1].holders} == {f"{MOD}.a", f"{MOD}.b"}
    assert got[1].holders[0] == (f"{MOD}.b", pytest.approx(2 * MiB, rel=0.2))
    assert w.stats()["investigations"] >= 2


# --- the trend test alone ---------------------------------------------------------------------

def trend_hits(values, window=30):
    tr = watch_mod._Trend(window, 6, 64 * 1024)
    hits = []
    for i, v in enumerate(values):
        tr.push(i, v)
        if tr.rate() is not None:
            hits.append(i)
    return hits


def test_the_trend_sees_a_steady_rise_under_noise_and_not_a_jump():
    rnd = random.Random(5)
    base = 100 * MiB
    steady = [base + i * MiB + rnd.uniform(0, 2 * MiB) for i in range(200)]
    assert trend_hits(steady)[0] <= 40
    jump = [base + (50 * MiB if i >= 100 else 0) + rnd.uniform(0, MiB) for i in range(400)]
    assert trend_hits(jump) == []
    slow = [base + i * 1024 for i in range(400)]  # 1 KiB a step: below min_bytes_per_step
    assert trend_hits(slow) == []


# --- what must not break it -----------------------------------------------------------------

def fake(values):
    it = iter(values)
    return lambda: next(it)


def test_samples_that_are_not_bytes_are_skipped(pages, caplog):
    vals = [float("nan"), -5.0, float("inf")] * 3 + [MiB * i for i in range(200)]
    got = []
    with caplog.at_level(logging.WARNING, logger="tensorgc"):
        w = tensorgc.warn_memory_growth("cpu", sample=fake(vals), callback=got.append,
                                        directory=pages, optimizer_hook=False)
        with w:
            for _ in range(len(vals)):
                w.step()
    assert w.stats()["bad_samples"] == 9
    assert sum("not a number of bytes" in r.getMessage() for r in caplog.records) == 1
    # the fake growth has no tensor behind it: growth() names none, so nothing is reported
    assert got == [] and w.stats()["investigations"] >= 1


def test_a_sampler_that_raises_never_reaches_the_loop(pages, caplog):
    def boom():
        raise RuntimeError("no counter today")
    w = tensorgc.warn_memory_growth("cpu", sample=boom, directory=pages, optimizer_hook=False)
    with caplog.at_level(logging.ERROR, logger="tensorgc"), w:
        for _ in range(3):
            w.step()
    assert sum("no counter today" in (r.exc_text or "") for r in caplog.records) == 3


def test_remove_inside_the_callback_and_steps_from_two_threads(mod, pages):
    mod.kept = []
    got = []
    ref = {}

    def cb(fc):
        got.append(fc)
        ref["w"].remove()
        ref["w"].remove()  # twice: still fine

    w = tensorgc.warn_memory_growth(DEVICE, callback=cb, directory=pages, optimizer_hook=False)
    ref["w"] = w
    barrier = threading.Barrier(2)
    lock = threading.Lock()

    def work():
        barrier.wait()
        for _ in range(60):
            with lock:
                mod.kept.append(floats(1))
            w.step()
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 1 and not w.active
    assert got[0].holders[0][0] == f"{MOD}.kept"
    steps = w.stats()["steps"]
    w.step()  # after remove: nothing
    assert w.stats()["steps"] == steps <= 120


def test_a_huge_holder_name_is_cut_and_escaped(mod, pages):
    name = "<b>" + "x" * 100000
    mod.__dict__[name] = []

    def extra(i, out):
        mod.__dict__[name].append(floats(1))
    got, _ = run(Loop(mod, extra=extra), 60, pages)
    assert len(got) == 1
    holder = got[0].holders[0][0]
    assert holder.startswith(f"{MOD}.<b>xxx") and len(holder) <= 200
    assert len(got[0].text) < 5000
    with open(got[0].page, encoding="utf-8") as f:
        page = f.read()
    assert "<b>x" not in page and "&lt;b&gt;x" in page and len(page) < 200000


def test_no_memory_information_means_no_forecast(monkeypatch):
    def no_info(*a):
        raise RuntimeError("no memory info")
    monkeypatch.setattr(torch.cuda, "mem_get_info", no_info)
    assert watch_mod._headroom("cuda", 0, 10.0, None) == (None, "")
    assert watch_mod._headroom("cpu", None, 10.0, None) == (None, "")
    assert watch_mod._headroom("cpu", None, 10.0, 100.0)[0] == 90.0


def test_without_a_limit_on_the_cpu_steps_left_is_none(mod, pages):
    if IS_CUDA:
        pytest.skip("the CPU's case")
    mod.kept = []
    got, _ = run(Loop(mod, extra=lambda i, out: mod.kept.append(floats(1))), 60, pages)
    assert len(got) == 1 and got[0].steps_left is None
    assert "pass limit=" in got[0].text


def test_the_rank_is_in_the_words_and_the_file_name(mod, pages, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    mod.kept = []
    got, _ = run(Loop(mod, extra=lambda i, out: mod.kept.append(floats(1))), 60, pages)
    assert len(got) == 1 and got[0].rank == 3
    assert "rank 3's" in got[0].text
    assert os.path.basename(got[0].page).startswith("tensorgc-growth-rank3-")


def test_a_page_that_cannot_be_written_still_warns(mod, tmp_path, caplog):
    d = tmp_path / "ro"
    d.mkdir()
    mod.kept = []
    loop = Loop(mod, extra=lambda i, out: mod.kept.append(floats(1)))
    os.chmod(d, 0o500)
    try:
        if os.access(d, os.W_OK):
            pytest.skip("root writes anywhere")
        with caplog.at_level(logging.WARNING, logger="tensorgc"):
            got, _ = run(loop, 60, d)
    finally:
        os.chmod(d, 0o700)
    assert len(got) == 1 and got[0].page is None and "no page written" in got[0].text


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        tensorgc.warn_memory_growth("cpu", window=5)
    with pytest.raises(ValueError):
        tensorgc.warn_memory_growth("cpu", limit=-1)
    with pytest.raises(ValueError):
        tensorgc.warn_memory_growth("cpu", limit=float("nan"))
    with pytest.raises(TypeError):
        tensorgc.warn_memory_growth("cpu", callback=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        tensorgc.warn_memory_growth("meta")


def test_the_optimizer_hook_goes_with_remove():
    import torch.optim.optimizer as o
    before = len(o._global_optimizer_post_hooks)
    w = tensorgc.warn_memory_growth("cpu", sample=lambda: 0.0)
    assert len(o._global_optimizer_post_hooks) == before + 1
    w.remove()
    assert len(o._global_optimizer_post_hooks) == before


# --- CUDA: the real caching allocator and the device's memory --------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_reserved_memory_that_grows_is_not_a_leak_and_a_leak_gets_a_forecast(pages, mod):
    """The caching allocator keeps ever larger blocks (reserved grows), allocated stays flat:
    silent. Then a leak: the forecast comes from the device's free and total memory."""
    loop = Loop(mod, extra=caching(mod, 2, 64))
    got, _ = run(loop, 600, pages, stop_at_report=False)
    assert got == []
    mod.kept = []
    loop = Loop(mod, extra=lambda i, out: mod.kept.append(floats(4)))
    got, _ = run(loop, 60, pages)
    assert len(got) == 1 and got[0].holders[0][0] == f"{MOD}.kept"
    free, total = torch.cuda.mem_get_info()
    assert got[0].steps_left is not None and got[0].steps_left <= total / (3 * MiB)
    assert "the device's" in got[0].text
