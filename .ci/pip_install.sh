#!/usr/bin/env bash
# `pip install .` as a user does it: a fresh clone (no .venv, no build/) and a fresh virtual
# environment, then `import flashsteps` and one step on NumPy arrays. Arguments after the
# repository go to pip (e.g. -C cmake.define.CMAKE_CUDA_ARCHITECTURES=75). .ci/run calls it with
# the CUDA toolkit, .ci/no_toolkit.sh without.
set -euo pipefail
src=${1:?usage: .ci/pip_install.sh REPOSITORY [PIP ARGS...]}
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/repo"
python3 -m venv "$work/venv"
start=$SECONDS
"$work/venv/bin/pip" install -q --disable-pip-version-check "$work/repo" "$@"
echo "ci: pip install . $* took $((SECONDS - start)) s"
cd "$work"  # not the clone: the installed package is imported
"$work/venv/bin/python" - <<'PY'
import numpy as np
import flashsteps

q = np.full((1, 2, 33, 64), 0.5, dtype=np.float16)
o, lse = flashsteps.attention(q, q, q, "step3_fused", causal=True, check=True)
assert o.dtype == np.float16 and np.isfinite(o).all()
print(f"ci: flashsteps imported from {flashsteps.__file__}; GPU code for "
      f"{flashsteps.cuda_architectures or 'none'}; step3_fused ran on NumPy arrays")
PY
"$work/venv/bin/python" -m flashsteps --help | tail -n 2
