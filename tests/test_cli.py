"""The `tensorgc` command's contract across its subcommands: one --device syntax (the Python
API's), one answer to a device the snapshot does not hold, options named as typed, the real
output path in messages, no waiting on a FIFO, one check of negative addresses, control
characters from a file escaped in pages and on the terminal, a closed pipe ending quietly."""
import os
import pickle
import stat
import subprocess
import sys

import pytest

import tensorgc
from tensorgc import DeviceError, SnapshotError, load_snapshot
from tensorgc import cli
from tensorgc.segments import segment_map, segments_html
from tensorgc.timeline import replay, timeline_html
from _util import markup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1 << 20
FRAMES = [{"filename": "/home/u/train.py", "line": 7, "name": "step"}]


def snapshot(devices=(0,)):
    """A snapshot with one segment, one live block and a short trace on each device."""
    segs, traces = [], []
    for d in devices:
        base = 0x7000_0000 + d * 0x1000_0000
        segs.append({"device": d, "address": base, "total_size": 4 * MB, "stream": 0,
                     "segment_type": "large",
                     "blocks": [{"address": base, "size": 2 * MB, "requested_size": 2 * MB,
                                 "state": "active_allocated", "frames": FRAMES},
                                {"address": base + 2 * MB, "size": 2 * MB,
                                 "requested_size": 2 * MB, "state": "inactive", "frames": []}]})
        while len(traces) <= d:
            traces.append([])
        traces[d] = [{"action": "segment_alloc", "addr": base, "size": 4 * MB, "time_us": 1,
                      "frames": FRAMES},
                     {"action": "alloc", "addr": base, "size": 2 * MB, "time_us": 2,
                      "frames": FRAMES}]
    return {"segments": segs, "device_traces": traces}


def dump(tmp_path, snap, name="snap.pickle"):
    p = tmp_path / name
    p.write_bytes(pickle.dumps(snap, protocol=4))
    return str(p)


def run(capsys, *argv):
    """cli.main in this process: (exit code, stdout, stderr); argparse's own errors exit
    through SystemExit, whose code is returned the same way."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def cli_process(*argv, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tensorgc", *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def device_commands(p, out):
    return [["timeline", p, "-o", out], ["segments", p, "-o", out], ["trace", p]]


# ---------------------------------------------------------------------- --version


def test_version_is_the_package_version():
    r = cli_process("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"tensorgc {tensorgc.__version__}"


# ---------------------------------------------------------------------- --device


@pytest.mark.parametrize("spec", ["2", "cuda:2", "cuda"])
def test_every_subcommand_takes_the_python_apis_device_syntax(tmp_path, capsys, spec):
    p = dump(tmp_path, snapshot(devices=(2,)))  # "cuda": the first device the file holds
    out = tmp_path / "o.html"
    for argv in device_commands(p, out):
        code, stdout, err = run(capsys, *argv, "--device", spec)
        assert code == 0, (argv, err)
        if argv[0] == "trace":
            assert "segment_alloc" in stdout
        else:
            assert "cuda:2" in out.read_text()
            out.unlink()


def test_the_python_api_takes_the_same_syntax():
    snap = snapshot(devices=(0, 1))
    for spec in (1, "1", "cuda:1"):
        assert replay(snap, device=spec)[1] is snap["device_traces"][1]
        assert segment_map(snap, device=spec)[1] == [(0x8000_0000, 4 * MB, 0)]  # event 0
        assert "cuda:1" in timeline_html(snap, device=spec)
        assert "cuda:1" in segments_html(snap, device=spec)
    assert "cuda:0" in timeline_html(snap, device="cuda")  # the first device it holds
    import torch

    assert "cuda:1" in segments_html(snap, device=torch.device("cuda", 1))


@pytest.mark.parametrize("spec, says", [
    ("cpu", "a snapshot holds the CUDA caching allocator's devices, not cpu"),
    ("-1", "a device index is >= 0"),
    ("gpu", "gpu is not a device"),
    ("cuda:x", "cuda:x is not a device"),
])
def test_a_bad_device_names_the_option_and_is_bad_usage(tmp_path, capsys, spec, says):
    p = dump(tmp_path, snapshot())
    out = tmp_path / "o.html"
    for argv in device_commands(p, out):
        code, _, err = run(capsys, *argv, f"--device={spec}")
        assert code == 2, (argv, err)
        assert f"argument --device: {spec}: " in err or f"argument --device: {spec} " in err
        assert says in err and "Traceback" not in err
    assert not out.exists()


def test_a_device_the_snapshot_does_not_hold_is_refused_alike_by_every_subcommand(tmp_path,
                                                                                  capsys):
    p = dump(tmp_path, snapshot(devices=(0, 2)))
    out = tmp_path / "o.html"
    messages = set()
    for argv in device_commands(p, out):
        code, stdout, err = run(capsys, *argv, "--device", "3")
        assert code == 2 and stdout == "", (argv, err)
        assert err.startswith(f"tensorgc {argv[0]}: ")
        messages.add(err.split(": ", 1)[1])
    assert messages == {f"--device 3 (cuda:3) is not in {p}, which holds cuda:0, cuda:2\n"}
    assert not out.exists()  # no empty page


def test_a_snapshot_without_devices_says_so(tmp_path, capsys):
    p = dump(tmp_path, {"segments": [], "device_traces": []})
    code, _, err = run(capsys, "timeline", p, "-o", tmp_path / "o.html")
    assert code == 2 and "which holds no device (no segment and no trace entry)" in err


def test_the_python_api_refuses_a_device_the_snapshot_does_not_hold():
    snap = snapshot()
    for page in (timeline_html, segments_html):
        with pytest.raises(DeviceError, match=r"device 3 \(cuda:3\) is not in the snapshot, "
                                              r"which holds cuda:0"):
            page(snap, device=3)
        with pytest.raises(ValueError, match="a snapshot holds the CUDA caching allocator's "
                                             "devices, not cpu"):
            page(snap, device="cpu")


def test_one_parser_for_the_reporter_courtesy_and_the_line_profiler():
    from tensorgc import Courtesy, LineProfiler, MemReporter

    for bad in ("gpu", "cuda:x", -1, 2.5):
        with pytest.raises(DeviceError):
            MemReporter().collect(device=bad)
    assert LineProfiler(target_gpu="cuda:0").target_gpu == 0
    assert LineProfiler(target_gpu="1").target_gpu == 1
    with pytest.raises(DeviceError, match="target_gpu cpu: "):
        LineProfiler(target_gpu="cpu")
    assert Courtesy("cpu").device == "cpu"
    with pytest.raises(DeviceError, match="device gpu is not a device"):
        Courtesy("gpu")


# ---------------------------------------------------------------------- other options


def test_max_bytes_is_named_as_the_option(tmp_path, capsys):
    p = dump(tmp_path, snapshot())
    out = tmp_path / "o.html"
    for argv in device_commands(p, out) + [["stats", p], ["compare", p, p]]:
        code, _, err = run(capsys, *argv, "--max-bytes", "100")
        assert code == 1, (argv, err)
        assert "is over the limit of 100" in err and "--max-bytes" in err
        assert "max_bytes=" not in err
    code, _, err = run(capsys, "stats", p, "--max-bytes", "1K")
    assert code == 0, err
    for bad in ("-5", "0", "lots", "12Q"):
        code, _, err = run(capsys, "stats", p, f"--max-bytes={bad}")
        assert code == 2 and "argument --max-bytes: " in err, (bad, err)
    # the Python API names its own argument
    with pytest.raises(SnapshotError, match=r"pass max_bytes= to allow it"):
        load_snapshot(p, max_bytes=100)
    with pytest.raises(ValueError, match="max_bytes must be an int >= 1"):
        load_snapshot(p, max_bytes=-1)


@pytest.mark.parametrize("option", ["--detail", "--frames", "--limit", "--top", "--at"])
def test_counts_are_checked_and_named(tmp_path, capsys, option):
    p = dump(tmp_path, snapshot())
    argv = {"--detail": ["timeline", p, "-o", tmp_path / "o.html"],
            "--frames": ["trace", p], "--limit": ["trace", p], "--top": ["compare", p, p],
            "--at": ["segments", p, "-o", tmp_path / "o.html"]}[option]
    code, _, err = run(capsys, *argv, f"{option}=-1")
    assert code == 2 and f"argument {option}: -1 is negative" in err


def test_at_and_oom_out_of_the_trace_are_bad_usage(tmp_path, capsys):
    p = dump(tmp_path, snapshot())
    out = tmp_path / "o.html"
    code, _, err = run(capsys, "segments", p, "-o", out, "--at", "9")
    assert code == 2 and "--at 9 is outside the trace of cuda:0, which has 2 entries" in err
    code, _, err = run(capsys, "segments", p, "-o", out, "--oom")
    assert code == 2 and "--oom: the trace of cuda:0 has no OOM event" in err
    with pytest.raises(ValueError, match=r"at=9 is outside the trace"):  # the API's own names
        segment_map(snapshot(), at=9)


# ---------------------------------------------------------------------- output paths


@pytest.mark.parametrize("command", ["timeline", "segments"])
def test_a_missing_output_directory_names_the_real_path(tmp_path, capsys, command):
    p = dump(tmp_path, snapshot())
    out = tmp_path / "no" / "such" / "page.html"
    code, _, err = run(capsys, command, p, "-o", out)
    assert code == 2
    assert err == (f"tensorgc {command}: cannot write {out}: directory {out.parent} does not "
                   "exist\n")
    assert ".tmp" not in err and ".tensorgc-" not in err
    code, _, err = run(capsys, command, p, "-o", tmp_path)
    assert code == 2 and f"cannot write {tmp_path}: it is a directory" in err
    code, _, err = run(capsys, command, p, "-o", tmp_path / "snap.pickle" / "x.html")
    assert code == 2 and f"{tmp_path / 'snap.pickle'} is not a directory" in err


def test_a_failed_write_names_the_real_path(tmp_path, capsys, monkeypatch):
    import errno

    from tensorgc import snapshot as _  # noqa: F401  (the module is loaded)

    snapshot_module = sys.modules["tensorgc.snapshot"]

    def full(*a, **k):  # the disk is full at the first write of the temp file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(snapshot_module._Out, "write", full)
    p = dump(tmp_path, snapshot())
    out = tmp_path / "page.html"
    code, _, err = run(capsys, "timeline", p, "-o", out)
    assert code == 1
    assert err == f"tensorgc timeline: cannot write {out}: No space left on device\n"
    assert os.listdir(tmp_path) == ["snap.pickle"]  # no temp file left


# ---------------------------------------------------------------------- inputs


def test_a_fifo_is_refused_at_once_by_the_cli_and_the_api(tmp_path):
    fifo = tmp_path / "snap.fifo"
    os.mkfifo(fifo)  # no writer: opening it to read would block forever
    for argv in (["stats", fifo], ["timeline", fifo, "-o", tmp_path / "o.html"],
                 ["segments", fifo, "-o", tmp_path / "o.html"], ["trace", fifo],
                 ["compare", fifo, fifo]):
        r = cli_process(*argv, timeout=60)
        assert r.returncode == 1, (argv, r.stderr)
        assert f"{fifo}: is a named pipe (FIFO), not a regular file" in r.stderr
        assert "give - as the file to read standard input" in r.stderr
    with pytest.raises(SnapshotError, match="is a named pipe"):
        load_snapshot(fifo)


@pytest.mark.parametrize("path, what", [("DIR", "a directory"), ("/dev/null", "a character device"),
                                        ("/dev/zero", "a character device")])
def test_other_files_that_are_not_regular_are_refused(tmp_path, capsys, path, what):
    path = str(tmp_path) if path == "DIR" else path
    if not os.path.exists(path):
        pytest.skip(f"no {path}")
    with pytest.raises(SnapshotError, match=f"is {what}, not a regular file"):
        load_snapshot(path)
    code, _, err = run(capsys, "stats", path)
    assert code == 1 and f"{path}: is {what}, not a regular file" in err


def test_a_symlink_to_a_regular_file_is_read(tmp_path):
    p = dump(tmp_path, snapshot())
    link = tmp_path / "link.pickle"
    os.symlink(p, link)
    assert load_snapshot(link)["segments"][0]["device"] == 0
    assert stat.S_ISLNK(os.lstat(link).st_mode)


@pytest.mark.parametrize("where, field", [
    (("segments", 0, "address"), "address"),
    (("segments", 0, "total_size"), "total_size"),
    (("segments", 0, "blocks", 0, "address"), "address"),
    (("segments", 0, "blocks", 0, "size"), "size"),
    (("device_traces", 0, 1, "addr"), "addr"),
    (("device_traces", 0, 1, "size"), "size"),
])
def test_negative_addresses_and_sizes_are_refused_alike_everywhere(tmp_path, capsys, where,
                                                                    field):
    snap = snapshot()
    d = snap
    for k in where[:-1]:
        d = d[k]
    d[where[-1]] = -4096
    p = dump(tmp_path, snap)
    good = dump(tmp_path, snapshot(), "good.pickle")
    out = tmp_path / "o.html"
    why = f"'{field}' is negative (-4096)"
    for argv in device_commands(p, out) + [["stats", p], ["compare", good, p]]:
        code, _, err = run(capsys, *argv)
        assert code == 1 and why in err, (argv, err)
    with pytest.raises(SnapshotError, match=why.replace("(", r"\(").replace(")", r"\)")):
        load_snapshot(p)
    assert not out.exists()


# ---------------------------------------------------------------------- strings from the file

NASTY = "/srv/a\x00b\x1b[31m\u202eyp.evil\r\n<script>.py"


def nasty_snapshot(length=0):
    snap = snapshot()
    frames = [{"filename": NASTY + "x" * length, "line": 3, "name": "f\x00\x07<b>"}]
    snap["device_traces"][0][1]["frames"] = frames
    snap["segments"][0]["blocks"][0]["frames"] = frames
    return snap


def test_control_characters_from_a_file_are_escaped_in_pages_and_on_the_terminal(tmp_path,
                                                                                   capsys):
    p = dump(tmp_path, nasty_snapshot())
    for command in ("timeline", "segments"):
        out = tmp_path / f"{command}.html"
        code, _, err = run(capsys, command, p, "-o", out)
        assert code == 0, err
        page = out.read_text()
        assert not any(ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) < 0xA0 for c in page)
        page = markup(page) if command == "timeline" else page
        assert "\u202e" not in page and "<script>" not in page
        assert "/srv/a\\x00b\\x1b[31m\\u202eyp.evil\\x0d\\x0a&lt;script&gt;.py" in page
        assert "f\\x00\\x07&lt;b&gt;" in page
    for argv in (["trace", p], ["compare", dump(tmp_path, snapshot((1,)), "g.pickle"), p]):
        code, stdout, _ = run(capsys, *argv)
        assert code == 0
        assert "\x00" not in stdout and "\x1b" not in stdout and "\r" not in stdout
        assert "/srv/a\\x00b\\x1b[31m" in stdout


def test_strings_from_a_file_are_bounded_in_a_page(tmp_path):
    snap = nasty_snapshot(length=1 << 20)  # a file name of a mebibyte
    page = timeline_html(snap)
    # the page of the same snapshot with a short name, and no more than a few cut copies more
    assert len(page) < len(timeline_html(nasty_snapshot())) + (8 << 10)
    assert "x" * 900 in page and "x" * 1100 not in page


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    snap = snapshot()
    snap["device_traces"][0] = [{"action": "alloc", "addr": 0x1000 * (i + 1), "size": 512,
                                 "frames": FRAMES} for i in range(20000)]
    p = dump(tmp_path, snap)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tensorgc", "trace", p, "--limit", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 1
    assert first.split()[1] == b"alloc"
    assert err == b"", err
