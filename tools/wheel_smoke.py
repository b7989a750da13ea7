"""What a user runs first with an installed tensorgc wheel, checked (tools/wheel_smoke.sh runs it
in a fresh virtual environment, from a directory outside the checkout): the package imports from
the environment, the test-only module is absent, a cycle page has its picture, the `tensorgc`
command prints its version and writes a timeline page, and `pytest --tensorgc` runs the plugin
through its entry point. Needs no torch.

    python tools/wheel_smoke.py --snapshot FILE [--graphviz-hidden | --graphviz-loaded]
"""
import argparse
import ctypes
import importlib.util
import os
import subprocess
import sys
import tempfile


def step(name):
    print(f"smoke: {name}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--snapshot", required=True, help="a snapshot file for the timeline page")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--graphviz-hidden", action="store_true",
                     help="check first that the system's libgvc cannot be loaded")
    how.add_argument("--graphviz-loaded", action="store_true",
                     help="load the system's libgvc into this process before drawing")
    args = ap.parse_args()
    bindir = os.path.dirname(sys.executable)

    if args.graphviz_hidden:
        try:
            ctypes.CDLL("libgvc.so.6")
        except OSError:
            step("the system's Graphviz cannot be loaded here")
        else:
            sys.exit("smoke: libgvc.so.6 loads: the system's Graphviz is not hidden")
    if args.graphviz_loaded:
        ctypes.CDLL("libgvc.so.6", mode=ctypes.RTLD_GLOBAL)
        step("the system's Graphviz is loaded into this process")
    # neither a plugin directory nor a library path may matter to the render worker
    os.environ["GVBINDIR"] = tempfile.mkdtemp(prefix="no-plugins-")

    import tensorgc
    from tensorgc._version import __version__

    where = os.path.realpath(tensorgc.__file__)
    if not where.startswith(os.path.realpath(sys.prefix) + os.sep):
        sys.exit(f"smoke: tensorgc imported from {where}, not from {sys.prefix}")
    if importlib.util.find_spec("tensorgc._tensorgc_testing") is not None:
        sys.exit("smoke: the test-only module tensorgc._tensorgc_testing is installed")
    torch = importlib.util.find_spec("torch") is not None
    step(f"tensorgc {__version__} imports from {os.path.dirname(where)} (torch "
         f"{'installed' if torch else 'absent'})")

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    page = tensorgc.to_html(tensorgc.create_graph([a, b]))
    if "<svg" not in page:
        sys.exit("smoke: the cycle page has no picture:\n" + page[:2000])
    step(f"a cycle page with its picture ({len(page)} characters)")

    cli = os.path.join(bindir, "tensorgc")
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True)
    if out.stdout.strip() != f"tensorgc {__version__}":
        sys.exit(f"smoke: `tensorgc --version` printed {out.stdout!r}")
    step(f"`tensorgc --version`: {out.stdout.strip()}")
    html = os.path.abspath("timeline.html")
    subprocess.run([cli, "timeline", args.snapshot, "-o", html], check=True)
    with open(html, encoding="utf-8") as f:
        text = f.read()
    if "<html" not in text.lower() or "Active Memory Timeline" not in text:
        sys.exit("smoke: the timeline page is not one")
    step(f"`tensorgc timeline`: a page of {len(text)} characters")

    os.makedirs("project", exist_ok=True)
    with open(os.path.join("project", "test_plain.py"), "w") as f:
        f.write("KEPT = []\n\n\ndef test_runs():\n    KEPT.append(object())\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "--tensorgc", "-p", "no:cacheprovider",
                           "project"], capture_output=True, text=True)
    if done.returncode != 0 or f"tensorgc-{__version__}" not in done.stdout:
        sys.exit("smoke: `pytest --tensorgc` did not run the plugin from its entry point:\n"
                 + done.stdout[-3000:] + done.stderr[-3000:])
    step("`pytest --tensorgc`: the plugin loaded by its entry point, the test passed")
    print("smoke: all passed", flush=True)


if __name__ == "__main__":
    main()
