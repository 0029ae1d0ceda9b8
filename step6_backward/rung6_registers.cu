// Step 6, rung 6: dV and dK on tensor cores, accumulated in registers.
//
//   delta_kernel  D_i = rowsum(dO_i * O_i), and row i of the FP32 dQ set to zero
//   dkdv_kernel   as in rung 5, S^T and dP^T from mma.sync, but each of the four warps owns 16
//                 keys and all Br = 16 rows of the tile: its P * Z and dS, rounded to the dtype,
//                 are A fragments as they stand, and dV += (P * Z)^T dO and dK += dS^T Q are
//                 mma.sync too, into accumulators that stay in registers until the block ends;
//                 dS still goes through shared memory (FP32) to the CUDA cores' dQ
//   dq_kernel     dQ rounded to the dtype
//
// Step 4's rung 4.3 trick, transposed: two 16 x 8 accumulator tiles of S^T (16 keys x rows 0-7
// and 8-15) have the layout of one 16 x 16 A fragment (keys x rows), which is what dV and dK
// need, and dO and Q, stored [row][d], are their B operands through ldmatrix.trans (as V is in
// step 4's O += P V). A warp's products come from common/backward_tiles.h (warp_mma_abt2 for S^T
// and dP^T, rung 5's fragment loop over two 8-row tiles; warp_mma_ab2 for dV and dK), and a
// pair's arithmetic, rung 5's, is a function of its own, pair_terms.
#include "common/backward_tiles.h"
#include "common/ptx.h"
#include "common/tiles.h"

namespace step6::rung6::ATTN_BACKEND_NS {

using attn::BackwardParams;

// One thread per query row: D_i, the row sum of P * dP that the softmax's derivative needs, is
// also the row sum of dO * O, which needs no key (step 0's chapter, section (c)).
template <typename T>
__global__ void delta_kernel(const BackwardParams p, float* delta, float* dq_acc) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= int64_t(p.batch) * p.heads * p.seqlen_q) return;
  const T* o = static_cast<const T*>(p.o) + row * p.dim;
  const T* dout = static_cast<const T*>(p.dout) + row * p.dim;
  float d = 0.0f;
  for (int c = 0; c < p.dim; ++c) d += attn::to_float(dout[c]) * attn::to_float(o[c]);
  // Row i of the FP32 dQ, set to zero: the dkdv_kernel's atomics add to it.
  for (int c = 0; c < p.dim; ++c) dq_acc[row * p.dim + c] = 0.0f;
  delta[row] = d;
}

constexpr int Br = 16, Bc = 64, kThreads = 128;  // query rows a tile, keys a block, threads
// Shared rows of K, V, Q and dO are D + 8 elements long (step 4's padding): ldmatrix reads 16
// bytes from each of 8 consecutive rows, and rows 2 D + 16 bytes apart start in different banks.
constexpr int kPad = 8;

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
// keys, Q and dO of the query tile (rows D + kPad long) and dS of the tile's pairs; dK and dV are
// in the warps' registers.
template <typename T, int D>
__global__ void dkdv_kernel(const BackwardParams p, const float* delta, float* dq_acc) {
  constexpr int stride = D + kPad;  // a shared row of K, V, Q or dO
  const int tid = threadIdx.x, j0 = blockIdx.x * Bc;
  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const int group = p.heads / p.heads_kv;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int kw = 16 * warp;  // the warp's first key
  T* Ks = attn::shared_memory<T>();
  T *Vs = Ks + Bc * stride, *Qs = Vs + Bc * stride, *dOs = Qs + Br * stride;
  // After (2 Bc + 2 Br) shared rows of 16-bit values, the FP32 arrays:
  float* dS = reinterpret_cast<float*>(dOs + Br * stride);

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
      __syncthreads();  // the tile before is done with Qs, dOs and dS
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
          const int jj = kw + g + 8 * (e / 2), r = 8 * nt + 2 * t + e % 2, i = i0 + r, j = j0 + jj;
          pair_terms(p, delta, b, h, i, j, row0 + r, qk[nt][e], dov[nt][e], pz[nt][e], ds[nt][e]);
          dS[r * Bc + jj] = ds[nt][e];
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
      __syncthreads();  // dS is in shared memory for every thread
      // dQ += scale dS K: this block's term of each element of the tile's rows.
      for (int x = tid; x < Br * D; x += kThreads) {
        if (i0 + x / D >= p.seqlen_q) continue;
        float acc = 0.0f;
        for (int jj = 0; jj < Bc; ++jj)
          acc += dS[(x / D) * Bc + jj] * attn::to_float(Ks[jj * stride + x % D]);
        atomicAdd(&dq_acc[row0 * D + x], p.scale * acc);
      }
    }
  // dK and dV from the lane's own accumulators: the warp's 16 keys from j0 + kw.
  attn::store_tiles<T>(p.dk, kv0 + j0 + kw, dk, p.scale, p.seqlen_k - j0 - kw);
  attn::store_tiles<T>(p.dv, kv0 + j0 + kw, dv, 1.0f, p.seqlen_k - j0 - kw);
}

// One thread per element of dQ: the FP32 sum, rounded to the dtype once all its terms are in.
template <typename T>
__global__ void dq_kernel(const BackwardParams p, const float* dq_acc) {
  const int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (x >= int64_t(p.batch) * p.heads * p.seqlen_q * p.dim) return;
  static_cast<T*>(p.dq)[x] = attn::from_float<T>(dq_acc[x]);
}

void run(const attn::AttentionParams& forward, attn::RunContext& ctx) {
  const BackwardParams p = ctx.backward_params(forward);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  float* delta = ctx.scratch<float>("D", rows);
  float* dq_acc = ctx.scratch<float>("dQ (FP32)", rows * p.dim);
  const unsigned bhk = p.batch * p.heads_kv;
  ctx.tile = {Br, Bc, 1};  // a query tile, a block's keys, one buffer of them
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::launch(delta_kernel<T>, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 delta, dq_acc);
    attn::dispatch_head_dim(p.dim, [&]<int D>() {
      const size_t smem = (2 * Bc + 2 * Br) * (D + kPad) * sizeof(T) + Br * Bc * sizeof(float);
      attn::launch(dkdv_kernel<T, D>, {dim3((p.seqlen_k + Bc - 1) / Bc, bhk), dim3(kThreads), smem},
                   p, delta, dq_acc);
    });
    attn::launch(dq_kernel<T>, {dim3(static_cast<unsigned>((rows * p.dim + 255) / 256)), dim3(256)},
                 p, dq_acc);
  });
}

}  // namespace step6::rung6::ATTN_BACKEND_NS
