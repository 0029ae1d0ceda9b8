// Step 2: the three kernels of step 1, tiled through shared memory.
//
//   scores_kernel   S = scale * Q K^T, masked to -inf       (FP32, [B, H, Sq, Sk] in global memory)
//   softmax_kernel  P = softmax(S) in place, and LSE        (one warp per row)
//   output_kernel   O = P V                                 (converted to the input dtype)
//
// A block now owns a tile of Br query rows. It stages the rows of Q, K, V (and P) it needs in
// shared memory once, with 16-byte loads, and its threads reuse them from there: each K element
// is read from global memory once per block instead of once per thread. Eight threads share a
// row, each computing Bc / 8 scores or D / 8 outputs in registers. S and P still make the round
// trip through global memory: that is the next step's lesson.
#include "common/tiles.h"

namespace step2::ATTN_BACKEND_NS {

using attn::AttentionParams;

constexpr int Br = 32;                         // query rows per block
constexpr int Bc = 32;                         // keys per tile
constexpr int kThreadsPerRow = 8;              // threads sharing one query row
constexpr int kThreads = Br * kThreadsPerRow;  // 256 threads per block
constexpr int kPad = 8;  // shared rows are D + 8 elements long: 16-byte aligned, no bank conflicts

// One block per (Br query rows, Bc keys) tile of S. Thread (r, t) computes the scores of row r
// with keys t, t + 8, t + 16, t + 24.
template <typename T, int D>
__global__ void scores_kernel(const AttentionParams p, float* S) {
  T* Qs = attn::shared_memory<T>();  // [Br][D + kPad]
  T* Ks = Qs + Br * (D + kPad);      // [Bc][D + kPad]
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  const int i0 = blockIdx.y * Br, j0 = blockIdx.x * Bc;
  const int r = threadIdx.x / kThreadsPerRow, t = threadIdx.x % kThreadsPerRow;
  const int i = i0 + r;

  const int64_t q_row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
  const int64_t kv_row0 = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k;
  attn::load_rows_16B<D>(Qs, D + kPad, static_cast<const T*>(p.q) + q_row0 * D, Br,
                         p.seqlen_q - i0);
  attn::load_rows_16B<D>(Ks, D + kPad, static_cast<const T*>(p.k) + (kv_row0 + j0) * D, Bc,
                         p.seqlen_k - j0);
  __syncthreads();

  if (i >= p.seqlen_q) return;  // after the barrier: every thread helped load the tiles
  const int end = attn::row_keys_end(p, b, i);
#pragma unroll
  for (int k = 0; k < Bc / kThreadsPerRow; ++k) {
    const int c = t + k * kThreadsPerRow, j = j0 + c;
    if (j >= p.seqlen_k) break;
    float s = -INFINITY;  // masked: padding, or a future key under the causal mask
    if (j < end) {
      float dot = 0.0f;
#pragma unroll 8
      for (int d = 0; d < D; ++d)
        dot += attn::to_float(Qs[r * (D + kPad) + d]) * attn::to_float(Ks[c * (D + kPad) + d]);
      s = p.scale * dot;
    }
    S[(q_row0 + r) * p.seqlen_k + j] = s;
  }
}

// One warp per row of S: each lane takes every 32nd element, and shuffles combine the lanes.
// Dropout scales the normalised probabilities; LSE is of the softmax before dropout.
__global__ void softmax_kernel(const AttentionParams p, float* S) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(p.batch) * p.heads * p.seqlen_q) return;  // whole warps leave together
  const int i = row % p.seqlen_q;
  const int h = row / p.seqlen_q % p.heads;
  const int b = row / p.seqlen_q / p.heads;
  float* s = S + row * p.seqlen_k;

  float m = -INFINITY;
  for (int j = lane; j < p.seqlen_k; j += 32) m = fmaxf(m, s[j]);
  m = attn::row_max<32>(m);
  if (m == -INFINITY) {  // no visible key: P = 0, so O = 0; LSE = -inf
    for (int j = lane; j < p.seqlen_k; j += 32) s[j] = 0.0f;
    if (lane == 0) p.lse[row] = -INFINITY;
    return;
  }
  float l = 0.0f;
  for (int j = lane; j < p.seqlen_k; j += 32) l += __expf(s[j] - m);
  l = attn::row_sum<32>(l);
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  for (int j = lane; j < p.seqlen_k; j += 32)
    s[j] = __expf(s[j] - m) / l * attn::dropout_factor(drop, b, h, i, j);
  if (lane == 0) p.lse[row] = m + logf(l);
}

// One block per Br query rows and all D output columns. For each tile of Bc keys the block stages
// P (from global memory) and V in shared memory; thread (r, t) accumulates the outputs of row r
// in columns t, t + 8, ..., in registers.
template <typename T, int D>
__global__ void output_kernel(const AttentionParams p, const float* P) {
  T* Vs = attn::shared_memory<T>();                            // [Bc][D + kPad]
  float* Ps = reinterpret_cast<float*>(Vs + Bc * (D + kPad));  // [Br][Bc + 1]
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  const int i0 = blockIdx.y * Br;
  const int r = threadIdx.x / kThreadsPerRow, t = threadIdx.x % kThreadsPerRow;
  const int i = i0 + r;

  const int64_t q_row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
  const int64_t kv_row0 = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k;
  // The batch's keys: past them P = 0, and V is the caller's padding (0 * NaN would be NaN).
  const int len_k = attn::key_length(p, b);
  float acc[D / kThreadsPerRow] = {};
  for (int j0 = 0; j0 < len_k; j0 += Bc) {
    __syncthreads();  // the previous tile has been used by every thread
    attn::load_rows_16B<D>(Vs, D + kPad, static_cast<const T*>(p.v) + (kv_row0 + j0) * D, Bc,
                           len_k - j0);
    if (p.seqlen_k % 4 == 0) {  // every row of P starts 16-byte aligned: 4 floats per load
      for (int x = threadIdx.x; x < Br * Bc / 4; x += kThreads) {
        const int pr = x / (Bc / 4), c = x % (Bc / 4) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i0 + pr < p.seqlen_q && j0 + c < p.seqlen_k)
          v = *reinterpret_cast<const float4*>(P + (q_row0 + pr) * p.seqlen_k + j0 + c);
        float* dst = Ps + pr * (Bc + 1) + c;
        dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
      }
    } else {
      for (int x = threadIdx.x; x < Br * Bc; x += kThreads) {
        const int pr = x / Bc, c = x % Bc;
        const bool inside = i0 + pr < p.seqlen_q && j0 + c < p.seqlen_k;
        Ps[pr * (Bc + 1) + c] = inside ? P[(q_row0 + pr) * p.seqlen_k + j0 + c] : 0.0f;
      }
    }
    __syncthreads();

#pragma unroll 4
    for (int c = 0; c < Bc; ++c) {
      const float pr = Ps[r * (Bc + 1) + c];
#pragma unroll
      for (int k = 0; k < D / kThreadsPerRow; ++k)
        acc[k] += pr * attn::to_float(Vs[c * (D + kPad) + t + k * kThreadsPerRow]);
    }
  }
  if (i >= p.seqlen_q) return;
  T* o = static_cast<T*>(p.o) + (q_row0 + r) * D;
#pragma unroll
  for (int k = 0; k < D / kThreadsPerRow; ++k)
    o[t + k * kThreadsPerRow] = attn::from_float<T>(acc[k]);
}

void run(const AttentionParams& p, attn::RunContext& ctx) {
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  float* S = ctx.scratch<float>("S/P", rows * p.seqlen_k);
  const unsigned bh = p.batch * p.heads;
  const unsigned q_tiles = (p.seqlen_q + Br - 1) / Br, k_tiles = (p.seqlen_k + Bc - 1) / Bc;
  ctx.tile = {Br, Bc};
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const size_t s_smem = (Br + Bc) * (D + kPad) * sizeof(T);
      const size_t o_smem = Bc * (D + kPad) * sizeof(T) + Br * (Bc + 1) * sizeof(float);
      attn::launch(scores_kernel<T, D>, {dim3(k_tiles, q_tiles, bh), dim3(kThreads), s_smem}, p, S);
      attn::launch(softmax_kernel, {dim3(static_cast<unsigned>((rows + 3) / 4)), dim3(128)}, p, S);
      attn::launch(output_kernel<T, D>, {dim3(1, q_tiles, bh), dim3(kThreads), o_smem}, p,
                   static_cast<const float*>(S));
    });
  });
}

}  // namespace step2::ATTN_BACKEND_NS
