#!/usr/bin/env bash
# One command for a GPU owner: everything that this repository cannot check without a GPU.
#
#   scripts/gpu_check.sh
#
# On a machine with an NVIDIA GPU (sm_80 or newer, nvidia-smi and the CUDA toolkit installed):
#   1. builds for that GPU only (build-gpu/, CMAKE_CUDA_ARCHITECTURES from nvidia-smi);
#   2. runs the test suite, GPU tests included (the gpu.* tests run instead of being skipped);
#   3. runs compute-sanitizer memcheck, racecheck, synccheck and initcheck on every kernel step at
#      three small shapes (odd lengths, causal with GQA, per-batch key lengths with dropout);
#   4. autotunes step4's tile configuration (scripts/autotune.py): every configuration checked,
#      then timed over fp16/bf16, D 64/128, causal or not, S 512..8192; the fastest per case
#      written to step4_tensorcore/tuned_configs.csv, the sweep to docs/results/autotune_sm_XY.csv
#      and .png (commit all three);
#   5. runs the bench on the seeds and fa grids (scripts/bench.py) and draws the chart, writing
#      docs/results/<gpu>.csv and docs/results/<gpu>.png (commit them: docs/benchmarking.md).
# Every stage runs even if an earlier one failed; the exit status is 1 if any failed.
# Without a GPU it says so in one line and exits 2.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi finds none); run it on a machine with one" >&2
  exit 2
fi

name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
[[ "$cc" == 90 ]] && cc=90a # Hopper: the architecture-specific features (wgmma, TMA)
slug=$(echo "$name" | tr '[:upper:]' '[:lower:]' | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' \
  -e 's/^-//' -e 's/-$//')
echo "gpu_check: $name (sm_$cc), results in docs/results/$slug.csv"

status=0
stage() {  # stage NAME COMMAND...: runs it, reports, remembers a failure
  echo "== $1"
  shift
  if ! "$@"; then
    echo "gpu_check: FAILED: $*" >&2
    status=1
  fi
}

scripts/setup.sh --python
stage "build for sm_$cc" bash -c "cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=$cc >/dev/null && cmake --build build-gpu -j$(nproc)"
stage "tests (GPU tests included)" bash -c "cd build-gpu && ctest --output-on-failure -j1"

# compute-sanitizer's four tools on every kernel step at three small shapes (step 5: each variant);
# scripts/profile.py holds the command lines (docs/profiling.md).
export PATH="$PATH:/usr/local/cuda/bin"
for step in step1 step2 step3 step4 step5; do
  stage "compute-sanitizer, $step" .venv/bin/python scripts/profile.py "$step" sanitize \
    --build build-gpu
done

mkdir -p docs/results
stage "autotune sweep" .venv/bin/python scripts/autotune.py --build build-gpu --backend gpu \
  --out-dir docs/results

csv=docs/results/$slug.csv
rm -f "$csv"
for grid in seeds fa; do
  stage "bench, $grid grid" .venv/bin/python scripts/bench.py --build build-gpu --backend gpu \
    --grid "$grid" --out "$csv"
done
stage "chart" .venv/bin/python scripts/chart.py "$csv" --out "docs/results/$slug" --no-svg

echo "gpu_check: $([[ $status == 0 ]] && echo passed || echo FAILED); $csv and its chart written"
exit $status
