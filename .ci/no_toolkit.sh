#!/usr/bin/env bash
# The README's two commands on a machine without the CUDA toolkit, then the CPU-only build with
# clang++. Runs inside a private mount namespace (.ci/run: unshare --mount), where it mounts an
# empty directory over every /usr/local/cuda* and an empty, non-executable file over every nvcc
# (and the other toolkit programs) on PATH, so nothing of the toolkit is visible; the mounts vanish with the namespace. Argument: the repository to
# clone (its committed HEAD is what a new user gets).
set -euo pipefail
src=${1:?usage: .ci/no_toolkit.sh REPOSITORY}

empty=$(mktemp -d)
nothing=$(mktemp)
chmod 644 "$nothing"
for d in /usr/local/cuda /usr/local/cuda-*; do
  if [ -d "$d" ]; then mount --bind "$empty" "$(readlink -f "$d")"; fi
done
for p in $(type -ap nvcc ptxas nvlink fatbinary cudafe++ cuobjdump nvdisasm); do
  mount --bind "$nothing" "$p"
done
unset CUDACXX CUDA_HOME CUDA_PATH CUDAToolkit_ROOT
hash -r
if nvcc --version >/dev/null 2>&1 || [ -e /usr/local/cuda/include/cuda_fp16.h ]; then
  echo "ci: could not hide the CUDA toolkit" >&2
  exit 1
fi
echo "ci: CUDA toolkit hidden (no nvcc, empty /usr/local/cuda*): a fresh clone, CPU-only"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/repo"
cd "$work/repo"
scripts/test.sh
device=$(build/bin/attn_device || true)  # exits 1 when there is no GPU to use
grep -q "built without the CUDA toolkit" <<<"$device"
scripts/main.sh
test -s results/results.csv && test -s results/chart.png && test -s results/chart.svg
echo "ci: no toolkit: scripts/test.sh and scripts/main.sh passed (CSV and chart written)"

# The Python package without the toolkit: a fresh clone, a fresh virtual environment, pip install.
.ci/pip_install.sh "$src"

# The CPU-only build with Debian's clang++ (setup.sh installs clang when CXX names it).
CXX=clang++ scripts/setup.sh --python
cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  >/dev/null
cmake --build build-clang -j"$(nproc)"
(cd build-clang && ctest --output-on-failure -j"$(nproc)")
echo "ci: no toolkit: the clang++ CPU-only build passed the tests"
