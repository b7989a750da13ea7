"""Tests that leave tensors alive: in a module global, in a session fixture's cache and in a
module fixture the module's next test still uses; and one that fails on its own."""
import pytest
import torch

KEEP = []


def test_keeps_a_tensor_in_a_global():
    KEEP.append(torch.empty(1 << 14))


def test_fills_the_cache(cache):
    cache["features"] = torch.empty(3000)


def test_appends_to_the_module_table(table):
    table.append(torch.empty(5000))


def test_fails_on_its_own():
    KEEP.append(torch.empty(8))
    assert False, "its own failure"


@pytest.mark.tensorgc(min_bytes=1 << 20)
def test_leaves_less_than_its_limit():
    KEEP.append(torch.empty(16))


def test_reads_the_module_table_last(table, scratch):
    scratch.append(torch.ones(64))
    assert len(table) == 2
