#!/usr/bin/env bash
# Installs what the project needs on a Debian machine with the CUDA toolkit, if it is missing:
# the build tools and libraries (Debian packages) and, with --python, a project-local virtual
# environment (.venv) with matplotlib for the chart. Safe to run again: it installs only what is
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ binutils git libeigen3-dev catch2 libcli11-dev librandom123-dev
          libboost-context-dev python3-venv)
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

if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: nvcc is in /usr/local/cuda/bin; add it to PATH (export PATH=/usr/local/cuda/bin:\$PATH)" >&2
  else
    echo "setup: the CUDA toolkit (nvcc) is required to build the GPU kernels; install it from NVIDIA's packages" >&2
  fi
  exit 2
fi

if [ "${1:-}" = "--python" ]; then
  have() { .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('$1') is None)" 2>/dev/null; }
  if [ ! -x .venv/bin/python ] || ! have matplotlib || ! have cutlass_library ||
     ! [ -x .venv/lib/python3*/site-packages/nvidia/cu13/bin/nvdisasm ]; then
    echo "setup: creating .venv: matplotlib, nvidia-cutlass (CuTe, the layout oracle), cuobjdump + nvdisasm"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check matplotlib
    # Only CuTe's headers are used (tests/cute_layouts.cpp), so not the package's dependencies.
    .venv/bin/pip install -q --disable-pip-version-check --no-deps nvidia-cutlass
    # cuobjdump and nvdisasm, for the kernel report's PTX and SASS (scripts/kernel_report.py).
    .venv/bin/pip install -q --disable-pip-version-check --no-deps nvidia-cuda-cuobjdump \
      nvidia-cuda-nvdisasm
  fi
fi
