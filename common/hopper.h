// What the sm_90a kernels (step 5's attention_sm90a.cu and the rungs before it, step 6's
// attention_sm90a.cu) share: the guard that compiles their bodies only where they can run, the TMA
// tensor map of a [heads][rows][D] tensor read in boxes of 64 columns and the copy of a tile of
// them, the zeros TMA cannot write, and Q's sign flipped in place.
#pragma once

#include <type_traits>

#include "common/ptx.h"
#include "common/run_context.h"
#include "common/tensor_map.h"
#if !defined(__CUDACC__)
#include "common/simt/device.h"
#endif

// The kernels exist for sm_90a (and the CPU backend, which emulates it); an nvcc pass for any
// other architecture compiles an empty body (these files are only built for 90a, see
// cmake/AttnStep.cmake).
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_SM90A_BODY 1
#else
#define ATTN_SM90A_BODY 0
#endif

namespace attn {

// The SMs of the device the kernels run on: a persistent grid launches this many blocks (or fewer,
// when there are fewer tiles). On the CPU backend, those it presents (common/simt/device.h).
inline unsigned sm_count() {
#if defined(__CUDACC__)
  int device = 0, sms = 0;
  ATTN_CUDA_CHECK(cudaGetDevice(&device));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return unsigned(sms);
#else
  return unsigned(simt::sm_count());
#endif
}

// Sets `bytes` of device memory at `ptr` to zero before the kernels launched next read it
// (cudaMemsetAsync on the launch stream; on the CPU backend, memset). common/backend.cpp.
void zero_device(RunContext& ctx, void* ptr, size_t bytes);

// The tensor map of a [outer][rows][D] tensor of 16-bit elements, in boxes of 64 columns x
// box_rows rows (of box_heads consecutive heads, each box_rows rows: a GQA group's query heads),
// 128-byte swizzle: a box lands as box_heads * box_rows rows of 128 bytes, 16-byte chunk c of row
// r at chunk c ^ (r % 8) (the swizzle follows the shared address). Rows past `rows` of each head
// and columns past D are zero-filled.
template <typename T>
inline TensorMap head_tensor_map(const void* base, int outer, int rows, int D, int box_rows,
                                 int box_heads = 1) {
  TensorMapSpec s;
  s.dtype = std::is_same_v<T, __half> ? TmaDtype::f16 : TmaDtype::bf16;
  s.rank = 3;
  s.global = base;
  s.dims[0] = uint64_t(D), s.dims[1] = uint64_t(rows), s.dims[2] = uint64_t(outer);
  s.strides[1] = uint64_t(D) * 2, s.strides[2] = uint64_t(rows) * D * 2;
  s.box[0] = 64, s.box[1] = uint32_t(box_rows), s.box[2] = uint32_t(box_heads);
  s.swizzle = simt::TmaSwizzle::b128;
#if defined(__CUDACC__)
  TensorMap map;
  encode_tensor_map_gpu(&map, s);
  return map;
#else
  return encode_tensor_map_cpu(s);
#endif
}

// A [Rows][D] tile of head_tensor_map's boxes: rows row0 .. row0 + Rows - 1 of head `outer`, one
// TMA copy per 64 columns (step 5's rung 5.1), each credited to the mbarrier `bar`.
template <int D, int Rows, typename T>
__device__ __forceinline__ void tma_load_tile(T* tile, const TensorMap* map, uint64_t* bar, int row0,
                                              int outer ATTN_PTX_WHERE) {
  for (int blk = 0; blk < (D + 63) / 64; ++blk)
#if defined(SIMT_BACKEND)
    tma_load_3d(tile + blk * Rows * 64, map, bar, 64 * blk, row0, outer, where);
#else
    tma_load_3d(tile + blk * Rows * 64, map, bar, 64 * blk, row0, outer);
#endif
}

// Rows [from, rows) of a tile that head_tensor_map's boxes filled (64-column blocks of `rows` rows
// of 128 bytes each; the swizzle moves chunks only within a row) set to zero by `threads` threads,
// this one being `tid`, 16 bytes per store; then fenced for the async proxy, which wgmma's reads
// and the next TMA write into the tile go through. TMA zero-fills rows past the tensor's end
// only: a batch's padding keys (past its key length, before seqlen_k) arrive as the caller left
// them, and P V adds P = 0 times their NaN. The threads that read the tile then synchronise.
template <int D, typename T>
__device__ __forceinline__ void zero_tile_rows(T* tile, int rows, int from, int tid, int threads) {
  for (int blk = 0; blk < (D + 63) / 64; ++blk) {
    uint4* block = reinterpret_cast<uint4*>(tile + blk * rows * 64);
    for (int x = from * 8 + tid; x < rows * 8; x += threads) block[x] = make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async_shared();
}

// A negative scale folded into Q (every 16-bit element's sign bit flipped, as step 4 does in
// Q's registers), here in shared memory, which wgmma reads through the async proxy: rows
// [0, count) of a tile of head_tensor_map's boxes (64-column blocks of `rows` rows), by `threads`
// threads, this one being `tid`, 16 bytes per store; then fenced for the async proxy. Every
// thread that issues a wgmma reading the tile must synchronise with these stores first.
template <int D, typename T>
__device__ __forceinline__ void negate_tile_rows(T* tile, int rows, int count, int tid,
                                                 int threads) {
  for (int blk = 0; blk < (D + 63) / 64; ++blk) {
    uint4* block = reinterpret_cast<uint4*>(tile + blk * rows * 64);
    for (int x = tid; x < count * 8; x += threads) {
      uint4 v = block[x];
      v.x ^= 0x80008000u, v.y ^= 0x80008000u, v.z ^= 0x80008000u, v.w ^= 0x80008000u;
      block[x] = v;
    }
  }
  fence_proxy_async_shared();  // Q's sign
}

}  // namespace attn
