#!/usr/bin/env python3
"""What each list of CUDA architectures costs in build time: the GPU half of the build (every
step's kernels and rungs, compiled by nvcc) timed for the former default list and for today's.

For each list it configures a fresh build directory (no tests, no counted copies, no Python
package: only what the list changes), compiles the steps' GPU objects (<step>_gpu, the rungs'
<step>_rungs_gpu, the Hopper kernels' <step>_sm90a_gpu) with all the machine's cores, and
reports the wall time, the CPU time of the compilers, and each step's share (the sum of its
objects' times, from ninja's log). Nothing is run on a GPU.

    scripts/arch_cost.py [--lists "80;89;90a" "75;80;89;90a;120"] [--work DIR] [--doc docs/gpus.md]

--doc rewrites the table between <!-- arch-cost:begin --> and <!-- arch-cost:end --> of that
file. Needs nvcc (exit 2 without it, or when a build fails).
"""
import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from markers import check, commit, machine, refuse, rewrite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ["step1_naive", "step2_tiled", "step3_fused", "step4_tensorcore", "step5_warpspecialized",
         "step6_backward"]
FORMER = "80;89;90a"  # the default until the Turing and Blackwell consumer cards were added


def current_default():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r'set\(CMAKE_CUDA_ARCHITECTURES "([^"]+)"\)', f.read())
    return m.group(1)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(archs, work):
    build = os.path.join(work, "build-" + archs.replace(";", "_"))
    shutil.rmtree(build, ignore_errors=True)
    r = subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
                        "-DATTN_BUILD_TESTS=OFF", "-DATTN_COUNTERS=OFF",
                        "-DATTN_INSTRUMENTED_TESTS=OFF", "-DATTN_PYTHON_MODULE=OFF"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        refuse(f"arch_cost: configuring for {archs} failed: "
               f"{((r.stderr or r.stdout).strip().splitlines() or ['no output'])[-1]}")
    cpu0, t0 = children_cpu(), time.perf_counter()
    # Each step's GPU objects: its kernel (<step>_gpu), its rungs (<step>_rungs_gpu) and its
    # Hopper kernels (<step>_sm90a_gpu), those of them that this list builds.
    listed = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], capture_output=True,
                            text=True).stdout
    have = {line.split(":")[0] for line in listed.splitlines()}
    targets = [t for s in STEPS for t in (f"{s}_gpu", f"{s}_rungs_gpu", f"{s}_sm90a_gpu")
               if t in have]
    r = subprocess.run(["cmake", "--build", build, "-j", str(os.cpu_count()), "--target",
                        *targets], capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if r.returncode != 0:
        refuse(f"arch_cost: building for {archs} failed: "
               f"{((r.stdout + r.stderr).strip().splitlines() or ['no output'])[-1]}")
    per_step = dict.fromkeys(STEPS, 0.0)
    with open(os.path.join(build, ".ninja_log")) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 5 and fields[3].endswith(".cu.o"):
                step = next((s for s in STEPS if re.search(f"/{s}_(rungs_|sm90a_)?gpu\\.dir/",
                                                           fields[3])), None)
                if step:
                    per_step[step] += (int(fields[1]) - int(fields[0])) / 1000
    shutil.rmtree(build, ignore_errors=True)
    return wall, cpu, per_step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lists", nargs="+", default=None, metavar="ARCHS",
                    help=f"architecture lists to time (default: {FORMER!r} and today's default)")
    ap.add_argument("--work", help="where to build (default: a temporary directory)")
    ap.add_argument("--doc", help="rewrite the table between the arch-cost markers of this file")
    args = ap.parse_args()
    if args.doc:
        check(args.doc, "arch-cost")
    if shutil.which("nvcc") is None:
        refuse("arch_cost: no nvcc on PATH: the GPU half of the build needs the CUDA toolkit")
    lists = args.lists or [FORMER, current_default()]
    for archs in lists:
        if not re.fullmatch(r"\d+a?(;\d+a?)*", archs):
            refuse(f"arch_cost: {archs!r}: expected a list such as \"75;80;89;90a;120\"")
    work = args.work or tempfile.mkdtemp(prefix="arch_cost-")
    rows = []
    for archs in lists:
        print(f"arch_cost: building the steps' GPU objects for {archs} ...", flush=True)
        wall, cpu, per_step = measure(archs, work)
        rows.append((archs, wall, cpu, per_step))
        print(f"arch_cost: {archs}: {wall:.0f} s wall, {cpu:.0f} s CPU", flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)

    base = rows[0]
    lines = [
        f"Measured by `scripts/arch_cost.py --doc {args.doc or 'docs/gpus.md'}` ({commit(ROOT)} "
        f"on {time.strftime('%Y-%m-%d')}, on {machine()}, nvcc {nvcc_version()}): the steps' GPU "
        "objects alone, compiled from scratch; do not edit by hand.", "",
        "| CMAKE_CUDA_ARCHITECTURES | wall (s) | compiler CPU (s) | "
        + " | ".join(f"{s} (s)" for s in STEPS) + " | wall vs the first |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in STEPS) + " | ---: |"]
    for archs, wall, cpu, per_step in rows:
        lines.append(f"| `{archs}` | {wall:.0f} | {cpu:.0f} | "
                     + " | ".join(f"{per_step[s]:.0f}" for s in STEPS)
                     + f" | {wall / base[1]:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.doc:
        rewrite(args.doc, "arch-cost", table)
    return 0


def nvcc_version():
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release ([\d.]+)", out)
    return m.group(1) if m else "unknown"


if __name__ == "__main__":
    sys.exit(main())
