#!/usr/bin/env bash
# `pip install .` as a user does it: a fresh clone (no .venv, no build/) and a fresh virtual
# environment, then `import flashsteps` and one step on NumPy arrays. With --test, also `pip wheel
# .` first (the install then reuses its build directory, and fails here if it compiled a kernel
# again), the package's own tests (python/tests, pytest) against the installed package, and the
# wheel installed into a second fresh environment with the same smoke test. Arguments after the
# repository (and --test) go to pip (e.g. -C cmake.define.CMAKE_CUDA_ARCHITECTURES=75). .ci/run
# calls it with the CUDA toolkit, .ci/no_toolkit.sh without it and without the Debian packages.
set -euo pipefail
src=${1:?usage: .ci/pip_install.sh REPOSITORY [--test] [PIP ARGS...]}
shift
test=0
if [ "${1:-}" = --test ]; then
  test=1
  shift
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/repo"
pip=(--disable-pip-version-check -q)
# `import flashsteps` from VENV, and one step on NumPy arrays.
smoke() {
  (cd "$work" && "$1/bin/python" - <<'PY'
import numpy as np
import flashsteps

q = np.full((1, 2, 33, 64), 0.5, dtype=np.float16)
o, lse = flashsteps.attention(q, q, q, "step3_fused", causal=True, check=True)
assert o.dtype == np.float16 and np.isfinite(o).all()
print(f"ci: flashsteps imported from {flashsteps.__file__}; GPU code for "
      f"{flashsteps.cuda_architectures or 'none'}; step3_fused ran on NumPy arrays")
PY
  )  # (not from the clone: the installed package is imported)
  "$1/bin/python" -m flashsteps --help | tail -n 2
}
build=()
if [ "$test" = 1 ]; then
  build=(-C "build-dir=$work/build")
  python3 -m venv "$work/wheel-venv"
  start=$SECONDS
  "$work/wheel-venv/bin/pip" wheel "${pip[@]}" --no-deps -w "$work/wheels" "$work/repo" \
    "${build[@]}" "$@"
  echo "ci: pip wheel . $* took $((SECONDS - start)) s: $(cd "$work/wheels" && ls)"
  wheel_log=$(wc -l <"$work/build/.ninja_log")
fi
python3 -m venv "$work/venv"
start=$SECONDS
"$work/venv/bin/pip" install "${pip[@]}" "$work/repo" "${build[@]}" "$@"
echo "ci: pip install . $* took $((SECONDS - start)) s"
if [ "$test" = 1 ]; then
  # The wheel's build directory again, from a new build environment: nothing of the steps may be
  # compiled twice (cmake/AttnDependencies.cmake, attn_keep_headers). Ninja's log holds a line for
  # each output it made, the wheel's build first.
  again=$(sed -n "$((wheel_log + 1)),\$p" "$work/build/.ninja_log" | cut -f4 | grep '\.o$' || true)
  echo "ci: pip install . compiled $(grep -c . <<<"$again" || true) objects again in the wheel's" \
    "build directory: $(head -n 8 <<<"$again" | tr '\n' ' ')"
  if grep -Eq '_(cpu|counted)\.cpp\.o$|\.cu\.o$' <<<"$again"; then
    echo "ci: pip install . compiled the kernels again: the build environment's headers moved" >&2
    exit 1
  fi
fi
smoke "$work/venv"
if [ "$test" = 1 ]; then
  start=$SECONDS
  "$work/venv/bin/pip" install "${pip[@]}" "pytest>=7"
  (cd "$work" && "$work/venv/bin/python" -m pytest -q -p no:cacheprovider -rs repo/python/tests)
  echo "ci: the package's tests passed against the installed package in $((SECONDS - start)) s"
  "$work/wheel-venv/bin/pip" install "${pip[@]}" "$work"/wheels/flashsteps-*.whl
  smoke "$work/wheel-venv"
  echo "ci: the wheel installed into a fresh environment"
fi
