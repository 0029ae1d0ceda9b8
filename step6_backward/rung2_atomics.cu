// Step 6, rung 2: dQ accumulated in FP32 with atomics, by the threads that compute dS.
//
//   delta_kernel   D_i = rowsum(dO_i * O_i), and row i of the FP32 dQ set to zero
//   scores_kernel  P_ij, Z_ij, dP_ij and dS_ij as in rung 1, and scale dS_ij K_j added to row i
//                  of the FP32 dQ with atomicAdd                     (one thread per (i, j))
//   dkdv_kernel    dK = scale dS^T Q,  dV = (P * Z)^T dO, as in rung 1
//   dq_kernel      dQ rounded to the dtype                            (one thread per element)
//
// dQ_i sums over every key j, and the thread of (i, j) already holds dS_ij and reads K_j: it adds
// its term where it stands, so dq_kernel no longer reads dS again, it only rounds. Many
// threads add to one element, so each addition is an atomicAdd, in FP32 (the accumulator), in
// whatever order the threads reach it: the bits of dQ change from run to run (the last rung
// orders them again).
#include "common/kernel.h"

namespace step6::rung2::ATTN_BACKEND_NS {

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
  // Row i of the FP32 dQ, set to zero: the scores_kernel's atomics add to it.
  for (int c = 0; c < p.dim; ++c) dq_acc[row * p.dim + c] = 0.0f;
  delta[row] = d;
}

// One thread per (i, j): the probability P_ij again, from the scores and the forward's LSE (no
// softmax to redo: LSE holds its maximum and sum), its dropout factor Z_ij, dP_ij and dS_ij, and
// its term of dQ_i. A masked pair, or a row that sees no key, has P = 0 and dS = 0.
template <typename T>
__global__ void scores_kernel(const BackwardParams p, const float* delta, float* Pz, float* dS,
                              float* dq_acc) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  if (i >= p.seqlen_q || j >= p.seqlen_k) return;

  const int64_t row = (int64_t(b) * p.heads + h) * p.seqlen_q + i;
  float pz = 0.0f, ds = 0.0f;
  if (j < attn::row_keys_end(p, b, i)) {
    const int64_t key = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k + j;
    const T* q = static_cast<const T*>(p.q) + row * p.dim;
    const T* dout = static_cast<const T*>(p.dout) + row * p.dim;
    const T* k = static_cast<const T*>(p.k) + key * p.dim;
    const T* v = static_cast<const T*>(p.v) + key * p.dim;
    float qk = 0.0f, dov = 0.0f;
    for (int c = 0; c < p.dim; ++c) {
      qk += attn::to_float(q[c]) * attn::to_float(k[c]);
      dov += attn::to_float(dout[c]) * attn::to_float(v[c]);
    }
    const float prob = __expf(p.scale * qk - p.lse[row]);
    const float z = attn::dropout_factor(attn::make_dropout(p.dropout, p.seed), b, h, i, j);
    pz = prob * z;
    ds = prob * (z * dov - delta[row]);
    for (int c = 0; c < p.dim; ++c)
      atomicAdd(&dq_acc[row * p.dim + c], p.scale * ds * attn::to_float(k[c]));
  }
  Pz[row * p.seqlen_k + j] = pz;
  dS[row * p.seqlen_k + j] = ds;
}

// One thread per (dK, dV)[b, hk, j, c]: dK_jc = scale * sum_i dS_ij Q_ic and dV_jc = sum_i
// (P * Z)_ij dO_ic, over every query row of every query head h that reads key/value head hk.
template <typename T>
__global__ void dkdv_kernel(const BackwardParams p, const float* Pz, const float* dS) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z / p.heads_kv, hk = blockIdx.z % p.heads_kv;
  if (j >= p.seqlen_k || c >= p.dim) return;

  const int group = p.heads / p.heads_kv;
  float dk = 0.0f, dv = 0.0f;
  // The batch's rows alone: those past its query length are padding, whose Q and dO are never
  // read (P * Z and dS are zero there, but a caller's NaN would survive the products).
  const int len_q = attn::query_length(p, b);
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q;
    for (int i = 0; i < len_q; ++i) {
      const int64_t at = (row0 + i) * p.seqlen_k + j;
      dk += dS[at] * attn::to_float(static_cast<const T*>(p.q)[(row0 + i) * p.dim + c]);
      dv += Pz[at] * attn::to_float(static_cast<const T*>(p.dout)[(row0 + i) * p.dim + c]);
    }
  }
  const int64_t key = (int64_t(b) * p.heads_kv + hk) * p.seqlen_k + j;
  static_cast<T*>(p.dk)[key * p.dim + c] = attn::from_float<T>(p.scale * dk);
  static_cast<T*>(p.dv)[key * p.dim + c] = attn::from_float<T>(dv);
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
  float* Pz = ctx.scratch<float>("P*Z", rows * p.seqlen_k);
  float* dS = ctx.scratch<float>("dS", rows * p.seqlen_k);
  float* dq_acc = ctx.scratch<float>("dQ (FP32)", rows * p.dim);
  const unsigned bh = p.batch * p.heads, bhk = p.batch * p.heads_kv;
  const dim3 block(32, 8);
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::launch(delta_kernel<T>, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 delta, dq_acc);
    attn::launch(scores_kernel<T>, {dim3((p.seqlen_k + 31) / 32, (p.seqlen_q + 7) / 8, bh), block},
                 p, delta, Pz, dS, dq_acc);
    attn::launch(dkdv_kernel<T>, {dim3((p.dim + 31) / 32, (p.seqlen_k + 7) / 8, bhk), block}, p, Pz,
                 dS);
    attn::launch(dq_kernel<T>, {dim3(static_cast<unsigned>((rows * p.dim + 255) / 256)), dim3(256)},
                 p, dq_acc);
  });
}

}  // namespace step6::rung2::ATTN_BACKEND_NS
