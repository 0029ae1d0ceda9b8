// Step 6, rung 8: a deterministic dQ, in a pass of its own.
//
//   delta_kernel  D_i = rowsum(dO_i * O_i)
//   dkdv_kernel   as in rung 7, without dQ: each block's dK and dV, on tensor cores
//   dq_kernel     one block per 64 query rows of a head (four warps of 16, as in step 4's
//                 forward); it walks the key tiles the rows see, computes S and dP for its rows
//                 again (mma.sync), dS in registers, and dQ += dS K from those registers (the
//                 accumulators of dS are its A fragments, K's B fragments come through
//                 ldmatrix.trans), and writes scale dQ once, rounded; it calls the tile
//                 products and the pair_terms that dkdv_kernel calls
//
// Every element of dQ is now summed by one thread, over the keys in order: no atomics, no FP32
// copy of dQ, and the same bits from run to run and under every schedule. The price is S and dP
// computed twice, seven matrix products where rungs 5-7 had five.
#include "common/backward_tiles.h"
#include "common/ptx.h"
#include "common/tiles.h"

namespace step6::rung8::ATTN_BACKEND_NS {

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

// P_ij * Z_ij and dS_ij of the pair (i, j) of query head h, from its S_ij = q_i . k_j and
// dO_i . v_j: P_ij from the LSE, Z_ij the dropout factor, dS_ij = P_ij (Z_ij dO_i . v_j - D_i), as
// in rung 5 (`row` is row i's index into the LSE and D). Zeros where row i does not see key j, or
// is past the end.
__device__ __forceinline__ void pair_terms(const BackwardParams& p, const float* delta, int b,
                                           int h, int i, int j, int64_t row, float s, float dp,
                                           float& pz, float& ds) {
  pz = ds = 0.0f;
  if (i < p.seqlen_q && j < attn::row_keys_end(p, b, i)) {
    const float prob = __expf(p.scale * s - p.lse[row]);
    const float z = attn::dropout_factor(attn::make_dropout(p.dropout, p.seed), b, h, i, j);
    pz = prob * z;
    ds = prob * (z * dp - delta[row]);
  }
}

// One block per Bc keys of a key/value head, a warp per 16 of them. Shared memory: K and V of its
// keys and Q and dO of the query tile (rows D + kPad long); dK and dV are in the warps' registers.
template <typename T, int D>
__global__ void dkdv_kernel(const BackwardParams p, const float* delta) {
  constexpr int stride = D + kPad;  // a shared row of K, V, Q or dO
  const int tid = threadIdx.x, j0 = blockIdx.x * Bc;
  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const int group = p.heads / p.heads_kv;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int kw = 16 * warp;  // the warp's first key
  T* Ks = attn::shared_memory<T>();
  T *Vs = Ks + Bc * stride, *Qs = Vs + Bc * stride, *dOs = Qs + Br * stride;

  const int64_t kv0 = (int64_t(b) * p.heads_kv + hk) * p.seqlen_k;
  const int len_q = attn::query_length(p, b), len_k = attn::key_length(p, b);
  // Keys past the batch's key length: zeros (its padding's NaN would survive P = 0, dS = 0).
  attn::load_rows<D>(Ks, stride, p.k, kv0 + j0, Bc, len_k - j0);
  attn::load_rows<D>(Vs, stride, p.v, kv0 + j0, Bc, len_k - j0);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};  // the warp's 16 keys x D, as accumulator tiles
  for (int h = hk * group; h < (hk + 1) * group; ++h)
    for (int i0 = 0; i0 < p.seqlen_q; i0 += Br) {
      if (attn::tile_keys_end(p, b, i0, Br) <= j0) continue;  // no row of the tile sees a key
      const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
      __syncthreads();  // the tile before is done with Qs and dOs
      // Rows past the batch's query length are zeros: their pairs are masked, and the products
      // multiply them by zero, which a caller's NaN there would survive.
      attn::load_rows<D>(Qs, stride, p.q, row0, Br, len_q - i0);
      attn::load_rows<D>(dOs, stride, p.dout, row0, Br, len_q - i0);
      __syncthreads();
      // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys (rows kw.. of Ks and Vs) x 16 rows,
      // two accumulator tiles of 8 rows each: K's and V's rows are A fragments as in rung 5, Q's
      // and dO's rows B fragments (common/backward_tiles.h).
      float qk[2][4] = {}, dov[2][4] = {};
      attn::warp_mma_abt2<T, D>(qk, dov, Ks, Vs, kw, Qs, dOs, stride, lane);
      // Each pair the lane holds: element e of tile nt is key kw + g + 8 (e / 2), row
      // 8 nt + 2t + e % 2. P_ij from the LSE, Z_ij, dP_ij and dS_ij, as in rung 5; P * Z and dS
      // are kept, in the registers they were computed in.
      float pz[2][4], ds[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 8 * nt + 2 * t + e % 2, i = i0 + r, j = j0 + kw + g + 8 * (e / 2);
          pair_terms(p, delta, b, h, i, j, row0 + r, qk[nt][e], dov[nt][e], pz[nt][e], ds[nt][e]);
        }
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
      attn::warp_mma_ab2<T>(dv, dk, pa, dsa, dOs, Qs, stride, lane);
    }
  // dK and dV from the lane's own accumulators: the warp's 16 keys from j0 + kw.
  attn::store_tiles<T>(p.dk, kv0 + j0 + kw, dk, p.scale, p.seqlen_k - j0 - kw);
  attn::store_tiles<T>(p.dv, kv0 + j0 + kw, dv, 1.0f, p.seqlen_k - j0 - kw);
}

// One block per kRowsQ query rows of a head, a warp per 16 of them: dQ of those rows, summed in
// registers over the key tiles the rows see, in order. Shared memory: Q and dO of the rows, and K
// and V of one key tile.
template <typename T, int D>
__global__ void dq_kernel(const BackwardParams p, const float* delta) {
  constexpr int stride = D + kPad;
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads, i0 = blockIdx.y * kRowsQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  T* Qs = attn::shared_memory<T>();
  T *dOs = Qs + kRowsQ * stride, *Ks = dOs + kRowsQ * stride, *Vs = Ks + Bc * stride;
  const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
  const int64_t kv0 = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k;
  attn::load_rows<D>(Qs, stride, p.q, row0, kRowsQ, p.seqlen_q - i0);
  attn::load_rows<D>(dOs, stride, p.dout, row0, kRowsQ, p.seqlen_q - i0);
  float dq[D / 8][4] = {};                                     // the warp's 16 rows x D
  const int keys_end = attn::tile_keys_end(p, b, i0, kRowsQ);  // past it, K and V are zeros
  for (int j0 = 0; j0 < keys_end; j0 += Bc) {
    __syncthreads();  // the tile before is done with Ks and Vs (and Q, dO have landed)
    attn::load_rows<D>(Ks, stride, p.k, kv0 + j0, Bc, keys_end - j0);
    attn::load_rows<D>(Vs, stride, p.v, kv0 + j0, Bc, keys_end - j0);
    __syncthreads();
    // S = Q K^T and dP = dO V^T for the warp's 16 rows, as step 4's S: Q's and dO's rows are A
    // fragments, K's and V's (stored [key][d]) B fragments.
    float qk[Bc / 8][4] = {}, dov[Bc / 8][4] = {};
    attn::warp_mma_abt2<T, D>(qk, dov, Qs, dOs, 16 * warp, Ks, Vs, stride, lane);
    // dS, element e of tile nt at row warp * 16 + g + 8 (e / 2), key j0 + 8 nt + 2t + e % 2, as
    // dkdv_kernel computes it (its P * Z is not needed here); tiles 2k and 2k + 1 are A fragment k
    // of dS (16 rows x 16 keys).
    uint32_t dsa[Bc / 16][4];
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt) {
      float pz[4], ds[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = warp * 16 + g + 8 * (e / 2), i = i0 + r, j = j0 + nt * 8 + 2 * t + e % 2;
        pair_terms(p, delta, b, h, i, j, row0 + r, qk[nt][e], dov[nt][e], pz[e], ds[e]);
      }
      dsa[nt / 2][2 * (nt % 2)] = attn::pack2<T>(ds[0], ds[1]);
      dsa[nt / 2][2 * (nt % 2) + 1] = attn::pack2<T>(ds[2], ds[3]);
    }
    // dQ += dS K: K stored [key][d] is the B operand [d][key] through ldmatrix.x4.trans, as V is in
    // step 4's O += P V.
    attn::warp_mma_ab<T>(dq, dsa, Ks, stride, lane);
  }
  // dQ from the lane's own accumulators: the warp's 16 rows from i0 + 16 warp.
  attn::store_tiles<T>(p.dq, row0 + 16 * warp, dq, p.scale, p.seqlen_q - i0 - 16 * warp);
}

void run(const attn::AttentionParams& forward, attn::RunContext& ctx) {
  const BackwardParams p = ctx.backward_params(forward);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  float* delta = ctx.scratch<float>("D", rows);
  const unsigned bhk = p.batch * p.heads_kv;
  // The tallest query tile (the dq_kernel's) and a block's keys, one buffer of them.
  ctx.tile = {kRowsQ, Bc, 1};
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::launch(delta_kernel<T>, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 delta);
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const size_t smem = (2 * Bc + 2 * Br) * (D + kPad) * sizeof(T);
      attn::launch(dkdv_kernel<T, D>, {dim3((p.seqlen_k + Bc - 1) / Bc, bhk), dim3(kThreads), smem},
                   p, delta);
      const size_t dq_smem = (2 * kRowsQ + 2 * Bc) * (D + kPad) * sizeof(T);
      const unsigned q_tiles = (p.seqlen_q + kRowsQ - 1) / kRowsQ, bh = p.batch * p.heads;
      attn::launch(dq_kernel<T, D>, {dim3(1, q_tiles, bh), dim3(kThreads), dq_smem}, p, delta);
    });
  });
}

}  // namespace step6::rung8::ATTN_BACKEND_NS
