"""flashsteps' interface: its errors (the step executables' one-line messages, as Python
exceptions), memory, Ctrl-C, the GIL, counters, strides and dtypes, other frameworks, the
architecture refusal, and the help and type stubs."""
import csv
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import flashsteps
import reference
from conftest import KERNEL_STEPS, STEPS, inputs

BIN = os.environ.get("ATTN_BIN_DIR", "")
PACKAGE_DIR = os.path.dirname(flashsteps.__file__)


def fp16(B=1, H=2, Hkv=2, Sq=40, Sk=70, D=64, seed=5):
    return [x.astype(np.float16) for x in inputs(np.random.default_rng(seed), B, H, Hkv, Sq, Sk, D)]


def cli_message(step, *flags, env=None):
    """The one line a step executable prints for a problem it refuses (exit 2)."""
    if not BIN or not os.path.exists(os.path.join(BIN, step)):
        pytest.skip("the step executables are not here (ATTN_BIN_DIR): CTest sets it")
    r = subprocess.run([os.path.join(BIN, step), "--backend", "cpu", *flags], capture_output=True,
                       text=True, env={**os.environ, **(env or {})})
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


# (step, keyword arguments and array shapes for flashsteps.attention, the same problem as flags)
SAME_AS_CLI = [
    ("step4_tensorcore", dict(D=72), ["--seqlen-q", "40", "--seqlen-k", "70", "--dim", "72"]),
    ("step1_naive", dict(H=3, Hkv=2), ["--heads", "3", "--heads-kv", "2", "--seqlen-q", "40",
                                      "--seqlen-k", "70"]),
    ("step3_fused", dict(dropout=1.0), ["--dropout", "1", "--seqlen-q", "40", "--seqlen-k", "70"]),
    ("step2_tiled", dict(scale=float("inf")), ["--scale", "inf", "--seqlen-q", "40",
                                               "--seqlen-k", "70"]),
    ("step3_fused", dict(B=2, seqlens_k=[70]), ["--batch", "2", "--seqlens-k", "70",
                                                 "--seqlen-q", "40", "--seqlen-k", "70"]),
    ("step5_warpspecialized", dict(seqlens_q=[41]), ["--seqlens-q", "41", "--seqlen-q", "40",
                                                      "--seqlen-k", "70"]),
    ("step4_tensorcore", dict(rung="nope"), ["--rung", "nope", "--seqlen-q", "40",
                                             "--seqlen-k", "70"]),
    ("step4_tensorcore", dict(config="br1_bc1_w1_s1"), ["--config", "br1_bc1_w1_s1",
                                                        "--seqlen-q", "40", "--seqlen-k", "70"]),
    ("step3_fused", dict(schedule="sideways"), ["--schedule", "sideways", "--seqlen-q", "40",
                                                "--seqlen-k", "70"]),
    ("step3_fused", dict(model_gpu="H100 SXM"), ["--model-gpu", "H100 SXM", "--seqlen-q", "40",
                                                 "--seqlen-k", "70"]),
    ("step3_fused", dict(counters=True, model_gpu="GTX 480"),
     ["--counters", "--model-gpu", "GTX 480", "--seqlen-q", "40", "--seqlen-k", "70"]),
]


@pytest.mark.parametrize("step,kw,flags", SAME_AS_CLI, ids=[" ".join(c[2][:2]) for c in SAME_AS_CLI])
def test_bad_input_is_the_cli_message_as_a_value_error(step, kw, flags):
    shape = {k: kw.pop(k) for k in ("B", "H", "Hkv", "D") if k in kw}
    q, k, v = fp16(**shape)
    with pytest.raises(ValueError) as e:
        flashsteps.attention(q, k, v, step, **kw)
    assert str(e.value) == cli_message(step, *flags)


@pytest.mark.parametrize("present_as", ["sm_75", "sm_70x"])
def test_the_architecture_refusal_is_the_cli_message(monkeypatch, present_as):
    monkeypatch.setenv("SIMT_PRESENT_AS", present_as)
    q, k, v = fp16()
    for step in ("step4_tensorcore", "step5_warpspecialized"):
        with pytest.raises(ValueError) as e:
            flashsteps.attention(q, k, v, step)
        assert str(e.value) == cli_message(step, "--seqlen-q", "40", "--seqlen-k", "70",
                                           env={"SIMT_PRESENT_AS": present_as})


def test_steps_4_and_5_refuse_below_sm_80_and_steps_1_to_3_run_there(monkeypatch):
    """The CPU backend presenting itself as a T4 (SIMT_PRESENT_AS=sm_75): the tensor-core steps
    refuse in one line naming the compute capability they need; steps 1-3 run and are right."""
    monkeypatch.setenv("SIMT_PRESENT_AS", "sm_75")
    q, k, v = fp16()
    ref = reference.attention(*(x.astype(np.float64) for x in (q, k, v)), causal=True)
    for step in STEPS:
        need = next(s["min_arch"] for s in flashsteps.steps() if s["name"] == step)
        if need:
            assert need == "sm_80"
            with pytest.raises(ValueError, match=r"needs compute capability 8\.0 \(sm_80\) or "
                                                 r"newer.*presents itself as sm_75"):
                flashsteps.attention(q, k, v, step, causal=True)
        else:
            o, lse = flashsteps.attention(q, k, v, step, causal=True)
            assert reference.gate(o, lse, *ref, "fp16") is None
    monkeypatch.setenv("SIMT_PRESENT_AS", "sm_80")  # Ampere: step 5 runs, its sm_80 kernel only
    flashsteps.attention(q, k, v, "step5_warpspecialized", causal=True)
    with pytest.raises(ValueError, match="needs a compute capability 9.0 GPU"):
        flashsteps.attention(q, k, v, "step5_warpspecialized", variant="sm90a")
    with pytest.raises(ValueError, match="needs a compute capability 9.0 GPU"):
        flashsteps.attention(q, k, v, "step5_warpspecialized", rung="wgmma")


def test_bad_arrays_and_arguments():
    q, k, v = fp16()
    cases = [
        (ValueError, "unknown step 'step9'", dict(step="step9")),
        (ValueError, r"q has shape \(1, 2, 40\): expected 4 dimensions", dict(q=q[..., 0])),
        (ValueError, "batch .* and head_dim .* must match", dict(k=k[..., :32], v=v[..., :32])),
        (ValueError, "k has shape .* and v .*: they must match", dict(v=v[:, :, :69])),
        # No key/value heads at all (heads_kv 0 would otherwise read as "as many as q").
        (ValueError, r"k \(1, 0, 70, 64\): every dimension must be at least 1",
         dict(k=k[:, :0], v=v[:, :0])),
        (ValueError, r"q has shape \(1, 2, 0, 64\) .*: every dimension must be at least 1",
         dict(q=q[:, :, :0])),
        (ValueError, "q, k and v must have one dtype: fp16, float32, fp16",
         dict(k=k.astype(np.float32))),
        (ValueError, "q, k and v are float32: pass dtype='fp16' or 'bf16'",
         dict(q=q.astype(np.float32), k=k.astype(np.float32), v=v.astype(np.float32))),
        (ValueError, "dtype='bf16' but q, k and v are fp16", dict(dtype="bf16")),
        (ValueError, "q: unsupported dtype", dict(q=q.astype(np.int16), k=k.astype(np.int16),
                                                  v=v.astype(np.int16))),
        (ValueError, "tensor 'k' holds NaN or Inf", dict(k=np.where(k > 1, np.float16(np.inf), k))),
        (ValueError, r"seed=-1: must be in \[0, 2\^64\)", dict(seed=-1)),
        # The executable of a step with one kernel has no --variant flag at all.
        (ValueError, "step3_fused: --variant sm90a: this step has a single kernel",
         dict(variant="sm90a")),
        # Nor has step 0's a --counters flag.
        (ValueError, "step0_reference: --counters: this step runs no kernels",
         dict(step="step0_reference", counters=True)),
        (TypeError, "q must be an array that supports DLPack", dict(q=q.tolist())),
        (TypeError, "causal must be True or False", dict(causal="yes")),
        (TypeError, "dropout must be a number", dict(dropout="0.1")),
        (TypeError, "seqlens_k must be a sequence of integers", dict(seqlens_k=[70.0])),
        (TypeError, "rung must be a name, a number or None", dict(rung=1.5)),
        (TypeError, "schedule must be a string", dict(schedule=None)),
    ]
    for kind, pattern, kw in cases:
        args = {"q": q, "k": k, "v": v, "step": "step3_fused", **kw}
        with pytest.raises(kind, match=pattern) as e:
            flashsteps.attention(args.pop("q"), args.pop("k"), args.pop("v"), **args)
        assert "\n" not in str(e.value), str(e.value)


def test_a_step_by_its_number_or_a_rung_by_its_label():
    # The course's numbers (README, scripts/stepdiff.py): step=3 is step3_fused, "4.3" is rung 3
    # of step 4's ladder; the same kernels, bit for bit.
    q, k, v = fp16(Sq=17, Sk=33)
    by_name = flashsteps.attention(q, k, v, step="step3_fused")
    for step in (3, np.int64(3), "3"):
        for a, b in zip(flashsteps.attention(q, k, v, step=step), by_name):
            assert np.array_equal(a, b), step
    rung = flashsteps.attention(q, k, v, step="step4_tensorcore", rung=3)
    for kw in (dict(step="4.3"), dict(step="4.3", rung=3), dict(step="4.3", rung="3")):
        for a, b in zip(flashsteps.attention(q, k, v, **kw), rung):
            assert np.array_equal(a, b), kw
    cases = [
        (ValueError, r"^step=9: there is no step 9; the steps are step0_reference, ",
         dict(step=9)),
        (ValueError, r"^step='4.3' is rung 3 of step4_tensorcore, but rung=2$",
         dict(step="4.3", rung=2)),
        (ValueError, r"^step4_tensorcore: --rung 99: this step's rungs are 1 ",
         dict(step="4.99")),
        (TypeError, r"^step must be a name, a number or a label such as '4.3', not True$",
         dict(step=True)),
        (TypeError, r"^step must be a name, a number or a label such as '4.3', not 4.3$",
         dict(step=4.3)),
    ]
    for kind, pattern, kw in cases:
        with pytest.raises(kind, match=pattern) as e:
            flashsteps.attention(q, k, v, **kw)
        assert "\n" not in str(e.value), str(e.value)


def test_a_failed_check_raises():
    """check=True compares with the FP64 reference: a passing step returns, a failing one raises
    RuntimeError. A correct kernel fails it where its FP32 arithmetic cannot hold the answer:
    V at 2e38 (bf16 holds it) and dropout 0.999 scale the kept keys by 1000, and a row's output
    overflows FP32 to inf, which the reference (FP64) does not."""
    q, k, v = fp16()
    o, lse = flashsteps.attention(q, k, v, "step4_tensorcore", causal=True, check=True)
    assert np.isfinite(o).all()
    q = np.zeros((1, 1, 64, 64), np.float32)
    k = np.zeros((1, 1, 1000, 64), np.float32)
    v = np.full((1, 1, 1000, 64), 2e38, np.float32)
    o, _ = flashsteps.attention(q, k, v, "step3_fused", dtype="bf16", dropout=0.999)
    assert np.isinf(o).any()  # unchecked: the kernel's answer, as it is
    with pytest.raises(RuntimeError, match=r"^step3_fused: check against the FP64 reference "
                                           r"FAILED: .* NaN or Inf"):
        flashsteps.attention(q, k, v, "step3_fused", dtype="bf16", dropout=0.999, check=True)


def test_memory_error_when_the_inputs_do_not_fit():
    """A broadcast array takes no memory, but its 16-bit copy does: in a process limited to
    2 GiB of address space, a 2^30-element q is refused with MemoryError, not a crash."""
    code = textwrap.dedent("""
        import resource, numpy as np, flashsteps
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        q = np.broadcast_to(np.float16(0.5), (1, 1, 1 << 24, 64))
        k = v = np.full((1, 1, 16, 64), 0.5, dtype=np.float16)
        try:
            flashsteps.attention(q, k, v, "step3_fused")
        except MemoryError as e:
            print("MemoryError:", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("MemoryError: step3_fused: ") and "q (its 16-bit copy)" in r.stdout, \
        r.stdout


def test_ctrl_c_stops_a_cpu_run_and_python_keeps_its_handler():
    code = textwrap.dedent("""
        import faulthandler, sys, time, numpy as np, flashsteps
        q = np.full((1, 16, 2048, 64), 0.5, dtype=np.float16)
        print("start", flush=True)
        try:
            flashsteps.attention(q, q, q, "step3_fused")
        except KeyboardInterrupt as e:
            print("KeyboardInterrupt:", e, flush=True)
        # Should the second Ctrl-C go unseen, every thread's stack on stderr (the failure's text).
        faulthandler.dump_traceback_later(5)
        try:
            print("sleeping", flush=True)
            # Python's own handler is back: a second Ctrl-C interrupts this. Short sleeps: the
            # signal may land on one of the CPU backend's worker threads, which does not wake a
            # sleeping main thread (Python looks at the flag when the sleep returns).
            for _ in range(300):
                time.sleep(0.1)
        except KeyboardInterrupt:
            print("second KeyboardInterrupt", flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "start\n"
    time.sleep(1.5)
    assert p.poll() is None, "the run ended before the signal: make it longer"
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    line = p.stdout.readline()
    elapsed = time.monotonic() - sent
    assert line == "KeyboardInterrupt: step3_fused: interrupted\n", line + p.stderr.read()
    assert elapsed < 3.0, f"{elapsed:.1f} s from SIGINT to KeyboardInterrupt"
    assert p.stdout.readline() == "sleeping\n"
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail("the second SIGINT went unseen for 10 s: " + out + err)
    assert out == "second KeyboardInterrupt\n", out + err


def test_the_gil_is_released_while_a_step_runs():
    # Long enough to tell (about 0.7 s of step 3 where the kernels' copies convert with F16C).
    q = np.full((1, 24, 512, 64), 0.5, dtype=np.float16)
    t = threading.Thread(target=flashsteps.attention, args=(q, q, q, "step3_fused"))
    t0 = time.monotonic()
    t.start()
    ticks = 0
    while t.is_alive():
        ticks += 1
        time.sleep(0.001)
    elapsed = time.monotonic() - t0
    assert elapsed > 0.3, "the run is too short to tell"
    # Holding the GIL for the whole run would leave this thread one or two ticks.
    assert ticks > 0.3 * elapsed / 0.001 / 10, f"{ticks} ticks in {elapsed:.2f} s"


@pytest.mark.parametrize("step", [s for s in KERNEL_STEPS])
def test_counters_are_the_executables(step, tmp_path):
    """counters=True returns what `--counters` writes into the CSV for the same problem (counts
    depend on the shape, not on the values)."""
    info = next(s for s in flashsteps.steps() if s["name"] == step)
    if not info["counted"]:
        pytest.skip("this build has no counted copies (g++ with ATTN_COUNTERS=ON builds them)")
    if not BIN:
        pytest.skip("the step executables are not here (ATTN_BIN_DIR): CTest sets it")
    q, k, v = fp16(B=2, H=4, Hkv=2, Sq=33, Sk=90, D=64)
    _, _, got = flashsteps.attention(q, k, v, step, causal=True, counters=True)
    out = tmp_path / "c.csv"
    r = subprocess.run([os.path.join(BIN, step), "--backend", "cpu", "--counters", "--batch", "2",
                        "--heads", "4", "--heads-kv", "2", "--seqlen-q", "33", "--seqlen-k", "90",
                        "--dim", "64", "--causal", "--csv", str(out), "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    row = next(csv.DictReader(open(out)))
    for name, value in got.items():
        assert str(value) == row[name] or (isinstance(value, float) and
                                           value == pytest.approx(float(row[name]))), name
    assert got["global_bytes_moved"] > 0 and got["model_gpu"] == "H100 SXM"


def test_strides_and_float_inputs_give_the_same_result():
    q, k, v = fp16(Sq=33, Sk=50, D=80)
    o, lse = flashsteps.attention(q, k, v, "step4_tensorcore", causal=True)
    # The same values through views: transposed storage, and a negative stride.
    qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    kr = np.ascontiguousarray(k[:, :, ::-1])[:, :, ::-1]
    assert not qt.flags.c_contiguous and kr.strides[2] < 0
    o2, lse2 = flashsteps.attention(qt, kr, v, "step4_tensorcore", causal=True)
    assert np.array_equal(o, o2) and np.array_equal(lse, lse2)
    # float32 and float64 arrays holding the same fp16 values, rounded to fp16 by the binding.
    for t in (np.float32, np.float64):
        o3, lse3 = flashsteps.attention(q.astype(t), k.astype(t), v.astype(t), "step4_tensorcore",
                                        causal=True, dtype="fp16")
        assert o3.dtype == np.float32
        assert np.array_equal(o3, o.astype(np.float32)) and np.array_equal(lse3, lse)


def test_padding_past_a_batchs_lengths_is_never_read():
    """A padded batch (a KV cache made with torch.empty, say) may hold NaN past its lengths: the
    same results, checked against the FP64 reference."""
    q, k, v = fp16(B=2, Sq=40, Sk=70)
    lengths = dict(seqlens_q=[40, 25], seqlens_k=[70, 33])
    o, lse = flashsteps.attention(q, k, v, "step4_tensorcore", causal=True, **lengths)
    qn, kn, vn = q.copy(), k.copy(), v.copy()
    qn[1, :, 25:] = kn[1, :, 33:] = vn[1, :, 33:] = np.nan
    for step in ("step0_reference", "step4_tensorcore"):
        o2, lse2 = flashsteps.attention(qn, kn, vn, step, causal=True, check=True, **lengths)
        assert not np.isnan(o2).any()
        if step == "step4_tensorcore":
            assert np.array_equal(o, o2) and np.array_equal(lse, lse2)


def test_float64_is_rounded_once():
    """A float64 value halfway between two fp16 values after rounding to float32 first would round
    twice; the binding rounds float64 to fp16 at once, as NumPy does."""
    x = np.float64(1) + 2.0 ** -11 + 2.0 ** -40  # just above the halfway point 1 + 2^-11
    q = np.full((1, 1, 1, 64), x)
    k = v = np.full((1, 1, 1, 64), x)
    o, _ = flashsteps.attention(q, k, v, "step0_reference", dtype="fp16")
    assert o[0, 0, 0, 0] == np.float32(np.float16(x)) == np.float32(1 + 2.0 ** -10)


def test_jax_arrays():
    jax = pytest.importorskip("jax") if os.environ.get("ATTN_WITH_TORCH") != "1" else \
        __import__("jax")
    import jax.numpy as jnp
    q, k, v = fp16(Sq=17, Sk=33)
    qb, kb, vb = (jnp.asarray(x.astype(np.float32), dtype=jnp.bfloat16) for x in (q, k, v))
    o, lse = flashsteps.attention(qb, kb, vb, "step3_fused", causal=True)
    assert isinstance(o, jax.Array) and o.dtype == jnp.bfloat16 and lse.dtype == jnp.float32
    exact = [np.asarray(x, dtype=np.float64) for x in (qb, kb, vb)]
    assert reference.gate(np.asarray(o, dtype=np.float64), np.asarray(lse),
                          *reference.attention(*exact, causal=True), "bf16") is None


def test_a_torch_tensor_beside_a_numpy_array_is_a_type_error():
    torch = pytest.importorskip("torch") if os.environ.get("ATTN_WITH_TORCH") != "1" else \
        __import__("torch")
    q, k, v = fp16()
    for args in [(torch.from_numpy(q), k, v), (q, torch.from_numpy(k), torch.from_numpy(v))]:
        with pytest.raises(TypeError, match=r"^q, k and v must be arrays of one framework; they "
                                            r"are q: (numpy|torch)"):
            flashsteps.attention(*args, "step3_fused")


def test_help_lists_every_step_and_rung():
    r = subprocess.run([sys.executable, "-m", "flashsteps", "--help"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    for s in flashsteps.steps():
        assert s["name"] in r.stdout
        for name, idea in s["rungs"]:
            assert f"'{name}': {idea}" in r.stdout
    assert bool(flashsteps.cuda_architectures) == flashsteps.gpu_built
    assert all(a.startswith("sm_") for a in flashsteps.cuda_architectures)
    r = subprocess.run([sys.executable, "-m", "flashsteps", "--bogus"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_type_stubs_and_docstrings():
    stub = os.path.join(PACKAGE_DIR, "_core.pyi")
    assert os.path.exists(stub), "the type stubs of flashsteps._core are not installed"
    assert "def run(" in open(stub).read() and "def steps(" in open(stub).read()
    assert os.path.exists(os.path.join(PACKAGE_DIR, "py.typed"))
    for word in ("seqlens_q", "dropout", "rung", "counters", "MemoryError", "KeyboardInterrupt"):
        assert word in flashsteps.attention.__doc__


def test_the_backward_gives_the_gradients():
    """Step 6 on the forward's own outputs: dQ, dK and dV near the NumPy float64 gradients and
    within the harness's gate (check=True), with GQA, causal Sq != Sk, per-batch lengths and
    dropout; float32 inputs rounded to bf16 come back float32."""
    kw = dict(causal=True, seqlens_q=[17, 9], seqlens_k=[23, 11], dropout=0.2, seed=3)
    for dtype in ("fp16", "bf16"):
        rng = np.random.default_rng(7)
        q, k, v = inputs(rng, 2, 4, 2, 17, 23, 64)
        dout = rng.uniform(-1, 1, q.shape)
        if dtype == "fp16":
            q, k, v, dout = (x.astype(np.float16) for x in (q, k, v, dout))
            args = {}
        else:
            q, k, v, dout = (reference.round_to(x, "bf16").astype(np.float32)
                             for x in (q, k, v, dout))
            args = dict(dtype="bf16")
        o, lse = flashsteps.attention(q, k, v, step=3, **kw, **args)
        dq, dk, dv = flashsteps.attention_backward(q, k, v, o, lse, dout, step=6, check=True,
                                                   **kw, **args)
        assert dq.dtype == q.dtype and dk.shape == k.shape and dv.shape == v.shape
        want = reference.attention_backward(*(np.asarray(x, np.float64) for x in (q, k, v, dout)),
                                            **kw)
        for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
            err = np.abs(np.asarray(got, np.float64) - ref).max()
            assert err <= 0.02 * np.abs(ref).max(), (dtype, name, err, np.abs(ref).max())


def test_the_backwards_bad_input():
    q, k, v = fp16(Sq=9, Sk=12)
    o, lse = flashsteps.attention(q, k, v, step=1)
    dout = np.ones_like(q)
    back = flashsteps.attention_backward
    for o_, lse_, dout_, message in [
            (None, lse, dout, "o is missing"),
            (o, None, dout, "lse is missing"),
            (o, lse, dout[:, :, :3], r"dout has shape \(1, 2, 3, 64\): expected \(1, 2, 9, 64\)"),
            (o, lse.astype(np.float16), dout, "lse: expected float32"),
            (o.astype(np.float32), lse, dout, "o: expected the dtype of q"),
            (o, lse[:, :1], dout, r"lse has shape \(1, 1, 9\): expected \(1, 2, 9\)"),
            (o, lse, np.full_like(dout, np.nan), "tensor 'dout' holds NaN or Inf"),
            (o, np.where(np.arange(9) == 4, -np.inf, lse).astype(np.float32), dout,
             "tensor 'lse' is -inf at flat index 4, a row that sees keys")]:
        with pytest.raises(ValueError, match=message):
            back(q, k, v, o_, lse_, dout_)
    # float64 q, k, v and what flashsteps.attention returned for them (float32 o) are taken.
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    o32, lse32 = flashsteps.attention(q64, k64, v64, step=1, dtype="fp16")
    dq64 = back(q64, k64, v64, o32, lse32, dout.astype(np.float64), dtype="fp16")[0]
    assert dq64.shape == q.shape and dq64.dtype == np.float32
    with pytest.raises(ValueError, match="step1_naive is a forward step"):
        back(q, k, v, o, lse, dout, step=1)
    with pytest.raises(ValueError, match="step6_backward is the backward pass"):
        flashsteps.attention(q, k, v, step=6)


def test_the_backwards_variants_give_the_same_bits(monkeypatch):
    # Step 6's sm90a kernel (its TMA copies) computes what its sm80 kernel does, in the same order.
    rng = np.random.default_rng(11)
    q, k, v = (x.astype(np.float16) for x in inputs(rng, 2, 4, 2, 33, 70, 64))
    dout = rng.uniform(-1, 1, q.shape).astype(np.float16)
    o, lse = flashsteps.attention(q, k, v, step=3, causal=True)
    sm80 = flashsteps.attention_backward(q, k, v, o, lse, dout, causal=True, variant="sm80")
    sm90a = flashsteps.attention_backward(q, k, v, o, lse, dout, causal=True, variant="sm90a",
                                          check=True)
    for a, b in zip(sm80, sm90a):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="--variant sm70: this step has variants"):
        flashsteps.attention_backward(q, k, v, o, lse, dout, causal=True, variant="sm70")
    # The variant reaches the harness: a CPU backend presenting an sm_80 GPU refuses sm90a alone.
    monkeypatch.setenv("SIMT_PRESENT_AS", "sm_80")
    with pytest.raises(ValueError, match="--variant sm90a: needs a compute capability 9.0 GPU"):
        flashsteps.attention_backward(q, k, v, o, lse, dout, causal=True, variant="sm90a")
    flashsteps.attention_backward(q, k, v, o, lse, dout, causal=True, variant="sm80")
