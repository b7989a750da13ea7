"""Nothing lost on disk faults (docs/api.md): a cycle page or an OOM autopsy file is written
whole or not at all. A full disk (at the first write, halfway, at fsync, at close, at the
rename), a read-only file system, a quota or no permission leaves no partial or temp file, one
WARNING that still carries the cycle summary and says why the page is missing, no ERROR, and a
garbage collector that goes on as before and writes pages again once the fault is gone.

Faults are simulated by patching the os functions snapshot.atomic_write calls, for the test's
directory only (the tests run as root: chmod would not block a write). Two tests hit real kernel
limits in a child process: a full tmpfs in a private mount namespace (skipped where unprivileged
user namespaces are not allowed) and RLIMIT_FSIZE.
"""
import errno
import gc
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
import weakref

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc.cycles import observe
from tensorgc.oom import _Observer
from _util import instances, new_class

from tensorgc.allocator import snapshot as snapshot_mod  # tensorgc.snapshot is the function

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE_RE = re.compile(r"^tensorgc-cycle-[A-Za-z0-9_-]{8}\.html$")


def leak(Node):
    """A cycle a <-> b holding a CPU tensor; only garbage is left."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    a.t = torch.zeros(16)
    ref = weakref.ref(a)
    del a, b
    return ref


class Faults:
    """Makes os calls on files inside `directory` fail with OSError(err); the rest of the
    process (pytest, logging) is untouched."""

    def __init__(self, monkeypatch, directory):
        self.mp = monkeypatch
        self.dir = os.path.abspath(str(directory))
        self.real = {n: getattr(os, n) for n in
                     ("open", "write", "fsync", "close", "link", "replace", "unlink", "mkdir")}
        self.hits = 0

    def inside(self, path):
        try:
            path = os.path.abspath(os.fsdecode(path))
        except TypeError:
            return False
        return path == self.dir or path.startswith(self.dir + os.sep)

    def fd_inside(self, fd):
        try:
            return self.inside(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return False

    def error(self, err, path=None):
        self.hits += 1
        return OSError(err, os.strerror(err)) if path is None else OSError(err, os.strerror(err),
                                                                          path)

    def open(self, err):
        real = self.real["open"]

        def fake(path, flags, mode=0o777, *, dir_fd=None):
            if self.inside(path):
                raise self.error(err, path)
            return real(path, flags, mode, dir_fd=dir_fd)
        self.mp.setattr(os, "open", fake)

    def write(self, err, after=0):
        """The first `after` bytes of each file are written (a short write), then err."""
        real, written = self.real["write"], {}

        def fake(fd, data):
            if not self.fd_inside(fd):
                return real(fd, data)
            room = after - written.get(fd, 0)
            if room <= 0:
                raise self.error(err)
            n = real(fd, memoryview(data)[:room])
            written[fd] = written.get(fd, 0) + n
            return n
        self.mp.setattr(os, "write", fake)

    def fsync(self, err):
        real = self.real["fsync"]

        def fake(fd):
            if self.fd_inside(fd):
                raise self.error(err)
            return real(fd)
        self.mp.setattr(os, "fsync", fake)

    def close(self, err):
        """Closes, then reports err (as NFS reports a full disk at close)."""
        real = self.real["close"]

        def fake(fd):
            mine = self.fd_inside(fd)
            real(fd)
            if mine:
                raise self.error(err)
        self.mp.setattr(os, "close", fake)

    def link(self, err):
        real = self.real["link"]

        def fake(src, dst, *args, **kwargs):
            if self.inside(dst):
                raise self.error(err, src)
            return real(src, dst, *args, **kwargs)
        self.mp.setattr(os, "link", fake)

    def replace(self, err, name=None):
        """Only the rename onto `name` (a base name) fails, when given."""
        real = self.real["replace"]

        def fake(src, dst, *args, **kwargs):
            if self.inside(dst) and (name is None or os.path.basename(dst) == name):
                raise self.error(err, src)
            return real(src, dst, *args, **kwargs)
        self.mp.setattr(os, "replace", fake)

    def unlink(self, err):
        real = self.real["unlink"]

        def fake(path, *args, **kwargs):
            if self.inside(path):
                raise self.error(err, path)
            return real(path, *args, **kwargs)
        self.mp.setattr(os, "unlink", fake)

    def mkdir(self, err):
        real = self.real["mkdir"]

        def fake(path, mode=0o777, *args, **kwargs):
            if self.inside(path):
                raise self.error(err, path)
            return real(path, mode, *args, **kwargs)
        self.mp.setattr(os, "mkdir", fake)


@pytest.fixture
def unraisable(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))
    return seen


@pytest.fixture
def pages(track, tmp_path, caplog):
    """warn_tensor_cycles on tmp_path/pages for CPU tensors, plus an observer that keeps each
    report's text; returns (directory, texts)."""
    caplog.set_level(logging.INFO, logger="tensorgc")
    directory = tmp_path / "pages"
    directory.mkdir()
    texts = []
    track(tensorgc.observe_cycles(lambda r: texts.append(r.text.rstrip()), device="cpu"))
    track(tensorgc.warn_tensor_cycles(device="cpu", directory=directory))
    return directory, texts


def tensorgc_records(caplog, level):
    return [r for r in caplog.records if r.name == "tensorgc" and r.levelno >= level]


def check_fault_reported(caplog, text, *reasons):
    """One WARNING carrying the summary and the reason; no ERROR, no traceback."""
    assert tensorgc_records(caplog, logging.ERROR) == []
    warnings = [r for r in tensorgc_records(caplog, logging.WARNING)
                if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "no page written: " in message and text in message, message
    for reason in reasons:
        assert reason in message, message
    assert warnings[0].exc_info is None
    return message


def check_pages_again(directory, Node, texts, caplog):
    """Once the fault is gone, the next collection writes one whole page."""
    caplog.clear()
    leak(Node)
    gc.collect()
    names = os.listdir(directory)
    assert len(names) == 1 and PAGE_RE.match(names[0]), names
    path = directory / names[0]
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    (warning,) = tensorgc_records(caplog, logging.WARNING)
    assert f"picture: {path}" in warning.getMessage() and texts[-1] in warning.getMessage()


# (fault, its arguments, errno)
PAGE_FAULTS = [
    ("open", (), errno.ENOSPC),
    ("open", (), errno.EROFS),
    ("open", (), errno.EACCES),
    ("open", (), errno.EDQUOT),
    ("write", (0,), errno.ENOSPC),
    ("write", (1000,), errno.ENOSPC),
    ("write", (1000,), errno.EDQUOT),
    ("fsync", (), errno.ENOSPC),
    ("fsync", (), errno.EIO),
    ("close", (), errno.ENOSPC),
    ("link", (), errno.ENOSPC),
    ("link", (), errno.EACCES),
    ("link", (), errno.EROFS),
]


@pytest.mark.parametrize("fault, args, err", PAGE_FAULTS,
                         ids=[f"{f}{a[0] if a else ''}-{errno.errorcode[e]}"
                              for f, a, e in PAGE_FAULTS])
def test_page_fault_leaves_nothing_and_warns_once(pages, monkeypatch, caplog, unraisable,
                                                   fault, args, err):
    directory, texts = pages
    Node = new_class("Leaky")
    garbage = list(gc.garbage)
    debug = gc.get_debug()
    faults = Faults(monkeypatch, directory)
    getattr(faults, fault)(err, *args)
    caplog.clear()
    ref = leak(Node)
    gc.collect()
    assert faults.hits >= 1
    monkeypatch.undo()
    assert len(texts) == 1
    check_fault_reported(caplog, texts[0], f"[Errno {err}] {os.strerror(err)}: '{directory}'")
    assert os.listdir(directory) == []  # no page, no temp file
    assert unraisable == []
    # the collection finished as always: garbage freed, gc state as it was
    assert ref() is None and instances(Node) == []
    assert gc.garbage == garbage and gc.get_debug() == debug
    check_pages_again(directory, Node, texts, caplog)


def test_no_hard_links_reserves_the_name_with_mkstemp(pages, monkeypatch, caplog):
    # FAT and some network file systems: link() fails with EPERM; the page is written anyway,
    # under a name mkstemp reserved (O_EXCL), 0600
    directory, texts = pages
    faults = Faults(monkeypatch, directory)
    faults.link(errno.EPERM)
    check_pages_again(directory, new_class("Leaky"), texts, caplog)
    assert faults.hits == 1


def test_no_hard_links_and_a_failing_rename_remove_the_reserved_name(pages, monkeypatch, caplog):
    directory, texts = pages
    faults = Faults(monkeypatch, directory)
    faults.link(errno.EPERM)
    faults.replace(errno.ENOSPC)
    caplog.clear()
    leak(new_class("Leaky"))
    gc.collect()
    assert faults.hits == 2
    monkeypatch.undo()
    check_fault_reported(caplog, texts[0], "[Errno 28] No space left on device")
    assert os.listdir(directory) == []  # neither the temp file nor the reserved name


def test_a_name_taken_meanwhile_is_never_overwritten(pages, monkeypatch, caplog):
    directory, texts = pages
    taken = directory / "tensorgc-cycle-taken___.html"
    taken.write_text("someone else's")
    names = iter(["tensorgc-cycle-taken___.html"])
    real = snapshot_mod._random_name
    monkeypatch.setattr(snapshot_mod, "_random_name",
                        lambda prefix, suffix: next(names, None) or real(prefix, suffix))
    leak(new_class("Leaky"))
    gc.collect()
    assert taken.read_text() == "someone else's"
    written = [n for n in os.listdir(directory) if n != taken.name]
    assert len(written) == 1 and PAGE_RE.match(written[0])
    assert (directory / written[0]).read_text().startswith("<!DOCTYPE html>")


def test_a_temp_file_that_cannot_be_removed_is_named_in_the_same_warning(pages, monkeypatch,
                                                                          caplog):
    directory, texts = pages
    faults = Faults(monkeypatch, directory)
    faults.write(errno.ENOSPC)
    faults.unlink(errno.EROFS)
    caplog.clear()
    leak(new_class("Leaky"))
    gc.collect()
    monkeypatch.undo()
    message = check_fault_reported(caplog, texts[0], "[Errno 28] No space left on device",
                                   "could not remove the temporary file", "[Errno 30]")
    (left,) = os.listdir(directory)
    assert left.startswith(".tensorgc-") and str(directory / left) in message


def test_a_page_that_cannot_be_made_still_warns_with_the_summary(track, tmp_path, monkeypatch,
                                                                  caplog, unraisable):
    # report.html raising (a MemoryError rendering a huge graph): the summary still comes

    class NoPage:
        def __init__(self, report):
            self.text = report.text

        @property
        def html(self):
            raise MemoryError

    real = tensorgc.observe_cycles
    monkeypatch.setattr(observe, "observe_cycles",
                        lambda cb, device: real(lambda r: cb(NoPage(r)), device=device))
    texts = []
    track(real(lambda r: texts.append(r.text.rstrip()), device="cpu"))
    track(tensorgc.warn_tensor_cycles(device="cpu", directory=tmp_path))
    caplog.set_level(logging.WARNING, logger="tensorgc")
    leak(new_class("Leaky"))
    gc.collect()
    check_fault_reported(caplog, texts[0], "no page written: MemoryError")
    assert os.listdir(tmp_path) == [] and unraisable == []


def test_a_failed_rewrite_keeps_the_old_file(tmp_path, monkeypatch):
    # a fixed name (dump_snapshot, the autopsy's files, the CLI's pages) is replaced atomically
    target = tmp_path / "page.html"
    target.write_text("old")
    faults = Faults(monkeypatch, tmp_path)
    faults.write(errno.ENOSPC, after=2)
    with pytest.raises(OSError) as info:
        snapshot_mod.atomic_write(str(target), lambda f: f.write("new content"))
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["page.html"]


# --------------------------------------------------------------------------
# real kernel limits, in a child process
# --------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import errno, gc, json, logging, os, resource, sys, torch, tensorgc
    directory, mode = sys.argv[1], sys.argv[2]
    records = []

    class Keep(logging.Handler):
        def emit(self, r):
            records.append([r.levelname, r.getMessage(), r.exc_info is not None])

    logging.getLogger("tensorgc").addHandler(Keep())
    gc.disable()
    texts = []
    tensorgc.observe_cycles(lambda r: texts.append(r.text.rstrip()), device="cpu")
    tensorgc.warn_tensor_cycles(device="cpu", directory=directory)

    class Node:
        pass

    def leak():
        a, b = Node(), Node()
        a.other, b.other = b, a
        a.t = torch.zeros(16)

    if mode == "full":  # fill the file system, then free one page: the page fails halfway
        filler = os.path.join(directory, "filler")
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(bytes(4096))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
            f.truncate(max(0, f.tell() - 4096))
    else:  # a file size limit: the write past it fails (EFBIG; Python ignores SIGXFSZ)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
    leak()
    gc.collect()
    during = sorted(os.listdir(directory))
    if mode == "full":
        os.unlink(filler)
        during.remove("filler")
    else:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    n = len(records)
    leak()
    gc.collect()
    after = sorted(os.listdir(directory))
    whole = [open(os.path.join(directory, p)).read().rstrip().endswith("</html>") for p in after]
    print(json.dumps(dict(records=records, texts=texts, during=during, after=after, whole=whole,
                          later=records[n:])))
""")


def run_child(argv):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def check_child(proc, reason):
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["during"] == [], out  # no page, no temp file
    assert len(out["texts"]) == 2
    (first,) = [r for r in out["records"] if r[0] != "INFO" and r not in out["later"]]
    level, message, traceback = first
    assert level == "WARNING" and not traceback
    assert "no page written: " + reason in message and out["texts"][0] in message, message
    assert len(out["after"]) == 1 and PAGE_RE.match(out["after"][0]) and out["whole"] == [True]
    (later,) = out["later"]
    assert later[0] == "WARNING" and "picture: " in later[1]


def test_a_real_full_file_system(tmp_path):
    # a 256 KiB tmpfs in a private user and mount namespace: the kernel's own ENOSPC, halfway
    # through the page (/dev/full cannot hold a directory, so it cannot serve here)
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    probe = run_child([unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                       'mount -t tmpfs -o size=256k tensorgc-full "$1"', "sh", str(mnt)])
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {probe.stderr.strip()}")
    proc = run_child([unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                      'mount -t tmpfs -o size=256k tensorgc-full "$1" && '
                      'exec "$2" -c "$3" "$1" full',
                      "sh", str(mnt), sys.executable, CHILD])
    check_child(proc, f"[Errno 28] No space left on device: '{mnt}'")


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin",
                    reason="RLIMIT_FSIZE as Linux applies it")
def test_a_real_file_size_limit(tmp_path):
    proc = run_child([sys.executable, "-c", CHILD, str(tmp_path), "fsize"])
    check_child(proc, f"[Errno 27] File too large: '{tmp_path}'")


# --------------------------------------------------------------------------
# the OOM autopsy
# --------------------------------------------------------------------------


def autopsy_files(path):
    return sorted(os.listdir(path))


def test_autopsy_file_that_cannot_be_written_is_left_out_and_named(tmp_path, monkeypatch,
                                                                      caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    gc.disable()
    try:
        leak(new_class("Leaky"))
        faults = Faults(monkeypatch, tmp_path)
        faults.replace(errno.ENOSPC, name="memreport.txt")
        path, verdict = tensorgc.write_autopsy(str(tmp_path), "cpu")
    finally:
        gc.enable()
    monkeypatch.undo()
    assert "reference cycles held" in verdict
    assert autopsy_files(path) == ["README.txt", "cycles-0.html", "gc.txt"]
    readme = open(os.path.join(path, "README.txt")).read()
    why = f"[Errno 28] No space left on device: '{os.path.join(path, 'memreport.txt')}'"
    assert f"memreport.txt not written: {why}" in readme
    assert "Traceback" not in readme
    assert tensorgc_records(caplog, logging.ERROR) == []
    (warning,) = tensorgc_records(caplog, logging.WARNING)
    assert warning.getMessage() == (f"tensorgc: the OOM autopsy in {path} is missing "
                                    f"memreport.txt ({why})")


@pytest.mark.parametrize("fault, args", [("write", (0,)), ("write", (10,)), ("fsync", ()),
                                         ("replace", ())])
def test_autopsy_on_a_full_disk_leaves_no_partial_file(tmp_path, monkeypatch, caplog, fault,
                                                         args):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    gc.collect()
    faults = Faults(monkeypatch, tmp_path)
    getattr(faults, fault)(errno.ENOSPC, *args)
    path, verdict = tensorgc.write_autopsy(str(tmp_path), "cpu")
    monkeypatch.undo()
    assert verdict == "a garbage collection would not free device memory"
    assert autopsy_files(path) == []  # the directory, nothing half written in it
    assert tensorgc_records(caplog, logging.ERROR) == []
    (warning,) = tensorgc_records(caplog, logging.WARNING)
    message = warning.getMessage()
    for name in ("memreport.txt", "gc.txt", "README.txt"):
        assert f"{name} ([Errno 28] No space left on device: '{os.path.join(path, name)}')" \
            in message, message


def test_observer_folds_missing_files_into_its_one_warning(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    obs = _Observer(str(tmp_path), None, None)
    faults = Faults(monkeypatch, tmp_path)
    faults.replace(errno.EDQUOT, name="README.txt")
    obs(0, 1 << 20, 0, 0)  # on CPU the CUDA parts fail (noted); the files are what matter
    monkeypatch.undo()
    assert obs.count == 1 and not obs.busy
    assert tensorgc_records(caplog, logging.ERROR) == []
    (warning,) = tensorgc_records(caplog, logging.WARNING)
    (path,) = [os.path.join(tmp_path, d) for d in os.listdir(tmp_path)]
    assert "README.txt" not in autopsy_files(path)  # the notes are in the log only
    assert (f"autopsy in {path} (not written: README.txt ([Errno 122] Disk quota exceeded: "
            f"'{os.path.join(path, 'README.txt')}'))") in warning.getMessage()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_autopsy_directory_that_cannot_be_created(tmp_path, monkeypatch, caplog, err):
    caplog.set_level(logging.WARNING, logger="tensorgc")
    faults = Faults(monkeypatch, tmp_path)
    faults.mkdir(err)
    with pytest.raises(OSError) as info:  # by hand: the error, naming the directory
        tensorgc.write_autopsy(str(tmp_path / "new"), "cpu")
    assert info.value.errno == err and info.value.filename == str(tmp_path / "new")
    obs = _Observer(str(tmp_path), None, None)
    obs(0, 1 << 20, 0, 0)  # the observer: one WARNING, no traceback, nothing raised
    monkeypatch.undo()
    assert obs.count == 0 and not obs.busy and os.listdir(tmp_path) == []
    assert tensorgc_records(caplog, logging.ERROR) == []
    (warning,) = tensorgc_records(caplog, logging.WARNING)
    message = warning.getMessage()
    assert warning.exc_info is None
    assert "no autopsy written, its directory could not be created: " in message
    assert f"[Errno {err}] {os.strerror(err)}: '{tmp_path}{os.sep}oom-" in message
