"""What `import tensorgc` loads: the C extension and a few small modules, the rest of the API on
first use (tensorgc/__init__.py says why). Each check runs in a fresh interpreter, where nothing
else has imported a part yet.
"""
import ast
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FACE = os.path.join(ROOT, "tensorgc", "__init__.py")

# All that `import tensorgc` may load of the package.
CORE = {"tensorgc", "tensorgc._tensorgc", "tensorgc._version", "tensorgc._common",
        "tensorgc._common.errors", "tensorgc._common.features", "tensorgc._common.output",
        "tensorgc._common.rank"}


def _fresh(code):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_importing_the_package_loads_its_core_only():
    out = _fresh("""
        import sys
        import tensorgc
        print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorgc'))
    """)
    assert set(eval(out)) == CORE


def test_a_detector_and_its_reports_load_nothing_more():
    """observe_cycles and everything a report gives (text, page, tensors) are the C extension's."""
    pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build)
    out = _fresh("""
        import gc, sys
        import torch
        import tensorgc
        seen = []
        def cb(report):
            seen.append((len(report.text) > 0, len(report.html) > 0, report.nbytes))
        remove = tensorgc.observe_cycles(cb, device='cpu')
        class Holder:
            pass
        h = Holder(); h.t = torch.ones(8); h.me = h; del h
        gc.collect()
        remove()
        print(seen)
        print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorgc'))
    """)
    seen, loaded = out.splitlines()
    assert seen == "[(True, True, 32)]"
    assert set(eval(loaded)) == CORE


def test_every_name_of_the_api_resolves_and_stays_bound():
    out = _fresh("""
        import sys, tensorgc
        first = {n: getattr(tensorgc, n) for n in tensorgc.__all__}
        assert all(getattr(tensorgc, n) is v for n, v in first.items())
        assert all(n in vars(tensorgc) for n in tensorgc.__all__)
        assert set(tensorgc.__all__) <= set(dir(tensorgc))
        ns = {}
        exec('from tensorgc import *', ns)
        assert all(ns[n] is first[n] for n in tensorgc.__all__)
        print(tensorgc.MemReporter.__module__, tensorgc.snapshot.__module__)
    """)
    assert out.split() == ["tensorgc.reporter", "tensorgc.allocator.snapshot"]


def test_submodules_resolve_as_attributes_and_unknown_names_raise():
    out = _fresh("""
        import tensorgc
        print(tensorgc.reporter.__name__, tensorgc.segments.__name__)
        for bad in ('no_such_name', 'MemReporterr'):
            try:
                getattr(tensorgc, bad)
            except AttributeError as e:
                print(type(e).__name__, bad in str(e))
        print(hasattr(tensorgc, 'no_such_name'))
    """)
    assert out.split() == ["tensorgc.reporter", "tensorgc.allocator.segmap",
                           "AttributeError", "True", "AttributeError", "True", "False"]


def test_a_function_keeps_its_name_when_the_module_path_is_imported_first():
    """tensorgc.snapshot, .timeline and .growth are functions and flat-layout module paths; the
    import system binds a submodule on its package once imported, before or after the function
    was first used."""
    out = _fresh("""
        import tensorgc.snapshot, tensorgc.timeline, tensorgc.growth
        import tensorgc
        print(*(callable(getattr(tensorgc, n)) for n in ('snapshot', 'timeline', 'growth')))
        from tensorgc import timeline
        import tensorgc.allocator.timeline as m
        print(timeline is m.timeline, tensorgc.timeline is m.timeline)
    """)
    assert out.split() == ["True"] * 5


def test_the_lazy_table_is_what_the_type_checker_reads():
    """Every name imported under TYPE_CHECKING is in _LAZY with the same module, and the other
    way round; together with the names bound at import they are __all__."""
    tree = ast.parse(open(FACE, encoding="utf-8").read(), FACE)
    lazy, checked, eager, listed = {}, {}, set(), set()
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) or isinstance(node, ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if isinstance(target, ast.Name) and target.id == "_LAZY":
                lazy = ast.literal_eval(node.value)
            elif isinstance(target, ast.Name) and target.id == "__all__":
                listed = set(ast.literal_eval(node.value))
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.level == 1:
                    checked.update({a.asname or a.name: imp.module for a in imp.names})
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            eager.update(a.asname or a.name for a in node.names
                         if not (a.asname or a.name).startswith("_"))
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            eager.add(node.name)
    assert lazy and checked == lazy
    assert listed == (eager | set(lazy)) - {"__version__"}, (listed ^ (eager | set(lazy)))


def test_probing_a_name_never_raises_anything_but_attribute_error():
    out = _fresh("""
        import sys
        sys.modules['IPython'] = None  # as where IPython is not installed
        import tensorgc
        print(hasattr(tensorgc, 'magics'), hasattr(tensorgc, 'a.b'), hasattr(tensorgc, '..'),
              getattr(tensorgc, 'reporter.x', 'default'))
    """)
    assert out.split() == ["False", "False", "False", "default"]


def test_a_module_the_program_assigns_to_an_api_name_is_kept():
    out = _fresh("""
        import types, tensorgc
        fake = types.ModuleType('fake')
        tensorgc.timeline = fake
        print(tensorgc.timeline is fake)
        import tensorgc.snapshot
        print(callable(tensorgc.snapshot))
    """)
    assert out.split() == ["True", "True"]


def test_the_exit_summary_comes_after_the_programs_own_exit_functions():
    """Cycles leaked by an exit function the program registered after importing tensorgc are in
    warn_tensor_cycles' last summary, however late its counting module was first loaded."""
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import atexit, gc, logging, tempfile
        import torch
        import tensorgc
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        class A:
            pass
        def leak():
            for _ in range(5):
                a = A(); a.self = a; a.t = torch.zeros(100); del a
                gc.collect()
        atexit.register(leak)
        tensorgc.warn_tensor_cycles(device="cpu", directory=tempfile.mkdtemp())
        leak()
    """)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "seen 10 times" in r.stderr, r.stderr
