#!/usr/bin/env python3
"""A step of the course inside a PyTorch model: a small multi-head attention layer whose
attention is flashsteps.attention, checked against the same layer computed with
torch.nn.functional.scaled_dot_product_attention.

    python python/examples/attention_layer.py [--step step3_fused] [--rung NAME] [--dtype bf16]

On a machine without a GPU the step's kernels run on the CPU backend (the project's SIMT
emulator): a few seconds for this small model. With a CUDA GPU and a GPU build, the layer's
tensors are on the GPU and the step runs there. Exit 0 when the two layers agree within the
project's gate (fp16: 1e-3 + 1e-3 |ref|; bf16: 8e-3 + 8e-3 |ref|), 1 otherwise."""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn

import flashsteps


class Attention(nn.Module):
    """Multi-head self-attention with grouped key/value heads (GQA) and a causal mask.

    attention(q, k, v) takes (batch, heads, seqlen, head_dim) tensors, the layout both
    flashsteps.attention and SDPA use."""

    def __init__(self, dim, heads, heads_kv, attention):
        super().__init__()
        self.heads, self.heads_kv, self.head_dim = heads, heads_kv, dim // heads
        self.q = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.kv = nn.Linear(dim, 2 * heads_kv * self.head_dim, bias=False)
        self.out = nn.Linear(heads * self.head_dim, dim, bias=False)
        self.attention = attention

    def forward(self, x):
        B, S, _ = x.shape
        q = self.q(x).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(B, S, 2, self.heads_kv, self.head_dim).permute(2, 0, 3, 1, 4)
        return self.out(self.attention(q, k, v).transpose(1, 2).reshape(B, S, -1))


def with_flashsteps(step, rung):
    def attention(q, k, v):
        o, _lse = flashsteps.attention(q, k, v, step, causal=True, rung=rung)
        return o
    return attention


def with_sdpa(q, k, v):
    # A square causal mask is the same aligned top-left (SDPA) or bottom-right (flashsteps).
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", default="step4_tensorcore",
                    choices=[s["name"] for s in flashsteps.steps()])
    ap.add_argument("--rung", default=None, help="a rung of the step's ladder (name or number)")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    args = ap.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() and flashsteps.gpu_built else "cpu"
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    ours = Attention(dim=256, heads=4, heads_kv=2, attention=with_flashsteps(args.step, args.rung))
    ours = ours.to(device=device, dtype=dtype)

    x = torch.randn(2, 100, 256, device=device).to(dtype)
    with torch.no_grad():
        y = ours(x)  # the whole layer, with the step's attention inside
        # Its attention on the layer's own 16-bit projections, against SDPA in float64 on the
        # same values: only attention differs.
        q = ours.q(x).view(2, 100, 4, 64).transpose(1, 2)
        k, v = ours.kv(x).view(2, 100, 2, 2, 64).permute(2, 0, 3, 1, 4)
        got = ours.attention(q, k, v)
        want = with_sdpa(q.double(), k.double(), v.double())
    tol = 1e-3 if args.dtype == "fp16" else 8e-3
    err = (got.double() - want).abs()
    ok = bool((err <= tol + tol * want.abs()).all()) and bool(torch.isfinite(y).all())
    print(f"{args.step}{f'[{args.rung}]' if args.rung else ''} on {device} ({args.dtype}): "
          f"max |attention - SDPA| = {err.max().item():.2e} (gate {tol:g} + {tol:g} |SDPA|): "
          f"{'PASSED' if ok else 'FAILED'}; layer output {tuple(y.shape)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
