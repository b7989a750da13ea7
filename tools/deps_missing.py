"""Which of `make deps`'s pip steps are due, from one interpreter: the names of the steps whose
check fails, space-separated on one line. Each check in an interpreter of its own cost
`make test` some 2 s before its first test. Nothing is imported but the standard library: torch
and IPython are looked for, not imported."""

import argparse
import glob
import importlib.metadata as metadata
import importlib.util
import os
import sys


def _version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _found(*modules):
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):
        return False


def _setuptools_and_wheel():
    """setuptools, and wheel: its own, or the copy recent setuptools carries (found once
    setuptools is imported, which takes longer than all the other checks)."""
    try:
        spec = importlib.util.find_spec("setuptools")
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    vendored = [os.path.join(d, "_vendor", "wheel") for d in spec.submodule_search_locations or ()]
    return _found("wheel") or any(os.path.isdir(d) for d in vendored)


def due(args):
    steps = []
    if args.torch != "none" and not _found("torch"):
        steps.append("torch")
    if not _found("pytest"):
        steps.append("pytest")
    pinned = {"xdist": ("pytest-xdist", args.xdist), "coverage": ("coverage", args.coverage)}
    steps += [step for step, (dist, want) in pinned.items() if _version(dist) != want]
    if not _found("IPython"):
        steps.append("ipython")
    pinned = {"mypy": ("mypy", args.mypy), "playwright": ("playwright", args.playwright)}
    steps += [step for step, (dist, want) in pinned.items() if _version(dist) != want]
    if args.torch != "none" and any(_version(pin.split("==")[0]) != pin.split("==")[1]
                                    for pin in args.integ.split()):
        steps.append("integ")
    if not _setuptools_and_wheel():
        steps.append("setuptools")
    if not any(glob.glob(p + "/nvidia/cu*/include/nvml.h") for p in sys.path if p):
        steps.append("nvml")
    return steps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("torch", "xdist", "coverage", "mypy", "playwright", "integ"):
        p.add_argument(f"--{name}", required=True)
    print(" ".join(due(p.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
