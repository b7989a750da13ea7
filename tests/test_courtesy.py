"""Courtesy on the CPU (device="cpu": the host copy is a plain CPU storage): the whole mechanism
-- the walk, grads and view bases, grouping by storage, the copies, re-pointing in place,
restore -- checked bit for bit, with views, tied parameters, optimizer state, parameters without
grads, every dtype, skips, the context manager and the yield/restore state machine.
tests/test_courtesy_cuda.py checks the device side (memory freed, pinned copies)."""
import gc
import logging
import warnings

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these
import numpy as np  # noqa: E402  (torch brings it)

from _util import model_tensors
from tensorgc import courtesy as courtesy_mod
from tensorgc.courtesy import Courtesy, Moved

# bit patterns that `==` cannot check: NaN payloads (quiet and signalling, both signs), -0.0,
# infinities, a denormal
F32_BITS = [0x7FC00001, 0xFFC12345, 0x7F800001, 0x80000000, 0x00000000, 0x7F800000, 0xFF800000,
            0x00000001, 0x3F800000, 0x7FFFFFFF]


def special_f32(n=16):
    bits = (F32_BITS * (n // len(F32_BITS) + 1))[:n]
    return torch.tensor(np.array(bits, dtype=np.uint32).view(np.int32)).view(torch.float32)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.lin = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight                 # tied: one Parameter, two names
        self.frozen = torch.nn.Parameter(special_f32().reshape(4, 4), requires_grad=False)
        self.unused = torch.nn.Parameter(torch.randn(5))   # not in forward: grad stays None
        self.register_buffer("special", special_f32(64))
        self.register_buffer("flags", torch.tensor([True, False, True, True]))
        self.register_buffer("cplx", torch.randn(3, dtype=torch.complex64))

    def forward(self, idx):
        return self.head(torch.relu(self.lin(self.emb(idx))))


def build(seed=0):
    torch.manual_seed(seed)
    m = Net()
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    return m, opt


def step(m, opt, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 16, (6,), generator=g)
    opt.zero_grad(set_to_none=False)
    m(idx).square().mean().backward()
    opt.step()


def storage_bytes(t):
    """The whole storage's bytes, as a uint8 tensor copy (not `==` on values: NaN, -0.0)."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).clone()


def bits_equal(a, b):
    return a.dtype == b.dtype == torch.uint8 and a.shape == b.shape and torch.equal(a, b)


def as_bytes(t):
    """A Python bytes copy of a tensor's elements: survives a yield (it is no tensor). Through a
    clone: .numpy() marks the storage it shares as not resizable, which Courtesy skips."""
    t = t.detach()
    t = t.resolve_conj().resolve_neg()
    return t.reshape(-1).clone().view(torch.uint8).numpy().tobytes()


def everything(m, opt):
    """{name: tensor} for every tensor of the model and optimizer, grads included."""
    return model_tensors(m, opt)


@pytest.fixture
def trained():
    m, opt = build()
    step(m, opt)
    return m, opt


def test_round_trip_is_exact_and_training_continues(trained):
    m, opt = trained
    w = m.lin.weight
    with torch.no_grad():
        view = w[2:5]                  # contiguous view of a parameter
        ncv = w[:, ::2]                # non-contiguous view
        gview = w.grad[1]              # view of a grad
    vb = m.lin.bias[1:]                # a view that requires grad (non-leaf, SliceBackward)
    twin = torch.nn.Parameter(m.emb.weight.detach())  # tied by storage, another object
    assert m.unused.grad is None and not m.frozen.requires_grad
    tensors = everything(m, opt)
    tensors.update(view=view, ncv=ncv, gview=gview, vb=vb, twin=twin)
    before = {n: storage_bytes(t) for n, t in tensors.items()}
    ptrs = {n: t.untyped_storage().data_ptr() for n, t in tensors.items()}
    versions = {n: t._version for n, t in tensors.items()}
    ids = {n: id(t) for n, t in tensors.items()}
    params_in_opt = [id(p) for g in opt.param_groups for p in g["params"]]
    ncv_stride = ncv.stride()

    # the expected step after this one, computed on an identical copy and kept as bytes
    m2, opt2 = build()
    step(m2, opt2)
    step(m2, opt2, seed=2)
    expected = {n: as_bytes(p) for n, p in m2.named_parameters()}
    del m2, opt2
    gc.collect()

    c = Courtesy(device="cpu")
    moved = c.yield_memory()
    assert isinstance(moved, Moved) and c.yielded
    assert moved.tensors >= len({id(t) for t in tensors.values()})
    assert moved.storages >= len(set(ptrs.values())) and moved.skipped == 0
    for n, t in tensors.items():
        assert t.untyped_storage().data_ptr() != ptrs[n], n   # every storage is a new one
        assert t.device.type == "cpu" and not t.is_pinned(), n
        assert t._version == versions[n], n                  # no version bump: no set_ on t
    # same objects: the module, the optimizer and the views still hold them
    assert m.lin.weight is w and m.head.weight is m.emb.weight
    assert [id(p) for g in opt.param_groups for p in g["params"]] == params_in_opt
    assert all(id(t) == ids[n] for n, t in tensors.items())
    assert isinstance(m.lin.weight, torch.nn.Parameter) and w.requires_grad
    assert not m.frozen.requires_grad and m.unused.grad is None
    # views alias their base: write through one, read through the other, put the bits back
    assert view._base is w and ncv._base is w and ncv.stride() == ncv_stride
    assert view.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    with torch.no_grad():
        old = view[0, 0].clone()
        view[0, 0] = 123.0
        assert w[2, 0].item() == 123.0
        old2 = w[4, 6].clone()
        w[4, 6] = -7.0
        assert ncv[4, 3].item() == -7.0
        old3 = w.grad[1, 1].clone()
        w.grad[1, 1] = 5.0
        assert gview[1].item() == 5.0
        view[0, 0] = old
        w[4, 6] = old2
        w.grad[1, 1] = old3
    assert twin.untyped_storage().data_ptr() == m.emb.weight.untyped_storage().data_ptr()
    assert vb.untyped_storage().data_ptr() == m.lin.bias.untyped_storage().data_ptr()
    yielded_ptrs = {n: t.untyped_storage().data_ptr() for n, t in tensors.items()}
    versions = {n: t._version for n, t in tensors.items()}  # the writes above bumped some

    restored = c.restore()
    assert not c.yielded
    assert restored.nbytes == moved.nbytes and restored.storages == moved.storages
    assert restored.tensors == moved.tensors and restored.skipped == 0
    for n, t in tensors.items():
        assert bits_equal(storage_bytes(t), before[n]), n          # bit for bit
        assert t.untyped_storage().data_ptr() != yielded_ptrs[n], n
        assert t._version == versions[n], n
    assert m.head.weight is m.emb.weight
    assert twin.untyped_storage().data_ptr() == m.emb.weight.untyped_storage().data_ptr()
    assert view._base is w and view.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    assert ncv.stride() == ncv_stride and ncv.storage_offset() == 0
    assert as_bytes(m.special) == as_bytes(special_f32(64))  # NaN payloads, -0.0 kept
    assert as_bytes(m.frozen) == as_bytes(special_f32().reshape(4, 4))
    with torch.no_grad():
        w[0, 0] += 0.0
    assert m.head.weight.grad is m.emb.weight.grad

    # training continues, bit for bit as without the round trip
    del view, ncv, gview, vb, twin, tensors
    step(m, opt, seed=2)
    for n, p in m.named_parameters():
        assert as_bytes(p) == expected[n], n


def oracle(device_type="cpu"):
    """Independent of the C walk: gc.get_objects() plus grads and bases, unique storages."""
    seen, out = set(), []
    todo = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        out.append(t)
        if t._base is not None:
            todo.append(t._base)
        if t.is_leaf and t.grad is not None:
            todo.append(t.grad)
    return [t for t in out if t.device.type == device_type and t.layout == torch.strided
            and not t.is_quantized]


def test_bytes_reported_are_the_unique_storages(trained):
    m, opt = trained
    with torch.no_grad():
        v1, v2 = m.lin.weight[1], m.lin.weight.t()
    ts = oracle()
    old = [(t, t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in ts]
    model_ptrs = {t.untyped_storage().data_ptr() for t in everything(m, opt).values()}
    c = Courtesy("cpu")
    moved = c.yield_memory()
    changed = {}  # old data_ptr -> nbytes, each storage once
    for t, ptr, nb in old:
        if ptr and t.untyped_storage().data_ptr() != ptr:
            changed[ptr] = max(nb, changed.get(ptr, 0))
    assert model_ptrs <= set(changed)
    assert moved.nbytes == sum(changed.values())
    assert moved.storages >= len(changed)  # (+ zero-byte storages, which have no address)
    sum_model = sum(s.nbytes() for s in {t.untyped_storage().data_ptr(): t.untyped_storage()
                                         for t in everything(m, opt).values()}.values())
    assert sum_model <= moved.nbytes
    assert c.restore().nbytes == moved.nbytes
    del ts, old, v1, v2


def test_context_manager_restores_on_exception(trained):
    m, opt = trained
    before = {n: storage_bytes(t) for n, t in everything(m, opt).items()}
    ptr = m.lin.weight.data_ptr()
    with pytest.raises(KeyError, match="inside"):
        with Courtesy(device="cpu") as c:
            assert c.yielded and c.moved.storages > 0
            assert m.lin.weight.data_ptr() != ptr
            raise KeyError("inside")
    assert not c.yielded and c.restored.nbytes == c.moved.nbytes
    for n, t in everything(m, opt).items():
        assert bits_equal(storage_bytes(t), before[n]), n
    # a manual restore inside the block: the exit's restore is a no-op
    with Courtesy(torch.device("cpu")) as c2:
        c2.restore()
    assert c2.restored == Moved(0, 0, 0, 0)


def test_double_yield_raises_and_double_restore_is_a_noop(trained):
    m, opt = trained
    c = Courtesy("cpu")
    assert c.restore() == Moved(0, 0, 0, 0)  # nothing yielded yet
    first = c.yield_memory()
    ptr = m.lin.weight.data_ptr()
    with pytest.raises(RuntimeError, match="already yielded"):
        c.yield_memory()
    assert c.yielded and m.lin.weight.data_ptr() == ptr  # nothing moved twice
    assert "yielded" in repr(c)
    assert c.restore().nbytes == first.nbytes
    assert c.restore() == Moved(0, 0, 0, 0)
    assert c.restored == Moved(0, 0, 0, 0)
    # and it can be used again
    again = c.yield_memory()
    assert again.storages > 0
    c.restore()


def test_every_dtype_and_layout_bit_for_bit():
    g = torch.Generator().manual_seed(3)
    ts = {}
    for dt in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
               torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64,
               torch.complex128):
        raw = torch.randint(0, 256, (48,), dtype=torch.uint8, generator=g)
        ts[str(dt)] = raw.view(dt) if dt != torch.bool else raw % 2 == 1
    for name in [n for n in ts if "complex" in n]:
        ts[name + ".conj"] = ts[name].conj()            # conj bit, sharing the storage
    ts["neg"] = torch._neg_view(ts["torch.complex128"])   # neg bit
    ts["cl"] = torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last)
    ts["scalar"] = torch.tensor(-0.0)
    ts["empty"] = torch.empty(0)
    with torch.inference_mode():
        ts["inference"] = torch.randn(4, generator=g)
    for name in [n for n in ts if not n.endswith((".conj", "neg", "empty", "scalar"))]:
        ts[name + ".T"] = ts[name].t() if ts[name].dim() == 2 else ts[name][1:]
    flags = {n: (t.is_conj(), t.is_neg(), t.is_inference(), t.stride(), t.storage_offset(),
                 t.dtype) for n, t in ts.items()}
    before = {n: storage_bytes(t) for n, t in ts.items()}
    values = {n: as_bytes(t) for n, t in ts.items()}
    with Courtesy("cpu") as c:
        assert c.moved.skipped == 0
        for n, t in ts.items():
            assert flags[n] == (t.is_conj(), t.is_neg(), t.is_inference(), t.stride(),
                                t.storage_offset(), t.dtype), n
            assert as_bytes(t) == values[n], n
            if t.numel():
                assert bits_equal(storage_bytes(t), before[n]), n
    assert c.restored.skipped == 0
    for n, t in ts.items():
        assert flags[n] == (t.is_conj(), t.is_neg(), t.is_inference(), t.stride(),
                            t.storage_offset(), t.dtype), n
        assert bits_equal(storage_bytes(t), before[n]), n
        assert as_bytes(t) == values[n], n
    assert ts["torch.complex64.conj"].untyped_storage().data_ptr() == \
        ts["torch.complex64"].untyped_storage().data_ptr()


def test_unmovable_tensors_are_skipped_with_a_warning(caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    arr = np.arange(6, dtype=np.float32)
    from_np = torch.from_numpy(arr)                           # storage not resizable
    sparse = torch.randn(4, 4).to_sparse()                     # no plain storage
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized creation functions are deprecated
        quant = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    meta = torch.empty(3, 3, device="meta")
    plain = torch.randn(5)
    ptrs = (from_np.data_ptr(), quant.untyped_storage().data_ptr(), plain.data_ptr())
    dense = sparse.to_dense()
    with Courtesy("cpu") as c:
        assert c.moved.skipped >= 3
        assert (from_np.data_ptr(), quant.untyped_storage().data_ptr()) == ptrs[:2]
        assert plain.data_ptr() != ptrs[2]
        arr[0] = 42.0
        assert from_np[0].item() == 42.0                       # still numpy's memory
        assert torch.equal(sparse.to_dense(), dense) and meta.device.type == "meta"
    text = caplog.text
    assert "not resizable" in text and "sparse" in text and "quantized" in text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_saved_output_of_a_live_graph_is_skipped_and_backward_still_works(caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    torch.manual_seed(5)
    a = torch.nn.Parameter(torch.randn(3, 3))
    x = torch.randn(3, 3)
    g_ref = torch.autograd.grad((x @ a).exp().sum(), a)[0]
    e = (x @ a).exp()                 # exp saves its output: a tensor only the graph holds
    loss = e.sum()
    a_ptr, e_ptr, a_ver = a.data_ptr(), e.data_ptr(), a._version
    with Courtesy("cpu") as c:
        assert a.data_ptr() != a_ptr  # saved as an input: the same tensor, moved
        assert e.data_ptr() == e_ptr  # its storage has a holder the walk cannot see
        assert c.moved.skipped >= 1
    assert "walk cannot see" in caplog.text
    assert a._version == a_ver
    loss.backward()                   # no "modified by an inplace operation"
    assert bits_equal(a.grad.view(torch.uint8), g_ref.view(torch.uint8))


def fail_once(monkeypatch, victim):
    """Courtesy's re-pointing raises once, for `victim`; the real one otherwise."""
    real = courtesy_mod._repoint
    calls = {"n": 0}

    def flaky(t, storage):
        if t is victim and calls["n"] == 0:
            calls["n"] += 1
            raise RuntimeError("boom")
        return real(t, storage)

    monkeypatch.setattr(courtesy_mod, "_repoint", flaky)


def test_a_group_that_cannot_be_repointed_is_put_back(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    base = torch.randn(6)
    victim = base[1:4]
    other = torch.randn(7)
    ptrs = (base.data_ptr(), victim.data_ptr(), other.data_ptr())
    before = storage_bytes(base)
    fail_once(monkeypatch, victim)
    c = Courtesy("cpu")
    moved = c.yield_memory()
    assert (base.data_ptr(), victim.data_ptr()) == ptrs[:2]   # the whole group went back
    assert bits_equal(storage_bytes(base), before) and victim._base is base
    assert other.data_ptr() != ptrs[2] and moved.skipped >= 2
    assert "could not be re-pointed (RuntimeError: boom)" in caplog.text
    c.restore()
    assert bits_equal(storage_bytes(base), before)


def test_changed_while_yielded_is_left_alone_and_dropped_tensors_come_back(caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    kept = torch.randn(4)
    replaced = torch.randn(4)
    grown = torch.zeros(4)
    dropped = torch.randn(1000)
    kept_bits = storage_bytes(kept)
    c = Courtesy("cpu")
    c.yield_memory()
    replaced.data = torch.full((4,), 3.0)          # a new storage while yielded: kept as is
    with torch.no_grad():
        kept.mul_(1.0)                             # in-place on the host copy: kept
        grown.resize_(64).fill_(1.0)               # the host storage grows while yielded
    del dropped
    r = c.restore()
    assert r.skipped == 1 and "storage replaced while yielded" in caplog.text
    assert torch.equal(replaced, torch.full((4,), 3.0))
    assert bits_equal(storage_bytes(kept), kept_bits)
    assert grown.shape == (64,) and bool((grown == 1.0).all())


def test_device_filter():
    for bad in ("meta", 2.5, None):
        with pytest.raises(ValueError):
            Courtesy(bad)
    t = torch.randn(8)
    ptr = t.data_ptr()
    c = Courtesy()                                  # memlab's: every CUDA tensor
    moved = c.yield_memory()
    if not torch.cuda.is_available():
        assert moved == Moved(0, 0, 0, 0)
    assert t.data_ptr() == ptr                      # CPU tensors untouched
    c.restore()
    assert Courtesy("cuda:0").device == "cuda:0"
    with Courtesy("cpu", pin_memory=True):          # no pinning for CPU sources: no CUDA needed
        assert t.data_ptr() != ptr and not t.is_pinned()
    assert t.device.type == "cpu"


def test_a_failed_restore_leaves_everything_yielded_and_can_be_retried(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    x = torch.randn(100)
    y = x[10:20]
    bits = storage_bytes(x)
    c = Courtesy("cpu")
    c.yield_memory()
    host_ptr = x.data_ptr()

    def no_memory(storage):  # the device storage cannot be had (another job took it)
        raise torch.OutOfMemoryError("no memory")

    monkeypatch.setattr(courtesy_mod, "_bytes_of", no_memory)
    with pytest.raises(torch.OutOfMemoryError):
        c.restore()
    assert c.yielded and x.data_ptr() == host_ptr and y._base is x
    monkeypatch.undo()
    # a tensor that cannot be re-pointed back: its group stays on the host, the rest comes back
    fail_once(monkeypatch, y)
    with pytest.raises(RuntimeError, match="call restore.. again"):
        c.restore()
    assert c.yielded and x.data_ptr() == host_ptr and "boom" in caplog.text
    assert c.restored.storages >= 1  # the others came back
    r = c.restore()
    assert not c.yielded and r.storages == 1 and r.tensors == 2
    assert x.data_ptr() != host_ptr and y._base is x and bits_equal(storage_bytes(x), bits)
