"""Owner chains, growth and the pytest plugin on CUDA tensors: a model mid-training with a leak,
the allocator's history recorded, so growth() also groups by allocation site. Run on the GPU
machine:

    TENSORGC_TEST_DEVICE=cuda python3 -m pytest tests/test_owners_cuda.py -q
"""
import os
import subprocess
import sys
import types

import pytest
torch = pytest.importorskip("torch")  # the torch-free run skips these

import tensorgc
from _util import IS_CUDA

pytestmark = pytest.mark.skipif(not (IS_CUDA and torch.cuda.is_available()),
                                reason="needs TENSORGC_TEST_DEVICE=cuda and CUDA")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def mod():
    m = types.ModuleType("tgc_cuda_leak")
    sys.modules[m.__name__] = m
    try:
        yield m
    finally:
        sys.modules.pop(m.__name__, None)
        m.__dict__.clear()
        torch.cuda.empty_cache()


def _leaky_steps(mod, model, opt, x, steps):
    for i in range(steps):
        loss = model(x).square().mean()
        if i % 2 == 0:
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        mod.loss_history.append(loss)  # the graph of every no-backward step stays


def test_growth_names_the_owner_and_the_allocation_site_mid_training(mod):
    device = torch.device("cuda", torch.cuda.current_device())
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 512)).to(device)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(128, 512, device=device)
    mod.loss_history = []
    _leaky_steps(mod, model, opt, x, 1)  # Adam's state exists from here on
    tensorgc.record_memory_history(max_entries=100_000)
    try:
        before = tensorgc.checkpoint(device)
        _leaky_steps(mod, model, opt, x, 6)
        torch.cuda.synchronize()
        g = tensorgc.growth(before, device, reporter=tensorgc.MemReporter(model, optimizer=opt))
    finally:
        tensorgc.record_memory_history(enabled=None)
    print(g)
    top_holder, nbytes, n, chain = g.groups[0]
    assert top_holder == "tgc_cuda_leak.loss_history"
    assert chain.startswith("module tgc_cuda_leak .loss_history [")
    assert ".grad_fn \u2192 " in chain and " saved " in chain
    # three no-backward steps kept a graph each: the activations of 128 x 1024 (GELU's input
    # and output, the second Linear's input) at least
    assert nbytes >= 3 * 128 * 1024 * 4
    assert g.sites, "no allocation site with history recorded"
    assert any("test_owners_cuda.py" in s or "linear" in s.lower() or ".py:" in s
               for s, _, _ in g.sites)
    rep = tensorgc.MemReporter(model, optimizer=opt).collect(device=device, owners=True)
    held = {r.holder for r in rep.rows if r.holder}
    assert "tgc_cuda_leak.loss_history" in held
    assert "<svg" in rep.html()


def test_pytest_plugin_fails_a_cuda_leak(tmp_path):
    test = tmp_path / "test_leak.py"
    test.write_text(
        "import torch\n"
        "KEEP = []\n"
        "def test_keeps_a_cuda_tensor():\n"
        "    KEEP.append(torch.empty(1 << 20, device='cuda'))\n"
        "def test_frees_its_cuda_tensor():\n"
        "    t = torch.empty(1 << 20, device='cuda')\n"
        "    del t\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "tensorgc.pytest_plugin", "--tensorgc", str(test)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    print(r.stdout)
    assert r.returncode == 1
    # the leak fails its test at the teardown (an error there); the clean test passes
    assert "2 passed, 1 error" in r.stdout and "ERROR at teardown of test_keeps_a_cuda_tensor" \
        in r.stdout
    assert "test_leak.KEEP" in r.stdout and "4.00M" in r.stdout
