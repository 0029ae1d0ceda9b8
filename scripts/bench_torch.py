#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention per backend (flash, efficient, cudnn, math) over
the same shapes as the steps and appends rows in the project's CSV schema, with steps named
torch_sdpa_<backend>. Needs PyTorch with CUDA and a GPU; without them it says why and exits 0.

    scripts/bench_torch.py [--grid smoke|seeds|fa] [--out results/results.csv]
    scripts/bench_torch.py --shapes FILE [--shapes FILE2] --backends flash,efficient,cudnn --suite BIN
    scripts/bench_torch.py --backward ...   (each backend's backward alone, beside step 6's)

--shapes reads attn_suite's shapes files (one shape a line, as a step's flags: scripts/gpu_run.sh).
Timing is the steps' own method (common/harness.cpp, time_runs): a sample runs SDPA once on each of
as many copies of the inputs as make three times the L2 cache (at most 64), between one pair of
CUDA events, and takes the mean; the row's time is the median of --iters samples after --warmup.
The backward's sets are counted by the same rule over what a backward reads and writes (Q, K, V,
O, dO, dQ, dK, dV, LSE), each set with its own forward's O and dO, run once before the timing.
The calls of a sample are captured once in a CUDA graph and replayed, so that Python's dispatch
(tens of microseconds a call) is not timed; where a backend cannot be captured they are called one
by one, and the log says so. --budget stops starting new shapes after that many seconds, counted
from when PyTorch has found the GPU (exit 3).
"""
import argparse
import datetime
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench  # noqa: E402  (the grids and the FLOP count)

BACKENDS = ["flash", "efficient", "cudnn", "math"]
# A backward's FLOPs over its forward's: FlashAttention's convention, as Problem::backward_flops's
# (docs/benchmarking.md): five matrix products of the forward's size where the forward has two.
BACKWARD_FLOPS = 2.5


def csv_columns(command):
    """The schema, from the C++ code that defines it (common/report.cpp): `command` runs step 0."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "h.csv")
        subprocess.run(command + ["--seq", "1", "--iters", "1", "--warmup", "0", "--no-check",
                                  "--csv", path, "--quiet"], check=True, capture_output=True)
        with open(path) as f:
            return f.readline().strip().split(",")


def read_shapes(path):
    """Shapes as bench.py's dicts (with dtype and heads_kv), from a shapes file."""
    ap = argparse.ArgumentParser(prog=f"bench_torch: {path}", add_help=False)
    for flag in ("--batch", "--heads", "--heads-kv", "--seqlen-q", "--seqlen-k", "--seq", "--dim"):
        ap.add_argument(flag, type=int)
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--causal", action="store_true")
    out = []
    with open(path) as f:
        for line in f:
            words = shlex.split(line.split("#")[0])
            if not words:
                continue
            a = ap.parse_args(words)
            sq = a.seqlen_q or a.seq or 256
            sk = a.seqlen_k or a.seq or 256
            out.append({"batch": a.batch or 1, "heads": a.heads or 4,
                        "heads_kv": a.heads_kv or a.heads or 4, "seqlen_q": sq, "seqlen_k": sk,
                        "dim": a.dim or 64, "causal": a.causal, "dtype": a.dtype})
    return out


def input_sets(s, l2_bytes, backward=False):
    """As common/harness.cpp's input_sets: copies for three times the L2 cache, at most 64, of
    what one run reads and writes (run_bytes: the forward Q, K, V, O and LSE; the backward Q, K,
    V, O, dO, dQ, dK, dV and LSE)."""
    q = s["batch"] * s["heads"] * s["seqlen_q"] * s["dim"]
    kv = s["batch"] * s["heads_kv"] * s["seqlen_k"] * s["dim"]
    size = 2 * ((4 if backward else 2) * (q + kv)) + 4 * s["batch"] * s["heads"] * s["seqlen_q"]
    if l2_bytes <= 0 or size >= 3 * l2_bytes:
        return 1
    return min(64, math.ceil(3 * l2_bytes / size))


def time_sdpa(torch, F, s, backend, iters, warmup, l2_bytes, backward=False):
    """Median milliseconds per call of one SDPA backend on shape s (time_runs' method); backward:
    of its backward alone (dQ, dK, dV from dO, the forward run once before, outside the timing)."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[s["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(0)

    def tensor(heads, seq):  # 0.5 + U(-1, 1), as the steps' inputs
        return (torch.rand(s["batch"], heads, seq, s["dim"], device="cuda", dtype=dtype,
                           generator=gen) * 2 - 0.5).requires_grad_(backward)
    # The backward's sets also hold dO (U(-1, 1), as make_dout's) and the forward's O.
    n_sets = input_sets(s, l2_bytes, backward)
    sets = [(tensor(s["heads"], s["seqlen_q"]), tensor(s["heads_kv"], s["seqlen_k"]),
             tensor(s["heads_kv"], s["seqlen_k"])) for _ in range(n_sets)]
    flush = torch.empty(2 * max(l2_bytes, 1 << 20), dtype=torch.uint8, device="cuda")
    gqa = {"enable_gqa": True} if s["heads_kv"] != s["heads"] else {}
    a, b = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    side = torch.cuda.Stream()
    forwards = []  # the backward's: (O, dO) of each set
    grads = []  # the backward's dQ, dK and dV of each call, kept: each set writes its own, as the
    # steps' sets do

    def calls():
        if backward:  # autograd runs each backward kernel on its forward's stream: `side`
            grads.clear()
            for (q, k, v), (o, do) in zip(sets, forwards):
                grads.append(torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
            return
        for q, k, v in sets:
            F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"], **gqa)
    with backend:
        if backward:  # the forwards, once, on the stream the backward is captured on
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for q, k, v in sets:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"], **gqa)
                    do = torch.rand(o.shape, device="cuda", dtype=dtype, generator=gen) * 2 - 1
                    forwards.append((o, do))
            torch.cuda.current_stream().wait_stream(side)
        calls()  # the backend runs this shape at all (else RuntimeError), and has warmed up
        run, method = calls, "one call at a time"
        try:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                calls()  # capture wants its first calls made on a side stream
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, **({"stream": side} if backward else {})):
                calls()
            run, method = graph.replay, "CUDA graph"
        except RuntimeError:
            torch.cuda.synchronize()

        def sample():
            if len(sets) == 1:
                flush.zero_()
            a.record()
            run()
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b) / len(sets)
        for _ in range(warmup):
            sample()
        times = sorted(sample() for _ in range(iters))
    n = len(times)
    return (times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])), method


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=["smoke", "seeds", "fa"], default="fa")
    ap.add_argument("--shapes", action="append", help="a shapes file (instead of --grid)")
    ap.add_argument("--backends", default="flash,efficient,cudnn,math",
                    help=f"comma separated, of {', '.join(BACKENDS)}")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "results.csv"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--suite", help="an attn_suite binary to read the CSV columns from (a GPU "
                                    "bundle's), instead of --build's step0_reference")
    ap.add_argument("--commit", help="the commit to record (default: git's)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds, from when PyTorch has found the GPU, after which no new shape "
                         "is started (exit status 3)")
    ap.add_argument("--require-gpu", action="store_true",
                    help="exit 1 instead of 0 where PyTorch or its GPU is missing")
    ap.add_argument("--backward", action="store_true",
                    help="time each backend's backward (rows torch_sdpa_<backend>_backward, "
                         "2.5 times the forward's FLOPs, as step 6's)")
    args = ap.parse_args()
    wanted = args.backends.split(",")
    if any(b not in BACKENDS for b in wanted):
        ap.error(f"--backends {args.backends}: each one of {', '.join(BACKENDS)}")

    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except ImportError as e:
        print(f"bench_torch: no PyTorch SDPA baselines: PyTorch (>= 2.3) is not importable ({e})")
        return 1 if args.require_gpu else 0
    if not torch.cuda.is_available():
        print("bench_torch: no PyTorch SDPA baselines: torch.cuda.is_available() is False")
        return 1 if args.require_gpu else 0
    torch.cuda.init()
    started = time.monotonic()  # --budget counts from here: importing PyTorch takes seconds

    import csv
    columns = csv_columns([args.suite, "run", "step0_reference"] if args.suite
                          else [os.path.join(args.build, "bin", "step0_reference")])
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                                           capture_output=True, text=True).stdout.strip()
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 0)
    kinds = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    shapes = ([s for path in args.shapes for s in read_shapes(path)] if args.shapes else
              [dict(s, heads_kv=s["heads"], dtype="fp16") for s in bench.grid(args.grid)])
    new_file = not os.path.exists(args.out) or os.path.getsize(args.out) == 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    left = 0
    with open(args.out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")  # as common/report.cpp's
        if new_file:
            w.writeheader()
        for s in shapes:
            if args.budget and time.monotonic() - started > args.budget:
                left += 1
                continue
            if s["causal"] and s["seqlen_q"] != s["seqlen_k"]:
                print(f"bench_torch: skip {bench.describe(s)}: SDPA's is_causal aligns top-left")
                continue
            for name in wanted:
                try:
                    ms, method = time_sdpa(torch, F, s, sdpa_kernel(kinds[name]), args.iters,
                                           args.warmup, l2_bytes, args.backward)
                except RuntimeError as e:  # a backend that does not support this shape or GPU
                    print(f"bench_torch: {name} {s['dtype']} {bench.describe(s)}: not available "
                          f"({str(e).splitlines()[0]})")
                    continue
                fl = bench.flops(s) * (BACKWARD_FLOPS if args.backward else 1)
                label = f"torch_sdpa_{name}" + ("_backward" if args.backward else "")
                row = {c: "" for c in columns}
                row.update(step=label, backend="gpu",
                           device=torch.cuda.get_device_name(0), dtype=s["dtype"],
                           batch=s["batch"], heads=s["heads"], heads_kv=s["heads_kv"],
                           seqlen_q=s["seqlen_q"], seqlen_k=s["seqlen_k"], dim=s["dim"],
                           causal=int(s["causal"]), dropout=0, scale=s["dim"] ** -0.5, seed=0,
                           iters=args.iters, time_ms=ms, tflops=fl / (ms * 1e-3) / 1e12, flops=fl,
                           checked=0, commit=commit or "unknown",
                           toolkit=f"torch {torch.__version__} cuda {torch.version.cuda}",
                           driver="", sm_clock_mhz=0, counted=0,
                           timestamp=datetime.datetime.now(datetime.timezone.utc)
                           .strftime("%Y-%m-%dT%H:%M:%SZ"))
                w.writerow({c: row[c] for c in columns})
                f.flush()
                print(f"bench_torch: {label:28s} {s['dtype']} {bench.describe(s):40s} "
                      f"{ms:.4f} ms {fl / (ms * 1e-3) / 1e12:8.2f} TFLOPS ({method})", flush=True)
    if left:
        print(f"bench_torch: the budget of {args.budget:g} s was spent with {left} shapes left")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
