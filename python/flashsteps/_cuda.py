"""CUDA arrays in place: the GPU build reads q, k, v where they are and writes O and LSE into the
caller's framework's own arrays, on its current stream, with no copy through the host.

A framework is supported when flashsteps knows its current stream and can allocate its arrays:
PyTorch (torch.cuda.current_stream) and CuPy (cupy.cuda.get_current_stream). The kernels take
C-contiguous arrays at addresses that are multiples of 16 bytes; any other array is copied once,
on its device and stream, by the framework itself, as are float32/float64 arrays rounded to the
16-bit dtype the kernels compute in."""

from __future__ import annotations

from typing import Any

from . import _core

_SIXTEEN = ("fp16", "bf16")


def _torch_prepare(arrays: dict[str, Any], dtype: str | None) -> tuple[dict[str, Any], Any]:
    import torch
    wide = {torch.float32, torch.float64}
    to = {"fp16": torch.float16, "bf16": torch.bfloat16}
    if dtype in to and all(a.dtype in wide for a in arrays.values()) and \
            len({a.dtype for a in arrays.values()}) == 1:
        # Rounded on the device, to nearest even (PyTorch rounds float64 through float32).
        arrays = {n: a.detach().to(to[dtype]) for n, a in arrays.items()}
    out = {}
    for name, a in arrays.items():
        a = a.detach()
        if not a.is_contiguous() or a.data_ptr() % 16:
            a = a.clone(memory_format=torch.contiguous_format)
        out[name] = a
    return out, torch.cuda.current_stream(next(iter(out.values())).device).cuda_stream


def _torch_empty(ref: Any, shape: tuple[int, ...], float32: bool) -> Any:
    import torch
    return torch.empty(shape, dtype=torch.float32 if float32 else ref.dtype, device=ref.device)


def _cupy_prepare(arrays: dict[str, Any], dtype: str | None) -> tuple[dict[str, Any], Any]:
    import cupy
    wide = {cupy.dtype(cupy.float32), cupy.dtype(cupy.float64)}
    out = {}
    with next(iter(arrays.values())).device:
        if dtype in _SIXTEEN and all(a.dtype in wide for a in arrays.values()) and \
                len({a.dtype for a in arrays.values()}) == 1:
            if dtype == "bf16":
                raise ValueError("dtype='bf16': CuPy has no bfloat16 arrays to hold the rounded "
                                 "inputs and O; use dtype='fp16', or PyTorch tensors")
            arrays = {n: a.astype(cupy.float16) for n, a in arrays.items()}
        for name, a in arrays.items():
            if not a.flags.c_contiguous or a.data.ptr % 16:
                a = a.copy(order="C")  # a fresh allocation: contiguous and aligned
            out[name] = a
        stream = cupy.cuda.get_current_stream().ptr
    return out, stream


def _cupy_empty(ref: Any, shape: tuple[int, ...], float32: bool) -> Any:
    import cupy
    with ref.device:
        return cupy.empty(shape, dtype=cupy.float32 if float32 else ref.dtype)


_FRAMEWORKS = {"torch": (_torch_prepare, _torch_empty), "cupy": (_cupy_prepare, _cupy_empty)}


def framework(q: Any) -> str:
    return type(q).__module__.split(".")[0]


def refuse_unless_supported(q: Any, where: str, counters: bool, schedule: str,
                            model_gpu: str | None) -> None:
    """ValueError, in one line, for a CUDA array flashsteps cannot run in place."""
    if not _core.gpu_built:
        raise ValueError(f"q is a CUDA array ({where}), and this build of flashsteps has no GPU "
                         "code (built without the CUDA toolkit): pass host arrays, or install "
                         "flashsteps with nvcc on PATH")
    if counters or model_gpu is not None:
        raise ValueError(f"{'counters=True' if counters else 'model_gpu'}: the counts are taken "
                         "on the CPU backend: pass host arrays (the same arrays copied to the "
                         "host)")
    if schedule != "forward":
        raise ValueError(f"schedule={schedule!r} orders the CPU backend's threads; a CUDA array "
                         "runs on the GPU, which has its own order: pass host arrays")
    name = framework(q)
    if name not in _FRAMEWORKS:
        raise ValueError(f"q is a {type(q).__module__} array on {where}: CUDA arrays run in "
                         "place as PyTorch tensors or CuPy arrays (flashsteps knows their "
                         "streams); pass one of those, or a host array for the CPU backend")


def run_in_place(step: str, q: Any, k: Any, v: Any, dtype: str | None,
                 **options: Any) -> tuple[Any, Any]:
    """O and LSE of the step on CUDA arrays, in their framework (O in q's 16-bit dtype, float32
    for float32/float64 inputs)."""
    if framework(q) == "torch":
        import torch
        # On q's device: PyTorch exports a tensor through DLPack from its current device.
        with torch.cuda.device(q.device):
            return _run(step, q, k, v, dtype, **options)
    return _run(step, q, k, v, dtype, **options)


def _run(step: str, q: Any, k: Any, v: Any, dtype: str | None, **options: Any) -> tuple[Any, Any]:
    prepare, empty = _FRAMEWORKS[framework(q)]
    wide = str(q.dtype).rsplit(".", 1)[-1] in ("float32", "float64")
    arrays, stream = prepare({"q": q, "k": k, "v": v}, dtype)
    q16 = arrays["q"]
    shape = tuple(q16.shape) if len(q16.shape) == 4 else (1, 1, 1, 1)
    o = empty(q16, shape, float32=False)
    lse = empty(q16, shape[:3], float32=True)
    _core.run_cuda(step, arrays["q"], arrays["k"], arrays["v"], o, lse, stream=stream,
                   dtype=dtype, **options)
    if not wide:
        return o, lse
    if framework(q) == "cupy":
        with q.device:
            return o.astype("float32"), lse
    return o.float(), lse


def backward_in_place(step: str, q: Any, k: Any, v: Any, o: Any, lse: Any, dout: Any,
                      dtype: str | None, **options: Any) -> tuple[Any, Any, Any]:
    """dQ, dK and dV of a backward step on CUDA arrays, in their framework (in q's 16-bit dtype,
    float32 for float32/float64 inputs): the kernels read q, k, v, the forward's o and lse and
    dout where they are, and write the gradients into arrays the framework allocates."""
    if framework(q) == "torch":
        import torch
        with torch.cuda.device(q.device):
            return _backward(step, q, k, v, o, lse, dout, dtype, **options)
    return _backward(step, q, k, v, o, lse, dout, dtype, **options)


def _backward(step: str, q: Any, k: Any, v: Any, o: Any, lse: Any, dout: Any, dtype: str | None,
              **options: Any) -> tuple[Any, Any, Any]:
    prepare, empty = _FRAMEWORKS[framework(q)]
    wide = str(q.dtype).rsplit(".", 1)[-1] in ("float32", "float64")
    arrays, stream = prepare({"q": q, "k": k, "v": v}, dtype)
    # o and dout as q is taken (a float32 o of float64 inputs, say, rounded the same way); lse
    # float32 (the forward's), contiguous and aligned.
    grads, _ = prepare({"o": o, "dout": dout}, dtype)
    lse32, _ = prepare({"lse": lse.astype("float32") if framework(q) == "cupy" else lse.float()},
                       None)
    q16, k16 = arrays["q"], arrays["k"]
    dq = empty(q16, tuple(q16.shape), float32=False)
    dk = empty(k16, tuple(k16.shape), float32=False)
    dv = empty(k16, tuple(k16.shape), float32=False)
    _core.run_cuda(step, q16, k16, arrays["v"], grads["o"], lse32["lse"], stream=stream,
                   dtype=dtype, dout=grads["dout"], dq=dq, dk=dk, dv=dv, **options)
    if not wide:
        return dq, dk, dv
    if framework(q) == "cupy":
        with q.device:
            return dq.astype("float32"), dk.astype("float32"), dv.astype("float32")
    return dq.float(), dk.float(), dv.float()
