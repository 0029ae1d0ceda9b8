#!/usr/bin/env bash
# The GPU run: checks, sanitises, times and profiles every step and rung of a bundle
# (scripts/gpu_bundle.sh) in one command with a fixed time budget (docs/gpus.md).
#
#   scripts/gpu_run.sh BUNDLE OUTDIR [--budget 480] [--rehearse] [--python PY]
#
# BUNDLE: the folder gpu_bundle.sh made, or its packed copy (BUNDLE.tar.xz), unpacked first.
# PY: the Python for the report, PyTorch's rows and stage e (default: the bundle's Python version,
# its MANIFEST's "python:", as python3 or python3.X on PATH; else python3, and stage e says why it
# leaves the package out): the bundle's flashsteps is built for one Python version
# (gpu_bundle.sh --python).
#
# Stages, in this order, each with its own time limit (printed first; a stage that overruns is
# stopped, recorded as such, and the next one runs; what a stage leaves of its limit goes to the
# next):
#   a. correctness: every kernel over the test matrix and the tile-boundary shapes, fresh random
#      inputs, outputs poisoned before each run, against the FP64 reference (attn_suite check);
#   b. compute-sanitizer memcheck, racecheck, synccheck and initcheck at two small shapes: the
#      steps' own kernels first, then the rungs, as far as each tool's share of the budget reaches;
#   c. timings with CUDA events: the bf16 matrix-product rate and copy bandwidth of this GPU; every
#      kernel at seed 004's shape and at S = 4096, D = 128; PyTorch SDPA's flash, efficient and
#      cuDNN backends at every shape; the backward (step 6 and its rungs, SDPA's backends'
#      backward) at the first two shapes; the steps' own kernels and cuBLAS on the FlashAttention
#      grid;
#   d. Nsight Compute on every kernel at one small shape, beside what the CPU backend counted, and
#      step 5's sm90a kernel's warp stalls at the grid's shortest causal shape;
#   e. the Python package on CUDA tensors in place (the bundle's python/tests/test_cuda.py), and
#      flashsteps.benchmark: steps 4 and 5 beside SDPA's backends (python -m flashsteps benchmark);
#      what PY cannot run (no pytest, no PyTorch, a flashsteps built for another Python) is left
#      out with a one-line note.
# OUTDIR gets eight files (a GPU call brings eight back): log.txt, README.md, run.json, check.csv,
# sanitize.txt, timings.csv, counters.csv, chart.png. README.md and run.json are rewritten after
# each stage, so that a run stopped from outside leaves the report of the stages it finished; a
# section of the report that cannot be written says why in one line and the others are written.
# Where a stage failed, what the stages left in the scratch folder is copied into log.txt. A stage
# whose own budget ran out before every kernel ran says so ("partial") and names what it left.
# Exit status 0 when every stage passed or was partial, 1 otherwise; 2, with one line,
# for a BUNDLE that is not one, an OUTDIR that cannot be written, or no GPU without --rehearse.
#
# --rehearse runs the same script without a GPU: the correctness stage on the CPU backend at two
# small shapes, stage e's tests (those that need a GPU skip), the stages that need a GPU each one
# line "skipped: no GPU", the report written.
set -uo pipefail
fail() { echo "gpu_run: $*" >&2; exit 2; }
usage="usage: scripts/gpu_run.sh BUNDLE OUTDIR [--budget SECONDS] [--rehearse] [--python PY]"
bundle="" out="" budget=480 rehearse=0 py=""
while (($#)); do
  case "$1" in
    --budget) budget=${2:-}; shift 2 || fail "$usage" ;;
    --rehearse) rehearse=1; shift ;;
    --python) py=${2:-}; shift 2 || fail "$usage" ;;
    -h | --help) sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) fail "unknown option $1 ($usage)" ;;
    *) if [[ -z $bundle ]]; then bundle=$1; elif [[ -z $out ]]; then out=$1; else fail "$usage"; fi
       shift ;;
  esac
done
[[ -n $bundle && -n $out ]] || fail "$usage"
[[ $budget =~ ^[0-9]+$ ]] && ((budget >= 20)) || fail "--budget $budget: whole seconds, 20 or more"
if [[ -n $py ]]; then
  "$py" -c '' 2>/dev/null || fail "--python $py: not a Python that runs here"
  # By its absolute path: stage e runs it from the bundle's folders.
  if [[ $py == */* ]]; then py="$(cd "$(dirname "$py")" && pwd)/${py##*/}"; else py=$(command -v "$py"); fi
  chosen=given
else
  py=$(command -v python3) || fail "no python3 here: the run's report needs it"
  chosen=""
fi
if [[ -f $bundle && $bundle == *.tar.xz ]]; then  # the packed copy: unpacked beside the run
  unpacked=$(mktemp -d)
  "$py" - "$bundle" "$unpacked" <<'PY' || fail "$bundle: cannot be unpacked"
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
PY
  bundle=$(ls -d "$unpacked"/*/ | head -1)
fi
[[ -f $bundle/MANIFEST && -x $bundle/bin/attn_suite ]] ||
  fail "$bundle: not a bundle (no MANIFEST or bin/attn_suite; scripts/gpu_bundle.sh makes one)"
bundle=$(cd "$bundle" && pwd)
# Without --python: a Python of the version the bundle's package is built for, where there is one.
want=$(sed -n 's/^python: \(3\.[0-9]*\)$/\1/p' "$bundle/MANIFEST")
pyver() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
if [[ -z $chosen && -n $want && $(pyver "$py") != "$want" ]]; then
  # (one that runs: a pyenv shim is found on PATH where its version is not installed)
  other=$(command -v "python$want" 2>/dev/null) && [[ $(pyver "$other") == "$want" ]] && py=$other
fi
if ((!rehearse)) && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  fail "no NVIDIA GPU here (nvidia-smi finds none); --rehearse runs the script without one"
fi
if [[ -e $out && -n $(ls -A "$out" 2>/dev/null) && ! -f $out/run.json && ! -f $out/log.txt ]]; then
  fail "$out: not empty and not an earlier run's results: choose a new folder"
fi
mkdir -p "$out" 2>/dev/null && [[ -w $out ]] && touch "$out/log.txt" 2>/dev/null ||
  fail "$out: cannot be written"
out=$(cd "$out" && pwd)

rm -f "$out"/{log.txt,README.md,run.json,check.csv,sanitize.txt,timings.csv,counters.csv,chart.png}
work=$(mktemp -d)
((rehearse)) && touch "$work/rehearsal"  # the report's title says so from the first stage on
exec > >(tee "$out/log.txt") 2>&1
tee_pid=$!
# At the end: the log complete on disk before the script returns, the scratch folders gone.
trap 'exec >&- 2>&-; wait "$tee_pid"; rm -rf "$work" ${unpacked:+"$unpacked"}' EXIT
export PYTHONUNBUFFERED=1
# The profilers and sanitizers come with the toolkit, not always on PATH.
[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"
# attn_suite's libraries (the bundle's, the toolkit's cuBLAS) for attn_suite alone, through a
# wrapper: PyTorch and the tools keep their own.
suite_libs="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
suite=$work/attn_suite

# The stages' limits, in seconds: shares of the budget that add up to it (each grows by what the
# stages before it left unused).
limit_a=$((budget * 15 / 100)) limit_b=$((budget * 25 / 100)) limit_c=$((budget * 35 / 100))
limit_e=$((budget * 10 / 100)) limit_d=$((budget - limit_a - limit_b - limit_c - limit_e))
echo "gpu_run: $(sed -n 's/^commit: //p' "$bundle/MANIFEST"), GPU code for" \
  "$(sed -n 's/^arch: //p' "$bundle/MANIFEST"); $( ((rehearse)) && echo "REHEARSAL, no GPU" ||
  nvidia-smi -L | head -1)"
echo "gpu_run: Python $py ($(pyver "$py")${want:+; the package in the bundle is built for $want})"
echo "gpu_run: stage limits: a. correctness $limit_a s, b. sanitizers $limit_b s," \
  "c. timings $limit_c s, d. Nsight Compute $limit_d s, e. Python $limit_e s:" \
  "$((limit_a + limit_b + limit_c + limit_d + limit_e)) s (what a stage leaves unused goes to the" \
  "next)"
cp "$bundle/MANIFEST" "$work/manifest.txt"
gpu_state() {  # the GPU as found: name, driver, clocks, power, temperature
  ((rehearse)) && return 0
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu,pstate \
    --format=csv >"$work/$1" 2>&1 || true
}
gpu_state nvidia-smi-before.csv
# A library attn_suite lacks on that path (cuBLAS, where the toolkit's lib64 is elsewhere): looked
# for among the CUDA toolkits and Python's packages (PyTorch's wheels carry one).
for lib in $(LD_LIBRARY_PATH=$suite_libs ldd "$bundle/bin/attn_suite" | awk '/not found/ {print $1}'); do
  dir=$(find /usr/local /opt /usr/lib "$("$py" -c 'import site; print(site.getsitepackages()[0])' \
    2>/dev/null)" -name "$lib" -print -quit 2>/dev/null)
  if [[ -n $dir ]]; then
    suite_libs="${dir%/*}:$suite_libs"
    echo "gpu_run: $lib from ${dir%/*}"
  else
    echo "gpu_run: attn_suite needs $lib, found nowhere here: the stages that run it will fail"
  fi
done
printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$suite_libs" "$bundle/bin/attn_suite" >"$suite"
chmod +x "$suite"
for tool in compute-sanitizer ncu; do
  ((rehearse)) || command -v "$tool" >/dev/null || echo "gpu_run: no $tool here: its stage will fail"
done

status=0
# The report as far as the stages have come: README.md and run.json, rewritten after each stage
# (the chart at the end), so that a run stopped from outside still leaves one.
report() {
  "$py" "$bundle/scripts/gpu_report.py" summary "$bundle" "$out" "$work" "$@"
}
record() {  # record NAME LIMIT TOOK STATUS: the stage table's row, then the report so far
  "$py" -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "limit_s": int(sys.argv[2]),
"took_s": int(sys.argv[3]), "status": sys.argv[4]}))' "$@" >>"$work/stages.jsonl"
  report --no-chart >/dev/null 2>&1 || true
}
# stage NAME LIMIT COMMAND...: runs COMMAND for at most LIMIT seconds, records how it ended, and
# keeps what it left of LIMIT in spare: the callers add it to the next stage's share. A stage notes
# what it left out, a line each, in $work/notes/NAME; exit status 5: it could run nothing.
spare=0
stage() {
  local name=$1 limit=$2 start took rc verdict notes
  shift 2
  echo "== $name (limit ${limit} s)"
  start=$SECONDS
  # bash -c: a stage may be one of this script's functions (exported below).
  timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@"
  rc=$?
  notes=$(paste -sd '|' "$work/notes/$name" 2>/dev/null | sed 's/|/; /g')
  case $rc in
    0) verdict=passed${notes:+; left out: $notes} ;;
    3) verdict="partial: its budget ran out before every kernel ran" ;;
    5) verdict="left out: ${notes:-nothing could run}" ;;
    124 | 137) verdict="stopped at its limit"; status=1 ;;
    *) verdict="failed (exit $rc)${notes:+; left out: $notes}"; status=1 ;;
  esac
  took=$((SECONDS - start))
  spare=$((limit > took ? limit - took : 0))
  echo "== $name: $verdict after $took s"
  record "$name" "$limit" "$took" "$verdict"
}
skipped() {  # skipped NAME LIMIT [WHY]: a stage that does not run (a rehearsal's GPU stages)
  echo "== $1: skipped: ${3:-no GPU}"
  record "$1" "$2" 0 "skipped: ${3:-no GPU}"
}
mkdir -p "$work/notes"
tuned=$bundle/share/tuned_configs.csv
export out work bundle suite py tuned

# a. Correctness.
if ((rehearse)); then
  stage "a. correctness" "$limit_a" "$suite" check --backend cpu --cases sanitize \
    --csv "$out/check.csv" --budget $((limit_a * 8 / 10)) --hang 60 --tuned-table "$tuned"
else
  stage "a. correctness" "$limit_a" "$suite" check --backend gpu --cases matrix \
    --csv "$out/check.csv" --budget $((limit_a * 8 / 10)) --hang 10 --tuned-table "$tuned"
fi

# b. compute-sanitizer: one process per tool over every kernel at the two small shapes; a tool's
# share of the stage ends its run at its budget (the kernels not reached are named).
# --foreground: the tool stays in the stage's process group, which the stage's own limit ends whole.
sanitize() {  # each tool a quarter of the stage: kernels started in its first half
  local quarter=$(($1 / 4)) tool rc stopped=0
  local limit=$((quarter > 3 ? quarter - 2 : 1)) start_by=$((quarter > 1 ? quarter / 2 : 1))
  for tool in memcheck racecheck synccheck initcheck; do
    echo "### $tool" >>"$out/sanitize.txt"
    timeout --foreground --kill-after=2 "$limit" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      --print-limit 20 "$suite" check --backend gpu --cases sanitize --kernels steps,rungs \
      --budget "$start_by" --tuned-table "$tuned" >>"$out/sanitize.txt" 2>&1
    rc=$?
    echo "sanitizer $tool: exit $rc"
    ((rc == 124 || rc == 137)) && stopped=1
  done
  ! grep -qE '^========= (ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9])' "$out/sanitize.txt" &&
    ((!stopped))
}
export -f sanitize
if ((rehearse)); then
  skipped "b. compute-sanitizer" "$limit_b"
  for tool in memcheck racecheck synccheck initcheck; do
    printf '### %s\nskipped: no GPU\n' "$tool" >>"$out/sanitize.txt"
  done
else
  limit_b=$((limit_b + spare))
  stage "b. compute-sanitizer" "$limit_b" sanitize "$limit_b"
fi

# c. Timings: the ceilings, every kernel at the ladder's shapes, SDPA, the grid.
"$py" "$bundle/scripts/gpu_report.py" shapes ladder >"$work/ladder.txt"
"$py" "$bundle/scripts/gpu_report.py" shapes fa >"$work/fa.txt"
timings() {  # exit status: 1 if a part failed, else 3 if one ran out of its budget, else 0
  local l=$1 t0=$SECONDS commit worst=0 rc
  commit=$(sed -n 's/^commit: //p' "$bundle/MANIFEST")
  note() { rc=$?; ((rc == 3 && worst == 0)) && worst=3; ((rc != 0 && rc != 3)) && worst=1; true; }
  "$suite" peaks --csv "$work/peaks.csv"
  note
  "$suite" time --shapes "$work/ladder.txt" --kernels all --csv "$out/timings.csv" \
    --budget $((l * 25 / 100)) --hang 20 --tuned-table "$tuned"
  note
  "$py" "$bundle/scripts/bench_torch.py" --shapes "$work/ladder.txt" --shapes "$work/fa.txt" \
    --backends flash,efficient,cudnn --suite "$suite" --commit "$commit" \
    --budget $((l * 25 / 100)) --require-gpu --out "$out/timings.csv"
  note
  # The backward at the ladder's shapes: step 6 and its rungs, then SDPA's backends' backward,
  # each at least 30 s (a budget only stops new work from starting: both shapes start), SDPA's
  # with the large shape first.
  "$suite" time --shapes "$work/ladder.txt" --kernels steps,rungs --backward \
    --csv "$out/timings.csv" --budget $((l * 10 / 100 > 30 ? l * 10 / 100 : 30)) --hang 20
  note
  tac "$work/ladder.txt" >"$work/ladder-large-first.txt"
  "$py" "$bundle/scripts/bench_torch.py" --shapes "$work/ladder-large-first.txt" --backward \
    --backends flash,efficient,cudnn --suite "$suite" --commit "$commit" \
    --budget $((l * 5 / 100 > 30 ? l * 5 / 100 : 30)) --require-gpu --out "$out/timings.csv"
  note
  # The grid: what the stage has left, less 10 s for the last (kernel, shape) pair to finish.
  "$suite" time --shapes "$work/fa.txt" --kernels steps,baseline --csv "$out/timings.csv" \
    --budget $((l - (SECONDS - t0) - 10 > 1 ? l - (SECONDS - t0) - 10 : 1)) --hang 20 \
    --tuned-table "$tuned"
  note
  return $worst
}
export -f timings
if ((rehearse)); then
  skipped "c. timings" "$limit_c"
else
  # The clocks, power and temperature as the timings find them, sampled every second.
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv,noheader -lms 1000 >"$work/nvidia-smi-during.csv" 2>/dev/null &
  sampler=$!
  limit_c=$((limit_c + spare))
  stage "c. timings" "$limit_c" timings "$limit_c"
  kill "$sampler" 2>/dev/null
  gpu_state nvidia-smi-after.csv
  nvidia-smi --query-gpu=clocks_event_reasons.active --format=csv,noheader \
    >"$work/nvidia-smi-reasons.csv" 2>&1 || true
fi

# d. Nsight Compute beside the CPU backend's counts (the rehearsal writes the CPU column alone).
if ((rehearse)); then
  "$py" "$bundle/scripts/gpu_report.py" ncu "$bundle" "$out/counters.csv" --budget "$limit_d" \
    --suite "$suite" --rehearse
  skipped "d. Nsight Compute" "$limit_d"
else
  limit_d=$((limit_d + spare))
  stage "d. Nsight Compute" "$limit_d" "$py" "$bundle/scripts/gpu_report.py" ncu "$bundle" \
    "$out/counters.csv" --budget $((limit_d * 9 / 10)) --suite "$suite"
fi

# e. The Python package on CUDA tensors: its tests in place, then the benchmark beside SDPA. What
# $py cannot run is left out, a line in the stage's notes each.
python_stage() {
  local pkg=$bundle/python rc=0 ran=0 notes="$work/notes/e. Python" version
  export PYTHONPATH=$pkg LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  # What this Python can import, in one call: "NAME ok", or NAME and the first line of its error.
  "$py" - >"$work/imports.txt" 2>&1 <<'PY'
import importlib
for name in ("numpy", "flashsteps", "pytest", "torch"):
    try:
        importlib.import_module(name)
        print(name, "ok")
    except Exception as e:  # ImportError, or what an extension of another ABI raises
        print(name, (str(e).strip().splitlines() or [type(e).__name__])[-1])
PY
  has() { grep -qx "$1 ok" "$work/imports.txt"; }
  why() { sed -n "s/^$1 //p" "$work/imports.txt" | head -1; }
  cat "$work/imports.txt" >"$work/python.txt"
  if ! has flashsteps; then
    echo "the package: flashsteps does not import with Python $version ($(why flashsteps))$(
      [[ -n $want ]] && echo "; the one in the bundle is built for $want (--python names one)")" \
      >>"$notes"
    cat "$work/python.txt"
    return 5
  fi
  # Into python.txt, which the report quotes, and into the log when the stage ends.
  if has pytest; then
    (cd "$pkg/tests" && "$py" -m pytest -q -p no:cacheprovider -rs test_cuda.py) \
      >>"$work/python.txt" 2>&1 || rc=1
    ran=1
  else
    echo "the package's tests: no pytest for Python $version ($(why pytest))" >>"$notes"
  fi
  if ((rehearse)); then
    echo "benchmark: skipped: no GPU" >>"$work/python.txt"
  elif ! has torch; then
    echo "the benchmark: no PyTorch for Python $version ($(why torch))" >>"$notes"
  else
    for causal in "" --causal; do
      # shellcheck disable=SC2086 # $causal: no flag or one
      "$py" -m flashsteps benchmark step4_tensorcore step5_warpspecialized --seqlen 4096 \
        --dim 128 --heads 16 --batch 2 $causal >>"$work/python.txt" 2>&1 || rc=1
    done
    ran=1
  fi
  cat "$work/python.txt"
  ((ran)) || return 5
  return $rc
}
export -f python_stage
export rehearse want
if [[ ! -d $bundle/python ]]; then
  skipped "e. Python" "$limit_e" "no Python package in the bundle (gpu_bundle.sh --arch builds one)"
else
  limit_e=$((limit_e + spare))
  stage "e. Python" "$limit_e" python_stage
fi

echo "== summary"
report || status=1
if [[ ! -s "${out}/README.md" ]]; then  # the report's own code could not run: the stage table at least
  { echo "# GPU run: the summary could not be written (see log.txt)"; echo
    echo '```'; cat "$work/stages.jsonl"; echo '```'; } >"${out}/README.md"
fi
if ((status)); then  # what the stages left in the scratch folder, kept in the log
  for f in "$work"/*.txt "$work"/*.csv "$work"/*.jsonl "$work"/notes/*; do
    [[ -f $f ]] && { echo "== kept from the scratch folder: ${f#"$work"/}"; cat "$f"; }
  done
fi
echo "gpu_run: $( ((status)) && echo "a stage failed or overran" || echo "every stage passed");" \
  "$(ls "$out" | wc -l) files in $out"
exit $status
