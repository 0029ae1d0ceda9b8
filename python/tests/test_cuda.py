"""CUDA arrays in place (docs/python.md): PyTorch tensors and CuPy arrays run the GPU build on
their device and their framework's current stream, O and LSE (and a backward's dQ, dK, dV) the
framework's own arrays, nothing copied through the host; autograd through step 6 on CUDA
tensors; and flashsteps.benchmark. The refusals run everywhere (a stand-in CUDA
array); the rest where PyTorch sees a GPU and the build has GPU code (the GPU run,
scripts/gpu_run.sh, runs this file there)."""
import time

import numpy as np
import pytest

import flashsteps
import reference
from conftest import KERNEL_STEPS, inputs


class StandInCudaArray:
    """Says it lives on cuda:0 (DLPack device type 2) and holds nothing: what flashsteps decides
    before it touches the data."""

    def __dlpack_device__(self):
        return (2, 0)


StandInCudaArray.__module__ = "stand_in"


def run_stand_in(**kwargs):
    a = StandInCudaArray()
    return flashsteps.attention(a, a, a, "step3_fused", **kwargs)


def test_a_cuda_array_on_a_build_without_gpu_code_is_one_value_error(monkeypatch):
    monkeypatch.setattr(flashsteps._core, "gpu_built", False)
    with pytest.raises(ValueError, match=r"^q is a CUDA array \(cuda:0\), and this build of "
                                         r"flashsteps has no GPU code \(built without the CUDA "
                                         r"toolkit\): pass host arrays"):
        run_stand_in()


@pytest.mark.parametrize("kwargs, message", [
    (dict(counters=True), r"^counters=True: the counts are taken on the CPU backend: pass host "),
    (dict(model_gpu="H100 SXM"), r"^model_gpu: the counts are taken on the CPU backend"),
    (dict(schedule="reverse"), r"^schedule='reverse' orders the CPU backend's threads; a CUDA "),
    ({}, r"^q is a stand_in array on cuda:0: CUDA arrays run in place as PyTorch tensors or "
         r"CuPy arrays"),
])
def test_what_a_cuda_array_cannot_do_is_one_value_error(monkeypatch, kwargs, message):
    monkeypatch.setattr(flashsteps._core, "gpu_built", True)
    with pytest.raises(ValueError, match=message):
        run_stand_in(**kwargs)


def test_a_backward_on_cuda_arrays_without_gpu_code_is_one_value_error(monkeypatch):
    monkeypatch.setattr(flashsteps._core, "gpu_built", False)
    a = StandInCudaArray()
    with pytest.raises(ValueError, match=r"^q is a CUDA array \(cuda:0\), and this build of "
                                         r"flashsteps has no GPU code"):
        flashsteps.attention_backward(a, a, a, a, a, a)


def test_a_backward_across_devices_is_one_value_error():
    a, host = StandInCudaArray(), np.zeros((1, 1, 4, 64), np.float16)
    with pytest.raises(ValueError, match=r"^o is on cuda:0 and q on cpu:0: the backward takes its "
                                         r"six arrays on one device$"):
        flashsteps.attention_backward(host, host, host, a, host, host)


def test_run_cuda_refuses_host_arrays():
    q = np.zeros((1, 1, 4, 64), np.float16)
    lse = np.zeros((1, 1, 4), np.float32)
    with pytest.raises(ValueError, match=r"^q: run_cuda takes CUDA arrays"):
        flashsteps._core.run_cuda("step3_fused", q, q, q, q, lse, stream=0)


def test_benchmark_without_a_gpu_is_one_value_error():
    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available() and flashsteps.gpu_built:
        pytest.skip("a GPU is here: the benchmark runs (test_benchmark_times_a_step_beside_sdpa)")
    with pytest.raises(ValueError, match=r"^flashsteps.benchmark: "):
        flashsteps.benchmark("step3_fused")


# ---- on a GPU -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and flashsteps.gpu_built):
        pytest.skip("no CUDA GPU here, or a build without the CUDA toolkit: the GPU run "
                    "(scripts/gpu_run.sh) runs these")
    return torch


def on_host(t):
    return t.cpu().numpy() if hasattr(t, "cpu") else t.get()


def agree(o, lse, ref_o, ref_lse, dtype="fp16"):
    """The in-place outputs against the CPU backend's run of the same step on the same inputs."""
    o = on_host(o).astype(np.float64) if on_host(o).dtype != np.float64 else on_host(o)
    why = reference.gate(o, on_host(lse), np.asarray(ref_o, np.float64),
                         np.asarray(ref_lse, np.float64), dtype)
    assert why is None, why


def problem(torch, dtype=None, B=2, H=4, Hkv=2, Sq=130, Sk=257, D=64, seed=3):
    dtype = dtype or torch.float16
    return [torch.from_numpy(x).to(dtype).cuda()
            for x in inputs(np.random.default_rng(seed), B, H, Hkv, Sq, Sk, D)]


@pytest.mark.parametrize("step", KERNEL_STEPS)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_every_step_in_place_agrees_with_the_cpu_backend(torch, step, dtype):
    q, k, v = problem(torch, torch.float16 if dtype == "fp16" else torch.bfloat16)
    kwargs = dict(causal=True, seqlens_k=[257, 100], dropout=0.2, seed=7)
    o, lse = flashsteps.attention(q, k, v, step, **kwargs)
    assert isinstance(o, torch.Tensor) and o.device == q.device and o.dtype == q.dtype
    assert lse.device == q.device and lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    ref_o, ref_lse = flashsteps.attention(q.cpu(), k.cpu(), v.cpu(), step, **kwargs)
    agree(o.float(), lse, ref_o.float().numpy(), ref_lse.numpy(), dtype)


@pytest.mark.parametrize("label", ["2.1", "4.1", "4.5", "5.1", "5.3"])
def test_rungs_in_place(torch, label):
    q, k, v = problem(torch, Sq=129, Sk=129, D=128)
    o, lse = flashsteps.attention(q, k, v, label, causal=True, check=True)
    ref_o, ref_lse = flashsteps.attention(q.cpu(), k.cpu(), v.cpu(), label, causal=True)
    agree(o.float(), lse, ref_o.float().numpy(), ref_lse.numpy())


def test_strided_misaligned_and_float32_arrays_are_copied_once_on_the_device(torch):
    q, k, v = problem(torch)
    ref_o, ref_lse = flashsteps.attention(q.cpu(), k.cpu(), v.cpu(), "step4_tensorcore")
    # (B, S, H, D) projections seen as (B, H, S, D): not contiguous.
    qt, kt, vt = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    assert not qt.is_contiguous()
    o, lse = flashsteps.attention(qt, kt, vt, "step4_tensorcore")
    agree(o.float(), lse, ref_o.float().numpy(), ref_lse.numpy())
    # Contiguous, 2 bytes past a 16-byte boundary.
    qm = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)[1:].view(q.shape)
    qm.copy_(q)
    assert qm.is_contiguous() and qm.data_ptr() % 16 == 2
    o, lse = flashsteps.attention(qm, k, v, "step4_tensorcore")
    agree(o.float(), lse, ref_o.float().numpy(), ref_lse.numpy())
    # float32, rounded to fp16 on the device: O comes back float32.
    o, lse = flashsteps.attention(q.float(), k.float(), v.float(), "step4_tensorcore",
                                  dtype="fp16")
    assert o.dtype == torch.float32 and o.device == q.device
    agree(o, lse, ref_o.float().numpy(), ref_lse.numpy())


@pytest.mark.parametrize("call", ["forward", "per-batch lengths", "backward"])
def test_the_call_queues_on_the_current_stream_and_does_not_wait(torch, call):
    # Per-batch lengths are copied to the device too (through pinned memory, which does not wait:
    # common/backend.cpp), and the backward launches several kernels and takes scratch memory.
    q, k, v = problem(torch, B=2, H=2, Hkv=2, Sq=64, Sk=64)
    kwargs = dict(seqlens_k=[64, 17]) if call == "per-batch lengths" else {}
    if call == "backward":
        o, lse = flashsteps.attention(q, k, v, "step4_tensorcore")
        dout = torch.rand_like(o) - 0.5

        def run(*arrays):
            return flashsteps.attention_backward(*arrays, **kwargs)
        arrays = (q, k, v, o, lse, dout)
    else:
        def run(*arrays):
            return flashsteps.attention(*arrays, "step3_fused", **kwargs)
        arrays = (q, k, v)
    ref = run(*(a.cpu() for a in arrays))
    # Once before: the first launch of a kernel loads it (CUDA's lazy loading), which may wait.
    run(*arrays)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        # A billion GPU clock cycles queued first (half a second or more): a call that waited
        # for the stream, or copied through the host, would return after them.
        torch.cuda._sleep(1_000_000_000)
        t0 = time.perf_counter()
        got = run(*arrays)
        returned_after = time.perf_counter() - t0
        done = torch.cuda.Event()
        done.record()
    assert not done.query(), "the stream was idle when the call returned: nothing was queued"
    assert returned_after < 0.25, f"the call took {returned_after:.3f} s: it waited"
    stream.synchronize()
    if call == "backward":
        for g, want in zip(got, ref):
            err = (g.float().cpu() - want.float()).abs().max().item()
            assert err <= 1e-2 * want.float().abs().max().item() + 1e-3, err
    else:
        agree(got[0].float(), got[1], ref[0].float().numpy(), ref[1].numpy())


def test_check_and_bad_input_on_a_cuda_array(torch):
    q, k, v = problem(torch, D=64)
    flashsteps.attention(q, k, v, "step3_fused", check=True)  # copies to the host, passes
    with pytest.raises(ValueError, match=r"^step4_tensorcore: --dim 72: this step supports head "
                                         r"dims 64, 80, 96, 128$"):
        x = torch.zeros((1, 2, 40, 72), dtype=torch.float16, device="cuda")
        flashsteps.attention(x, x, x, "step4_tensorcore")
    with pytest.raises(ValueError, match=r"^step0_reference: --backend gpu: step0_reference runs "
                                         r"on the CPU only$"):
        flashsteps.attention(q, k, v, 0)
    with pytest.raises(ValueError, match=r"^q, k and v are float32: pass dtype='fp16' or 'bf16'"):
        flashsteps.attention(q.float(), k.float(), v.float(), "step3_fused")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_backward_in_place_agrees_with_the_cpu_backend(torch, dtype):
    q, k, v = problem(torch, torch.float16 if dtype == "fp16" else torch.bfloat16)
    kwargs = dict(causal=True, seqlens_k=[257, 100], dropout=0.2, seed=7)
    o, lse = flashsteps.attention(q, k, v, "step4_tensorcore", **kwargs)
    dout = torch.rand_like(o) * 2 - 1
    dq, dk, dv = flashsteps.attention_backward(q, k, v, o, lse, dout, check=True, **kwargs)
    for got, like in ((dq, q), (dk, k), (dv, v)):
        assert isinstance(got, torch.Tensor) and got.device == q.device
        assert got.dtype == q.dtype and got.shape == like.shape
    ref = flashsteps.attention_backward(q.cpu(), k.cpu(), v.cpu(), o.cpu(), lse.cpu(), dout.cpu(),
                                        **kwargs)
    for got, want in zip((dq, dk, dv), ref):
        err = (got.float().cpu() - want.float()).abs().max().item()
        assert err <= 1e-2 * want.float().abs().max().item() + 1e-3, err
    # float32 arrays, rounded to the dtype on the device: the gradients come back float32.
    dq32, _, _ = flashsteps.attention_backward(q.float(), k.float(), v.float(), o.float(), lse,
                                               dout.float(), dtype=dtype, **kwargs)
    assert dq32.dtype == torch.float32 and dq32.device == q.device
    assert (dq32 - dq.float()).abs().max().item() == 0


def test_autograd_through_cuda_tensors_agrees_with_sdpa(torch):
    q, k, v = (x.requires_grad_() for x in problem(torch, B=1, H=2, Hkv=2, Sq=128, Sk=128))
    o, _ = flashsteps.attention(q, k, v, "step4_tensorcore", causal=True)
    assert o.requires_grad and o.device == q.device
    g = torch.rand_like(o) * 2 - 1
    o.backward(g)
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    # Sq == Sk: SDPA's causal mask (top-left) is flashsteps' (bottom-right).
    torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True).backward(
        g.float())
    for got, want in zip((q.grad, k.grad, v.grad), (qf.grad, kf.grad, vf.grad)):
        assert got.device == q.device and got.dtype == q.dtype
        err = (got.float() - want).abs().max().item()
        assert err <= 2e-2 * want.abs().max().item() + 1e-3, err


def test_cupy_arrays_in_place(torch):
    cupy = pytest.importorskip("cupy")
    q, k, v = problem(torch)
    ref_o, ref_lse = flashsteps.attention(q.cpu(), k.cpu(), v.cpu(), "step4_tensorcore")
    cq, ck, cv = (cupy.asarray(x.cpu().numpy()) for x in (q, k, v))
    cupy.cuda.Device().synchronize()  # the copies above ran on the null stream
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        o, lse = flashsteps.attention(cq, ck, cv, "step4_tensorcore")
    stream.synchronize()
    assert isinstance(o, cupy.ndarray) and o.dtype == cupy.float16
    agree(o.astype(cupy.float32), lse, ref_o.float().numpy(), ref_lse.numpy())


def test_benchmark_times_a_step_beside_sdpa(torch):
    rows = flashsteps.benchmark("4.5", heads=4, seqlen=512, dim=64, iters=3, warmup=1,
                                sdpa=("flash", "math"))
    assert [r["kernel"] for r in rows] == ["4.5", "sdpa[flash]", "sdpa[math]"]
    assert rows[0]["ms"] > 0 and rows[0]["tflops"] > 0
    assert rows[2]["ms"] > 0  # the math backend runs everything
    with pytest.raises(ValueError, match=r"^sdpa='flash': a sequence of SDPA backends"):
        flashsteps.benchmark("step3_fused", sdpa="flash")


def test_the_benchmark_command_refuses_bad_input_in_one_line():
    import subprocess
    import sys
    for args, message in ((["--batch", "x"], "argument --batch: invalid int value: 'x'"),
                          (["--dtype", "fp8"], None)):
        r = subprocess.run([sys.executable, "-m", "flashsteps", "benchmark", "4", *args],
                           capture_output=True, text=True)
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m flashsteps benchmark: "), lines
        if message:
            assert lines[0].endswith(message), lines


def test_the_benchmark_counts_flops_as_the_harness_does():
    # 4 * dim per visible score; causal bottom-right with Sk > Sq: row i sees i + 1 + (Sk - Sq).
    assert flashsteps._core.flops(2, 3, 4, 4, 8, False) == 4 * 8 * 2 * 3 * 4 * 4
    assert flashsteps._core.flops(1, 1, 2, 5, 8, True) == 4 * 8 * (4 + 5)
