"""The package's layout, read from the source with ast:

* no module imports the package's face (tensorgc/__init__.py, which re-exports the API of
  every part), and the modules import each other one way: no circle, with an import
  inside a function counted as much as one at the top;
* the flat layout's module paths (tensorgc/snapshot.py and the like) hand out the real module,
  and nothing inside the package imports through them;
* no subpackage whose __init__ holds code binds a name that one of its submodules has
  (importing the submodule would replace it);
* no source file is longer than 1,500 lines;
* in C, the files depend on one another one way: no circle of #include "..." and no circle of
  calls between files (a function one file defines and another names), and the subsystems'
  folders depend one way (common/ and tensor/ at the bottom, the graph engine above them, the
  tools above it, module/ at the top).

The import graph has one node per module file (a package is its __init__.py) and the C modules.
`from P import n` depends on P.n where that is a module, else on P. A package __init__ that only
re-exports (a docstring, imports, __all__) stands for what it imports: depending on it is
depending on each of them, so a circle through such an __init__ is found too. The parent
packages that Python runs before a submodule are not edges: every import of a submodule runs
the face, which is why the face must be imported by nobody.
"""
import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "tensorgc")
MAX_LINES = 1500
# What a module may need that the package does not require (each part says so where it needs it).
OPTIONAL = ("IPython", "torch", "pytest", "lightning", "pytorch_lightning", "transformers", "accelerate")
C_DIRS = ("common", "tensor", "cycles", "reporter", "allocator", "module", "include", "graph")


def _module_files():
    """{dotted name: path} of every Python module of the package."""
    out = {}
    for d, dirs, files in os.walk(PKG):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        rel = os.path.relpath(d, ROOT).replace(os.sep, ".")
        for f in sorted(files):
            if f.endswith(".py"):
                out[rel if f == "__init__.py" else f"{rel}.{f[:-3]}"] = os.path.join(d, f)
    return out


def _extensions():
    """The C modules (tensorgc/_tensorgc.pyi, tensorgc/_tensorgc.cpython-311-...so)."""
    return {"tensorgc." + f.split(".")[0] for f in os.listdir(PKG) if f.endswith((".so", ".pyi"))}


def _parse(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _is_alias(tree):
    """A module of the flat layout's paths: it sets sys.modules[__name__] to another module."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if (isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules"
                    and ast.unparse(t.slice) == "__name__"):
                return True
    return False


def _reexport_only(tree):
    """A package __init__ of a docstring, imports and __all__ only."""
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            continue
        return False
    return True


def _imports(name, path, tree, modules):
    """The modules of the package that module `name` imports, anywhere in its source. The
    TYPE_CHECKING imports of an alias are skipped: they are for the type checker only."""
    base = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    deps = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tensorgc":
                    deps.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                target = ".".join(parts[:len(parts) - node.level + 1])
                target = f"{target}.{node.module}" if node.module else target
            else:
                target = node.module or ""
            if target.split(".")[0] != "tensorgc":
                continue
            for a in node.names:
                deps.add(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target)
    deps.discard(name)
    return deps


def _layout():
    """(graph {module: set of modules}, aliases {path: real module}, trees {module: ast})."""
    files = _module_files()
    modules = set(files) | _extensions()
    trees = {m: _parse(p) for m, p in files.items()}
    aliases = {}
    graph = {}
    for m, p in files.items():
        tree = trees[m]
        if _is_alias(tree):
            body = ast.Module([n for n in tree.body if not isinstance(n, ast.If)], [])
            (aliases[m],) = _imports(m, p, body, modules)
            graph[m] = {aliases[m]}
        else:
            graph[m] = _imports(m, p, tree, modules)
    return graph, aliases, trees


def _expand(graph, trees, files):
    """The graph with each re-export-only package __init__ replaced by what it imports."""
    reexport = {m for m in graph if files[m].endswith("__init__.py") and m != "tensorgc"
                and _reexport_only(trees[m])}

    def through(d, seen=()):
        if d not in reexport or d in seen:
            return {d}
        return set().union(set(), *(through(x, seen + (d,)) for x in graph[d])) if graph[d] \
            else set()

    return {m: set().union(set(), *(through(d) for d in deps)) - {m}
            for m, deps in graph.items() if m not in reexport}


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


@pytest.fixture(scope="module")
def layout():
    graph, aliases, trees = _layout()
    return graph, aliases, trees, _expand(graph, trees, _module_files())


def test_the_graph_is_read_from_every_module(layout):
    graph, aliases, _, _ = layout
    assert {"tensorgc.allocator.snapshot", "tensorgc.allocator.categories", "tensorgc.cli",
            "tensorgc._common.errors", "tensorgc.cycles.observe"} <= set(graph)
    # a lazy import inside a function counts too
    assert "tensorgc.reporter" in graph["tensorgc.allocator.categories"]
    assert "tensorgc._tensorgc" in graph["tensorgc.allocator"]  # from .. import _tensorgc
    assert aliases["tensorgc.timeline"] == "tensorgc.allocator.timeline"
    assert "tensorgc.allocator.timeline" in graph["tensorgc"]  # the face imports the parts


def test_no_module_imports_the_face(layout):
    graph = layout[0]
    importers = sorted(m for m, deps in graph.items() if "tensorgc" in deps)
    assert importers == [], f"{importers} import the package's face (which imports them)"


def test_no_module_imports_one_that_imports_it_back(layout):
    expanded = layout[3]
    cycle = _cycle(expanded)
    assert cycle is None, " -> ".join(cycle)


def test_the_checks_find_what_they_look_for():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    # a circle through a re-export-only __init__: p re-exports p.x, p.x imports q, q imports p
    graph = {"p": {"p.x"}, "p.x": {"q"}, "q": {"p"}}
    trees = {"p": ast.parse('"""p"""\nfrom .x import f\n__all__ = ["f"]\n')}
    files = {"p": "p/__init__.py", "p.x": "p/x.py", "q": "q.py"}
    assert _cycle(_expand(graph, trees, files)) == ["p.x", "q", "p.x"]
    tree = ast.parse("from .b import c\nfrom .. import d\nfrom . import e\nimport tensorgc.f\n"
                     "def g():\n    from tensorgc import h\n")
    assert _imports("tensorgc.a.m", "tensorgc/a/m.py", tree, {"tensorgc.a.e"}) == {
        "tensorgc.a.b", "tensorgc", "tensorgc.a.e", "tensorgc.f"}
    assert _imports("tensorgc.a", "tensorgc/a/__init__.py", ast.parse("from . import e\n"),
                    {"tensorgc.a.e"}) == {"tensorgc.a.e"}
    assert _is_alias(ast.parse("import sys\nsys.modules[__name__] = m\n"))
    assert not _reexport_only(ast.parse("from .x import f\ng = f()\n"))


def test_nothing_inside_imports_through_the_flat_paths(layout):
    graph, aliases, _, _ = layout
    users = sorted(m for m, deps in graph.items() if m not in aliases and m != "tensorgc"
                   and deps & set(aliases))
    assert users == [], f"{users} import a flat-layout path instead of the module itself"
    assert all(real not in aliases and real in graph for real in aliases.values())


def test_no_package_module_binds_the_name_of_its_submodule(layout):
    graph, _, trees, _ = layout
    files = _module_files()
    bad = []
    for pkg, path in files.items():
        if not path.endswith("__init__.py") or pkg == "tensorgc":
            continue
        subs = {m.rpartition(".")[2] for m in graph if m.rpartition(".")[0] == pkg}
        bound = set()
        for node in ast.walk(trees[pkg]):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, ast.Import):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                # `from . import x` binds the submodule x itself: the one binding allowed
                own = node.level == 1 and node.module is None
                bound |= {a.asname or a.name for a in node.names
                          if not (own and a.name in subs and a.asname in (None, a.name))}
        bad += [f"{pkg}.{n}" for n in sorted(subs & bound)]
    assert bad == [], f"names that importing their submodule would replace: {bad}"


# In a fresh interpreter: load(name) imports a module, or gives None where an optional
# dependency (IPython for magics) is missing.
_IMPORT = ("def load(name):\n"
           "    try:\n"
           "        return importlib.import_module(name)\n"
           "    except ModuleNotFoundError as e:\n"
           f"        assert e.name.partition('.')[0] in {OPTIONAL!r}, e\n"
           "        return None\n")


def _fresh(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_the_flat_paths_hand_out_the_modules_themselves():
    """In a fresh interpreter: each old path is the real module; the package's functions that
    share a name with a path (snapshot, timeline, growth) keep it after the path is imported."""
    _, aliases, _ = _layout()
    code = ("import importlib, sys, tensorgc\n"
            f"aliases = {aliases!r}\n"
            + _IMPORT +
            "n = 0\n"
            "for old, real in sorted(aliases.items()):\n"
            "    m = load(old)\n"
            "    if m is None:\n"
            "        continue\n"
            "    n += 1\n"
            "    assert m is sys.modules[real] is sys.modules[old], old\n"
            "    leaf = old.rpartition('.')[2]\n"
            "    attr = getattr(tensorgc, leaf)\n"
            "    assert attr is m or (callable(attr) and attr.__module__ == real), old\n"
            "assert tensorgc.timeline.__name__ == 'timeline' and callable(tensorgc.snapshot)\n"
            "from tensorgc.timeline import timeline_html\n"
            "assert timeline_html is sys.modules['tensorgc.allocator.timeline'].timeline_html\n"
            "print(n)\n")
    r = _fresh(code)
    assert r.returncode == 0, r.stderr
    assert len(aliases) >= int(r.stdout) >= 10


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(n for n in _module_files() if not n.endswith("__main__"))
    code = ("import importlib, sys\n"
            + _IMPORT +
            f"for n in {names!r}:\n"
            "    load(n)\n"
            "s = sys.modules['tensorgc.snapshot']; c = sys.modules['tensorgc.categories']\n"
            "from tensorgc._common.errors import SnapshotError as E\n"
            "assert s.SnapshotError is c.SnapshotError is E\n"
            "print('ok')\n")
    r = _fresh(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def _tracked(patterns):
    """The repository's files matching patterns (paths relative to the root), found by walking
    the tree (hidden folders and build/ left out): the same in a clean clone as with git, and in
    a copy without its history."""
    import fnmatch
    out = []
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x != "build"]
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), ROOT)
            if any(fnmatch.fnmatch(rel, p) for p in patterns):
                out.append(rel)
    return sorted(out)


@pytest.mark.parametrize("kind", ["python", "c and js"])
def test_no_source_file_is_longer_than_the_limit(kind):
    if kind == "python":
        files = _tracked(["*.py"])
        assert "tensorgc/allocator/timeline.py" in files
    else:
        files = _tracked([f"{d}/*.{e}" for d in C_DIRS for e in ("c", "h")]
                         + ["tensorgc/*.js"])
        assert "cycles/hook.c" in files and "tensorgc/allocator/page/timeline_ui.js" in files
    long = []
    for rel in files:
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            long.append(f"{rel}: {n} lines")
    assert long == [], f"longer than {MAX_LINES} lines: {long}"


def test_each_subcommand_is_a_module_of_the_cli_package():
    import argparse

    from tensorgc import cli

    (sub,) = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    names = set(sub.choices)
    assert names == set(cli.COMMANDS) and len(names) >= 6
    for name in names:
        assert cli.COMMANDS[name].__module__ == f"tensorgc.cli.{name}", name


# The C subsystems from the bottom up: a folder may use those before it, never one after it.
C_LAYERS = ("common", "tensor", "graph", "allocator", "reporter", "cycles", "module")
_C_DEF = re.compile(r"^([a-z_][a-z0-9_]*)\(", re.M)  # the house style: a definition's name opens its line


def _c_sources():
    files = _tracked([f"{d}/*.{e}" for d in C_DIRS for e in ("c", "h")])
    text = {}
    for rel in files:
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            text[rel] = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)  # comments name files freely
    return text


def _c_includes(text):
    """{file: {included file}} for #include "x", resolved as the build does (the including
    file's folder, then include/, then the root)."""
    graph = {}
    for rel, t in text.items():
        deps = set()
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', t, re.M):
            for base in (os.path.dirname(rel), "include", ""):
                cand = os.path.normpath(os.path.join(base, name))
                if cand in text:
                    deps.add(cand)
                    break
        graph[rel] = deps
    return graph


def _c_calls(text):
    """{file: {file defining a non-static function that this file names}} over the .c files."""
    defs = {}
    for rel, t in text.items():
        if not rel.endswith(".c"):
            continue
        for m in _C_DEF.finditer(t):
            line_before = t[t.rfind("\n", 0, m.start() - 1) + 1:m.start()]
            if "static" not in line_before and not m.group(1).startswith("__"):
                defs.setdefault(m.group(1), rel)
    word = re.compile(r"\b(%s)\b" % "|".join(sorted(defs, key=len, reverse=True)))
    return {rel: {defs[w] for w in word.findall(t)} - {rel}
            for rel, t in text.items() if rel.endswith(".c")}


def _folder(rel):
    if rel == "module/state.h":  # the module state: each subsystem's binding reads its own part
        return None
    top = rel.split("/")[0]
    return top if top in C_LAYERS else None


@pytest.fixture(scope="module")
def c_graphs():
    text = _c_sources()
    assert "cycles/hook.c" in text and "graph/owners.c" in text
    return _c_includes(text), _c_calls(text)


def test_c_files_include_one_another_one_way(c_graphs):
    includes, _ = c_graphs
    assert includes["cycles/cycles.h"] >= {"include/tensorgc/graph.h", "cycles/hook.h"}
    assert _cycle(includes) is None


def test_c_files_call_one_another_one_way(c_graphs):
    _, calls = c_graphs
    assert "graph/owners.c" in calls["graph/binding.c"]  # the reading sees calls
    assert _cycle(calls) is None


@pytest.mark.parametrize("kind", ["includes", "calls"])
def test_c_subsystems_depend_downwards(c_graphs, kind):
    graph = c_graphs[0] if kind == "includes" else c_graphs[1]
    wrong = []
    for rel, deps in graph.items():
        a = _folder(rel)
        for d in deps:
            b = _folder(d)  # include/tensorgc/*.h are contracts: anyone may read them
            if a and b and a != b and C_LAYERS.index(b) > C_LAYERS.index(a):
                wrong.append(f"{rel} -> {d}")
    assert wrong == []


def test_the_c_checks_find_what_they_look_for():
    text = {"a/x.c": '#include "y.h"\nint\nf_x(void)\n{\n    return f_y();\n}\n',
            "a/y.h": '#include "x.h"\n', "a/x.h": '#include "y.h"\n',
            "a/y.c": "int\nf_y(void)\n{\n    return f_x();\n}\n"}
    assert _cycle(_c_includes(text)) is not None
    assert _c_calls(text) == {"a/x.c": {"a/y.c"}, "a/y.c": {"a/x.c"}}
    assert _cycle(_c_calls(text)) is not None
