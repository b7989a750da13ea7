"""The notebook forms rendered in a real Jupyter kernel (nbclient, ipykernel): a MemReporter
report, a growth, a CycleReport and a snapshot's timeline each display as text/html."""
import os
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNAP = os.path.join(ROOT, "tests", "data", "transformer-adamw-small-all.pickle")

CELLS = [
    f"import sys; sys.path.insert(0, {ROOT!r})\n"
    "import gc, torch, tensorgc\n"
    "from tensorgc.integrations.notebooks import inline_timeline\n"
    "model = torch.nn.Linear(8, 8)\n"
    "before = tensorgc.checkpoint()",
    "tensorgc.MemReporter(model).collect(device='cpu')",
    "kept = {'<b>bold</b>': torch.zeros(64)}\ntensorgc.growth(before)",
    "got = []\nh = tensorgc.observe_cycles(got.append, device='any')\n"
    "class Node: pass\nn = Node(); n.self = n; n.t = torch.zeros(4); del n\n"
    "gc.collect(); h.remove()\ngot[0]",
    f"inline_timeline({SNAP!r}, device=0)",
]


def test_objects_render_as_html_in_a_kernel(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    html = [next((o["data"]["text/html"] for o in c.outputs if "data" in o
                  and "text/html" in o["data"]), None) for c in nb.cells[1:]]
    report, growth, cycle, timeline = html
    assert "Storage on cpu" in report and "parameter" in report
    assert "By owner" in growth and "&lt;b&gt;bold&lt;/b&gt;" in growth and "<b>bold" not in growth
    assert cycle.startswith('<iframe sandbox="allow-scripts"') and "Node" in cycle
    assert timeline.startswith('<iframe sandbox="allow-scripts"')
