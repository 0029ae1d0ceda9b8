// What a step's kernel file includes. The file is compiled twice:
//   - by nvcc for the GPU (this header then pulls in the CUDA runtime), and
//   - by the host compiler against the CPU SIMT backend (common/simt);
// and, for --counters, a third time: the CPU copy with every access instrumented.
// Each copy lives in its own namespace, `stepN::gpu`, `stepN::cpu` or `stepN::counted`, chosen by
// ATTN_BACKEND_NS (the build defines it for the counted copy):
//     namespace step1::ATTN_BACKEND_NS { ... }
#pragma once

#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "common/attention_params.h"
#include "common/dropout.h"
#include "common/online_softmax.h"
#include "common/run_context.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define ATTN_BACKEND_NS gpu
#else
#include "common/simt/simt.h"
#ifndef ATTN_BACKEND_NS
#define ATTN_BACKEND_NS cpu
#endif
#endif

#include "common/launch.h"

namespace attn {

// The block's dynamic shared memory (the launch's smem_bytes), as T*.
template <typename T>
__device__ __forceinline__ T* shared_memory() {
#if defined(__CUDACC__)
  extern __shared__ __align__(1024) unsigned char attn_dynamic_smem[];
  return reinterpret_cast<T*>(attn_dynamic_smem);
#else
  return simt::dynamic_shared<T>();
#endif
}

// Element types of the two dtypes, and conversions used by every step.
template <DType D>
struct ElementOf;
template <>
struct ElementOf<DType::fp16> {
  using type = __half;
};
template <>
struct ElementOf<DType::bf16> {
  using type = __nv_bfloat16;
};

__device__ __forceinline__ float to_float(__half x) {
#if defined(__CUDACC__)
  return __half2float(x);
#else  // the CPU backend: the same value by branch-free bit operations (common/simt/ptx.h)
  return simt::f16_bits_to_float(__half_as_ushort(x));
#endif
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Calls f.template operator()<T>() with T the element type of p.dtype: the one place a step turns
// the run-time dtype into a compile-time type.
template <typename F>
void dispatch_dtype(DType dtype, F&& f) {
#if defined(ATTN_ONLY_BF16)  // the tests' copies of kernels with a planted bug: bf16 only
  if (dtype != DType::bf16) throw std::invalid_argument("this test copy is built for bf16 only");
  f.template operator()<__nv_bfloat16>();
#elif defined(ATTN_ONLY_FP16)  // scripts/exercise.py's first, quick build of an answer: fp16 only
  if (dtype != DType::fp16) throw std::invalid_argument("this quick copy is built for fp16 only");
  f.template operator()<__half>();
#else
  if (dtype == DType::fp16)
    f.template operator()<__half>();
  else
    f.template operator()<__nv_bfloat16>();
#endif
}

// A loop whose counter is a compile-time constant: calls f(std::integral_constant<int, i>{}) for
// i = 0 .. N - 1, in order (in device code, read the counter as its `.value`: the conversion to
// int is a host function). Step 4's pipeline calls its tile body this way, kStages tiles at a
// time, so that the stage of each is a constant and its shared-memory addresses immediates.
template <typename F, int... i>
__device__ __forceinline__ void static_for(F&& f, std::integer_sequence<int, i...>) {
  (f(std::integral_constant<int, i>{}), ...);
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for(f, std::make_integer_sequence<int, N>{});
}

}  // namespace attn
