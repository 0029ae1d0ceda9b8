#!/usr/bin/env bash
# The main job: installs what is missing, builds what it runs, runs every step (and, on a GPU, the
# baselines) over a grid of shapes on the best backend available, prints the progression table,
# and writes results/results.csv and the chart results/chart.png + results/chart.svg (step 6, the
# backward pass, in results/chart-backward.png + .svg). Arguments go to scripts/bench.py (e.g.
# --grid seeds).
#
# It builds only what it runs, never the tests (scripts/test.sh builds those, in build/):
#   - no GPU (or no CUDA toolkit): a CPU-only build in build-cpu/. The steps' CPU copies are built
#     first and run at once for a first table (the emulator's times, results/emulator-times.csv);
#     then the counted copies, whose run gives what Nsight Compute would count, and the chart.
#   - an NVIDIA GPU: build-gpu/, compiled for that GPU alone (nvidia-smi's compute capability; 9.0
#     becomes 90a, which step5's Hopper kernel needs). ATTN_CUDA_ARCHITECTURES=all builds for the
#     configured list instead (75;80;89;90a;120), or set it to a list of your own ("86;90a"). On a
#     Turing GPU (7.5: a T4) steps 1-3 run on it and steps 4 and 5, which need 8.0, are listed as
#     skipped with their reason (docs/gpus.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python
STEPS=(step0_reference step1_naive step2_tiled step3_fused step4_tensorcore step5_warpspecialized
  step6_backward)
mkdir -p results
rm -f results/results.csv results/emulator-times.csv results/chart{,-backward}.{png,svg}

# The GPU's compute capability as a CUDA architecture ("" when there is no GPU to use).
gpu_arch() {
  command -v nvidia-smi >/dev/null || return 0
  local cap
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1) || return 0
  [[ $cap =~ ^([0-9]+)\.([0-9]+)$ ]] || return 0
  local major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
  if ! nvcc --version >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "main: a GPU but no CUDA toolkit (nvcc): the CPU backend runs the steps" >&2
    return 0
  fi
  if ((major * 10 + minor < 75)); then
    echo "main: the GPU's compute capability is $cap; the steps need 7.5 or newer (steps 4 and 5:" \
      "8.0): the CPU backend runs them instead" >&2
    return 0
  fi
  local arch=$major$minor
  [ "$arch" = 90 ] && arch=90a
  echo "$arch"
}

arch=$(gpu_arch)
status=0
if [ -n "$arch" ]; then
  build="build-gpu"
  case "${ATTN_CUDA_ARCHITECTURES:-}" in
    "") archs=$arch ;;
    all) archs="75;80;89;90a;120" ;;
    *) archs=$ATTN_CUDA_ARCHITECTURES ;;
  esac
  echo "main: building $build for the GPU here (CUDA architectures $archs)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$archs" \
    >/dev/null
  targets=("${STEPS[@]}" attn_device)
  if grep -q '^baseline_cublas:' <<<"$(ninja -C "$build" -t targets all)"; then
    targets+=(baseline_cublas)
  fi
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
  .venv/bin/python scripts/bench.py --build "$build" --out results/results.csv "$@" || status=$?
  if "$build/bin/attn_device" >/dev/null; then
    .venv/bin/python scripts/bench_torch.py --build "$build" --out results/results.csv || true
  fi
else
  build="build-cpu"
  echo "main: no GPU to use here: a CPU-only build in $build, the steps first"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_GPU=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "${STEPS[@]}" attn_device
  echo "main: steps built ${SECONDS} s after start"
  all=$(ninja -C "$build" -t targets all)
  counted=()
  for s in "${STEPS[@]:1}"; do
    if grep -q "^${s}_counted_bin:" <<<"$all"; then counted+=("${s}_counted_bin"); fi
  done
  if [ ${#counted[@]} -gt 0 ]; then
    echo "main: a first result, the emulator's times (not GPU performance), before the counted" \
      "copies are built"
    .venv/bin/python scripts/bench.py --build "$build" --no-counters \
      --out results/emulator-times.csv "$@" || status=$?
    echo "main: first table ${SECONDS} s after start"
    echo "main: building the counted copies (what Nsight Compute would count)"
    cmake --build "$build" -j"$(nproc)" --target "${counted[@]}"
  fi
  .venv/bin/python scripts/bench.py --build "$build" --out results/results.csv "$@" || status=$?
fi
.venv/bin/python scripts/chart.py results/results.csv --out results/chart
echo "main: results in results/results.csv, chart in results/chart.png and results/chart.svg," \
  "the backward pass's in results/chart-backward.png and .svg (${SECONDS} s)"
exit $status
