"""Courtesy on CUDA: while yielded the device's allocated memory falls to what no tensor owns
(cuBLAS workspaces), the cache is released, the host copies are pinned; restore() is bit-exact
and on the same device index, and training goes on. Runs with TENSORGC_TEST_DEVICE=cuda on a
machine with a GPU (skipped otherwise); tests/test_courtesy.py runs the same mechanism on the
CPU."""
import gc

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these
import numpy as np  # noqa: E402  (torch brings it)

from _util import IS_CUDA, clean_cuda_memory, model_tensors
from tensorgc.courtesy import Courtesy, Moved

pytestmark = pytest.mark.skipif(not (IS_CUDA and torch.cuda.is_available()),
                                reason="needs TENSORGC_TEST_DEVICE=cuda and a GPU")
MB = 1 << 20
F32_BITS = [0x7FC00001, 0xFFC12345, 0x7F800001, 0x80000000, 0x00000001, 0x7F800000]


@pytest.fixture(autouse=True)
def clean_cuda():
    clean_cuda_memory()
    yield
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def special_f32(n):
    bits = (F32_BITS * (n // len(F32_BITS) + 1))[:n]
    return torch.tensor(np.array(bits, dtype=np.uint32).view(np.int32)).view(torch.float32)


class Net(torch.nn.Module):
    # 16 MiB weights: each in a segment of its own, which empty_cache() can release whole
    def __init__(self, width=2048, layers=4):
        super().__init__()
        self.emb = torch.nn.Embedding(512, width)
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
        self.head = torch.nn.Linear(width, 512, bias=False)
        self.head.weight = self.emb.weight                    # tied
        self.frozen = torch.nn.Parameter(torch.randn(64, 64), requires_grad=False)
        self.unused = torch.nn.Parameter(torch.randn(1000))   # grad stays None
        self.register_buffer("special", special_f32(1000))
        self.register_buffer("flags", torch.rand(999) > 0.5)
        self.register_buffer("cplx", torch.randn(77, dtype=torch.complex64))

    def forward(self, idx):
        return self.head(torch.relu(self.layers(self.emb(idx))))


def build(device, seed=0):
    torch.manual_seed(seed)
    m = Net().to(device)
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3)
    return m, opt


def step(m, opt, device, seed=1):
    g = torch.Generator(device="cpu").manual_seed(seed)
    idx = torch.randint(0, 512, (32,), generator=g).to(device)
    opt.zero_grad(set_to_none=False)
    m(idx).float().square().mean().backward()
    opt.step()


def baseline(device):
    """memory_allocated once everything that is no tensor exists: cuBLAS/cuBLASLt workspaces of
    this thread and of the autograd engine's thread, made by a throwaway training step."""
    m, opt = build(device)
    step(m, opt, device)
    del m, opt
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)


def storage_bytes(t):
    """The whole storage's bytes on the CPU (a CPU tensor: Courtesy("cuda") leaves it)."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=s.device).set_(s).cpu().clone()


def bits_equal(a, b):
    return a.dtype == b.dtype == torch.uint8 and a.shape == b.shape and torch.equal(a, b)


def everything(m, opt):
    return model_tensors(m, opt, device_type="cuda")


@pytest.mark.parametrize("which", ["cuda", "cuda:0", "device"])
def test_yield_frees_the_device_and_restore_is_exact(which):
    dev = torch.device("cuda", 0)
    flt = torch.device("cuda", 0) if which == "device" else which
    base_alloc, _ = baseline(dev)
    m, opt = build(dev)
    step(m, opt, dev)
    w = m.layers[0].weight
    with torch.no_grad():
        view, ncv = w[10:20], w[:, ::3]
    tensors = everything(m, opt)
    tensors.update(view=view, ncv=ncv)
    assert m.unused.grad is None and "unused.grad" not in tensors
    before = {n: storage_bytes(t) for n, t in tensors.items()}
    versions = {n: t._version for n, t in tensors.items()}
    unique = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
              for t in tensors.values()}
    model_bytes = sum(unique.values())
    torch.cuda.synchronize(dev)
    alloc_before = torch.cuda.memory_allocated(dev)
    reserved_before = torch.cuda.memory_reserved(dev)
    assert alloc_before - base_alloc >= model_bytes

    c = Courtesy(device=flt)
    moved = c.yield_memory()
    alloc_yielded = torch.cuda.memory_allocated(dev)
    reserved_yielded = torch.cuda.memory_reserved(dev)
    # everything the model had is gone from the device; what is left was there before it
    assert alloc_yielded - base_alloc < 1 * MB, (alloc_yielded, base_alloc, model_bytes)
    # and the cache gave it back (empty_cache)
    assert reserved_yielded < reserved_before
    assert reserved_before - reserved_yielded >= model_bytes // 2, (reserved_before,
                                                                     reserved_yielded)
    assert moved.nbytes >= model_bytes and moved.storages >= len(unique)
    for n, t in tensors.items():
        assert t.device.type == "cpu", n
        assert t.is_pinned(), n                                  # pinned host copies
        assert t._version == versions[n], n
    assert m.head.weight is m.emb.weight and view._base is w
    with torch.no_grad():                                        # views alias on the host
        old = view[0, 0].clone()
        view[0, 0] = 5.0
        assert w[10, 0].item() == 5.0
        view[0, 0] = old

    restored = c.restore()
    assert restored.nbytes == moved.nbytes and restored.storages == moved.storages
    assert restored.tensors == moved.tensors
    torch.cuda.synchronize(dev)
    assert torch.cuda.memory_allocated(dev) - base_alloc >= model_bytes
    for n, t in tensors.items():
        assert t.device == dev and not t.is_pinned(), n          # the same device index
        assert bits_equal(storage_bytes(t), before[n]), n        # bit for bit
    assert m.head.weight.untyped_storage().data_ptr() == m.emb.weight.untyped_storage().data_ptr()
    assert view.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    assert ncv.stride() == (w.stride(0), 3)
    step(m, opt, dev, seed=2)                                    # training goes on
    assert all(torch.isfinite(p).all() for p in m.layers.parameters())


def test_context_manager_on_cuda_and_exception():
    dev = torch.device("cuda", 0)
    m, opt = build(dev)
    step(m, opt, dev)
    before = {n: storage_bytes(t) for n, t in everything(m, opt).items()}
    with pytest.raises(RuntimeError, match="inside"):
        with Courtesy("cuda:0") as c:
            assert c.moved.storages > 0 and m.emb.weight.is_pinned()
            raise RuntimeError("inside")
    assert not c.yielded and c.restored.nbytes == c.moved.nbytes
    for n, t in everything(m, opt).items():
        assert t.device == dev and bits_equal(storage_bytes(t), before[n]), n
    assert c.restore() == Moved(0, 0, 0, 0)


def test_writes_on_a_side_stream_are_in_the_host_copy():
    dev = torch.device("cuda", 0)
    x = torch.zeros(16 * MB // 4, device=dev)
    s = torch.cuda.Stream(dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        for _ in range(20):
            x.add_(1.0)                       # still running on the side stream at yield
    with Courtesy("cuda") as c:
        assert x.is_pinned() and bool((x == 20.0).all())
    assert c.restored.storages >= 1 and bool((x == 20.0).all())


def test_backward_after_round_trip_with_a_live_graph():
    dev = torch.device("cuda", 0)
    torch.manual_seed(3)
    a = torch.nn.Parameter(torch.randn(256, 256, device=dev))
    x = torch.randn(64, 256, device=dev)
    g_ref = torch.autograd.grad(torch.tanh(x @ a).sum(), a)[0]
    loss = torch.tanh(x @ a).sum()          # a saved as an input, tanh's output only in C++
    with Courtesy("cuda"):
        assert a.device.type == "cpu"
    loss.backward()
    assert a.grad.device == dev
    assert bits_equal(a.grad.view(torch.uint8).cpu(), g_ref.view(torch.uint8).cpu())


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_each_storage_goes_back_to_its_own_device():
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    a = torch.randn(1000, device=d0)
    b = torch.randn(1000, device=d1)
    a_bits, b_bits = storage_bytes(a), storage_bytes(b)
    with Courtesy("cuda:1") as c:
        assert a.device == d0 and b.device.type == "cpu" and c.moved.storages >= 1
    assert b.device == d1 and bits_equal(storage_bytes(b), b_bits)
    with Courtesy("cuda"):
        assert a.device.type == "cpu" and b.device.type == "cpu"
    assert a.device == d0 and b.device == d1
    assert bits_equal(storage_bytes(a), a_bits) and bits_equal(storage_bytes(b), b_bits)


def test_pageable_host_memory_when_asked():
    dev = torch.device("cuda", 0)
    x = torch.randn(3 * MB + 5, device=dev)  # not a power of two
    bits = storage_bytes(x)
    with Courtesy("cuda:0", pin_memory=False) as c:
        assert x.device.type == "cpu" and not x.is_pinned()
        assert c.moved.nbytes >= x.untyped_storage().nbytes()
    assert x.device == dev and bits_equal(storage_bytes(x), bits)
