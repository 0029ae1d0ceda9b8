"""Attention written here in NumPy float64, independent of the project's C++: the oracle of the
binding's tests. Dropout follows the project's contract (common/dropout.h, docs/reference.md):
Philox4x32-10 keyed by the 64-bit seed, counter (j / 4, i, h, b), word j % 4; an element is kept
when its word is >= round(p * 2^32), and a kept one is scaled by 1 / (1 - p) (float32)."""
import numpy as np

MASK32 = np.uint64(0xFFFFFFFF)
# Philox4x32's multipliers and Weyl key increments (Salmon et al., "Parallel random numbers: as
# easy as 1, 2, 3", SC'11; Random123's philox.h).
M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)


def philox4x32_10(ctr, key):
    """Philox4x32-10 on arrays: ctr a 4-tuple and key a 2-tuple of uint32-valued arrays
    (broadcast together). Returns the four output words as uint64 arrays holding 32-bit values."""
    c = [np.asarray(x, dtype=np.uint64) & MASK32 for x in ctr]
    k0, k1 = (np.asarray(x, dtype=np.uint64) & MASK32 for x in key)
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = M0 * c[0], M1 * c[2]  # 32 x 32 -> 64 bits: no overflow in uint64
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & MASK32,
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & MASK32]
    return c


def dropout_factor(p, seed, b, h, Sq, Sk):
    """(Sq, Sk) float64: 0 for a dropped element of (b, h), 1 / (1 - p) for a kept one."""
    p32 = np.float32(p)
    t = float(p32) * 4294967296.0
    threshold = 0xFFFFFFFF if t >= 4294967295.0 else int(t + 0.5)
    i = np.arange(Sq, dtype=np.uint64)[:, None]
    j = np.arange(Sk, dtype=np.uint64)[None, :]
    words = philox4x32_10((j >> np.uint64(2), i, np.uint64(h), np.uint64(b)),
                          (np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)))
    word = np.choose((j % np.uint64(4)).astype(np.int64) + np.zeros_like(i, dtype=np.int64),
                     words)
    scale = np.float32(1) / (np.float32(1) - p32)
    return np.where(word >= threshold, float(scale), 0.0)


def round_to(x, dtype):
    """x rounded to fp16 or bf16 (round to nearest even), as float64."""
    x = np.asarray(x)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float64)
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return (bits << np.uint64(16)).astype(np.uint32).view(np.float32).astype(np.float64)


def softmax(q, k, causal=False, seqlens_q=None, seqlens_k=None, scale=None):
    """For each (b, h): (b, h, its key/value head, P (Sq, Sk) and LSE (Sq,) in float64), from
    float64 q (B, H, Sq, D) and k (B, Hkv, Sk, D). Causal masks align bottom-right per batch; a
    row that sees no key has P = 0 and LSE = -inf."""
    B, H, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    # float32, as the steps take it: 1 / sqrt(D) by default.
    scale = float(np.float32(1) / np.sqrt(np.float32(D)) if scale is None else np.float32(scale))
    i = np.arange(Sq)[:, None]
    j = np.arange(Sk)[None, :]
    for b in range(B):
        lq = Sq if seqlens_q is None else seqlens_q[b]
        lk = Sk if seqlens_k is None else seqlens_k[b]
        visible = (i < lq) & (j < lk)
        if causal:
            visible &= j <= i + (lk - lq)
        rows = visible.any(axis=1)
        for h in range(H):
            kh = h // (H // Hkv)
            s = np.where(visible, scale * (q[b, h] @ k[b, kh].T), -np.inf)
            m = np.where(rows, s.max(axis=1), 0.0)
            e = np.exp(s - m[:, None])
            l = e.sum(axis=1)
            pr = np.divide(e, l[:, None], out=np.zeros_like(e), where=rows[:, None])
            lse = np.full(Sq, -np.inf)
            lse[rows] = m[rows] + np.log(l[rows])
            yield b, h, kh, pr, lse


def attention(q, k, v, causal=False, seqlens_q=None, seqlens_k=None, scale=None, dropout=0.0,
              seed=0):
    """O and LSE in float64 from float64 q (B, H, Sq, D), k and v (B, Hkv, Sk, D) (softmax()
    says how rows are masked)."""
    B, H, Sq, D = q.shape
    o = np.zeros((B, H, Sq, D))
    lse = np.full((B, H, Sq), -np.inf)
    for b, h, kh, pr, row_lse in softmax(q, k, causal, seqlens_q, seqlens_k, scale):
        if dropout > 0:
            pr = pr * dropout_factor(dropout, seed, b, h, Sq, k.shape[2])
        o[b, h] = pr @ v[b, kh]
        lse[b, h] = row_lse
    return o, lse


# The project's gate (common/check.h): fp16 |O - ref| <= 1e-3 + 1e-3 |ref|; bf16 8e-3 + 8e-3 |ref|;
# LSE |lse - ref| <= 1e-3 max(1, |ref|) and -inf exactly where the reference has -inf.
GATE = {"fp16": 1e-3, "bf16": 8e-3}


def gate(o, lse, ref_o, ref_lse, dtype):
    """None when o and lse pass the gate, else one line naming the worst element."""
    o = np.asarray(o, dtype=np.float64)
    lse = np.asarray(lse, dtype=np.float64)
    if o.shape != ref_o.shape or lse.shape != ref_lse.shape:
        return f"shapes o {o.shape} lse {lse.shape}, expected {ref_o.shape} {ref_lse.shape}"
    tol = GATE[dtype]
    err = np.abs(o - ref_o)
    bad = ~(err <= tol + tol * np.abs(ref_o))  # NaN is bad
    if bad.any():
        at = tuple(int(x) for x in np.argwhere(bad)[0])
        return (f"O{list(at)} = {o[at]!r}, reference {ref_o[at]!r} "
                f"({int(bad.sum())} elements outside {tol:g} + {tol:g}|ref|)")
    if not np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)):
        at = tuple(int(x) for x in np.argwhere(np.isneginf(lse) != np.isneginf(ref_lse))[0])
        return f"LSE{list(at)} = {lse[at]!r}, reference {ref_lse[at]!r}"
    fin = np.isfinite(ref_lse)
    with np.errstate(invalid="ignore"):  # -inf - -inf where both have no key
        lerr = np.abs(lse - ref_lse)
    bad = fin & ~(lerr <= 1e-3 * np.maximum(1.0, np.abs(ref_lse)))
    if bad.any():
        at = tuple(int(x) for x in np.argwhere(bad)[0])
        return f"LSE{list(at)} = {lse[at]!r}, reference {ref_lse[at]!r}"
    return None


def attention_backward(q, k, v, dout, causal=False, seqlens_q=None, seqlens_k=None, scale=None,
                       dropout=0.0, seed=0):
    """dQ, dK and dV in float64: the gradients of sum(dout * O) with respect to float64 q, k and
    v, O as attention() computes it (dK and dV summed over each key/value head's query heads)."""
    D, Sq, Sk = q.shape[3], q.shape[2], k.shape[2]
    scale = float(np.float32(1) / np.sqrt(np.float32(D)) if scale is None else np.float32(scale))
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for b, h, kh, p, _lse in softmax(q, k, causal, seqlens_q, seqlens_k, scale):
        z = dropout_factor(dropout, seed, b, h, Sq, Sk) if dropout > 0 else np.ones_like(p)
        dp = (dout[b, h] @ v[b, kh].T) * z
        ds = p * (dp - (p * dp).sum(axis=1)[:, None])
        dq[b, h] = scale * ds @ k[b, kh]
        dk[b, kh] += scale * ds.T @ q[b, h]
        dv[b, kh] += (p * z).T @ dout[b, h]
    return dq, dk, dv
