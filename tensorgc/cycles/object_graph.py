"""torch.utils.viz._cycles' graph of any objects, drawn by tensorgc: ``create_graph(objects)``
(gc.garbage after gc.DEBUG_SAVEALL, or objects you picked), ``to_dot(nodes)`` and
``to_html(nodes)``, with torch's signatures and results.

    gc.set_debug(gc.DEBUG_SAVEALL); gc.collect()
    nodes = create_graph(gc.garbage)       # the objects that reach a CUDA tensor
    html = to_html(nodes)                  # a self-contained page, no CDN, no network

The graph is the C report's (cycles/report_objects.c): references found with tp_traverse (one
entry per reference) and named as the cycle pages name them, what reaches a root decided by the
graph engine; the drawing keeps a cycle report's bounds (at most 300 objects and 450 references,
every string cut and escaped; docs/api.md "Bounds") and its page is laid out in the render
worker within the render budget.
"""
from __future__ import annotations

import sys
import weakref
from typing import (Any, Callable, Dict, Iterable, List, NamedTuple, Optional,
                    Sequence, Tuple)

from .. import _tensorgc

__all__ = ["Node", "create_graph", "to_dot", "to_html", "is_cuda_tensor",
           "cuda_allocation_context", "FRAMES_PER_STACK"]

FRAMES_PER_STACK = 32  # frames in a context made by cuda_allocation_context


class Node(NamedTuple):
    """One object of the graph (torch's Node): its label, the context (where a CUDA tensor was
    allocated) or None, whether it is a root (what ``filter`` picked), and its references to
    other nodes as (label, index) pairs."""

    label: str
    context: Optional[str]
    root: bool
    referrents: List[Tuple[str, int]]


def is_cuda_tensor(obj: object) -> bool:
    """torch's default filter: a tensor on a CUDA device, not a FakeTensor. False without torch
    (nothing imports it for this)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return False
    try:
        if obj.device.type != "cuda":
            return False
    except Exception:  # noqa: BLE001 -- a tensor whose device cannot be read is no CUDA tensor
        return False
    fake = getattr(getattr(torch, "_subclasses", None), "FakeTensor", None)
    return fake is None or not isinstance(obj, fake)


def _frame_text(f: Any) -> Optional[str]:
    try:
        name, line, func = f["filename"], f["line"], f["name"]
    except (KeyError, TypeError):
        return None
    if not isinstance(name, str) or not isinstance(func, str):
        return None
    if name.startswith("??") or name.endswith((".cpp", ".h", ".cu", ".hpp", ".cc")):
        return None  # C++ frames: the user wants their Python line
    return f"{name[:200]}:{line}:{func[:120]}"


def cuda_allocation_context() -> Callable[[object], Optional[str]]:
    """torch's default context: for a CUDA tensor, the stack its storage was allocated from
    (asked of torch by address, torch._C._cuda_allocationTraceback, or on a torch without it
    read from one torch.cuda.memory._snapshot(); either needs the allocator's history, which
    observe_tensor_cycles starts), one "file:line:function" per line, innermost first, at most
    FRAMES_PER_STACK frames (C++ frames left out); None for anything else, and for everything
    where there is no CUDA or no history."""
    addr_to_frames: Dict[int, List[Any]] = {}
    torch = sys.modules.get("torch")
    try:
        # before CUDA's initialization there is no CUDA tensor, and torch's question would
        # read an allocator that does not exist yet
        recording = (torch is not None and torch.cuda.is_initialized()
                     and bool(torch._C._cuda_isHistoryEnabled()))
    except Exception:  # noqa: BLE001 -- a CPU build has no _cuda_* functions
        recording = False
    # torch 2.13 on answers for one address; an older one gives every block's stack at once
    ask: Optional[Callable[[int], Any]] = (
        getattr(torch._C, "_cuda_allocationTraceback", None) if recording and torch else None)
    if recording and ask is None:
        assert torch is not None
        for seg in torch.cuda.memory._snapshot().get("segments", []):
            addr = seg.get("address", 0)
            for blk in seg.get("blocks", []):
                if blk.get("state") == "active_allocated" and blk.get("frames"):
                    addr_to_frames[addr] = blk["frames"]
                addr += blk.get("size", 0)

    def context(obj: object) -> Optional[str]:
        if not recording or not is_cuda_tensor(obj):
            return None
        try:
            ptr = obj.untyped_storage().data_ptr()  # type: ignore[attr-defined]
            frames = ask(ptr) if ask is not None else addr_to_frames.get(ptr)
        except Exception:  # noqa: BLE001
            return None
        if isinstance(frames, dict):
            frames = frames.get("frames")
        if not isinstance(frames, list) or not frames:
            return None
        lines = [t for t in (_frame_text(f) for f in frames) if t is not None]
        return "\n".join(lines[:FRAMES_PER_STACK]) or None

    return context


def create_graph(objects: Iterable[object], *,
                 context: Optional[Callable[[object], Optional[str]]] = None,
                 filter: Optional[Callable[[object], bool]] = None) -> List[Node]:
    """torch's create_graph: the nodes of ``objects`` that reach a root (an object ``filter``
    picks; default is_cuda_tensor), roots included, in their order, each with its label,
    ``context(obj)`` (default cuda_allocation_context(): where a CUDA tensor was allocated),
    whether it is a root, and its references to the other nodes as (label, index) pairs, one per
    reference. Weak proxies are left out (as torch does), and an object listed twice counts
    once. Labels are tensorgc's ("Tensor float32[3, 4] on cuda:0 (48 B)", "function\\nfoo"; cut
    at 240 characters); reference labels are the cycle pages' (docs/api.md "Edge labels")."""
    if context is None:
        context = cuda_allocation_context()
    if filter is None:
        filter = is_cuda_tensor
    seen: Dict[int, object] = {}
    for obj in objects:
        if not isinstance(obj, weakref.ProxyTypes):
            seen.setdefault(id(obj), obj)
    objs = list(seen.values())
    roots = [bool(filter(o)) for o in objs]
    labels, refs, kept = _tensorgc._object_graph(objs, roots)
    nodes = []
    for i, k in enumerate(kept):
        ctx = context(objs[k])
        nodes.append(Node(labels[i], None if ctx is None else str(ctx), roots[k], refs[i]))
    return nodes


def _checked(nodes: Sequence[Any]) -> Tuple[List[str], List[Optional[str]], List[bool],
                                              List[Tuple[int, int, str]]]:
    """Node-likes (a Node, or anything with label, context, root and referrents, or a 4-tuple in
    that order) as the C drawing takes them; TypeError or ValueError naming the node."""
    labels: List[str] = []
    contexts: List[Optional[str]] = []
    roots: List[bool] = []
    edges: List[Tuple[int, int, str]] = []
    n = len(nodes)
    for i, node in enumerate(nodes):
        try:
            label, ctx, root, referrents = (
                (node.label, node.context, node.root, node.referrents)
                if hasattr(node, "referrents") else tuple(node))
        except (TypeError, ValueError):
            raise TypeError(f"node {i}: a Node (label, context, root, referrents), not "
                            f"{type(node).__name__}") from None
        if not isinstance(label, str) or not (ctx is None or isinstance(ctx, str)):
            raise TypeError(f"node {i}: the label must be a str and the context a str or None")
        labels.append(label)
        contexts.append(ctx)
        roots.append(bool(root))
        for ref in referrents:
            try:
                name, j = ref
            except (TypeError, ValueError):
                raise TypeError(f"node {i}: a reference is a (label, index) pair, not "
                                f"{ref!r:.60}") from None
            if not isinstance(name, str) or not isinstance(j, int) or isinstance(j, bool):
                raise TypeError(f"node {i}: a reference is a (str, int) pair, not {ref!r:.60}")
            if not 0 <= j < n:
                raise ValueError(f"node {i}: reference to node {j}, out of range ({n} nodes)")
            edges.append((i, j, name))
    return labels, contexts, roots, edges


def to_dot(nodes: Sequence[Any]) -> str:
    """torch's to_dot: the graph in Graphviz's DOT, node i named ``n<i>``, roots red, each
    reference an edge with its label. Bounded as a cycle page's drawing: at most 300 objects
    (the roots first, then those nearest them) and 450 references; a note says what is left
    out. Every label is cut and escaped."""
    return str(_tensorgc._graph_dot(*_checked(nodes))[0])


def to_html(nodes: Sequence[Any]) -> str:
    """torch's to_html: a self-contained page (no script or style from the network) with the
    drawing (to_dot's, laid out in tensorgc's render worker within the render budget; when the
    layout fails or overruns, the page says why), a summary listing the roots, and each node's
    context shown when the mouse is over it. At most 5 MiB."""
    dot, text = _tensorgc._graph_dot(*_checked(nodes))
    return str(_tensorgc._graph_page("tensorgc: object graph", text, dot))
