#!/usr/bin/env bash
# The main job: installs what is missing, builds, runs every step on the best backend available
# (a GPU if one is present, otherwise the CPU SIMT backend), prints the progression table and
# writes results/results.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python
scripts/build.sh
mkdir -p results
csv=results/results.csv
rm -f "$csv"

if device=$(build/bin/attn_device); then
  backend=gpu
  echo "main: running on the ${device}"
  shapes=("--batch 1 --heads 16 --seq 1024 --dim 64" "--batch 1 --heads 16 --seq 1024 --dim 64 --causal")
else
  backend=cpu
  echo "main: ${device#cpu: }: running on the CPU SIMT backend (CPU timings, not GPU performance)"
  shapes=("--batch 1 --heads 4 --seq 256 --dim 64" "--batch 1 --heads 4 --seq 256 --dim 64 --causal")
fi

status=0
for shape in "${shapes[@]}"; do
  for step in step0_reference step1_naive step2_tiled step3_fused step4_tensorcore step5_warpspecialized; do
    [ -x "build/bin/$step" ] || continue
    b=$backend
    [ "$step" = step0_reference ] && b=cpu
    # shellcheck disable=SC2086
    build/bin/$step --backend "$b" $shape --iters 3 --warmup 1 --csv "$csv" || status=1
  done
done
.venv/bin/python scripts/table.py "$csv"
echo "main: results in $csv"
exit $status
