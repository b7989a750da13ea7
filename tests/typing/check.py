"""``python check.py``: tests/test_typing.py's type checks in one mypy process, so that torch's
annotations (~25 s of CPU) are analysed once, not once per check:

- ``mypy --strict -p tensorgc -m sample_user -m misuse`` (the options parsed as the command line
  parses them, with tests/typing/mypy.ini), whose messages are each file's verdict;
- ``python -m mypy.stubtest tensorgc._tensorgc --allowlist stubtest_allowlist.txt``, whose mypy
  build is that same analysis (the stub and the package around it, strictly: the strict check
  passes them too), and whose build errors are those of every file but the two scripts, which its
  own build would not read. Its comparison of the stub with the module, its allowlist and its exit
  status are stubtest's own.

Run with MYPYPATH holding the checkout and tests/typing. Prints one JSON object: "mypy" (the
messages, as mypy prints them), "sources" (how many files were checked), "stubtest" (exit status)
and "stubtest_output".
"""
import contextlib
import io
import json
import os
import sys

import mypy.build
import mypy.stubtest
from mypy.main import process_options

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ("sample_user", "misuse")


def main() -> int:
    check_sources, check_options = process_options(
        ["--strict", "--config-file", os.path.join(HERE, "mypy.ini"), "--hide-error-context",
         "--no-color-output", "--show-error-codes", "--no-incremental", "-p", "tensorgc"]
        + [arg for name in SCRIPTS for arg in ("-m", name)])
    scripts = {os.path.join(HERE, name + ".py") for name in SCRIPTS}
    real_build = mypy.build.build
    out = {}

    def build(sources, options):  # stubtest's call: its sources, its options
        known = {s.module for s in check_sources}
        res = real_build(check_sources + [s for s in sources if s.module not in known],
                         check_options)
        out["mypy"] = list(res.errors)
        out["sources"] = len(check_sources)
        res.errors = [m for m in res.errors
                      if os.path.abspath(m.split(":", 1)[0]) not in scripts]
        return res

    mypy.build.build = build
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            status = mypy.stubtest.test_stubs(mypy.stubtest.parse_options(
                ["tensorgc._tensorgc", "--allowlist", os.path.join(HERE, "stubtest_allowlist.txt"),
                 "--mypy-config-file", os.path.join(HERE, "mypy.ini")]))
    finally:
        mypy.build.build = real_build
    assert "mypy" in out, printed.getvalue()  # stubtest built, so the check ran
    out.update(stubtest=status, stubtest_output=printed.getvalue())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
