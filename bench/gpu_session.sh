#!/usr/bin/env bash
# One session on the GPU machine: build from source, then the steps named on the command line
# (tests, demos, bench, quickbench), logs under $OUT. Usage (after `source .gpu/enter.sh`):
#   bash bench/gpu_session.sh tests demos bench
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
    quickbench)
      python3 bench/run_all.py --quick --json-dir "$OUT" 2>"$OUT/bench.err" | tee "$OUT/bench.md" ;;
  esac
done
