#!/usr/bin/env bash
# Installs what the project needs on a Debian machine, if it is missing: the build tools and
# libraries (Debian packages) and, with --python, a project-local virtual environment (.venv) with
# matplotlib for the chart, numpy and safetensors for the tensor-file tests, the CUDA headers for a
# CPU-only build, nanobind and pytest for the Python package (python/, built into build/python) and
# its tests and, when ATTN_WITH_TORCH=1, PyTorch for the SDPA gate (scripts/check_sdpa.py and the
# package's tests; several GB with its CUDA libraries, hence opt-in) and JAX (CPU) for the
# package's DLPack tests. Safe to run again: it installs only what is missing.
#
# The CUDA toolkit is optional: with nvcc the build compiles every kernel for the GPU too; without
# it the build is CPU-only (every step on the CPU SIMT backend) and this script says so.
# CXX=clang++ scripts/setup.sh also installs Debian's clang (and its OpenMP runtime).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ binutils git libeigen3-dev catch2 libcli11-dev librandom123-dev
          libboost-context-dev nlohmann-json3-dev python3-venv python3-dev)
case "${CXX:-}" in
  *clang*) packages+=(clang libomp-dev) ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! nvcc --version >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: nvcc is in /usr/local/cuda/bin but not on PATH; for the GPU kernels:" \
      "export PATH=/usr/local/cuda/bin:\$PATH" >&2
  else
    echo "setup: no CUDA toolkit (nvcc): CPU-only build, every step runs on the CPU SIMT" \
      "backend (install the toolkit from NVIDIA's packages for the GPU kernels)" >&2
  fi
fi

if [ "${1:-}" = "--python" ]; then
  have() { .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('$1') is None)" 2>/dev/null; }
  nv=".venv/lib/python3*/site-packages/nvidia/cu13"
  # shellcheck disable=SC2086 # $nv is a glob
  if [ ! -x .venv/bin/python ] || ! have matplotlib || ! have cutlass_library || ! have numpy ||
     ! have safetensors || ! have nanobind || ! have pytest ||
     ! [ -x $nv/bin/nvdisasm ] || ! [ -f $nv/include/cuda_fp16.h ] ||
     ! [ -f $nv/include/crt/host_defines.h ] ||
     ! [ -d $nv/include/cccl/cuda ]; then
    echo "setup: creating .venv: matplotlib, numpy, safetensors, nanobind, pytest, nvidia-cutlass (CuTe, the layout" \
      "oracle), cuobjdump + nvdisasm, the CUDA runtime and CCCL headers"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check matplotlib numpy safetensors nanobind \
      pytest
    # Only CuTe's headers are used (tests/cute_layouts.cpp), so not the package's dependencies.
    .venv/bin/pip install -q --disable-pip-version-check --no-deps nvidia-cutlass
    # cuobjdump and nvdisasm, for the kernel report's PTX and SASS (scripts/kernel_report.py).
    .venv/bin/pip install -q --disable-pip-version-check --no-deps nvidia-cuda-cuobjdump \
      nvidia-cuda-nvdisasm
    # The CUDA headers without the toolkit, for a CPU-only build: the 16-bit float types and dim3
    # (nvidia-cuda-runtime, with the crt/ headers they include from nvidia-cuda-crt), and libcu++
    # for CuTe in the layout oracle (nvidia-cuda-cccl). A GPU
    # build uses the toolkit's own copies instead.
    .venv/bin/pip install -q --disable-pip-version-check --no-deps nvidia-cuda-runtime \
      nvidia-cuda-crt nvidia-cuda-cccl
  fi
  if [ "${ATTN_WITH_TORCH:-0}" = 1 ] && ! have torch; then
    echo "setup: ATTN_WITH_TORCH=1: installing torch into .venv (the PyTorch SDPA gate)"
    .venv/bin/pip install -q --disable-pip-version-check torch
  fi
  if [ "${ATTN_WITH_TORCH:-0}" = 1 ] && ! have jax; then
    echo "setup: ATTN_WITH_TORCH=1: installing jax (CPU) into .venv (the package's JAX tests)"
    .venv/bin/pip install -q --disable-pip-version-check jax
  fi
fi
