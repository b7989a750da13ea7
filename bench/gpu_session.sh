#!/usr/bin/env bash
# One session on the GPU machine: build from source, then the steps named on the command line
# (tests, demos, bench, quickbench, reporter, b1, inproc, pages, b1torch, b2, young, units, profile, index, lineprof, ab,
# phases), logs under $OUT. Usage (after `source .gpu/enter.sh`):
#   bash bench/gpu_session.sh tests demos bench
# ab: A/B of this tree's build against an older one, built from the sources in the tar file
# $BASE_TAR (`git archive REV -- setup.py setup.cfg pyproject.toml cycles include reporter allocator tensorgc`).
set -uo pipefail
OUT=${OUT:-/tmp/tensorgc-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  python3 -V
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  pkg-config --modversion libgvc
} 2>&1 | tee "$OUT/env.log"
# Wheels staged in .gpu/wheels (the GPU machine has no registry): nvml.h, pytorch_memlab, calmsize.
if ls .gpu/wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --no-index --target /tmp/tgc-extra .gpu/wheels/*.whl > "$OUT/wheels.log" 2>&1
  export PYTHONPATH=/tmp/tgc-extra${PYTHONPATH:+:$PYTHONPATH}
fi
TENSORGC_WERROR=1 python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
echo "build ok"
for step in "$@"; do
  case "$step" in
    tests)
      TENSORGC_TEST_DEVICE=cuda python3 -m pytest tests -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/tests-cuda.log" | tail -15
      python3 -m pytest tests -q -p no:cacheprovider 2>&1 | tee "$OUT/tests-cpu.log" | tail -3 ;;
    demos)
      for d in demos/run_all.py demos/simple_leak.py demos/awaitable_leak.py demos/training_no_zero_grad.py; do
        echo "== $d"; timeout 240 python3 "$d" 2>&1 | tail -40
      done 2>&1 | tee "$OUT/demos.log" | tail -60 ;;
    bench)
      python3 bench/run_all.py --repeat 5 --timeout 60 --json-dir "$OUT" 2>"$OUT/bench.err" | tee "$OUT/bench.md" ;;
    reporter)
      python3 bench/b3_reporter.py --repeat 7 --print-report --json "$OUT/b3.json" 2>"$OUT/b3.err" | tee "$OUT/b3.md" ;;
    b1)
      # pinned to one core: the GPU host's speed is bimodal when the process migrates
      taskset -c 3 python3 bench/b1_overhead.py --heaps 1000000 --modes plain,floor,tensorgc,tensorgc-noisland \
        --repeat 9 --loops 5 --json "$OUT/b1.json" 2>"$OUT/b1.err" | tee "$OUT/b1.md"
      python3 bench/micro_collect.py --batches 15 2>&1 | tee "$OUT/micro.md" ;;
    inproc)
      # B1's loop in one process, modes alternated loop by loop: the paired reading that holds on
      # this host, whose separate-process runs are bimodal
      taskset -c 3 python3 bench/b1_inprocess.py --rounds 30 --modes plain,floor,tensorgc \
        --json "$OUT/b1-inproc.json" 2>"$OUT/b1-inproc.err" | tee "$OUT/b1-inproc.md" ;;
    pages)
      # B6: worst-case pages of adversarial garbage and memory over 10,000 reports
      python3 bench/b6_pages.py --json "$OUT/b6.json" 2>"$OUT/b6.err" | tee "$OUT/b6.md" ;;
    b2)
      python3 bench/b2_report_cost.py --repeat 7 --json "$OUT/b2.json" 2>"$OUT/b2.err" | tee "$OUT/b2.md" ;;
    b1torch)
      # the 100k heap against torch's detector (capped: it takes minutes there)
      python3 bench/b1_overhead.py --heaps 100000 --modes plain,tensorgc,torch --repeat 5 --timeout 60 \
        --json "$OUT/b1-100k.json" 2>"$OUT/b1-100k.err" | tee "$OUT/b1-100k.md" ;;
    young)
      # the pre-scan's layout check on this interpreter, its tests, and the micro-benchmark
      python3 -c "import tensorgc; print(tensorgc._tensorgc._young_scan())" 2>&1 | tee "$OUT/young.log"
      python3 -c "import tensorgc; print(tensorgc._tensorgc._young_island())" 2>&1 | tee -a "$OUT/young.log"
      TENSORGC_TEST_DEVICE=cuda python3 -m pytest tests/test_cycles_young.py tests/test_cycles_split.py \
        tests/test_cycles_island.py \
        -q -p no:cacheprovider -rs 2>&1 | tee -a "$OUT/young.log" | tail -5
      python3 bench/micro_collect.py --batches 9 2>&1 | tee "$OUT/micro.md" ;;
    index)
      python3 bench/micro_index.py --batches 15 2>&1 | tee "$OUT/micro-index.md" ;;
    profile)
      python3 bench/profile_reporter.py --repeat 7 2>&1 | tee "$OUT/profile.md" ;;
    units)
      make -s build/test_device PYTHON=python3 2>&1 | tail -5; ./build/test_device 2>&1 | tee "$OUT/device.log" ;;
    lineprof)
      # memlab's line profiler imports pandas: its wheels (and numpy's, when the host lacks it)
      # are staged in .gpu/wheels-memlab and go on the path of this step only
      if ls .gpu/wheels-memlab/*.whl >/dev/null 2>&1; then
        mkdir -p /tmp/tgc-memlab
        for w in .gpu/wheels-memlab/*.whl; do
          case "$w" in *numpy-*) python3 -c "import numpy" 2>/dev/null && continue ;; esac
          python3 -m pip install -q --no-deps --no-index --target /tmp/tgc-memlab "$w" >> "$OUT/wheels.log" 2>&1
        done
      fi
      TENSORGC_TEST_DEVICE=cuda python3 -m pytest $(ls tests/test_lineprof*.py tests/test_magics.py \
        tests/test_courtesy*.py 2>/dev/null) -q -p no:cacheprovider -rs 2>&1 \
        | tee "$OUT/tests-lineprof.log" | tail -8
      PYTHONPATH=$PYTHONPATH:/tmp/tgc-memlab python3 bench/b5_lineprof.py --repeat 7 --json "$OUT/b5.json" \
        2>"$OUT/b5.err" | tee "$OUT/b5.md" ;;
    ab)
      rm -rf /tmp/tgc-base && mkdir -p /tmp/tgc-base && tar -xf "$BASE_TAR" -C /tmp/tgc-base \
        && (cd /tmp/tgc-base && python3 setup.py -q build_ext --inplace > "$OUT/build-base.log" 2>&1) \
        || { echo "ab: no base build"; continue; }
      base=$(ls /tmp/tgc-base/tensorgc/_tensorgc*.so); new=$(ls tensorgc/_tensorgc*.so)
      {
        taskset -c 3 python3 bench/ab_variants.py --batches 30 base="$base" new="$new"
        taskset -c 3 python3 bench/ab_variants.py --batches 30 --tensor base="$base" new="$new"
        taskset -c 3 python3 bench/b1_inprocess.py --rounds 20 --modes plain,floor \
          --variant base="$base" --variant new="$new" 2>/dev/null
      } 2>&1 | tee "$OUT/ab.md" ;;
    phases)
      # B1 in one process with a copy built with phase timers: where the overhead goes
      TENSORGC_WERROR=1 TENSORGC_CFLAGS="-DTGC_PHASE_TIMES" python3 setup.py -q build_ext --force \
        --build-temp /tmp/tgc-phases-temp --build-lib /tmp/tgc-phases-lib > "$OUT/build-phases.log" 2>&1 \
        || { echo "phases: no timed build"; continue; }
      taskset -c 3 python3 bench/b1_inprocess.py --rounds 20 --modes plain,floor \
        --variant timed="$(ls /tmp/tgc-phases-lib/tensorgc/_tensorgc*.so)" 2>/dev/null | tee "$OUT/phases.md" ;;
    quickbench)
      python3 bench/run_all.py --quick --json-dir "$OUT" 2>"$OUT/bench.err" | tee "$OUT/bench.md" ;;
  esac
done
