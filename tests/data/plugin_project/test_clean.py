"""Tests that leave nothing alive once their fixtures are torn down."""
import torch


def test_frees_its_tensor():
    t = torch.ones(1 << 12)
    assert t.sum().item() == 1 << 12


def test_reads_the_weights(weights):
    assert (weights * 2).sum().item() == 2048


def test_fills_its_scratch_fixture(scratch):
    scratch.append(torch.ones(1 << 12))
    scratch.append(torch.zeros(1 << 12))
    assert len(scratch) == 3


def test_reads_the_module_table(table):
    assert table[0].numel() == 256
