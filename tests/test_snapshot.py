"""Snapshot files: dump/load round trips of snapshots built as dicts, the hostile-pickle cases
(globals, reduce, persistent ids, extension codes, huge lengths and memo indices, hash bombs,
memo repetition, truncation), limits, the shape and field-type check, the CLI on bad fields,
the `tensorgc stats` command, and recording on CUDA when there is one."""
import os
import pickle
import stat
import struct

import pytest
torch = pytest.importorskip("torch")  # the torch-free run (Python versions without a CPU build) skips these

import tensorgc
from tensorgc import SnapshotError, dump_snapshot, load_snapshot
from _util import run_tensorgc_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def made_snapshot():
    frames = [{"filename": "/home/u/train.py", "line": 7, "name": "step"}]
    blocks = [{"address": 0x7000_0000, "size": 2 * MB, "requested_size": 2 * MB - 8,
               "state": "active_allocated", "frames": frames},
              {"address": 0x7000_0000 + 2 * MB, "size": 2 * MB, "requested_size": 2 * MB,
               "state": "inactive", "frames": []}]
    seg = {"device": 0, "address": 0x7000_0000, "total_size": 4 * MB, "stream": 0,
           "segment_type": "large", "allocated_size": 2 * MB, "active_size": 2 * MB,
           "requested_size": 2 * MB - 8, "blocks": blocks}
    trace = [{"action": "segment_alloc", "addr": 0x7000_0000, "size": 4 * MB, "stream": 0,
              "time_us": 1, "frames": frames},
             {"action": "alloc", "addr": 0x7000_0000, "size": 2 * MB, "stream": 0, "time_us": 2,
              "frames": frames}]
    return {"segments": [seg], "device_traces": [trace]}


def write(tmp_path, data, name="s.pickle"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_round_trip_any_protocol(tmp_path, protocol):
    snap = made_snapshot()
    p = write(tmp_path, pickle.dumps(snap, protocol=protocol))
    assert load_snapshot(p) == snap


def test_dump_writes_protocol_4_atomically_with_mode_0600(tmp_path):
    snap = made_snapshot()
    p = tmp_path / "snap.pickle"
    assert dump_snapshot(p, snap) == str(p)
    data = p.read_bytes()
    assert data[:2] == b"\x80\x04"  # memory_viz reads protocol 4
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    assert [f for f in os.listdir(tmp_path)] == ["snap.pickle"]  # no temp file left
    assert load_snapshot(p) == snap


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > " + os.devnull,))


@pytest.mark.parametrize("payload", [
    pickle.dumps(Evil(), protocol=2),                      # GLOBAL + REDUCE
    pickle.dumps(Evil(), protocol=4),                      # STACK_GLOBAL + REDUCE
    pickle.dumps({"segments": [Evil()]}, protocol=4),      # nested
    b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.",  # hand-made REDUCE
    b"\x80\x02(cos\nsystem\nX\x02\x00\x00\x00idi.",         # INST-like via MARK + GLOBAL
    b"\x80\x02P1\n.",                                      # persistent id
    b"\x80\x02\x82\x01.",                                  # EXT1: the copyreg registry
])
def test_hostile_pickles_never_run_code(tmp_path, payload):
    p = write(tmp_path, payload)
    with pytest.raises(SnapshotError) as ei:
        load_snapshot(p)
    assert str(p) in str(ei.value)


def test_huge_declared_length_does_not_allocate(tmp_path):
    # BINUNICODE8 claiming 2**60 bytes in a 20-byte file
    p = write(tmp_path, b"\x80\x04\x8d" + struct.pack("<Q", 1 << 60) + b"abc.")
    with pytest.raises(SnapshotError, match="truncated|corrupt"):
        load_snapshot(p)
    p = write(tmp_path, b"\x80\x04B" + struct.pack("<I", 0xFFFFFFF0) + b"xy.", "b.pickle")
    with pytest.raises(SnapshotError, match="truncated|corrupt"):
        load_snapshot(p)


def test_hash_bombs_are_refused_before_unpickling(tmp_path):
    # the unpickler hashes dict keys and set members; hash() of a tuple is recursive in C and
    # uncached: nested a million deep it overflowed the C stack (SIGSEGV), and a tuple that
    # repeats itself through the memo took 2**58 steps (a hang). A fresh interpreter each, with
    # a timeout, so that a regression fails here instead of killing or hanging the suite.
    deep = b"N" + b"\x85" * 1_000_000
    dag = b"NN\x86\x940" + b"".join(b"h%ch%c\x86\x940" % (k, k) for k in range(1, 60)) + b"h\x3b"
    payloads = {
        "deep_key": b"\x80\x04}" + deep + b"Ns.",
        "deep_set_member": b"\x80\x04\x8f(" + deep + b"\x90.",
        "deep_frozenset_member": b"\x80\x04(" + deep + b"\x91.",
        "dag_key": b"\x80\x04}\x94" + dag + b"Ns.",
        "long_int_key": b"\x80\x04}\x8b" + struct.pack("<i", 1 << 20) + b"\x01" * (1 << 20) + b"Ns.",
    }
    for name, data in payloads.items():
        p = write(tmp_path, data, name + ".pickle")
        r = run_cli("stats", str(p), timeout=60)
        assert r.returncode == 1, (name, r.returncode, r.stderr[-500:])
        assert "not a plain scalar" in r.stderr and "Traceback" not in r.stderr, name


@pytest.mark.parametrize("payload, what", [
    (b"\x80\x02Nr\x00\x00\x00\x04.", "memo index"),       # LONG_BINPUT 2**26: a 1 GiB memo
    (b"\x80\x02Np67108864\n.", "memo index"),                 # PUT, the text form
    (b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"ab.", "declares"),   # BINBYTES8: 1 TiB
    (b"\x80\x05\x96" + struct.pack("<Q", 1 << 33) + b"ab.", "declares"),   # BYTEARRAY8
    (b"\x80\x03B" + struct.pack("<I", 0xFFFFFFF0) + b"ab.", "declares"),    # BINBYTES
    (b"\x80\x04\x95" + struct.pack("<Q", 1 << 62) + b"N.", "declares"),    # FRAME
])
def test_declared_sizes_and_memo_indices_must_fit_in_the_file(tmp_path, payload, what):
    # CPython allocates these before reading: the bytes objects at their declared length, the
    # memo at twice the largest index (zeroed: a 10-byte file took 2 GB, or 32 GB with 2**31)
    with pytest.raises(SnapshotError, match=what):
        load_snapshot(write(tmp_path, payload))


@pytest.mark.parametrize("payload, opcode", [
    (b"\x80\x02\x82\x01)R.", "EXT1"),      # copyreg's cache answers EXT without find_class
    (b"\x80\x02}NNb.", "BUILD"),             # BUILD with None state succeeds on a dict
    (b"\x80\x05\x97.", "NEXT_BUFFER"),       # protocol 5 out-of-band buffer
    (b"\x80\x05C\x01a\x98.", "READONLY_BUFFER"),
    (b"\x80\x02N)\x81.", "NEWOBJ"),
])
def test_opcodes_that_call_or_look_up_are_refused_by_the_scan(tmp_path, payload, opcode):
    with pytest.raises(SnapshotError, match=f"refusing opcode {opcode}"):
        load_snapshot(write(tmp_path, payload))


def test_scan_accepts_what_pickle_writes(tmp_path):
    import pickletools

    snap = made_snapshot()
    snap["segments"][0]["segment_pool_id"] = (0, 0)  # torch writes tuples (as values)
    snap["allocator_settings"] = {"roundup_power2_divisions": {"1": 0}, "gc": 0.5, "x": None}
    snap["device_traces"][0][1]["frames"] = snap["device_traces"][0][0]["frames"]  # shared
    for protocol in (2, 3, 4, 5):
        data = pickle.dumps(snap, protocol=protocol)
        for d in (data, pickletools.optimize(data)):  # optimize leaves sparse memo indices
            assert load_snapshot(write(tmp_path, d, f"p{protocol}.pickle")) == snap


def test_memo_repetition_is_refused_before_walking(tmp_path):
    # device_traces = [T] * 3000, T = [E] * 3000: 9 million entries from 12 KB (checking them
    # one by one took a minute per 120 KB); every segment, block and entry costs a byte at least
    entry = b"}\x94\x8c\x06action\x94\x8c\x05alloc\x94s0"
    t = b"]\x94(" + b"h\x00" * 3000 + b"e0"
    data = (b"\x80\x04}\x8c\x08segments]s\x8c\x0ddevice_traces](" + entry + t
            + b"h\x03" * 3000 + b"es.")
    with pytest.raises(SnapshotError, match="repeats lists through the memo"):
        load_snapshot(write(tmp_path, data))


def test_read_asks_for_the_file_size_not_the_limit(tmp_path, monkeypatch):
    # f.read(n) allocates n bytes first: read(max_bytes + 1) reserved 8 GiB for any file, a
    # MemoryError (with a traceback from the CLI) under ulimit -v or strict overcommit
    import builtins
    import importlib

    snapshot_module = importlib.import_module("tensorgc.snapshot")  # tensorgc.snapshot: the function
    asked = []

    class Recording:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def fileno(self):
            return self.f.fileno()

        def read(self, n=-1):
            asked.append(n)
            return self.f.read(n)

    monkeypatch.setattr(snapshot_module, "open",
                        lambda *a, **k: Recording(builtins.open(*a, **k)), raising=False)
    data = pickle.dumps(made_snapshot(), protocol=4)
    assert load_snapshot(write(tmp_path, data)) == made_snapshot()
    assert asked and max(asked) <= len(data) + 1


def test_standard_input_is_read_up_to_the_limit_with_a_dash(tmp_path):
    import subprocess
    import sys

    data = pickle.dumps(made_snapshot(), protocol=4)
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "tensorgc", "stats", "-"], input=data,
                       capture_output=True, env=env, timeout=120)
    assert r.returncode == 0 and b"1 segments, 2 blocks" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "tensorgc", "stats", "-", "--max-bytes",
                        "100"], input=data, capture_output=True, env=env, timeout=120)
    assert r.returncode == 1, r.stderr
    assert b"<stdin>: holds more than the limit of 100 bytes" in r.stderr
    assert b"--max-bytes" in r.stderr and b"max_bytes=" not in r.stderr
    # a pipe given by its path is refused like a FIFO, and the message says to use -
    r = subprocess.run([sys.executable, "-m", "tensorgc", "stats", "/dev/stdin"], input=data,
                       capture_output=True, env=env, timeout=120)
    assert r.returncode == 1 and b"not a regular file" in r.stderr and b"give -" in r.stderr


def test_truncated_files_say_so(tmp_path):
    data = pickle.dumps(made_snapshot(), protocol=4)
    for cut in (3, len(data) // 2, len(data) - 1):
        p = write(tmp_path, data[:cut], f"t{cut}.pickle")
        with pytest.raises(SnapshotError, match="truncated|corrupt"):
            load_snapshot(p)


def test_limits_and_non_pickles(tmp_path):
    data = pickle.dumps(made_snapshot(), protocol=4)
    p = write(tmp_path, data)
    with pytest.raises(SnapshotError, match="over the limit"):
        load_snapshot(p, max_bytes=10)
    with pytest.raises(SnapshotError, match="empty"):
        load_snapshot(write(tmp_path, b"", "e.pickle"))
    with pytest.raises(SnapshotError, match="not a pickle"):
        load_snapshot(write(tmp_path, b"{\"segments\": []}", "j.pickle"))
    with pytest.raises(SnapshotError, match="trailing"):
        load_snapshot(write(tmp_path, data + b"junk", "x.pickle"))
    with pytest.raises(SnapshotError, match="cannot read"):
        load_snapshot(tmp_path / "missing.pickle")


@pytest.mark.parametrize("obj, msg", [
    (42, "a snapshot is a dict"),
    ({"segments": "x"}, "'segments' must be a list"),
    ({"segments": [1]}, "segment 0"),
    ({"segments": [], "device_traces": [5]}, "'device_traces'"),
    ({"segments": [], "device_traces": [[1]]}, "trace entry 0"),
])
def test_shape_is_checked(tmp_path, obj, msg):
    with pytest.raises(SnapshotError, match=msg):
        load_snapshot(write(tmp_path, pickle.dumps(obj, protocol=4)))


def _bad(path, value):
    """made_snapshot() with the value at path (keys and indices) replaced, or deleted (None)."""
    snap = made_snapshot()
    *where, last = path
    d = snap
    for k in where:
        d = d[k]
    if value is None:
        del d[last]
    else:
        d[last] = value
    return snap


BAD_FIELDS = [
    (("segments", 0, "blocks", 0, "size"), None, "block 0: has no 'size'"),
    (("segments", 0, "blocks", 0), "x", "block 0: is not a dict"),
    (("segments", 0, "blocks", 0, "frames"), "abc", "'frames' is str, not list"),
    (("segments", 0, "blocks", 0, "frames"), [["x"]], "frame 0 is list, not dict"),
    (("segments", 0, "blocks", 0, "state"), 3, "'state' is int, not str"),
    (("segments", 0, "device"), "0", "segment 0: 'device' is str, not int"),
    (("segments", 0, "address"), (1, 2), "'address' is tuple, not int"),
    (("segments", 0, "total_size"), 1 << 70, "'total_size' is out of range"),
    (("device_traces", 0, 1, "frames"), "train.py", "'frames' is str, not list"),
    (("device_traces", 0, 1, "frames"), [{"filename": 5, "line": 1}], "'filename' is int"),
    (("device_traces", 0, 1, "frames"), [{"filename": "a.py", "line": "7"}], "'line' is str"),
    (("device_traces", 0, 1, "action"), None, "has no 'action'"),
    (("device_traces", 0, 1, "action"), ["alloc"], "'action' is list, not str"),
    (("device_traces", 0, 1, "size"), float("inf"), "'size' is float, not int"),
    (("device_traces", 0, 1, "addr"), -(1 << 80), "'addr' is out of range"),
    (("device_traces", 0, 1, "time_us"), "12:00", "'time_us' is str, not int"),
]


@pytest.mark.parametrize("path, value, msg", BAD_FIELDS)
def test_field_types_are_checked(tmp_path, path, value, msg):
    with pytest.raises(SnapshotError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        load_snapshot(write(tmp_path, pickle.dumps(_bad(path, value), protocol=4)))


def test_every_command_says_why_instead_of_a_traceback(tmp_path, capsys):
    # each of these reached Python that raised AttributeError, KeyError or OverflowError (a
    # traceback from the CLI); in-process, so that any exception fails the test
    from tensorgc import cli

    good = tmp_path / "good.pickle"
    dump_snapshot(good, made_snapshot())
    out = str(tmp_path / "o.html")
    for n, (path, value, msg) in enumerate(BAD_FIELDS):
        p = write(tmp_path, pickle.dumps(_bad(path, value), protocol=4), f"bad{n}.pickle")
        for argv in (["stats", p], ["timeline", p, "-o", out], ["segments", p, "-o", out],
                     ["trace", p], ["compare", good, p]):
            assert cli.main([str(a) for a in argv]) == 1, (argv, msg)
            assert msg.split(":")[-1].strip() in capsys.readouterr().err


def test_segments_only_list_is_accepted(tmp_path):
    segs = made_snapshot()["segments"]
    snap = load_snapshot(write(tmp_path, pickle.dumps(segs, protocol=4)))
    assert snap["segments"] == segs and snap["device_traces"] == []


run_cli = run_tensorgc_cli


def test_cli_stats(tmp_path):
    p = tmp_path / "snap.pickle"
    dump_snapshot(p, made_snapshot())
    r = run_cli("stats", str(p))
    assert r.returncode == 0, r.stderr
    assert "1 segments, 2 blocks, 2 trace entries" in r.stdout
    lines = {ln.split()[0] + (" " + ln.split()[1] if ln.split()[1].isalpha() else ""): ln
             for ln in r.stdout.splitlines() if ln.startswith("  ")}
    assert lines["allocated"].split()[1:5] == ["2.00M", "in", "1", "blocks"]
    assert lines["inactive split"].split()[2] == "2.00M"
    assert lines["reserved"].split()[1] == "4.00M"
    assert "trace cuda:0: segment_alloc 1, alloc 1" in r.stdout


def test_cli_errors_and_help(tmp_path):
    r = run_cli("stats", str(write(tmp_path, pickle.dumps(Evil(), protocol=4))))
    assert r.returncode == 1 and "refusing to load" in r.stderr and "system" in r.stderr
    r = run_cli("stats", str(tmp_path / "nope.pickle"))
    assert r.returncode == 1 and "cannot read" in r.stderr
    r = run_cli()
    assert r.returncode == 2 and "usage: tensorgc" in r.stderr
    r = run_cli("stats", "--help")
    assert r.returncode == 0 and "snapshot" in r.stdout
    r = run_cli("bogus")
    assert r.returncode == 2


def test_real_snapshot_fixture_recorded_on_the_gpu_machine():
    path = os.path.join(HERE, "data", "h100_small_snapshot.pickle")  # committed with the tests
    snap = load_snapshot(path)
    assert snap["segments"] and any(t for t in snap["device_traces"])
    actions = {e["action"] for t in snap["device_traces"] for e in t}
    assert {"alloc", "free_requested", "free_completed"} <= actions
    r = run_cli("stats", path)
    assert r.returncode == 0 and "cuda:0" in r.stdout


def test_record_memory_history_validates_arguments():
    with pytest.raises(ValueError):
        tensorgc.record_memory_history(enabled="yes")
    with pytest.raises(ValueError):
        tensorgc.record_memory_history(stacks="cpp")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_record_dump_load_on_cuda(tmp_path):
    tensorgc.record_memory_history(max_entries=10000)
    try:
        x = torch.empty(3 * MB, dtype=torch.uint8, device="cuda")
        del x
        y = torch.empty(MB, dtype=torch.uint8, device="cuda")
        p = dump_snapshot(tmp_path / "real.pickle")
    finally:
        tensorgc.record_memory_history(enabled=None)
    snap = load_snapshot(p)
    trace = [e for t in snap["device_traces"] for e in t]
    assert any(e["action"] == "alloc" and e["size"] >= 3 * MB for e in trace)
    assert any(e["action"] == "free_requested" for e in trace)
    assert any(b["state"] == "active_allocated" and b["size"] >= MB
               for s in snap["segments"] for b in s["blocks"])
    if os.environ.get("TENSORGC_SAVE_FIXTURE"):
        import shutil
        shutil.copy(p, os.environ["TENSORGC_SAVE_FIXTURE"])
    del y


def test_cli_trace(tmp_path):
    p = tmp_path / "snap.pickle"
    dump_snapshot(p, made_snapshot())
    r = run_cli("trace", str(p))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["0", "segment_alloc", "4.00M"]
    assert "alloc" in lines[2] and lines[2].rstrip().endswith("active 2.00M")
    assert "/home/u/train.py:7 step" in r.stdout
    r = run_cli("trace", str(p), "--device", "3")
    assert r.returncode == 2
    assert f"--device 3 (cuda:3) is not in {p}, which holds cuda:0" in r.stderr
    r = run_cli("trace", str(p), "--device", "-1")  # was traces[-1], printed as cuda:-1
    assert r.returncode == 2 and "argument --device: -1: a device index is >= 0" in r.stderr


def test_cli_compare(tmp_path):
    a = made_snapshot()
    b = made_snapshot()
    b["segments"][0]["blocks"][1]["state"] = "active_allocated"  # a new live block in B
    b["segments"].append({"device": 0, "address": 0x9000_0000, "total_size": 2 * MB,
                          "segment_type": "large", "blocks": []})
    pa, pb = tmp_path / "a.pickle", tmp_path / "b.pickle"
    dump_snapshot(pa, a)
    dump_snapshot(pb, b)
    r = run_cli("compare", str(pa), str(pb))
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert any(ln.startswith("segments only in A") and ": 0, 0.00B" in ln for ln in out)
    assert any(ln.startswith("segments only in B") and ": 1, 2.00M" in ln for ln in out)
    assert any(ln.startswith("allocated blocks only in B: 1, 2.00M") for ln in out)
    assert "0x90000000 2.00M (large pool)" in r.stdout
    # hostile values are a clean error, not a traceback
    bad = made_snapshot()
    bad["segments"][0]["address"] = "x"
    pc = tmp_path / "c.pickle"
    dump_snapshot(pc, bad)
    r = run_cli("compare", str(pa), str(pc))
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_cli_version():
    from _util import run_tensorgc_cli
    p = run_tensorgc_cli("--version", timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == f"tensorgc {tensorgc.__version__}"
