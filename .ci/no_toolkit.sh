#!/usr/bin/env bash
# The README's test command on a machine without the CUDA toolkit, with clang++ (which makes it the
# clang proof too) and with g++, then `pip install .` with g++ and without the Debian development
# packages, and the package's tests. Runs inside a private mount namespace (.ci/run:
# unshare --mount), where it mounts an empty directory over every /usr/local/cuda* and an empty,
# non-executable file over every nvcc (and the other toolkit programs) on PATH, so nothing of the
# toolkit is visible; the mounts vanish with the namespace. Argument: the repository to clone (its
# committed HEAD is what a new user gets).
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
# The test command with Debian's clang++ (setup.sh installs it when CXX names it): every test of
# the CPU-only build, compiled by the other compiler, but the exercises (-E): each compiles a
# step's kernel file again, and the GPU build of .ci/run has just run them all with g++.
start=$SECONDS
CXX=clang++ scripts/test.sh -E '^exercises\.'
echo "ci: no toolkit: the README's test command passed, built with clang++, in $((SECONDS - start)) s"
device=$(build/bin/attn_device || true)  # exits 1 when there is no GPU to use
grep -q "built without the CUDA toolkit" <<<"$device"
# And with g++, as on most laptops: the same CPU-only build plus the counted copies and the
# instrumented tests, which need g++'s instrumentation hooks. A new build directory: the test
# command does not switch compilers in one.
rm -rf build
start=$SECONDS
scripts/test.sh
echo "ci: no toolkit: the README's test command passed, built with g++, in $((SECONDS - start)) s"

# The Python package as a Python user builds it: without the toolkit (g++), and without the Debian
# development packages either (Eigen, nlohmann-json, CLI11, Boost, Random123 and Catch2, hidden
# as the toolkit is above): what the build needs comes from PyPI (pyproject.toml). A fresh clone,
# a fresh virtual environment, and the package's own tests there (.ci/pip_install.sh --test).
for d in /usr/include/{eigen3,CLI,nlohmann,boost,Random123,catch2} /usr/share/eigen3 \
         /usr/share/cmake/{CLI11,nlohmann_json} /usr/lib/cmake/Catch2 \
         /usr/lib/*-linux-gnu/cmake/{Boost,boost_}*; do
  if [ -d "$d" ]; then mount --bind "$empty" "$d"; fi
done
if [ -e /usr/include/eigen3/Eigen/Dense ] || [ -e /usr/include/boost/version.hpp ] ||
   [ -e /usr/include/nlohmann/json.hpp ] || [ -e /usr/include/CLI/CLI.hpp ]; then
  echo "ci: could not hide the Debian development packages" >&2
  exit 1
fi
echo "ci: Debian's Eigen, nlohmann-json, CLI11, Boost, Random123 and Catch2 hidden"
.ci/pip_install.sh "$src" --test
