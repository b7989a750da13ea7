"""Real training runs with a planted leak (tests/_integration_runs.py), each watched through one
integration alone, read back from the logger's own files: Lightning's CSV and TensorBoard files,
the Trainer's TensorBoard files and trainer_state, Accelerate's TensorBoard tracker; DDP and
Accelerate with two CPU processes over gloo (slow: tests/conftest.py lists them). Each run is a
subprocess, as a user's script is, made once for the module."""
import csv
import glob
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "_integration_runs.py")

pytest.importorskip("torch")
pytest.importorskip("tensorboard")


def _run(cmd, out, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TENSORGC_OUTPUT_DIR"):
        env.pop(k, None)
    r = subprocess.run(cmd + [out], capture_output=True, text=True, timeout=timeout, env=env,
                       cwd=out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r.stdout + r.stderr


def _events(pattern):
    """{tag: [(step, value)]} of the scalars and {tag: [text]} of the texts in the event files."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    scalars, texts = {}, {}
    for f in glob.glob(pattern, recursive=True):
        acc = ea.EventAccumulator(f, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
        for tag in acc.Tags()["tensors"]:
            texts.setdefault(tag, []).extend(e.tensor_proto.string_val[0].decode()
                                             for e in acc.Tensors(tag))
    return scalars, texts


def _pages_printed_once(output):
    printed = re.findall(r"tensorgc: cycle page (\S+)", output)
    assert printed, output[-3000:]
    assert len(printed) == len(set(printed))
    for p in printed:
        assert os.path.exists(p) and "Node" in open(p, encoding="utf-8").read()
    return printed


def _leak_grows(values):
    """The planted leak, 16 KiB a step, in the 'other' category between two reports."""
    steps = sorted(values)
    assert len(steps) >= 2, values
    assert values[steps[-1]] - values[steps[0]] >= 16384 * (steps[-1] - steps[0]) * 0.9


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory):
    pytest.importorskip("lightning")
    out = str(tmp_path_factory.mktemp("lightning"))
    return out, _run([sys.executable, SCRIPT, "lightning"], out)


def test_lightning_csv_and_tensorboard_hold_the_scalars_and_the_leak(lightning_run):
    out, output = lightning_run
    (metrics,) = glob.glob(os.path.join(out, "csv", "version_*", "metrics.csv"))
    rows = list(csv.DictReader(open(metrics)))
    other = {int(r["step"]): float(r["tensorgc/memory/other"]) for r in rows
             if r.get("tensorgc/memory/other")}
    assert set(other) == {1, 2, 4}
    _leak_grows(other)
    cycles = [float(r["tensorgc/cycles_found"]) for r in rows if r.get("tensorgc/cycles_found")]
    assert max(cycles) == 4  # one cycle a step
    # the Linear(32, 32)'s weight and bias; on CUDA each a block of the allocator's (512 B steps)
    cuda = os.environ.get("TENSORGC_TEST_DEVICE", "").startswith("cuda")
    params = 32 * 32 * 4 + (512 if cuda else 32 * 4)
    assert all(float(r["tensorgc/memory/parameter"]) == params for r in rows
               if r.get("tensorgc/memory/parameter"))
    scalars, texts = _events(os.path.join(out, "tb", "**", "events.out.tfevents.*"))
    assert {"tensorgc/allocated", "tensorgc/memory/grad", "tensorgc/cycles_bytes"} <= set(scalars)
    (memory,) = [v for k, v in texts.items() if k.startswith("tensorgc/memory")]
    assert "__main__.LEAK" in memory[-1]
    pages = _pages_printed_once(output)
    assert all(os.path.dirname(p).endswith(os.path.join("version_0", "tensorgc")) for p in pages)


def test_trainer_logs_reach_tensorboard_and_the_state(tmp_path_factory):
    pytest.importorskip("transformers")
    out = str(tmp_path_factory.mktemp("trainer"))
    output = _run([sys.executable, SCRIPT, "trainer"], out)
    scalars, texts = _events(os.path.join(out, "runs", "**", "events.out.tfevents.*"))
    # the Trainer's TensorBoard callback names its training logs train/...
    other = dict(scalars["train/tensorgc/memory/other"])
    assert set(other) == {1, 2, 4}
    _leak_grows(other)
    assert max(v for _, v in scalars["train/tensorgc/cycles_found"]) == 4
    assert "train/tensorgc/allocated" in scalars
    (memory,) = [v for k, v in texts.items() if k.startswith("tensorgc/memory")]
    assert "__main__.LEAK" in memory[-1]
    _pages_printed_once(output)


def test_accelerate_in_one_process_logs_the_scalars_and_the_leak(tmp_path):
    pytest.importorskip("accelerate")
    output = _run([sys.executable, SCRIPT, "accelerate"], str(tmp_path))
    scalars, _ = _events(os.path.join(str(tmp_path), "run", "events.out.tfevents.*"))
    _leak_grows(dict(scalars["tensorgc/memory/other"]))
    assert max(v for _, v in scalars["tensorgc/cycles_found"]) == 4
    _pages_printed_once(output)


@pytest.mark.parametrize("kind", ["lightning-ddp", "accelerate"])
def test_two_cpu_processes_each_write_their_pages_and_rank_0_logs_the_table(tmp_path, kind):
    if kind == "accelerate":
        pytest.importorskip("accelerate")
        # Accelerator(cpu=True) in the script: two processes over gloo
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
               "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--main_process_port", "0", SCRIPT, kind]
        events = os.path.join(str(tmp_path), "run", "events.out.tfevents.*")
    else:
        pytest.importorskip("lightning")
        cmd = [sys.executable, SCRIPT, kind]
        events = os.path.join(str(tmp_path), "tb", "**", "events.out.tfevents.*")
    output = _run(cmd, str(tmp_path))
    pages = _pages_printed_once(output)
    assert {re.search(r"tensorgc-cycle-(rank\d)-", p).group(1) for p in pages} == {"rank0", "rank1"}
    scalars, texts = _events(events)
    assert {"tensorgc/rank0/allocated", "tensorgc/rank1/allocated"} <= set(scalars)
    _leak_grows(dict(scalars["tensorgc/memory/other"]))
    (ranks,) = [v for k, v in texts.items() if k.startswith("tensorgc/ranks")]
    assert "Memory by rank: 2 ranks (gloo)" in ranks[-1]


def test_pytorch_lightning_package(tmp_path):
    pytest.importorskip("pytorch_lightning")
    output = _run([sys.executable, SCRIPT, "pytorch-lightning"], str(tmp_path))
    _pages_printed_once(output)
    (metrics,) = glob.glob(os.path.join(str(tmp_path), "csv", "version_*", "metrics.csv"))
    assert "tensorgc/memory/other" in open(metrics).readline()
