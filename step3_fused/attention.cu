// Step 3: one fused kernel. S and P never leave the chip.
//
//   attention_kernel   for each tile of Bc keys: S = scale * Q K^T, the online-softmax update,
//                      O += P V; finally O /= l and LSE = m + log l
//
// A block owns Br query rows of one (batch, head) and streams the K and V tiles through shared
// memory. The scores of a tile live in registers, the probabilities in a small shared tile, the
// output accumulator in registers; only O and LSE are written to global memory. The online
// softmax (common/online_softmax.h, the invariant step 0 proves) lets the row maximum and sum be
// updated tile by tile. With a causal mask, tiles entirely above the diagonal are never visited.
#include "common/tiles.h"

namespace step3::ATTN_BACKEND_NS {

using attn::AttentionParams;

constexpr int Br = 32;                         // query rows per block
constexpr int Bc = 32;                         // keys per tile
constexpr int kThreadsPerRow = 8;              // threads sharing one query row
constexpr int kThreads = Br * kThreadsPerRow;  // 256 threads per block
constexpr int kPad = 8;  // shared rows are D + 8 elements long: 16-byte aligned, no bank conflicts

// One block per Br query rows. Thread (r, t) computes the scores of row r with keys t, t + 8,
// t + 16, t + 24 of each tile, and accumulates the outputs of row r in columns t, t + 8, ...
template <typename T, int D>
__global__ void attention_kernel(const AttentionParams p) {
  T* Qs = attn::shared_memory<T>();                            // [Br][D + kPad]
  T* Ks = Qs + Br * (D + kPad);                                // [Bc][D + kPad]
  T* Vs = Ks + Bc * (D + kPad);                                // [Bc][D + kPad]
  float* Ps = reinterpret_cast<float*>(Vs + Bc * (D + kPad));  // [Br][Bc + 1]
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  const int i0 = blockIdx.y * Br;
  const int r = threadIdx.x / kThreadsPerRow, t = threadIdx.x % kThreadsPerRow;
  const int i = i0 + r;

  const int64_t q_row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
  const int64_t kv_row0 = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k;
  attn::load_rows_16B<D>(Qs, D + kPad, static_cast<const T*>(p.q) + q_row0 * D, Br,
                         p.seqlen_q - i0);

  // Keys this row sees, and keys any row of the block sees: the block's last row sees the most,
  // so tiles at or past its end (above the causal diagonal, or past the batch's key length) are
  // skipped entirely. Rows past the batch's query length (--seqlens-q) see nothing but still help
  // load the tiles; a block made only of such rows loads none and writes O = 0, LSE = -inf. The
  // last tile's keys past block_end load as zeros: past the batch's key length they are the
  // caller's padding, and P = 0 there would still add 0 * NaN = NaN.
  const int end = attn::row_keys_end(p, b, i);
  const int block_end = attn::tile_keys_end(p, b, i0, Br);
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);

  online_softmax::State<float> state = online_softmax::init<float>();
  float acc[D / kThreadsPerRow] = {};
  for (int j0 = 0; j0 < block_end; j0 += Bc) {
    __syncthreads();  // the previous tile has been used by every thread
    attn::load_rows_16B<D>(Ks, D + kPad, static_cast<const T*>(p.k) + (kv_row0 + j0) * D, Bc,
                           block_end - j0);
    attn::load_rows_16B<D>(Vs, D + kPad, static_cast<const T*>(p.v) + (kv_row0 + j0) * D, Bc,
                           block_end - j0);
    __syncthreads();

    // S tile: this thread's Bc / 8 scores of row r, in registers.
    float s[Bc / kThreadsPerRow];
    float tile_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < Bc / kThreadsPerRow; ++k) {
      const int c = t + k * kThreadsPerRow, j = j0 + c;
      s[k] = -INFINITY;  // masked: padding, or a future key under the causal mask
      if (j < end) {
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < D; ++d)
          dot += attn::to_float(Qs[r * (D + kPad) + d]) * attn::to_float(Ks[c * (D + kPad) + d]);
        s[k] = p.scale * dot;
      }
      tile_max = fmaxf(tile_max, s[k]);
    }

    // Online softmax: move the row maximum, rescale what was accumulated under the old one, add
    // this tile's probabilities. The 8 threads of a row combine their parts with shuffles, so each
    // holds the same state.
    const float alpha = online_softmax::rescale_to(state, attn::row_max<kThreadsPerRow>(tile_max));
    float tile_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < Bc / kThreadsPerRow; ++k) {
      const int c = t + k * kThreadsPerRow;
      const float pr = online_softmax::prob(state, s[k]);
      tile_sum += pr;  // the softmax normalises over every key, dropped or not
      Ps[r * (Bc + 1) + c] = pr * attn::dropout_factor(drop, b, h, i, j0 + c);
    }
    state.l += attn::row_sum<kThreadsPerRow>(tile_sum);
#pragma unroll
    for (int k = 0; k < D / kThreadsPerRow; ++k) acc[k] *= alpha;
    __syncwarp();  // the row's P is written by its 8 threads, all in this warp

#pragma unroll 4
    for (int c = 0; c < Bc; ++c) {
      const float pr = Ps[r * (Bc + 1) + c];
#pragma unroll
      for (int k = 0; k < D / kThreadsPerRow; ++k)
        acc[k] += pr * attn::to_float(Vs[c * (D + kPad) + t + k * kThreadsPerRow]);
    }
  }
  if (i >= p.seqlen_q) return;
  // O = acc / l (0 for a row with no visible key), LSE = m + log l (-inf for such a row).
  const float inv_l = online_softmax::inv_sum(state);
  T* o = static_cast<T*>(p.o) + (q_row0 + r) * D;
#pragma unroll
  for (int k = 0; k < D / kThreadsPerRow; ++k)
    o[t + k * kThreadsPerRow] = attn::from_float<T>(acc[k] * inv_l);
  if (t == 0) p.lse[q_row0 + r] = online_softmax::lse(state);
}

void run(const AttentionParams& p, attn::RunContext& ctx) {
  const unsigned bh = p.batch * p.heads;
  const unsigned q_tiles = (p.seqlen_q + Br - 1) / Br;
  ctx.tile = {Br, Bc};
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const size_t smem = (Br + 2 * Bc) * (D + kPad) * sizeof(T) + Br * (Bc + 1) * sizeof(float);
      attn::launch(attention_kernel<T, D>, {dim3(1, q_tiles, bh), dim3(kThreads), smem}, p);
    });
  });
}

}  // namespace step3::ATTN_BACKEND_NS
