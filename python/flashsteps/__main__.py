"""python -m flashsteps [--help]: the steps, their rungs and what this build holds.
python -m flashsteps benchmark STEP [options]: a step timed on the GPU beside SDPA's backends."""

import argparse
import sys

from . import _core


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(message)  # one line, exit 2, as every other refusal


def benchmark(argv: list[str]) -> int:
    """The benchmark's rows as a table (flashsteps.benchmark); bad input: one line, exit 2."""
    from ._benchmark import benchmark as run

    parser = _Parser(
        prog="python -m flashsteps benchmark",
        description="Times a step or rung of the course on the GPU with CUDA events, beside "
                    "PyTorch's SDPA backends on the same CUDA tensors (flashsteps.benchmark).")
    parser.add_argument("steps", nargs="+", metavar="STEP",
                        help="a step's name, its number (4), or a rung's label (4.3); several "
                             "are timed one after another, SDPA's backends once, after them")
    parser.add_argument("--rung", help="a rung of the step, by name or number")
    parser.add_argument("--variant", help="step 5's or 6's sm80 or sm90a")
    parser.add_argument("--config", help="one of step 4's tile configurations")
    for flag, default in (("--batch", 1), ("--heads", 16), ("--seqlen", 4096), ("--dim", 128),
                          ("--iters", 20), ("--warmup", 3)):
        parser.add_argument(flag, type=int, default=default, help=f"default {default}")
    parser.add_argument("--heads-kv", type=int, help="default: --heads (GQA when fewer)")
    parser.add_argument("--seqlen-k", type=int, help="default: --seqlen")
    parser.add_argument("--dtype", default="bf16", help="fp16 or bf16 (default)")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--sdpa", default="flash,efficient,cudnn",
                        help="SDPA backends beside it, comma-separated ('' for none)")
    try:
        a = parser.parse_args(argv)
        sdpa = tuple(b for b in a.sdpa.split(",") if b)
        rows = []
        for i, step in enumerate(a.steps):
            rows += run(step, batch=a.batch, heads=a.heads, heads_kv=a.heads_kv,
                        seqlen=a.seqlen, seqlen_k=a.seqlen_k, dim=a.dim, dtype=a.dtype,
                        causal=a.causal, rung=a.rung, variant=a.variant, config=a.config,
                        sdpa=sdpa if i == len(a.steps) - 1 else (), warmup=a.warmup,
                        iters=a.iters)
    except (ValueError, TypeError) as e:
        print(f"python -m flashsteps benchmark: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    r = rows[0]
    print(f"flashsteps.benchmark on {r['device']}: B={r['batch']} H={r['heads']}/{r['heads_kv']} "
          f"Sq={r['seqlen_q']} Sk={r['seqlen_k']} D={r['dim']} {r['dtype']}"
          f"{' causal' if r['causal'] else ''}; median ms per call, CUDA events")
    print(f"{'kernel':<28} {'ms':>9} {'TFLOPS':>8}  note")
    for r in rows:
        ms = f"{r['ms']:.4f}" if r["ms"] else "-"
        tf = f"{r['tflops']:.1f}" if r["tflops"] else "-"
        print(f"{r['kernel']:<28} {ms:>9} {tf:>8}  {r['note']}")
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "benchmark":
        return benchmark(argv[1:])
    if argv and argv[0] not in ("-h", "--help"):
        print(f"python -m flashsteps: unknown argument {argv[0]!r} (--help, or benchmark STEP "
              "...)", file=sys.stderr)
        return 2
    print("flashsteps: FlashAttention in six steps, from Python\n")
    print("    o, lse = flashsteps.attention(q, k, v, step='step4_tensorcore', causal=False,")
    print("                                  scale=None, seqlens_q=None, seqlens_k=None,")
    print("                                  dropout=0.0, seed=0, rung=None, ...)")
    print("\nq (batch, heads, seqlen_q, head_dim); k, v (batch, heads_kv, seqlen_k, head_dim).")
    print("Host arrays run on the CPU backend, CUDA tensors on their GPU."
          " help(flashsteps.attention) says more.\n")
    for s in _core.steps():
        what = "CPU only, plain C++" if not s["kernels"] else (
            f"kernels for {s['min_arch']} and newer" if s["min_arch"] else
            "kernels for any GPU the build targets")
        dims = ", ".join(map(str, s["head_dims"])) or "any"
        print(f"{s['name']}  ({what}; head dims {dims})")
        if s["variants"]:
            print(f"    variants: {', '.join(s['variants'])}")
        number = s["name"][len("step")]
        for i, (name, idea) in enumerate(s["rungs"], 1):
            print(f"    rung {number}.{i} {name!r}: {idea}")
    archs = [f"sm_{a}" for a in _core.cuda_architectures.split(",") if a]
    gpu = f"GPU code for {', '.join(archs)}" if archs else "no GPU code (CPU backend only)"
    print(f"\nthis build: {gpu}; CUDA toolkit {_core.cuda_toolkit}; commit {_core.commit}")
    print("which GPU runs which step: docs/gpus.md")
    print("on a GPU: python -m flashsteps benchmark STEP --help (a step beside SDPA's backends)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
