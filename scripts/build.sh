#!/usr/bin/env bash
# Configures and builds into build/ (Release, warnings as errors). Extra arguments go to CMake,
# e.g. scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=86
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
