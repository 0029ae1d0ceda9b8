// Step 4: the fused kernel of step 3 on tensor cores (FlashAttention-2 style, sm_80 and newer).
//
//   attention_kernel   Q tile in registers as mma A fragments; K and V tiles streamed through a
//                      two-stage cp.async pipeline into swizzled shared memory; S = Q K^T and
//                      O += P V with mma.sync m16n8k16; the online softmax on the accumulator
//                      fragments; P turned into A fragments in registers, never stored.
//
// A block owns Br = 64 query rows of one (batch, head): four warps, 16 rows each. Every warp
// computes its own 16 x 64 slice of S per tile, so the softmax needs only shuffles within the
// four lanes that share a row (lane 4g .. 4g+3 hold rows g and g + 8).
#include "common/ptx.h"
#include "common/tiles.h"

namespace step4::ATTN_BACKEND_NS {

using attn::AttentionParams;

constexpr int kWarps = 4;
constexpr int Br = 16 * kWarps;  // query rows per block
constexpr int Bc = 64;           // keys per tile
constexpr int kThreads = 32 * kWarps;

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
// (The table shows which logical chunk each physical chunk holds.) Head dims that are not a
// multiple of 64 (80, 96) use a second, partly filled block of 64 columns.
template <int D>
struct Tile {
  static constexpr int kBlocks = (D + 63) / 64;
  // Offset, in elements, of element (r, d) of a tile with `rows` rows.
  static __device__ __forceinline__ int offset(int r, int d, int rows) {
    return (d / 64) * rows * 64 + r * 64 + (((d % 64) / 8) ^ (r % 8)) * 8 + d % 8;
  }
  static constexpr __host__ __device__ int elements(int rows) { return rows * kBlocks * 64; }
};

// Issues cp.async copies of rows [0, n_rows) of a [*, D] matrix into a swizzled tile, 16 bytes a
// copy, zero-filling rows at or past `valid_rows` (a partial tile at the end of a sequence).
template <int D, typename T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* gmem, int n_rows,
                                                int valid_rows) {
  constexpr int kChunks = D / 8;
  for (int v = threadIdx.x; v < n_rows * kChunks; v += kThreads) {
    const int r = v / kChunks, d = v % kChunks * 8;
    const bool valid = r < valid_rows;
    attn::cp_async_16(tile + Tile<D>::offset(r, d, n_rows), gmem + (valid ? int64_t(r) * D + d : 0),
                      valid ? 16 : 0);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1) attention_kernel(const AttentionParams p) {
  T* Qs = attn::shared_memory<T>();        // [Br][D], swizzled
  T* Ks = Qs + Tile<D>::elements(Br);      // [2 stages][Bc][D]
  T* Vs = Ks + 2 * Tile<D>::elements(Bc);  // [2 stages][Bc][D]
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  const int i0 = blockIdx.y * Br;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // this lane holds rows g and g + 8 of its warp's 16

  const int64_t q_row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
  const T* k_head =
      static_cast<const T*>(p.k) + (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k * D;
  const T* v_head =
      static_cast<const T*>(p.v) + (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k * D;

  // Keys each of this lane's two rows sees, and keys any row of the block sees (see step 3).
  int end[2];
  for (int half = 0; half < 2; ++half)
    end[half] = attn::row_keys_end(p, b, i0 + warp * 16 + g + 8 * half);
  const int block_end = attn::tile_keys_end(p, b, i0, Br);
  const int n_tiles = (block_end + Bc - 1) / Bc;
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);

  // Prologue: Q and the first K/V tile, one cp.async group.
  load_tile_async<D>(Qs, static_cast<const T*>(p.q) + q_row0 * D, Br, p.seqlen_q - i0);
  if (n_tiles > 0) {
    load_tile_async<D>(Ks, k_head, Bc, p.seqlen_k);
    load_tile_async<D>(Vs, v_head, Bc, p.seqlen_k);
  }
  attn::cp_async_commit();

  uint32_t q_frag[D / 16][4];  // A fragments of this warp's 16 rows of Q, per 16 columns
  float o_acc[D / 8][4] = {};  // O accumulators: D / 8 tiles of 16 x 8
  online_softmax::State<float> state[2] = {online_softmax::init<float>(),
                                           online_softmax::init<float>()};

  for (int n = 0; n < n_tiles; ++n) {
    const int j0 = n * Bc, stage = n % 2;
    // Start copying the next tile into the other stage while this one is computed.
    if (n + 1 < n_tiles) {
      const int next = j0 + Bc;
      load_tile_async<D>(Ks + (1 - stage) * Tile<D>::elements(Bc), k_head + int64_t(next) * D, Bc,
                         p.seqlen_k - next);
      load_tile_async<D>(Vs + (1 - stage) * Tile<D>::elements(Bc), v_head + int64_t(next) * D, Bc,
                         p.seqlen_k - next);
    }
    attn::cp_async_commit();   // (an empty group when there is no next tile)
    attn::cp_async_wait<1>();  // all but the newest group: this tile (and Q) has landed ...
    __syncthreads();           // ... for every thread, not only for this one
    const T* K = Ks + stage * Tile<D>::elements(Bc);
    const T* V = Vs + stage * Tile<D>::elements(Bc);

    if (n == 0) {
      // Q fragments: for each 16 columns, one ldmatrix.x4 of the four 8x8 quarters of the warp's
      // 16 rows, in the order a0a1 (rows 0-7, cols 0-7), a2a3 (rows 8-15), a4a5 (cols 8-15), a6a7.
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        const int j = lane / 8, r = warp * 16 + lane % 8 + 8 * (j % 2), d = kc * 16 + 8 * (j / 2);
        attn::ldmatrix<4>(q_frag[kc], Qs + Tile<D>::offset(r, d, Br));
      }
    }

    // S = Q K^T for this warp's 16 rows and the tile's 64 keys: 8 accumulator tiles of 16 x 8.
    // K is stored [key][d], which is exactly an mma B operand ("col"): a non-transposed
    // ldmatrix.x4 gives the B fragments of two key tiles for 16 columns of d.
    float s[Bc / 8][4] = {};
#pragma unroll
    for (int nt = 0; nt < Bc / 8; nt += 2) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        const int j = lane / 8, key = nt * 8 + lane % 8 + 8 * (j / 2), d = kc * 16 + 8 * (j % 2);
        uint32_t kb[4];
        attn::ldmatrix<4>(kb, K + Tile<D>::offset(key, d, Bc));
        attn::mma_m16n8k16<T>(s[nt], q_frag[kc], {kb[0], kb[1]}, s[nt]);
        attn::mma_m16n8k16<T>(s[nt + 1], q_frag[kc], {kb[2], kb[3]}, s[nt + 1]);
      }
    }

    // Scale and mask. Element i of tile nt is row g + 8 * (i / 2), key j0 + 8 nt + 2t + i % 2.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = j0 + nt * 8 + 2 * t + i % 2;
        s[nt][i] = key < end[i / 2] ? p.scale * s[nt][i] : -INFINITY;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], s[nt][i]);
      }

    // Online softmax on the fragments: the four lanes of a row combine with two shuffles.
    float alpha[2], tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int half = 0; half < 2; ++half)
      alpha[half] = online_softmax::rescale_to(state[half], attn::row_max<4>(tile_max[half]));
    uint32_t p_frag[Bc / 16][4];  // P as A fragments, 16 keys each
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt) {
      float pr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        pr[i] = online_softmax::prob(state[i / 2], s[nt][i]);
        tile_sum[i / 2] += pr[i];  // the softmax normalises over every key, dropped or not
        if (drop.enabled) {
          const int row = i0 + warp * 16 + g + 8 * (i / 2), key = j0 + nt * 8 + 2 * t + i % 2;
          pr[i] *= attn::dropout_factor(drop, b, h, row, key);
        }
      }
      // The accumulator layout of S (rows g, g+8; columns 2t, 2t+1) is the A-fragment layout of
      // P for the product P V: tiles 2k and 2k+1 of S are keys 0-7 and 8-15 of A fragment k.
      p_frag[nt / 2][2 * (nt % 2)] = attn::pack2<T>(pr[0], pr[1]);
      p_frag[nt / 2][2 * (nt % 2) + 1] = attn::pack2<T>(pr[2], pr[3]);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) state[half].l += attn::row_sum<4>(tile_sum[half]);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o_acc[dt][i] *= alpha[i / 2];

        // O += P V. V is stored [key][d]; the B operand needs [d][key], so ldmatrix.x4.trans reads
        // two 16-key x 8-d tiles transposed: the B fragments of two d tiles.
#pragma unroll
    for (int dt = 0; dt < D / 8; dt += 2) {
#pragma unroll
      for (int kc = 0; kc < Bc / 16; ++kc) {
        const int j = lane / 8, key = kc * 16 + lane % 8 + 8 * (j % 2), d = dt * 8 + 8 * (j / 2);
        uint32_t vb[4];
        attn::ldmatrix<4, true>(vb, V + Tile<D>::offset(key, d, Bc));
        attn::mma_m16n8k16<T>(o_acc[dt], p_frag[kc], {vb[0], vb[1]}, o_acc[dt]);
        attn::mma_m16n8k16<T>(o_acc[dt + 1], p_frag[kc], {vb[2], vb[3]}, o_acc[dt + 1]);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is loaded again
  }
  attn::cp_async_wait<0>();  // nothing may be in flight when the block exits

  // O = acc / l, straight from the accumulators: each lane writes two adjacent elements per tile.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = warp * 16 + g + 8 * half;
    if (i0 + r >= p.seqlen_q) continue;
    const float inv_l = online_softmax::inv_sum(state[half]);
    T* o = static_cast<T*>(p.o) + (q_row0 + r) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(o + dt * 8 + 2 * t) =
          attn::pack2<T>(o_acc[dt][2 * half] * inv_l, o_acc[dt][2 * half + 1] * inv_l);
    if (t == 0) p.lse[q_row0 + r] = online_softmax::lse(state[half]);
  }
}

void run(const AttentionParams& p, attn::RunContext&) {
  const unsigned bh = p.batch * p.heads;
  const unsigned q_tiles = (p.seqlen_q + Br - 1) / Br;
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const size_t smem = (Tile<D>::elements(Br) + 4 * Tile<D>::elements(Bc)) * sizeof(T);
      attn::launch(attention_kernel<T, D>, {dim3(1, q_tiles, bh), dim3(kThreads), smem}, p);
    });
  });
}

}  // namespace step4::ATTN_BACKEND_NS
