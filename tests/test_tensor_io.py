"""--load / --save against an independent reference: attention written here in NumPy float64.

Random q, k, v (drawn here, not by the project) go into a safetensors file written by the
`safetensors` package; each step runs on them on the CPU backend and saves o and lse, which are
compared with the NumPy attention below. fp16 only: NumPy has no bfloat16 (the PyTorch gate,
scripts/check_sdpa.py, covers bf16).
"""
import os
import subprocess
import tempfile
import unittest

import numpy as np
from safetensors.numpy import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ATTN_BIN_DIR", os.path.join(ROOT, "build", "bin"))

# (batch, heads, heads_kv, seqlen_q, seqlen_k, dim, causal, seqlens_q, seqlens_k)
CASES = [
    (2, 4, 2, 37, 70, 64, True, [37, 5], [70, 0]),
    (1, 2, 2, 65, 65, 128, False, None, None),
    (2, 3, 1, 50, 20, 80, True, None, [20, 7]),
    (3, 2, 2, 33, 33, 96, True, [0, 33, 12], None),
]


def attention(q, k, v, causal, seqlens_q, seqlens_k, scale):
    """O and LSE in float64, as the formula reads; rows that see no key: O = 0, LSE = -inf."""
    B, H, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    o = np.zeros((B, H, Sq, D))
    lse = np.full((B, H, Sq), -np.inf)
    for b in range(B):
        lq = Sq if seqlens_q is None else seqlens_q[b]
        lk = Sk if seqlens_k is None else seqlens_k[b]
        i = np.arange(Sq)[:, None]
        j = np.arange(Sk)[None, :]
        visible = (i < lq) & (j < lk)
        if causal:
            visible &= j <= i + (lk - lq)  # bottom-right: the batch's last query sees every key
        for h in range(H):
            kh = h // (H // Hkv)
            s = scale * q[b, h].astype(np.float64) @ k[b, kh].astype(np.float64).T
            s = np.where(visible, s, -np.inf)
            rows = visible.any(axis=1)
            m = np.where(rows, s.max(axis=1), 0.0)
            p = np.exp(s - m[:, None])
            l = p.sum(axis=1)
            o[b, h, rows] = (p[rows] / l[rows, None]) @ v[b, kh].astype(np.float64)
            lse[b, h, rows] = m[rows] + np.log(l[rows])
    return o, lse


class NumpyReference(unittest.TestCase):
    def run_step(self, step):
        rng = np.random.default_rng(12345)
        for (B, H, Hkv, Sq, Sk, D, causal, lq, lk) in CASES:
            with self.subTest(case=(B, H, Hkv, Sq, Sk, D, causal, lq, lk)), \
                    tempfile.TemporaryDirectory() as tmp:
                t = {"q": rng.uniform(-0.5, 1.5, (B, H, Sq, D)).astype(np.float16),
                     "k": rng.uniform(-0.5, 1.5, (B, Hkv, Sk, D)).astype(np.float16),
                     "v": rng.uniform(-0.5, 1.5, (B, Hkv, Sk, D)).astype(np.float16)}
                if lq is not None:
                    t["seqlens_q"] = np.array(lq, dtype=np.int32)
                if lk is not None:
                    t["seqlens_k"] = np.array(lk, dtype=np.int32)
                src, out = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
                save_file(t, src)
                cmd = [os.path.join(BIN, step), "--backend", "cpu", "--load", src, "--save", out]
                r = subprocess.run(cmd + (["--causal"] if causal else []),
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                got = load_file(out)
                self.assertEqual(got["o"].dtype, np.float16)
                self.assertTrue(np.array_equal(got["q"], t["q"]))  # the inputs went through as is
                ref_o, ref_lse = attention(t["q"], t["k"], t["v"], causal, lq, lk, D ** -0.5)
                o = got["o"].astype(np.float64)
                err = np.abs(o - ref_o)
                # The project's fp16 contract: |O - ref| <= 1e-3 + 1e-3 |ref|.
                self.assertTrue(np.all(err <= 1e-3 + 1e-3 * np.abs(ref_o)),
                                f"max |O - ref| {err.max():.3g}")
                lse = got["lse"].astype(np.float64)
                self.assertTrue(np.array_equal(np.isinf(lse), np.isinf(ref_lse)))
                fin = np.isfinite(ref_lse)
                self.assertTrue(np.all(np.abs(lse[fin] - ref_lse[fin])
                                       <= 1e-3 * np.maximum(1, np.abs(ref_lse[fin]))))

    def test_step0_reference(self):
        self.run_step("step0_reference")

    def test_step1_naive(self):
        self.run_step("step1_naive")

    def test_step2_tiled(self):
        self.run_step("step2_tiled")

    def test_step3_fused(self):
        self.run_step("step3_fused")

    def test_step4_tensorcore(self):
        self.run_step("step4_tensorcore")

    def test_step5_warpspecialized(self):
        self.run_step("step5_warpspecialized")


if __name__ == "__main__":
    unittest.main()
