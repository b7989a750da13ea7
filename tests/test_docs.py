"""The documentation: links resolve, the samples run, and no file is named after how the work was
organised.

* Every relative link and image in README.md, CONTRIBUTING.md and docs/*.md (and bench/README.md,
  allocator/README.md) points at a file of the tree; a `#fragment` into a markdown file names one
  of its headings (GitHub's anchors).
* Every ```python block of docs/guide.md and README.md runs, and every ```sh block marked to run.
  A block runs as written, in a fresh namespace, in a temporary directory that holds `run.pickle`
  (a copy of tests/data/h100_small_snapshot.pickle). Markers on the line before a fence:
  `<!-- run: skip (why) -->` (not run: the reason is required), `<!-- run: cuda -->` (only with
  CUDA, or TENSORGC_TEST_DEVICE=cuda), `<!-- run: sh -->` (a shell block: each line runs with
  bash; `tensorgc ...` and `pytest ...` run with this interpreter), `<!-- run: file NAME -->`
  (written to NAME for the next samples), `<!-- run: as NAME -->` (run from a file NAME).
  Output blocks: `<!-- output -->` is compared with what the sample before it printed
  (normalise(): addresses, times, temporary paths; `...` lines stand for any lines),
  `<!-- output: loose -->` sizes and counts aside too, `<!-- output: cpu -->` as loose, on a
  machine without CUDA only (what it prints there; CUDA changes the columns), `<!-- output:
  recorded (where) -->` not compared (a GPU run of a demo).
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

MARK = re.compile(r"<!--\s*(run|output):?\s*([\w-]*)\s*([^\s()]*)\s*(?:\((.*)\))?\s*-->")


def blocks(rel):
    """(line, kind, marker, code) for each fenced block of a markdown file; marker is
    (what, how, name, reason) from the comment on the line before ("run"/"output"), or None."""
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
        mm = MARK.fullmatch(lines[j].strip()) if j >= 0 else None
        marker = (mm.group(1), mm.group(2), mm.group(3), (mm.group(4) or "").strip()) \
            if mm else None
        k = i + 1
        while k < len(lines) and not lines[k].startswith(m.group(1)):
            k += 1
        out.append((i + 1, kind, marker, "\n".join(lines[i + 1:k]) + "\n"))
        i = k + 1
    return out


RUNNER = r"""
import gc, io, json, os, sys, traceback, types
blocks = json.load(sys.stdin)
failed = 0
runner = sys.modules["__main__"]
for line, code, name in blocks:
    print(f"===== {DOC}:{line}", flush=True)
    # each sample is the program's __main__, as when run as a script: owner chains say so
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    ns = main.__dict__
    path = f"{DOC}:{line}"
    if name:  # run as a file of that name, so that tracebacks and profilers read its lines
        path = os.path.abspath(name)
        with open(path, "w") as f:
            f.write(code)
    try:
        exec(compile(code, path, "exec"), ns)
    except SystemExit:
        pass
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        print(f"FAILED {DOC}:{line}", flush=True)
        failed += 1
    sys.modules["__main__"] = runner
    del ns, main
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
sys.exit(1 if failed else 0)
"""


def _cuda():
    if os.environ.get("TENSORGC_TEST_DEVICE", "").startswith("cuda"):
        return True
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def _runs(marker, kind, cuda):
    """Whether a block runs here: python unless marked skip (or cuda without CUDA); sh when
    marked sh (or cuda with CUDA)."""
    what, how = (marker[0], marker[1]) if marker else (None, None)
    if what == "output":
        return False
    if how == "skip" or how == "file" or (how == "cuda" and not cuda):
        return False
    return kind == "python" or (kind == "sh" and how in ("sh", "cuda"))


def run_samples(rel, workdir, cuda=None):
    """Runs the samples of one file; returns (ok, output, {line: what that block printed})."""
    import json

    cuda = _cuda() if cuda is None else cuda
    shutil.copy(SNAPSHOT, os.path.join(workdir, "run.pickle"))
    # a reader's shell: not a pytest-xdist worker's (a pytest the sample runs would take itself
    # for one, and a plugin such as pytest-benchmark says so on its output), nor a CI machine's
    # (where pytest leaves its summary lines uncut)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("CI", "BUILD_NUMBER")}
    env.update(PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MPLBACKEND="Agg", PYTHONUNBUFFERED="1", COLUMNS="80")
    py, out, ok, printed = [], [], True, {}
    for line, kind, marker, code in blocks(rel):
        if marker and marker[1] == "file":  # a file the next samples use, written as shown
            with open(os.path.join(workdir, marker[2]), "w", encoding="utf-8") as f:
                f.write(code)
            continue
        if not _runs(marker, kind, cuda):
            continue
        if kind == "python":
            py.append((line, code, marker[2] if marker and marker[1] == "as" else ""))
            continue
        text = []
        for cmd in code.splitlines():
            cmd = cmd.split(" #")[0].strip()
            if not cmd or cmd.startswith("#"):
                continue
            cmd = re.sub(r"^tensorgc\b", f"{sys.executable} -m tensorgc", cmd)
            cmd = re.sub(r"^pytest\b", f"{sys.executable} -m pytest", cmd)
            r = subprocess.run(["bash", "-c", cmd], cwd=workdir, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=300)
            text.append(r.stdout)
            out.append(f"===== {rel}:{line} $ {cmd}\n{r.stdout}")
            expect = 1 if "pytest" in cmd and "--tensorgc" in cmd else 0  # shows a failure
            if r.returncode != expect:
                ok = False
                out.append(f"FAILED {rel}:{line} (exit {r.returncode})\n")
        printed[line] = "".join(text)
    if py:
        r = subprocess.run([sys.executable, "-c", "DOC = " + repr(rel) + "\n" + RUNNER],
                           input=json.dumps(py), cwd=workdir, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
        out.append(r.stdout)
        ok = ok and r.returncode == 0
        for chunk in re.split(r"^===== ", r.stdout, flags=re.M)[1:]:
            head, _, body = chunk.partition("\n")
            printed[int(head.rsplit(":", 1)[1])] = body
    return ok, "".join(out), printed


def normalise(text, loose=False):
    """The text as compared: addresses, times, temporary paths and runs of spaces made alike;
    ``loose`` also every size (a number with a unit) and every count beside it."""
    text = re.sub(r"0x[0-9a-f]+", "0x_", text)
    text = re.sub(r"(?<![\w.])\d+(\.\d+)? ?s\b", "_s", text)
    text = re.sub(r"(/tmp|/private/var|/var/folders)/[^\s;:)'\"]*", "/tmp/_", text)
    text = re.sub(r"pid \d+", "pid _", text)
    if loose:
        text = re.sub(r"-?\d+(\.\d+)? ?([KMGT]i?B|[BKMGT])\b", "_size", text)
        text = re.sub(r"(?<![\w.])\d[\d,]*(\.\d+)?(?![\w.])", "_n", text)
    lines = [re.sub(r"\s+", " ", ln).strip() for ln in text.strip("\n").splitlines()]
    return "\n".join(lines)


def matches(shown, printed, loose=False):
    """Whether what a sample printed is what the page shows: line by line after normalise(); a
    line `...` on the page stands for any lines (none included)."""
    want = normalise(shown, loose).split("\n")
    pattern = "".join(r"(?:[^\n]*\n)*?" if w == "..." else re.escape(w) + r"\n" for w in want)
    return re.fullmatch(pattern, normalise(printed, loose) + "\n") is not None


def outputs(rel):
    """(line of the output block, its marker, its text, line of the sample before it)."""
    out, last = [], None
    for line, kind, marker, code in blocks(rel):
        if marker and marker[0] == "output":
            out.append((line, marker, code, last))
        elif kind in ("python", "sh") and not (marker and marker[1] in ("file", "skip")):
            last = line
    return out


@pytest.mark.parametrize("doc", SAMPLES)
def test_every_sample_runs_or_says_why_it_does_not(doc):
    """A python block runs, runs with CUDA (`run: cuda`), is written as a file for the next
    ones (`run: file NAME`), or is skipped with its reason (`run: skip (why)`); a block of
    output is compared with what the sample before it printed (`output`, `output: loose`) or is
    said to be recorded elsewhere (`output: recorded (where)`)."""
    bad = []
    for line, kind, marker, code in blocks(doc):
        what, how, name, reason = marker or (None, None, None, None)
        if what == "run" and how not in ("skip", "cuda", "sh", "file", "as"):
            bad.append(f"{line}: unknown marker run: {how}")
        if how == "skip" and not reason:
            bad.append(f"{line}: a skipped sample says why: <!-- run: skip (why) -->")
        if how in ("file", "as") and not name:
            bad.append(f"{line}: run: {how} names the file")
        if what == "output" and how not in ("", "loose", "cpu", "cuda", "recorded"):
            bad.append(f"{line}: unknown marker output: {how}")
        if what == "output" and how == "recorded" and not reason:
            bad.append(f"{line}: a recorded output says where it comes from")
        if kind in ("", "text") and what != "output":
            bad.append(f"{line}: a block of output is marked output (compared) or output: "
                       "recorded (where)")
    assert not bad, f"{doc}: " + "; ".join(bad)


@pytest.mark.parametrize("doc", SAMPLES)
def test_the_samples_run_and_print_what_the_page_shows(doc, tmp_path):
    pytest.importorskip("torch", reason="the samples train with torch")
    cuda = _cuda()
    ok, out, printed = run_samples(doc, str(tmp_path), cuda)
    assert ok, out[-6000:]
    compared, bad = 0, []
    for line, marker, shown, sample in outputs(doc):
        if marker[1] == "recorded":
            continue
        if (marker[1] == "cuda" and not cuda) or (marker[1] == "cpu" and cuda):
            continue
        assert sample in printed, f"{doc}:{line}: the sample before it (line {sample}) did not run"
        compared += 1
        if not matches(shown, printed[sample], loose=marker[1] in ("loose", "cpu")):
            bad.append(f"{doc}:{line} shows:\n{shown}\n--- the sample at line {sample} printed:\n"
                       f"{printed[sample]}")
    due = sum(1 for _, m, _, _ in outputs(doc)
              if m[1] in ("", "loose") or (m[1] == "cuda" and cuda) or (m[1] == "cpu" and not cuda))
    assert compared == due, f"{doc}: {compared} outputs compared of {due}"
    assert not bad, "\n\n".join(bad)[-8000:]


def test_the_normaliser_keeps_names_and_numbers_and_forgets_what_varies():
    assert matches("at 0x7f00 in 7.79s\n/tmp/x/train.py: 3 tensors",
                   "at 0x1234  in 0.5s\n/tmp/pytest-3/train.py: 3 tensors")
    assert not matches("3 tensors", "4 tensors") and not matches("saved by A", "saved by B")
    assert matches("a\n...\nz", "a\nb\nc\nz") and matches("a\n...\nz", "a\nz")
    assert not matches("a\n...\nz", "a\nb")
    assert matches("peak 320.16M  9.80M", "peak 1.00G  -4.00K", loose=True)
    assert not matches("peak 320.16M", "delta 320.16M", loose=True)


if __name__ == "__main__":
    import tempfile

    status = 0
    for doc in sys.argv[1:] or SAMPLES:
        with tempfile.TemporaryDirectory() as d:
            ok, out, _ = run_samples(doc, d)
        print(out)
        status |= not ok
    sys.exit(status)
