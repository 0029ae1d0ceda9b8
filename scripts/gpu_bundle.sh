#!/usr/bin/env bash
# Builds what a GPU run needs, for one architecture, into one folder that travels to a machine with
# the GPU (docs/gpus.md): scripts/gpu_run.sh runs it there with nothing else but that machine's own
# CUDA driver, toolkit libraries (cuBLAS), Python and profilers.
#
#   scripts/gpu_bundle.sh --arch 90a OUTDIR        build for sm_90a alone (build-bundle-90a/), pack
#                                                  OUTDIR and OUTDIR.tar.xz, the copy that travels
#   scripts/gpu_bundle.sh --from-build DIR OUTDIR  pack an existing build's binaries (the rehearsal)
#   --python PY   the Python the GPU machine runs (its minor version; default: python3.12 on PATH
#                 or pyenv's, the device machine's, docs/gpus.md): flashsteps is built for it
#
# The bundle holds:
#   bin/attn_suite        every step, rung and configuration, with the cuBLAS baseline (suite/)
#   lib/                  the shared libraries attn_suite and flashsteps load that a bare CUDA
#                         machine lacks (found with ldd: all but the C and C++ runtimes, the driver
#                         and CUDA's own)
#   python/               the package flashsteps (--arch: built for PY; --from-build: the build's,
#                         where it has one) and its CUDA-array tests (python/tests/test_cuda.py),
#                         which the run's stage e runs
#   share/                step 4's tuned table; cpu_counts.csv, what the CPU backend counts for
#                         each kernel at the shape Nsight Compute profiles (gpu_report.py NCU_SHAPE)
#   scripts/              gpu_run.sh, the scripts it runs and every script they import
#                         (scripts/bundled_scripts.py finds them)
#   MANIFEST              commit, architecture, toolkit, the newest glibc symbol needed, the Python
#                         the package is built for, a hash of each kernel's source (sources:,
#                         scripts/kernel_sources.py), every file
# It prints its size, packed and with the working tree beside it, and exits 1 where the two would
# be over the 64 MiB a GPU call carries. Exit status 2, with one line, for an architecture this toolkit
# lacks, a PY that is not a Python, an OUTDIR that is neither new, empty nor a bundle, or one that
# cannot be written.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "gpu_bundle: $*" >&2; exit 2; }
usage="usage: scripts/gpu_bundle.sh --arch ARCH [--python PY] OUTDIR | --from-build DIR OUTDIR"
arch="" from="" out="" python=""
while (($#)); do
  case "$1" in
    --arch) arch=${2:-}; shift 2 || fail "$usage" ;;
    --python) python=${2:-}; shift 2 || fail "$usage" ;;
    --from-build) from=${2:-}; shift 2 || fail "$usage" ;;
    -h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) fail "unknown option $1 ($usage)" ;;
    *) [[ -z $out ]] || fail "one OUTDIR only ($usage)"; out=$1; shift ;;
  esac
done
[[ -n $out && ( -n $arch || -n $from ) && ( -z $arch || -z $from ) ]] || fail "$usage"

if [[ -n $from ]]; then
  [[ -z $python ]] || fail "--python: with --arch only (a --from-build bundle holds no package)"
  [[ -x $from/bin/attn_suite ]] || fail "--from-build $from: no bin/attn_suite there (build it first)"
else
  [[ $arch =~ ^([0-9]+)[af]?$ ]] || fail "--arch $arch: an architecture by number, e.g. 90a or 80"
  # nvcc --version, not command -v: bash finds a non-executable nvcc on PATH too (CI hides the
  # toolkit that way).
  nvcc --version >/dev/null 2>&1 || fail "--arch $arch: no CUDA toolkit (nvcc) here; a bundle needs GPU code"
  known=$(nvcc --list-gpu-code | sed -n 's/^sm_//p' | tr '\n' ' ')
  [[ " $known " == *" ${BASH_REMATCH[1]} "* ]] ||
    fail "--arch $arch: this toolkit ($(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')) compiles for ${known% } only"
  (( BASH_REMATCH[1] >= 75 )) || fail "--arch $arch: the steps need sm_75 or newer"
  # The GPU machine's Python, for flashsteps: its minor version is what the extension is built for.
  if [[ -z $python ]]; then
    # The first that runs (pyenv's shim on PATH may not, where 3.12 is not its chosen version).
    for candidate in "$(command -v python3.12)" \
        "$(pyenv root 2>/dev/null || echo ~/.pyenv)"/versions/3.12*/bin/python3.12; do
      [[ -z $python && -x $candidate ]] && "$candidate" -c '' 2>/dev/null && python=$candidate
    done
    [[ -n $python ]] || fail "no python3.12 here (the device machine's Python): name one with --python PY"
  fi
  pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) ||
    fail "--python $python: not a Python that runs here"
fi
# OUTDIR: new, empty, or an earlier bundle (replaced); never a folder of something else.
if [[ -e $out ]]; then
  [[ -d $out ]] || fail "$out: exists and is not a folder"
  if [[ -n $(ls -A "$out") && ! -f $out/MANIFEST ]]; then
    fail "$out: not empty and not a bundle (no MANIFEST): choose a new folder"
  fi
fi
mkdir -p "$out" 2>/dev/null && [[ -w $out ]] || fail "$out: cannot be written"
out=$(cd "$out" && pwd)

if [[ -n $arch ]]; then
  scripts/setup.sh --python
  build=build-bundle-$arch
  echo "gpu_bundle: building for sm_$arch alone in $build/"
  # A virtual environment of that Python with nanobind, to build the extension against.
  venv=$PWD/$build/python-$pyver
  [[ -x $venv/bin/python ]] || "$python" -m venv "$venv" || fail "--python $python: cannot make a venv"
  "$venv/bin/python" -m nanobind --cmake_dir >/dev/null 2>&1 ||
    "$venv/bin/python" -m pip install -q "nanobind>=2.4" || fail "nanobind: cannot be installed for $python"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DATTN_GPU=ON -DATTN_BUILD_TESTS=OFF -DATTN_PYTHON_MODULE=ON \
    -DPython_EXECUTABLE="$venv/bin/python" -U '_Python_*' >/dev/null  # found afresh: another Python's headers may be cached
  targets=(attn_suite _core)
  # Every kernel step's counted copy (the CPU column of stage d: attn_suite list names them all).
  if grep -q '^ATTN_COUNTERS:BOOL=ON' "$build/CMakeCache.txt"; then
    for step in step[1-9]*/; do targets+=("${step%/}_counted_bin"); done
  fi
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
else
  build=$from
fi
arch=$("$build/bin/attn_suite" build | sed -n 's/^architectures: //p')

rm -rf "${out:?}"/{bin,lib,python,share,scripts,MANIFEST}
mkdir -p "$out"/{bin,lib,share,scripts}
cp "$build/bin/attn_suite" "$out/bin/"
binaries=("$out/bin/attn_suite")
# The package, where the build has it: for the GPU machine's Python (--arch), or for the Python
# the build was made with (--from-build: the rehearsal runs stage e's tests with it).
if [[ -d $build/python/flashsteps ]]; then
  mkdir -p "$out/python/tests"
  cp -r "$build/python/flashsteps" "$out/python/"
  rm -rf "$out/python/flashsteps/__pycache__"
  cp python/tests/{conftest.py,reference.py,test_cuda.py} "$out/python/tests/"
  for so in "$out"/python/flashsteps/_core*.so; do [[ -e $so ]] && binaries+=("$so"); done
fi
# The libraries a bare CUDA machine lacks: not glibc's, the C++ runtime's (a machine that runs CUDA
# 13 has one at least as new), the driver's, nor the CUDA toolkit's (cuBLAS: too large to carry).
system='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s\.so|libstdc\+\+\.so|libcuda\.so|libcublas|libcublasLt|libcudart|libnvidia)'
carried=()
while read -r name _ path _; do
  [[ $path == /* ]] || continue
  [[ $name =~ $system ]] && continue
  cp -L "$path" "$out/lib/$name"
  carried+=("$name")
done < <(ldd "${binaries[@]}" | grep '=>' | sort -u -k1,1)
cp step4_tensorcore/tuned_configs.csv "$out/share/"
# gpu_run.sh and every script it runs or they import, found by reading them (a script that starts
# to import another takes it along).
mapfile -t scripts < <(python3 scripts/bundled_scripts.py)
((${#scripts[@]} > 1)) || fail "scripts/bundled_scripts.py found no scripts"
cp "${scripts[@]/#/scripts/}" "$out/scripts/"

# What the CPU backend counts for each kernel at ncu's shape (the counted copies, bin/counted/).
shape=$(sed -n 's/^NCU_SHAPE = "\(.*\)"$/\1/p' scripts/gpu_report.py)
counts=$out/share/cpu_counts.csv
if [[ -d $build/bin/counted ]]; then
  while IFS=$'\t' read -r label step flags; do
    # shellcheck disable=SC2086 # $flags and $shape are word lists
    "$build/bin/counted/$step" --backend cpu --counters --quiet --csv "$counts" $flags $shape \
      >/dev/null || fail "counting $label on the CPU backend failed"
  done < <("$out/bin/attn_suite" list --kernels steps,rungs)
  echo "gpu_bundle: counted every kernel on the CPU backend at $shape"
else
  echo "gpu_bundle: this build has no counted copies (g++ builds them): the counters table will have no CPU column"
fi

# The Python the package's extension is built for (gpu_run.sh looks for that version first).
python_abi=""
for so in "$out"/python/flashsteps/_core.cpython-*.so; do
  [[ $so =~ cpython-3([0-9]+)- ]] && python_abi=3.${BASH_REMATCH[1]}
done
glibc=$(objdump -T "$out/bin/attn_suite" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain 2>/dev/null) ]] || commit+="-dirty"
toolkit=$("$build/bin/attn_suite" build | sed -n 's/^toolkit: //p')
{
  echo "bundle: flash-attention steps, made by scripts/gpu_bundle.sh"
  echo "commit: $commit"
  echo "arch: $arch"
  echo "toolkit: ${toolkit:-none}"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -1)"
  echo "needs: $glibc or newer; the CUDA driver; cuBLAS (libcublas.so.${toolkit%%.*}) for the baseline"
  echo "carried libraries: ${carried[*]:-none}"
  echo "python: ${python_abi:-none (no Python package)}"
  # Which source each kernel's figures will measure: a hash of its .cu file and the repository's
  # headers it includes, per kernel label (gpu_report.py compares it with today's).
  "$out/bin/attn_suite" list --kernels steps,rungs,configs | python3 scripts/kernel_sources.py --manifest ||
    fail "scripts/kernel_sources.py could not hash the kernels' sources"
  echo "files:"
  (cd "$out" && find . -type f ! -name MANIFEST -printf '  %P %s\n' | sort)
} >"$out/MANIFEST"
size=$(du -sb "$out" | cut -f1)
mib=$(( (size + 1048575) / 1048576 ))
echo "gpu_bundle: $out: $mib MiB (GPU code for $arch; $(ls "$out/lib" | wc -l) libraries carried)"
if [[ -z $from ]]; then
  # What travels: the folder packed (the GPU code compresses about threefold); gpu_run.sh takes
  # either.
  tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 >"$out.tar.xz"
  size=$(stat -c %s "$out.tar.xz")
  mib=$(( (size + 1048575) / 1048576 ))
  # What a GPU call carries: the working tree (tracked files and untracked ones git does not
  # ignore) and the packed bundle, 64 MiB together at most (docs/gpus.md).
  tree=$(git ls-files -z --cached --others --exclude-standard 2>/dev/null |
    xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
  total=$(( (size + tree + 1048575) / 1048576 ))
  echo "gpu_bundle: $out.tar.xz: $mib MiB, the copy to carry to the GPU machine;" \
    "with the working tree ($(( (tree + 1048575) / 1048576 )) MiB) $total MiB of the 64 a GPU call carries"
  if (( size + tree > 64 * 1048576 )); then
    echo "gpu_bundle: $total MiB is over the 64 MiB a GPU call carries: the bundle would not travel" >&2
    exit 1
  fi
fi
