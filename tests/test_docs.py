"""The documentation: links resolve, the samples run, and no file is named after how the work was
organised.

* Every relative link and image in README.md, CONTRIBUTING.md and docs/*.md (and bench/README.md,
  allocator/README.md) points at a file of the tree; a `#fragment` into a markdown file names one
  of its headings (GitHub's anchors).
* Every ```python block of docs/guide.md and README.md runs, and every ```sh block marked to run.
  A block runs as written, in a fresh namespace, in a temporary directory that holds `run.pickle`
  (a copy of tests/data/h100_small_snapshot.pickle). Markers on the line before a fence:
  `<!-- run: skip -->` (a fragment, not run), `<!-- run: cuda -->` (only with CUDA),
  `<!-- run: sh -->` (a shell block: each line runs with bash; `tensorgc ...` is the console
  script, run as `python -m tensorgc ...`).
* `git ls-files` has no name like `stop16`, `r7`, `round3` or `session`.

    python tests/test_docs.py docs/guide.md    # runs one file's samples and prints their output
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "CONTRIBUTING.md", "bench/README.md", "allocator/README.md"] + sorted(
    os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md"))
DOCS = [d for d in DOCS if os.path.exists(os.path.join(ROOT, d))]
SAMPLES = ["docs/guide.md", "README.md"]
SNAPSHOT = os.path.join(ROOT, "tests", "data", "h100_small_snapshot.pickle")

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_SRC = re.compile(r"""<(?:img|a)\s[^>]*(?:src|href)=["']([^"']+)["']""", re.I)
FENCE = re.compile(r"^(`{3,}|~{3,})")


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _prose(text):
    """The text outside fenced code blocks and inline code spans."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line.lstrip())
        if fence is None and m:
            fence = m.group(1)[0] * 3
            continue
        if fence is not None:
            if line.lstrip().startswith(fence):
                fence = None
            continue
        out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"`|\*", "", heading.strip())
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h).lower()
    h = re.sub(r"[^\w\- ]", "", h, flags=re.UNICODE)
    return h.replace(" ", "-")


def _anchors(rel):
    seen, out = {}, set()
    for line in _prose(_read(rel)).splitlines():
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            s = _slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def _links(rel):
    text = _prose(_read(rel))
    return LINK.findall(text) + HTML_SRC.findall(text)


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_and_images_resolve(doc):
    bad = []
    for target in _links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        full = os.path.join(ROOT, dest)
        if not os.path.exists(full):
            bad.append(f"{target}: no such file {dest}")
        elif frag and dest.endswith(".md") and frag not in _anchors(dest):
            bad.append(f"{target}: no heading #{frag} in {dest}")
    assert not bad, f"{doc}: " + "; ".join(bad)


def test_the_docs_link_to_each_other():
    readme = _read("README.md")
    for page in ("docs/guide.md", "docs/api.md", "docs/benchmarks.md"):
        assert f"]({page}" in readme, page


def test_benchmarks_link_only_to_kept_results_and_every_kept_result_is_linked():
    linked = {os.path.normpath(os.path.join("docs", t.partition("#")[0]))
              for t in _links("docs/benchmarks.md") if t.startswith("results/")}
    kept = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "docs", "results")):
        for f in files:
            kept.add(os.path.relpath(os.path.join(dirpath, f), ROOT))
    covered = {k for k in kept if k in linked or os.path.dirname(k) in linked}
    assert covered == kept, f"raw results nothing links to: {sorted(kept - covered)}"


INTERNAL = re.compile(r"(^|[^a-z])(stop|round)[-_ ]?\d+|(^|[-_./])r\d+([-_./]|$)|session|verdict",
                      re.I)


def test_no_file_is_named_after_how_the_work_was_organised():
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    # files deleted from the tree but not from the index (a copied checkout) are not shipped
    bad = [n for n in names if INTERNAL.search(n) and os.path.lexists(os.path.join(ROOT, n))]
    assert not bad, bad


# ---------------------------------------------------------------------------------- samples

def blocks(rel):
    """(line, kind, marker, code) for each fenced block of a markdown file."""
    out, lines, i = [], _read(rel).splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        kind = lines[i][len(m.group(1)):].strip().split(" ")[0]
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        mm = re.match(r"<!--\s*run:\s*(\w+)\s*-->", lines[j].strip()) if j >= 0 else None
        marker = mm.group(1) if mm else None
        k = i + 1
        while k < len(lines) and not lines[k].startswith(m.group(1)):
            k += 1
        out.append((i + 1, kind, marker, "\n".join(lines[i + 1:k]) + "\n"))
        i = k + 1
    return out


RUNNER = r"""
import gc, io, json, os, sys, traceback
blocks = json.load(sys.stdin)
failed = 0
for line, code in blocks:
    print(f"===== {DOC}:{line}", flush=True)
    ns = {"__name__": "__main__"}
    try:
        exec(compile(code, f"{DOC}:{line}", "exec"), ns)
    except SystemExit:
        pass
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        print(f"FAILED {DOC}:{line}", flush=True)
        failed += 1
    del ns
    gc.collect()
    sys.stdout.flush()
sys.exit(1 if failed else 0)
"""


def _cuda():
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def run_samples(rel, workdir):
    """Runs the samples of one file; returns (ok, output)."""
    import json

    shutil.copy(SNAPSHOT, os.path.join(workdir, "run.pickle"))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MPLBACKEND="Agg")
    cuda = _cuda()
    py, out, ok = [], [], True
    for line, kind, marker, code in blocks(rel):
        if marker == "skip" or (marker == "cuda" and not cuda):
            continue
        if kind == "python":
            py.append((line, code))
        elif kind == "sh" and marker == "sh":
            for cmd in code.splitlines():
                cmd = cmd.split(" #")[0].strip()
                if not cmd or cmd.startswith("#"):
                    continue
                cmd = re.sub(r"^tensorgc\b", f"{sys.executable} -m tensorgc", cmd)
                r = subprocess.run(["bash", "-c", cmd], cwd=workdir, env=env,
                                   capture_output=True, text=True, timeout=300)
                out.append(f"===== {rel}:{line} $ {cmd}\n{r.stdout}{r.stderr}")
                if r.returncode != 0:
                    ok = False
                    out.append(f"FAILED {rel}:{line} (exit {r.returncode})\n")
    if py:
        r = subprocess.run([sys.executable, "-c", "DOC = " + repr(rel) + "\n" + RUNNER],
                           input=json.dumps(py), cwd=workdir, env=env, capture_output=True,
                           text=True, timeout=600)
        out.append(r.stdout + r.stderr)
        ok = ok and r.returncode == 0
    return ok, "".join(out)


@pytest.mark.parametrize("doc", SAMPLES)
def test_the_samples_run(doc, tmp_path):
    pytest.importorskip("torch", reason="the samples train with torch")
    ok, out = run_samples(doc, str(tmp_path))
    assert ok, out[-6000:]


if __name__ == "__main__":
    import tempfile

    status = 0
    for doc in sys.argv[1:] or SAMPLES:
        with tempfile.TemporaryDirectory() as d:
            ok, out = run_samples(doc, d)
        print(out)
        status |= not ok
    sys.exit(status)
