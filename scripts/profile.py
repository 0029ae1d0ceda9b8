#!/usr/bin/env python3
"""Profile one step on an NVIDIA GPU: the Nsight Compute view of its lesson, compute-sanitizer's
four tools, or an Nsight Systems timeline. docs/profiling.md explains what to look at.

    scripts/profile.py step4 lesson              # ncu: the sections and metrics that show step 4's idea
    scripts/profile.py step4 counters            # ncu: the metrics --counters counts on the CPU backend
    scripts/profile.py step2 sanitize            # compute-sanitizer memcheck/racecheck/synccheck/initcheck
    scripts/profile.py step5 timeline            # nsys: the launches of step 5 on a timeline
    scripts/profile.py step4 lesson --print      # only print the command lines (works without a GPU)
    scripts/profile.py step4 lesson -- --seq 8192 --dim 128     # arguments after -- go to the step

Reports are written to profiles/ (git-ignored). Without a GPU (or without the tool on PATH) the
script says so in one line and exits 2; --print never needs either.
"""
import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ["step1_naive", "step2_tiled", "step3_fused", "step4_tensorcore", "step5_warpspecialized",
         "step6_backward"]

# The metrics each lesson is about (names as in `ncu --query-metrics`; on a GPU the script asks
# ncu which of them it has and leaves out, with a note, any that this GPU or ncu version lacks).
DRAM = ["dram__bytes_read.sum", "dram__bytes_write.sum"]
BANKS = ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]
TENSOR = ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
          "sm__inst_executed_pipe_tensor_op_hmma.sum"]
OCCUPANCY = ["sm__warps_active.avg.pct_of_peak_sustained_active"]
ISSUE = ["smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__inst_executed.sum"]
# What `--counters` counts on the CPU backend (its --csv columns: common/report.cpp,
# common/simt/counters.h, docs/profiling.md) and the ncu metrics that measure the same, summed
# (scripts/gpu_report.py sets each count beside ncu's). The names are those `ncu --query-metrics`
# lists on the GPU machine (Nsight Compute with CUDA 13.0 on an H200: docs/results/h200/log.txt):
# cp.async (LDGSTS) and ldmatrix (LDSM) are measured apart only by its sm__sass_ metrics, and the
# l1tex__ metrics of global and shared loads count them too.
COUNTED = [
    ("gld_requests", ["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]),
    ("gld_sectors", ["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]),
    ("gst_requests", ["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"]),
    ("gst_sectors", ["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"]),
    ("ldgsts_requests", ["sm__sass_l1tex_t_requests_pipe_lsu_mem_global_op_ldgsts.sum"]),
    ("ldgsts_sectors", ["sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"]),
    ("lds_wavefronts", ["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"]),
    ("lds_conflicts", ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"]),
    ("sts_wavefronts", ["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"]),
    ("sts_conflicts", ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]),
    ("ldsm_wavefronts", ["sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum"]),
    ("ldsm_conflicts", ["sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum"]),
    ("mma", ["sm__inst_executed_pipe_tensor_op_hmma.sum"]),
    ("wgmma", ["sm__inst_executed_pipe_tensor_op_gmma.sum"]),
    ("dram_bytes_min", ["dram__bytes_read.sum", "dram__bytes_write.sum"]),
]
# What ncu measures that the CPU backend cannot count: ptxas's HFMA2.MMA, register moves and
# constants it runs on the tensor pipe, which the hmma metric above includes (its description in
# `ncu --query-metrics`: "HMMA/HFMA2.MMA/HGMMA/QGMMA ops"). The backend runs the source, not
# ptxas's code: this one is ncu's alone, measured so that its hmma count can be set beside the
# CPU's mma without them.
NCU_ONLY = [
    ("hfma2_mma", ["sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum"]),
]
# The same as ncu names it, with the instruction counts --counters prints but does not write to
# its CSV: run on a GPU, the same numbers measured (at the same shape; the kernel's own launch).
COUNTERS = [m for _, ms in COUNTED + NCU_ONLY for m in ms] + [
    "smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum",
    "smsp__inst_executed_op_ldsm.sum", "smsp__inst_executed_op_barrier.sum",
    "smsp__inst_executed_op_shfl.sum"]

# step -> (kernel-name regex, sections, metrics, default shape). The shape is large enough that
# the lesson's effect dominates and small enough to profile in seconds.
LESSONS = {
    "step1_naive": ("scores_kernel|softmax_kernel|output_kernel",
                    ["SpeedOfLight", "MemoryWorkloadAnalysis"], DRAM,
                    "--seq 4096 --heads 16 --dim 64"),
    "step2_tiled": ("scores_kernel|softmax_kernel|output_kernel",
                    ["SpeedOfLight", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables"],
                    DRAM + BANKS, "--seq 4096 --heads 16 --dim 64"),
    "step3_fused": ("attention_kernel",
                    ["SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "WarpStateStats"],
                    DRAM + OCCUPANCY, "--seq 4096 --heads 16 --dim 64"),
    "step4_tensorcore": ("attention_kernel",
                         ["SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables",
                          "Occupancy", "WarpStateStats", "SchedulerStats"],
                         TENSOR + BANKS + OCCUPANCY + ISSUE, "--seq 4096 --heads 16 --dim 128"),
    "step5_warpspecialized": ("attention_kernel",
                              ["SpeedOfLight", "ComputeWorkloadAnalysis", "Occupancy",
                               "WarpStateStats", "SchedulerStats", "SourceCounters"],
                              TENSOR + OCCUPANCY + ISSUE, "--seq 4096 --heads 16 --dim 128"),
    # The backward pass: its O and LSE come from the FP64 forward on the host, hence 2048.
    "step6_backward": ("delta_kernel|dkdv_kernel|dq_kernel",
                       ["SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables",
                        "Occupancy", "WarpStateStats", "SchedulerStats"],
                       TENSOR + BANKS + OCCUPANCY + ISSUE, "--seq 2048 --heads 16 --dim 128"),
}

# The shape of the counters mode: --counters' default-sized CPU run, so that the two compare.
COUNTERS_SHAPE = "--batch 1 --heads 4 --seq 256 --dim 64"

# Small shapes for compute-sanitizer (it slows kernels down 10-100x): odd lengths, Sq != Sk,
# causal with GQA, per-batch key lengths (one empty) with dropout.
SANITIZE_SHAPES = [
    "--batch 1 --heads 2 --seqlen-q 17 --seqlen-k 129 --dim 64",
    "--batch 2 --heads 4 --heads-kv 2 --seq 129 --dim 128 --causal --dtype bf16",
    "--batch 3 --heads 2 --seqlen-q 65 --seqlen-k 100 --dim 96 --seqlens-k 100,1,0 --dropout 0.1",
]
SANITIZERS = ["memcheck", "racecheck", "synccheck", "initcheck"]


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        fail(message)


def fail(message):
    print(f"profile: {message}", file=sys.stderr)
    sys.exit(2)


def step_name(text):
    for name in STEPS:
        if text in (name, name.split("_")[0], name[4:5]):
            return name
    if text in ("step0", "step0_reference", "0"):
        fail("step0 is the CPU reference: there is no kernel to profile (steps 1-6 have one)")
    fail(f"unknown step '{text}' (one of {', '.join(STEPS)}, or step1..step6, or 1..6)")


def variants(step):
    """step5 has two kernels and a GPU picks one by itself: profile each (--variant forces it)."""
    if step != "step5_warpspecialized":
        return [[]]
    return [["--variant", "sm80"], ["--variant", "sm90a"]]


def commands(step, what, build, extra):
    binary = str(Path(build) / "bin" / step)
    out = Path("profiles")
    run = ["--backend", "gpu", "--warmup", "0", "--iters", "0", "--no-check"]  # one run alone
    cmds = []
    if what == "lesson":
        kernels, sections, metrics, shape = LESSONS[step]
        for variant in variants(step):
            tag = f"{step}{'-' + variant[1] if variant else ''}"
            cmd = ["ncu", "-f", "-o", str(out / f"{tag}-lesson"), "-k", f"regex:{kernels}"]
            for section in sections:
                cmd += ["--section", section]
            cmd += ["--metrics", ",".join(metrics)]
            cmds.append(cmd + [binary] + run + variant + (extra or shlex.split(shape)))
    elif what == "counters":
        kernels = LESSONS[step][0]
        for variant in variants(step):
            tag = f"{step}{'-' + variant[1] if variant else ''}"
            cmds.append(["ncu", "-f", "-o", str(out / f"{tag}-counters"), "-k",
                         f"regex:{kernels}", "--metrics", ",".join(COUNTERS), binary] + run
                        + variant + (extra or shlex.split(COUNTERS_SHAPE)))
    elif what == "sanitize":
        for variant in variants(step):
            for tool in SANITIZERS:
                for shape in ([extra] if extra else [shlex.split(s) for s in SANITIZE_SHAPES]):
                    # The check stays on: a wrong result under a tool fails as well.
                    cmds.append(["compute-sanitizer", "--tool", tool, "--error-exitcode", "1",
                                 binary, "--backend", "gpu", "--warmup", "0", "--iters", "0"]
                                + variant + shape)
    else:  # timeline
        for variant in variants(step):
            tag = f"{step}{'-' + variant[1] if variant else ''}"
            cmds.append(["nsys", "profile", "--force-overwrite", "true", "--trace", "cuda",
                         "-o", str(out / f"{tag}-timeline"), binary, "--backend", "gpu",
                         "--warmup", "1", "--iters", "3", "--no-check"] + variant
                        + (extra or shlex.split(LESSONS[step][3])))
    return cmds


def known_metrics():
    """The metric names this GPU's ncu knows, or None if it cannot say."""
    try:
        text = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True,
                              timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def drop_unknown(cmd, known):
    if known is None or "--metrics" not in cmd:
        return cmd
    i = cmd.index("--metrics") + 1
    wanted = cmd[i].split(",")
    have = [m for m in wanted if m.split(".")[0] in known]  # ncu lists base names
    for m in sorted(set(wanted) - set(have)):
        print(f"profile: this ncu does not list {m}; left out", file=sys.stderr)
    if not have:
        return cmd[:i - 1] + cmd[i + 1:]
    return cmd[:i] + [",".join(have)] + cmd[i + 1:]


def main():
    argv = sys.argv[1:]
    extra = None
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
        if not extra:
            fail("nothing after --: give the step's arguments (for example --seq 8192 --dim 128)")
    parser = OneLineParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", help="step1..step6 (or its directory name)")
    parser.add_argument("what", choices=["lesson", "counters", "sanitize", "timeline"],
                        help="lesson: Nsight Compute; counters: ncu's metrics of what --counters "
                             "counts on the CPU backend; sanitize: compute-sanitizer's four tools; "
                             "timeline: Nsight Systems")
    parser.add_argument("--build", default="build", help="build directory (default: build)")
    parser.add_argument("--print", action="store_true", dest="print_only",
                        help="print the command lines and exit")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # the build directory and profiles/ are relative to the repository
    step = step_name(args.step)
    cmds = commands(step, args.what, args.build, extra)
    if args.print_only:
        for cmd in cmds:
            print(shlex.join(cmd))
        return 0

    tool = {"lesson": "ncu", "counters": "ncu", "sanitize": "compute-sanitizer",
            "timeline": "nsys"}[args.what]
    if shutil.which(tool) is None:
        fail(f"{tool} is not on PATH (it comes with the CUDA toolkit); --print shows the commands")
    if shutil.which("nvidia-smi") is None or subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True).returncode != 0:
        fail("no NVIDIA GPU here (nvidia-smi finds none); --print shows the commands")
    if not os.access(Path(args.build) / "bin" / step, os.X_OK):
        fail(f"{Path(args.build) / 'bin' / step} is not built (scripts/build.sh builds it)")
    Path("profiles").mkdir(exist_ok=True)
    known = known_metrics() if args.what in ("lesson", "counters") else None
    status = 0
    for cmd in cmds:
        cmd = drop_unknown(cmd, known)
        print("$ " + shlex.join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            print(f"profile: FAILED: {shlex.join(cmd)}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
