"""python -m flashsteps [--help]: the steps, their rungs and what this build holds."""

import sys

from . import _core


def main(argv: list[str]) -> int:
    if argv and argv[0] not in ("-h", "--help"):
        print(f"python -m flashsteps: unknown argument {argv[0]!r} (only --help)", file=sys.stderr)
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
