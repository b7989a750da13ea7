"""MemReporter against the CUDA caching allocator and the driver: block attribution, totals equal
to torch.cuda.memory_allocated(), driver/NVML numbers consistent with torch.cuda.mem_get_info,
fragmentation, and accuracy with the autograd graph alive. Needs a GPU (skipped otherwise)."""
import gc

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

from _util import clean_cuda_memory
from tensorgc import MemReporter, allocator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
MB = 1 << 20


@pytest.fixture(autouse=True)
def clean_cuda():
    clean_cuda_memory()
    yield
    gc.collect()
    torch.cuda.empty_cache()


def owned_elsewhere():
    """Bytes allocated before the test that no tensor owns: cuBLAS keeps its workspaces in the
    caching allocator once a matmul ran (32 MB per handle and stream on recent GPUs), one for
    this thread and one for the autograd engine's thread that runs backward."""
    a = torch.ones(8, 8, device="cuda", requires_grad=True)
    (a @ a).sum().backward()
    del a
    gc.collect()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated(0)


def net(layers=8, width=256):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).cuda()


def test_blocks_are_attributed_and_total_is_memory_allocated():
    base = owned_elsewhere()
    m = net()
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(16, 256, device="cuda")).sum().backward()
    opt.step()
    rep = MemReporter(m, optimizer=opt).collect(device="cuda:0")
    t = rep.totals["cuda:0"]
    assert t["allocated"] == torch.cuda.memory_allocated(0)
    assert t["reserved"] == torch.cuda.memory_reserved(0)
    w = next(r for r in rep.rows if r.name == "0.weight")
    assert w.block_bytes >= w.storage_bytes == 256 * 256 * 4 and w.block_bytes % 512 == 0
    # every named storage lies in an allocated block, counted once
    assert t["named"] == sum(r.block_bytes for r in rep.rows if r.kind != "other")
    assert t["seen"] + t["stack_attributed"] + t["unattributed"] == t["allocated"]
    # parameters, grads and Adam's moments: each in its own block, all of them named
    expected = sum(p.untyped_storage().nbytes() * (1 + 1 + 2) for p in m.parameters())
    assert expected <= t["named"] <= t["allocated"] - base


def test_driver_and_nvml_agree_with_mem_get_info():
    x = torch.empty(64 * MB, dtype=torch.uint8, device="cuda")
    free, total = torch.cuda.mem_get_info(0)
    d = allocator.device_memory(0)
    assert d["ok"], d["error"]
    assert d["total"] == total
    assert abs(d["free"] - free) <= 64 * MB  # other processes may allocate meanwhile
    if d["process_used"] >= 0:
        assert d["process_used"] >= torch.cuda.memory_reserved(0)
    assert d["device_used"] >= torch.cuda.memory_reserved(0)
    rep = MemReporter().collect(device="cuda")
    t = rep.totals["cuda:0"]
    assert t["device_total"] == total
    if t["process_used"] >= 0:
        assert t["non_pytorch"] == t["process_used"] - t["reserved"] >= 0
    del x


def test_fragmentation_is_reported_as_inactive_split():
    # Three 4 MB tensors share one 20 MB segment of the large pool; freeing the middle one
    # leaves a free block that cannot be released while its neighbours live.
    a = torch.empty(4 * MB, dtype=torch.uint8, device="cuda")
    b = torch.empty(4 * MB, dtype=torch.uint8, device="cuda")
    c = torch.empty(4 * MB, dtype=torch.uint8, device="cuda")
    del b
    stats = torch.cuda.memory_stats(0)
    rep = MemReporter().collect(device="cuda:0")
    t = rep.totals["cuda:0"]
    assert t["inactive_split"] == stats["inactive_split_bytes.all.current"] >= 4 * MB
    assert "inactive splits (fragmentation)" in rep.text
    del a, c


def test_saved_for_backward_accounts_for_the_graph():
    base = owned_elsewhere()
    m = net(layers=10, width=512)
    x = torch.randn(64, 512, device="cuda")
    seen = {}

    def hook(mod, inp, out):
        rep = MemReporter(m).collect(device="cuda:0")
        seen["rep"] = rep

    h = m[6].register_forward_hook(hook)
    out = m(x)
    h.remove()
    rep = seen.pop("rep")
    t = rep.totals["cuda:0"]
    saved = [r for r in rep.rows if r.kind == "saved_for_backward"]
    assert len([r for r in saved if "(mat1)" in r.name]) >= 6
    assert t["seen"] >= 0.99 * (t["allocated"] - base)
    assert t["seen"] + t["stack_attributed"] + t["unattributed"] == t["allocated"]
    del out


def test_unnamed_blocks_show_their_allocation_site_when_history_is_recorded():
    torch.cuda.memory._record_memory_history(max_entries=1000)
    ptr = None
    try:
        ptr = torch.cuda.caching_allocator_alloc(3 * MB)  # a block no tensor owns
        rep = MemReporter().collect(device="cuda:0")
        t = rep.totals["cuda:0"]
        assert t["stack_attributed"] >= 3 * MB
        assert t["seen"] + t["stack_attributed"] + t["unattributed"] == t["allocated"]
        sites = rep.sites["cuda:0"]
        assert any("test_reporter_cuda.py" in site and nbytes >= 3 * MB for site, nbytes, _ in sites)
        assert "unnamed blocks by allocation site" in rep.text
    finally:
        if ptr is not None:
            torch.cuda.caching_allocator_delete(ptr)
        torch.cuda.memory._record_memory_history(enabled=None)
