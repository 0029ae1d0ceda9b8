#!/usr/bin/env bash
# The main job: installs what is missing, builds, runs every step (and, on a GPU, the baselines)
# over a grid of shapes on the best backend available, prints the progression table, and writes
# results/results.csv and the chart results/chart.png + results/chart.svg.
# Without a GPU it says so and uses the CPU SIMT backend and the smoke grid.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python
scripts/build.sh
mkdir -p results
rm -f results/results.csv results/chart.png results/chart.svg

status=0
.venv/bin/python scripts/bench.py --out results/results.csv "$@" || status=$?
if build/bin/attn_device >/dev/null; then
  .venv/bin/python scripts/bench_torch.py --out results/results.csv || true
fi
.venv/bin/python scripts/chart.py results/results.csv --out results/chart
echo "main: results in results/results.csv, chart in results/chart.png and results/chart.svg"
exit $status
