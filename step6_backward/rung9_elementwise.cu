// Step 6, rung 9: a tile's elementwise work, done once a tile where it can be.
//
//   delta_kernel  D_i = rowsum(dO_i * O_i)
//   dkdv_kernel   as in rung 8; P_ij = exp2(S_ij * scale * log2 e - LSE_i * log2 e), one fused
//                 multiply-add and one ex2, with the lane's rows' LSE and D_i read once a tile
//   dq_kernel     as in rung 8; its rows' LSE and D_i read once, before the key tiles, and so is
//                 how far its warp's rows see every key
//
// In rung 8 every pair (i, j) of a tile read its row's LSE and D_i from global memory again,
// made dropout's parameters again (a conversion through double) and tested the mask, each test
// a branch around the pair's work: its main loops issued three to four times the instructions
// of their products (the chapter's section (l)). Now a tile's pairs are one straight run of
// arithmetic: the mask is tested only in the tiles that cross the causal diagonal or the end of
// the rows (every pair of the others is visible, as in step 4's rung 4.7) and dropout's
// decisions are made only when dropout is on. The exponential is step 4's rung 4.6's, ex2 of a
// fused multiply-add.
#include <type_traits>

#include "common/online_softmax.h"
#include "common/ptx.h"
#include "common/tiles.h"

namespace step6::rung9::ATTN_BACKEND_NS {

using attn::BackwardParams;

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

constexpr int Br = 16, Bc = 64, kThreads = 128;  // query rows a tile, keys a block, threads
// Shared rows of K, V, Q and dO are D + 8 elements long (step 4's padding): ldmatrix reads 16
// bytes from each of 8 consecutive rows, and rows 2 D + 16 bytes apart start in different banks.
constexpr int kPad = 8;
constexpr int kRowsQ = 64;  // query rows of a dq_kernel block: four warps of 16
constexpr int kStages = 2;  // buffers of the tile a block walks: one computed, one in flight
// Keys of a dq_kernel tile: Bc, half at D = 128, where two buffers of 64 keys' K and V beside the
// block's Q and dO would need more shared memory than an sm_89 or sm_120 SM has.
template <int D>
constexpr int kDqKeys = D < 128 ? Bc : Bc / 2;
constexpr float kLog2e = float(online_softmax::kLog2e);

// Runs pairs(masked, dropout), the elementwise work of a warp's tile, with only the tests the tile
// needs: the mask where not every pair is visible, dropout's decisions where dropout is on.
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

// load_rows_16B's copy of kRows rows as cp.async: no registers, and nothing waits for it until
// cp_async_wait. Rows at or past `valid_rows` are filled with zeros (a source size of 0 bytes).
// The block's kThreads threads share the 16-byte pieces, each a fixed number of them: a loop the
// compiler unrolls whole.
template <int D, int kRows, typename T>
__device__ __forceinline__ void load_rows_async(T* smem, int stride, const T* gmem,
                                                int valid_rows) {
  constexpr int kVecsPerRow = D / 8, kVecs = kRows * kVecsPerRow;
#pragma unroll
  for (int k = 0; k < (kVecs + kThreads - 1) / kThreads; ++k) {
    const int v = k * kThreads + threadIdx.x, row = v / kVecsPerRow, col = v % kVecsPerRow * 8;
    if (kVecs % kThreads != 0 && v >= kVecs) break;
    const bool valid = row < valid_rows;
    attn::cp_async_16(smem + row * stride + col, gmem + (valid ? row * D + col : 0),
                      valid ? 16 : 0);
  }
}

// One block per Bc keys of a key/value head, a warp per 16 of them. Shared memory: K and V of its
// keys and two buffers of a query tile's Q and dO (rows D + kPad long); dK and dV are in the warps'
// registers.
template <typename T, int D>
__global__ void dkdv_kernel(const BackwardParams p, const float* delta) {
  constexpr int stride = D + kPad;  // a shared row of K, V, Q or dO
  const int tid = threadIdx.x, j0 = blockIdx.x * Bc;
  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const int group = p.heads / p.heads_kv;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int kw = 16 * warp;  // the warp's first key
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  const float c = p.scale * kLog2e;  // S_ij * c - LSE_i * log2 e: the exponent in base 2
  T* Ks = attn::shared_memory<T>();
  T *Vs = Ks + Bc * stride, *Qbuf = Vs + Bc * stride, *dObuf = Qbuf + kStages * Br * stride;

  const int64_t kv0 = (int64_t(b) * p.heads_kv + hk) * p.seqlen_k;
  // The query tiles a row of which sees one of the block's keys: in each head of the group, the
  // tiles from i_first up to the batch's query length (the keys a tile's rows see only grow down
  // the head, so the tiles rung 6.7 skipped one by one are those before i_first and the padding
  // after). The block computes them in order, the s-th from buffer s % kStages.
  const int len_q = attn::query_length(p, b), len_k = attn::key_length(p, b);
  int i_first = 0;
  while (i_first < len_q && attn::tile_keys_end(p, b, i_first, Br) <= j0) i_first += Br;
  // Rows past the batch's query length are zeros: their pairs are masked, and the products
  // multiply them by zero, which a caller's NaN there would survive.
  auto load_tile = [&](int h, int i0, int stage) {  // head h's rows i0.. into buffer `stage`
    const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
    load_rows_async<D, Br>(Qbuf + stage * Br * stride, stride,
                           static_cast<const T*>(p.q) + row0 * D, len_q - i0);
    load_rows_async<D, Br>(dObuf + stage * Br * stride, stride,
                           static_cast<const T*>(p.dout) + row0 * D, len_q - i0);
  };
  // K and V (keys past the batch's key length: zeros) in one group with the first query tile.
  load_rows_async<D, Bc>(Ks, stride, static_cast<const T*>(p.k) + (kv0 + j0) * D, len_k - j0);
  load_rows_async<D, Bc>(Vs, stride, static_cast<const T*>(p.v) + (kv0 + j0) * D, len_k - j0);
  if (i_first < len_q) load_tile(hk * group, i_first, 0);
  attn::cp_async_commit();
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};  // the warp's 16 keys x D, as accumulator tiles
  for (int h = hk * group, s = 0; h < (hk + 1) * group; ++h)
    for (int i0 = i_first; i0 < len_q; i0 += Br) {
      const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
      const int stage = s++ % kStages;
      const T *Qs = Qbuf + stage * Br * stride, *dOs = dObuf + stage * Br * stride;
      __syncthreads();  // every warp is done with the tile before, whose buffer the next takes
      // The next tile: this head's next one, or the next head's first.
      if (i0 + Br < len_q)
        load_tile(h, i0 + Br, (stage + 1) % kStages);
      else if (h + 1 < (hk + 1) * group)
        load_tile(h + 1, i_first, (stage + 1) % kStages);
      attn::cp_async_commit();             // (an empty group when there is no next tile)
      attn::cp_async_wait<kStages - 1>();  // all but the newest group: this tile has landed ...
      __syncthreads();                     // ... for every thread's copies
      // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys x 16 rows, two accumulator tiles of
      // 8 rows each: the A fragments of K and V as in rung 4, and one ldmatrix.x4 of Q (and of
      // dO) gives the B fragments of both tiles, as step 4 loads K for two key tiles.
      float qk[2][4] = {}, dov[2][4] = {};
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        uint32_t ka[4], va[4], qb[4], dob[4];
        const int key = kw + lane % 8 + 8 * (lane / 8 % 2), d = kc * 16 + 8 * (lane / 16);
        attn::ldmatrix<4>(ka, Ks + key * stride + d);
        attn::ldmatrix<4>(va, Vs + key * stride + d);
        const int r = lane % 8 + 8 * (lane / 16), c = kc * 16 + 8 * (lane / 8 % 2);
        attn::ldmatrix<4>(qb, Qs + r * stride + c);
        attn::ldmatrix<4>(dob, dOs + r * stride + c);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          attn::mma_m16n8k16<T>(qk[nt], ka, {qb[2 * nt], qb[2 * nt + 1]}, qk[nt]);
          attn::mma_m16n8k16<T>(dov[nt], va, {dob[2 * nt], dob[2 * nt + 1]}, dov[nt]);
        }
      }
      // The lane's four rows, 8 nt + 2t + r2: LSE_i * log2 e and D_i, once a tile (a row past the
      // end reads nothing: its pairs are masked).
      float lse2[2][2], d_i[2][2];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int r2 = 0; r2 < 2; ++r2) {
          const int r = 8 * nt + 2 * t + r2;
          lse2[nt][r2] = i0 + r < p.seqlen_q ? p.lse[row0 + r] * kLog2e : 0.0f;
          d_i[nt][r2] = i0 + r < p.seqlen_q ? delta[row0 + r] : 0.0f;
        }
      // Each pair the lane holds: element e of tile nt is key kw + g + 8 (e / 2), row
      // 8 nt + 2t + e % 2. P_ij from the LSE, Z_ij, dP_ij and dS_ij, as in rung 4; P * Z and dS
      // are kept, in the registers they were computed in. Every pair of the warp's tile is
      // visible when its first row sees the warp's last key and its last row is a real one.
      const bool all_visible = i0 + Br <= len_q && attn::row_keys_end(p, b, i0) >= j0 + kw + 16;
      float pz[2][4], ds[2][4];
      tile_pairs(drop, all_visible, [&](auto masked, auto dropout) {
        constexpr bool kMasked = decltype(masked)::value, kDropout = decltype(dropout)::value;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = 8 * nt + 2 * t + e % 2, i = i0 + r, j = j0 + kw + g + 8 * (e / 2);
            const float prob = attn::exp2_ftz(qk[nt][e] * c - lse2[nt][e % 2]);
            const float z = kDropout ? attn::dropout_factor(drop, b, h, i, j) : 1.0f;
            const bool visible = !kMasked || (i < p.seqlen_q && j < attn::row_keys_end(p, b, i));
            pz[nt][e] = visible ? prob * z : 0.0f;
            ds[nt][e] = visible ? prob * (z * dov[nt][e] - d_i[nt][e % 2]) : 0.0f;
          }
      });
      // dV += (P * Z)^T dO and dK += dS^T Q on tensor cores. The two tiles' accumulators (rows
      // 0-7, 8-15) are the A fragment of the warp's 16 keys x 16 rows: a0a1 = tile 0's e = 0, 1,
      // a2a3 its e = 2, 3, a4a5 and a6a7 tile 1's. dO and Q are stored [row][d], and the B
      // operand needs [d][row]: ldmatrix.x4.trans gives two 16-row x 8-d tiles of it.
      uint32_t pa[4], dsa[4];  // P * Z and dS as A fragments: the warp's 16 keys x 16 rows
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        pa[2 * nt] = attn::pack2<T>(pz[nt][0], pz[nt][1]);
        pa[2 * nt + 1] = attn::pack2<T>(pz[nt][2], pz[nt][3]);
        dsa[2 * nt] = attn::pack2<T>(ds[nt][0], ds[nt][1]);
        dsa[2 * nt + 1] = attn::pack2<T>(ds[nt][2], ds[nt][3]);
      }
#pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2) {
        uint32_t ob[4], qb[4];
        const int r = lane % 8 + 8 * (lane / 8 % 2), d = dt * 8 + 8 * (lane / 16);
        attn::ldmatrix<4, true>(ob, dOs + r * stride + d);
        attn::ldmatrix<4, true>(qb, Qs + r * stride + d);
        attn::mma_m16n8k16<T>(dv[dt], pa, {ob[0], ob[1]}, dv[dt]);
        attn::mma_m16n8k16<T>(dv[dt + 1], pa, {ob[2], ob[3]}, dv[dt + 1]);
        attn::mma_m16n8k16<T>(dk[dt], dsa, {qb[0], qb[1]}, dk[dt]);
        attn::mma_m16n8k16<T>(dk[dt + 1], dsa, {qb[2], qb[3]}, dk[dt + 1]);
      }
    }
  attn::cp_async_wait<0>();  // nothing may be in flight when the block exits (K and V, where it
                             // computed no tile)
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // dK and dV from the lane's own accumulators: element e of tile dt is key kw + g + 8 (e / 2),
      // column 8 dt + 2t + e % 2.
      const int j = j0 + kw + g + 8 * (e / 2), c = dt * 8 + 2 * t + e % 2;
      if (j >= p.seqlen_k) continue;
      static_cast<T*>(p.dk)[(kv0 + j) * D + c] = attn::from_float<T>(p.scale * dk[dt][e]);
      static_cast<T*>(p.dv)[(kv0 + j) * D + c] = attn::from_float<T>(dv[dt][e]);
    }
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
  const float c = p.scale * kLog2e;
  // The warp's rows (element e: warp * 16 + g + 8 (e / 2)): LSE_i * log2 e and D_i, once.
  float lse2[2], d_i[2];
#pragma unroll
  for (int r2 = 0; r2 < 2; ++r2) {
    const int r = warp * 16 + g + 8 * r2;
    lse2[r2] = i0 + r < p.seqlen_q ? p.lse[row0 + r] * kLog2e : 0.0f;
    d_i[r2] = i0 + r < p.seqlen_q ? delta[row0 + r] : 0.0f;
  }
  auto load_tile = [&](int j0, int stage) {  // the key tile at j0 into buffer `stage`
    load_rows_async<D, Bc>(Kbuf + stage * Bc * stride, stride,
                           static_cast<const T*>(p.k) + (kv0 + j0) * D, keys_end - j0);
    load_rows_async<D, Bc>(Vbuf + stage * Bc * stride, stride,
                           static_cast<const T*>(p.v) + (kv0 + j0) * D, keys_end - j0);
  };
  // Q and dO in one group with the first key tile.
  load_rows_async<D, kRowsQ>(Qs, stride, static_cast<const T*>(p.q) + row0 * D, p.seqlen_q - i0);
  load_rows_async<D, kRowsQ>(dOs, stride, static_cast<const T*>(p.dout) + row0 * D,
                             p.seqlen_q - i0);
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
    // S = Q K^T and dP = dO V^T for the warp's 16 rows, as step 4's S: Q and dO rows are A
    // fragments, K and V rows (stored [key][d]) B fragments, two key tiles per ldmatrix.x4.
    float qk[Bc / 8][4] = {}, dov[Bc / 8][4] = {};
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t qa[4], da[4];
      const int r = warp * 16 + lane % 8 + 8 * (lane / 8 % 2), d = kc * 16 + 8 * (lane / 16);
      attn::ldmatrix<4>(qa, Qs + r * stride + d);
      attn::ldmatrix<4>(da, dOs + r * stride + d);
#pragma unroll
      for (int nt = 0; nt < Bc / 8; nt += 2) {
        uint32_t kb[4], vb[4];
        const int key = nt * 8 + lane % 8 + 8 * (lane / 16), c = kc * 16 + 8 * (lane / 8 % 2);
        attn::ldmatrix<4>(kb, Ks + key * stride + c);
        attn::ldmatrix<4>(vb, Vs + key * stride + c);
        attn::mma_m16n8k16<T>(qk[nt], qa, {kb[0], kb[1]}, qk[nt]);
        attn::mma_m16n8k16<T>(qk[nt + 1], qa, {kb[2], kb[3]}, qk[nt + 1]);
        attn::mma_m16n8k16<T>(dov[nt], da, {vb[0], vb[1]}, dov[nt]);
        attn::mma_m16n8k16<T>(dov[nt + 1], da, {vb[2], vb[3]}, dov[nt + 1]);
      }
    }
    // dS, element e of tile nt at row warp * 16 + g + 8 (e / 2), key j0 + 8 nt + 2t + e % 2, as
    // in the dkdv_kernel; tiles 2k and 2k + 1 are A fragment k of dS (16 rows x 16 keys).
    const bool all_visible = j0 + Bc <= visible_end;
    float ds[Bc / 8][4];
    tile_pairs(drop, all_visible, [&](auto masked, auto dropout) {
      constexpr bool kMasked = decltype(masked)::value, kDropout = decltype(dropout)::value;
#pragma unroll
      for (int nt = 0; nt < Bc / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = w0 + g + 8 * (e / 2), j = j0 + nt * 8 + 2 * t + e % 2;
          const float prob = attn::exp2_ftz(qk[nt][e] * c - lse2[e / 2]);
          const float z = kDropout ? attn::dropout_factor(drop, b, h, i, j) : 1.0f;
          const bool visible = !kMasked || (i < p.seqlen_q && j < attn::row_keys_end(p, b, i));
          ds[nt][e] = visible ? prob * (z * dov[nt][e] - d_i[e / 2]) : 0.0f;
        }
    });
    uint32_t dsa[Bc / 16][4];
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt) {
      dsa[nt / 2][2 * (nt % 2)] = attn::pack2<T>(ds[nt][0], ds[nt][1]);
      dsa[nt / 2][2 * (nt % 2) + 1] = attn::pack2<T>(ds[nt][2], ds[nt][3]);
    }
    // dQ += dS K: K stored [key][d] is the B operand [d][key] through ldmatrix.x4.trans, two
    // 8-column tiles of d at a time, as V is in step 4's O += P V.
#pragma unroll
    for (int dt = 0; dt < D / 8; dt += 2)
#pragma unroll
      for (int kc = 0; kc < Bc / 16; ++kc) {
        uint32_t kb[4];
        const int key = kc * 16 + lane % 8 + 8 * (lane / 8 % 2), d = dt * 8 + 8 * (lane / 16);
        attn::ldmatrix<4, true>(kb, Ks + key * stride + d);
        attn::mma_m16n8k16<T>(dq[dt], dsa[kc], {kb[0], kb[1]}, dq[dt]);
        attn::mma_m16n8k16<T>(dq[dt + 1], dsa[kc], {kb[2], kb[3]}, dq[dt + 1]);
      }
  }
  attn::cp_async_wait<0>();  // nothing may be in flight when the block exits
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // Element e of tile dt: row warp * 16 + g + 8 (e / 2), column 8 dt + 2t + e % 2.
      const int r = warp * 16 + g + 8 * (e / 2), c = dt * 8 + 2 * t + e % 2;
      if (i0 + r < p.seqlen_q)
        static_cast<T*>(p.dq)[(row0 + r) * D + c] = attn::from_float<T>(p.scale * dq[dt][e]);
    }
}

void run(const attn::AttentionParams& forward, attn::RunContext& ctx) {
  const BackwardParams p = ctx.backward_params(forward);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  float* delta = ctx.scratch<float>("D", rows);
  const unsigned bhk = p.batch * p.heads_kv, bh = p.batch * p.heads;
  // The tallest query tile (the dq_kernel's), a block's keys, and the buffers of the tiles walked.
  ctx.tile = {kRowsQ, Bc, kStages};
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::launch(delta_kernel<T>, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 delta);
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const size_t smem = (2 * Bc + 2 * kStages * Br) * (D + kPad) * sizeof(T);
      attn::launch(dkdv_kernel<T, D>, {dim3((p.seqlen_k + Bc - 1) / Bc, bhk), dim3(kThreads), smem},
                   p, static_cast<const float*>(delta));
      constexpr int dq_keys = kDqKeys<D>;
      const size_t dq_smem = (2 * kRowsQ + 2 * kStages * dq_keys) * (D + kPad) * sizeof(T);
      const unsigned q_tiles = (p.seqlen_q + kRowsQ - 1) / kRowsQ;
      attn::launch(dq_kernel<T, D>, {dim3(1, q_tiles, bh), dim3(kThreads), dq_smem}, p,
                   static_cast<const float*>(delta));
    });
  });
}

}  // namespace step6::rung9::ATTN_BACKEND_NS
