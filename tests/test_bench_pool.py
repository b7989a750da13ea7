"""bench/b1_pool.py: the arithmetic behind B1's pooled verdict (no timing here)."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import b1_pool  # noqa: E402


def _write_set(path, plain, tensorgc, heap=1_000_000, timed_out_tensorgc=()):
    runs_t = [{"seconds": s, "timed_out": False} for s in tensorgc]
    runs_t += [{"seconds": s, "timed_out": True} for s in timed_out_tensorgc]
    data = {"results": [
        {"heap": heap, "mode": "plain", "runs": [{"seconds": s, "timed_out": False} for s in plain]},
        {"heap": heap, "mode": "tensorgc", "runs": runs_t},
        {"heap": 100_000, "mode": "plain", "runs": [{"seconds": 9.0, "timed_out": False}]},
        {"heap": 100_000, "mode": "tensorgc", "runs": [{"seconds": 99.0, "timed_out": False}]},
    ]}
    path.write_text(json.dumps(data))
    return str(path)


def test_pooled_ratio_is_the_median_over_all_runs_of_all_sets(tmp_path, capsys):
    a = _write_set(tmp_path / "a.json", [1.0, 1.0, 1.0], [1.02, 1.02, 1.02])
    b = _write_set(tmp_path / "b.json", [1.0, 1.0, 1.0], [1.06, 1.06, 1.08])
    assert b1_pool.main([a, b, "--draws", "200"]) == 0
    out = capsys.readouterr().out
    # pooled tensorgc median of [1.02 x3, 1.06, 1.06, 1.08] is 1.04; plain 1.0
    assert "| pooled | 6 | 1.00000 s | 1.04000 s | **1.0400x** |" in out
    assert "1 of 2 sets at or under 1.05x" in out
    lo, hi = map(float, re.search(r"95% interval ([\d.]+)-([\d.]+)x", out).groups())
    assert 1.02 <= lo <= 1.04 <= hi <= 1.08


def test_identical_sets_give_a_point_interval(tmp_path, capsys):
    paths = [_write_set(tmp_path / f"s{i}.json", [0.1] * 5, [0.104] * 5) for i in range(3)]
    assert b1_pool.main(paths + ["--draws", "100"]) == 0
    out = capsys.readouterr().out
    assert "95% interval 1.0400-1.0400x, over 1.05x in 0.0% of draws; 3 of 3 sets" in out


def test_per_set_pools_ratios_of_sets_taken_at_different_host_speeds(tmp_path, capsys):
    # a host twice as slow for the second set: pooled as times, the mix of speeds decides the
    # median (tensorgc's 0.102 s against plain's 0.2 s); pooled per set, each set's 2% remains
    a = _write_set(tmp_path / "a.json", [0.1, 0.1, 0.1], [0.102, 0.102, 0.102])
    b = _write_set(tmp_path / "b.json", [0.2, 0.2, 0.2, 0.2], [0.204, 0.204])
    assert b1_pool.main([a, b, "--draws", "200"]) == 0
    assert "**0.5100x**" in capsys.readouterr().out
    assert b1_pool.main([a, b, "--draws", "200", "--per-set"]) == 0
    out = capsys.readouterr().out
    assert "| pooled (per set) | 7 | 1.00000x | 1.02000x | **1.0200x** |" in out
    assert "95% interval 1.0200-1.0200x" in out


def test_other_heaps_and_timed_out_runs_are_left_out(tmp_path, capsys):
    a = _write_set(tmp_path / "a.json", [1.0], [1.03], timed_out_tensorgc=[50.0, 60.0])
    assert b1_pool.main([a, "--draws", "10"]) == 0
    assert "**1.0300x**" in capsys.readouterr().out


def test_a_set_without_the_compared_mode_is_refused(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"results": [{"heap": 1_000_000, "mode": "plain",
                                          "runs": [{"seconds": 1.0}]}]}))
    assert b1_pool.main([str(p)]) == 2
    assert "no plain or tensorgc runs" in capsys.readouterr().err


def test_the_committed_b1_sets_are_readable():
    """docs/benchmarks.md's B1 figure on the 2-core VM pools these sets (and compares the baseline's)."""
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "docs", "results", "b1-cpu")
    names = sorted(os.listdir(root))
    sets = [n for n in names if n.startswith("set")]
    assert len(sets) == 4
    assert len([n for n in names if n.startswith("baseline")]) == 2
    for name in names:
        runs = b1_pool.load(os.path.join(root, name), 1_000_000)
        assert len(runs["plain"]) == len(runs["tensorgc"]) == 9
