"""flashsteps.attention: DLPack arrays in, the same framework's arrays out."""

from __future__ import annotations

import operator
import os
import re
import threading
from typing import Any, Sequence

import numpy as np

from . import _core, _cuda

_HERE = os.path.dirname(os.path.abspath(__file__))
# Step 4 reads its table of tuned tile configurations at run time; the package carries a copy.
_TUNED_TABLE = os.path.join(_HERE, "step4_tensorcore_tuned_configs.csv")
# What counters=True returns: the counted columns of the result CSV (docs/profiling.md says what
# Nsight Compute metric each stands for) and the speed-of-light model's figures.
_COUNTER_FIELDS = (
    "gld_requests", "gld_sectors", "gld_bytes", "gst_requests", "gst_sectors", "gst_bytes",
    "ldgsts_requests", "ldgsts_sectors", "ldgsts_bytes", "tma_copies", "tma_sectors", "tma_bytes",
    "dram_bytes_min", "global_bytes_moved", "lds_wavefronts", "lds_conflicts", "sts_wavefronts",
    "sts_conflicts", "ldsm_wavefronts", "ldsm_conflicts", "ldgsts_conflicts", "mma", "wgmma",
    "tensor_flops", "tensor_share", "block_barriers", "named_barriers", "mbarrier_ops", "shuffles",
    "votes", "model_gpu", "model_us", "model_bound")
_DLPACK_CPU, _DLPACK_CUDA = 1, 2  # DLDeviceType


def steps() -> list[dict[str, Any]]:
    """The steps, in course order, each a dict: name, kernels (False: plain C++ on the CPU),
    head_dims (empty: any up to 256), variants, configs, min_arch (the compute capability its
    kernels need; empty: any this build targets), counted (counters=True works), and rungs, a
    list of (name, idea) in ladder order (the last is the step's own kernel)."""
    return _core.steps()


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def _real(name: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise TypeError(f"{name} must be a number, not {value!r}")
    return float(value)


def _text(name: str, value: Any, allow_none: bool = True) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string{' or None' if allow_none else ''}, "
                        f"not {value!r}")
    return value


def _lengths(name: str, value: Sequence[int] | None) -> list[int] | None:
    if value is None:
        return None
    try:
        lengths = [operator.index(x) for x in value]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integers (one per batch)") from None
    for n in lengths:
        if not -2**31 <= n < 2**31:
            raise ValueError(f"{name}: {n} is not a length")
    return lengths


def _device(name: str, a: Any) -> tuple[int, int]:
    try:
        kind, index = a.__dlpack_device__()
    except AttributeError:
        raise TypeError(f"{name} must be an array that supports DLPack (NumPy, PyTorch, JAX), "
                        f"not {type(a).__name__}") from None
    return int(kind), int(index)


def _step_and_rung(step: Any, rung: Any) -> tuple[str, Any]:
    """The step's name and the rung, from a name, the step's number (0-5, as an int or a string)
    or a rung's label as scripts/stepdiff.py prints it ("4.3": rung 3 of step 4)."""
    if isinstance(step, bool) or not isinstance(step, (str, int, np.integer)):
        raise TypeError(f"step must be a name, a number or a label such as '4.3', not {step!r}")
    label = str(step)
    match = re.fullmatch(r"(\d+)(?:\.(\d+))?", label)
    if match is None:
        return label, rung  # a name: the step executables' own message if it is not one
    number, rung_number = match.groups()
    names = [s["name"] for s in steps()]
    name = next((n for n in names if n.startswith(f"step{int(number)}_")), None)
    if name is None:
        raise ValueError(f"step={step!r}: there is no step {int(number)}; the steps are "
                         f"{', '.join(names)}")
    if rung_number is not None:
        if rung is not None and str(rung) != str(int(rung_number)):
            raise ValueError(f"step={step!r} is rung {int(rung_number)} of {name}, "
                             f"but rung={rung!r}")
        rung = int(rung_number)
    return name, rung


def attention(q: Any, k: Any, v: Any, step: str | int = "step4_tensorcore", *,
              causal: bool = False,
              scale: float | None = None, seqlens_q: Sequence[int] | None = None,
              seqlens_k: Sequence[int] | None = None, dropout: float = 0.0, seed: int = 0,
              rung: str | int | None = None, variant: str | None = None, dtype: str | None = None,
              schedule: str = "forward", config: str | None = None, check: bool = False,
              counters: bool = False, model_gpu: str | None = None) -> tuple[Any, ...]:
    """O = softmax(scale * Q K^T + mask) V, and the log-sum-exp of each row, by one step.

    q: (batch, heads, seqlen_q, head_dim); k, v: (batch, heads_kv, seqlen_k, head_dim), heads a
    multiple of heads_kv (GQA): the layout of torch.nn.functional.scaled_dot_product_attention.
    Any strides. fp16 or bf16 arrays run in their dtype; float32/float64 arrays are rounded to
    `dtype` ('fp16' or 'bf16', required for them). Any DLPack array: a NumPy array, a PyTorch
    tensor or a JAX array in host memory runs on the CPU backend (the kernels executed by the
    project's SIMT emulator: slow, exact, every barrier and asynchronous copy checked); a PyTorch
    CUDA tensor or a CuPy array runs the GPU build in place: on the array's device and its
    framework's current stream, O and LSE allocated by that framework, nothing copied through
    the host (an array that is not C-contiguous and 16-byte aligned is copied once on the device)
    and nothing waited for, unless check=True.

    step: a name from flashsteps.steps() ('step0_reference' .. 'step5_warpspecialized'), the
    step's number (0-5), or a rung's label as scripts/stepdiff.py prints it ('4.3': rung 3 of
    step 4, the same as step=4, rung=3).
    causal: the mask aligned bottom-right (FlashAttention-2's convention; SDPA's is_causal is
    top-left). scale: default 1/sqrt(head_dim). seqlens_q, seqlens_k: per-batch lengths (rows
    past a batch's length: O = 0 and LSE = -inf). dropout: probability in [0, 1), the elements
    dropped chosen by Philox from `seed` and (b, h, i, j), the same in every step. rung: a rung
    of the step's ladder, by name or number (python -m flashsteps lists them). variant: step 5's
    (or 6's) 'sm80' or 'sm90a'. schedule: the order the CPU backend runs threads between synchronisation
    points ('forward', 'reverse', 'random[:SEED]'): results must not depend on it. config: a tile
    configuration (step 4). check: also compare with the FP64 reference (RuntimeError if it
    fails; on CUDA arrays it copies them to the host to do so). counters: also return what the
    kernels did, counted on the CPU backend as Nsight Compute would (global sectors and bytes,
    shared-memory wavefronts and bank conflicts, tensor instructions, ...) and a speed-of-light
    model of it on `model_gpu` (a GPU the model knows, 'H100 SXM' by default; labelled a model,
    not a measurement), as a dict.

    PyTorch tensors that require grad (with grad enabled), host or CUDA, give an o that
    backpropagates: the backward runs step 6 (attention_backward) on this forward's o and lse,
    on the tensors' device; lse has no gradient.

    Returns (o, lse) in the input's framework and device: o in the input's dtype (float32 for
    float32/float64 inputs), lse float32 (batch, heads, seqlen_q); with counters=True,
    (o, lse, counters). Raises ValueError for invalid input (the step executables' one-line
    messages), TypeError for an argument of the wrong kind, MemoryError for a problem that does
    not fit, RuntimeError for a failed check, KeyboardInterrupt on Ctrl-C (CPU backend).
    """
    arrays = {"q": q, "k": k, "v": v}
    devices = {name: _device(name, a) for name, a in arrays.items()}
    if len(set(devices.values())) != 1:
        raise ValueError("q, k and v must be on one device; they are on "
                         + ", ".join(f"{n}: {_device_name(d)}" for n, d in devices.items()))
    kind, index = devices["q"]
    kinds = {n: type(a).__module__.split(".")[0] for n, a in arrays.items()}
    if len(set(kinds.values())) != 1 and ("torch" in kinds.values() or kind == _DLPACK_CUDA):
        raise TypeError("q, k and v must be arrays of one framework; they are "
                        + ", ".join(f"{n}: {type(a).__module__}.{type(a).__name__}"
                                    for n, a in arrays.items()))
    if kind == _DLPACK_CUDA:
        _cuda.refuse_unless_supported(q, _device_name((kind, index)), _flag("counters", counters),
                                      _text("schedule", schedule, allow_none=False),
                                      _text("model_gpu", model_gpu))
    elif kind != _DLPACK_CPU:
        raise ValueError(f"q is on {_device_name((kind, index))}: only host (CPU) arrays and "
                         "CUDA arrays (PyTorch, CuPy) are supported")
    if type(q).__module__.startswith("torch"):
        import torch
        if torch.is_grad_enabled() and any(a.requires_grad for a in arrays.values()):
            if counters:
                raise ValueError("counters=True counts a forward run: call it under "
                                 "torch.no_grad() (or on tensors that do not require grad)")
            backward = next(s for s in _core.steps() if s.get("backward"))
            if q.dim() == 4 and q.shape[-1] not in backward["head_dims"]:
                raise ValueError(f"q, k or v requires grad, and the backward ({backward['name']}) "
                                 f"supports head dims {', '.join(map(str, backward['head_dims']))}"
                                 f", not {q.shape[-1]}: call it under torch.no_grad()")
            return _Autograd.apply_to(q, k, v, step, dict(
                causal=causal, scale=scale, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                dropout=dropout, seed=seed, dtype=dtype, schedule=schedule),
                dict(rung=rung, variant=variant, config=config, check=check))
        if kind == _DLPACK_CPU:  # (CUDA tensors are detached where they are taken)
            arrays = {n: a.detach() for n, a in arrays.items()}  # DLPack exports no graph
    if isinstance(rung, bool) or not isinstance(rung, (str, int, np.integer, type(None))):
        raise TypeError(f"rung must be a name, a number or None, not {rung!r}")
    step, rung = _step_and_rung(step, rung)
    seed = operator.index(seed)
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed={seed}: must be in [0, 2^64)")
    options = dict(
        causal=_flag("causal", causal), scale=None if scale is None else _real("scale", scale),
        seqlens_q=_lengths("seqlens_q", seqlens_q), seqlens_k=_lengths("seqlens_k", seqlens_k),
        dropout=_real("dropout", dropout), seed=seed,
        rung=None if rung is None else str(rung), variant=_text("variant", variant),
        config=_text("config", config),
        tuned_table=_TUNED_TABLE if os.path.exists(_TUNED_TABLE) else None,
        check=_flag("check", check))
    if kind == _DLPACK_CUDA:
        return _cuda.run_in_place(step, q, k, v, _text("dtype", dtype), **options)
    o, lse, row, _notes = _core.run(
        step, arrays["q"], arrays["k"], arrays["v"], dtype=_text("dtype", dtype),
        schedule=_text("schedule", schedule, allow_none=False),
        counters=_flag("counters", counters), model_gpu=_text("model_gpu", model_gpu),
        handle_sigint=threading.current_thread() is threading.main_thread(), **options)
    o, lse = _like(q, o), _like(q, lse, keep_float32=True)
    if counters:
        return o, lse, {f: _number(row[f]) for f in _COUNTER_FIELDS}
    return o, lse


def attention_backward(q: Any, k: Any, v: Any, o: Any, lse: Any, dout: Any,
                       step: str | int = "step6_backward", *, causal: bool = False,
                       scale: float | None = None, seqlens_q: Sequence[int] | None = None,
                       seqlens_k: Sequence[int] | None = None, dropout: float = 0.0,
                       seed: int = 0, dtype: str | None = None, variant: str | None = None,
                       schedule: str = "forward", check: bool = False) -> tuple[Any, Any, Any]:
    """dQ, dK and dV of attention for the upstream gradient dout, by a backward step (step 6).

    q, k, v as for flashsteps.attention; o and lse the forward's outputs for them (what
    flashsteps.attention returned, with the same causal, scale, seqlens, dropout and seed), and
    dout the gradient of the loss with respect to o: o and dout of q's shape and dtype, lse
    float32 (batch, heads, seqlen_q). Host arrays (NumPy, PyTorch CPU tensors, JAX) run on the
    CPU backend; CUDA arrays (PyTorch, CuPy), all six on one device, run the GPU build in place
    on the framework's current stream, the gradients the framework's own arrays (schedule must
    then be 'forward'). step: 'step6_backward' or 6. variant: its 'sm80' or 'sm90a' kernel; by
    default sm90a on a Hopper GPU (a build with 90a), sm80 elsewhere (the CPU backend runs
    either, with the same bits). check: also compare dQ, dK and dV with the
    FP64 gradients (the gate of docs/architecture.md; RuntimeError if it fails; CUDA arrays are
    copied to the host to do so).

    Returns (dq, dk, dv) in q's framework and dtype (float32 for float32/float64 inputs), of q's,
    k's and v's shapes; dk and dv sum over the query heads of each key/value head's group (GQA).
    Raises ValueError for invalid input (a missing o, lse or dout included), TypeError for an
    argument of the wrong kind, MemoryError for a problem that does not fit, RuntimeError for a
    failed check, KeyboardInterrupt on Ctrl-C.
    """
    arrays = {"q": q, "k": k, "v": v}
    for name, a in {"o": o, "lse": lse, "dout": dout}.items():
        if a is None:
            raise ValueError(f"{name} is missing: the backward reads the forward's o and lse and "
                             "the upstream gradient dout")
        arrays[name] = a
    devices = {name: _device(name, a) for name, a in arrays.items()}
    kind, index = devices["q"]
    for name, device in devices.items():
        if device != devices["q"]:
            raise ValueError(f"{name} is on {_device_name(device)} and q on "
                             f"{_device_name(devices['q'])}: the backward takes its six arrays "
                             "on one device")
    if kind == _DLPACK_CUDA:
        _cuda.refuse_unless_supported(q, _device_name((kind, index)), False,
                                      _text("schedule", schedule, allow_none=False), None)
        if len({type(a).__module__.split(".")[0] for a in arrays.values()}) != 1:
            raise TypeError("q, k, v, o, lse and dout must be arrays of one framework")
    elif kind != _DLPACK_CPU:
        raise ValueError(f"q is on {_device_name((kind, index))}: only host (CPU) arrays and "
                         "CUDA arrays (PyTorch, CuPy) are supported")
    if type(q).__module__.startswith("torch"):
        arrays = {n: a.detach() for n, a in arrays.items()}  # DLPack exports no autograd graph
    step, rung = _step_and_rung(step, None)
    if rung is not None:
        raise ValueError(f"step={step!r}: attention_backward runs the step's own kernel; its "
                         "rungs run from the step's executable (--rung)")
    seed = operator.index(seed)
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed={seed}: must be in [0, 2^64)")
    if kind == _DLPACK_CUDA:
        return _cuda.backward_in_place(
            step, arrays["q"], arrays["k"], arrays["v"], arrays["o"], arrays["lse"],
            arrays["dout"], _text("dtype", dtype), causal=_flag("causal", causal),
            scale=None if scale is None else _real("scale", scale),
            seqlens_q=_lengths("seqlens_q", seqlens_q), seqlens_k=_lengths("seqlens_k", seqlens_k),
            dropout=_real("dropout", dropout), seed=seed, variant=_text("variant", variant),
            check=_flag("check", check))
    dq, dk, dv, _row, _notes = _core.backward(
        step, arrays["q"], arrays["k"], arrays["v"], arrays["o"], arrays["lse"], arrays["dout"],
        dtype=_text("dtype", dtype), causal=_flag("causal", causal),
        scale=None if scale is None else _real("scale", scale),
        seqlens_q=_lengths("seqlens_q", seqlens_q), seqlens_k=_lengths("seqlens_k", seqlens_k),
        dropout=_real("dropout", dropout), seed=seed, variant=_text("variant", variant),
        schedule=_text("schedule", schedule, allow_none=False), check=_flag("check", check),
        handle_sigint=threading.current_thread() is threading.main_thread())
    return _like(q, dq), _like(k, dk), _like(v, dv)


class _Autograd:
    """flashsteps.attention on PyTorch tensors that require grad (host or CUDA): the forward by
    the chosen step, the backward by step 6 (attention_backward) on the forward's own O and LSE,
    on the tensors' device. LSE is an
    output without a gradient (marked non-differentiable: a loss that uses it gets none through
    it)."""

    _function = None

    @classmethod
    def apply_to(cls, q, k, v, step, problem, forward_only):
        if cls._function is None:
            import torch

            class Function(torch.autograd.Function):
                @staticmethod
                def forward(ctx, q, k, v, step, problem, forward_only):
                    o, lse = attention(q.detach(), k.detach(), v.detach(), step, **problem,
                                       **forward_only)
                    ctx.save_for_backward(q, k, v, o, lse)
                    ctx.mark_non_differentiable(lse)
                    ctx.problem, ctx.check = problem, forward_only["check"]
                    return o, lse

                @staticmethod
                def backward(ctx, do, _dlse):
                    q, k, v, o, lse = ctx.saved_tensors
                    dq, dk, dv = attention_backward(q.detach(), k.detach(), v.detach(), o, lse,
                                                    do.contiguous(), check=ctx.check, **ctx.problem)
                    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None

            cls._function = Function
        return cls._function.apply(q, k, v, step, problem, forward_only)


def _device_name(device: tuple[int, int]) -> str:
    names = {_DLPACK_CPU: "cpu", _DLPACK_CUDA: "cuda", 3: "cuda (pinned host)", 4: "OpenCL",
             7: "Vulkan", 8: "Metal", 10: "ROCm", 13: "cuda (managed)", 14: "oneAPI"}
    return f"{names.get(device[0], f'DLPack device type {device[0]}')}:{device[1]}"


def _like(ref: Any, a: np.ndarray, keep_float32: bool = False) -> Any:
    """`a` (float32) as an array of `ref`'s framework, device and 16-bit dtype (float32 when
    `keep_float32` or when ref is float32/float64). Every fp16 and bf16 value is a float32
    exactly, so the conversion loses nothing."""
    module = type(ref).__module__
    if module.startswith("torch"):
        import torch
        t = torch.from_numpy(a)
        sixteen = ref.dtype in (torch.float16, torch.bfloat16)
        return t.to(device=ref.device, dtype=ref.dtype if sixteen and not keep_float32
                    else torch.float32)
    if module.startswith("jax"):
        import jax.numpy as jnp
        sixteen = ref.dtype in (jnp.float16, jnp.bfloat16)
        return jnp.asarray(a, dtype=ref.dtype if sixteen and not keep_float32 else jnp.float32)
    if isinstance(ref, np.ndarray) and ref.dtype == np.float16 and not keep_float32:
        return a.astype(np.float16)
    return a
