#!/usr/bin/env python3
"""Reports how much slower the CPU SIMT backend runs each kernel step than step0's plain C++.

Runs step0_reference and the kernel steps on the CPU backend at one shape (default B=1 H=16
S=1024 D=64 fp16, unchecked), alternating them `--repeat` times so that they share the machine's
load, and prints each step's best time and its ratio to step0's best time. Times on a shared
machine are noisy; the ratio of runs taken side by side much less so. With --max-ratio R it exits
1 when step4's ratio exceeds R.

    scripts/cpu_speed.py [--build build] [--repeat 3] [--steps step3_fused step4_tensorcore]
"""
import argparse
import os
import subprocess
import sys

SHAPE = ["--batch", "1", "--heads", "16", "--seq", "1024", "--dim", "64", "--dtype", "fp16"]


def run(bindir, step):
    cmd = [os.path.join(bindir, step), "--backend", "cpu", *SHAPE, "--iters", "1", "--warmup",
           "0", "--no-check", "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"cpu_speed: {' '.join(cmd)} failed: {(r.stdout + r.stderr).strip()}")
    return float(r.stdout.split()[-3])  # "<step> <ms> ms unchecked"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", nargs="+", default=["step1_naive", "step2_tiled", "step3_fused",
                                                    "step4_tensorcore"])
    ap.add_argument("--max-ratio", type=float)
    args = ap.parse_args()
    bindir = os.path.join(args.build, "bin")
    steps = ["step0_reference"] + args.steps
    for s in steps:
        if not os.path.exists(os.path.join(bindir, s)):
            print(f"cpu_speed: {bindir}/{s} not found: build first", file=sys.stderr)
            return 2
    best = {s: float("inf") for s in steps}
    for _ in range(args.repeat):
        for s in steps:
            best[s] = min(best[s], run(bindir, s))
    print("cpu_speed: B=1 H=16 S=1024 D=64 fp16, CPU backend, best of", args.repeat,
          "(CPU timings, not GPU performance)")
    for s in steps:
        print(f"  {s:22s} {best[s]:10.1f} ms  {best[s] / best['step0_reference']:6.2f}x step0")
    if args.max_ratio is not None and "step4_tensorcore" in best:
        ratio = best["step4_tensorcore"] / best["step0_reference"]
        if ratio > args.max_ratio:
            print(f"cpu_speed: step4/step0 = {ratio:.2f} > {args.max_ratio}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
