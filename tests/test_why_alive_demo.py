"""demos/why_alive.py end to end on the CPU: the owner chain, growth() and the pytest plugin
on a training loop that keeps its losses' graphs."""
import os
import subprocess
import sys

import pytest


def test_the_why_alive_demo_names_the_leak():
    """demos/why_alive.py: the growth lines, the Held-by section and the plugin's failure all
    name loss_history."""
    pytest.importorskip("torch")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    demo = os.path.join(root, "demos", "why_alive.py")
    env = dict(os.environ, PYTHONPATH=root)
    r = subprocess.run([sys.executable, demo, "--device", "cpu", "--width", "128", "--steps", "6"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "storages born in the last" in r.stdout
    assert "__main__.loss_history +" in r.stdout
    assert "Held by (tensors that are not parameters" in r.stdout
    assert "module __main__ .loss_history [" in r.stdout and " saved " in r.stdout
    r = subprocess.run([sys.executable, demo, "--device", "cpu", "--pytest"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tensorgc: the test left" in r.stdout and "why_alive.loss_history" in r.stdout
