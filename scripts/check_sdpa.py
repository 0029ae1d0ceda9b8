#!/usr/bin/env python3
"""The PyTorch gate: every step against torch.nn.functional.scaled_dot_product_attention.

For fp16 and bf16, head dims 64/80/96/128, causal masks, GQA, per-batch key and query lengths, it
writes q, k, v (drawn with torch) to a safetensors file, runs each step on it (--load/--save), and
compares the step's o with SDPA computed in float64 on the same inputs, and its lse with
torch.logsumexp of the same masked scores.

Masks: PyTorch's is_causal is aligned top-left (row i sees keys 0..i), while this project aligns
causal masks bottom-right per batch (the batch's last query sees all its keys), so the mask is
built here explicitly and passed as attn_mask, with the per-batch lengths folded in.

Gate (elementwise, as torch.testing's rtol/atol): fp16 |o - sdpa| <= 1e-3 |sdpa| + 1e-3;
bf16 8e-3 |sdpa| + 8e-3 (bf16 keeps 8 significant bits to fp16's 11; see common/check.h).
lse: |lse - ref| <= 1e-3 max(1, |ref|), and -inf exactly for rows that see no key.

Exit 0: all passed; 1: a step failed the gate; 77: torch is not installed (skipped, reason
printed), unless ATTN_WITH_TORCH=1 asked for it (then 1: CI must not skip the gate); 2: bad usage.
"""
import argparse
import os
import subprocess
import sys
import tempfile

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ["step0_reference", "step1_naive", "step2_tiled", "step3_fused", "step4_tensorcore",
         "step5_warpspecialized"]
GATE = {"fp16": (1e-3, 1e-3), "bf16": (8e-3, 8e-3)}  # (rtol, atol)

# (dtype, batch, heads, heads_kv, seqlen_q, seqlen_k, dim, causal, seqlens_q, seqlens_k)
CASES = [
    ("fp16", 2, 4, 4, 40, 70, 64, True, None, None),
    ("fp16", 2, 4, 2, 33, 90, 80, False, None, [90, 17]),
    ("fp16", 3, 6, 2, 65, 50, 96, True, [65, 7, 0], [50, 50, 9]),
    ("fp16", 1, 2, 1, 100, 100, 128, True, None, None),
    ("bf16", 2, 2, 1, 70, 40, 64, True, [70, 20], None),
    ("bf16", 1, 4, 4, 17, 129, 80, True, None, None),
    ("bf16", 2, 3, 3, 50, 60, 96, False, [1, 50], [60, 0]),
    ("bf16", 1, 2, 2, 64, 96, 128, True, None, [33]),
]


def reference(torch, F, q, k, v, causal, lq, lk, scale):
    """SDPA in float64 with an explicit bottom-right causal mask and per-batch lengths."""
    B, H, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    k = k.repeat_interleave(H // Hkv, dim=1)  # GQA: query head h reads kv head h // (H / Hkv)
    v = v.repeat_interleave(H // Hkv, dim=1)
    i = torch.arange(Sq)[:, None]
    j = torch.arange(Sk)[None, :]
    masks = []
    for b in range(B):
        len_q = Sq if lq is None else lq[b]
        len_k = Sk if lk is None else lk[b]
        m = (i < len_q) & (j < len_k)
        if causal:
            m &= j <= i + (len_k - len_q)
        masks.append(m)
    mask = torch.stack(masks)[:, None]  # [B, 1, Sq, Sk]
    seen = mask.any(dim=-1)  # rows with at least one visible key
    # SDPA gives NaN for a row that sees nothing; such rows are O = 0, LSE = -inf by definition.
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    o = torch.where(seen[..., None], o, torch.zeros_like(o))
    s = (q @ k.transpose(-1, -2)) * scale
    lse = torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1)
    return o, lse


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.environ.get("ATTN_BIN_DIR", os.path.join(ROOT, "build", "bin")))
    ap.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "auto"])
    ap.add_argument("--steps", nargs="*", default=STEPS)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from safetensors.torch import load_file, save_file
    except ImportError as e:
        if os.environ.get("ATTN_WITH_TORCH") == "1":
            print(f"check_sdpa: ATTN_WITH_TORCH=1 but torch cannot be imported: {e}")
            return 1
        print(f"check_sdpa: skipped: {e} (install with ATTN_WITH_TORCH=1 scripts/setup.sh --python)")
        return SKIP

    torch.manual_seed(0)
    failures = 0
    for case in CASES:
        dtype, B, H, Hkv, Sq, Sk, D, causal, lq, lk = case
        tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
        # 0.5 + U(-1, 1): a common component in every score, as the project's own inputs.
        q, k, v = (0.5 + 2 * torch.rand(B, h, s, D, dtype=torch.float64) - 1
                   for h, s in ((H, Sq), (Hkv, Sk), (Hkv, Sk)))
        q, k, v = q.to(tdt), k.to(tdt), v.to(tdt)
        ref_o, ref_lse = reference(torch, F, q, k, v, causal, lq, lk, D ** -0.5)
        rtol, atol = GATE[dtype]
        for step in args.steps:
            with tempfile.TemporaryDirectory() as tmp:
                src = os.path.join(tmp, "in.safetensors")
                out = os.path.join(tmp, "out.safetensors")
                t = {"q": q.contiguous(), "k": k.contiguous(), "v": v.contiguous()}
                if lq is not None:
                    t["seqlens_q"] = torch.tensor(lq, dtype=torch.int32)
                if lk is not None:
                    t["seqlens_k"] = torch.tensor(lk, dtype=torch.int32)
                save_file(t, src)
                cmd = [os.path.join(args.bin, step), "--backend", args.backend, "--load", src,
                       "--save", out, "--no-check", "--iters", "1", "--warmup", "0", "--quiet"]
                if causal:
                    cmd.append("--causal")
                r = subprocess.run(cmd, capture_output=True, text=True)
                name = (f"{step} {dtype} B={B} H={H}/{Hkv} Sq={Sq} Sk={Sk} D={D}"
                        f"{' causal' if causal else ''}"
                        f"{f' seqlens_q={lq}' if lq else ''}{f' seqlens_k={lk}' if lk else ''}")
                if r.returncode != 0:
                    print(f"FAIL {name}: exit {r.returncode}: {(r.stderr or r.stdout).strip()}")
                    failures += 1
                    continue
                got = load_file(out)
                o = got["o"].to(torch.float64)
                lse = got["lse"].to(torch.float64)
                err = (o - ref_o).abs()
                o_ok = bool((err <= rtol * ref_o.abs() + atol).all())
                inf_ok = torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
                fin = torch.isfinite(ref_lse)
                lse_err = (lse[fin] - ref_lse[fin]).abs()
                lse_ok = bool((lse_err <= 1e-3 * ref_lse[fin].abs().clamp(min=1)).all())
                ok = o_ok and inf_ok and lse_ok
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {name}: max|o-sdpa| {err.max().item():.2e} "
                      f"(gate {rtol:g}|ref| + {atol:g}), max|lse-ref| "
                      f"{lse_err.max().item() if lse_err.numel() else 0:.2e}"
                      f"{'' if inf_ok else ', -inf rows differ'}")
    print(f"check_sdpa: {'PASSED' if failures == 0 else f'{failures} FAILED'} "
          f"(torch {torch.__version__}, backend {args.backend})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
