#!/usr/bin/env bash
# CUDA compiler launcher: runs the nvcc command (built with --resource-usage) and keeps ptxas's
# per-kernel report (registers, spills, stack, shared memory) next to the object file as
# <object>.resource-usage.txt, for scripts/kernel_report.py. Quiet on success; on failure the
# whole output is shown.
out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = "-o" ] && out="${args[$((i + 1))]}"
done
log="${out:-nvcc}.resource-usage.txt"
"$@" >"$log" 2>&1
rc=$?
[ $rc -ne 0 ] && cat "$log" >&2
exit $rc
