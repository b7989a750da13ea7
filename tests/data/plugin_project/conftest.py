"""A small project's fixtures, for tensorgc's pytest plugin (tests/test_pytest_plugin.py runs
it): what each scope's fixture holds, and what a test may leave in it."""
import pytest
import torch


@pytest.fixture(scope="session")
def weights():
    """Made once and kept for the whole run: not any test's leak."""
    return torch.ones(1024)


@pytest.fixture(scope="session")
def cache():
    """Filled lazily by the tests that use it: what a test puts here outlives it."""
    return {}


@pytest.fixture(scope="module")
def table():
    """Set up by a module's first test, torn down after its last."""
    rows = [torch.zeros(256)]
    yield rows
    rows.clear()


@pytest.fixture
def scratch():
    """A test's own buffers: torn down with the test, and what it put here with them."""
    return [torch.empty(4096)]
