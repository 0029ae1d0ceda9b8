// Step 5, rung 2: the consumer warps become a warpgroup that multiplies with wgmma.
//
// mma.sync is a warp's instruction: each warp loaded its K and V fragments from shared memory with
// ldmatrix and multiplied 16 rows at a time, synchronously. Hopper's wgmma is a warpgroup's (four
// consecutive warps, 128 threads, here warps 0-3): one instruction multiplies all 64 rows, its B
// operand read straight from shared memory through a 64-bit descriptor (the address, the
// distance between 8-row groups, the swizzle), no ldmatrix. It is asynchronous: wgmmas are
// grouped (commit_group), and wait_group says when a group's accumulators may be read.
//
//   S = Q K^T:  D / 16 wgmmas m64 n64 k16, A (Q) from registers, B (K) from the slot, one group
//   O += P V:   Bc / 16 wgmmas m64 nD k16, A (P) from registers, B (V) MN-major from the slot
//
// The accumulators are mma.sync's C fragments, 64 x N per warpgroup (N / 2 floats per thread, kept
// as rung 1's s[nt][i] and o_acc[dt][i]: attn::wgmma_accumulators); Q's A fragments are rung 1's,
// and so is the softmax, on the same elements. A slot's descriptor is slot 0's plus an add, so the
// ring is no longer unrolled: the tile's slot and phase are running values.
#include "common/hopper.h"
#include "common/swizzled_tile.h"
#include "common/tiles.h"

#include <type_traits>

namespace step5::rung2::ATTN_BACKEND_NS {

using attn::AttentionParams;
using attn::Tile;

constexpr int kConsumerWarps = 4;
constexpr int kWarps = kConsumerWarps + 1;  // the last warp is the producer
constexpr int Br = 16 * kConsumerWarps;     // query rows per block
constexpr int Bc = 64;                      // keys per tile
constexpr int kThreads = 32 * kWarps;
constexpr int kConsumers = 32 * kConsumerWarps;  // threads that arrive on "empty"
constexpr int kStages = 3;                       // ring slots, each a K tile and a V tile
constexpr int kPaddingBarrier = 5;  // named barrier 5: all consumer threads (zero_padding)

// kDropout is a compile-time choice: without it the kernel contains no dropout code at all.
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kThreads, 1)
    attention_kernel_sm90a(const AttentionParams p, const __grid_constant__ attn::TensorMap map_q,
                           const __grid_constant__ attn::TensorMap map_k,
                           const __grid_constant__ attn::TensorMap map_v) {
#if ATTN_SM90A_BODY
  T* Qs = attn::shared_memory<T>();      // [Br][D], swizzled, then the ring:
  T* ring = Qs + Tile<D>::elements(Br);  // [kStages][K, V][Bc][D]
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + kStages * 2 * Tile<D>::elements(Bc));
  uint64_t* empty = full + kStages;  // full[s]: slot s has landed; empty[s]: slot s was read
  uint64_t* q_full = empty + kStages;
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  const int i0 = blockIdx.y * Br;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // this lane holds rows g and g + 8 of its warp's 16

  const int64_t q_row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;

  // Keys each of this lane's two rows sees, and keys any row of the block sees (see step 3).
  int end[2];
  for (int half = 0; half < 2; ++half)
    end[half] = attn::row_keys_end(p, b, i0 + warp * 16 + g + 8 * half);
  const int block_end = attn::tile_keys_end(p, b, i0, Br);
  const int n_tiles = (block_end + Bc - 1) / Bc;
  // Tiles every row of the block sees in full need no mask: the block's first row sees the
  // fewest keys (padding rows past the batch's query length see none, but they also skip the
  // unmasked tiles' result: see the epilogue).
  const int n_unmasked = min(attn::row_keys_end(p, b, i0) / Bc, n_tiles);
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  constexpr uint32_t kSlotBytes = 2 * Tile<D>::elements(Bc) * sizeof(T);  // K and V

  if (threadIdx.x == 0) {
    attn::mbarrier_init(q_full, 1);  // the producer's arrive.expect_tx, then the TMA bytes
    attn::mbarrier_label(q_full, "q_full");
    for (int s = 0; s < kStages; ++s) {
      attn::mbarrier_init(&full[s], 1);
      attn::mbarrier_init(&empty[s], kConsumers);
      attn::mbarrier_label(&full[s], "full");
      attn::mbarrier_label(&empty[s], "empty");
    }
  }
  __syncthreads();  // the barriers exist before anyone uses them (the block's only __syncthreads)

  if (warp == kConsumerWarps) {  // the producer: Q, then every K/V tile through the ring
    if (attn::elect_one()) {     // one thread issues every copy
      const int kv_bh = b * p.heads_kv + attn::kv_head(p, h);
      // Boxes past the tensor's last row arrive as zeros (and count).
      attn::mbarrier_arrive_expect_tx(q_full, Tile<D>::elements(Br) * sizeof(T));
      for (int blk = 0; blk < Tile<D>::kBlocks; ++blk)
        attn::tma_load_3d(Qs + blk * Br * 64, &map_q, q_full, 64 * blk, i0, blockIdx.z);
      for (int n = 0; n < n_tiles; ++n) {
        const int s = n % kStages;
        attn::mbarrier_test_wait_parity(&empty[s], (n / kStages % 2) ^ 1);  // the slot was read
        T* k_slot = ring + s * 2 * Tile<D>::elements(Bc);
        T* v_slot = k_slot + Tile<D>::elements(Bc);
        const int j0 = n * Bc;
        attn::mbarrier_arrive_expect_tx(&full[s], kSlotBytes);
        for (int blk = 0; blk < Tile<D>::kBlocks; ++blk) {
          attn::tma_load_3d(k_slot + blk * Bc * 64, &map_k, &full[s], 64 * blk, j0, kv_bh);
          attn::tma_load_3d(v_slot + blk * Bc * 64, &map_v, &full[s], 64 * blk, j0, kv_bh);
        }
      }
    }
    return;
  }

  attn::mbarrier_test_wait_parity(q_full, 0);  // Q has landed

  // Q fragments: for each 16 columns, one ldmatrix.x4 of the four 8x8 quarters of the warp's 16
  // rows, in the order a0a1 (rows 0-7, cols 0-7), a2a3 (rows 8-15), a4a5 (cols 8-15), a6a7.
  uint32_t q_frag[D / 16][4];  // A fragments of this warp's 16 rows of Q, per 16 columns
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    const int j = lane / 8, r = warp * 16 + lane % 8 + 8 * (j % 2), d = kc * 16 + 8 * (j / 2);
    attn::ldmatrix<4>(q_frag[kc], Qs + Tile<D>::offset(r, d, Br));
  }
  // A negative scale is folded into Q once (flip the sign bit of each 16-bit element), so that
  // the softmax below only ever sees a positive scale (common/online_softmax.h).
  if (p.scale < 0.0f)
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
#pragma unroll
      for (int r = 0; r < 4; ++r) q_frag[kc][r] ^= 0x80008000u;
  const float c = online_softmax::scale_log2(p.scale);  // scale * log2(e)

  // Descriptors (attn::make_wgmma_desc) of slot 0, each slot kSlotBytes further: K-major B (K) in
  // 128-byte swizzle, 8-row groups 1024 bytes apart, k-block kc (16 columns of d) 32 bytes further
  // within a 64-column block. V is B of P V, MN-major (d contiguous): 16 keys per k-block are 16
  // rows of 128 bytes, the next 64 columns of d are the next block (leading byte offset Bc * 128).
  const uint64_t k_desc = attn::make_wgmma_desc(ring, 16, 1024, attn::WgmmaSwizzle::b128);
  const uint64_t v_desc =
      attn::make_wgmma_desc(ring + Tile<D>::elements(Bc), Bc * 128, 1024, attn::WgmmaSwizzle::b128);

  float o_acc[D / 8][4] = {};  // O: 64 x D per warpgroup, D / 8 tiles of 16 x 8 per warp
  online_softmax::State<float> state[2] = {online_softmax::init<float>(),
                                           online_softmax::init<float>()};
  // Where the current tile n lies in the ring, kept as running values (as CUTLASS's
  // PipelineState does) instead of divided out of n: slot = n % kStages, phase = n / kStages % 2.
  int slot = 0;
  uint32_t phase = 0;

  // The tile with keys past the batch's key length (its last, when the batch has padding) gets
  // zeros there from the consumers before any of them reads it: TMA copied the caller's padding
  // in, and P V would add P = 0 times its NaN (attn::zero_tile_rows).
  auto zero_padding = [&](int n, int s) {
    const int len_k = attn::key_length(p, b), j0 = n * Bc;
    if (len_k == p.seqlen_k || j0 + Bc <= len_k) return;
    attn::zero_tile_rows<D>(ring + s * 2 * Tile<D>::elements(Bc) + Tile<D>::elements(Bc), Bc,
                            len_k - j0, threadIdx.x, kConsumers);
    attn::named_barrier_sync(kPaddingBarrier, kConsumers);
  };

  // One K/V tile. kMasked: some key of the tile is invisible to some row (the last, partial tile;
  // tiles on the causal diagonal); the other tiles skip the mask entirely.
  auto tile = [&](int n, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int j0 = n * Bc;
    attn::mbarrier_test_wait_parity(&full[slot], phase);  // this tile has landed
    if constexpr (kMasked) zero_padding(n, slot);
    const uint64_t k_slot = attn::wgmma_desc_plus(k_desc, slot * kSlotBytes);
    const uint64_t v_slot = attn::wgmma_desc_plus(v_desc, slot * kSlotBytes);

    // With dropout, this lane's 32 keep decisions of the tile (bit 4 nt + i for element i of S
    // tile nt), drawn before S is computed, so that the Philox rounds do not compete for
    // registers with S and P. Keys 2t and 2t + 1 of a row come from one Philox call.
    [[maybe_unused]] uint32_t keep = 0;
    if constexpr (kDropout) {
      // Not unrolled: one Philox call at a time keeps its temporaries to a few registers.
#pragma unroll 1
      for (int nt = 0; nt < Bc / 8; ++nt) {
#pragma unroll 1
        for (int half = 0; half < 2; ++half) {
          bool keep0, keep1;
          attn::dropout_keep_pair(drop, b, h, i0 + warp * 16 + g + 8 * half, j0 + nt * 8 + 2 * t,
                                  keep0, keep1);
          keep |= uint32_t(keep0) << (4 * nt + 2 * half);
          keep |= uint32_t(keep1) << (4 * nt + 2 * half + 1);
        }
      }
    }

    // S = Q K^T for the warpgroup's 64 rows and the tile's Bc keys: D / 16 wgmmas of 64 x Bc x 16,
    // A from Q's fragments, B (K, stored [key][d]: K-major) from the slot, one group. wgmma.fence
    // first: S's registers were written by ordinary instructions since the last wgmma.
    float s[Bc / 8][4];
    attn::wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
      attn::wgmma_rs<Bc, T>(s, q_frag[kc],
                            attn::wgmma_desc_plus(k_slot, (kc / 4) * Bc * 128 + (kc % 4) * 32),
                            kc > 0);
    attn::wgmma_commit();
    attn::wgmma_wait<0>();  // S has retired: its registers may be read

    // Mask (masked tiles only) and row maxima of the unscaled scores. Element i of tile nt is
    // row g + 8 * (i / 2), key j0 + 8 nt + 2t + i % 2.
    float tile_max[2];
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (kMasked)
          if (j0 + nt * 8 + 2 * t + i % 2 >= end[i / 2]) s[nt][i] = -INFINITY;
        tile_max[i / 2] = nt == 0 && i % 2 == 0 ? s[nt][i] : fmaxf(tile_max[i / 2], s[nt][i]);
      }
    }

    // Online softmax on the fragments, in base 2: the four lanes of a row combine their maxima
    // with two shuffles; each lane keeps its own part of the row sum l (reduced once, at the end).
    float alpha[2], neg_mc[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      alpha[half] = online_softmax::rescale_to2<kMasked>(
          state[half], attn::row_max<4>(tile_max[half]), c, attn::exp2_ftz);
      neg_mc[half] = online_softmax::neg_scaled_max<kMasked>(state[half], c);
    }
    uint32_t p_frag[Bc / 16][4];  // P as A fragments, 16 keys each
    // With dropout, what rounding P to 16 bits lost (see pack2_residual), multiplied by V too:
    // the kept probabilities are scaled by 1 / (1 - p) at the end (1000 at p = 0.999), and two
    // kept keys whose values have opposite signs cancel, so the rounding error of P alone would
    // exceed the check. Without dropout this array is empty and costs nothing.
    [[maybe_unused]] uint32_t p_lo[kDropout ? Bc / 16 : 1][4];
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt) {
      float pr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        pr[i] = online_softmax::prob2(s[nt][i], c, neg_mc[i / 2], attn::exp2_ftz);
        state[i / 2].l += pr[i];  // the softmax normalises over every key, dropped or not
      }
      if constexpr (kDropout) {
        // Dropped: 0; kept: 1. The 1 / (1 - p) of the kept ones is applied to O at the end, so
        // P stays in [0, 1].
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (!(keep >> (4 * nt + i) & 1u)) pr[i] = 0.0f;
      }
      // The accumulator layout of S (rows g, g+8; columns 2t, 2t+1) is the A-fragment layout of
      // P for the product P V: tiles 2k and 2k+1 of S are keys 0-7 and 8-15 of A fragment k.
      p_frag[nt / 2][2 * (nt % 2)] = attn::pack2<T>(pr[0], pr[1]);
      p_frag[nt / 2][2 * (nt % 2) + 1] = attn::pack2<T>(pr[2], pr[3]);
      if constexpr (kDropout) {
        p_lo[nt / 2][2 * (nt % 2)] =
            attn::pack2_residual<T>(pr[0], pr[1], p_frag[nt / 2][2 * (nt % 2)]);
        p_lo[nt / 2][2 * (nt % 2) + 1] =
            attn::pack2_residual<T>(pr[2], pr[3], p_frag[nt / 2][2 * (nt % 2) + 1]);
      }
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o_acc[dt][i] *= alpha[i / 2];
    }

    // O += P V: Bc / 16 wgmmas of 64 x D x 16, A from P's fragments (and P's residual with
    // dropout), B (V, stored [key][d]: MN-major, transposed in the instruction) from the slot.
    attn::wgmma_fence();  // P and O were written by ordinary instructions
#pragma unroll
    for (int kc = 0; kc < Bc / 16; ++kc) {
      const uint64_t vd = attn::wgmma_desc_plus(v_slot, kc * 16 * 128);
      attn::wgmma_rs<D, T, true>(o_acc, p_frag[kc], vd, true);
      if constexpr (kDropout) attn::wgmma_rs<D, T, true>(o_acc, p_lo[kc], vd, true);
    }
    attn::wgmma_commit();
    attn::wgmma_wait<0>();                // P V has retired: O may be read, P overwritten
    attn::mbarrier_arrive(&empty[slot]);  // this thread is done with the slot: refill it
    if (++slot == kStages) slot = 0, phase ^= 1;
  };
  int n = 0;
  for (; n < n_unmasked; ++n) tile(n, std::false_type{});
  for (; n < n_tiles; ++n) {
    tile(n, std::true_type{});
  }

  // O = acc / l (times 1 / (1 - p) with dropout), straight from the accumulators: each lane
  // writes two adjacent elements per tile. The four lanes of a row add up their parts of l here,
  // once, instead of on every tile.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    state[half].l = attn::row_sum<4>(state[half].l);
    // A row that sees no key (above a causal diagonal, or padding past its batch's query length)
    // may still have run through unmasked tiles: it writes O = 0 and LSE = -inf, whatever those
    // tiles added (a padding row's Q is the caller's: NaN there made its accumulators NaN).
    if (end[half] == 0) {
      state[half] = online_softmax::init<float>();
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) o_acc[dt][2 * half] = o_acc[dt][2 * half + 1] = 0.0f;
    }
    const int r = warp * 16 + g + 8 * half;
    if (i0 + r >= p.seqlen_q) continue;
    const float inv_l = online_softmax::inv_sum(state[half]) * (kDropout ? drop.scale : 1.0f);
    T* o = static_cast<T*>(p.o) + (q_row0 + r) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(o + dt * 8 + 2 * t) =
          attn::pack2<T>(o_acc[dt][2 * half] * inv_l, o_acc[dt][2 * half + 1] * inv_l);
    if (t == 0) p.lse[q_row0 + r] = online_softmax::lse2(state[half], p.scale);
  }
#else
  (void)p, (void)map_q, (void)map_k, (void)map_v;
#endif
}

void run(const AttentionParams& p, attn::RunContext& ctx) {
  const unsigned bh = p.batch * p.heads;
  const unsigned q_tiles = (p.seqlen_q + Br - 1) / Br;
  ctx.tile = {Br, Bc, kStages};
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const attn::TensorMap mq =
          attn::head_tensor_map<T>(p.q, p.batch * p.heads, p.seqlen_q, D, Br);
      const attn::TensorMap mk =
          attn::head_tensor_map<T>(p.k, p.batch * p.heads_kv, p.seqlen_k, D, Bc);
      const attn::TensorMap mv =
          attn::head_tensor_map<T>(p.v, p.batch * p.heads_kv, p.seqlen_k, D, Bc);
      const size_t smem =
          (Tile<D>::elements(Br) + kStages * 2 * Tile<D>::elements(Bc)) * sizeof(T) +
          (2 * kStages + 1) * sizeof(uint64_t);
      if (p.dropout > 0.0f)
        attn::launch(attention_kernel_sm90a<T, D, true>,
                     {dim3(1, q_tiles, bh), dim3(kThreads), smem}, p, mq, mk, mv);
      else
        attn::launch(attention_kernel_sm90a<T, D, false>,
                     {dim3(1, q_tiles, bh), dim3(kThreads), smem}, p, mq, mk, mv);
    });
  });
}

}  // namespace step5::rung2::ATTN_BACKEND_NS
