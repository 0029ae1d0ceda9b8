// Step 5 (sm_80 variant): fused attention with warp-specialised producer and consumers (sm_80
// and newer).
//
//   attention_kernel   one producer warp copies Q into its own buffer, then streams every K/V
//                      tile with cp.async into a ring of kStages slots of swizzled shared memory;
//                      four consumer warps compute (mma.sync m16n8k16 from ldmatrix fragments,
//                      the online softmax on the accumulator fragments, P from registers). Nobody
//                      waits for everybody: each slot has a "full" and an "empty" mbarrier, and
//                      the two sides hand slots back and forth through them (Q has a "full" of
//                      its own).
//
//   tile n:  0 (K0 V0)   1 (K1 V1)   2 (K2 V2)   3 (K3 V3)   4 (K4 V4)  ...
//   slot:    0           1           0           1           0          ...   n % kStages
//   phase:   0           0           1           1           0          ...   n / kStages % 2
//
// The producer waits until a slot is empty (parity phase ^ 1: the first lap finds every slot
// empty), issues the slot's copies and has them arrive on "full" when they land
// (cp.async.mbarrier.arrive.noinc). A consumer waits until the slot is full (parity phase),
// computes, and arrives on "empty". The parity tells a phase from the one before it; it cannot
// tell it from the one two laps back, which is why the producer must wait on "empty".
//
// A block owns Br = 64 query rows of one (batch, head): four consumer warps, 16 rows each. Every
// warp computes its own 16 x 64 slice of S per tile, so the softmax needs only shuffles within the
// four lanes that share a row (lane 4g .. 4g+3 hold rows g and g + 8).
#include "common/ptx.h"
#include "common/swizzled_tile.h"
#include "common/tiles.h"

#include <type_traits>

namespace step5::ATTN_BACKEND_NS {

using attn::AttentionParams;
using attn::Tile;
using attn::TileCopy;

constexpr int kConsumerWarps = 4;
constexpr int kWarps = kConsumerWarps + 1;  // the last warp is the producer
constexpr int Br = 16 * kConsumerWarps;     // query rows per block
constexpr int Bc = 64;                      // keys per tile
constexpr int kThreads = 32 * kWarps;
constexpr int kConsumers = 32 * kConsumerWarps;  // threads that arrive on "empty"
// Ring slots, each a K tile and a V tile: with Q's buffer, 80 KB at D = 128, within the 99 KB a
// block may have on sm_86, sm_89 and sm_120 (a third slot would make it 112).
constexpr int kStages = 2;

// kDropout is a compile-time choice: without it the kernel contains no dropout code at all.
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kThreads, 1) attention_kernel(const AttentionParams p) {
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
  const int64_t kv_row0 = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k;
  const T* k_head = static_cast<const T*>(p.k) + kv_row0 * D;
  const T* v_head = static_cast<const T*>(p.v) + kv_row0 * D;

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

  if (threadIdx.x == 0) {
    attn::mbarrier_init(q_full, 32);  // the producer's 32 lanes' copies
    attn::mbarrier_label(q_full, "q_full");
    for (int s = 0; s < kStages; ++s) {
      attn::mbarrier_init(&full[s], 32);
      attn::mbarrier_init(&empty[s], kConsumers);
      attn::mbarrier_label(&full[s], "full");
      attn::mbarrier_label(&empty[s], "empty");
    }
  }
  __syncthreads();  // the barriers exist before anyone uses them (the block's only __syncthreads)

  if (warp == kConsumerWarps) {  // the producer: Q, then every K/V tile through the ring
    const TileCopy<D, Br, 32, kConsumers> q_copy;   // the producer warp's 32 lanes share each copy
    const TileCopy<D, Bc, 32, kConsumers> kv_copy;  // K and V: the same shape, the same offsets
    q_copy.template issue<false>(Qs, static_cast<const T*>(p.q) + q_row0 * D, p.seqlen_q - i0);
    attn::cp_async_mbarrier_arrive_noinc(q_full);  // "q_full" completes when they land
    for (int n = 0; n < n_tiles; ++n) {
      const int s = n % kStages;
      attn::mbarrier_test_wait_parity(&empty[s], (n / kStages % 2) ^ 1);  // the slot was read
      T* k_slot = ring + s * 2 * Tile<D>::elements(Bc);
      T* v_slot = k_slot + Tile<D>::elements(Bc);
      const int j0 = n * Bc;  // The last tile's keys past block_end are zero-filled.
      if (j0 + Bc <= block_end) {
        kv_copy.template issue<true>(k_slot, k_head + int64_t(j0) * D);
        kv_copy.template issue<true>(v_slot, v_head + int64_t(j0) * D);
      } else {
        kv_copy.template issue<false>(k_slot, k_head + int64_t(j0) * D, block_end - j0);
        kv_copy.template issue<false>(v_slot, v_head + int64_t(j0) * D, block_end - j0);
      }
      attn::cp_async_mbarrier_arrive_noinc(&full[s]);  // "full" completes when they land
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

  // ldmatrix row addresses, relative to a stage, computed once. The lane's part of the swizzle
  // (r % 8 = lane % 8) is the same for every tile. Columns 16 c16 .. 16 c16 + 15 of a 64-column
  // block are chunks 2 c16 and 2 c16 + 1, and (2 c16 + x) ^ y = (x ^ y) ^ 2 c16 for x < 2: the
  // offset of columns 16 c16 is the offset of columns 0 with bits 4-5 flipped, offset ^ 16 c16.
  // Rows and 64-column blocks then add constants.
  const int k_ldsm = Tile<D>::offset(lane % 8 + 8 * (lane / 16), 8 * (lane / 8 % 2), Bc);
  const int v_ldsm = Tile<D>::offset(lane % 8 + 8 * (lane / 8 % 2), 8 * (lane / 16), Bc);

  float o_acc[D / 8][4] = {};  // O accumulators: D / 8 tiles of 16 x 8
  online_softmax::State<float> state[2] = {online_softmax::init<float>(),
                                           online_softmax::init<float>()};

  // One K/V tile. kMasked: some key of the tile is invisible to some row (the last, partial tile;
  // tiles on the causal diagonal); the other tiles skip the mask entirely.
  // Its ring slot, stage = n % kStages, is a compile-time constant too, so that every
  // shared-memory address below is a per-thread base plus an immediate: the loops call this for
  // kStages tiles at a time.
  auto tile = [&](int n, auto stage_c, auto masked) {
    constexpr int stage = decltype(stage_c)::value;
    constexpr bool kMasked = decltype(masked)::value;
    const int j0 = n * Bc;
    attn::mbarrier_test_wait_parity(&full[stage], n / kStages % 2);  // this tile has landed
    const T* K = ring + stage * 2 * Tile<D>::elements(Bc);
    const T* V = K + Tile<D>::elements(Bc);

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

    // S = Q K^T for this warp's 16 rows and the tile's Bc keys: Bc / 8 accumulator tiles of 16 x 8.
    // K is stored [key][d], which is exactly an mma B operand ("col"): a non-transposed
    // ldmatrix.x4 gives the B fragments of two key tiles for 16 columns of d.
    float s[Bc / 8][4] = {};
#pragma unroll
    for (int nt = 0; nt < Bc / 8; nt += 2) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        uint32_t kb[4];
        attn::ldmatrix<4>(kb, K + (k_ldsm ^ kc % 4 * 16) + (kc / 4) * Bc * 64 + nt * 8 * 64);
        attn::mma_m16n8k16<T>(s[nt], q_frag[kc], {kb[0], kb[1]}, s[nt]);
        attn::mma_m16n8k16<T>(s[nt + 1], q_frag[kc], {kb[2], kb[3]}, s[nt + 1]);
      }
    }

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

    // O += P V. V is stored [key][d]; the B operand needs [d][key], so ldmatrix.x4.trans reads
    // two 16-key x 8-d tiles transposed: the B fragments of two d tiles.
#pragma unroll
    for (int dt = 0; dt < D / 8; dt += 2) {
#pragma unroll
      for (int kc = 0; kc < Bc / 16; ++kc) {
        uint32_t vb[4];
        attn::ldmatrix<4, true>(vb,
                                V + (v_ldsm ^ dt % 8 / 2 * 16) + (dt / 8) * Bc * 64 + kc * 16 * 64);
        attn::mma_m16n8k16<T>(o_acc[dt], p_frag[kc], {vb[0], vb[1]}, o_acc[dt]);
        attn::mma_m16n8k16<T>(o_acc[dt + 1], p_frag[kc], {vb[2], vb[3]}, o_acc[dt + 1]);
        if constexpr (kDropout) {
          attn::mma_m16n8k16<T>(o_acc[dt], p_lo[kc], {vb[0], vb[1]}, o_acc[dt]);
          attn::mma_m16n8k16<T>(o_acc[dt + 1], p_lo[kc], {vb[2], vb[3]}, o_acc[dt + 1]);
        }
      }
    }
    attn::mbarrier_arrive(&empty[stage]);  // this thread is done with the slot: refill it
  };
  int n = 0;
  for (; n + kStages - 1 < n_unmasked; n += kStages)
    attn::static_for<kStages>([&](auto stage) { tile(n + stage.value, stage, std::false_type{}); });
  for (; n < n_tiles; ++n) {  // the rest (fewer than kStages unmasked tiles, then the masked ones)
    attn::static_for<kStages>([&](auto stage) {
      if (n % kStages == stage.value) tile(n, stage, std::true_type{});
    });
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
}

void run(const AttentionParams& p, attn::RunContext& ctx) {
  const unsigned bh = p.batch * p.heads;
  const unsigned q_tiles = (p.seqlen_q + Br - 1) / Br;
  ctx.tile = {Br, Bc, kStages};
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const size_t smem =
          (Tile<D>::elements(Br) + kStages * 2 * Tile<D>::elements(Bc)) * sizeof(T) +
          (2 * kStages + 1) * sizeof(uint64_t);
      if (p.dropout > 0.0f)
        attn::launch(attention_kernel<T, D, true>, {dim3(1, q_tiles, bh), dim3(kThreads), smem}, p);
      else
        attn::launch(attention_kernel<T, D, false>, {dim3(1, q_tiles, bh), dim3(kThreads), smem},
                     p);
    });
  });
}

}  // namespace step5::ATTN_BACKEND_NS
