#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention per backend (flash, efficient, cudnn, math) over
the same grids as scripts/bench.py and appends rows in the project's CSV schema, with steps named
torch_sdpa_<backend>. Needs PyTorch with CUDA and a GPU; without them it says why and exits 0.

    scripts/bench_torch.py [--grid smoke|seeds|fa] [--out results/results.csv]
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench  # noqa: E402  (the grids and the FLOP count)


def csv_columns(build):
    """The schema, from the C++ code that defines it (common/report.cpp)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "h.csv")
        subprocess.run([os.path.join(build, "bin", "step0_reference"), "--seq", "1", "--iters",
                        "1", "--warmup", "0", "--no-check", "--csv", path, "--quiet"],
                       check=True, capture_output=True)
        with open(path) as f:
            return f.readline().strip().split(",")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=["smoke", "seeds", "fa"], default="fa")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "results.csv"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except ImportError as e:
        print(f"bench_torch: no PyTorch SDPA baselines: PyTorch (>= 2.3) is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        print("bench_torch: no PyTorch SDPA baselines: torch.cuda.is_available() is False")
        return 0

    import csv
    columns = csv_columns(args.build)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    props = torch.cuda.get_device_properties(0)
    l2 = torch.empty(2 * max(getattr(props, "L2_cache_size", 0), 1 << 20), dtype=torch.uint8,
                     device="cuda")
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    new_file = not os.path.exists(args.out) or os.path.getsize(args.out) == 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        if new_file:
            w.writeheader()
        for s in bench.grid(args.grid):
            if s["causal"] and s["seqlen_q"] != s["seqlen_k"]:
                print(f"bench_torch: skip {bench.describe(s)}: SDPA's is_causal aligns top-left")
                continue
            q = torch.rand(s["batch"], s["heads"], s["seqlen_q"], s["dim"], device="cuda",
                           dtype=torch.float16) * 2 - 0.5  # 0.5 + U(-1, 1), as ours
            k = torch.rand(s["batch"], s["heads"], s["seqlen_k"], s["dim"], device="cuda",
                           dtype=torch.float16)
            k = k * 2 - 0.5
            v = torch.rand_like(k) * 2 - 0.5
            for name, be in backends.items():
                try:
                    with sdpa_kernel(be):
                        def run():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"])
                        for _ in range(args.warmup):
                            run()
                        times = []
                        for _ in range(args.iters):
                            l2.zero_()
                            a, b = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                            a.record()
                            run()
                            b.record()
                            torch.cuda.synchronize()
                            times.append(a.elapsed_time(b))
                except RuntimeError as e:  # a backend that does not support this shape or GPU
                    print(f"bench_torch: {name} {bench.describe(s)}: not available "
                          f"({str(e).splitlines()[0]})")
                    continue
                times.sort()
                ms = times[len(times) // 2]
                fl = bench.flops(s)
                row = {c: "" for c in columns}
                row.update(step=f"torch_sdpa_{name}", backend="gpu",
                           device=torch.cuda.get_device_name(0), dtype="fp16", batch=s["batch"],
                           heads=s["heads"], heads_kv=s["heads"], seqlen_q=s["seqlen_q"],
                           seqlen_k=s["seqlen_k"], dim=s["dim"], causal=int(s["causal"]),
                           dropout=0, scale=s["dim"] ** -0.5, seed=0, iters=args.iters,
                           time_ms=ms, tflops=fl / (ms * 1e-3) / 1e12, flops=fl, checked=0,
                           commit=commit, toolkit=f"torch {torch.__version__} cuda "
                           f"{torch.version.cuda}", driver="", sm_clock_mhz=0,
                           timestamp=datetime.datetime.now(datetime.timezone.utc)
                           .strftime("%Y-%m-%dT%H:%M:%SZ"))
                w.writerow({c: row[c] for c in columns})
                print(f"bench_torch: torch_sdpa_{name:9s} {bench.describe(s):40s} {ms:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
