"""What depends on the interpreter tensorgc runs on, and what it does where that is missing.

Some of tensorgc reads the cyclic collector's own lists (the detector's young-generation pre-scan
and its islands, owners()' visited marks) or relies on its generations (the tensor index). The
build does so only for the collectors it was written and tested against (CPython 3.10-3.13 with
the GIL), and only when the interpreter that loaded it is the one it was built for; elsewhere
(3.14 and later, whose collector is incremental; $TENSORGC_PORTABLE set) it runs on the public gc
API alone. features() says which of them are on and why not; importing tensorgc where any is off
issues one PortableModeWarning (module "tensorgc"), which ``-W "ignore:::tensorgc"`` or
``warnings.filterwarnings("ignore", module="tensorgc")`` before the import silences.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional

from .. import _tensorgc


class PortableModeWarning(RuntimeWarning):
    """tensorgc runs on the public gc API only here: some features are off (features())."""


class Feature(NamedTuple):
    """One feature that depends on the interpreter."""

    title: str    #: what it is
    enabled: bool
    why: str      #: why it is off on this interpreter ("" when on)
    effect: str   #: what being off means for a user ("" when on)


# name -> (title, effect when off), in the order features() lists them
_KNOWN = {
    "young_prescan": (
        "collections run alone, the detector looking at their garbage from inside them (the "
        "sentinel; the young-generation pre-scan where it cannot be planted)",
        "every collection runs the detector (DEBUG_SAVEALL and a look at its garbage), not only "
        "those whose garbage holds a tensor: more overhead while a detector is on"),
    "finalizer_cycles": (
        "reports of cycles that finalizers break",
        "a cycle that a __del__ or a suspended generator's close() breaks during the collection "
        "is freed without a report"),
    "tensor_index": (
        "the tensor index (track_tensors)",
        "track_tensors() returns False, and MemReporter reports walk every object"),
    "owner_marks": (
        "owners()' visited marks in the collector's object headers",
        "owners() keeps the objects it visited in a map instead: about 24 more bytes each"),
}


def features() -> Dict[str, Feature]:
    """{name: Feature} for every feature that depends on the interpreter, on or off.

    Names: ``young_prescan``, ``finalizer_cycles``, ``tensor_index``, ``owner_marks``. Where a
    feature is off, ``why`` says why (e.g. "CPython 3.14 and later collect incrementally ...")
    and ``effect`` what it changes; the rest of tensorgc works the same everywhere.
    """
    raw: Dict[str, Optional[str]] = _tensorgc._features()
    out: Dict[str, Feature] = {}
    for name, (title, effect) in _KNOWN.items():
        why = raw.get(name, "not reported by this build")
        out[name] = Feature(title, why is None, why or "", "" if why is None else effect)
    return out


def portable_message() -> Optional[str]:
    """The import-time warning's text, or None where every feature is on."""
    off = [f for f in features().values() if not f.enabled]
    if not off:
        return None
    reasons = sorted({f.why for f in off})
    return ("tensorgc: running on the public gc API only (" + "; ".join(reasons) + "). Off: "
            + ", ".join(f.title for f in off)
            + ". tensorgc.features() says what each changes; -W \"ignore:::tensorgc\" silences "
            "this.")
