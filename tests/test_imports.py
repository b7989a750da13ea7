"""The package's modules import each other one way: no module imports one that imports it back
(directly or through others, at the top or inside a function), and none imports the package's
__init__ (which imports them all). Read from the source, so a lazy import inside a function
counts too."""
import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "tensorgc")


def _modules():
    return sorted(f[:-3] for f in os.listdir(PKG) if f.endswith(".py"))


def _extensions():
    """The C modules' names (tensorgc/_tensorgc.cpython-311-x86_64-linux-gnu.so: _tensorgc)."""
    return {f.split(".")[0] for f in os.listdir(PKG) if f.endswith((".so", ".pyi"))}


def _graph():
    """{module: {modules of the package it imports}}; "__init__" for the package itself."""
    mods = set(_modules()) | _extensions()
    graph = {}
    for mod in _modules():
        with open(os.path.join(PKG, mod + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:  # from . import x: a module, or a name of the package's __init__
                    deps.update(a.name if a.name in mods else "__init__" for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorgc"):
                parts = node.module.split(".")
                deps.add(parts[1] if len(parts) > 1 else "__init__")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if parts[0] == "tensorgc":
                        deps.add(parts[1] if len(parts) > 1 else "__init__")
        deps.discard(mod)
        graph[mod] = deps
    return graph


def _cycle(graph):
    """A cycle as a list of modules, or None."""
    state = {}  # 1: on the current path, 2: done (no cycle through it)

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                found = visit(d, path + [d])
                if found:
                    return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_the_graph_is_read_from_every_module():
    graph = _graph()
    assert {"snapshot", "categories", "cli", "_errors"} <= set(graph)
    assert "categories" in graph["snapshot"]  # a lazy import inside a function counts too
    assert "_tensorgc" in graph["allocator"]


def test_categories_and_snapshot_import_one_way():
    graph = _graph()
    assert "snapshot" not in graph["categories"]
    assert "_errors" in graph["categories"] and "_errors" in graph["snapshot"]


def test_no_module_imports_one_that_imports_it_back():
    graph = _graph()
    graph.pop("__init__")  # it imports every module to re-export the API
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)
    importers = sorted(m for m, deps in graph.items() if "__init__" in deps)
    assert importers == [], f"{importers} import the package's __init__ (which imports them)"


def test_a_cycle_is_found_when_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_snapshot_and_categories_import_first_in_a_fresh_interpreter():
    # in either order, alone, without the package's __init__ having imported them first
    for first in ("tensorgc.categories", "tensorgc.snapshot"):
        code = (f"import importlib, sys; m = importlib.import_module({first!r}); "
                "s = sys.modules['tensorgc.snapshot']; c = sys.modules['tensorgc.categories']; "
                "from tensorgc._errors import SnapshotError as E; "
                "assert s.SnapshotError is c.SnapshotError is E; print('ok')")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, cwd=ROOT)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
