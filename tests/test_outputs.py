"""What tensorgc writes never replaces what is not its to replace: only a regular file (new, or
one it may overwrite) is written, whole, by every writer: pages from the command line and the
API, snapshots, line-profile dumps. A device, a FIFO, a socket, a directory, a link to nothing or
the input itself is refused before anything is written (exit code 2 on the command line); a
symbolic link to a regular file is written through, and the link stays. Every scenario uses
files of its own (a private device node, never /dev/null itself)."""
import os
import socket
import stat
import subprocess
import sys

import pytest

import tensorgc
from tensorgc import OutputError, cli
from tensorgc.snapshot import atomic_write, output_target
from test_cli import dump, run, snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.fixture
def snap_file(tmp_path):
    return dump(tmp_path, snapshot())


def device_node(tmp_path):
    """A character device like /dev/null (1, 3), made here; skipped where mknod is not allowed."""
    path = tmp_path / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def unix_socket(tmp_path):
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return path


def identity(path):
    st = os.lstat(path)
    return st.st_mode, st.st_ino, st.st_rdev


KINDS = {"device": (device_node, "a character device"), "fifo": (fifo, "a named pipe (FIFO)"),
         "socket": (unix_socket, "a socket")}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("command", ["timeline", "segments"])
def test_the_command_refuses_what_is_not_a_regular_file(tmp_path, capsys, snap_file, kind,
                                                        command):
    make, words = KINDS[kind]
    target = make(tmp_path)
    before = identity(target)
    code, _, err = run(capsys, command, snap_file, "-o", target)
    assert code == 2, err
    assert f"cannot write {target}: it is {words}" in err
    assert "-o - writes the page to standard output" in err
    assert identity(target) == before  # still the same device, FIFO or socket, not a file
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tensorgc-")]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_link_to_a_device_is_refused_and_stays_a_link(tmp_path, capsys, snap_file, kind):
    target = KINDS[kind][0](tmp_path)
    link = tmp_path / "out.html"
    link.symlink_to(target)
    before = identity(target)
    code, _, err = run(capsys, "timeline", snap_file, "-o", link)
    assert code == 2 and f"the link leads to {target}" in err
    assert os.path.islink(link) and identity(target) == before


def test_a_link_to_a_regular_file_is_written_through(tmp_path, capsys, snap_file):
    real = tmp_path / "pages" / "latest.html"
    real.parent.mkdir()
    real.write_text("old")
    real.chmod(0o644)
    link = tmp_path / "out.html"
    link.symlink_to(real)
    code, _, err = run(capsys, "timeline", snap_file, "-o", link)
    assert code == 0, err
    assert os.path.islink(link) and os.readlink(link) == str(real)
    assert real.read_text().startswith("<!DOCTYPE html>")
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o644  # the file keeps its permissions
    assert not [n for n in os.listdir(real.parent) if n.startswith(".tensorgc-")]


def test_a_link_to_nothing_and_a_loop_are_refused(tmp_path, capsys, snap_file):
    dangling = tmp_path / "dangling.html"
    dangling.symlink_to(tmp_path / "missing" / "x.html")
    code, _, err = run(capsys, "timeline", snap_file, "-o", dangling)
    assert code == 2 and "does not exist" in err and os.path.islink(dangling)
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    a.symlink_to(b)
    b.symlink_to(a)
    code, _, err = run(capsys, "timeline", snap_file, "-o", a)
    assert code == 2 and "loop" in err and os.path.islink(a) and os.path.islink(b)


def test_the_input_itself_is_refused_under_any_name(tmp_path, capsys, snap_file):
    original = open(snap_file, "rb").read()
    hard = tmp_path / "other-name.pickle"
    os.link(snap_file, hard)
    soft = tmp_path / "soft.html"
    soft.symlink_to(snap_file)
    for out in (snap_file, hard, soft):
        for command in ("timeline", "segments"):
            code, _, err = run(capsys, command, snap_file, "-o", out)
            assert code == 2 and "it is the input being read" in err, (out, err)
    assert open(snap_file, "rb").read() == original


def test_an_input_among_many_ranks_is_refused(tmp_path, capsys):
    d = tmp_path / "ranks"
    d.mkdir()
    for r in range(2):
        dump(d, snapshot(), f"snapshot-rank{r}.pickle")
    code, _, err = run(capsys, "timeline", d, "-o", d / "snapshot-rank1.pickle")
    assert code == 2 and "it is the input being read" in err


def test_a_read_only_file_is_left_as_it_is(tmp_path, capsys, snap_file):
    out = tmp_path / "keep.html"
    out.write_text("keep me")
    out.chmod(0o444)
    code, _, err = run(capsys, "timeline", snap_file, "-o", out)
    assert code == 2 and "read-only" in err
    assert out.read_text() == "keep me"


def test_a_regular_file_is_replaced_whole_and_keeps_its_mode(tmp_path, capsys, snap_file):
    out = tmp_path / "page.html"
    out.write_text("old")
    out.chmod(0o640)
    code, _, err = run(capsys, "timeline", snap_file, "-o", out)
    assert code == 0, err
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
    new = tmp_path / "new.html"
    assert run(capsys, "timeline", snap_file, "-o", new)[0] == 0
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o600


def test_dash_writes_the_page_to_standard_output(capsys, snap_file):
    code, out, err = run(capsys, "timeline", snap_file, "-o", "-")
    assert code == 0, err
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")


@pytest.mark.parametrize("kind", sorted(KINDS) + ["directory", "input"])
def test_every_api_writer_refuses_the_same(tmp_path, snap_file, kind):
    if kind == "directory":
        target = tmp_path / "dir"
        target.mkdir()
    elif kind == "input":
        target = snap_file
    else:
        target = KINDS[kind][0](tmp_path)
    before = identity(target)
    with pytest.raises(OutputError, match="cannot write"):
        tensorgc.timeline(snap_file, str(target), device=0)
    if kind not in ("input", "directory"):  # dump_snapshot writes *into* a directory
        with pytest.raises(OutputError, match="cannot write"):
            tensorgc.dump_snapshot(str(target), snap=snapshot())
    if kind != "input":
        with pytest.raises(OutputError):
            atomic_write(target, lambda f: f.write("x"))
    with pytest.raises(OutputError):
        atomic_write(target, lambda f: f.write("x"), inputs=[snap_file] if kind == "input" else [])
    assert identity(target) == before


def test_output_target_answers_without_writing(tmp_path):
    new = tmp_path / "new.html"
    assert output_target(new) == str(new) and not new.exists()
    real = tmp_path / "real.html"
    real.write_text("x")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    assert output_target(link) == str(real)
    assert atomic_write(link, lambda f: f.write("y")) == str(link)  # the name given comes back
    assert real.read_text() == "y" and os.path.islink(link)


def test_a_path_swapped_for_a_device_while_writing_is_not_replaced(tmp_path):
    node = device_node(tmp_path)
    out = tmp_path / "out.html"
    out.write_text("old")

    def write(f):
        f.write("new")
        os.unlink(out)
        os.symlink(node, out)  # swapped under us: now a link to a device

    before = identity(node)
    with pytest.raises(OutputError, match="it is a character device"):
        atomic_write(out, write)
    assert identity(node) == before and os.path.islink(out)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tensorgc-")]


def test_multi_rank_device_that_no_rank_holds_is_a_usage_error(tmp_path, capsys):
    d = tmp_path / "ranks"
    d.mkdir()
    for r in range(2):
        dump(d, snapshot(), f"snapshot-rank{r}.pickle")
    out = tmp_path / "ranks.html"
    code, _, err = run(capsys, "timeline", d, "--device", "7", "-o", out)
    assert code == 2 and "none of the 2 snapshots holds cuda:7" in err, err
    assert "holds cuda:0" in err and not out.exists()


def test_error_messages_are_one_line_whatever_the_input(tmp_path, capsys):
    bad = tmp_path / "bad\nname\x1b[31m.pickle"
    bad.write_bytes(b"\x80\x04not a pickle\n\x1b[2J")
    code, _, err = run(capsys, "stats", bad)
    assert code == 1
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x0a" in err



@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux's /proc")
def test_a_link_to_an_open_descriptor_is_refused_and_the_file_behind_it_kept(tmp_path, capsys,
                                                                              snap_file):
    # /dev/stdout with `> run.log`: replacing the log by a rename lost its lines, those written
    # before and those written after (into the unlinked file the descriptor still held).
    log = tmp_path / "run.log"
    log.write_text("line 1\n")
    link = tmp_path / "out.html"
    with open(log, "a") as f:
        link.symlink_to(f"/proc/self/fd/{f.fileno()}")
        names = [f"/proc/self/fd/{f.fileno()}", str(link)]
        if os.path.isdir("/dev/fd"):
            names.append(f"/dev/fd/{f.fileno()}")
        for out in names:
            code, _, err = run(capsys, "timeline", snap_file, "-o", out)
            assert code == 2 and "a process's open file" in err, err
            assert "-o - writes the page to standard output" in err
            with pytest.raises(OutputError, match="open file"):
                tensorgc.timeline(snap_file, out, device=0)
            with pytest.raises(OutputError, match="open file"):
                atomic_write(out, lambda w: w.write("x"))
        f.write("line 2\n")
    assert log.read_text() == "line 1\nline 2\n"
    assert os.path.islink(link)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tensorgc-")]


def test_a_name_ending_with_a_slash_is_never_written_as_a_file(tmp_path, capsys, snap_file):
    # abspath drops the slash: "pages/" became a file named pages
    for out in (f"{tmp_path / 'pages'}/", f"{snap_file}/"):
        code, _, err = run(capsys, "timeline", snap_file, "-o", out)
        assert code == 2 and "names a directory" in err, err
        with pytest.raises(OutputError, match="names a directory"):
            tensorgc.timeline(snap_file, out, device=0)
        with pytest.raises(OutputError, match="names a directory"):
            atomic_write(out, lambda w: w.write("x"))
    assert not (tmp_path / "pages").exists()
    assert open(snap_file, "rb").read(1) == b"\x80"  # the snapshot (a pickle) is as it was


@pytest.mark.parametrize("command", ["timeline", "segments"])
def test_the_file_read_as_standard_input_is_refused_as_the_input(tmp_path, snap_file, command):
    # `tensorgc timeline - -o snap.pickle < snap.pickle` replaced the snapshot with the page.
    original = open(snap_file, "rb").read()
    with open(snap_file, "rb") as stdin:
        p = subprocess.run([sys.executable, "-m", "tensorgc", command, "-", "-o", snap_file],
                           stdin=stdin, capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode == 2 and "it is the input being read (standard input)" in p.stderr
    assert open(snap_file, "rb").read() == original
    with open(snap_file, "rb") as stdin:  # another output is fine
        p = subprocess.run([sys.executable, "-m", "tensorgc", command, "-", "-o",
                            tmp_path / "page.html"], stdin=stdin, capture_output=True, text=True,
                           timeout=120, env=ENV)
    assert p.returncode == 0, p.stderr
