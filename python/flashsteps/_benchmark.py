"""flashsteps.benchmark: a step or rung timed on the GPU with CUDA events, beside PyTorch's SDPA
backends on the same tensors, in one process and one run."""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from . import _core
from ._attention import attention

_SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")


def _time_ms(torch: Any, fn: Any, warmup: int, iters: int, calls: int = 10) -> float:
    """Milliseconds per call of fn: the median of `iters` samples after `warmup` untimed ones,
    each sample `calls` calls back to back between two CUDA events on the current stream. A call's
    host work overlaps the kernels queued before it, so it counts only where it is longer than
    they are, as it would in a model."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / calls)
    return statistics.median(times)


def benchmark(step: str | int = "step4_tensorcore", *, batch: int = 1, heads: int = 16,
              heads_kv: int | None = None, seqlen: int = 4096, seqlen_k: int | None = None,
              dim: int = 128, dtype: str = "bf16", causal: bool = False,
              rung: str | int | None = None, variant: str | None = None,
              config: str | None = None, sdpa: Sequence[str] = ("flash", "efficient", "cudnn"),
              warmup: int = 3, iters: int = 20, device: int = 0,
              seed: int = 0) -> list[dict[str, Any]]:
    """Times a step (or one rung of it) and PyTorch's SDPA backends on one problem, on the GPU.

    The inputs are PyTorch CUDA tensors, (batch, heads, seqlen, dim) for q and (batch, heads_kv,
    seqlen_k, dim) for k and v, drawn once; every kernel runs on them in place on the current
    stream (the same tensors each time, as a model's layer sees them: the L2 cache is not
    flushed), timed with CUDA events: the median of `iters` samples after `warmup` calls, a
    sample ten calls back to back, so that a call's host work counts only where it outlasts the
    kernels queued before it.
    SDPA's backends are those named in `sdpa` ('flash', 'efficient', 'cudnn', 'math'); one that
    cannot run this problem is a row with its reason instead of a time. SDPA's is_causal is
    aligned top-left, the steps' bottom-right: with causal and seqlen_k != seqlen the SDPA rows
    are skipped (their mask would differ).

    Returns one dict per kernel: kernel, ms (None where it did not run), tflops (4 * dim FLOPs
    per visible score, the harness's count), note (why it did not run, or ''), and the problem:
    batch, heads, heads_kv, seqlen_q, seqlen_k, dim, dtype, causal, device (the GPU's name).
    Needs PyTorch with CUDA and a build of flashsteps with GPU code: ValueError otherwise.
    """
    try:
        import torch
    except ImportError:
        raise ValueError("flashsteps.benchmark times on the GPU through PyTorch, which is not "
                         "installed") from None
    if not _core.gpu_built:
        raise ValueError("flashsteps.benchmark: this build of flashsteps has no GPU code (built "
                         "without the CUDA toolkit)")
    if not torch.cuda.is_available():
        raise ValueError("flashsteps.benchmark: PyTorch sees no CUDA GPU here")
    for name, value in (("batch", batch), ("heads", heads), ("seqlen", seqlen), ("dim", dim),
                        ("iters", iters)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}: a whole number, at least 1")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r}: a whole number, at least 0")
    unknown = [b for b in sdpa if b not in _SDPA_BACKENDS]
    if isinstance(sdpa, str) or unknown:
        raise ValueError(f"sdpa={sdpa!r}: a sequence of SDPA backends, from "
                         f"{', '.join(_SDPA_BACKENDS)}")
    to = {"fp16": torch.float16, "bf16": torch.bfloat16}
    if dtype not in to:
        raise ValueError(f"dtype={dtype!r}: use 'fp16' or 'bf16'")
    heads_kv = heads if heads_kv is None else heads_kv
    seqlen_k = seqlen if seqlen_k is None else seqlen_k
    if not 0 <= device < torch.cuda.device_count():
        raise ValueError(f"device={device}: PyTorch sees {torch.cuda.device_count()} CUDA GPUs")
    dev = torch.device("cuda", device)
    gen = torch.Generator(device=dev).manual_seed(seed)

    def draw(h: int, s: int) -> Any:  # 0.5 + U(-1, 1), as the harness's inputs
        return (torch.rand((batch, h, s, dim), generator=gen, device=dev) * 2 - 0.5).to(to[dtype])

    q, k, v = draw(heads, seqlen), draw(heads_kv, seqlen_k), draw(heads_kv, seqlen_k)
    flops = _core.flops(batch, heads, seqlen, seqlen_k, dim, causal)
    problem = dict(batch=batch, heads=heads, heads_kv=heads_kv, seqlen_q=seqlen,
                   seqlen_k=seqlen_k, dim=dim, dtype=dtype, causal=causal,
                   device=torch.cuda.get_device_name(dev))

    def row(kernel: str, ms: float | None, note: str = "") -> dict[str, Any]:
        tflops = flops / (ms * 1e-3) / 1e12 if ms else None
        return dict(kernel=kernel, ms=ms, tflops=tflops, note=note, **problem)

    rows = []
    name = str(step) if rung is None else f"{step}[{rung}]"
    with torch.cuda.device(dev):
        # A first call outside the timings: it refuses an invalid problem before anything is
        # timed (the step's own ValueError), and loads the kernels.
        run = lambda: attention(q, k, v, step, causal=causal, rung=rung,  # noqa: E731
                                variant=variant, config=config)
        run()
        rows.append(row(name, _time_ms(torch, run, warmup, iters)))
        for backend in sdpa:
            kernel = f"sdpa[{backend}]"
            if causal and seqlen_k != seqlen:
                rows.append(row(kernel, None, "skipped: SDPA's causal mask is aligned top-left, "
                                              "the steps' bottom-right (seqlen_k != seqlen)"))
                continue
            sdpa_ms = _sdpa_time(torch, backend, q, k, v, causal, heads != heads_kv, warmup,
                                 iters)
            rows.append(row(kernel, *sdpa_ms))
    return rows


def _sdpa_time(torch: Any, backend: str, q: Any, k: Any, v: Any, causal: bool, gqa: bool,
               warmup: int, iters: int) -> tuple[float | None, str]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
    scale = 1 / math.sqrt(q.shape[-1])
    try:
        with sdpa_kernel(chosen):
            run = lambda: sdpa(q, k, v, is_causal=causal, scale=scale,  # noqa: E731
                               enable_gqa=gqa)
            run()
            return _time_ms(torch, run, warmup, iters), ""
    except RuntimeError as e:  # the backend cannot run this problem here
        return None, "skipped: " + str(e).strip().splitlines()[0]
