"""Shared helpers for the tensorgc test-suite (no tensorgc import here)."""

import gc
import os

import pytest

try:
    import torch
except ImportError:  # the torch-free run: the C engines and the snapshot tools only
    torch = None

# The whole suite runs on this device: `TENSORGC_TEST_DEVICE=cuda pytest tests`
# runs the same tests with CUDA tensors and CUDA observers.
DEVICE = os.environ.get("TENSORGC_TEST_DEVICE", "cpu")
DEVICE_TYPE = DEVICE.split(":", 1)[0]
IS_CUDA = DEVICE_TYPE == "cuda"
OTHER_DEVICE = "cpu" if IS_CUDA else "cuda"


def T(*shape, device=None, dtype=None):
    """A zero tensor on the test device (or `device`)."""
    if torch is None:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")
    if dtype is None:
        dtype = torch.float32
    if not shape:
        shape = (4,)
    return torch.zeros(*shape, device=DEVICE if device is None else device, dtype=dtype)


def new_class(name="Node", bases=(), **namespace):
    """A fresh class per test, so leftovers of another test can never be counted."""
    return type(name, bases, dict(namespace))


def instances(cls):
    """Live (gc-tracked) instances of exactly `cls`."""
    return [o for o in gc.get_objects() if type(o) is cls]


def live_tensors_with_ptr(ptr):
    return [
        o
        for o in gc.get_objects()
        if issubclass(type(o), torch.Tensor) and o.data_ptr() == ptr
    ]


def _type_ok(actual, expected):
    if expected is None:
        return True
    return actual == expected or actual.endswith("." + expected)


def find_edges(report, src=None, label=None, dst=None):
    """Edges of report.edges matching (src_type, label, dst_type); None = wildcard.

    Type names are compared to type(obj).__name__; a module-qualified name
    ("torch.Tensor") is accepted too.
    """
    return [
        e
        for e in report.edges
        if _type_ok(e[0], src) and (label is None or e[1] == label) and _type_ok(e[2], dst)
    ]


def has_edge(report, src, label, dst):
    return bool(find_edges(report, src, label, dst))


def is_plain_data(value, depth=0):
    """Only str/int/float/bool/None and list/tuple/dict of those."""
    if depth > 20:
        return False
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) in (list, tuple):
        return all(is_plain_data(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(
            is_plain_data(k, depth + 1) and is_plain_data(v, depth + 1)
            for k, v in value.items()
        )
    return False


def png_colors(path, limit=1 << 16):
    """Distinct RGB(A) pixel values of an 8-bit RGB/RGBA PNG (a screenshot), without Pillow:
    inflate the IDAT stream and undo the per-row filters. Stops counting at `limit`."""
    import struct
    import zlib

    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    w = h = bpp = None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"unsupported PNG: depth {depth} type {ctype}"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    seen = set()
    for r in range(h):
        f = raw[r * (stride + 1)]
        line = bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        if r % 4 == 0:  # every fourth row is plenty to tell a picture from a blank page
            for i in range(0, stride, bpp * 2):
                seen.add(bytes(line[i:i + bpp]))
                if len(seen) >= limit:
                    return seen
        prev = line
    return seen


def run_tensorgc_cli(*args, timeout=300):
    """`python -m tensorgc ARGS` in a fresh interpreter that finds this checkout's package."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tensorgc", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


# What the tests start chromium with: no sandbox, and without the omnibox's popups, Chromium's
# own WebUI pages that it preloads into renderers of their own for every new window (a headless
# run never shows them): they cost about 1 s of CPU per page a test opens, as much as the page.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup"]


def chromium():
    """Debian's chromium (make deps installs it), or None."""
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


def launch_chromium():
    """A generator for a module-scoped `browser` fixture: Debian's chromium driven by playwright
    (the caller has checked both are there), closed after the module."""
    from playwright import sync_api

    env_preload = os.environ.pop("LD_PRELOAD", None)  # chromium hangs under make asan's
    try:
        with sync_api.sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            try:
                yield b
            finally:
                b.close()
    finally:
        if env_preload is not None:
            os.environ["LD_PRELOAD"] = env_preload


def screenshot(page, shot, size="1300,600"):
    """A headless Chromium screenshot of the HTML file `page` (a pathlib.Path) into `shot`;
    returns the process result."""
    import os
    import subprocess

    # not under `make asan`'s LD_PRELOAD of the sanitizer runtimes: chromium hangs with them
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([chromium(), "--headless", *CHROMIUM_ARGS, "--disable-gpu",
                           f"--screenshot={shot}", f"--window-size={size}", page.as_uri()],
                          capture_output=True, text=True, timeout=120, env=env)


def model_tensors(m, opt, device_type=None):
    """{name: tensor} for every tensor of a model and its optimizer, grads included (the
    optimizer's only on `device_type` when given: Adam keeps its step counts on the CPU)."""
    import torch

    out = {}
    for n, p in m.named_parameters():
        out[n] = p
        if p.grad is not None:
            out[n + ".grad"] = p.grad
    for n, b in m.named_buffers():
        out[n] = b
    for i, st in enumerate(opt.state.values()):
        for k, v in st.items():
            if torch.is_tensor(v) and (device_type is None or v.device.type == device_type):
                out[f"opt{i}.{k}"] = v
    return out


def clean_cuda_memory():
    """Collected garbage, an idle device and an empty cache: the state CUDA tests start from."""
    import gc

    import torch

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def page_colors(tmp_path, html, size):
    """The colours of a headless Chromium screenshot of the page `html` (a str), as png_colors
    gives them; the screenshot must exist."""
    page = tmp_path / "page.html"
    page.write_text(html)
    shot = tmp_path / "page.png"
    r = screenshot(page, shot, size)
    assert shot.exists(), r.stderr[-2000:]
    return png_colors(shot)


def markup(page):
    """A timeline page without its own two script elements: the data block (checked here to
    hold no '<', so nothing in it can end the element) and the interaction script, which is
    tensorgc's. What the checks for hostile strings from a file read."""
    import re

    data = re.search(r'<script type="application/json" id="tgc-data">(.*?)</script>', page, re.S)
    assert data is not None and "<" not in data.group(1)
    out = page.replace(data.group(0), "")
    ui = re.search(r"<script>.*?</script>", out, re.S)
    assert ui is not None and ui.group(0).startswith("<script>// The timeline page's script")
    return out.replace(ui.group(0), "")


def fresh_module(name, collect=True):
    """A generator for a `mod` fixture: a fresh module registered in sys.modules as ``name`` for
    the test, removed and emptied after it (then a collection, unless ``collect`` is false)."""
    import sys
    import types

    m = types.ModuleType(name)
    sys.modules[name] = m
    try:
        yield m
    finally:
        sys.modules.pop(name, None)
        m.__dict__.clear()
        if collect:
            gc.collect()


def open_timeline(browser, tmp_path, html, name, height):
    """A timeline page (html, a str) written to tmp_path/name and opened in a new tab of browser,
    1500 pixels wide, once its plot is drawn; (the page, the list its script errors go to)."""
    path = tmp_path / name
    path.write_text(html)
    page = browser.new_page(viewport={"width": 1500, "height": height})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("#tgc-plot[data-full]")
    return page, errors


def graphviz_dev():
    """Whether Graphviz's development files are here (pkg-config finds libgvc and libcgraph):
    a build from source needs them; an installed wheel's extension and worker do not."""
    import shutil
    import subprocess
    return shutil.which("pkg-config") is not None and subprocess.run(
        ["pkg-config", "--exists", "libgvc", "libcgraph"]).returncode == 0


# a test that builds the extensions or the render worker from source
needs_graphviz_dev = pytest.mark.skipif(
    not graphviz_dev(), reason="builds from source: needs Graphviz's development files "
                               "(libgraphviz-dev, pkg-config)")


def _test_cache(what):
    """A writable folder for the suite's caches, outside the checkout (variant_build's
    docstring), or None."""
    import tempfile

    base = os.environ.get("TENSORGC_TEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "tensorgc-tests")
    path = os.path.join(base, what)
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return None
    return path


def _prune_cache(parent, prefix, keep=4):
    """Removes all but the `keep` newest entries (folders) named prefix-<hash> in parent, with
    their lock files: the caches stay bounded as the sources change."""
    import shutil

    entries = [os.path.join(parent, n) for n in os.listdir(parent)
               if n.startswith(prefix + "-") and "." not in n]
    entries.sort(key=lambda p: os.stat(p).st_mtime, reverse=True)
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)
        try:
            os.unlink(old + ".lock")
        except OSError:
            pass


def cached_build(parent, kind, digest, make):
    """The folder parent/kind-digest, made by make(folder) the first time (into a temporary
    folder renamed into place, so that a failed build leaves nothing), under a lock that another
    worker or run waits on; then only the four newest of `kind` are kept (_prune_cache)."""
    import fcntl
    import shutil

    os.makedirs(parent, exist_ok=True)
    out = os.path.join(parent, f"{kind}-{digest}")
    with open(out + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if os.path.isdir(out):
            os.utime(out)  # used: the newest, as far as pruning goes
            return out
        tmp = f"{out}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            make(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        os.rename(tmp, out)
    _prune_cache(parent, kind)
    return out


def _ccache_env(root):
    """The environment that compiles through ccache where it is installed (`make deps` installs
    it), or nothing. ccache's preprocessor mode leaves -D options out of its key, so a copy built
    with one macro more compiles only the files that macro changes and takes every other object
    from the last copy's; paths are taken relative to the checkout, so that a fresh clone hits
    too. Its folder is beside the suite's other caches, 200 MB at most."""
    import shutil
    import sysconfig

    ccache = shutil.which("ccache")
    cache = _test_cache("ccache")
    if ccache is None or cache is None or "CC" in os.environ:
        return {}
    return {"CC": f"{ccache} {sysconfig.get_config_var('CC') or 'cc'}", "CCACHE_DIR": cache,
            "CCACHE_BASEDIR": root, "CCACHE_NOHASHDIR": "true", "CCACHE_MAXSIZE": "200M"}


def variant_build(name, cflags):
    """The extensions (and the render worker) compiled again with TENSORGC_CFLAGS=``cflags`` and
    warnings as errors, for a test of a flavour `make build` does not make: the path of its
    --build-lib folder. Built once and kept, keyed by the C sources, setup.py, the flags and the
    interpreter, so that a later run of the suite (a fresh clone's too) and another pytest-xdist
    worker find it, as a compiler cache would: in $TENSORGC_TEST_CACHE/variants, else
    tensorgc-tests/variants under $XDG_CACHE_HOME or ~/.cache, else (neither writable)
    build/test-variants/ in the checkout; the four newest of each name and interpreter are kept. A worker that finds another one building waits for it. Fails
    the test, with the compiler's output, where the build fails."""
    import glob
    import hashlib
    import shutil
    import subprocess
    import sys
    import sysconfig

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256(repr((cflags, sys.executable, sys.version,
                             sysconfig.get_config_var("EXT_SUFFIX"),
                             os.environ.get("CC"), os.environ.get("CFLAGS"))).encode())
    sources = ["setup.py"] + sorted(
        p for d in ("common", "tensor", "graph", "cycles", "reporter", "allocator", "module",
                    "include/tensorgc") for p in glob.glob(os.path.join(d, "*.[ch]"), root_dir=root))
    for path in sources:
        with open(os.path.join(root, path), "rb") as f:
            h.update(path.encode() + b"\0" + f.read())
    parent = _test_cache("variants") or os.path.join(root, "build", "test-variants")

    def make(tmp):
        env = dict(os.environ, TENSORGC_CFLAGS=cflags, TENSORGC_WERROR="1")
        env.update(_ccache_env(root))
        done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--force",
                               "--build-temp", os.path.join(tmp, "temp"),
                               "--build-lib", os.path.join(tmp, "lib")],
                              cwd=root, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"building the {name} copy ({cflags}) failed:\n"
                        + (done.stdout + done.stderr)[-3000:])
        shutil.rmtree(os.path.join(tmp, "temp"))  # the objects: not needed again

    out = cached_build(parent, f"{name}-cp{sys.version_info[0]}{sys.version_info[1]}",
                       h.hexdigest()[:16], make)
    return os.path.join(out, "lib")
