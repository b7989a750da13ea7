"""The allocator engine (allocator/blocks.c through _alloc_attribute) on synthetic snapshots in
torch's format, so block attribution and the sums run in CI without a GPU; and the device query
without a driver."""
import pytest

from tensorgc import _tensorgc
from tensorgc import allocator

MB = 1 << 20


def seg(device, addr, blocks, with_addresses=True):
    total = sum(b[0] for b in blocks)
    out, at = [], addr
    for size, state, *rest in blocks:
        b = {"size": size, "requested_size": rest[0] if rest else size, "state": state,
             "frames": rest[1] if len(rest) > 1 else []}
        if with_addresses:
            b["address"] = at
        out.append(b)
        at += size
    return {"device": device, "address": addr, "total_size": total, "stream": 0,
            "segment_type": "large", "blocks": out}


FRAME = [{"filename": "/home/u/train.py", "line": 42, "name": "step"}]


def snapshot():
    return [
        # a split 20M segment: two live blocks, one freed between them (fragmentation)
        seg(0, 0x7000_0000, [(4 * MB, "active_allocated", 4 * MB - 100),
                             (4 * MB, "inactive"),
                             (4 * MB, "active_allocated", 4 * MB, FRAME),
                             (8 * MB, "active_allocated")]),
        # a whole free segment: releasable cache
        seg(0, 0x9000_0000, [(2 * MB, "inactive")]),
        seg(0, 0xA000_0000, [(512, "active_pending_free")]),
        seg(1, 0x7000_0000, [(1 * MB, "active_allocated")]),  # same address, other device
    ]


def test_attribution_and_sums():
    segs = snapshot()
    storages = [(0, 0x7000_0000, True),            # named, block 0
                (0, 0x7000_0000 + 100, False),     # a view into block 0: not counted again
                (0, 0x7000_0000 + 12 * MB, False),  # unnamed tensor, block 3
                (1, 0x7000_0000, True),            # device 1
                (0, 0x1234, True)]                 # not in any block
    per, totals, unseen = allocator.attribute(segs, storages)
    assert per[0] == (0, 0x7000_0000, 4 * MB, True)
    assert per[1] == (0, 0x7000_0000, 4 * MB, False)
    assert per[2][0] == 3 and per[2][3] is True
    assert per[3][0] == 6 and per[4] is None
    t = totals[0]
    assert t["reserved"] == 20 * MB + 2 * MB + 512
    assert t["allocated"] == 16 * MB
    assert t["requested"] == 16 * MB - 100
    assert t["inactive_split"] == 4 * MB and t["inactive_whole"] == 2 * MB
    assert t["pending_free"] == 512
    assert t["named"] == 4 * MB and t["seen"] == 12 * MB
    assert t["stack_attributed"] == 4 * MB and t["unattributed"] == 0
    assert t["seen"] + t["stack_attributed"] + t["unattributed"] == t["allocated"]
    assert totals[1]["allocated"] == totals[1]["named"] == 1 * MB
    assert unseen == [(2, 4 * MB, 0)]
    assert allocator.top_sites(segs, unseen) == [("/home/u/train.py:42 step", 4 * MB, 1)]


def test_blocks_without_addresses_tile_their_segment():
    segs = [seg(0, 0x1000_0000, [(MB, "inactive"), (MB, "active_allocated")], with_addresses=False)]
    per, totals, _ = allocator.attribute(segs, [(0, 0x1000_0000 + MB + 5, False)])
    assert per[0] == (1, 0x1000_0000 + MB, MB, True)
    assert totals[0]["inactive_split"] == MB


@pytest.mark.parametrize("bad", [
    "not a list",
    [1],
    [{"device": 0, "address": 0}],                                       # no total_size
    [{"device": 0, "address": 0, "total_size": 10, "blocks": "x"}],
    [{"device": 0, "address": 0, "total_size": 10, "blocks": [{"size": 10, "state": "weird"}]}],
    [{"device": 0, "address": 0, "total_size": 10, "blocks": [{"size": 20, "state": "inactive"}]}],
    [{"device": -1, "address": 0, "total_size": 10, "blocks": []}],
    [{"device": 0, "address": "0", "total_size": 10, "blocks": []}],
    [{"device": 0, "address": 2**64 - 1, "total_size": 10, "blocks": []}],
])
def test_malformed_snapshots_are_clear_errors(bad):
    with pytest.raises((ValueError, TypeError)):
        allocator.attribute(bad, []) if isinstance(bad, list) else _tensorgc._alloc_attribute(bad, [])


def test_bad_storages_are_type_errors():
    with pytest.raises(TypeError):
        _tensorgc._alloc_attribute(snapshot(), [("a", 1, True)])
    with pytest.raises(TypeError):
        _tensorgc._alloc_attribute(snapshot(), "x")


def test_device_query_without_a_driver_or_bad_ordinal():
    d = allocator.device_memory(0)
    assert set(d) >= {"ok", "total", "free", "process_used", "device_used", "error"}
    if not d["ok"]:
        assert d["error"]
    with pytest.raises(ValueError):
        _tensorgc._device_memory(-1)


def test_storages_changed_while_converting_are_safe():
    # "p" calls __bool__, which may resize the list: the C side works on a fixed copy
    grown, shrunk = [], []

    class Grow:
        def __bool__(self):
            grown.extend([(0, 1, True)] * 1000)
            return True

    class Shrink:
        def __bool__(self):
            shrunk.clear()
            return True

    grown.append((0, 0x7000_0000, Grow()))
    per, _, _ = _tensorgc._alloc_attribute(snapshot(), grown)
    assert len(per) == 1 and per[0][0] == 0
    shrunk.extend([(0, 1, Shrink()), (0, 2, True), (0, 3, True)])
    per, _, _ = _tensorgc._alloc_attribute(snapshot(), shrunk)
    assert per == [None, None, None]


def test_snapshot_dicts_changed_during_lookup_are_safe():
    # a key whose hash collides with "size" runs __eq__ during the lookup, which drops the
    # segment's blocks list: the C side holds its own references
    segment = {}

    class Key:
        def __hash__(self):
            return hash("size")

        def __eq__(self, other):
            segment.pop("blocks", None)
            return False

    segment.update(device=0, address=0x1000, total_size=100,
                   blocks=[{Key(): 0, "size": 4, "state": "active_allocated"} for _ in range(3)])
    _, totals, _ = _tensorgc._alloc_attribute([segment], [])
    assert totals[0]["allocated"] == 12


def test_device_ordinal_is_not_truncated():
    with pytest.raises(ValueError):
        _tensorgc._device_memory(2**32 + 1)  # not device 1
    with pytest.raises((ValueError, OverflowError)):
        _tensorgc._device_memory(2**64)


def test_tensor_rows_survive_a_list_changed_by_torch_function():
    # (the reporter's binding, kept here with the other untrusted-input tests)
    torch = pytest.importorskip("torch")
    tensors = []

    class Clearing(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            tensors.clear()
            return super().__torch_function__(func, types, args, kwargs or {})

    tensors.extend([torch.zeros(3).as_subclass(Clearing), torch.zeros(2), torch.zeros(4)])
    rows = _tensorgc._tensor_rows(tensors)
    assert [r[7] for r in rows] == [3, 2, 4]
