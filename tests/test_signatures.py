"""Every C function and method of the extensions has a text signature: inspect.signature works,
help() shows the signature and no stray "--" line, defaults are the simple ones a text signature
can hold, and the signature is what the C code parses: arity beyond it or short of it is a
TypeError, a positional-only parameter refuses its name as a keyword, and a parameter that takes a
keyword takes it under the signature's name. Calls that would do something are made only where
they are harmless (a handle registered and removed); every other probe is refused before the
function's body runs."""
import gc
import inspect
import pydoc
import types

import pytest

import tensorgc
from tensorgc import _tensorgc, _tensorgc_testing

P = inspect.Parameter
SIMPLE_DEFAULTS = (type(None), bool, int, str)


def _module_functions():
    for mod in (_tensorgc, _tensorgc_testing):
        for name in sorted(vars(mod)):
            obj = getattr(mod, name)
            if isinstance(obj, types.BuiltinFunctionType):
                yield f"{mod.__name__}.{name}", obj


def _hooks():
    """The gc.callbacks entries, which no module attribute names."""
    h = tensorgc.observe_garbage(lambda objs: None)
    try:
        tracked = _tensorgc._track_tensors(True)
    except RuntimeError:  # torch is not imported: no index to hook
        tracked = False
    try:
        found = {getattr(cb, "__name__", ""): cb for cb in gc.callbacks}
    finally:
        h.remove()
        _tensorgc._track_tensors(False)
    hooks = [("_gc_hook", found["_gc_hook"])]
    if tracked:  # the index exists where the collector has generations
        hooks.append(("_index_hook", found["_index_hook"]))
    return hooks


HEAP_TYPES = [_tensorgc.CycleReport, _tensorgc.Handle, _tensorgc._LineProfiler]


def _type_methods():
    for tp in HEAP_TYPES:
        for name, obj in sorted(vars(tp).items()):
            if isinstance(obj, types.MethodDescriptorType):
                yield f"{tp.__name__}.{name}", obj


FUNCTIONS = list(_module_functions())
METHODS = list(_type_methods())


def test_the_walk_finds_every_table():
    names = {name.rsplit(".", 1)[1] for name, _ in FUNCTIONS}
    assert {"observe_cycles", "_timeline", "_lp_start", "_tensor_rows", "_shutdown"} <= names
    assert {"_young_scan", "_phase_times", "_renderer_stats"} <= names
    assert {"Handle.remove", "_LineProfiler.set_source", "CycleReport._repr_html_"} <= {
        name for name, _ in METHODS}


def test_testing_functions_are_not_in_the_public_module():
    testing = {n for n in vars(_tensorgc_testing) if not n.startswith("__")}
    assert testing and not testing & set(vars(_tensorgc))
    for name in testing:
        fn = getattr(_tensorgc_testing, name)
        assert fn.__self__ is _tensorgc  # bound to the module whose state it reads
        assert fn.__module__ == "tensorgc._tensorgc_testing"


def _check_text_signature(name, obj):
    assert obj.__text_signature__ is not None, f"{name}: no text signature"
    sig = inspect.signature(obj)
    doc = obj.__doc__ or ""
    assert doc.strip(), f"{name}: no docstring"
    assert "($" not in doc and "\n--\n" not in doc, f"{name}: the signature line was not taken"
    text = pydoc.plain(pydoc.render_doc(obj))
    assert "\n--\n" not in text and not any(line.strip() == "--" for line in text.splitlines())
    for p in sig.parameters.values():
        if p.default is not P.empty:
            assert isinstance(p.default, SIMPLE_DEFAULTS), f"{name}: default {p.default!r}"
    return sig


@pytest.mark.parametrize("name,fn", FUNCTIONS + _hooks(), ids=lambda v: v if isinstance(v, str) else "")
def test_function_has_its_signature(name, fn):
    _check_text_signature(name, fn)


@pytest.mark.parametrize("name,meth", METHODS, ids=lambda v: v if isinstance(v, str) else "")
def test_method_has_its_signature(name, meth):
    sig = _check_text_signature(name, meth)
    assert next(iter(sig.parameters)) == "self"


@pytest.mark.parametrize("tp", HEAP_TYPES, ids=lambda t: t.__name__)
def test_heap_type_has_its_signature(tp):
    assert str(inspect.signature(tp)) == "()"


class _Arg:
    """A value no function here accepts for anything but an object."""


def _arity(sig):
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is P.empty]
    star = any(p.kind == P.VAR_POSITIONAL for p in params)
    return len(required), len(positional), star


def _probe(name, fn, sig):
    """Calls the C code cannot take, each refused before its body runs."""
    need, most, star = _arity(sig)
    if not star:
        with pytest.raises(TypeError):
            fn(*[_Arg()] * (most + 1))
    if need > 0:
        with pytest.raises(TypeError):
            fn(*[_Arg()] * (need - 1))
    for p in sig.parameters.values():
        if p.kind == P.POSITIONAL_ONLY:
            args = [_Arg()] * need
            with pytest.raises(TypeError, match="keyword"):
                fn(*args, **{p.name: _Arg()})


@pytest.mark.parametrize("name,fn", FUNCTIONS + _hooks(), ids=lambda v: v if isinstance(v, str) else "")
def test_function_parses_what_its_signature_says(name, fn):
    _probe(name, fn, inspect.signature(fn))


def _instances():
    h = tensorgc.observe_garbage(lambda objs: None)
    h.remove()
    return {_tensorgc.Handle: h, _tensorgc._LineProfiler: _tensorgc._LineProfiler()}


@pytest.mark.parametrize("name,meth", [(n, m) for n, m in METHODS
                                       if m.__objclass__ is not _tensorgc.CycleReport],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_method_parses_what_its_signature_says(name, meth):
    obj = _instances()[meth.__objclass__]
    bound = getattr(obj, meth.__name__)
    _probe(name, bound, inspect.signature(bound))


# Harmless values for the parameters that take keywords, by name.
KEYWORD_VALUES = {"callback": lambda *args: None, "device": "any"}


def _keywords(fn):
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)]


KEYWORD_FUNCTIONS = [(name, fn) for name, fn in FUNCTIONS if _keywords(fn)]


def test_the_keyword_functions_are_the_observers():
    assert {name.rsplit(".", 1)[1] for name, _ in KEYWORD_FUNCTIONS} == {
        "observe_cycles", "observe_tensor_cycles"}


@pytest.mark.parametrize("name,fn", KEYWORD_FUNCTIONS,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_keywords_are_taken_under_the_signatures_names(name, fn):
    keywords = _keywords(fn)
    assert set(keywords) <= set(KEYWORD_VALUES), f"{name}: no harmless value for {keywords}"
    handle = fn(**{k: KEYWORD_VALUES[k] for k in keywords})
    assert isinstance(handle, _tensorgc.Handle)
    handle.remove()
    with pytest.raises(TypeError):
        fn(**{k: KEYWORD_VALUES[k] for k in keywords}, no_such_parameter=1)
