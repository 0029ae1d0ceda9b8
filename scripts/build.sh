#!/usr/bin/env bash
# Configures and builds into build/ (Release, warnings as errors). Extra arguments go to CMake,
# e.g. scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=86
#
# The GPU code, unless an argument names CMAKE_CUDA_ARCHITECTURES: sm_80 and sm_90a, the code the
# kernel report's budgets and tables are held on, plus this machine's GPU's when it has one (so
# that the GPU tests run on it). ATTN_CUDA_ARCHITECTURES=all builds the full list of
# CMakeLists.txt (75;80;89;90a;120: CI does, and the kernel report then holds every one of them
# to no spills); any other value is the list itself. docs/gpus.md says what runs where.
set -euo pipefail
cd "$(dirname "$0")/.."
archs=""
if [[ " $* " != *" -DCMAKE_CUDA_ARCHITECTURES="* ]]; then
  case "${ATTN_CUDA_ARCHITECTURES:-}" in
    all) archs="75;80;89;90a;120" ;;
    "")
      archs="80;90a"
      cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 || true)
      if [[ $cap =~ ^([0-9]+)\.([0-9]+)$ ]]; then
        mine=${BASH_REMATCH[1]}${BASH_REMATCH[2]}
        [ "$mine" = 90 ] && mine=90a
        [[ ";$archs;" == *";$mine;"* ]] || archs="$archs;$mine"
      fi
      ;;
    *) archs=$ATTN_CUDA_ARCHITECTURES ;;
  esac
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${archs:+"-DCMAKE_CUDA_ARCHITECTURES=$archs"} \
  "$@" >/dev/null
cmake --build build -j"$(nproc)"
