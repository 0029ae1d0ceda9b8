#!/usr/bin/env python3
"""Runs every step (and the baselines) over a grid of shapes and appends one CSV row per run.

    scripts/bench.py [--grid smoke|seeds|fa] [--backend auto|gpu|cpu] [--out results/results.csv]

Grids:
  smoke  small shapes the CPU SIMT backend runs in seconds (the default without a GPU)
  seeds  B=1 H=8 S=512 D=64; B=1 H=16 S=1024 D=64; B=4 H=8 Sq=4096 Sk=8192 D=128
  fa     the FlashAttention papers' grid: seqlen 512..16k with batch * seqlen = 16k tokens,
         hidden 2048 (heads = 2048 / D), head dims 64 and 128, causal and not (the default
         with a GPU)

Step 6 (the backward pass) runs at the same shapes up to 2e11 forward FLOPs (its O and LSE come
from the FP64 forward on the host, which takes seconds there): its rows are the backward's, which
scripts/table.py and scripts/chart.py keep apart from the forward's progression.

Each run is a step executable with --csv, so the rows carry the full provenance (device, SM clock,
driver, toolkit, commit). On the CPU backend the kernel steps also run with --counters (where the
build has their counted copies, bin/counted/): the rows then carry what Nsight Compute would
count and the speed-of-light model (--model-gpu, default H100 SXM), which scripts/chart.py draws
instead of the emulator's time. Shapes small enough for the FP64 reference on the CPU are checked;
larger ones run with --no-check (the tests check correctness). On a GPU, timing is CUDA events
around each sample of back-to-back runs over input sets that keep L2 cold, median of --iters
samples after --warmup (docs/benchmarking.md).
Exit status: 0 if every run passed (or was unchecked), 1 if any failed.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = ["step0_reference", "step1_naive", "step2_tiled", "step3_fused", "step4_tensorcore",
         "step5_warpspecialized", "step6_backward"]
# The backward pass: dQ, dK and dV from dO and the forward's O and LSE (which the step makes with
# the FP64 reference first); its rows count 2.5 times the forward's FLOPs.
BACKWARD = {"step6_backward"}


def is_backward(row):
    """A results row of the backward pass: step 6 or a rung of it ("step6_backward[mma]"), or an
    SDPA backend's backward ("torch_sdpa_flash_backward"); scripts/table.py, chart.py and
    gpu_report.py keep these rows apart from the forward's."""
    return row["step"].split("[")[0] in BACKWARD or row["step"].endswith("_backward")
BASELINES = ["baseline_cublas"]
# Steps with several kernels: each runs (a GPU that cannot run one reports it as skipped).
VARIANTS = {"step5_warpspecialized": ["sm80", "sm90a"], "step6_backward": ["sm80", "sm90a"]}
CHECK_FLOPS_LIMIT = 2e10  # FP64 reference on the host: a few seconds at most
STEP0_FLOPS_LIMIT = 2e10  # step0 always runs on the CPU
BACKWARD_FLOPS_LIMIT = 2e11  # step 6's O and LSE come from the FP64 forward on the host


def grid(name):
    """Shapes as dicts of CLI values."""
    def shape(b, h, sq, sk, d, causal=False):
        return {"batch": b, "heads": h, "seqlen_q": sq, "seqlen_k": sk, "dim": d,
                "causal": causal}
    if name == "smoke":
        return [shape(1, 4, 256, 256, 64), shape(1, 4, 256, 256, 64, True),
                shape(2, 2, 128, 384, 128, True)]
    if name == "seeds":
        return [shape(1, 8, 512, 512, 64), shape(1, 16, 1024, 1024, 64),
                shape(4, 8, 4096, 8192, 128)]
    if name == "fa":
        out = []
        for d in (64, 128):
            for causal in (False, True):
                for s in (512, 1024, 2048, 4096, 8192, 16384):
                    out.append(shape(16384 // s, 2048 // d, s, s, d, causal))
        return out
    raise ValueError(name)


def flops(s):
    """4 * D * visible (i, j) pairs, as common/problem.cpp counts them."""
    sq, sk = s["seqlen_q"], s["seqlen_k"]
    if s["causal"]:
        pairs = sum(max(0, min(sk, i + 1 + sk - sq)) for i in range(sq))
    else:
        pairs = sq * sk
    return 4.0 * s["dim"] * pairs * s["batch"] * s["heads"]


def describe(s):
    return (f"B={s['batch']} H={s['heads']} Sq={s['seqlen_q']} Sk={s['seqlen_k']} "
            f"D={s['dim']}" + (" causal" if s["causal"] else ""))


def progress(done, total, text):
    width = 24
    filled = width * done // total
    bar = "#" * filled + "." * (width - filled)
    print(f"[{bar}] {done:3d}/{total} {text}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--grid", choices=["smoke", "seeds", "fa"])
    ap.add_argument("--backend", choices=["auto", "gpu", "cpu"], default="auto")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "results.csv"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--iters", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--model-gpu", default="H100 SXM",
                    help="the GPU of the counted rows' speed-of-light model (CPU backend)")
    ap.add_argument("--no-counters", action="store_true",
                    help="on the CPU backend, do not count (faster; the chart then shows times)")
    args = ap.parse_args()

    bindir = os.path.join(args.build, "bin")
    if not os.path.isdir(bindir):
        print(f"bench: {bindir} not found: build first (scripts/build.sh)", file=sys.stderr)
        return 2
    dev = subprocess.run([os.path.join(bindir, "attn_device")], capture_output=True, text=True)
    has_gpu = dev.returncode == 0
    if args.backend == "gpu" and not has_gpu:
        print(f"bench: --backend gpu: {dev.stdout.strip().removeprefix('cpu: ')}", file=sys.stderr)
        return 2
    backend = "gpu" if args.backend == "gpu" or (args.backend == "auto" and has_gpu) else "cpu"
    grid_name = args.grid or ("fa" if backend == "gpu" else "smoke")
    iters = args.iters or (20 if backend == "gpu" else 3)
    warmup = args.warmup if args.warmup is not None else (5 if backend == "gpu" else 1)
    if backend == "cpu":
        print("bench: CPU SIMT backend (" + dev.stdout.strip().removeprefix("cpu: ") +
              "): CPU timings, not GPU performance", flush=True)
    else:
        print(f"bench: {dev.stdout.strip()}", flush=True)

    runs = []
    for s in grid(grid_name):
        for step in STEPS + (BASELINES if backend == "gpu" else []):
            exe = os.path.join(bindir, step)
            if not os.path.exists(exe):
                continue
            if step == "step0_reference" and flops(s) > STEP0_FLOPS_LIMIT:
                continue
            if step in BACKWARD and flops(s) > BACKWARD_FLOPS_LIMIT:
                continue
            for variant in VARIANTS.get(step, [None]):
                runs.append((step, variant, s))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    failed = 0
    for n, (step, variant, s) in enumerate(runs, 1):
        cmd = [os.path.join(bindir, step), "--backend",
               "cpu" if step == "step0_reference" else backend,
               "--batch", str(s["batch"]), "--heads", str(s["heads"]),
               "--seqlen-q", str(s["seqlen_q"]), "--seqlen-k", str(s["seqlen_k"]),
               "--dim", str(s["dim"]), "--dtype", args.dtype,
               "--iters", str(iters), "--warmup", str(warmup), "--csv", args.out, "--quiet"]
        if s["causal"]:
            cmd.append("--causal")
        if variant:
            cmd += ["--variant", variant]
        if (backend == "cpu" and step != "step0_reference" and not args.no_counters
                and os.path.exists(os.path.join(bindir, "counted", step))):
            cmd += ["--counters", "--model-gpu", args.model_gpu]
        if flops(s) * (2.5 if step in BACKWARD else 1) > CHECK_FLOPS_LIMIT:
            cmd.append("--no-check")
        r = subprocess.run(cmd, capture_output=True, text=True)
        out = (r.stdout + r.stderr).strip().splitlines()
        if r.returncode == 0:
            status = out[-1].split(" ", 1)[1] if out else "ok"
        elif r.returncode == 2:
            status = "skipped: " + (out[-1] if out else "invalid")
        else:
            failed += 1
            status = "FAILED: " + (out[-1] if out else f"exit {r.returncode}")
        name = f"{step}[{variant}]" if variant else step
        progress(n, len(runs), f"{name:29s} {describe(s):40s} {status}")

    if os.path.exists(args.out):
        subprocess.run([sys.executable, os.path.join(HERE, "table.py"), args.out])
    print(f"bench: {len(runs)} runs, {failed} failed; rows appended to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
