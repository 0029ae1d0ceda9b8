// Step 5 (sm_90a variant): FlashAttention-3's structure on Hopper.
//
//   attention_kernel_sm90a   three warpgroups of 128 threads. Warpgroup 0 is the producer: one
//                            elected thread issues TMA tile loads (Q once into its own buffer,
//                            then K and V tiles into a ring of kStages slots), crediting each
//                            "full" mbarrier with the bytes it expects. Warpgroups 1 and 2 are
//                            consumers, 64 query rows each (Br = 128), with most of the block's
//                            registers (setmaxnreg). They take turns issuing their wgmmas (named
//                            barriers), so that one's softmax runs while the other's products
//                            occupy the tensor cores, and each issues tile n's S = Q K^T together
//                            with tile n-1's O += P V, its softmax of S_n starting while that
//                            P V still runs. S = Q K^T reads Q and K from shared memory through
//                            descriptors; O += P V takes P from registers; the row sums l = P 1
//                            are a wgmma too, with a matrix of ones. A consumer releases a slot
//                            by arriving on its "empty" mbarrier.
//
//   tile n:  wait full[n] | turn: issue S_n, P_{n-1} V_{n-1} | wait S_n: mask, maxima
//            | wait P_{n-1} V_{n-1}: release slot n-1, rescale O, P_n
//   slot:    n % kStages, phase n / kStages % 2, kept as running values
//
// The grid is persistent: as many blocks as the GPU has SMs (attn::sm_count), each taking query
// tiles (work items) in turn. Without a mask every tile costs the same, and block x takes items x,
// x + gridDim.x, ...: the blocks running at once share a few heads, whose K and V stay in L2. With
// a causal mask a query tile sees more keys the later it lies, so the items run longest first
// (every head's last tile, then every head's tile before it, ...), and a block that finishes one
// takes the next item no block has taken, from a counter in global memory (its producer's
// atomicAdd; run_sm90a zeroes it before the launch): the long tiles spread over the SMs first and
// the short ones fill the gaps they leave. The producer passes the item to the consumers in shared
// memory, with Q. The consumers release Q's buffer on "q_empty" once their last S = Q K^T has
// retired, so that the producer loads the next tile's Q and K/V tiles while they finish the last P
// V and write O. The ring's slot and phase and the ping-pong's turns run on from tile to tile.
//
// When the query tiles fill at most half the SMs (key_splits), each one's keys are split into
// parts, a work item each: the block of a part runs the online softmax over its key tiles alone and
// writes O and LSE in fp32 to scratch memory, and combine_kernel_sm90a merges each row's parts by
// their log-sum-exps (online_softmax::merge_lse): step 0's identity across blocks instead of tiles.
//
// With grouped-query attention, the query heads that share a K/V head are packed into one tile
// when that saves a tenth of the tiles (packed_heads): `pack` heads of Br / pack rows each, one
// TMA box of Br / pack rows by `pack` heads, every K/V tile loaded once for all of them. A row of
// the tile is head h + r / (Br / pack), query i0 + r % (Br / pack).
//
// Key tiles are as wide as the consumers' registers allow at each head dim, in as many ring slots
// as shared memory holds (kKeysPerTile, kRingSlots): 192 keys up to D = 96, 176 at D = 128, in 3
// slots at D = 64 and 2 above; 64 keys in 3 slots with dropout. Shared tiles are 64-column blocks
// of 128-byte rows in TMA's 128-byte swizzle (common/swizzled_tile.h); head dims past 64 use a
// second block, zero-filled past D by TMA.
#include "common/hopper.h"
#include "common/swizzled_tile.h"
#include "common/tiles.h"

#include <algorithm>
#include <type_traits>

namespace step5::ATTN_BACKEND_NS {

using attn::AttentionParams;
using attn::Tile;

namespace sm90a {  // apart from the sm_80 kernel's names (attention.cu), in the same namespace

constexpr int kConsumerGroups = 2;                      // warpgroups 1 and 2
constexpr int kThreads = 128 * (1 + kConsumerGroups);   // the producer is warpgroup 0
constexpr int Br = 64 * kConsumerGroups;                // query rows per block
constexpr int kConsumers = 128 * kConsumerGroups;       // threads that arrive on "empty"
constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 40 * 128 + 232 * 256 = 168 * 384
constexpr int kTurnBarrier = 1;     // named barriers 1, 2: the consumers' turns to issue GEMMs
constexpr int kGroupBarrier = 3;    // named barriers 3, 4: one consumer warpgroup's 128 threads
constexpr int kPaddingBarrier = 5;  // named barrier 5: all consumer threads (zero_padding)
static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumers <=
                  65536 / kThreads / 8 * 8 * kThreads,
              "setmaxnreg: the roles' registers must fit the block's pool");

// The tile shape per head dim. Keys per tile: the softmax costs the same instructions per score
// whatever Bc is, but each tile also pays for rescaling O (D / 2 FMULs per thread), the row
// maxima's shuffles, the barriers and the descriptors: a wide tile that the consumers' 232
// registers hold without spills (S: Bc / 2, O: D / 2, P: Bc / 4 per thread) spreads those over
// more tensor work: 192 keys up to D = 96, 176 (FlashAttention-3's width) at 128. The dropout
// kernels keep a second copy of P (the rounding residual) and stay at 64. Ring slots: as many K/V
// tiles as shared memory holds beside Q, at most 3; above D = 64 the wide tiles leave room for 2,
// as many keys in flight as 3 slots of 128 keys. (Three consumer warpgroups of 64 rows,
// FlashAttention-3's shape at D = 64, would leave each 160 registers, too few for the S, P and O
// of a 192-key tile: 96 + 48 + 32.)
template <int D, bool kDropout>
constexpr int kKeysPerTile = kDropout  ? 64
                             : D <= 96 ? 192
                                       : 176;
// A Hopper block's shared memory, at most; 1 KiB of it left for the ones and the barriers.
constexpr int kSharedBytes = 227 * 1024;
template <int D, bool kDropout>
constexpr int kRingSlots = std::min(3, (kSharedBytes - 1024 - Tile<D>::elements(Br) * 2) /
                                           (2 * Tile<D>::elements(kKeysPerTile<D, kDropout>) * 2));
constexpr int kOnes = 16 * 8;  // the 16 x 8 matrix of ones (row sums), after the ring

}  // namespace sm90a

// kDropout is a compile-time choice: without it the kernel contains no dropout code at all.
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(sm90a::kThreads, 1)
    attention_kernel_sm90a(const AttentionParams p, const __grid_constant__ attn::TensorMap map_q,
                           const __grid_constant__ attn::TensorMap map_k,
                           const __grid_constant__ attn::TensorMap map_v, int* tile_counter,
                           int splits, int pack, float* o_part, float* lse_part) {
#if ATTN_SM90A_BODY
  using namespace sm90a;
  constexpr int Bc = kKeysPerTile<D, kDropout>, kStages = kRingSlots<D, kDropout>;
  T* Qs = attn::shared_memory<T>();                      // [Br][D], swizzled, then the ring:
  T* ring = Qs + Tile<D>::elements(Br);                  // [kStages][K, V][Bc][D], then the ones:
  T* ones = ring + kStages * 2 * Tile<D>::elements(Bc);  // [8][16] (n-major: a K-major B)
  uint64_t* full = reinterpret_cast<uint64_t*>(ones + kOnes);
  uint64_t* empty = full + kStages;  // full[s]: slot s has landed; empty[s]: slot s was read
  uint64_t* q_full = empty + kStages;
  uint64_t* q_empty = q_full + 1;  // q_full: Q has landed; q_empty: Q was read
  int* tile_item = reinterpret_cast<int*>(q_empty + 1);  // the work item whose Q is in Qs
  // The warpgroup as a value the compiler knows to be the same in every lane of a warp (a
  // shuffle's result), so that the descriptors derived from it live in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // this lane holds rows g and g + 8 of its warp's 16
  const int group = warpgroup - 1;       // consumer warpgroup 0 or 1: rows 64 group .. + 63
  const int row0 = 64 * group + 16 * (warp % 4) + g;  // this lane's rows: row0, row0 + 8
  const int rows = Br / pack;                         // of each of the tile's heads
  const int q_tiles = (p.seqlen_q + rows - 1) / rows, n_bh = p.batch * p.heads / pack;
  const int n_work = q_tiles * n_bh, n_items = n_work * splits;
  // A work item is a query tile, its (batch, heads) and rows (with a causal mask, longest first),
  // and a part of its keys (item / n_work): of the n key tiles the tile sees, tiles
  // first_tile(part, n) to first_tile(part + 1, n) - 1.
  auto bh_of = [&](int item) { return p.causal ? item % n_bh : item / q_tiles % n_bh; };
  auto i0_of = [&](int item) {
    return (q_tiles - 1 - (p.causal ? item / n_bh % q_tiles : item % q_tiles)) * rows;
  };
  auto first_tile = [&](int part, int n) { return part * n / splits; };
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  constexpr uint32_t kSlotBytes = 2 * Tile<D>::elements(Bc) * sizeof(T);  // K and V

  if (threadIdx.x == 0) {
    attn::mbarrier_init(q_full, 1);  // the producer's arrive.expect_tx, then the TMA bytes
    attn::mbarrier_label(q_full, "q_full");
    attn::mbarrier_init(q_empty, kConsumers);
    attn::mbarrier_label(q_empty, "q_empty");
    for (int s = 0; s < kStages; ++s) {
      attn::mbarrier_init(&full[s], 1);
      attn::mbarrier_init(&empty[s], kConsumers);
      attn::mbarrier_label(&full[s], "full");
      attn::mbarrier_label(&empty[s], "empty");
    }
  }
  if (!kDropout) {
    // The ones that P 1 (the row sums) multiplies, written once by ordinary stores, which the
    // async proxy (wgmma) sees only after the fence and the barrier below.
    if (threadIdx.x < kOnes / 8) {
      const uint32_t one2 = attn::pack2<T>(1.0f, 1.0f);
      reinterpret_cast<uint4*>(ones)[threadIdx.x] = make_uint4(one2, one2, one2, one2);
      attn::fence_proxy_async_shared();  // the ones
    }
  }
  __syncthreads();  // the barriers exist before anyone uses them (the block's only __syncthreads)

  if (warpgroup == 0) {  // the producer warpgroup: Q, then every K/V tile through the ring
    attn::setmaxnreg_dec<kProducerRegs>();
    if (warp == 0 && attn::elect_one()) {  // one thread issues every copy
      int loads = 0;                       // K/V tiles loaded, of every query tile so far
      for (int w = 0, item = blockIdx.x;; ++w) {
        attn::mbarrier_wait_parity(q_empty, (w % 2) ^ 1);  // the last tile's Q was read
        *tile_item = item;      // read by the consumers once q_full's phase completes
        if (item >= n_items) {  // none left: the consumers wake to the item and stop
          attn::mbarrier_arrive(q_full);
          break;
        }
        const int bh = bh_of(item), b = bh / (p.heads / pack), h = bh % (p.heads / pack) * pack;
        const int i0 = i0_of(item);
        const int n_tiles = (attn::tile_keys_end(p, b, i0, rows) + Bc - 1) / Bc;
        const int kv_bh = b * p.heads_kv + attn::kv_head(p, h), part = item / n_work;
        // Boxes past the tensor's last row arrive as zeros (and count).
        attn::mbarrier_arrive_expect_tx(q_full, Tile<D>::elements(Br) * sizeof(T));
        for (int blk = 0; blk < Tile<D>::kBlocks; ++blk)
          attn::tma_load_3d(Qs + blk * Br * 64, &map_q, q_full, 64 * blk, i0, b * p.heads + h);
        for (int n = first_tile(part, n_tiles); n < first_tile(part + 1, n_tiles); ++n, ++loads) {
          const int s = loads % kStages;
          attn::mbarrier_wait_parity(&empty[s], (loads / kStages % 2) ^ 1);  // the slot was read
          T* k_slot = ring + s * 2 * Tile<D>::elements(Bc);
          T* v_slot = k_slot + Tile<D>::elements(Bc);
          const int j0 = n * Bc;
          attn::mbarrier_arrive_expect_tx(&full[s], kSlotBytes);
          for (int blk = 0; blk < Tile<D>::kBlocks; ++blk) {
            attn::tma_load_3d(k_slot + blk * Bc * 64, &map_k, &full[s], 64 * blk, j0, kv_bh);
            attn::tma_load_3d(v_slot + blk * Bc * 64, &map_v, &full[s], 64 * blk, j0, kv_bh);
          }
        }
        item = p.causal ? atomicAdd(tile_counter, 1) + int(gridDim.x) : item + int(gridDim.x);
      }
    }
    return;
  }

  attn::setmaxnreg_inc<kConsumerRegs>();
  // Where the current K/V tile lies in the ring, kept as running values (as CUTLASS's
  // PipelineState does) instead of divided out of a count: slot = n % kStages, phase = n / kStages
  // % 2, from the slot before the first; and the ping-pong's turns (below), over every query tile.
  int slot = kStages - 1, turn = 0;
  uint32_t phase = 1;
  for (int w = 0;; ++w) {
    attn::mbarrier_wait_parity(q_full, w % 2);  // Q has landed, and its item
    const int item = *tile_item;
    if (item >= n_items) break;
    const int bh = bh_of(item), b = bh / (p.heads / pack), h0 = bh % (p.heads / pack) * pack;
    const int i0 = i0_of(item);

    // This lane's two rows (head, query), the keys each sees, and the keys any row of the block
    // sees (see step 3).
    int head[2], query[2], end[2];
    for (int half = 0; half < 2; ++half) {
      head[half] = h0 + (row0 + 8 * half) / rows, query[half] = i0 + (row0 + 8 * half) % rows;
      end[half] = attn::row_keys_end(p, b, query[half]);
    }
    const int block_end = attn::tile_keys_end(p, b, i0, rows);
    // This part's tiles: n0 + n for n < n_tiles.
    const int all_tiles = (block_end + Bc - 1) / Bc, part = item / n_work;
    const int n0 = first_tile(part, all_tiles), n_tiles = first_tile(part + 1, all_tiles) - n0;
    // Tiles every row of the block sees in full need no mask: the block's first row sees the
    // fewest keys (padding rows past the batch's query length see none, but they also skip the
    // unmasked tiles' result: see the epilogue).
    const int n_unmasked = min(attn::row_keys_end(p, b, i0) / Bc - n0, n_tiles);

    T* q_group = Qs + group * 64 * 64;  // this warpgroup's 64 rows, in each 64-column block
    // A negative scale is folded into Q once (flip the sign bit of each 16-bit element), so that
    // the softmax below only ever sees a positive scale (common/online_softmax.h); in shared memory
    // now, and every warp of the warpgroup must have fenced its stores before any of them issues a
    // wgmma that reads them.
    if (p.scale < 0.0f) {
      attn::negate_tile_rows<D>(q_group, Br, 64, threadIdx.x % 128, 128);
      attn::named_barrier_sync(kGroupBarrier + group, 128);
    }
    const float c = online_softmax::scale_log2(p.scale);  // scale * log2(e)

    // Descriptors (attn::make_wgmma_desc) of Q and of slot 0, each slot kSlotBytes further: K-major
    // A (Q) and B (K) in 128-byte swizzle, 8-row groups 1024 bytes apart, k-block kc (16 columns of
    // d) 32 bytes further within a 64-column block. V is B of P V, MN-major (d contiguous): 16 keys
    // per k-block are 16 rows of 128 bytes, the next 64 columns of d are the next block (leading
    // byte offset Bc * 128).
    const uint64_t q_desc = attn::make_wgmma_desc(q_group, 16, 1024, attn::WgmmaSwizzle::b128);
    const uint64_t k_desc = attn::make_wgmma_desc(ring, 16, 1024, attn::WgmmaSwizzle::b128);
    const uint64_t v_desc = attn::make_wgmma_desc(ring + Tile<D>::elements(Bc), Bc * 128, 1024,
                                                  attn::WgmmaSwizzle::b128);
    // The ones: B of P 1 (16 keys x 8), K-major without swizzle: two core matrices of 8 rows (n) x
    // 8 keys, the second 128 bytes after the first (the leading byte offset; the stride byte
    // offset would step to a second group of 8 rows, which N = 8 does not have, so it is 128 too).
    // Every element is 1, so each of the 8 columns of P 1 is the row sum of P.
    const uint64_t ones_desc = attn::make_wgmma_desc(ones, 128, 128, attn::WgmmaSwizzle::none);

    float o_acc[D / 8][4] = {};  // O: 64 x D per warpgroup, D / 8 tiles of 16 x 8 per warp
    // l = P 1 on the tensor cores: 64 x 8, the row sum of row g (+ 8) in l_acc[0] (l_acc[2]), the
    // other columns the same sums again (unused, so not rescaled). It replaces one FADD per score.
    // The dropout kernels sum P before dropping keys, with FADDs.
    [[maybe_unused]] float l_acc[4] = {};
    online_softmax::State<float> state[2] = {online_softmax::init<float>(),
                                             online_softmax::init<float>()};
    // What the pieces of a tile below share: S of the tile in flight, P of the tile whose P V is
    // next, the factors of the last softmax.
    float s[Bc / 8][4];
    uint32_t p_frag[Bc / 16][4];  // P as A fragments, 16 keys each
    // With dropout, what rounding P to 16 bits lost (see pack2_residual), multiplied by V too:
    // the kept probabilities are scaled by 1 / (1 - p) at the end (1000 at p = 0.999), and two
    // kept keys whose values have opposite signs cancel, so the rounding error of P alone would
    // exceed the check. Without dropout this array is empty and costs nothing.
    [[maybe_unused]] uint32_t p_lo[kDropout ? Bc / 16 : 1][4];
    float alpha[2], neg_mc[2];

    // The tile with keys past the batch's key length (its last, when the batch has padding) gets
    // zeros there from the consumers before any of them reads it: TMA copied the caller's padding
    // in, and P V would add P = 0 times its NaN (attn::zero_tile_rows).
    auto zero_padding = [&](int n, int s) {
      const int len_k = attn::key_length(p, b), j0 = (n0 + n) * Bc;
      if (len_k == p.seqlen_k || j0 + Bc <= len_k) return;
      attn::zero_tile_rows<D>(ring + s * 2 * Tile<D>::elements(Bc) + Tile<D>::elements(Bc), Bc,
                              len_k - j0, threadIdx.x - 128, kConsumers);
      attn::named_barrier_sync(kPaddingBarrier, kConsumers);
    };

    // The ping-pong: turn k of this warpgroup waits for the other's turn k - 1 (warpgroup 0 goes
    // first) and ends by letting the other go. Both warpgroups take n_tiles + 1 turns a work item
    // (the last issues its last P V; none for a part without key tiles), counted on across items;
    // warpgroup 0 takes warpgroup 1's last turn's end after the last item.
    auto turn_begin = [&] {
      if (group == 1 || turn > 0) attn::named_barrier_sync(kTurnBarrier + group, 2 * 128);
    };
    auto turn_end = [&] {
      attn::named_barrier_arrive(kTurnBarrier + (1 - group), 2 * 128);
      ++turn;
    };

    // The pieces of a tile. With dropout, this lane's 32 keep decisions of tile n (bit 4 nt + i for
    // element i of S tile nt), drawn before S is computed, so that the Philox rounds do not compete
    // for registers with S and P. Keys 2t and 2t + 1 of a row come from one Philox call.
    auto keep_bits = [&](int n) {
      [[maybe_unused]] uint32_t keep = 0;
      if constexpr (kDropout) {
        const int j0 = (n0 + n) * Bc;
        // Not unrolled: one Philox call at a time keeps its temporaries to a few registers.
#pragma unroll 1
        for (int nt = 0; nt < Bc / 8; ++nt) {
#pragma unroll 1
          for (int half = 0; half < 2; ++half) {
            bool keep0, keep1;  // (selects: a loop index into head[] would put it on the stack)
            attn::dropout_keep_pair(drop, b, half ? head[1] : head[0], half ? query[1] : query[0],
                                    j0 + nt * 8 + 2 * t, keep0, keep1);
            keep |= uint32_t(keep0) << (4 * nt + 2 * half);
            keep |= uint32_t(keep1) << (4 * nt + 2 * half + 1);
          }
        }
      }
      return keep;
    };

    // S = Q K^T for the warpgroup's 64 rows and the tile in slot `stage`: D / 16 wgmmas of
    // 64 x Bc x 16, A (Q) and B (K, stored [key][d]: K-major) from shared memory, one group.
    auto issue_s = [&](int stage) {
      const uint64_t k_slot = attn::wgmma_desc_plus(k_desc, stage * kSlotBytes);
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        attn::wgmma_ss<Bc, T>(s, attn::wgmma_desc_plus(q_desc, (kc / 4) * Br * 128 + (kc % 4) * 32),
                              attn::wgmma_desc_plus(k_slot, (kc / 4) * Bc * 128 + (kc % 4) * 32),
                              kc > 0);
      attn::wgmma_commit();
    };

    // The softmax of tile n, in two parts. First (S has retired): the mask (masked tiles only) and
    // row maxima of the unscaled scores. Element i of tile nt is row g + 8 * (i / 2), key
    // j0 + 8 nt + 2t + i % 2.
    auto softmax_max = [&](int n, auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
      const int j0 = (n0 + n) * Bc;
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
      // with two shuffles; each lane keeps its own part of the row sum l (reduced once, at the
      // end).
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float m = attn::row_max<4>(tile_max[half]);
        alpha[half] = kDropout
                          ? online_softmax::rescale_to2<kMasked>(state[half], m, c, attn::exp2_ftz)
                          : online_softmax::move_max2<kMasked>(state[half], m, c, attn::exp2_ftz);
      }
    };
    // Second (the previous P V has retired, so P's and O's registers are free): P, and O rescaled.
    auto softmax_p = [&](uint32_t keep, auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int half = 0; half < 2; ++half)
        neg_mc[half] = online_softmax::neg_scaled_max<kMasked>(state[half], c);
#pragma unroll
      for (int nt = 0; nt < Bc / 8; ++nt) {
        float pr[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          pr[i] = online_softmax::prob2(s[nt][i], c, neg_mc[i / 2], attn::exp2_ftz);
          if constexpr (kDropout) state[i / 2].l += pr[i];  // over every key, dropped or not
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
      if constexpr (!kDropout) l_acc[0] *= alpha[0], l_acc[2] *= alpha[1];
    };

    // O += P V of the tile in slot `stage`: Bc / 16 wgmmas of 64 x D x 16, A from P's fragments
    // (and P's residual with dropout), B (V, stored [key][d]: MN-major, transposed in the
    // instruction) from the slot, one group.
    auto issue_pv = [&](int stage) {
      const uint64_t v_slot = attn::wgmma_desc_plus(v_desc, stage * kSlotBytes);
#pragma unroll
      for (int kc = 0; kc < Bc / 16; ++kc) {
        const uint64_t vd = attn::wgmma_desc_plus(v_slot, kc * 16 * 128);
        attn::wgmma_rs<D, T, true>(o_acc, p_frag[kc], vd, true);
        if constexpr (kDropout)
          attn::wgmma_rs<D, T, true>(o_acc, p_lo[kc], vd, true);
        else  // l += P 1
          attn::wgmma_rs<8, T, false>(l_acc, p_frag[kc], ones_desc, true);
      }
      attn::wgmma_commit();
    };

    // Tile n: S_n and P_{n-1} V_{n-1} issued in this warpgroup's turn; the softmax of S_n starts
    // when S_n retires (wait_group 1: the P V group may still run); the slot of tile n - 1 is
    // released, and P_n written, once P V has retired too.
    auto tile = [&](int n, auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
      const int prev = slot;  // tile n - 1's
      if (++slot == kStages) slot = 0, phase ^= 1;
      attn::mbarrier_wait_parity(&full[slot], phase);  // this tile has landed
      if constexpr (kMasked) zero_padding(n, slot);
      const uint32_t keep = keep_bits(n);
      turn_begin();
      attn::wgmma_fence();  // S, P and O were written by ordinary instructions since the last wgmma
      issue_s(slot);
      issue_pv(prev);
      turn_end();
      attn::wgmma_wait<1>();  // S_n has retired
      softmax_max(n, masked);
      attn::wgmma_wait<0>();                // P_{n-1} V_{n-1} has retired
      attn::mbarrier_arrive(&empty[prev]);  // this thread is done with tile n - 1's slot
      softmax_p(keep, masked);
    };
    if (n_tiles > 0) {
      // Tile 0: S_0 alone, then its softmax (O is still zero).
      if (++slot == kStages) slot = 0, phase ^= 1;
      attn::mbarrier_wait_parity(&full[slot], phase);
      zero_padding(0, slot);
      const uint32_t keep = keep_bits(0);
      turn_begin();
      attn::wgmma_fence();
      issue_s(slot);
      turn_end();
      attn::wgmma_wait<0>();
      if (n_unmasked > 0) {
        softmax_max(0, std::false_type{});
        softmax_p(keep, std::false_type{});
      } else {
        softmax_max(0, std::true_type{});
        softmax_p(keep, std::true_type{});
      }
      int n = 1;
      for (; n < n_unmasked; ++n) tile(n, std::false_type{});
      for (; n < n_tiles; ++n) {
        tile(n, std::true_type{});
      }
      attn::mbarrier_arrive(q_empty);  // every S = Q K^T of this query tile has retired
      // The last tile's O += P V, in one more turn.
      turn_begin();
      attn::wgmma_fence();
      issue_pv(slot);
      turn_end();
      attn::wgmma_wait<0>();                // the last P V has retired ...
      attn::mbarrier_arrive(&empty[slot]);  // ... before its slot is released
    } else {
      attn::mbarrier_arrive(q_empty);  // no key: Q was not read
    }

    // O = acc / l (times 1 / (1 - p) with dropout), straight from the accumulators: each lane
    // writes two adjacent elements per tile. The four lanes of a row add up their parts of l here,
    // once, instead of on every tile.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      state[half].l = kDropout ? attn::row_sum<4>(state[half].l) : l_acc[2 * half];
      // A row that sees no key (above a causal diagonal, or padding past its batch's query length)
      // may still have run through unmasked tiles: it writes O = 0 and LSE = -inf, whatever those
      // tiles added (a padding row's Q is the caller's: NaN there made its accumulators NaN).
      if (end[half] == 0) {
        state[half] = online_softmax::init<float>();
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) o_acc[dt][2 * half] = o_acc[dt][2 * half + 1] = 0.0f;
      }
      if (query[half] >= p.seqlen_q) continue;
      const int64_t q_row = (int64_t(b) * p.heads + head[half]) * p.seqlen_q + query[half];
      const float inv_l = online_softmax::inv_sum(state[half]) * (kDropout ? drop.scale : 1.0f);
      if (splits > 1) {  // this part's O and LSE, in fp32, for combine_kernel_sm90a to merge
        const int64_t row = int64_t(part) * p.batch * p.heads * p.seqlen_q + q_row;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
          *reinterpret_cast<float2*>(o_part + row * D + dt * 8 + 2 * t) =
              make_float2(o_acc[dt][2 * half] * inv_l, o_acc[dt][2 * half + 1] * inv_l);
        if (t == 0) lse_part[row] = online_softmax::lse2(state[half], p.scale);
        continue;
      }
      T* o = static_cast<T*>(p.o) + q_row * D;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<uint32_t*>(o + dt * 8 + 2 * t) =
            attn::pack2<T>(o_acc[dt][2 * half] * inv_l, o_acc[dt][2 * half + 1] * inv_l);
      if (t == 0) p.lse[q_row] = online_softmax::lse2(state[half], p.scale);
    }
  }
  if (group == 0 && turn > 0) attn::named_barrier_sync(kTurnBarrier, 2 * 128);
#else
  (void)p, (void)map_q, (void)map_k, (void)map_v, (void)tile_counter, (void)splits, (void)pack,
      (void)o_part, (void)lse_part;
#endif
}

// The parts' outputs of each row merged by their log-sum-exps, a block of one warp per row (its
// lanes read consecutive columns of a part's O): part s saw keys whose exp-sum is exp(lse_s), so
// the online softmax's merge of the states (lse_s, 1) weighs its O by exp(lse_s - lse), and lse
// is the row's. A row no part saw keys of gets O = 0, LSE = -inf.
template <typename T, int D>
__global__ void __launch_bounds__(32)
    combine_kernel_sm90a(const AttentionParams p, int splits, const float* o_part,
                         const float* lse_part) {
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q, row = blockIdx.x;
  online_softmax::State<float> all = online_softmax::init<float>();
  for (int s = 0; s < splits; ++s) all = online_softmax::merge_lse(all, lse_part[s * rows + row]);
  for (int d = threadIdx.x; d < D; d += 32) {
    float o = 0.0f;
    for (int s = 0; s < splits; ++s)
      o += online_softmax::exp_shifted(lse_part[s * rows + row], all.m) *
           o_part[(s * rows + row) * D + d];
    static_cast<T*>(p.o)[row * D + d] = attn::from_float<T>(o * online_softmax::inv_sum(all));
  }
  if (threadIdx.x == 0) p.lse[row] = online_softmax::lse(all);
}

// The parts each query tile's keys are split into: as many as keep the grid to one block per SM
// (one wave), and no more than the key tiles: none while the query tiles fill more than half the
// SMs.
int key_splits(unsigned items, int key_tiles) {
  return std::max(1, std::min(int(attn::sm_count() / std::max(items, 1u)), key_tiles));
}

// The query heads of a tile: a GQA group's (the heads that share a K/V head) when they divide the
// tile's rows and packing them saves at least a tenth of the tiles (a short query leaves most of
// a tile's rows empty; FlashAttention-3's margin); else one.
int packed_heads(int seqlen_q, int group) {
  const auto tiles = [&](int rows) { return (seqlen_q + rows - 1) / rows; };
  return sm90a::Br % group == 0 && 10 * tiles(sm90a::Br / group) <= 9 * group * tiles(sm90a::Br)
             ? group
             : 1;
}

void run_sm90a(const AttentionParams& p, attn::RunContext& ctx) {
  using namespace sm90a;
  const int pack = packed_heads(p.seqlen_q, p.heads / p.heads_kv);
  const unsigned bh = p.batch * p.heads / pack;
  const unsigned q_tiles = (p.seqlen_q + Br / pack - 1) / (Br / pack);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  int* counter = ctx.scratch<int>("tile counter", 1);
  if (p.causal) attn::zero_device(ctx, counter, sizeof(int));  // the causal items' counter
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      auto run = [&]<bool kDropout>() {
        constexpr int Bc = kKeysPerTile<D, kDropout>, kStages = kRingSlots<D, kDropout>;
        const int splits = key_splits(q_tiles * bh, (p.seqlen_k + Bc - 1) / Bc);
        ctx.tile = {Br, Bc, kStages, splits, pack};
        float* o_part = splits > 1 ? ctx.scratch<float>("partial O", splits * rows * D) : nullptr;
        float* lse_part = splits > 1 ? ctx.scratch<float>("partial LSE", splits * rows) : nullptr;
        const attn::TensorMap mq =
            attn::head_tensor_map<T>(p.q, p.batch * p.heads, p.seqlen_q, D, Br / pack, pack);
        const attn::TensorMap mk =
            attn::head_tensor_map<T>(p.k, p.batch * p.heads_kv, p.seqlen_k, D, Bc);
        const attn::TensorMap mv =
            attn::head_tensor_map<T>(p.v, p.batch * p.heads_kv, p.seqlen_k, D, Bc);
        const size_t smem =
            (Tile<D>::elements(Br) + kStages * 2 * Tile<D>::elements(Bc) + kOnes) * sizeof(T) +
            (2 * kStages + 3) * sizeof(uint64_t);
        const unsigned blocks = std::min(q_tiles * bh * splits, attn::sm_count());
        attn::launch(attention_kernel_sm90a<T, D, kDropout>, {dim3(blocks), dim3(kThreads), smem},
                     p, mq, mk, mv, counter, splits, pack, o_part, lse_part);
        if (splits > 1)
          attn::launch(combine_kernel_sm90a<T, D>, {dim3(unsigned(rows)), dim3(32), 0}, p, splits,
                       o_part, lse_part);
      };
      if (p.dropout > 0.0f)
        run.template operator()<true>();
      else
        run.template operator()<false>();
    });
  });
}

}  // namespace step5::ATTN_BACKEND_NS
