// Step 6, rung 5: S and dP on tensor cores (mma.sync and ldmatrix).
//
//   delta_kernel  D_i = rowsum(dO_i * O_i), and row i of the FP32 dQ set to zero
//   dkdv_kernel   as in rung 4, a block per Bc keys of a key/value head walking the query tiles,
//                 but the tile's S^T = K Q^T and dP^T = V dO^T come from mma.sync: each of the
//                 four warps owns 16 keys x 8 query rows of them, K and V rows as A fragments
//                 and Q and dO rows as B fragments, as K is in step 4; P * Z and dS go through
//                 shared memory to the CUDA cores' dV, dK and dQ as before
//   dq_kernel     dQ rounded to the dtype
//
// Transposed, the two products are step 4's S = Q K^T: the keys are the rows (M) of the mma and
// the query rows its columns (N), so the accumulator element a lane holds is the pair (key,
// row) that dV and dK sum over, and the kernel is instantiated per head dim (its fragments).
#include "common/backward_tiles.h"
#include "common/ptx.h"
#include "common/tiles.h"

namespace step6::rung5::ATTN_BACKEND_NS {

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

constexpr int Br = 16, Bc = 32, kThreads = 128;  // query rows a tile, keys a block, threads
// Shared rows of K, V, Q and dO are D + 8 elements long (step 4's padding): ldmatrix reads 16
// bytes from each of 8 consecutive rows, and rows 2 D + 16 bytes apart start in different banks.
constexpr int kPad = 8;

// One block per Bc keys of a key/value head. Shared memory: K and V of its keys, Q and dO of the
// query tile (rows D + kPad long), P * Z and dS of the tile's pairs, and the block's FP32 dK and
// dV.
template <typename T, int D>
__global__ void dkdv_kernel(const BackwardParams p, const float* delta, float* dq_acc) {
  constexpr int stride = D + kPad;  // a shared row of K, V, Q or dO
  const int tid = threadIdx.x, j0 = blockIdx.x * Bc;
  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const int group = p.heads / p.heads_kv;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int kw = 16 * (warp % 2), rw = 8 * (warp / 2);  // the warp's first key and query row
  T* Ks = attn::shared_memory<T>();
  T *Vs = Ks + Bc * stride, *Qs = Vs + Bc * stride, *dOs = Qs + Br * stride;
  // After (2 Bc + 2 Br) shared rows of 16-bit values, the FP32 arrays:
  float* Pz = reinterpret_cast<float*>(dOs + Br * stride);
  float *dS = Pz + Br * Bc, *dK = dS + Br * Bc, *dV = dK + Bc * D;

  const int64_t kv0 = (int64_t(b) * p.heads_kv + hk) * p.seqlen_k;
  const int len_q = attn::query_length(p, b), len_k = attn::key_length(p, b);
  // Keys past the batch's key length: zeros (its padding's NaN would survive P = 0, dS = 0).
  attn::load_rows<D>(Ks, stride, p.k, kv0 + j0, Bc, len_k - j0);
  attn::load_rows<D>(Vs, stride, p.v, kv0 + j0, Bc, len_k - j0);
  for (int x = tid; x < Bc * D; x += kThreads) dK[x] = dV[x] = 0.0f;
  for (int h = hk * group; h < (hk + 1) * group; ++h)
    for (int i0 = 0; i0 < p.seqlen_q; i0 += Br) {
      if (attn::tile_keys_end(p, b, i0, Br) <= j0) continue;  // no row of the tile sees a key
      const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
      __syncthreads();  // the tile before is done with Qs, dOs, Pz and dS
      // Rows past the batch's query length are zeros: their pairs are masked, and the products
      // multiply them by zero, which a caller's NaN there would survive.
      attn::load_rows<D>(Qs, stride, p.q, row0, Br, len_q - i0);
      attn::load_rows<D>(dOs, stride, p.dout, row0, Br, len_q - i0);
      __syncthreads();
      // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys x 8 rows, 16 columns of d at a
      // time: one ldmatrix.x4 of K (and of V) gives the A fragment, in the order a0a1 (keys
      // 0-7, d 0-7), a2a3 (keys 8-15), a4a5 (d 8-15), a6a7; Q and dO are stored [row][d], an
      // mma B operand as they are ("col"), one ldmatrix.x2 each (lanes 0-15 give the addresses).
      float qk[4] = {}, dov[4] = {};
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        uint32_t ka[4], va[4], qb[2], dob[2];
        const int key = kw + lane % 8 + 8 * (lane / 8 % 2), d = kc * 16 + 8 * (lane / 16);
        attn::ldmatrix<4>(ka, Ks + key * stride + d);
        attn::ldmatrix<4>(va, Vs + key * stride + d);
        const int r = rw + lane % 8, c = kc * 16 + 8 * (lane / 8 % 2);
        attn::ldmatrix<2>(qb, Qs + r * stride + c);
        attn::ldmatrix<2>(dob, dOs + r * stride + c);
        attn::mma_m16n8k16<T>(qk, ka, qb, qk);
        attn::mma_m16n8k16<T>(dov, va, dob, dov);
      }
      // Each pair the lane holds: element e is key kw + g + 8 (e / 2), row rw + 2t + e % 2.
      // P_ij from the LSE, Z_ij, dP_ij and dS_ij, as in rung 4.
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int jj = kw + g + 8 * (e / 2), r = rw + 2 * t + e % 2, i = i0 + r, j = j0 + jj;
        float pz = 0.0f, ds = 0.0f;
        if (i < p.seqlen_q && j < attn::row_keys_end(p, b, i)) {
          const float prob = __expf(p.scale * qk[e] - p.lse[row0 + r]);
          const float z = attn::dropout_factor(attn::make_dropout(p.dropout, p.seed), b, h, i, j);
          pz = prob * z;
          ds = prob * (z * dov[e] - delta[row0 + r]);
        }
        Pz[r * Bc + jj] = pz;
        dS[r * Bc + jj] = ds;
      }
      __syncthreads();
      // dV += (P * Z)^T dO and dK += dS^T Q: each thread its own elements, every tile.
      for (int x = tid; x < Bc * D; x += kThreads)
        for (int r = 0; r < Br; ++r) {
          dV[x] += Pz[r * Bc + x / D] * attn::to_float(dOs[r * stride + x % D]);
          dK[x] += dS[r * Bc + x / D] * attn::to_float(Qs[r * stride + x % D]);
        }
      // dQ += scale dS K: this block's term of each element of the tile's rows.
      for (int x = tid; x < Br * D; x += kThreads) {
        if (i0 + x / D >= p.seqlen_q) continue;
        float acc = 0.0f;
        for (int jj = 0; jj < Bc; ++jj)
          acc += dS[(x / D) * Bc + jj] * attn::to_float(Ks[jj * stride + x % D]);
        atomicAdd(&dq_acc[row0 * D + x], p.scale * acc);
      }
    }
  for (int x = tid; x < Bc * D; x += kThreads) {  // the thread's own elements: no barrier needed
    if (j0 + x / D >= p.seqlen_k) continue;
    static_cast<T*>(p.dk)[(kv0 + j0) * D + x] = attn::from_float<T>(p.scale * dK[x]);
    static_cast<T*>(p.dv)[(kv0 + j0) * D + x] = attn::from_float<T>(dV[x]);
  }
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
      const size_t smem =
          (2 * Bc + 2 * Br) * (D + kPad) * sizeof(T) + (2 * Br * Bc + 2 * Bc * D) * sizeof(float);
      attn::launch(dkdv_kernel<T, D>, {dim3((p.seqlen_k + Bc - 1) / Bc, bhk), dim3(kThreads), smem},
                   p, delta, dq_acc);
    });
    attn::launch(dq_kernel<T>, {dim3(static_cast<unsigned>((rows * p.dim + 255) / 256)), dim3(256)},
                 p, dq_acc);
  });
}

}  // namespace step6::rung5::ATTN_BACKEND_NS
