// Step 6, rung 4: a block owns a tile of keys, and keeps its dK and dV on chip.
//
//   delta_kernel  D_i = rowsum(dO_i * O_i), and row i of the FP32 dQ set to zero
//   dkdv_kernel   one block per Bc keys of a key/value head; it walks the query rows Br at a
//                 time, for every query head of the group, and per tile of rows computes
//                 P * Z and dS in shared memory, adds (P * Z)^T dO and dS^T Q to its dV and dK
//                 (FP32, in shared memory) and scale dS K to the rows' FP32 dQ (atomicAdd);
//                 it writes dK and dV once, at the end
//   dq_kernel     dQ rounded to the dtype
//
// Rung 3's scores_kernel and rung 2's dkdv_kernel become one kernel: P and dS never reach global
// memory, and a block's K and V are read once for every query row of the group instead of once
// per tile of rows: the structure of FlashAttention-2's backward, on CUDA cores (step 3's fusion,
// for the backward). dQ_i now collects one term per block whose keys row i sees, by atomicAdd,
// instead of one per key (its bits still vary).
#include "common/backward_tiles.h"

namespace step6::rung4::ATTN_BACKEND_NS {

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

constexpr int Br = 16, Bc = 16, kThreads = 128;  // query rows a tile, keys a block, threads

// One block per Bc keys of a key/value head. Shared memory: K and V of its keys, Q and dO of the
// query tile, P * Z and dS of the tile's pairs, and the block's FP32 dK and dV.
template <typename T>
__global__ void dkdv_kernel(const BackwardParams p, const float* delta, float* dq_acc) {
  const int D = p.dim, stride = D;  // a head's dim; a shared row of K, V, Q or dO
  const int tid = threadIdx.x, j0 = blockIdx.x * Bc;
  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const int group = p.heads / p.heads_kv;
  T* Ks = attn::shared_memory<T>();
  T *Vs = Ks + Bc * stride, *Qs = Vs + Bc * stride, *dOs = Qs + Br * stride;
  // After (2 Bc + 2 Br) shared rows of 16-bit values, the FP32 arrays:
  float* Pz = reinterpret_cast<float*>(dOs + Br * stride);
  float *dS = Pz + Br * Bc, *dK = dS + Br * Bc, *dV = dK + Bc * D;

  const int64_t kv0 = (int64_t(b) * p.heads_kv + hk) * p.seqlen_k;
  const int len_q = attn::query_length(p, b), len_k = attn::key_length(p, b);
  // Keys past the batch's key length are zeros: their pairs are masked, and the products multiply
  // them by zero, which a caller's NaN there would survive.
  attn::load_rows(Ks, stride, p.k, kv0 + j0, Bc, len_k - j0, D);
  attn::load_rows(Vs, stride, p.v, kv0 + j0, Bc, len_k - j0, D);
  for (int x = tid; x < Bc * D; x += kThreads) dK[x] = dV[x] = 0.0f;
  for (int h = hk * group; h < (hk + 1) * group; ++h)
    for (int i0 = 0; i0 < p.seqlen_q; i0 += Br) {
      if (attn::tile_keys_end(p, b, i0, Br) <= j0) continue;  // no row of the tile sees a key
      const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
      __syncthreads();  // the tile before is done with Qs, dOs, Pz and dS
      // Rows past the batch's query length are zeros: their pairs are masked, and the products
      // multiply them by zero, which a caller's NaN there would survive.
      attn::load_rows(Qs, stride, p.q, row0, Br, len_q - i0, D);
      attn::load_rows(dOs, stride, p.dout, row0, Br, len_q - i0, D);
      __syncthreads();
      // Each (i, j) pair of the tile: P_ij from the LSE, Z_ij, dP_ij and dS_ij, as in rung 3.
      for (int x = tid; x < Br * Bc; x += kThreads) {
        const int r = x / Bc, i = i0 + r, j = j0 + x % Bc;
        const int64_t row = row0 + r;
        float pz = 0.0f, ds = 0.0f;
        if (i < p.seqlen_q && j < attn::row_keys_end(p, b, i)) {
          // The pair's rows, in shared memory.
          const T *q = Qs + r * stride, *dout = dOs + r * stride;
          const T *k = Ks + (x % Bc) * stride, *v = Vs + (x % Bc) * stride;
          float qk = 0.0f, dov = 0.0f;
          for (int c = 0; c < p.dim; ++c) {
            qk += attn::to_float(q[c]) * attn::to_float(k[c]);
            dov += attn::to_float(dout[c]) * attn::to_float(v[c]);
          }
          const float prob = __expf(p.scale * qk - p.lse[row]);
          const float z = attn::dropout_factor(attn::make_dropout(p.dropout, p.seed), b, h, i, j);
          pz = prob * z;
          ds = prob * (z * dov - delta[row]);
        }
        Pz[x] = pz;
        dS[x] = ds;
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
    const size_t smem =
        (2 * Bc + 2 * Br) * p.dim * sizeof(T) + (2 * Br * Bc + 2 * Bc * p.dim) * sizeof(float);
    attn::launch(delta_kernel<T>, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 delta, dq_acc);
    attn::launch(dkdv_kernel<T>, {dim3((p.seqlen_k + Bc - 1) / Bc, bhk), dim3(kThreads), smem}, p,
                 delta, dq_acc);
    attn::launch(dq_kernel<T>, {dim3(static_cast<unsigned>((rows * p.dim + 255) / 256)), dim3(256)},
                 p, dq_acc);
  });
}

}  // namespace step6::rung4::ATTN_BACKEND_NS
