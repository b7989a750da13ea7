"""bench/b6_pages.py --quick --no-torch runs to the end and writes a page per shape asked for (its
RSS loop of rendered reports cut to 100 after 20 of warm-up: the same loop, a tenth of the pages).

No timing here: performance is measured by the benchmark, never asserted by a test.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "b6_pages.py")

sys.path.insert(0, os.path.join(ROOT, "bench"))
import b6_pages  # noqa: E402  (only for its list of shapes)


def test_quick_run_without_torch_writes_its_pages_table_and_json(tmp_path):
    """The script end to end on two of its shapes, each in a fresh process as it runs them (about
    2.5 s apiece for torch's import here). Every shape's garbage is drawn in-process by
    tests/test_cycles_adversarial.py."""
    pytest.importorskip("torch")  # the garbage holds tensors; "without torch": without its detector
    shapes = ["fan", "hostile-strings"]
    assert set(shapes) <= set(b6_pages.SHAPES)
    out = tmp_path / "b6.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--no-torch", "--shapes", ",".join(shapes), "--rss-reports", "100",
                           "--rss-warmup", "20", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = {row["shape"]: row for row in data["shapes"]}
    assert set(rows) == set(shapes)
    for name, row in rows.items():
        assert row["tensorgc"]["page_bytes"] and row["tensorgc"]["page_bytes"] > 0, (name, row["tensorgc"])
        assert "torch" not in row
    assert data["rss"]["tensorgc"]["reports"] > 0
    assert "torch" not in data["rss"]
    assert "| shape | tensorgc page ms (median) |" in proc.stdout
