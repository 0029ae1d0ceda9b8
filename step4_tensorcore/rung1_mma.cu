// Step 4, rung 1: step 3's fused loop with S = Q K^T on tensor cores (mma.sync and ldmatrix).
//
//   attention_kernel   Q tile in registers as mma A fragments; K and V tiles loaded into padded
//                      shared memory; S = Q K^T with mma.sync m16n8k16; the online softmax on the
//                      accumulator fragments; P through step 3's FP32 tile, and O += P V on the
//                      CUDA cores, each lane accumulating its two rows' outputs in registers.
// A block owns Br = 64 query rows of one (batch, head): four warps, 16 rows each. Every warp
// computes its own 16 x Bc slice of S per tile (Bc = 64), so the softmax needs only shuffles within
// the four lanes that share a row (lane 4g .. 4g+3 hold rows g and g + 8).
#include "common/ptx.h"
#include "common/tiles.h"

namespace step4::rung1::ATTN_BACKEND_NS {

using attn::AttentionParams;

constexpr int kWarps = 4;
constexpr int Br = 16 * kWarps;  // query rows per block: 16 per warp
constexpr int Bc = 64;           // keys per K/V tile
constexpr int kThreads = 32 * kWarps;

// Shared rows are D + 8 elements long (step 3's padding): ldmatrix reads 16 bytes from each of 8
// consecutive rows, and rows 2 D + 16 bytes apart start in 8 different groups of 4 banks.
constexpr int kPad = 8;

// kDropout is a compile-time choice: without it the kernel contains no dropout code at all.
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kThreads, 1) attention_kernel(const AttentionParams p) {
  T* Qs = attn::shared_memory<T>();                            // [Br][D + kPad]
  T* Ks = Qs + Br * (D + kPad);                                // [Bc][D + kPad]
  T* Vs = Ks + Bc * (D + kPad);                                // [Bc][D + kPad]
  float* Ps = reinterpret_cast<float*>(Vs + Bc * (D + kPad));  // [Br][Bc + 1], a warp per 16 rows
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  const int i0 = blockIdx.y * Br;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // this lane holds rows g and g + 8 of its warp's 16

  const int64_t q_row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
  const int64_t kv_row0 = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k;

  // Keys each of this lane's two rows sees, and keys any row of the block sees (see step 3).
  int end[2];
  for (int half = 0; half < 2; ++half)
    end[half] = attn::row_keys_end(p, b, i0 + warp * 16 + g + 8 * half);
  const int block_end = attn::tile_keys_end(p, b, i0, Br);
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);

  attn::load_rows_16B<D>(Qs, D + kPad, static_cast<const T*>(p.q) + q_row0 * D, Br,
                         p.seqlen_q - i0);
  __syncthreads();  // Q is in shared memory for every thread

  // Q fragments: for each 16 columns, one ldmatrix.x4 of the four 8x8 quarters of the warp's 16
  // rows, in the order a0a1 (rows 0-7, cols 0-7), a2a3 (rows 8-15), a4a5 (cols 8-15), a6a7.
  uint32_t q_frag[D / 16][4];  // A fragments of this warp's 16 rows of Q, per 16 columns
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    const int j = lane / 8, r = warp * 16 + lane % 8 + 8 * (j % 2), d = kc * 16 + 8 * (j / 2);
    attn::ldmatrix<4>(q_frag[kc], Qs + r * (D + kPad) + d);
  }

  float acc[2][D / 4] = {};  // O of this lane's rows g and g + 8, columns t, t + 4, ...
  online_softmax::State<float> state[2] = {online_softmax::init<float>(),
                                           online_softmax::init<float>()};
  for (int j0 = 0; j0 < block_end; j0 += Bc) {
    __syncthreads();  // the previous tile has been used by every thread
    attn::load_rows_16B<D>(Ks, D + kPad, static_cast<const T*>(p.k) + (kv_row0 + j0) * D, Bc,
                           block_end - j0);
    attn::load_rows_16B<D>(Vs, D + kPad, static_cast<const T*>(p.v) + (kv_row0 + j0) * D, Bc,
                           block_end - j0);
    __syncthreads();

    // S = Q K^T for this warp's 16 rows and the tile's Bc keys: Bc / 8 accumulator tiles of 16 x 8.
    // K is stored [key][d], which is exactly an mma B operand ("col"): a non-transposed
    // ldmatrix.x4 gives the B fragments of two key tiles for 16 columns of d.
    float s[Bc / 8][4] = {};
#pragma unroll
    for (int nt = 0; nt < Bc / 8; nt += 2) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        uint32_t kb[4];
        const int key = nt * 8 + lane % 8 + 8 * (lane / 16), d = kc * 16 + 8 * (lane / 8 % 2);
        attn::ldmatrix<4>(kb, Ks + key * (D + kPad) + d);
        attn::mma_m16n8k16<T>(s[nt], q_frag[kc], {kb[0], kb[1]}, s[nt]);
        attn::mma_m16n8k16<T>(s[nt + 1], q_frag[kc], {kb[2], kb[3]}, s[nt + 1]);
      }
    }

    // Scale, mask and row maxima. Element i of tile nt is row g + 8 * (i / 2), key
    // j0 + 8 nt + 2t + i % 2.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = j0 + nt * 8 + 2 * t + i % 2;
        s[nt][i] = j < end[i / 2] ? p.scale * s[nt][i] : -INFINITY;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], s[nt][i]);
      }

    // Online softmax on the fragments (common/online_softmax.h): the four lanes of a row combine
    // their maxima and sums with two shuffles each.
    float alpha[2], tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int half = 0; half < 2; ++half)
      alpha[half] = online_softmax::rescale_to(state[half], attn::row_max<4>(tile_max[half]));
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = warp * 16 + g + 8 * (i / 2), c = nt * 8 + 2 * t + i % 2;
        const float pr = online_softmax::prob(state[i / 2], s[nt][i]);
        tile_sum[i / 2] += pr;  // the softmax normalises over every key, dropped or not
        Ps[r * (Bc + 1) + c] =
            kDropout ? pr * attn::dropout_factor(drop, b, h, i0 + r, j0 + c) : pr;
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) state[half].l += attn::row_sum<4>(tile_sum[half]);
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int k = 0; k < D / 4; ++k) acc[half][k] *= alpha[half];
    __syncwarp();  // the warp's 16 rows of P are written by its 32 lanes

    // O += P V on the CUDA cores, as in step 3: each lane its two rows, every 4th column.
#pragma unroll 4
    for (int c = 0; c < Bc; ++c) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float pr = Ps[(warp * 16 + g + 8 * half) * (Bc + 1) + c];
#pragma unroll
        for (int k = 0; k < D / 4; ++k)
          acc[half][k] += pr * attn::to_float(Vs[c * (D + kPad) + t + 4 * k]);
      }
    }
  }

  // O = acc / l. A row that sees no key has l = 0: O = 0, LSE = -inf.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = warp * 16 + g + 8 * half;
    if (i0 + r >= p.seqlen_q) continue;
    const float inv_l = online_softmax::inv_sum(state[half]);
    T* o = static_cast<T*>(p.o) + (q_row0 + r) * D;
#pragma unroll
    for (int k = 0; k < D / 4; ++k) o[t + 4 * k] = attn::from_float<T>(acc[half][k] * inv_l);
    if (t == 0) p.lse[q_row0 + r] = online_softmax::lse(state[half]);
  }
}

void run(const AttentionParams& p, attn::RunContext& ctx) {
  const unsigned bh = p.batch * p.heads;
  const unsigned q_tiles = (p.seqlen_q + Br - 1) / Br;
  ctx.tile = {Br, Bc};
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const size_t smem = (Br + 2 * Bc) * (D + kPad) * sizeof(T) + Br * (Bc + 1) * sizeof(float);
      if (p.dropout > 0.0f)
        attn::launch(attention_kernel<T, D, true>, {dim3(1, q_tiles, bh), dim3(kThreads), smem}, p);
      else
        attn::launch(attention_kernel<T, D, false>, {dim3(1, q_tiles, bh), dim3(kThreads), smem},
                     p);
    });
  });
}

}  // namespace step4::rung1::ATTN_BACKEND_NS
