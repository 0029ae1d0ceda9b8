#!/usr/bin/env python3
"""Training with the course's kernels: a one-layer causal transformer learns a copy task twice,
from the same initial weights on the same batches, once with flashsteps.attention (the chosen
forward step, and step 6 for its gradients) and once with torch's
scaled_dot_product_attention, and the two loss curves are compared.

    python python/examples/train_attention.py [--step step4_tensorcore] [--steps 200] [--dtype bf16]

The task: 16 random tokens, then the same 16 again, each replaced by a random token with
probability 1/4; the loss is the cross-entropy of predicting the second half, which a model can
only do by attending 16 positions back, and which cannot fall below the noise's entropy. The attention runs in
the 16-bit dtype (the kernels' inputs and outputs), everything else in float32. Without a GPU the
kernels run on the CPU backend (the project's SIMT emulator): about half a minute for 200 steps.
Exit 0 when both models learn (the last 20 steps' mean loss under half the first's) and the
flashsteps curve stays within 1% of SDPA's over the last 20 steps, 1 otherwise."""
import argparse
import copy
import sys

import torch
import torch.nn.functional as F
from torch import nn

import flashsteps

VOCAB, HALF, DIM, HEADS, HEADS_KV = 8, 16, 128, 2, 1


class Model(nn.Module):
    """Token and position embeddings, one causal multi-head attention layer (GQA: HEADS query
    heads share HEADS_KV key/value heads) with a residual connection, and a linear read-out."""

    def __init__(self, attention, dtype):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.tokens = nn.Embedding(VOCAB, DIM)
        self.positions = nn.Embedding(2 * HALF, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.q = nn.Linear(DIM, HEADS * self.head_dim, bias=False)
        self.kv = nn.Linear(DIM, 2 * HEADS_KV * self.head_dim, bias=False)
        self.out = nn.Linear(HEADS * self.head_dim, DIM, bias=False)
        self.readout = nn.Linear(DIM, VOCAB)
        self.attention, self.dtype = attention, dtype

    def forward(self, tokens):
        B, S = tokens.shape
        x = self.tokens(tokens) + self.positions(torch.arange(S, device=tokens.device))
        h = self.norm(x)
        q = self.q(h).view(B, S, HEADS, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(B, S, 2, HEADS_KV, self.head_dim).permute(2, 0, 3, 1, 4)
        o = self.attention(q.to(self.dtype), k.to(self.dtype), v.to(self.dtype)).float()
        x = x + self.out(o.transpose(1, 2).reshape(B, S, -1))
        return self.readout(x)


def with_flashsteps(step):
    def attention(q, k, v):
        o, _lse = flashsteps.attention(q, k, v, step, causal=True)  # differentiable: step 6
        return o
    return attention


def with_sdpa(q, k, v):
    # A square causal mask is the same aligned top-left (SDPA) or bottom-right (flashsteps).
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def batch(generator, size):
    first = torch.randint(0, VOCAB, (size, HALF), generator=generator)
    noise = torch.randint(0, VOCAB, (size, HALF), generator=generator)
    second = torch.where(torch.rand(size, HALF, generator=generator) < 0.25, noise, first)
    return torch.cat([first, second], dim=1)


def loss_of(model, tokens):
    logits = model(tokens[:, :-1])  # position t predicts token t + 1; score the second half
    return F.cross_entropy(logits[:, HALF - 1:].reshape(-1, VOCAB), tokens[:, HALF:].reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", default="step4_tensorcore",
                    choices=[s["name"] for s in flashsteps.steps() if not s.get("backward")])
    ap.add_argument("--steps", type=int, default=200, help="optimiser steps (at least 40)")
    ap.add_argument("--dtype", default="bf16", choices=["fp16", "bf16"])
    args = ap.parse_args()
    if args.steps < 40:
        ap.error(f"--steps {args.steps}: at least 40 (the comparison reads the last 20)")

    torch.manual_seed(0)
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    ours = Model(with_flashsteps(args.step), dtype)
    theirs = copy.deepcopy(ours)
    theirs.attention = with_sdpa
    optimisers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ours, theirs)]
    data = torch.Generator().manual_seed(1)
    curves = ([], [])
    print(f"{'step':>5} {args.step + ' loss':>24} {'SDPA loss':>10}")
    for step in range(args.steps):
        tokens = batch(data, 16)
        for model, optimiser, curve in zip((ours, theirs), optimisers, curves):
            optimiser.zero_grad()
            loss = loss_of(model, tokens)
            loss.backward()
            optimiser.step()
            curve.append(loss.item())
        if step % 25 == 0 or step == args.steps - 1:
            print(f"{step:>5} {curves[0][-1]:>24.4f} {curves[1][-1]:>10.4f}")

    start = [sum(c[:20]) / 20 for c in curves]
    end = [sum(c[-20:]) / 20 for c in curves]
    learned = all(e < 0.5 * s for s, e in zip(start, end))
    close = abs(end[0] - end[1]) <= 0.01 * end[1]
    print(f"mean loss of the last 20 steps: {end[0]:.4f} ({args.step}), {end[1]:.4f} (SDPA), "
          f"from {start[0]:.4f} and {start[1]:.4f}")
    if learned and close:
        print("PASSED: both learned, and the curves agree within 1%")
        return 0
    print("FAILED: " + ("the models did not learn" if not learned else
                        "the flashsteps curve is more than 1% from SDPA's"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
