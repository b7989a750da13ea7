"""Synthetic CUDA caching-allocator snapshots shaped like a real training run, with the true
category of every allocation: the input of the tests (and bench scripts) of the timeline's
categories, which must work from what torch alone records.

    from _traces import make_trace
    g = make_trace(layers=6, steps=3, d_model=512, optimizer="adamw", stacks="all", seed=0)
    g.snapshot        # a dict of torch.cuda.memory._snapshot()'s shape
    g.category_of(i)  # the true category of the allocation made by trace entry i

The run: a TransformerEncoder-like model of `layers` layers (12 parameters each, as torch's
TransformerEncoderLayer) and a head, built on the CPU and moved by ``Module.to`` (its parameters
allocated through ``_apply``/``convert``), then `steps` training steps: an input batch (x, y),
the forward (per layer: activations saved for backward, temporaries freed inside), the loss, the
backward on the autograd engine's thread (grads of activations as temporaries, the saved
activations freed layer by layer, weight grads allocated and kept; some through AccumulateGrad),
the optimizer step (Adam/AdamW: exp_avg and exp_avg_sq at the first step; SGD: a momentum buffer;
one temporary per parameter each step), ``zero_grad(set_to_none=True)`` freeing the grads, and
``del x, y, out, loss``. cuBLAS workspaces appear at the first matmul of the forward's and of the
engine's thread. Optionally an OOM at the end (the caching allocator frees its unused segments,
then records "oom" with device_free and the requested size).

The allocator is a small model of torch's: blocks rounded to 512 bytes (the trace says the size
asked for, as torch's does; the segments' blocks both), a small pool (<= 1 MiB)
in 2 MiB segments, a large pool in 20 MiB segments (or a segment of its own past 10 MiB, rounded
to 2 MiB), exact-size reuse of freed blocks, "free_requested" then "free_completed" (later, for
a block freed on a side stream), segment_alloc/segment_free. Frames copy the shapes torch records
(stacks="all": C++ frames up to the innermost Python frame, the interpreter's frames, then the
other Python frames, as gather_with_cpp writes them; "python": Python frames only, none on the
autograd engine's thread; "none": no frames), with torch's file and function names.

Everything is deterministic for a seed; 1,000,000 entries take a few seconds.
"""
from __future__ import annotations

import gc
import random
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

__all__ = ["make_trace", "Generated", "CATEGORIES", "accuracy"]

# The true categories (the generator's own list; tensorgc's may be a subset)
CATEGORIES = ("parameter", "buffer", "optimizer_state", "grad", "input", "activation",
              "temporary", "other", "workspace", "output")
_CAT = {c: i for i, c in enumerate(CATEGORIES)}
(PARAMETER, BUFFER, OPT_STATE, GRAD, INPUT, ACTIVATION, TEMPORARY, OTHER, WORKSPACE,
 OUTPUT) = range(10)

MiB = 1 << 20
TORCH = "/opt/conda/lib/python3.11/site-packages/torch/"
SCRIPT = "/home/user/project/train.py"
T0_US = 1_790_000_000_000_000
SIDE_STREAM = 94_000_000_000_000  # a cudaStream_t's value, as torch writes it


class Generated(NamedTuple):
    snapshot: Dict[str, Any]
    # per trace entry: 0, or 1 + the category (index into CATEGORIES) of the allocation an
    # "alloc" entry makes (and, for a block allocated before the trace, of the block its
    # "free_requested"/"free_completed" entries free)
    truth: bytearray
    pre: Dict[int, int]        # address -> category of the blocks alive when the trace begins
    names: Dict[int, str]      # trace entry of an "alloc" -> the tensor's name (params, grads,
                               # optimizer states)
    pre_names: Dict[int, str]  # address -> name, of the blocks alive when the trace begins
    steps: int                 # training steps run (the trace may keep only the last ones)

    def category_of(self, entry: int) -> Optional[str]:
        v = self.truth[entry]
        return CATEGORIES[v - 1] if v else None


# ---------------------------------------------------------------------- frames

def _py(file: str, line: int, name: str) -> Dict[str, Any]:
    return {"name": name, "filename": file, "line": line}


def _cc(name: str, file: str = "??") -> Dict[str, Any]:
    return {"name": name, "filename": file, "line": 0}


_ALLOC_HEAD = [_cc("torch::unwind::unwind()"), _cc("torch::CapturedTraceback::gather(bool, bool, bool)"),
               _cc("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
               _cc("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc("
                   "unsigned long, CUstream_st*)", "CUDACachingAllocator.cpp"),
               _cc("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc("
                   "void**, signed char, unsigned long, CUstream_st*)", ""),
               _cc("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate("
                   "unsigned long)", "")]
_FREE_HEAD = [_cc("torch::unwind::unwind()"), _cc("torch::CapturedTraceback::gather(bool, bool, bool)"),
              _cc("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
              _cc("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::free(void*)", ""),
              _cc("c10::StorageImpl::~StorageImpl()"),
              _cc("c10::TensorImpl::~TensorImpl()")]
_EMPTY = [_cc("at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, "
              "c10::ScalarType, std::optional<c10::MemoryFormat>)"),
          _cc("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, "
              "std::optional<c10::MemoryFormat>)"),
          _cc("at::native::empty_cuda(c10::ArrayRef<long>, std::optional<c10::ScalarType>, "
              "std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, "
              "std::optional<c10::MemoryFormat>)")]
_PY_MAIN_THREAD = [_cc("_PyEval_EvalFrameDefault"), _cc("PyEval_EvalCode"), _cc("PyRun_StringFlags"),
                   _cc("_PyRun_SimpleFileObject"), _cc("_PyRun_AnyFileObject"), _cc("Py_RunMain"),
                   _cc("Py_BytesMain"), _cc("__libc_start_main"), _cc("_start")]
_ENGINE_THREAD = [
    _cc("torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)", ""),
    _cc("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, "
        "torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::"
        "ReadyQueue> const&)"),
    _cc("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
    _cc("torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)"),
    _cc("torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::"
        "ReadyQueue> const&, bool)", ""),
    _cc("std::error_code::default_error_condition() const"), _cc("pthread_condattr_setpshared"),
    _cc("__clone")]
_M = TORCH + "nn/modules/module.py"
_CALL = [_py(_M, 1790, "_call_impl"), _py(_M, 1779, "_wrapped_call_impl")]
_TRANSFORMER = TORCH + "nn/modules/transformer.py"
_F = TORCH + "nn/functional.py"
_ADAM = TORCH + "optim/adam.py"
_SGD = TORCH + "optim/sgd.py"
_OPTIM = TORCH + "optim/optimizer.py"
_STEP_WRAP = [_py(_OPTIM, 81, "_use_grad"), _py(_OPTIM, 533, "wrapper")]


def _main(line: int) -> List[Dict[str, Any]]:
    return [_py(SCRIPT, line, "main"), _py(SCRIPT, 120, "<module>")]


class _Frames:
    """The frames lists of one run, one shared list per distinct stack (torch's stacks repeat:
    a layer's forward is the same code for every layer)."""

    def __init__(self, stacks: str) -> None:
        self.mode = stacks
        self.cache: Dict[Tuple[Any, ...], List[Dict[str, Any]]] = {}

    def _get(self, key: Tuple[Any, ...], make: Any) -> List[Dict[str, Any]]:
        f = self.cache.get(key)
        if f is None:
            f = self.cache[key] = [] if self.mode == "none" else make()
        return f

    def python(self, key: str, py: List[Dict[str, Any]], cpp: Sequence[Dict[str, Any]],
               free: bool = False) -> List[Dict[str, Any]]:
        """A stack of the main (Python) thread: py innermost first; cpp: the op's own frames."""
        def make() -> List[Dict[str, Any]]:
            if self.mode == "python":
                return list(py)
            head = _FREE_HEAD if free else _ALLOC_HEAD
            # gather_with_cpp: C++ up to the innermost Python frame, the interpreter's, the rest
            return (head + list(cpp) + [_cc("PyCMethod_New"), _cc("_PyObject_MakeTpCall")]
                    + py[:1] + _PY_MAIN_THREAD + py[1:])
        return self._get(("py", key, free), make)

    def engine(self, key: str, cpp: Sequence[Dict[str, Any]], free: bool = False
               ) -> List[Dict[str, Any]]:
        """A stack of the autograd engine's thread: no Python frames at all."""
        def make() -> List[Dict[str, Any]]:
            if self.mode == "python":
                return []
            return (_FREE_HEAD if free else _ALLOC_HEAD) + list(cpp) + _ENGINE_THREAD
        return self._get(("bw", key, free), make)


def _op(op: str) -> List[Dict[str, Any]]:
    """The C++ frames of a forward op called from Python."""
    return _EMPTY + [
        _cc(f"at::native::{op}_cuda(at::Tensor const&)", "RegisterCUDA_0.cpp"),
        _cc(f"at::_ops::{op}::call(at::Tensor const&)"),
        _cc(f"torch::autograd::VariableType::(anonymous namespace)::{op}(c10::DispatchKeySet, "
            "at::Tensor const&)", "VariableType_2.cpp"),
        _cc(f"torch::autograd::THPVariable_{op}(_object*, _object*, _object*)",
            "python_torch_functions_0.cpp")]


def _bw_op(node: str, op: str) -> List[Dict[str, Any]]:
    return _EMPTY + [
        _cc(f"at::_ops::{op}::call(at::Tensor const&, at::Tensor const&)"),
        _cc(f"torch::autograd::generated::{node}_apply_functional(std::vector<at::Tensor, "
            "std::allocator<at::Tensor> >&&)", "Functions.cpp"),
        _cc(f"torch::autograd::generated::{node}::apply(std::vector<at::Tensor, "
            "std::allocator<at::Tensor> >&&)")]


_ACCUMULATE = _EMPTY + [
    _cc("at::native::clone(at::Tensor const&, std::optional<c10::MemoryFormat>)"),
    _cc("at::_ops::clone::call(at::Tensor const&, std::optional<c10::MemoryFormat>)"),
    _cc("void torch::autograd::AccumulateGrad::accumulateGrad<torch::autograd::AccumulateGrad::"
        "apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)::{lambda(at::Tensor&&)#1}>("
        "at::Tensor const&, at::Tensor&, at::Tensor const&, long, {lambda(at::Tensor&&)#1} const&)",
        "accumulate_grad.h"),
    _cc("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
        "accumulate_grad.cpp")]
_WORKSPACE = [_cc("at::cuda::setWorkspaceForHandle(cublasContext*, c10::cuda::CUDAStream)", ""),
              _cc("at::cuda::getCurrentCUDABlasHandle()"),
              _cc("void at::cuda::blas::gemm_internal_cublas<float, float>(char, char, long, long, "
                  "long, float, float const*, long, float const*, long, float, float*, long)", "")]
_SAVED_FREE = [_cc("torch::autograd::SavedVariable::reset_data()"),
               _cc("torch::autograd::generated::NativeLayerNormBackward0::release_variables()")]


# ---------------------------------------------------------------------- the allocator

class _Segment:
    __slots__ = ("addr", "size", "top", "live", "pool", "stream", "frames", "free")

    def __init__(self, addr: int, size: int, pool: str, stream: int, frames: Any) -> None:
        self.addr, self.size, self.top, self.live = addr, size, 0, 0
        self.pool, self.stream, self.frames = pool, stream, frames
        self.free: Dict[int, int] = {}  # free block address -> size


class _Run:
    """One training run's trace, built entry by entry."""

    def __init__(self, seed: int, stacks: str, capacity: int) -> None:
        self.rng = random.Random(seed)
        self.random = self.rng.random
        self.frames = _Frames(stacks)
        self.entries: List[Dict[str, Any]] = []
        self.truth: List[int] = []  # per entry: 0 or 1 + category
        self.names: Dict[int, str] = {}
        self.t = T0_US
        self.next_va = 0x7F00_0000_0000
        self.segments: Dict[int, _Segment] = {}    # segment address -> segment
        self.open: Dict[Tuple[str, int], _Segment] = {}  # (pool, stream) -> segment being carved
        self.free_blocks: Dict[Tuple[str, int, int], List[int]] = {}  # (pool, stream, size)
        self.block: Dict[int, Tuple[int, int, _Segment, int, int]] = {}  # addr -> (size,
        #   requested, segment, category, entry that allocated it)
        self.seg_of: Dict[int, _Segment] = {}  # every carved block's address -> its segment
        self.reserved = 0
        self.capacity = capacity
        self.pending: List[Tuple[int, int, int, Any]] = []  # (due entry count, addr, size, frames)
        self.annotations: List[Dict[str, Any]] = []
        self.spans: List[List[Any]] = []       # tensorgc.categorize's marks, as it records them
        self.grad_marks: List[List[int]] = []
        self.name_marks: List[List[Any]] = []

    # entries

    def tick(self, lo: int = 1, hi: int = 25) -> int:
        self.t += lo + int(self.random() * (hi - lo + 1))
        return self.t

    def emit(self, action: str, addr: int, size: int, frames: Any, stream: int = 0,
             truth: int = 0, **extra: Any) -> int:
        self.t += 1 + int(self.random() * 25)
        e = {"action": action, "addr": addr, "size": size, "stream": stream,
             "time_us": self.t, "compile_context": "N/A", "user_metadata": "", "frames": frames}
        if extra:
            e.update(extra)
        self.entries.append(e)
        self.truth.append(truth)
        if self.pending and self.pending[0][0] <= len(self.entries):
            _, a, s, f = self.pending.pop(0)
            self._completed(a, s, f)
        return len(self.entries) - 1

    def alloc(self, nbytes: int, cat: int, frames: Any, name: Optional[str] = None,
              stream: int = 0) -> int:
        size = max(512, (nbytes + 511) // 512 * 512)
        pool = "small" if size <= MiB else "large"
        reuse = self.free_blocks.get((pool, stream, size))
        if reuse:
            addr = reuse.pop()
            seg = self.seg_of[addr]
            del seg.free[addr]
        else:
            seg = self.open.get((pool, stream))
            if seg is None or seg.size - seg.top < size:
                if pool == "small":
                    ssize = 2 * MiB
                elif size <= 10 * MiB:
                    ssize = 20 * MiB
                else:
                    ssize = (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
                seg = self.segment(ssize, pool, stream, frames)
                if ssize == size or pool == "large" and size > 10 * MiB:
                    self.open.pop((pool, stream), None)
                else:
                    self.open[(pool, stream)] = seg
            addr = seg.addr + seg.top
            seg.top += size
            self.seg_of[addr] = seg
        seg.live += 1
        i = self.emit("alloc", addr, nbytes, frames, stream, 1 + cat)  # torch's trace: requested
        self.block[addr] = (size, nbytes, seg, cat, i)
        if name is not None:
            self.names[i] = name
        return addr

    def segment(self, size: int, pool: str, stream: int, frames: Any) -> _Segment:
        self.next_va -= (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB) + 2 * MiB
        seg = _Segment(self.next_va, size, pool, stream, frames)
        self.segments[seg.addr] = seg
        self.reserved += size
        self.emit("segment_alloc", seg.addr, size, frames, stream)
        return seg

    def free(self, addr: int, frames: Any, delay: int = 0) -> None:
        """free_requested now; free_completed now, or `delay` entries later (a block used on a
        side stream waits for its event)."""
        _, nbytes, seg, cat, _ = self.block[addr]
        self.emit("free_requested", addr, nbytes, frames, seg.stream)
        if delay:
            self.pending.append((len(self.entries) + delay, addr, nbytes, frames))
        else:
            self._completed(addr, nbytes, frames)

    def _completed(self, addr: int, nbytes: int, frames: Any) -> None:
        size, _, seg, _, _ = self.block.pop(addr)
        self.emit("free_completed", addr, nbytes, frames, seg.stream)
        seg.live -= 1
        seg.free[addr] = size
        self.free_blocks.setdefault((seg.pool, seg.stream, size), []).append(addr)

    def flush(self) -> None:
        while self.pending:
            _, a, s, f = self.pending.pop(0)
            self._completed(a, s, f)

    def oom(self, nbytes: int, frames: Any) -> None:
        """What torch does on an allocation it cannot satisfy: frees every cached segment with
        nothing allocated in it, then records the OOM."""
        self.flush()
        for seg in sorted(self.segments.values(), key=lambda s: (s.size, s.addr)):
            if seg.live:
                continue
            for a, size in seg.free.items():
                self.free_blocks[(seg.pool, seg.stream, size)].remove(a)
                del self.seg_of[a]
            del self.segments[seg.addr]
            for k, s in list(self.open.items()):
                if s is seg:
                    del self.open[k]
            self.reserved -= seg.size
            self.emit("segment_free", seg.addr, seg.size, frames, seg.stream)
        i = self.emit("oom", 0, nbytes, frames, 0, device_free=max(0, self.capacity - self.reserved))
        del self.entries[i]["addr"]  # torch's OOM entry has none


# ---------------------------------------------------------------------- the model and the run

def _layer_params(d: int) -> List[Tuple[str, int, str]]:
    """(name, elements, kind) of one TransformerEncoderLayer, in the order Module._apply visits
    them (children first: self_attn.out_proj, then self_attn's own, linear1, linear2, norms)."""
    ff = 4 * d
    return [("self_attn.out_proj.weight", d * d, "w"), ("self_attn.out_proj.bias", d, "b"),
            ("self_attn.in_proj_weight", 3 * d * d, "w"), ("self_attn.in_proj_bias", 3 * d, "b"),
            ("linear1.weight", ff * d, "w"), ("linear1.bias", ff, "b"),
            ("linear2.weight", d * ff, "w"), ("linear2.bias", d, "b"),
            ("norm1.weight", d, "n"), ("norm1.bias", d, "n"),
            ("norm2.weight", d, "n"), ("norm2.bias", d, "n")]


def make_trace(layers: int = 4, steps: Optional[int] = 3, d_model: int = 256, *,
               optimizer: str = "adamw", seed: int = 0, max_entries: Optional[int] = None,
               stacks: str = "all", categorize: bool = False, batch: int = 16, seq: int = 128,
               vocab: int = 1000, oom: bool = True, buffers: bool = False,
               side_stream: bool = False, annotations: bool = True,
               loss_outside: bool = False, clip_grad: bool = False, metrics: bool = False,
               accumulate: int = 1, set_to_none: bool = True, hold_output: bool = False,
               capacity: int = 80 << 30) -> Generated:
    """A synthetic snapshot of `steps` training steps (see the module's docstring).

    max_entries: torch's ring buffer: only the last `max_entries` trace entries are kept (the
    blocks alive before them are in the snapshot's segments, as in a long run's file); with
    steps=None the run goes on until it has made max_entries entries. stacks: "all", "python"
    or "none". categorize: add tensorgc.categorize's marks (spans, grad marks, names over the
    run, the reporter's kinds and names of the blocks alive at the end). buffers: each layer
    also has two buffers (running statistics, moved by Module.to after the parameters).
    side_stream: the input batch is copied on a side stream (its free completes later).

    What real loops do besides (each a way for an inference from stacks to go wrong):
    loss_outside: the loss is F.cross_entropy called by the loop, not a module; clip_grad:
    clip_grad_norm_ before the step (its norms are temporaries); metrics: an accuracy computed
    by the loop after the step (temporaries of no phase); accumulate: micro-batches per step
    (the later backwards accumulate into the grads: their new grads are temporaries);
    set_to_none=False: zero_grad zeroes the grads in place, which then live for the run;
    hold_output: the loop keeps the last micro-batch's logits and loss in its variables into
    the next step (freed when the next forward's logits rebind them; the last ones to the end).

    The truth: the logits and the loss are outputs (no op saves them: the loop holds them past
    their backward), the cuBLAS workspaces workspaces."""
    if stacks not in ("all", "python", "none"):
        raise ValueError(f"stacks must be 'all', 'python' or 'none', not {stacks!r}")
    if optimizer not in ("adam", "adamw", "sgd"):
        raise ValueError(f"optimizer must be 'adam', 'adamw' or 'sgd', not {optimizer!r}")
    if steps is None and max_entries is None:
        raise ValueError("steps=None needs max_entries")
    if accumulate < 1:
        raise ValueError("accumulate must be >= 1")
    o = _Options(layers, steps, d_model, optimizer, seed, max_entries, stacks, categorize, batch,
                 seq, vocab, oom, buffers, side_stream, annotations, loss_outside, clip_grad,
                 metrics, accumulate, set_to_none, hold_output, capacity)
    # a million entry dicts: the cyclic collector would walk them again and again (half the time)
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _make(o)
    finally:
        if enabled:
            gc.enable()


class _Options(NamedTuple):
    layers: int
    steps: Optional[int]
    d_model: int
    optimizer: str
    seed: int
    max_entries: Optional[int]
    stacks: str
    categorize: bool
    batch: int
    seq: int
    vocab: int
    oom: bool
    buffers: bool
    side_stream: bool
    annotations: bool
    loss_outside: bool
    clip_grad: bool
    metrics: bool
    accumulate: int
    set_to_none: bool
    hold_output: bool
    capacity: int


def _make(o: _Options) -> Generated:
    layers, steps, d_model, optimizer, seed = o.layers, o.steps, o.d_model, o.optimizer, o.seed
    max_entries, stacks, categorize, batch, seq = o.max_entries, o.stacks, o.categorize, o.batch, o.seq
    vocab, oom, buffers, side_stream, annotations = o.vocab, o.oom, o.buffers, o.side_stream, o.annotations
    capacity = o.capacity
    run = _Run(seed, stacks, capacity)
    fr = run.frames
    d, ff, tokens = d_model, 4 * d_model, batch * seq
    heads = 8
    stream = SIDE_STREAM if side_stream else 0

    # ---- the model, built on the CPU and moved by Module.to
    params: List[Tuple[str, int, int]] = []  # (name, bytes, address)
    apply_py = ([_py(_M, 1370, "convert"), _py(_M, 965, "_apply")]
                + [_py(_M, 934, "_apply")] * 3 + [_py(_M, 1384, "to")] + _main(42))
    buffer_py = ([_py(_M, 1370, "convert"), _py(_M, 1035, "_apply")]
                 + [_py(_M, 934, "_apply")] * 2 + [_py(_M, 1384, "to")] + _main(42))
    to_cpp = _EMPTY + [_cc("at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, "
                           "std::optional<c10::Layout>, std::optional<c10::Device>, "
                           "std::optional<bool>, bool, std::optional<c10::MemoryFormat>)"),
                       _cc("torch::autograd::dispatch_to(at::Tensor const&, c10::Device, bool, "
                           "bool, std::optional<c10::MemoryFormat>)", "python_variable_methods.cpp"),
                       _cc("torch::autograd::THPVariable_to(_object*, _object*, _object*)",
                           "python_variable_methods.cpp")]
    for layer in range(layers):
        for pname, elems, _ in _layer_params(d):
            name = f"layers.{layer}.{pname}"
            params.append((name, elems * 4, run.alloc(elems * 4, PARAMETER,
                                                      fr.python("apply", apply_py, to_cpp), name)))
        if buffers:
            for bname in ("norm1.running_mean", "norm1.running_var"):
                run.alloc(d * 4, BUFFER, fr.python("apply_buf", buffer_py, to_cpp),
                          f"layers.{layer}.{bname}")
    head_py = ([_py(_M, 1370, "convert"), _py(_M, 965, "_apply"), _py(_M, 1384, "to")] + _main(43))
    for pname, elems in (("head.weight", vocab * d), ("head.bias", vocab)):
        params.append((pname, elems * 4, run.alloc(elems * 4, PARAMETER,
                                                   fr.python("apply_head", head_py, to_cpp), pname)))

    # ---- the stacks of one step
    def fw(line_fn: Tuple[str, int, str], where: List[Dict[str, Any]], op: str, key: str,
           free: bool = False) -> Any:
        py = [_py(*line_fn)] + where
        return fr.python(key, py, _op(op), free)

    layer_py = [_py(_TRANSFORMER, 540, "forward")] + _CALL + _main(49)
    enc_py = [_py(_TRANSFORMER, 956, "forward")] + _CALL + layer_py
    sa_py = ([_py(TORCH + "nn/modules/activation.py", 1488, "forward")] + _CALL
             + [_py(_TRANSFORMER, 978, "_sa_block")] + enc_py)
    ff_py = [_py(_TRANSFORMER, 981, "_ff_block")] + enc_py
    lin_ff_py = [_py(TORCH + "nn/modules/linear.py", 134, "forward")] + _CALL + ff_py
    drop_ff_py = ([_py(_F, 1443, "dropout"), _py(TORCH + "nn/modules/dropout.py", 73, "forward")]
                  + _CALL + ff_py)
    norm_py = ([_py(_F, 2935, "layer_norm"), _py(TORCH + "nn/modules/normalization.py", 229, "forward")]
               + _CALL + enc_py)
    # (op key, bytes, saved for backward, stack)
    T = tokens
    layer_ops = [
        ("in_proj", T * 3 * d * 4, True, fw((_F, 6298, "_in_projection_packed"), sa_py, "linear", "inp")),
        ("in_proj_tmp", T * 3 * d * 4, False, fw((_F, 6301, "_in_projection_packed"), sa_py, "contiguous", "inp2")),
        ("attn", T * d * 4, True, fw((_F, 6487, "multi_head_attention_forward"), sa_py,
                                     "_scaled_dot_product_efficient_attention", "sdpa")),
        ("lse", batch * heads * seq * 4, True, fw((_F, 6487, "multi_head_attention_forward"), sa_py,
                                                  "_scaled_dot_product_efficient_attention", "sdpa")),
        ("out_proj", T * d * 4, True, fw((_F, 6498, "multi_head_attention_forward"), sa_py, "linear", "outp")),
        ("drop1_mask", T * d, True, fw((_F, 1443, "dropout"), sa_py, "native_dropout", "drop1")),
        ("drop1", T * d * 4, True, fw((_F, 1443, "dropout"), sa_py, "native_dropout", "drop1")),
        ("add1", T * d * 4, True, fw((_TRANSFORMER, 955, "forward"), enc_py[1:], "add", "add1")),
        ("norm1", T * d * 4, True, fw((_F, 2935, "layer_norm"), norm_py[1:], "native_layer_norm", "ln")),
        ("norm1_mean", T * 4, True, fw((_F, 2935, "layer_norm"), norm_py[1:], "native_layer_norm", "ln")),
        ("norm1_rstd", T * 4, True, fw((_F, 2935, "layer_norm"), norm_py[1:], "native_layer_norm", "ln")),
        ("lin1", T * ff * 4, False, fw((TORCH + "nn/modules/linear.py", 134, "forward"),
                                       _CALL + ff_py, "linear", "lin1")),
        ("relu", T * ff * 4, True, fw((_F, 1723, "relu"), ff_py, "relu", "relu")),
        ("drop2_mask", T * ff, True, fw((_F, 1443, "dropout"), drop_ff_py[1:], "native_dropout", "drop2")),
        ("drop2", T * ff * 4, True, fw((_F, 1443, "dropout"), drop_ff_py[1:], "native_dropout", "drop2")),
        ("lin2", T * d * 4, False, fw((TORCH + "nn/modules/linear.py", 134, "forward"),
                                      lin_ff_py[1:], "linear", "lin2")),
        ("drop3_mask", T * d, True, fw((_F, 1443, "dropout"), drop_ff_py[1:], "native_dropout", "drop3")),
        ("drop3", T * d * 4, False, fw((_F, 1443, "dropout"), drop_ff_py[1:], "native_dropout", "drop3")),
        ("add2", T * d * 4, True, fw((_TRANSFORMER, 956, "forward"), enc_py[1:], "add", "add2")),
        ("norm2", T * d * 4, True, fw((_F, 2935, "layer_norm"), norm_py[1:], "native_layer_norm", "ln2")),
        ("norm2_mean", T * 4, True, fw((_F, 2935, "layer_norm"), norm_py[1:], "native_layer_norm", "ln2")),
        ("norm2_rstd", T * 4, True, fw((_F, 2935, "layer_norm"), norm_py[1:], "native_layer_norm", "ln2")),
    ]
    fw_free = fr.python("fw_free", enc_py, [_cc("THPVariable_clear(THPVariable*)"),
                                            _cc("THPVariable_dealloc(_object*)")], True)
    head_out = fw((TORCH + "nn/modules/linear.py", 134, "forward"), _CALL + _main(49), "linear", "head")
    loss_py = ([_py(_F, 3504, "cross_entropy"), _py(TORCH + "nn/modules/loss.py", 1394, "forward")]
               + _CALL + _main(50))
    if o.loss_outside:  # F.cross_entropy called by the loop itself
        loss_py = [_py(_F, 3504, "cross_entropy")] + _main(50)
    loss_lsm = fr.python("lsm", loss_py, _op("_log_softmax"))
    loss_nll = fr.python("nll", loss_py, _op("nll_loss_forward"))
    clip_py = ([_py(TORCH + "nn/utils/clip_grad.py", 105, "_clip_grads_with_norm_"),
                _py(TORCH + "nn/utils/clip_grad.py", 39, "_no_grad_wrapper")] + _main(52))
    clip_norms = fr.python("clip", [_py(TORCH + "nn/utils/clip_grad.py", 88, "_get_total_norm")]
                           + clip_py[1:], _op("_foreach_norm"))
    clip_free = fr.python("clip_free", clip_py, [_cc("THPVariable_clear(THPVariable*)")], True)
    metric = fr.python("metric", _main(58), _op("argmax"))
    metric_free = fr.python("metric_free", _main(58), [_cc("THPVariable_clear(THPVariable*)")], True)
    ws_fw = fr.python("ws_fw", [_py(TORCH + "nn/modules/linear.py", 134, "forward")] + _CALL + sa_py[1:],
                      _WORKSPACE)
    ws_bw = fr.engine("ws_bw", _WORKSPACE + [_cc("torch::autograd::generated::AddmmBackward0::apply("
                                                 "std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")])
    make_grads = fr.python("mk", [_py(TORCH + "autograd/__init__.py", 231, "_make_grads"),
                                  _py(TORCH + "autograd/__init__.py", 374, "backward"),
                                  _py(TORCH + "_tensor.py", 631, "backward")] + _main(51),
                           _op("ones_like"))
    bw_tmp = {k: fr.engine("bwt_" + k, _bw_op(n, o)) for k, n, o in (
        ("d", "NativeLayerNormBackward0", "native_layer_norm_backward"),
        ("ff", "ReluBackward0", "threshold_backward"),
        ("qkv", "ScaledDotProductEfficientAttentionBackward0", "_efficient_attention_backward"),
        ("head", "LogSoftmaxBackward0", "_log_softmax_backward_data"))}
    bw_w = fr.engine("bw_w", _bw_op("AddmmBackward0", "mm"))
    bw_b = fr.engine("bw_b", _EMPTY + [_cc("at::native::structured_sum_out::impl(at::Tensor const&, "
                                           "c10::OptionalArrayRef<long>, bool, std::optional<c10::"
                                           "ScalarType>, at::Tensor const&)"),
                                       _cc("torch::autograd::InputMetadata::reduce_grad(at::Tensor&) const")])
    bw_acc = fr.engine("bw_acc", _ACCUMULATE)
    bw_free = fr.engine("bw_free", _SAVED_FREE, free=True)
    bw_free_tmp = fr.engine("bw_free_tmp", [_cc("torch::autograd::InputBuffer::~InputBuffer()")], free=True)
    if optimizer == "sgd":
        opt_file, opt_name = _SGD, "SGD"
        init_py = ([_py(_SGD, 431, "_multi_tensor_sgd"), _py(_SGD, 329, "sgd"), _py(_SGD, 139, "step")]
                   + _STEP_WRAP + _main(52))
        tmp_py = init_py
    else:
        opt_file, opt_name = _ADAM, "AdamW" if optimizer == "adamw" else "Adam"
        init_py = [_py(_ADAM, 178, "_init_group"), _py(_ADAM, 238, "step")] + _STEP_WRAP + _main(52)
        tmp_py = ([_py(_ADAM, 791, "_multi_tensor_adam"), _py(_ADAM, 971, "adam"),
                   _py(_OPTIM, 151, "maybe_fallback"), _py(_ADAM, 248, "step")] + _STEP_WRAP + _main(52))
    opt_state = fr.python("opt_state", init_py, _op("zeros_like"))
    opt_tmp = fr.python("opt_tmp", tmp_py, _op("_foreach_sqrt"))
    opt_tmp_free = fr.python("opt_tmp_free", [_py(_ADAM if optimizer != "sgd" else _SGD, 800,
                                                  "_multi_tensor_adam" if optimizer != "sgd"
                                                  else "_multi_tensor_sgd")] + tmp_py[1:],
                             [_cc("THPVariable_clear(THPVariable*)"), _cc("THPVariable_dealloc(_object*)")],
                             True)
    zero_free = fr.python("zero", [_py(_OPTIM, 1011, "zero_grad")] + _main(53),
                          [_cc("THPVariable_set_grad(THPVariable*, _object*, void*)")], True)
    del_free = fr.python("del", _main(54), [_cc("THPVariable_clear(THPVariable*)"),
                                            _cc("THPVariable_dealloc(_object*)")], True)
    x_stack = fr.python("x", _main(47), _op("randn"))
    x_copy = fr.python("xc", _main(47), to_cpp)
    y_stack = fr.python("y", _main(48), _op("randint"))
    states_per_param = 1 if optimizer == "sgd" else 2

    # ---- the steps
    grads: Dict[str, int] = {}    # param name -> grad address (alive until zero_grad)
    states: Dict[str, List[int]] = {}
    workspaces = [False, False]
    held: List[int] = []  # the loop's logits and loss, kept into the next step (hold_output)
    step = 0
    with_marks = categorize
    while steps is None or step < steps:
        if steps is None and max_entries is not None and len(run.entries) >= max_entries:
            break
        kept: List[int] = []  # what the loop holds until the step is done (del x, y, out, loss)
        for micro in range(o.accumulate):
            run.tick(200, 2000)
            # the input batch
            x = run.alloc(T * d * 4, INPUT, x_copy if side_stream else x_stack, stream=stream)
            y = run.alloc(T * 8, INPUT, y_stack, stream=stream)
            # forward
            run.tick(50, 400)
            t_fw = run.t
            saved: List[List[int]] = []
            for layer in range(layers):
                keep: List[int] = []
                for key, nbytes, is_saved, frames in layer_ops:
                    if not workspaces[0] and key == "in_proj":
                        workspaces[0] = True
                        run.alloc(32 * MiB, WORKSPACE, ws_fw)
                    a = run.alloc(nbytes, ACTIVATION if is_saved else TEMPORARY, frames)
                    if is_saved:
                        keep.append(a)
                    else:
                        run.free(a, fw_free)
                saved.append(keep)
            # the logits and the loss: no op saves them, the loop holds them past the backward
            out = run.alloc(T * vocab * 4, OUTPUT, head_out)
            if held:  # the previous step's, rebound by `out = model(x)`
                for a in held:
                    run.free(a, del_free)
                held = []
            t_fw_end = run.t
            lsm = run.alloc(T * vocab * 4, ACTIVATION, loss_lsm)
            loss = run.alloc(4, OUTPUT, loss_nll)
            tw = run.alloc(4, ACTIVATION, loss_nll)
            if not o.loss_outside:
                t_fw_end = run.t
            if with_marks:  # the model's forward hooks: a loss outside it is outside the span
                run.spans.append(["forward", t_fw, t_fw_end])
            # backward, on the engine's thread
            run.tick(20, 200)
            t_bw = run.t
            ones = run.alloc(4, TEMPORARY, make_grads)
            g_head = run.alloc(T * vocab * 4, TEMPORARY, bw_tmp["head"])
            run.free(lsm, bw_free)
            run.free(tw, bw_free)
            run.free(ones, bw_free_tmp)
            if not workspaces[1]:
                workspaces[1] = True
                run.alloc(32 * MiB, WORKSPACE, ws_bw)

            def grad_of(name: str, nbytes: int, kind: str) -> None:
                frames = bw_acc if kind == "n" else bw_w if kind == "w" else bw_b
                if name in grads:  # the op's new grad, summed in place into the grad it has
                    run.free(run.alloc(nbytes, TEMPORARY, bw_w if kind == "w" else bw_b),
                             bw_free_tmp)
                    return
                a = run.alloc(nbytes, GRAD, frames, name + ".grad")
                grads[name] = a
                if with_marks:  # the post-accumulate-grad hook: a grad mark and its name
                    t = run.tick(1, 3)
                    run.grad_marks.append([0, a, t])
                    run.name_marks.append([0, a, t, name + ".grad"])

            for pname, nbytes in (("head.weight", vocab * d * 4), ("head.bias", vocab * 4)):
                grad_of(pname, nbytes, "w" if pname.endswith("weight") else "b")
            run.free(g_head, bw_free_tmp)
            for layer in reversed(range(layers)):
                lp = _layer_params(d)
                tmp = [run.alloc(T * ff * 4, TEMPORARY, bw_tmp["ff"]),
                       run.alloc(T * d * 4, TEMPORARY, bw_tmp["d"])]
                for pname, elems, kind in lp[4:]:
                    grad_of(f"layers.{layer}.{pname}", elems * 4, kind)
                for a in tmp:
                    run.free(a, bw_free_tmp)
                half = len(saved[layer]) // 2
                for a in reversed(saved[layer][half:]):
                    run.free(a, bw_free)
                tmp = [run.alloc(T * 3 * d * 4, TEMPORARY, bw_tmp["qkv"]),
                       run.alloc(T * d * 4, TEMPORARY, bw_tmp["d"])]
                for pname, elems, kind in lp[:4]:
                    grad_of(f"layers.{layer}.{pname}", elems * 4, kind)
                for a in tmp:
                    run.free(a, bw_free_tmp)
                for a in reversed(saved[layer][:half]):
                    run.free(a, bw_free)
            t_bw_end = run.t
            if with_marks:
                run.spans.append(["backward", t_bw, t_bw_end])
            if micro + 1 < o.accumulate:  # the loop lets this micro-batch go
                for a in (x, y, out, loss):
                    run.free(a, del_free)
            else:
                kept = [x, y, out, loss]
        if o.clip_grad:  # clip_grad_norm_: a norm per grad, their total, freed at once
            norms = [run.alloc(4, TEMPORARY, clip_norms) for _ in params]
            norms.append(run.alloc(4, TEMPORARY, clip_norms))
            total = norms.pop()  # the total norm it returns, which the loop drops at once
            for a in norms:
                run.free(a, clip_free)
            run.free(total, del_free)
        # the optimizer step
        run.tick(50, 300)
        t_opt = run.t
        run.annotations.append({"stage": "START", "name": f"Optimizer.step#{opt_name}.step",
                                "device": 0, "time_us": t_opt})
        if not states:
            for name, nbytes, _ in params:
                states[name] = [run.alloc(nbytes, OPT_STATE, opt_state,
                                          f"{name}.{'momentum_buffer' if optimizer == 'sgd' else s}")
                                for s in ("exp_avg", "exp_avg_sq")[:states_per_param]]
        if optimizer != "sgd":
            tmps = [run.alloc(nbytes, TEMPORARY, opt_tmp) for _, nbytes, _ in params]
            for a in tmps:
                run.free(a, opt_tmp_free)
        t_opt_end = run.tick()
        run.annotations.append({"stage": "END", "name": f"Optimizer.step#{opt_name}.step",
                                "device": 0, "time_us": t_opt_end})
        if with_marks:
            run.spans.append(["optimizer", t_opt, t_opt_end])
            if step == 0:  # tensorgc.categorize names the states when they appear
                for name, _, _ in params:
                    for a, s in zip(states[name], ("exp_avg", "exp_avg_sq")):
                        run.name_marks.append([0, a, t_opt_end, f"{name}.{s}"])
        # zero_grad, then the loop's metrics and del x, y, out, loss
        t_zero = run.tick()
        run.annotations.append({"stage": "START", "name": f"Optimizer.zero_grad#{opt_name}.zero_grad",
                                "device": 0, "time_us": t_zero})
        if o.set_to_none:
            for name, _, _ in params:
                run.free(grads.pop(name), zero_free)
        run.annotations.append({"stage": "END", "name": f"Optimizer.zero_grad#{opt_name}.zero_grad",
                                "device": 0, "time_us": run.tick()})
        if o.metrics:  # acc = (out.argmax(-1) == y).float().mean()
            tmps = [run.alloc(T * 8, TEMPORARY, metric), run.alloc(T, TEMPORARY, metric),
                    run.alloc(T * 4, TEMPORARY, metric), run.alloc(4, TEMPORARY, metric)]
            for a in tmps:
                run.free(a, metric_free)
        x, y, out, loss = kept
        for a in (x, y):
            run.free(a, del_free, delay=3 if side_stream else 0)
        if o.hold_output:
            held = [out, loss]
        else:
            for a in (out, loss):
                run.free(a, del_free)
        step += 1
    run.flush()
    if oom:
        run.tick(100, 1000)
        run.oom(1 << 50, fr.python("oom", _main(56), _op("empty")))

    # ---- the snapshot: the trace (torch's ring buffer: the last max_entries), the segments
    n = len(run.entries)
    cut = max(0, n - max_entries) if max_entries is not None else 0
    pre: Dict[int, int] = {}
    pre_names: Dict[int, str] = {}
    truth = bytearray(run.truth[cut:])
    if cut:
        live: Dict[int, int] = {}  # address -> its alloc entry, for the entries before the cut
        for i in range(cut):
            e = run.entries[i]
            if e["action"] == "alloc":
                live[e["addr"]] = i
            elif e["action"] == "free_completed":
                live.pop(e["addr"], None)
        for addr, i in live.items():
            pre[addr] = run.truth[i] - 1
            if i in run.names:
                pre_names[addr] = run.names[i]
        for j in range(cut, n):  # the frees of blocks made before the cut carry their category
            e = run.entries[j]
            if e["action"] in ("free_requested", "free_completed") and e["addr"] in live:
                truth[j - cut] = 1 + pre[e["addr"]]
                if e["action"] == "free_completed":
                    del live[e["addr"]]
    names = {i - cut: s for i, s in run.names.items() if i >= cut}
    trace = run.entries[cut:]
    segments = []
    by_seg: Dict[int, List[Tuple[int, int, int, int]]] = {}
    for addr, (size, req, seg, cat, i) in run.block.items():
        by_seg.setdefault(seg.addr, []).append((addr, size, req, i))
    for seg in sorted(run.segments.values(), key=lambda s: s.addr):
        blocks = []
        at = seg.addr
        for addr, size, req, i in sorted(by_seg.get(seg.addr, [])):
            if addr > at:
                blocks.append({"address": at, "size": addr - at, "requested_size": 0,
                               "state": "inactive", "frames": []})
            blocks.append({"address": addr, "size": size, "requested_size": req,
                           "state": "active_allocated", "frames": run.entries[i]["frames"]})
            at = addr + size
        if at < seg.addr + seg.size:
            blocks.append({"address": at, "size": seg.addr + seg.size - at, "requested_size": 0,
                           "state": "inactive", "frames": []})
        used = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        segments.append({"device": 0, "address": seg.addr, "total_size": seg.size,
                         "allocated_size": used, "active_size": used,
                         "requested_size": sum(b["requested_size"] for b in blocks),
                         "stream": seg.stream, "segment_type": seg.pool, "segment_pool_id": (0, 0),
                         "is_expandable": False, "frames": seg.frames, "blocks": blocks})
    snap: Dict[str, Any] = {"segments": segments, "device_traces": [trace],
                            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "",
                                                   "expandable_segments": False}}
    if annotations:
        t_first = trace[0]["time_us"] if trace else 0
        snap["external_annotations"] = [a for a in run.annotations if a["time_us"] >= t_first]
    if categorize:
        alive_kinds: Dict[int, str] = {}
        alive_names: Dict[int, str] = {}
        for addr, (_, _, _, cat, i) in run.block.items():
            if cat in (PARAMETER, BUFFER, OPT_STATE, GRAD, ACTIVATION):
                alive_kinds[addr] = CATEGORIES[cat]
            if i in run.names:
                alive_names[addr] = run.names[i]
        t_first = trace[0]["time_us"] if trace else 0
        snap["tensorgc_categories"] = {
            "version": 1, "spans": [s for s in run.spans if s[2] >= t_first],
            "grads": [g for g in run.grad_marks if g[2] >= t_first],
            "named": {0: alive_kinds}, "names": {0: alive_names},
            "name_marks": [m for m in run.name_marks if m[2] >= t_first],
            "dropped": {"spans": 0, "grads": 0}}
    return Generated(snap, truth, pre, names, pre_names, step)


# ---------------------------------------------------------------------- checking an inference

def accuracy(gen: Generated, tl: Dict[str, Any],
             seen_as: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """How well a replay's categories (tensorgc.timeline.replay(gen.snapshot)'s: its labels,
    pre_labels, pre, categories, peak_event, use_req) match the truth. Returns {"peak": the
    fraction of the bytes alive just after the peak event classified right, "time": the
    fraction of bytes x trace entries alive, "confusion": {(true, got): bytes at the peak},
    "allocations": the fraction of allocations classified right}. Lifetimes are counted in
    trace entries, from the alloc to the free the replay uses (free_requested when the trace
    has them). seen_as: {true category: the category the evidence can tell at most} (a
    workspace seen without C++ frames is "other")."""
    trace = gen.snapshot["device_traces"][0]
    labels, names = tl["labels"], tl["categories"]
    free_action = "free_requested" if tl["use_req"] else "free_completed"
    at_end = {a: lab for (a, _), lab in zip(tl["pre"], tl["pre_labels"])}
    n = len(trace)
    peak = tl["peak_event"]
    rows: List[Tuple[int, int, int, int, int]] = []  # (start, end, size, truth, label)
    live: Dict[int, Tuple[int, int, int, int]] = {}  # addr -> (start, size, truth, label)
    for addr, cat in gen.pre.items():  # alive when the trace begins
        live[addr] = (-1, 0, cat, at_end.get(addr, 0))
    for i, e in enumerate(trace):
        act = e["action"]
        if act == "alloc":
            held = live.get(e["addr"])
            if held is not None and held[0] < 0:  # its free came before the trace's first entry
                live.pop(e["addr"])
            live[e["addr"]] = (i, e["size"], gen.truth[i] - 1, labels[i])
        elif act == free_action and e["addr"] in live:
            start, size, cat, lab = live.pop(e["addr"])
            if start < 0:  # made before the trace: its label is at this free
                size, lab = e["size"], labels[i]
            rows.append((max(start, 0), i, size, cat, lab))
    for addr, (start, size, cat, lab) in live.items():
        if start < 0:
            size = next(b["size"] for s in gen.snapshot["segments"] for b in s["blocks"]
                        if b["address"] == addr)
        rows.append((max(start, 0), n, size, cat, lab))
    ok_peak = all_peak = ok_time = all_time = ok_n = 0
    confusion: Dict[Tuple[str, str], int] = {}
    for start, end, size, cat, lab in rows:
        want = CATEGORIES[cat]
        want = (seen_as or {}).get(want, want)
        got = names[lab & 15] if lab >> 4 else "unclassified"
        right = want == got
        ok_n += right
        life = end - start
        all_time += size * life
        ok_time += size * life if right else 0
        if start <= peak < end:
            all_peak += size
            ok_peak += size if right else 0
            confusion[(want, got)] = confusion.get((want, got), 0) + size
    return {"peak": ok_peak / all_peak if all_peak else 1.0,
            "time": ok_time / all_time if all_time else 1.0,
            "allocations": ok_n / len(rows) if rows else 1.0, "confusion": confusion}
