#!/usr/bin/env bash
# Set tensorgc up on a CUDA machine, then run the steps named on the command line; logs and
# tables go under $OUT (default /tmp/tensorgc-gpu). Set up from the wheel users install when
# $GPU_WHEELS (default .gpu/wheels) holds one for this python3 (`make wheel` on the build machine,
# then copy dist/*.whl there): its compiled parts (the extension, the render worker and the
# Graphviz it bundles in tensorgc.libs/) are laid out in the checkout as pip lays them out in
# site-packages, beside the checkout's Python files (the same sources), and only the test-only
# module is compiled (no Graphviz needed). Without such a wheel it builds from source, which
# needs Graphviz's C library (libgraphviz-dev, pkg-config). Needs: python3 with torch (a CUDA
# build), a C compiler. Run from the repository root:
#   bash bench/gpu_steps.sh tests demos bench
# Steps: tests, demos, bench, quickbench, reporter, b1, inproc, pages, b1torch, b2, young, units,
# profile, index, lineprof, ab, phases, shapes, fresh, ranks (see the case below, or CONTRIBUTING.md).
#
# Optional settings (environment):
#   OUT=DIR          where logs go (default /tmp/tensorgc-gpu)
#   GPU_WHEELS=DIR   tensorgc's wheels (default .gpu/wheels); the one for this python3 is used
#   WHEELS=DIR       a folder of wheels to install offline first, with --no-deps --no-index, into
#                    a private target on PYTHONPATH (for a machine without a package index:
#                    nvidia-nvml-dev for nvml.h, pytorch_memlab and calmsize for B3/B5)
#   MEMLAB_WHEELS=DIR  the same for the lineprof step only (pandas and numpy: memlab's line
#                    profiler imports pandas)
#   BENCH_CPU=N      the core to pin timing steps to with taskset (default 3 when the machine has
#                    more than 4 cores; "none" to not pin)
#   BASE_TAR=FILE    for the ab step: an older tree to compare against, made with
#                    `git archive REV -- setup.py setup.cfg pyproject.toml cycles include reporter allocator tensorgc`
set -uo pipefail
OUT=${OUT:-/tmp/tensorgc-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -z "${BENCH_CPU:-}" ]; then
  if [ "$(nproc)" -gt 4 ]; then BENCH_CPU=3; else BENCH_CPU=none; fi
fi
if [ "$BENCH_CPU" = none ]; then PIN=(); else PIN=(taskset -c "$BENCH_CPU"); fi
{
  python3 -V
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} 2>&1 | tee "$OUT/env.log"
if [ -n "${WHEELS:-}" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --no-index --target /tmp/tgc-extra "$WHEELS"/*.whl > "$OUT/wheels.log" 2>&1
  export PYTHONPATH=/tmp/tgc-extra${PYTHONPATH:+:$PYTHONPATH}
fi
tag=$(python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
version=$(python3 -c 'exec(open("tensorgc/_version.py").read()); print(__version__)')
wheel=$(ls "${GPU_WHEELS:-.gpu/wheels}"/tensorgc-"$version"-"$tag"-"$tag"-manylinux*.whl 2>/dev/null | head -1)
if [ -n "$wheel" ]; then
  site=$(mktemp -d /tmp/tgc-wheel.XXXXXX)
  {
    python3 -m pip install -q --no-deps --no-index --target "$site" "$wheel" &&
    rm -rf tensorgc/_tensorgc.*.so tensorgc/_tensorgc_testing.*.so tensorgc/_tgc_render tensorgc.libs &&
    cp "$site"/tensorgc/_tensorgc.*.so "$site"/tensorgc/_tgc_render tensorgc/ &&
    cp -r "$site"/tensorgc.libs . &&
    TENSORGC_WERROR=1 python3 setup.py -q build_ext --testing-only --inplace
  } > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
  rm -rf "$site"
  echo "installed $(basename "$wheel") (Graphviz: $(ls tensorgc.libs | tr '\n' ' '))" | tee -a "$OUT/env.log"
else
  pkg-config --modversion libgvc 2>&1 | tee -a "$OUT/env.log"
  TENSORGC_WERROR=1 python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
  echo "built from source" | tee -a "$OUT/env.log"
fi
echo "build ok"
EXT=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
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
      # pinned to one core: separate processes landing on other cores add noise
      "${PIN[@]}" python3 bench/b1_overhead.py --heaps 1000000 --modes plain,floor,tensorgc,tensorgc-noisland \
        --repeat 9 --loops 5 --json "$OUT/b1.json" 2>"$OUT/b1.err" | tee "$OUT/b1.md"
      python3 bench/micro_collect.py --batches 15 2>&1 | tee "$OUT/micro.md" ;;
    inproc)
      # B1's loop in one process, modes alternated loop by loop: the paired reading, which holds
      # on machines whose speed varies from process to process
      "${PIN[@]}" python3 bench/b1_inprocess.py --rounds 30 --modes plain,floor,tensorgc \
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
      python3 -c "import tensorgc._tensorgc_testing; print(tensorgc._tensorgc_testing._young_scan())" 2>&1 | tee "$OUT/young.log"
      python3 -c "import tensorgc._tensorgc_testing; print(tensorgc._tensorgc_testing._young_island())" 2>&1 | tee -a "$OUT/young.log"
      TENSORGC_TEST_DEVICE=cuda python3 -m pytest tests/test_cycles_young.py tests/test_cycles_split.py \
        tests/test_cycles_island.py \
        -q -p no:cacheprovider -rs 2>&1 | tee -a "$OUT/young.log" | tail -5
      python3 bench/micro_collect.py --batches 9 2>&1 | tee "$OUT/micro.md" ;;
    torchcompat)
      # PyTorch's own test_cycles and test_memory_snapshot against tensorgc, and B11: what the
      # allocator history that observe_tensor_cycles starts costs per allocation
      TENSORGC_TEST_DEVICE=cuda python3 -m pytest tests/test_cuda.py tests/test_history.py tests/test_observer_errors.py \
        tests/test_object_graph.py tests/test_flamegraph.py -q -p no:cacheprovider -rs 2>&1 \
        | tee "$OUT/tests-torchcompat.log" | tail -8
      "${PIN[@]}" python3 bench/b11_history.py --json "$OUT/b11.json" 2>"$OUT/b11.err" | tee "$OUT/b11.md" ;;
    index)
      python3 bench/micro_index.py --batches 15 2>&1 | tee "$OUT/micro-index.md" ;;
    profile)
      python3 bench/profile_reporter.py --repeat 7 2>&1 | tee "$OUT/profile.md" ;;
    units)
      make -s build/test_device PYTHON=python3 2>&1 | tail -5; ./build/test_device 2>&1 | tee "$OUT/device.log" ;;
    lineprof)
      # memlab's line profiler imports pandas: wheels in $MEMLAB_WHEELS (and numpy's, when the
      # machine lacks it) go on the path of this step only
      if [ -n "${MEMLAB_WHEELS:-}" ] && ls "$MEMLAB_WHEELS"/*.whl >/dev/null 2>&1; then
        mkdir -p /tmp/tgc-memlab
        for w in "$MEMLAB_WHEELS"/*.whl; do
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
      base=/tmp/tgc-base/tensorgc/_tensorgc$EXT; new=tensorgc/_tensorgc$EXT
      {
        "${PIN[@]}" python3 bench/ab_variants.py --batches 30 base="$base" new="$new"
        "${PIN[@]}" python3 bench/ab_variants.py --batches 30 --tensor base="$base" new="$new"
        "${PIN[@]}" python3 bench/b1_inprocess.py --rounds 20 --modes plain,floor \
          --variant base="$base" --variant new="$new" 2>/dev/null
      } 2>&1 | tee "$OUT/ab.md" ;;
    phases)
      # B1 in one process with a copy built with phase timers: where the overhead goes
      TENSORGC_WERROR=1 TENSORGC_CFLAGS="-DTGC_PHASE_TIMES" python3 setup.py -q build_ext --force \
        --build-temp /tmp/tgc-phases-temp --build-lib /tmp/tgc-phases-lib > "$OUT/build-phases.log" 2>&1 \
        || { echo "phases: no timed build"; continue; }
      "${PIN[@]}" python3 bench/b1_inprocess.py --rounds 20 --modes plain,floor \
        --variant timed=/tmp/tgc-phases-lib/tensorgc/_tensorgc$EXT 2>/dev/null | tee "$OUT/phases.md" ;;
    shapes)
      # B1 per shape of garbage (docs/benchmarks.md, "B1 by shape of garbage"): the pre-scan's
      # fast paths against tp_traverse on this interpreter, the pre-scan alone, then B1 in one
      # process (paired) and in fresh processes (first loop), every shape, and the tables
      python3 -m pytest tests/test_cycles_young_shapes.py -q -p no:cacheprovider 2>&1 \
        | tee "$OUT/tests-shapes.log" | tail -3
      "${PIN[@]}" python3 bench/micro_prescan.py 2>&1 | tee "$OUT/micro-prescan.md"
      for s in slots dict list dictobj closure method mixed; do
        "${PIN[@]}" python3 bench/b1_inprocess.py --rounds 30 --modes plain,floor,tensorgc --shape "$s" \
          --json "$OUT/shapes-inproc-$s.json" 2>/dev/null > "$OUT/shapes-inproc-$s.md"
      done
      for s in slots dict list dictobj closure method mixed; do
        "${PIN[@]}" python3 bench/b1_overhead.py --heaps 1000000 --modes plain,floor,tensorgc --shape "$s" \
          --repeat 9 --loops 1 --json "$OUT/shapes-fresh-$s.json" 2>/dev/null > "$OUT/shapes-fresh-$s.md"
      done
      python3 bench/b1_shapes_table.py "$OUT"/shapes-*.json | tee "$OUT/shapes.md" ;;
    fresh)
      # B1 per shape in fresh processes, first loop, CPU time: the six shapes at once, each on a
      # core of its own (cpu1-cpu6; FRESH_SET names the set, FRESH_REPEAT its runs a mode); pool
      # the sets of several calls with `bench/b1_pool.py --per-set` (the host's speed moves
      # between calls)
      if [ "$(nproc)" -lt 7 ]; then echo "fresh: needs 7 cores (cpu1-cpu6 free), this machine has $(nproc)"; continue; fi
      core=1
      for s in slots dict list dictobj closure method; do
        taskset -c "$core" python3 bench/b1_overhead.py --heaps 1000000 --modes plain,floor,tensorgc \
          --shape "$s" --repeat "${FRESH_REPEAT:-16}" --loops 1 --clock cpu \
          --json "$OUT/fresh-${FRESH_SET:-set1}-$s.json" 2>/dev/null > "$OUT/fresh-${FRESH_SET:-set1}-$s.md" &
        core=$((core + 1))
      done
      wait
      for s in slots dict list dictobj closure method; do
        grep "| 1,000,000" "$OUT/fresh-${FRESH_SET:-set1}-$s.md" | awk -F'|' -v s="$s" '{print s, $3, $4, $5}'
      done | tee "$OUT/fresh-${FRESH_SET:-set1}.txt" ;;
    ranks)
      # two GPUs, one a rank, NCCL: B8 (gather_report per call), the demo under torchrun, the
      # page of its per-rank snapshots, and the distributed tests (gloo, CPU)
      python3 bench/b8_gather.py --backend nccl --device cuda --repeat 7 --json "$OUT/b8-nccl.json" \
        2>"$OUT/b8.err" | tee "$OUT/b8-nccl.md"
      rm -rf "$OUT/ranks" && timeout 300 python3 -m torch.distributed.run --nproc-per-node 2 \
        demos/ranks.py --out "$OUT/ranks" 2>&1 | tee "$OUT/ranks-demo.log"
      python3 -m tensorgc timeline "$OUT/ranks" -o "$OUT/ranks.html"
      python3 -m pytest tests/test_ranks.py tests/test_gather.py tests/test_ranks_cli.py \
        tests/test_cycle_dedup.py -q -p no:cacheprovider 2>&1 | tee "$OUT/tests-ranks.log" | tail -3 ;;
    quickbench)
      python3 bench/run_all.py --quick --json-dir "$OUT" 2>"$OUT/bench.err" | tee "$OUT/bench.md" ;;
  esac
done
