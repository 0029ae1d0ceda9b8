// Step 6, rung 12 (sm_90a): dkdv_kernel's tiles by TMA, one thread a tile, waited for on mbarriers.
//
// Step 6's kernel had every thread copy its share of the next query tile's Q and dO with cp.async,
// 16 bytes and an address a copy, then wait for its own copies and meet the others at a barrier.
// Here one thread asks Hopper's Tensor Memory Accelerator for each tile (step 5's rung 5.1): a
// box of 64 columns by its coordinates in a tensor map, written in Tile<D>'s 128-byte swizzle,
// the bytes credited to the tile's "full" mbarrier, on which every thread waits. The products read
// the swizzled tiles (common/backward_tiles.h's SwizzledRows). TMA zero-fills rows past the
// tensor's end only: the threads zero a tile's rows past the batch's query length (step 5's
// zero_tile_rows), whose NaN P * Z = 0 would otherwise carry into dV. dq_kernel is step 6's.
//
//   full[s]: buffer s's Q and dO have landed;  kv_full: K and V have
#include <type_traits>

#include "common/backward_tiles.h"
#include "common/hopper.h"
#include "common/online_softmax.h"
#include "common/ptx.h"
#include "common/tiles.h"

namespace step6::sm90a::ATTN_BACKEND_NS {

using attn::BackwardParams;
using attn::Tile;

// One thread per query row: D_i, the row sum of P * dP that the softmax's derivative needs, is
// also the row sum of dO * O, which needs no key (step 0's chapter, section (c)).
template <typename T>
__global__ void delta_kernel(const BackwardParams p, float* delta) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= int64_t(p.batch) * p.heads * p.seqlen_q) return;
  const T* o = static_cast<const T*>(p.o) + row * p.dim;
  const T* dout = static_cast<const T*>(p.dout) + row * p.dim;
  float d = 0.0f;
  for (int c = 0; c < p.dim; ++c) d += attn::to_float(dout[c]) * attn::to_float(o[c]);
  delta[row] = d;
}

constexpr int Bc = 64, kThreads = 128;  // keys a block, threads
// Query rows of a dkdv_kernel tile: four 16-row slices, two at D = 128, where ptxas, scheduling
// four slices' work together beside dK and dV, ran out of registers and spilled.
template <int D>
constexpr int kTileRows = D < 128 ? 64 : 32;
// dq_kernel's shared rows of K, V, Q and dO are D + 8 elements long (step 4's padding): ldmatrix
// reads 16 bytes from each of 8 consecutive rows, and rows 2 D + 16 bytes apart start in different
// banks. dkdv_kernel's are TMA's boxes, in Tile<D>'s swizzle.
constexpr int kPad = 8;
constexpr int kRowsQ = 64;  // query rows of a dq_kernel block: four warps of 16
constexpr int kStages = 2;  // buffers of the tile a block walks: one computed, one in flight
// Keys of a dq_kernel tile: Bc, half at D = 128, where two buffers of 64 keys' K and V beside the
// block's Q and dO would need more shared memory than an sm_89 or sm_120 SM has.
template <int D>
constexpr int kDqKeys = D < 128 ? Bc : Bc / 2;
constexpr float kLog2e = float(online_softmax::kLog2e);

// Runs pairs(masked, dropout), the elementwise work of a warp's tile, with only the tests the tile
// needs: the mask where not every pair is visible, dropout's decisions where dropout is on. Each
// of the three calls is its own instantiation of the lambda: straight-line code.
template <typename Pairs>
__device__ __forceinline__ void tile_pairs(const attn::Dropout& drop, bool all_visible,
                                           Pairs&& pairs) {
  if (drop.enabled)
    pairs(std::true_type{}, std::true_type{});
  else if (all_visible)
    pairs(std::false_type{}, std::false_type{});
  else
    pairs(std::true_type{}, std::false_type{});
}

// P_ij * Z_ij and dS_ij of the pair (i, j) of query head h, from its S_ij = q_i . k_j and
// dO_i . v_j and its row's LSE_i * log2 e and D_i: P_ij = 2^(S_ij * scale * log2 e - LSE_i *
// log2 e), one fused multiply-add and one ex2, Z_ij the dropout factor, dS_ij = P_ij (Z_ij dO_i .
// v_j - D_i). Only the tests the warp's tile needs (tile_pairs): the mask where kMasked (zeros
// where row i does not see key j, or is past the end), dropout's decision where kDropout.
template <bool kMasked, bool kDropout>
__device__ __forceinline__ void pair_terms(const BackwardParams& p, const attn::Dropout& drop,
                                           int b, int h, int i, int j, float lse2, float d_i,
                                           float s, float dp, float& pz, float& ds) {
  const float prob = attn::exp2_ftz(s * (p.scale * kLog2e) - lse2);
  const float z = kDropout ? attn::dropout_factor(drop, b, h, i, j) : 1.0f;
  const bool visible = !kMasked || (i < p.seqlen_q && j < attn::row_keys_end(p, b, i));
  pz = visible ? prob * z : 0.0f;
  ds = visible ? prob * (z * dp - d_i) : 0.0f;
}

// One block per Bc keys of a key/value head, a warp per 16 of them. Shared memory: K and V of its
// keys and two buffers of a query tile's Q and dO (swizzled), and their mbarriers; dK and dV are in
// the warps' registers.
template <typename T, int D>
__global__ void dkdv_kernel(const BackwardParams p, const float* delta,
                            const __grid_constant__ attn::TensorMap map_q,
                            const __grid_constant__ attn::TensorMap map_do,
                            const __grid_constant__ attn::TensorMap map_k,
                            const __grid_constant__ attn::TensorMap map_v) {
  constexpr int Br = kTileRows<D>;  // the query rows of a tile
  const int tid = threadIdx.x, j0 = blockIdx.x * Bc;
  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const int group = p.heads / p.heads_kv;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int kw = 16 * warp;  // the warp's first key
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  T* Ks = attn::shared_memory<T>();
  T *Vs = Ks + Tile<D>::elements(Bc), *Qbuf = Vs + Tile<D>::elements(Bc),
    *dObuf = Qbuf + kStages * Tile<D>::elements(Br);
  // Each buffered tile's rows' LSE_i * log2 e and D_i (rows past the end: 0, their pairs masked).
  float* Lbuf = reinterpret_cast<float*>(dObuf + kStages * Tile<D>::elements(Br));
  float* Dbuf = Lbuf + kStages * Br;
  uint64_t *full = reinterpret_cast<uint64_t*>(Dbuf + kStages * Br), *kv_full = full + kStages;

  const int64_t kv0 = (int64_t(b) * p.heads_kv + hk) * p.seqlen_k;
  // The query tiles a row of which sees one of the block's keys: in each head of the group, the
  // tiles from i_first up to the batch's query length (the keys a tile's rows see only grow down
  // the head: the tiles before i_first see none of them). The block computes them in order, the
  // s-th from buffer s % kStages.
  const int len_q = attn::query_length(p, b);
  int i_first = 0;
  while (i_first < len_q && attn::tile_keys_end(p, b, i_first, Br) <= j0) i_first += Br;
  // Rows past the batch's query length are zeros, as are their LSE and D_i: their pairs are
  // masked, and the products multiply them by zero, which a caller's NaN there would survive.
  auto load_tile = [&](int h, int i0, int stage) {  // head h's rows i0.. into buffer `stage`
    const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
    if (tid == 0) {  // Q's and dO's boxes, their bytes announced to the buffer's mbarrier first
      const int bh = b * p.heads + h, off = stage * Tile<D>::elements(Br);
      attn::mbarrier_arrive_expect_tx(&full[stage], 2 * Tile<D>::elements(Br) * sizeof(T));
      attn::tma_load_tile<D, Br>(Qbuf + off, &map_q, &full[stage], i0, bh);
      attn::tma_load_tile<D, Br>(dObuf + off, &map_do, &full[stage], i0, bh);
    }
    // The rows' LSE and D_i, one value a thread (kThreads >= 2 Br), kept for the tile's slices.
    static_assert(2 * Br <= kThreads);
    const int r = tid % Br;
    const bool real = i0 + r < len_q;
    if (tid < Br)
      Lbuf[stage * Br + r] = real ? p.lse[row0 + r] * kLog2e : 0.0f;
    else if (tid < 2 * Br)
      Dbuf[stage * Br + r] = real ? delta[row0 + r] : 0.0f;
  };
  // The mbarriers, each completing a phase on one arrival and its bytes, made visible to the TMA
  // unit (the async proxy); then K and V (keys past the batch's key length: the caller's, their
  // pairs masked), and the first query tile.
  if (tid == 0) {
    for (int s = 0; s <= kStages; ++s) attn::mbarrier_init(&full[s], 1);
    attn::mbarrier_label(kv_full, "kv_full");
    attn::fence_proxy_async_shared();
    attn::mbarrier_arrive_expect_tx(kv_full, 2 * Tile<D>::elements(Bc) * sizeof(T));
    attn::tma_load_tile<D, Bc>(Ks, &map_k, kv_full, j0, blockIdx.y);
    attn::tma_load_tile<D, Bc>(Vs, &map_v, kv_full, j0, blockIdx.y);
  }
  __syncthreads();  // the mbarriers exist before the other threads wait on them
  if (i_first < len_q) load_tile(hk * group, i_first, 0);
  attn::mbarrier_wait_parity(kv_full, 0);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};  // the warp's 16 keys x D, as accumulator tiles
  for (int h = hk * group, s = 0; h < (hk + 1) * group; ++h)
    for (int it = i_first; it < len_q; it += Br) {
      const int stage = s % kStages, phase = s++ / kStages % 2;
      __syncthreads();  // every warp is done with the tile before, whose buffer the next takes
      // The next tile: this head's next one, or the next head's first.
      if (it + Br < len_q)
        load_tile(h, it + Br, (stage + 1) % kStages);
      else if (h + 1 < (hk + 1) * group)
        load_tile(h + 1, i_first, (stage + 1) % kStages);
      attn::mbarrier_wait_parity(&full[stage], phase);  // this tile has landed
      T *Qt = Qbuf + stage * Tile<D>::elements(Br), *dOt = dObuf + stage * Tile<D>::elements(Br);
      if (len_q < p.seqlen_q && it + Br > len_q) {  // zeros past the batch's query length
        attn::zero_tile_rows<D>(Qt, Br, len_q - it, tid, kThreads);
        attn::zero_tile_rows<D>(dOt, Br, len_q - it, tid, kThreads);
        __syncthreads();
      }
      // The tile's 16-row slices, one after another: the per-tile costs above (copies, barriers,
      // the loop) are paid once for all of them.
#pragma unroll
      for (int slice = 0; slice < Br / 16; ++slice) {
        const int i0 = it + 16 * slice;
        const T *Qs = Qt + 16 * slice * 64, *dOs = dOt + 16 * slice * 64;
        // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys x the slice's 16 rows, two
        // accumulator tiles of 8 rows each: the keys are the rows (M) of the mma, so that an
        // element a lane holds is the pair (key, row) that dV and dK sum over; K's and V's rows are
        // A fragments as they stand, Q's and dO's rows B fragments (common/backward_tiles.h).
        float qk[2][4] = {}, dov[2][4] = {};
        attn::warp_mma_abt2<T, D>(qk, dov, Ks, Vs, kw, attn::SwizzledRows<D>{Bc}, Qs, dOs,
                                  attn::SwizzledRows<D>{Br}, lane);
        // The lane's four rows of the slice, 8 nt + 2t + r2: LSE_i * log2 e and D_i, from the
        // values the tile brought.
        float lse2[2][2], d_i[2][2];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int r2 = 0; r2 < 2; ++r2) {
            const int r = stage * Br + 16 * slice + 8 * nt + 2 * t + r2;
            lse2[nt][r2] = Lbuf[r];
            d_i[nt][r2] = Dbuf[r];
          }
        // Each pair the lane holds: element e of tile nt is key kw + g + 8 (e / 2), row
        // 8 nt + 2t + e % 2 of the slice. P * Z and dS are kept, in the registers they were
        // computed in. Every pair of the warp's tile is visible when its first row sees the warp's
        // last key and its last row is a real one.
        const bool all_visible = i0 + 16 <= len_q && attn::row_keys_end(p, b, i0) >= j0 + kw + 16;
        float pz[2][4], ds[2][4];
        tile_pairs(drop, all_visible, [&](auto masked, auto dropout) {
          constexpr bool kMasked = decltype(masked)::value, kDropout = decltype(dropout)::value;
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = 8 * nt + 2 * t + e % 2, i = i0 + r, j = j0 + kw + g + 8 * (e / 2);
              pair_terms<kMasked, kDropout>(p, drop, b, h, i, j, lse2[nt][e % 2], d_i[nt][e % 2],
                                            qk[nt][e], dov[nt][e], pz[nt][e], ds[nt][e]);
            }
        });
        // dV += (P * Z)^T dO and dK += dS^T Q on tensor cores. The two tiles' accumulators (rows
        // 0-7, 8-15) are the A fragment of the warp's 16 keys x 16 rows: a0a1 = tile 0's e = 0, 1,
        // a2a3 its e = 2, 3, a4a5 and a6a7 tile 1's. dO and Q are stored [row][d], and the B
        // operand needs [d][row]: ldmatrix.x4.trans gives two 16-row x 8-d tiles of it
        // (common/backward_tiles.h's warp_mma_ab2).
        uint32_t pa[4], dsa[4];  // P * Z and dS as A fragments: the warp's 16 keys x 16 rows
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          pa[2 * nt] = attn::pack2<T>(pz[nt][0], pz[nt][1]);
          pa[2 * nt + 1] = attn::pack2<T>(pz[nt][2], pz[nt][3]);
          dsa[2 * nt] = attn::pack2<T>(ds[nt][0], ds[nt][1]);
          dsa[2 * nt + 1] = attn::pack2<T>(ds[nt][2], ds[nt][3]);
        }
        attn::warp_mma_ab2<T>(dv, dk, pa, dsa, dOs, Qs, attn::SwizzledRows<D>{Br}, lane);
      }
    }
  // dK and dV from the lane's own accumulators: the warp's 16 keys from j0 + kw.
  attn::store_tiles<T>(p.dk, kv0 + j0 + kw, dk, p.scale, p.seqlen_k - j0 - kw);
  attn::store_tiles<T>(p.dv, kv0 + j0 + kw, dv, 1.0f, p.seqlen_k - j0 - kw);
}

// One block per kRowsQ query rows of a head, a warp per 16 of them: dQ of those rows, summed in
// registers over the key tiles the rows see, in order. Shared memory: Q and dO of the rows, and
// two buffers of a key tile's K and V.
template <typename T, int D>
__global__ void dq_kernel(const BackwardParams p, const float* delta) {
  constexpr int stride = D + kPad, Bc = kDqKeys<D>;  // a shared row; the keys of a tile
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads, i0 = blockIdx.y * kRowsQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  T* Qs = attn::shared_memory<T>();
  T *dOs = Qs + kRowsQ * stride, *Kbuf = dOs + kRowsQ * stride,
    *Vbuf = Kbuf + kStages * Bc * stride;
  const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
  const int64_t kv0 = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k;
  const int keys_end = attn::tile_keys_end(p, b, i0, kRowsQ);
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  // The warp's rows (element e: warp * 16 + g + 8 (e / 2)): LSE_i * log2 e and D_i, once.
  float lse2[2], d_i[2];
#pragma unroll
  for (int r2 = 0; r2 < 2; ++r2) {
    const int r = warp * 16 + g + 8 * r2;
    lse2[r2] = i0 + r < p.seqlen_q ? p.lse[row0 + r] * kLog2e : 0.0f;
    d_i[r2] = i0 + r < p.seqlen_q ? delta[row0 + r] : 0.0f;
  }
  auto load_tile = [&](int j0, int stage) {  // the key tile at j0 into buffer `stage`
    attn::load_rows_async<D, Bc, kThreads>(Kbuf + stage * Bc * stride, stride, p.k, kv0 + j0,
                                           keys_end - j0);
    attn::load_rows_async<D, Bc, kThreads>(Vbuf + stage * Bc * stride, stride, p.v, kv0 + j0,
                                           keys_end - j0);
  };
  // Q and dO in one group with the first key tile.
  attn::load_rows_async<D, kRowsQ, kThreads>(Qs, stride, p.q, row0, p.seqlen_q - i0);
  attn::load_rows_async<D, kRowsQ, kThreads>(dOs, stride, p.dout, row0, p.seqlen_q - i0);
  if (keys_end > 0) load_tile(0, 0);
  attn::cp_async_commit();
  // Every pair of a key tile is visible to the warp's rows when its first row w0 sees the tile's
  // last key and its last row is a real one: tiles that end at or before visible_end.
  const int w0 = i0 + warp * 16;
  const int visible_end = w0 + 16 <= attn::query_length(p, b) ? attn::row_keys_end(p, b, w0) : 0;
  float dq[D / 8][4] = {};  // the warp's 16 rows x D
  for (int j0 = 0, s = 0; j0 < keys_end; j0 += Bc, ++s) {
    const T *Ks = Kbuf + s % kStages * Bc * stride, *Vs = Vbuf + s % kStages * Bc * stride;
    __syncthreads();  // every warp is done with tile s - 1, whose buffer the next tile takes
    if (j0 + Bc < keys_end) load_tile(j0 + Bc, (s + 1) % kStages);
    attn::cp_async_commit();             // (an empty group when there is no next tile)
    attn::cp_async_wait<kStages - 1>();  // all but the newest group: tile s has landed ...
    __syncthreads();                     // ... for every thread's copies
    // S = Q K^T and dP = dO V^T for the warp's 16 rows, as step 4's S: Q's and dO's rows are A
    // fragments, K's and V's (stored [key][d]) B fragments.
    float qk[Bc / 8][4] = {}, dov[Bc / 8][4] = {};
    attn::warp_mma_abt2<T, D>(qk, dov, Qs, dOs, 16 * warp, Ks, Vs, stride, lane);
    // dS, element e of tile nt at row warp * 16 + g + 8 (e / 2), key j0 + 8 nt + 2t + e % 2, as
    // dkdv_kernel computes it (its P * Z is not needed here); tiles 2k and 2k + 1 are A fragment k
    // of dS (16 rows x 16 keys).
    const bool all_visible = j0 + Bc <= visible_end;
    uint32_t dsa[Bc / 16][4];
    tile_pairs(drop, all_visible, [&](auto masked, auto dropout) {
      constexpr bool kMasked = decltype(masked)::value, kDropout = decltype(dropout)::value;
#pragma unroll
      for (int nt = 0; nt < Bc / 8; ++nt) {
        float pz[4], ds[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = warp * 16 + g + 8 * (e / 2), i = i0 + r, j = j0 + nt * 8 + 2 * t + e % 2;
          pair_terms<kMasked, kDropout>(p, drop, b, h, i, j, lse2[e / 2], d_i[e / 2], qk[nt][e],
                                        dov[nt][e], pz[e], ds[e]);
        }
        dsa[nt / 2][2 * (nt % 2)] = attn::pack2<T>(ds[0], ds[1]);
        dsa[nt / 2][2 * (nt % 2) + 1] = attn::pack2<T>(ds[2], ds[3]);
      }
    });
    // dQ += dS K: K stored [key][d] is the B operand [d][key] through ldmatrix.x4.trans, as V is in
    // step 4's O += P V.
    attn::warp_mma_ab<T>(dq, dsa, Ks, stride, lane);
  }
  attn::cp_async_wait<0>();  // nothing may be in flight when the block exits
  // dQ from the lane's own accumulators: the warp's 16 rows from i0 + 16 warp.
  attn::store_tiles<T>(p.dq, row0 + 16 * warp, dq, p.scale, p.seqlen_q - i0 - 16 * warp);
}

void run(const attn::AttentionParams& forward, attn::RunContext& ctx) {
  const BackwardParams p = ctx.backward_params(forward);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  float* delta = ctx.scratch<float>("D", rows);
  const unsigned bhk = p.batch * p.heads_kv;
  // The tallest query tile (the dq_kernel's), a block's keys, and the buffers of the tiles walked.
  ctx.tile = {kRowsQ, Bc, kStages};
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::launch(delta_kernel<T>, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 delta);
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      constexpr int Br = kTileRows<D>;
      const unsigned bh = p.batch * p.heads;
      const attn::TensorMap mq = attn::head_tensor_map<T>(p.q, bh, p.seqlen_q, D, Br),
                            mdo = attn::head_tensor_map<T>(p.dout, bh, p.seqlen_q, D, Br),
                            mk = attn::head_tensor_map<T>(p.k, bhk, p.seqlen_k, D, Bc),
                            mv = attn::head_tensor_map<T>(p.v, bhk, p.seqlen_k, D, Bc);
      const size_t smem =
          (2 * Tile<D>::elements(Bc) + 2 * kStages * Tile<D>::elements(Br)) * sizeof(T) +
          2 * kStages * Br * sizeof(float) + (kStages + 1) * sizeof(uint64_t);
      attn::launch(dkdv_kernel<T, D>, {dim3((p.seqlen_k + Bc - 1) / Bc, bhk), dim3(kThreads), smem},
                   p, delta, mq, mdo, mk, mv);
      constexpr int dq_keys = kDqKeys<D>;
      const size_t dq_smem = (2 * kRowsQ + 2 * kStages * dq_keys) * (D + kPad) * sizeof(T);
      const unsigned q_tiles = (p.seqlen_q + kRowsQ - 1) / kRowsQ;
      attn::launch(dq_kernel<T, D>, {dim3(1, q_tiles, bh), dim3(kThreads), dq_smem}, p, delta);
    });
  });
}

}  // namespace step6::sm90a::ATTN_BACKEND_NS
