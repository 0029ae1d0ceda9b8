"""Every step on PyTorch tensors against torch.nn.functional.scaled_dot_product_attention in
float64, over the test matrix (fp16 and bf16, head dims 64-128, lengths 1 to 1000, causal masks,
GQA, per-batch lengths, custom scales). SDPA's is_causal is aligned top-left, this project's
causal mask bottom-right (FlashAttention-2's convention), so the mask is built explicitly and
passed as attn_mask (scripts/check_sdpa.py's reference, shared). Skipped without PyTorch; CI
installs it (ATTN_WITH_TORCH=1), where a missing torch fails instead."""
import os
import sys

import pytest

import flashsteps
import reference
from conftest import STEPS, torch_or_skip
from test_matrix import CASES as MATRIX, case_id

# SDPA in float64 with the explicit mask, per-batch lengths and empty rows: the reference of the
# executables' SDPA gate.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from check_sdpa import reference as sdpa  # noqa: E402

# The test matrix's cases (tests/matrix.h, test_matrix.py) but those with dropout, whose dropped
# elements SDPA cannot be given (test_matrix.py checks those against NumPy).
CASES = [c for c in MATRIX if c[10] == 0]


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("step", STEPS)
def test_step_against_sdpa(step, case):
    torch = torch_or_skip()
    dtype, B, H, Hkv, Sq, Sk, D, causal, lq, lk, _, scale = case
    tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
    g = torch.Generator().manual_seed(3)
    # Drawn as (batch, seqlen, heads, dim), the layout of a model's projections, and transposed:
    # the binding takes any strides.
    q, k, v = ((0.5 + 2 * torch.rand(B, s, h, D, generator=g, dtype=torch.float64) - 1)
               .to(tdt).transpose(1, 2) for h, s in ((H, Sq), (Hkv, Sk), (Hkv, Sk)))
    assert not q.is_contiguous() or Sq == 1  # (a single row is contiguous either way)
    q.requires_grad_(True)  # a tensor of a model: o carries its graph (step 6's backward)
    o, lse = flashsteps.attention(q, k, v, step, causal=causal, seqlens_q=lq, seqlens_k=lk,
                                  scale=scale)
    assert isinstance(o, torch.Tensor) and o.dtype == tdt and o.device == q.device
    assert o.requires_grad and not lse.requires_grad
    o = o.detach()
    assert lse.dtype == torch.float32 and tuple(lse.shape) == (B, H, Sq)
    # float32 as the steps take it: 1 / sqrt(D) by default.
    scale = float(torch.tensor(D ** -0.5 if scale is None else scale, dtype=torch.float32))
    ref_o, ref_lse = sdpa(torch, torch.nn.functional, q.detach(), k, v, causal, lq, lk, scale)
    why = reference.gate(o.double().numpy(), lse.double().numpy(), ref_o.numpy(), ref_lse.numpy(),
                         dtype)
    assert why is None, f"{step}: {why}"


@pytest.mark.parametrize("step", ["step1_naive", "step3_fused", "step4_tensorcore"])
@pytest.mark.parametrize("dtype,causal,Hkv", [("fp16", True, 2), ("bf16", False, 4)])
def test_gradients_against_sdpa_autograd(step, dtype, causal, Hkv):
    """flashsteps.attention on tensors that require grad backpropagates through step 6: dQ, dK and
    dV of a loss on O, against SDPA's autograd in float64 (GQA by repeat_interleave, whose
    gradient sums each group; Sq = Sk, so SDPA's top-left causal mask is this project's)."""
    torch = torch_or_skip()
    tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
    g = torch.Generator().manual_seed(5)
    B, H, S, D = 2, 4, 40, 64
    q, k, v = ((0.5 + 2 * torch.rand(B, h, S, D, generator=g, dtype=torch.float64) - 1)
               .to(tdt).requires_grad_() for h in (H, Hkv, Hkv))
    do = (2 * torch.rand(B, H, S, D, generator=g, dtype=torch.float64) - 1).to(tdt)
    o, _lse = flashsteps.attention(q, k, v, step, causal=causal)
    (o * do).sum().backward()
    ref = [x.detach().double().requires_grad_() for x in (q, k, v)]
    group = H // Hkv
    o_ref = torch.nn.functional.scaled_dot_product_attention(
        ref[0], ref[1].repeat_interleave(group, 1), ref[2].repeat_interleave(group, 1),
        is_causal=causal)
    (o_ref * do.double()).sum().backward()
    for name, got, want in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad),
                               (r.grad for r in ref)):
        assert got.dtype == tdt and got.shape == want.shape, name
        err = float((got.double() - want).abs().max())
        assert err <= 0.02 * float(want.abs().max()), (step, name, err)
    with pytest.raises(ValueError, match="counters=True counts a forward run"):
        flashsteps.attention(q, k, v, step, counters=True)
    # A head dim the backward is not built for is refused before the forward runs.
    q32 = torch.zeros(1, 2, 8, 32, dtype=tdt, requires_grad=True)
    with pytest.raises(ValueError, match="supports head dims 64, 80, 96, 128, not 32"):
        flashsteps.attention(q32, q32, q32, step)
