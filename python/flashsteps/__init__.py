"""FlashAttention in six steps, called from Python.

    o, lse = flashsteps.attention(q, k, v, step="step4_tensorcore", causal=True)

q is (batch, heads, seqlen_q, head_dim), k and v (batch, heads_kv, seqlen_k, head_dim), the
layout of torch.nn.functional.scaled_dot_product_attention; any DLPack array (NumPy, PyTorch,
JAX). Host arrays run on the CPU backend (the kernels executed by the project's SIMT emulator);
PyTorch and CuPy CUDA arrays run on their GPU in place, on the framework's current stream.
`flashsteps.attention_backward(q, k, v, o, lse, dout)` returns dQ, dK and dV by step 6 (host
arrays). `flashsteps.benchmark(...)` times a step beside SDPA's backends on the GPU.
`python -m flashsteps --help` lists the steps and their rungs.
"""

from ._attention import attention, attention_backward, steps
from ._benchmark import benchmark
from . import _core

gpu_built: bool = _core.gpu_built
"""True when this build holds GPU code (it was compiled with the CUDA toolkit)."""

cuda_architectures: list[str] = [f"sm_{a}" for a in _core.cuda_architectures.split(",") if a]
"""The GPU architectures this build holds code for, e.g. ['sm_75', ..., 'sm_120'] (steps 4 and 5
from sm_80 on: docs/gpus.md); empty without the CUDA toolkit."""

__all__ = ["attention", "attention_backward", "benchmark", "steps", "gpu_built",
           "cuda_architectures"]
