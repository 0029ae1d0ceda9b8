#!/usr/bin/env python3
"""Autotunes step4's tile configuration: every configuration (step4_tensorcore/configs.h) over a
grid of shapes, the fastest per (GPU architecture, dtype, head dim, causal) written to the table
the step reads at run time (step4_tensorcore/tuned_configs.csv).

    scripts/autotune.py [--build build] [--backend auto|gpu|cpu] [--seqs 512,...,8192]
                        [--dtypes fp16,bf16] [--dims 64,128] [--causal 0,1]
                        [--table step4_tensorcore/tuned_configs.csv] [--out-dir docs/results]

On a GPU: first every configuration is checked against the FP64 reference on small shapes (on the
GPU), then each is timed (the step binary with --config NAME --csv, --no-check) over the grid:
for each sequence length S in --seqs, batch = 16384 / S and heads = 2048 / D, as in
scripts/bench.py's fa grid. The configuration with the smallest geometric mean time over the
sequence lengths wins its (arch, dtype, D, causal); the table's rows for this architecture are
replaced (the others kept), and the sweep is written to <out-dir>/autotune_<arch>.csv with its
chart (<out-dir>/autotune_<arch>.png).

On the CPU backend (no GPU): every configuration is checked against the reference on small shapes
(--seqs, default 72 and 130: partial tiles), correctness only. CPU timings say nothing about a
GPU, so nothing is chosen and the table is left alone.

Exit status: 0 if every run passed, 1 if any failed, 2 on bad arguments or a missing build.
"""
import argparse
import csv
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEP = "step4_tensorcore"
TABLE_HEADER = "arch,dtype,dim,causal,config"


def configs():
    """The configuration names, the default first, in the order of configs.h's for_each_config."""
    text = open(os.path.join(ROOT, STEP, "configs.h")).read()
    body = text.split("void for_each_config", 1)[1].split("\n}\n", 1)[0]
    return re.findall(r"operator\(\)<(\w+)>\(\)", body)


def int_list(s):
    try:
        out = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of integers")
    if any(x <= 0 for x in out):
        raise argparse.ArgumentTypeError(f"'{s}': every value must be positive")
    return out


def str_list(choices):
    def parse(s):
        out = s.split(",")
        bad = [x for x in out if x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"'{','.join(bad)}' not in {', '.join(choices)}")
        return out
    return parse


def gpu_arch():
    """sm_XY of the first GPU as nvidia-smi reports it (sm_90a for 9.0, as the build names it)."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.split()[0]
    cc = out.replace(".", "")
    return "sm_" + cc + ("a" if cc == "90" else "")


def run(exe, args):
    """(exit status, the result line on success or the last line of the error otherwise)."""
    r = subprocess.run([exe] + args, capture_output=True, text=True)
    lines = (r.stdout if r.returncode == 0 else r.stdout + r.stderr).strip().splitlines()
    return r.returncode, lines[-1] if lines else f"exit {r.returncode}"


def check_all(exe, backend, names, dtypes, dims, causals, seqs):
    """Every configuration against the reference on small shapes; returns the failure count."""
    failed = total = 0
    for name in names:
        for dtype in dtypes:
            for dim in dims:
                for causal in causals:
                    for s in seqs:
                        # Sq != Sk and GQA too: the tiles' edge cases, as the test matrix has them.
                        args = ["--backend", backend, "--config", name, "--batch", "1",
                                "--heads", "2", "--heads-kv", "1", "--seqlen-q", str(s),
                                "--seqlen-k", str(s + 17), "--dim", str(dim), "--dtype", dtype,
                                "--iters", "1", "--warmup", "0", "--quiet"]
                        if causal:
                            args.append("--causal")
                        rc, last = run(exe, args)
                        total += 1
                        ok = rc == 0 and last.endswith("PASSED")
                        failed += not ok
                        print(f"autotune: check {name:18s} {dtype} D={dim} "
                              f"{'causal' if causal else 'full  '} S={s}: "
                              f"{'passed' if ok else 'FAILED: ' + last}", flush=True)
    print(f"autotune: {total} checks, {failed} failed")
    return failed


def read_table(path):
    """(comment lines, rows as dicts) of the table; raises ValueError on a malformed one."""
    comments, rows = [], []
    lines = open(path).read().splitlines()
    body = [line for line in lines if line and not line.startswith("#")]
    comments = [line for line in lines if line.startswith("#")]
    if not body or body[0] != TABLE_HEADER:
        raise ValueError(f"{path}: expected the header {TABLE_HEADER}")
    for line in body[1:]:
        f = line.split(",")
        if len(f) != 5:
            raise ValueError(f"{path}: malformed row '{line}'")
        rows.append(dict(zip(TABLE_HEADER.split(","), f)))
    return comments, rows


def write_table(path, arch, device, chosen, names):
    _, rows = read_table(path)
    rows = [r for r in rows if r["arch"] != arch] + [
        {"arch": arch, "dtype": dt, "dim": str(d), "causal": str(int(c)), "config": name}
        for (dt, d, c), name in sorted(chosen.items())]
    with open(path, "w") as f:
        f.write("# step4's tuned tile configurations, read at run time: the row for (arch, dtype, "
                "dim, causal)\n# names the configuration to run (step4_tensorcore/configs.h); "
                f"no row: the default, {names[0]}.\n# Written by scripts/autotune.py; the rows "
                f"for {arch} were measured on {device}.\n# The rows for arch cpu are the "
                "default: CPU timings mean nothing for a GPU.\n")
        f.write(TABLE_HEADER + "\n")
        for r in sorted(rows, key=lambda r: (r["arch"], r["dtype"], int(r["dim"]), r["causal"])):
            f.write(",".join(r[k] for k in TABLE_HEADER.split(",")) + "\n")


def chart(sweep, path_png, arch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader(open(sweep)))
    panels = sorted({(r["dtype"], int(r["dim"]), r["causal"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    for ax, (dt, d, c) in zip(axes[0], panels):
        mine = [r for r in rows if (r["dtype"], int(r["dim"]), r["causal"]) == (dt, d, c)]
        for name in sorted({r["config"] for r in mine}):
            pts = sorted((int(r["seqlen_q"]), float(r["tflops"])) for r in mine
                         if r["config"] == name)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{dt} D={d}{' causal' if c == '1' else ''}")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOPS")
        ax.legend(fontsize=7)
    fig.suptitle(f"step4 tile configurations on {arch}")
    fig.tight_layout()
    fig.savefig(path_png, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--backend", choices=["auto", "gpu", "cpu"], default="auto")
    ap.add_argument("--seqs", type=int_list, help="sequence lengths (GPU default: 512..8192 "
                    "in powers of 2; CPU default: 72,130)")
    ap.add_argument("--dtypes", type=str_list(["fp16", "bf16"]), default=["fp16", "bf16"])
    ap.add_argument("--dims", type=str_list(["64", "128"]), default=["64", "128"])
    ap.add_argument("--causal", type=str_list(["0", "1"]), default=["0", "1"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--table", default=os.path.join(ROOT, STEP, "tuned_configs.csv"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "results"))
    args = ap.parse_args()
    dims = [int(d) for d in args.dims]
    causals = [c == "1" for c in args.causal]

    bindir = os.path.join(args.build, "bin")
    exe = os.path.join(bindir, STEP)
    if not os.path.exists(exe):
        print(f"autotune: {exe} not found: build first (scripts/build.sh)", file=sys.stderr)
        return 2
    names = configs()
    if not names:
        print(f"autotune: no configurations found in {STEP}/configs.h", file=sys.stderr)
        return 2
    dev = subprocess.run([os.path.join(bindir, "attn_device")], capture_output=True, text=True)
    has_gpu = dev.returncode == 0
    if args.backend == "gpu" and not has_gpu:
        print(f"autotune: --backend gpu: {dev.stdout.strip().removeprefix('cpu: ')}",
              file=sys.stderr)
        return 2
    backend = "gpu" if args.backend == "gpu" or (args.backend == "auto" and has_gpu) else "cpu"
    print(f"autotune: {len(names)} configurations: {', '.join(names)}", flush=True)

    if backend == "cpu":
        failed = check_all(exe, "cpu", names, args.dtypes, dims, causals, args.seqs or [72, 130])
        print("autotune: CPU backend: correctness checked only; choosing a configuration needs "
              f"a GPU (timings), so {os.path.relpath(args.table, ROOT)} is left as it is")
        return 1 if failed else 0

    try:
        read_table(args.table)  # refuse a malformed table before an hour of timing
    except (OSError, ValueError) as e:
        print(f"autotune: {e}", file=sys.stderr)
        return 2
    arch, device = gpu_arch(), dev.stdout.strip().removeprefix("gpu: ")
    if check_all(exe, "gpu", names, args.dtypes, dims, causals, [72, 130]):
        print("autotune: a configuration fails its check: nothing is timed", file=sys.stderr)
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    sweep = os.path.join(args.out_dir, f"autotune_{arch}.csv")
    if os.path.exists(sweep):
        os.remove(sweep)
    times, failed = {}, 0
    for dtype in args.dtypes:
        for dim in dims:
            for causal in causals:
                for s in args.seqs or [512, 1024, 2048, 4096, 8192]:
                    for name in names:
                        cmd = ["--backend", "gpu", "--config", name, "--batch",
                               str(max(1, 16384 // s)), "--heads", str(2048 // dim), "--seq",
                               str(s), "--dim", str(dim), "--dtype", dtype, "--iters",
                               str(args.iters), "--warmup", "5", "--no-check", "--csv", sweep,
                               "--quiet"]
                        if causal:
                            cmd.append("--causal")
                        rc, last = run(exe, cmd)
                        if rc != 0:
                            failed += 1
                            print(f"autotune: {name} {dtype} D={dim} S={s}: FAILED: {last}")
                            continue
                        ms = float(last.split()[1])
                        times.setdefault((dtype, dim, causal, name), []).append(ms)
                        print(f"autotune: {name:18s} {dtype} D={dim} "
                              f"{'causal' if causal else 'full  '} S={s}: {ms:.4g} ms",
                              flush=True)
    chosen = {}
    for dtype in args.dtypes:
        for dim in dims:
            for causal in causals:
                score = {n: math.exp(sum(map(math.log, times[(dtype, dim, causal, n)])) /
                                     len(times[(dtype, dim, causal, n)]))
                         for n in names if (dtype, dim, causal, n) in times}
                if score:
                    chosen[(dtype, dim, causal)] = min(score, key=score.get)
                    print(f"autotune: {arch} {dtype} D={dim} causal={int(causal)}: "
                          f"{chosen[(dtype, dim, causal)]}")
    write_table(args.table, arch, device, chosen, names)
    chart(sweep, os.path.join(args.out_dir, f"autotune_{arch}.png"), arch)
    print(f"autotune: {args.table} rewritten for {arch}; sweep in {sweep}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
