"""The two snapshot loaders refuse the same files: load_snapshot(path, lean=True) (the streaming
pickle machine, allocator/pickstream.c) and load_snapshot(path, lean=False) (the pre-scan,
allocator/pickscan.c, then CPython's unpickler). Each file either loads both ways into equal data
(a LeanTrace read as its entry dicts, types exact: a bool stays a bool) or is refused both ways
with the same exception type and a message free of the file's control characters.

* the regression files in tests/data/refused/ (mutants on which the loaders disagreed, found by
  tests/_snapfuzz.py; manifest.json says what each exercises and what each loader did);
* hand-made files, one per rule the loaders now share: an opcode crossing the end of its FRAME,
  a FRAME inside another, a STOP that leaves a MARK or more than the result, a value taken from
  below the top MARK, MEMOIZE after a PUT, GLOBAL and STACK_GLOBAL names escaped alike;
* a bounded run of the seeded mutation fuzzer on every test run (a minimum of mutants, then up to
  a time budget: TENSORGC_FUZZ_SECONDS, default 20), and a large one on demand
  (TENSORGC_FUZZ_LARGE=70000: that many mutants for each of three seeds; minutes).

No torch needed."""
import json
import os
import pickle
import struct

import pytest

import _snapfuzz as F
from tensorgc import SnapshotError, load_snapshot

HERE = os.path.dirname(os.path.abspath(__file__))
REFUSED_DIR = os.path.join(HERE, "data", "refused")
with open(os.path.join(REFUSED_DIR, "manifest.json")) as _f:
    MANIFEST = json.load(_f)


def outcomes(path):
    return F.outcome(str(path), True), F.outcome(str(path), False)


def message(result):
    """A refusal's words without the file's path."""
    assert result[0] == "err", result
    return result[1][1].split(": ", 1)[1]


def assert_agree(lean, plain):
    kind = F.verdict(lean, plain)
    assert kind is None, (kind, F.describe(lean)[:400], F.describe(plain)[:400])


# ---------------------------------------------------------------------- the regression files


def test_the_manifest_names_every_file_and_only_those():
    names = {f["file"] for f in MANIFEST["files"]}
    assert names == {n for n in os.listdir(REFUSED_DIR) if n.endswith(".pickle")}
    for f in MANIFEST["files"]:
        assert f["file"].rsplit("-", 1)[0] in MANIFEST["categories"], f["file"]
        assert f["expect"] in ("refused", "loaded", "documented"), f
        assert os.path.getsize(os.path.join(REFUSED_DIR, f["file"])) <= 4096


@pytest.mark.parametrize("entry", MANIFEST["files"], ids=lambda e: e["file"][:-7])
def test_a_file_the_loaders_disagreed_on_is_read_alike(entry):
    lean, plain = outcomes(os.path.join(REFUSED_DIR, entry["file"]))
    if entry["expect"] == "documented":
        # the one difference docs/api.md describes: a layout pickle.dump never writes
        assert plain[0] == "ok" and F.verdict(lean, plain) == F.DOCUMENTED, F.describe(lean)
        assert "lean=False" in message(lean)
        return
    assert_agree(lean, plain)
    if entry["expect"] == "loaded":
        assert lean[0] == plain[0] == "ok"
        return
    assert lean[0] == plain[0] == "err"
    assert lean[1][0] is plain[1][0] is SnapshotError
    if "words" in entry:
        assert entry["words"] in message(lean) and entry["words"] in message(plain)


# ---------------------------------------------------------------------- hand-made files


def frame(n):
    return b"\x95" + struct.pack("<Q", n)


def su(text):
    """SHORT_BINUNICODE."""
    data = text.encode("utf-8", "surrogatepass")
    return b"\x8c" + bytes([len(data)]) + data


def bu(text):
    """BINUNICODE."""
    data = text.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(data)) + data


# {"segments": [], "x": ...}: the opening and the closing (SETITEMS, STOP) around x's value
OPEN2 = b"\x80\x02}(" + bu("segments") + b"]" + bu("x")
SNAP = pickle.dumps({"segments": [], "device_traces": []}, protocol=2)
CHUNK_PLUS = 600_000  # BININT1s of two bytes each: a frame that runs past the loader's 1 MiB chunk

# (id, bytes, what both messages say: the same words, the same message ("same"), or None)
REFUSED = [
    ("frame-ends-in-an-argument", b"\x80\x04" + frame(6) + b"](K\x01M\x02\x00K\x03e.",
     "an opcode crosses the end of its frame at byte 17"),
    ("frame-ends-in-a-text-line", b"\x80\x04" + frame(5) + b"](I12\ne.",
     "an opcode crosses the end of its frame at byte 16"),
    ("frame-ends-in-a-string", b"\x80\x04" + frame(4) + su("hello") + b".",
     "an opcode crosses the end of its frame at byte 15"),
    ("frame-ends-in-a-2MiB-string", b"\x80\x04" + frame(100) + b"X" + struct.pack("<I", 2 << 20)
     + b"a" * (2 << 20) + b".", "an opcode crosses the end of its frame at byte 111"),
    ("frame-past-a-chunk-ends-in-an-argument",
     b"\x80\x04" + frame(2 + 2 * CHUNK_PLUS + 2) + b"](" + b"K\x01" * CHUNK_PLUS + b"M\x02\x00e.",
     f"an opcode crosses the end of its frame at byte {11 + 2 + 2 * CHUNK_PLUS + 2:,}"),
    ("frame-past-a-chunk-ends-in-a-text-line",
     b"\x80\x04" + frame(2 + 2 * CHUNK_PLUS + 3) + b"](" + b"K\x01" * CHUNK_PLUS + b"I12\ne.",
     f"an opcode crosses the end of its frame at byte {11 + 2 + 2 * CHUNK_PLUS + 3:,}"),
    ("frame-in-a-frame", b"\x80\x04" + frame(13) + b"](" + frame(2) + b"K\x01e.",
     "a FRAME begins 11 bytes before the end of the current frame"),
    ("stop-with-a-mark-under-the-result", b"\x80\x02(" + SNAP[2:], "a MARK is still open at STOP"),
    ("stop-with-a-mark-over-the-result", SNAP[:-1] + b"(.", "a MARK is still open at STOP"),
    ("stop-with-two-values", b"\x80\x02N" + SNAP[2:], "the stack holds 2 values at STOP"),
    ("append-onto-a-list-below-the-mark", OPEN2 + b"](K\x01a1u.", "stack underflow"),
    ("setitem-into-a-dict-below-the-mark", OPEN2 + b"}(" + su("k") + b"K\x01s1u.",
     "stack underflow"),
    ("appends-onto-a-list-below-the-next-mark", OPEN2 + b"]((K\x01e1u.", "stack underflow"),
    ("setitems-into-a-dict-below-the-next-mark", OPEN2 + b"}((" + su("k") + b"K\x01u1u.",
     "stack underflow"),
    ("additems-into-a-set-below-the-next-mark", OPEN2 + b"\x8f((K\x01\x901u.", "stack underflow"),
    ("tuple2-across-the-mark", OPEN2 + b"N(N\x861u.", "stack underflow"),
    ("put-right-after-a-mark", OPEN2 + b"](q\x091u.", "stack underflow"),
    ("memoize-right-after-a-mark", OPEN2 + b"](\x941u.", "stack underflow"),
    ("dup-right-after-a-mark", OPEN2 + b"](21u.", "stack underflow"),
    ("global-names-with-control-characters", b"\x80\x02cos\x1b[2J\nsys\rtem\n.", "same"),
    ("stack-global-names-escaped-alike",
     b"\x80\x04" + su("a\nb\\c\u00e9\u2028\ud800") + bu("\U0001f600" + "n" * 300) + b"\x93.",
     "same"),
    ("global-with-an-empty-name", b"\x80\x02c\nsystem\n.", None),
    ("global-name-not-utf8", b"\x80\x02cos\n\xff\n.", None),
    ("inst-without-a-mark", b"\x80\x02im\nx\n.", None),
    ("inst-name-not-ascii", b"\x80\x02(im\n\xc3\xa9\n.", None),
    # CPython's words quote the text (to its newline) when no prefix of it is a number
    ("float-text-with-control-characters", OPEN2 + b"Fx\x1b[2J\x07\nu.",
     r"could not convert string to float: 'x\x1b[2J\x07\x0a'"),
]


@pytest.mark.parametrize("name, data, words", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_malformed_pickle_is_refused_both_ways(tmp_path, name, data, words):
    p = tmp_path / "f.pickle"
    p.write_bytes(data)
    lean, plain = outcomes(p)
    assert_agree(lean, plain)
    assert lean[0] == plain[0] == "err", (F.describe(lean), F.describe(plain))
    assert lean[1][0] is plain[1][0] is SnapshotError
    if words == "same":
        assert message(lean) == message(plain)
    elif words is not None:
        assert words in message(lean) and words in message(plain), (lean, plain)


def test_names_from_the_file_are_escaped_and_cut_alike(tmp_path):
    p = tmp_path / "f.pickle"
    p.write_bytes(dict((r[0], r[1]) for r in REFUSED)["stack-global-names-escaped-alike"])
    lean, plain = outcomes(p)
    words = message(lean)
    assert words == message(plain)
    assert words.startswith(r"refusing to load a\x0ab\\c\xe9\u2028\ud800.\U0001f600nnn")
    assert words.split(": snapshot files")[0].endswith("n...")  # cut at 200 characters a name
    assert all(0x20 <= ord(c) < 0x7F for c in words)


def test_memoize_after_a_put_counts_the_slots_set_as_cpython_does(tmp_path):
    # CPython's MEMOIZE stores at the number of memo slots set: after BINPUT 5 (a third slot)
    # that is index 3, which BINGET 3 reads. The pre-scan used to count from the largest index.
    data = (b"\x80\x04}\x94(" + su("segments") + b"\x94]q\x05" + su("x") + b"\x94h\x03u.")
    assert pickle.loads(data) == {"segments": [], "x": "x"}
    p = tmp_path / "f.pickle"
    p.write_bytes(data)
    lean, plain = outcomes(p)
    assert_agree(lean, plain)
    assert plain[1] == {"segments": [], "x": "x", "device_traces": []}


def test_well_formed_frames_still_load(tmp_path):
    # an empty frame, frames back to back, opcodes between frames (a pickler writes a large
    # string outside any frame), and STOP inside the last frame
    body = SNAP[2:]
    data = (b"\x80\x04" + frame(0) + frame(1) + body[:1] + frame(len(body) - 2) + body[1:-1]
            + body[-1:])
    p = tmp_path / "f.pickle"
    p.write_bytes(data)
    lean, plain = outcomes(p)
    assert_agree(lean, plain)
    assert lean[0] == "ok" and plain[1] == {"segments": [], "device_traces": []}


def test_bool_fields_stay_bools(tmp_path):
    # check_snapshot takes a bool as an int; the streaming loader keeps it a bool, as read
    line = {"filename": "a.py", "name": "f", "line": True}
    snap = {"segments": [], "device_traces": [[
        {"action": "alloc", "addr": True, "size": False, "stream": True, "time_us": True,
         "frames": [line]},
        {"action": "oom", "device_free": True, "size": 1, "frames": [dict(line, line=1)]}]]}
    for protocol in (2, 4):
        p = tmp_path / f"b{protocol}.pickle"
        p.write_bytes(pickle.dumps(snap, protocol=protocol))
        lean, plain = outcomes(p)
        assert_agree(lean, plain)
        e0, e1 = lean[1]["device_traces"][0]
        assert e0["addr"] is True and e0["size"] is False and e0["time_us"] is True
        assert e0["frames"][0]["line"] is True and type(e1["frames"][0]["line"]) is int
        assert e1["device_free"] is True
        cols = lean[1]["device_traces"][0].columns()  # the readers see ints
        assert struct.unpack("<2Q", cols["addr"])[0] == 1


# ---------------------------------------------------------------------- the fuzzer


def _fail_report(bad, tmp_path):
    lines = []
    for i, name, how, data, kind, lean, plain in bad[:20]:
        keep = tmp_path / f"mutant-{i}.pickle"
        keep.write_bytes(data)
        lines.append(f"{keep} ({name}: {how}): {kind}\n  lean:  {F.describe(lean)[:300]}\n"
                     f"  plain: {F.describe(plain)[:300]}")
    return f"{len(bad)} mutants read differently:\n" + "\n".join(lines)


SEED = int(os.environ.get("TENSORGC_FUZZ_SEED", "20240"))
BUDGET = float(os.environ.get("TENSORGC_FUZZ_SECONDS", "20"))


def test_seeded_mutants_are_read_alike_both_ways(tmp_path):
    # at least 1,500 mutants, then on up to 5,000 while the time budget lasts
    r = F.run(SEED, 5000, str(tmp_path), budget=BUDGET, minimum=1500)
    bad = [x for x in r["disagree"] if x[4] not in F.ALLOWED]
    assert not bad, _fail_report(bad, tmp_path)
    assert r["ran"] >= 1500
    assert r["loaded"] > r["ran"] // 20  # the mutants reach both outcomes, loads too


@pytest.mark.skipif(not os.environ.get("TENSORGC_FUZZ_LARGE"),
                    reason="the large run: TENSORGC_FUZZ_LARGE=<mutants per seed>")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_seeded_mutants_are_read_alike_both_ways(tmp_path, seed):
    r = F.run(seed, int(os.environ["TENSORGC_FUZZ_LARGE"]), str(tmp_path))
    bad = [x for x in r["disagree"] if x[4] not in F.ALLOWED]
    assert not bad, _fail_report(bad, tmp_path)


def test_the_seeds_load_alike_and_the_mutants_are_reproducible(tmp_path):
    for name, data in F.seeds():
        p = tmp_path / "seed.pickle"
        p.write_bytes(data)
        lean, plain = outcomes(p)
        assert_agree(lean, plain)
        assert lean[0] == "ok", name
    first = [m[3] for m in F.mutants(7, 30)]
    assert first == [m[3] for m in F.mutants(7, 30)]
    assert [m[3] for m in F.mutants(7, 10, first=20)] == first[20:]
