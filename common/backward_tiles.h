// What step 6's kernels (step6_backward, the backward pass) need but are not about: a warp's
// tile products on tensor cores, the write of its accumulators, and the copies of rows into
// shared memory. Each is a pattern that an earlier step or rung teaches in full, written once
// here so that a rung's code, and its diff from the rung before, shows only its own idea:
//
//   load_rows          rows of a tensor into shared memory, zeros past the end (step 2's
//                      load_rows_16B; rung 6.3 copies one element a thread at a time)
//   load_rows_async    the same as cp.async, a fixed number of copies a thread (step 4's rung
//                      4.5; rung 6.9 puts them in a two-stage pipeline)
//   warp_mma_abt2      two products acc += A B^T, A and B rows in shared memory: step 4's
//                      S = Q K^T (rung 6.8's S and dP), and the transposed S^T = K Q^T that rung
//                      6.5 writes out by hand (rung 6.6's S^T and dP^T)
//   warp_mma_ab(2)     acc += A B, A in registers as A fragments, B's rows in shared memory read
//                      through ldmatrix.trans: step 4's O += P V (rung 4.2), rung 6.6's dV and dK
//                      and rungs 6.7 and 6.8's dQ
//   store_tiles        a warp's accumulator tiles, scaled and rounded, into rows of a tensor
//   atomic_add_tiles   the same added to an FP32 tensor with atomicAdd (rung 6.7's dQ)
//
// Fragments and accumulators are common/ptx.h's (mma.sync m16n8k16): element e of accumulator
// tile n of a warp's 16 x 8 NT tile is row g + 8 (e / 2), column 8 n + 2t + e % 2, where lane is
// the calling lane (threadIdx.x % 32, which the kernels pass), g = lane / 4 and t = lane % 4.
// Every shared row is `stride` 16-bit elements long: the kernels pad their rows (step 4's
// padding), so that the 8 rows an ldmatrix reads start in different banks. The sm_90a kernel's
// tiles are TMA's boxes instead, in Tile<D>'s 128-byte swizzle (common/swizzled_tile.h): the
// products take a layout, PaddedRows or SwizzledRows, in place of the stride.
#pragma once

#include "common/ptx.h"
#include "common/swizzled_tile.h"
#include "common/tiles.h"

// On the CPU backend, the helpers that issue PTX instructions take the caller's source location as
// common/ptx.h's wrappers do (a defaulted last parameter, ATTN_PTX_WHERE) and hand it on to each
// instruction: a misuse (a copy read before it landed, say) is reported at the kernel's line that
// called the helper, not inside this header.
#if defined(SIMT_BACKEND)
#define ATTN_PTX_CALLER , where
#else
#define ATTN_PTX_CALLER
#endif

namespace attn {

// Rows first_row .. first_row + n_rows - 1 of `tensor`, a row-major [*, dim] tensor of T (a kernel
// parameter such as p.q), into shared memory, `stride` elements a row, one element a thread at a
// time (the head dim known at run time); rows from first_row + valid_rows on are zeros, so that a
// partial tile at the end of a sequence needs no special case later.
template <typename T>
__device__ __forceinline__ void load_rows(T* smem, int stride, const void* tensor,
                                          int64_t first_row, int n_rows, int valid_rows, int dim) {
  const int nthreads = blockDim.x * blockDim.y * blockDim.z;
  for (int x = threadIdx.x; x < n_rows * dim; x += nthreads) {
    const int row = x / dim, col = x % dim;
    smem[row * stride + col] =
        row < valid_rows ? static_cast<const T*>(tensor)[first_row * dim + x] : from_float<T>(0.0f);
  }
}

// The same copy with the head dim D a compile-time constant, 16 bytes a load: common/tiles.h's
// load_rows_16B, from row first_row of `tensor` on.
template <int D, typename T>
__device__ __forceinline__ void load_rows(T* smem, int stride, const void* tensor,
                                          int64_t first_row, int n_rows, int valid_rows) {
  load_rows_16B<D>(smem, stride, static_cast<const T*>(tensor) + first_row * D, n_rows, valid_rows);
}

// The same copy of kRows rows as cp.async: no registers, and nothing waits for it until
// cp_async_wait; the rows from valid_rows on are zero-filled (a source size of 0 bytes, from the
// tile's first row). The block's kThreads threads share the 16-byte pieces, each a fixed number
// of them: a loop the compiler unrolls whole, so that a kernel's main loop holds no loop of its
// own. Where kThreads is a multiple of a row's pieces (D = 64 and 128), a thread copies the same
// column of every kThreads / (D / 8)-th row, and only its first address is computed.
template <int D, int kRows, int kThreads, typename T>
__device__ __forceinline__ void load_rows_async(T* smem, int stride, const void* tensor,
                                                int64_t first_row, int valid_rows ATTN_PTX_WHERE) {
  constexpr int kVecsPerRow = D / 8, kVecs = kRows * kVecsPerRow;
  const T* gmem = static_cast<const T*>(tensor) + first_row * D;
  if constexpr (kThreads % kVecsPerRow == 0) {
    constexpr int kRowsPerPass = kThreads / kVecsPerRow;
    const int row = threadIdx.x / kVecsPerRow, col = threadIdx.x % kVecsPerRow * 8;
    const int rows_left = valid_rows - row, from = row * D + col;
    T* to = smem + row * stride + col;
#pragma unroll
    for (int k = 0; k < (kRows + kRowsPerPass - 1) / kRowsPerPass; ++k) {
      if (kRows % kRowsPerPass != 0 && row + k * kRowsPerPass >= kRows) break;
      const bool valid = k * kRowsPerPass < rows_left;
      attn::cp_async_16(to + k * kRowsPerPass * stride,
                        gmem + (valid ? from + k * kRowsPerPass * D : 0),
                        valid ? 16 : 0 ATTN_PTX_CALLER);
    }
  } else {
#pragma unroll
    for (int k = 0; k < (kVecs + kThreads - 1) / kThreads; ++k) {
      const int v = k * kThreads + threadIdx.x, row = v / kVecsPerRow, col = v % kVecsPerRow * 8;
      if (kVecs % kThreads != 0 && v >= kVecs) break;
      const bool valid = row < valid_rows;
      attn::cp_async_16(smem + row * stride + col, gmem + (valid ? row * D + col : 0),
                        valid ? 16 : 0 ATTN_PTX_CALLER);
    }
  }
}

// Where element (r, c) of a shared tile is, in elements from the tile's start (at), and where the
// element dr rows below (dr a multiple of 8) or dc columns right of it (dc a multiple of 16) is,
// from its offset: rows `stride` elements apart (padded rows), or Tile<D>'s 128-byte swizzle of a
// tile of `rows` rows (TMA's boxes), whose 16-byte chunk c of row r is chunk c ^ (r % 8). There,
// for a lane's first column c0 < 16, columns c0 + dc sit at chunks (c0 / 8 + dc / 8) ^ (r % 8) =
// (c0 / 8 ^ r % 8) ^ dc / 8 of 64-column block dc / 64: the offset XOR dc % 64, plus the block's
// start. So a product computes each lane's offset once and adds or XORs constants (as step 5's
// rung 5.1 does by hand). A tile's rows may start at a multiple of 8 (a 16-row slice).
struct PaddedRows {
  int stride;
  __device__ __forceinline__ int at(int r, int c) const { return r * stride + c; }
  __device__ __forceinline__ int rows(int off, int dr) const { return off + dr * stride; }
  __device__ __forceinline__ int cols(int off, int dc) const { return off + dc; }
};
template <int D>
struct SwizzledRows {
  int rows_;  // the tile's rows: the distance between its 64-column blocks
  __device__ __forceinline__ int at(int r, int c) const { return Tile<D>::offset(r, c, rows_); }
  __device__ __forceinline__ int rows(int off, int dr) const { return off + dr * 64; }
  __device__ __forceinline__ int cols(int off, int dc) const {
    return (off ^ dc % 64) + dc / 64 * rows_ * 64;
  }
};

// Two products of one shape for one warp, on tensor cores: acc0 += A0 B0^T and acc1 += A1 B1^T,
// where A0 and A1 are 16 rows from row a_row of a0 and a1, and B0 and B1 the 8 NT rows of b0 and
// b1, each row K elements long and stored [row][k] in shared memory (layouts la and lb). Both
// operands are mma operands as they stand (A row-major, B "col"): per 16 columns of k, one
// ldmatrix.x4 gives an A fragment (a0a1: rows 0-7 and k 0-7, a2a3: rows 8-15, a4a5 and a6a7: k
// 8-15), and one ldmatrix.x4 of B the fragments of two accumulator tiles (b0b1 of rows 8 n ..
// 8 n + 7, then of the 8 after), as step 4 loads K for S = Q K^T.
template <typename T, int K, int NT, typename LA, typename LB>
__device__ __forceinline__ void warp_mma_abt2(float (&acc0)[NT][4], float (&acc1)[NT][4],
                                              const T* a0, const T* a1, int a_row, LA la,
                                              const T* b0, const T* b1, LB lb,
                                              int lane ATTN_PTX_WHERE) {
  static_assert(K % 16 == 0 && NT % 2 == 0, "k in steps of 16, accumulator tiles in pairs");
  const int a_lane = la.at(a_row + lane % 8 + 8 * (lane / 8 % 2), 8 * (lane / 16));
  const int b_lane = lb.at(lane % 8 + 8 * (lane / 16), 8 * (lane / 8 % 2));
#pragma unroll
  for (int kc = 0; kc < K / 16; ++kc) {
    uint32_t af0[4], af1[4];
    const int a_off = la.cols(a_lane, kc * 16);
    ldmatrix<4>(af0, a0 + a_off ATTN_PTX_CALLER);
    ldmatrix<4>(af1, a1 + a_off ATTN_PTX_CALLER);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t bf0[4], bf1[4];
      const int b_off = lb.rows(lb.cols(b_lane, kc * 16), 8 * n);
      ldmatrix<4>(bf0, b0 + b_off ATTN_PTX_CALLER);
      ldmatrix<4>(bf1, b1 + b_off ATTN_PTX_CALLER);
      mma_m16n8k16<T>(acc0[n], af0, {bf0[0], bf0[1]}, acc0[n] ATTN_PTX_CALLER);
      mma_m16n8k16<T>(acc1[n], af1, {bf1[0], bf1[1]}, acc1[n] ATTN_PTX_CALLER);
      mma_m16n8k16<T>(acc0[n + 1], af0, {bf0[2], bf0[3]}, acc0[n + 1] ATTN_PTX_CALLER);
      mma_m16n8k16<T>(acc1[n + 1], af1, {bf1[2], bf1[3]}, acc1[n + 1] ATTN_PTX_CALLER);
    }
  }
}

// The same with every row `stride` elements long (padded rows).
template <typename T, int K, int NT>
__device__ __forceinline__ void warp_mma_abt2(float (&acc0)[NT][4], float (&acc1)[NT][4],
                                              const T* a0, const T* a1, int a_row, const T* b0,
                                              const T* b1, int stride, int lane ATTN_PTX_WHERE) {
  warp_mma_abt2<T, K>(acc0, acc1, a0, a1, a_row, PaddedRows{stride}, b0, b1, PaddedRows{stride},
                      lane ATTN_PTX_CALLER);
}

// acc += A B for one warp, on tensor cores: A (16 x 16 KC) in registers as KC A fragments, B
// (16 KC rows x 8 NT columns) stored [k][n] in shared memory. The B operand is needed [n][k], so
// ldmatrix.x4.trans gives it, two accumulator tiles' fragments at a time, as step 4 reads V for
// O += P V.
template <typename T, int KC, int NT>
__device__ __forceinline__ void warp_mma_ab(float (&acc)[NT][4], const uint32_t (&a)[KC][4],
                                            const T* b, int stride, int lane ATTN_PTX_WHERE) {
  static_assert(NT % 2 == 0, "accumulator tiles in pairs");
#pragma unroll
  for (int n = 0; n < NT; n += 2)
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      uint32_t bf[4];
      const int row = kc * 16 + lane % 8 + 8 * (lane / 8 % 2);
      ldmatrix<4, true>(bf, b + row * stride + 8 * n + 8 * (lane / 16) ATTN_PTX_CALLER);
      mma_m16n8k16<T>(acc[n], a[kc], {bf[0], bf[1]}, acc[n] ATTN_PTX_CALLER);
      mma_m16n8k16<T>(acc[n + 1], a[kc], {bf[2], bf[3]}, acc[n + 1] ATTN_PTX_CALLER);
    }
}

// Two such products of one k-step (16 rows of B) each: acc0 += A0 B0 and acc1 += A1 B1, B0 and B1
// in layout lb.
template <typename T, int NT, typename LB>
__device__ __forceinline__ void warp_mma_ab2(float (&acc0)[NT][4], float (&acc1)[NT][4],
                                             const uint32_t (&a0)[4], const uint32_t (&a1)[4],
                                             const T* b0, const T* b1, LB lb,
                                             int lane ATTN_PTX_WHERE) {
  static_assert(NT % 2 == 0, "accumulator tiles in pairs");
  const int b_lane = lb.at(lane % 8 + 8 * (lane / 8 % 2), 8 * (lane / 16));
#pragma unroll
  for (int n = 0; n < NT; n += 2) {
    uint32_t bf0[4], bf1[4];
    const int b_off = lb.cols(b_lane, 8 * n);
    ldmatrix<4, true>(bf0, b0 + b_off ATTN_PTX_CALLER);
    ldmatrix<4, true>(bf1, b1 + b_off ATTN_PTX_CALLER);
    mma_m16n8k16<T>(acc0[n], a0, {bf0[0], bf0[1]}, acc0[n] ATTN_PTX_CALLER);
    mma_m16n8k16<T>(acc0[n + 1], a0, {bf0[2], bf0[3]}, acc0[n + 1] ATTN_PTX_CALLER);
    mma_m16n8k16<T>(acc1[n], a1, {bf1[0], bf1[1]}, acc1[n] ATTN_PTX_CALLER);
    mma_m16n8k16<T>(acc1[n + 1], a1, {bf1[2], bf1[3]}, acc1[n + 1] ATTN_PTX_CALLER);
  }
}

// The same with every row of B `stride` elements long (padded rows).
template <typename T, int NT>
__device__ __forceinline__ void warp_mma_ab2(float (&acc0)[NT][4], float (&acc1)[NT][4],
                                             const uint32_t (&a0)[4], const uint32_t (&a1)[4],
                                             const T* b0, const T* b1, int stride,
                                             int lane ATTN_PTX_WHERE) {
  warp_mma_ab2<T>(acc0, acc1, a0, a1, b0, b1, PaddedRows{stride}, lane ATTN_PTX_CALLER);
}

// Writes a warp's 16 x 8 NT accumulator tiles, times `scale` and rounded to T, into rows
// first_row .. first_row + 15 of `out`, a row-major tensor of 8 NT columns; rows from first_row +
// valid_rows on (past the end of the sequence) are left alone. Each lane writes its own elements:
// no barrier is needed.
template <typename T, int NT>
__device__ __forceinline__ void store_tiles(void* out, int64_t first_row, const float (&acc)[NT][4],
                                            float scale, int valid_rows) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  T* rows = static_cast<T*>(out) + first_row * (8 * NT);
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e / 2), c = 8 * n + 2 * t + e % 2;
      if (r < valid_rows) rows[r * (8 * NT) + c] = from_float<T>(scale * acc[n][e]);
    }
}

// Adds a warp's 16 x 8 NT accumulator tiles, times `scale`, to the FP32 rows of `out` (`row_len`
// floats apart) with atomicAdd, where other blocks add to the same elements; rows from valid_rows
// on are left alone.
template <int NT>
__device__ __forceinline__ void atomic_add_tiles(float* out, int row_len, const float (&acc)[NT][4],
                                                 float scale, int valid_rows) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e / 2), c = 8 * n + 2 * t + e % 2;
      if (r < valid_rows) atomicAdd(&out[r * row_len + c], scale * acc[n][e]);
    }
}

}  // namespace attn
