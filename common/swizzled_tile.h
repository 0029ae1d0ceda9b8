// The swizzled shared-memory tile of the tensor-core kernels, and the cp.async copy that fills it.
// Step 4 builds both, one rung at a time: the layout in rung 4.4 (`swizzle`), the copy with its
// offsets computed once in rung 4.9 (`copies`); those rungs write them out, where they are the
// lesson. The rungs after each, step 4's own kernel and step 5's kernels, which only use them,
// include this header.
#pragma once

#include "common/ptx.h"

namespace attn {

// Shared tiles are [rows][D] matrices of 16-bit elements stored in 64-column blocks, each row of
// a block 128 bytes = 8 chunks of 16 bytes, with chunk c of row r stored at chunk c ^ (r % 8):
//
//            chunk:  0  1  2  3  4  5  6  7        ldmatrix reads one 16-byte chunk from each of
//    row 0          0  1  2  3  4  5  6  7        8 consecutive rows. Unswizzled, the 8 chunks
//    row 1          1  0  3  2  5  4  7  6        of logical column c sit 128 bytes apart: the
//    row 2          2  3  0  1  6  7  4  5        same 4 banks, an 8-way conflict. Swizzled,
//    row 3          3  2  1  0  7  6  5  4        logical chunk c of rows 0..7 lands in physical
//    ...                                          chunks c^0 .. c^7: all 8 distinct, all 32
//    row 7          7  6  5  4  3  2  1  0        banks, one transaction.
//
// (The table shows which logical chunk each physical chunk holds.) It is also TMA's and wgmma's
// 128-byte swizzle (step 5). Head dims that are not a multiple of 64 (80, 96) use a second,
// partly filled block of 64 columns.
template <int D>
struct Tile {
  static constexpr int kBlocks = (D + 63) / 64;
  // Offset, in elements, of element (r, d) of a tile with `rows` rows.
  static __device__ __forceinline__ int offset(int r, int d, int rows) {
    return (d / 64) * rows * 64 + r * 64 + (((d % 64) / 8) ^ (r % 8)) * 8 + d % 8;
  }
  static constexpr __host__ __device__ int elements(int rows) { return rows * kBlocks * 64; }
};

// The cp.async copies of one [Rows][D] tile, 16 bytes each, shared by kThreads threads: the
// block's threads kFirst .. kFirst + kThreads - 1 (all of a block's, or one warp's). Thread x of
// them copies chunk x % (D / 8) of rows x / (D / 8) + k * kRowStep: with kRowStep a multiple of
// 8, the swizzle (r % 8) is the same in every pass k, so a thread's shared and global offsets are
// computed once, before the K/V loop, and pass k only adds a constant (which the copy instruction
// takes as an immediate). Head dims whose chunk count does not divide the block (80, 96) fall
// back to computing each copy's offsets.
template <int D, int Rows, int kThreads, int kFirst = 0>
struct TileCopy {
  static constexpr int kChunks = D / 8;
  static constexpr bool kFixedPasses =
      kThreads % kChunks == 0 && (kThreads / kChunks) % 8 == 0 && Rows % (kThreads / kChunks) == 0;
  static constexpr int kRowStep = kFixedPasses ? kThreads / kChunks : 1;
  int row, smem, gmem;  // this thread's first row, and its offsets in the tile and in the source
  __device__ __forceinline__ TileCopy() {
    row = (threadIdx.x - kFirst) / kChunks;
    const int d = (threadIdx.x - kFirst) % kChunks * 8;
    smem = Tile<D>::offset(row, d, Rows);
    gmem = row * D + d;
  }

  // Rows [0, Rows) of the tile starting at `src` (a [*, D] matrix) into `tile`. kFull: every
  // row exists; otherwise rows at or past `valid_rows` are zero-filled (the partial tile at the
  // end of a sequence).
  template <bool kFull, typename T>
  __device__ __forceinline__ void issue(T* tile, const T* src, int valid_rows = Rows) const {
    if constexpr (kFixedPasses) {
      const T* from = src + gmem;  // one 64-bit add; the passes add immediates
#pragma unroll
      for (int k = 0; k < Rows / kRowStep; ++k) {
        const bool valid = kFull || row + k * kRowStep < valid_rows;
        cp_async_16(tile + smem + k * kRowStep * 64, valid ? from + k * kRowStep * D : src,
                    valid ? 16 : 0);
      }
    } else {
      for (int v = threadIdx.x - kFirst; v < Rows * kChunks; v += kThreads) {
        const int r = v / kChunks, d = v % kChunks * 8;
        const bool valid = kFull || r < valid_rows;
        cp_async_16(tile + Tile<D>::offset(r, d, Rows), src + (valid ? r * D + d : 0),
                    valid ? 16 : 0);
      }
    }
  }
};

}  // namespace attn
