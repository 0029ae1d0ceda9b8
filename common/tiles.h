// Moving tiles between global and shared memory, and reducing across the threads of a row.
// Introduced by step2_tiled (see its README) and used by every later CUDA-core step.
#pragma once

#include <stdexcept>
#include <string>

#include "common/kernel.h"

namespace attn {

// Copies rows [0, n_rows) of a row-major [*, D] matrix of 16-bit elements into shared memory
// with a row stride of `stride` elements, 16 bytes (8 elements) per load, all threads of the block
// sharing the work. Rows at or past `valid_rows` are filled with zeros, so a partial tile at the
// end of a sequence needs no special case later. 16-byte loads need every row start 16-byte
// aligned: D % 8 == 0 (true for every head dim the steps support) and stride % 8 == 0.
template <int D, typename T>
__device__ __forceinline__ void load_rows_16B(T* smem, int stride, const T* gmem, int n_rows,
                                              int valid_rows) {
  static_assert(sizeof(T) == 2 && D % 8 == 0, "16-byte loads of 8 half-precision elements");
  constexpr int kVecsPerRow = D / 8;
  const int nthreads = blockDim.x * blockDim.y * blockDim.z;
  for (int v = threadIdx.x; v < n_rows * kVecsPerRow; v += nthreads) {
    const int row = v / kVecsPerRow, col = v % kVecsPerRow * 8;
    uint4 data = make_uint4(0, 0, 0, 0);
    if (row < valid_rows) data = *reinterpret_cast<const uint4*>(gmem + int64_t(row) * D + col);
    *reinterpret_cast<uint4*>(smem + row * stride + col) = data;
  }
}

// Max and sum over the `Width` neighbouring lanes that share a row (Width a power of two <= 32):
// after log2(Width) butterfly steps every one of them holds the result.
template <int Width>
__device__ __forceinline__ float row_max(float x) {
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset, Width));
  return x;
}

template <int Width>
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset, Width);
  return x;
}

// Calls f.template operator()<D>() with the head dim as a compile-time constant, for the head dims
// the CUDA-core and tensor-core steps support. Only these four are instantiated (and only
// ATTN_ONLY_HEAD_DIM in the tests' copies of kernels with a planted bug, which need one, and in
// scripts/exercise.py's first, quick build of an answer).
template <typename F>
void dispatch_head_dim(int dim, F&& f) {
#if defined(ATTN_ONLY_HEAD_DIM)
  if (dim != ATTN_ONLY_HEAD_DIM)
    throw std::invalid_argument("this test copy of the kernel is built for head dim " +
                                std::to_string(ATTN_ONLY_HEAD_DIM) + " only");
  f.template operator()<ATTN_ONLY_HEAD_DIM>();
#else
  switch (dim) {
    case 64: f.template operator()<64>(); break;
    case 80: f.template operator()<80>(); break;
    case 96: f.template operator()<96>(); break;
    case 128: f.template operator()<128>(); break;
    default:  // the harness rejects other head dims before a step runs
      throw std::invalid_argument("head dim " + std::to_string(dim) + " is not instantiated");
  }
#endif
}

}  // namespace attn
