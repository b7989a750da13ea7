"""``python check.py``: tests/test_typing.py's type checks, in one process:

- ``mypy --strict -p tensorgc -m sample_user -m misuse`` (the options parsed as the command line
  parses them, with tests/typing/mypy.ini), whose messages are each file's verdict; it reads
  torch's annotations (~25 s of CPU, more on a busy machine), which mypy's incremental cache keeps
  between runs, outside the checkout (a fresh clone finds it; mypy rereads whatever changed, its
  options included): mypy-<python>-<mypy> in $TENSORGC_TEST_CACHE, else in tensorgc-tests under
  $XDG_CACHE_HOME or ~/.cache, else (neither writable) a temporary folder: a cold run;
- ``python -m mypy.stubtest tensorgc._tensorgc --allowlist stubtest_allowlist.txt``, stubtest's
  own comparison of the stub with the module (its build is never incremental, as the comparison
  needs whole trees), with tests/typing/stubtest.ini: torch's modules are not followed (their
  types read as Any), since whether the stub's annotations are right is the strict check's
  verdict above; stubtest's is whether the stub has what the module has.

Run with MYPYPATH holding the checkout and tests/typing. Prints one JSON object: "mypy" (the
messages, as mypy prints them), "sources" (how many files were checked), "stubtest" (exit status)
and "stubtest_output".
"""
import atexit
import contextlib
import fcntl
import io
import json
import os
import shutil
import sys
import tempfile

import mypy.build
import mypy.stubtest
import mypy.version
from mypy.main import process_options

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ("sample_user", "misuse")


def cache_dir() -> str:
    """Where mypy keeps its incremental cache (the module's docstring)."""
    base = os.environ.get("TENSORGC_TEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "tensorgc-tests")
    path = os.path.join(base, "mypy-%d.%d-%s" % (
        sys.version_info[0], sys.version_info[1], mypy.version.__version__))
    try:
        os.makedirs(path, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path)
        probe.close()
    except OSError:
        path = tempfile.mkdtemp(prefix="tensorgc-mypy-")
        atexit.register(shutil.rmtree, path, True)
    return path


def main() -> int:
    check_sources, check_options = process_options(
        ["--strict", "--config-file", os.path.join(HERE, "mypy.ini"), "--hide-error-context",
         "--no-color-output", "--show-error-codes", "--cache-dir", cache_dir(), "-p", "tensorgc"]
        + [arg for name in SCRIPTS for arg in ("-m", name)])
    with open(os.path.join(check_options.cache_dir, "tensorgc.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run of the suite may share the cache
        res = mypy.build.build(check_sources, check_options)
    out = {"mypy": list(res.errors), "sources": len(check_sources)}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = mypy.stubtest.test_stubs(mypy.stubtest.parse_options(
            ["tensorgc._tensorgc", "--allowlist", os.path.join(HERE, "stubtest_allowlist.txt"),
             "--mypy-config-file", os.path.join(HERE, "stubtest.ini")]))
    out.update(stubtest=status, stubtest_output=printed.getvalue())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
