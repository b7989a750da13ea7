# Two tests of PyTorch's own suite, run against tensorgc: copied from pytorch/pytorch
# test/test_cuda.py at commit 000e43cdff99f30291164c1f2e90133f19fa83fb, class
# TestCudaMallocAsync, methods test_memory_snapshot and test_cycles (BSD-3-Clause, PyTorch's
# license). The file keeps its name: both tests look for "test_cuda" in the stacks they record.
#
# What differs from the original, and only that:
# - the imports: observe_tensor_cycles is tensorgc's (torch's: torch.utils.viz._cycles), and
#   _save_segment_usage tensorgc.flamegraph's; torch's test utilities need the expecttest
#   package, so where it is missing the few names used come from a fallback with torch's
#   definitions;
# - in test_memory_snapshot, the one call `torch.cuda.memory._save_segment_usage(f.name)` is
#   `_save_segment_usage(f.name)`, tensorgc's (torch's downloads flamegraph.pl from GitHub);
# - the class is a home for the two methods (no markDynamoStrictTest: no dynamo here).
# Both need CUDA and skip without it. An assertion in test_cycles' observer fails the test
# through tensorgc's pytest plugin (tensorgc.set_observer_errors("raise"), conftest.py loads
# the plugin), as torch's observer does.
import gc
import platform
import sys
import tempfile
import unittest
from random import randint

import torch

from tensorgc import observe_tensor_cycles
from tensorgc.flamegraph import _save_segment_usage

try:
    from torch.testing._internal.common_utils import (
        IS_LINUX,
        IS_WINDOWS,
        IS_X86,
        TEST_CUDA,
        TEST_CUDAMALLOCASYNC,
        TestCase,
    )
except ImportError:  # expecttest missing: torch's definitions of the same names
    from unittest import TestCase

    IS_LINUX = sys.platform == "linux"
    IS_WINDOWS = sys.platform == "win32"
    IS_X86 = platform.machine() in ("x86_64", "i386")
    TEST_CUDA = torch.cuda.is_available()
    TEST_CUDAMALLOCASYNC = TEST_CUDA and (
        torch.cuda.get_allocator_backend() == "cudaMallocAsync"
    )

requiresCppContext = unittest.skipUnless(
    IS_X86 and IS_LINUX, "cpp contexts are x86 linux only"
)


@unittest.skipIf(not TEST_CUDA, "CUDA not available, skipping tests")
class TestCudaMallocAsync(TestCase):
    @unittest.skipIf(
        TEST_CUDAMALLOCASYNC, "setContextRecorder not supported by CUDAMallocAsync"
    )
    def test_memory_snapshot(self):
        try:
            torch.cuda.memory.empty_cache()
            torch.cuda.memory._record_memory_history("state", stacks="python")
            # make x the second block in a segment
            torch.rand(2 * 311, 411, device="cuda")
            unused = torch.rand(310, 410, device="cuda")
            x = torch.rand(311, 411, device="cuda")

            # create a bunch of tensors that all will tile into the
            # same segment to  exercise the history merging code
            # 512B is the minimum block size,
            # so we allocate all the tensors to this size to make sure
            # they tile evenly
            tensors = [torch.rand(128, device="cuda") for _ in range(1000)]
            while tensors:
                del tensors[randint(0, len(tensors) - 1)]

            # exercise the history trimming code
            torch.rand(128 * 5, device="cuda")

            ss = torch.cuda.memory._snapshot()
            found_it = False
            for seg in ss["segments"]:
                self.assertTrue("frames" in seg)
                for b in seg["blocks"]:
                    if b["requested_size"] == 311 * 411 * 4:
                        self.assertTrue("test_cuda" in b["frames"][0]["filename"])
                        found_it = True
                        self.assertEqual(x.untyped_storage().data_ptr(), b["address"])
            self.assertTrue(found_it)

            if not IS_WINDOWS:
                with tempfile.NamedTemporaryFile() as f:
                    _save_segment_usage(f.name)
                    with open(f.name) as f2:
                        self.assertTrue("test_cuda.py" in f2.read())
            del unused
            del x
            torch.cuda.empty_cache()
            ss = torch.cuda.memory._snapshot()
            self.assertTrue(
                ss["device_traces"][0][-1]["action"]
                in ("segment_free", "segment_unmap")
            )

        finally:
            torch.cuda.memory._record_memory_history(None)

    @unittest.skipIf(
        TEST_CUDAMALLOCASYNC, "setContextRecorder not supported by CUDAMallocAsync"
    )
    @requiresCppContext
    def test_cycles(self):
        fired = False

        def observer(html):
            nonlocal fired
            fired = True
            self.assertTrue("torch.Tensor" in html)
            self.assertTrue("test_cuda" in html)
            self.assertTrue("cell_contents" in html)

        disarm = observe_tensor_cycles(observer)

        def noop():
            pass

        try:

            def create():
                x = torch.empty(3, 4, device="cuda")

                def foo(p):
                    if p:
                        return foo(not p)
                    else:
                        return x

                return foo

            create()
            gc.collect()
            # the callback has to run outside of the collect
            # call so it doesn't actual fire until the next
            # method call after a gc.collect
            noop()
            self.assertTrue(fired)
        finally:
            disarm()
