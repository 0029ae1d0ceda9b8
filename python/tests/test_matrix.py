"""Every step, called from Python on NumPy arrays, against attention in NumPy float64
(reference.py) over the test matrix: fp16 and bf16; head dims 64, 80, 96, 128; sequence lengths
1, 17, 129 and 1000, Sq != Sk both ways; causal masks; per-batch lengths; GQA; dropout up to
0.999; custom scales. The cases are the C++ tests' (tests/matrix.h), here through the binding:
arrays in, arrays out, an oracle that shares no code with the project."""
import numpy as np
import pytest

import flashsteps
import reference
from conftest import STEPS, inputs

# The C++ tests' matrix (tests/matrix.h), case for case: (dtype, B, H, Hkv, Sq, Sk, D, causal,
# seqlens_q, seqlens_k, dropout, scale). Each case mixes several features; together they cover
# every feature in both dtypes and every head dim, with shapes that are no multiple of any tile.
CASES = [
    # Single query and single key.
    ("fp16", 1, 2, 2, 1, 1, 64, False, None, None, 0.0, None),
    ("bf16", 1, 2, 1, 1, 17, 80, True, None, None, 0.0, None),
    ("fp16", 2, 2, 2, 17, 1, 96, True, None, None, 0.0, None),  # Sq > Sk causal: rows see nothing
    # Odd lengths, not multiples of any tile.
    ("bf16", 1, 2, 2, 17, 17, 128, False, None, None, 0.0, None),
    ("fp16", 2, 4, 2, 129, 129, 64, True, None, None, 0.0, None),  # GQA
    ("bf16", 1, 2, 2, 129, 129, 80, False, None, None, 0.2, None),  # dropout
    ("fp16", 1, 3, 1, 129, 17, 96, False, None, None, 0.0, None),  # Sq != Sk, GQA 3:1
    ("fp16", 1, 2, 2, 17, 129, 128, True, None, None, 0.0, None),  # causal, Sq < Sk
    # Per-batch key lengths, including an empty batch.
    ("bf16", 3, 2, 2, 33, 129, 64, False, None, [129, 0, 50], 0.0, None),
    ("fp16", 3, 2, 1, 65, 100, 96, True, None, [100, 1, 0], 0.1, None),
    # Long: 1000 keys (and fewer queries: tests/matrix.h).
    ("fp16", 1, 2, 1, 300, 1000, 64, True, None, None, 0.0, None),
    ("bf16", 1, 1, 1, 200, 1000, 128, False, None, None, 0.1, None),
    ("fp16", 2, 2, 2, 100, 1000, 80, False, None, [1000, 999], 0.0, None),
    # Dropout 0.999: almost every key dropped, the kept ones scaled by 1000.
    ("fp16", 1, 2, 1, 129, 129, 64, False, None, None, 0.999, None),  # GQA
    ("bf16", 1, 2, 1, 100, 200, 128, True, None, None, 0.999, None),
    # Per-batch query lengths, causal masks aligned to each batch's own lengths.
    ("fp16", 3, 2, 1, 65, 100, 64, True, [65, 10, 40], [100, 30, 0], 0.0, None),
    ("bf16", 2, 2, 1, 129, 129, 128, False, [0, 77], None, 0.0, None),  # GQA
    ("fp16", 2, 3, 1, 150, 90, 96, True, [1, 149], None, 0.1, None),
    ("bf16", 1, 2, 2, 100, 40, 80, True, [33], None, 0.0, None),
    # A custom scale, and a negative one (zero-filled keys past a partial tile would win).
    ("bf16", 1, 2, 2, 40, 140, 96, True, None, None, 0.0, 0.3),
    ("fp16", 1, 2, 1, 33, 70, 64, False, None, None, 0.0, -0.2),  # GQA
]


def case_id(c):
    dtype, B, H, Hkv, Sq, Sk, D, causal, lq, lk, p, scale = c
    return (f"{dtype}-B{B}-H{H}x{Hkv}-Sq{Sq}-Sk{Sk}-D{D}{'-causal' if causal else ''}"
            f"{'-lq' if lq else ''}{'-lk' if lk else ''}{f'-p{p}' if p else ''}"
            f"{f'-scale{scale}' if scale else ''}")


def arrays(case, seed=1):
    """The inputs as the binding takes them (fp16 arrays, or float32 ones rounded to bf16 by
    the binding) and the same values in float64 for the reference."""
    dtype, B, H, Hkv, Sq, Sk, D = case[:7]
    rng = np.random.default_rng(seed)
    exact = [reference.round_to(x, dtype) for x in inputs(rng, B, H, Hkv, Sq, Sk, D)]
    given = [x.astype(np.float16 if dtype == "fp16" else np.float32) for x in exact]
    return given, exact


def run_and_check(step, case, **kw):
    dtype, B, H, Hkv, Sq, Sk, D, causal, lq, lk, p, scale = case
    seed = Sq * 131 + Sk * 7 + D  # as tests/matrix.h
    (q, k, v), (qe, ke, ve) = arrays(case)
    o, lse = flashsteps.attention(q, k, v, step, causal=causal, seqlens_q=lq, seqlens_k=lk,
                                  dropout=p, seed=seed, scale=scale,
                                  dtype=None if dtype == "fp16" else dtype, **kw)
    assert o.dtype == (np.float16 if dtype == "fp16" else np.float32)
    assert lse.dtype == np.float32 and lse.shape == (B, H, Sq)
    ref_o, ref_lse = reference.attention(qe, ke, ve, causal, lq, lk, scale, dropout=p, seed=seed)
    why = reference.gate(o, lse, ref_o, ref_lse, dtype)
    assert why is None, f"{step} {case_id(case)}: {why}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("step", STEPS)
def test_matrix(step, case):
    run_and_check(step, case)


# Every rung of every ladder, on one case that has GQA, a causal mask with Sq != Sk, a per-batch
# key length and dropout.
RUNG_CASE = ("bf16", 2, 4, 2, 70, 90, 64, True, None, [90, 33], 0.2, None)
# The forward steps' (step 6's run through flashsteps.attention_backward, test_api.py).
RUNGS = [(s["name"], name) for s in flashsteps.steps() if not s["backward"]
         for name, _ in s["rungs"]]


@pytest.mark.parametrize("step,rung", RUNGS, ids=[f"{s}-{r}" for s, r in RUNGS])
def test_every_rung(step, rung):
    run_and_check(step, RUNG_CASE, rung=rung)


# Results must not depend on the order the CPU backend runs threads in (a dependence is a race).
@pytest.mark.parametrize("schedule", ["reverse", "random:11"])
@pytest.mark.parametrize("step", [s for s in STEPS if s != "step0_reference"])
def test_schedules(step, schedule):
    run_and_check(step, ("fp16", 1, 2, 1, 40, 70, 80, True, None, None, 0.3, None),
                  schedule=schedule)


def test_philox_known_answers():
    """reference.py's Philox4x32-10 against Random123's known-answer vectors (kat_vectors)."""
    for ctr, key, want in [
            ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
            ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
            ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
             (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]:
        assert tuple(int(w) for w in reference.philox4x32_10(ctr, key)) == want
