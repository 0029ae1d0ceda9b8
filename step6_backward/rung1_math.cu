// Step 6, rung 1: attention's backward pass as four plain kernels, one thread per element they
// write.
//
//   delta_kernel   D_i = rowsum(dO_i * O_i)                          (one thread per query row)
//   scores_kernel  P_ij = exp(scale q_i.k_j - LSE_i), recomputed from the forward's LSE,
//                  dP_ij = Z_ij dO_i.v_j, dS_ij = P_ij (dP_ij - D_i)  (one thread per (i, j))
//   dq_kernel      dQ = scale dS K                                   (one thread per dQ element)
//   dkdv_kernel    dK = scale dS^T Q,  dV = (P * Z)^T dO, summed over the query heads of the
//                  key/value head's group                            (one thread per dK, dV pair)
//
// Z_ij is the dropout factor the forward used (0, or 1 / (1 - p)), drawn again from Philox. P * Z
// and dS are Sq x Sk FP32 matrices in global memory, written once and read back by the products:
// the traffic step 1 had, now twice. Later rungs keep them on chip.
#include "common/kernel.h"

namespace step6::rung1::ATTN_BACKEND_NS {

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

// One thread per (i, j): the probability P_ij again, from the scores and the forward's LSE (no
// softmax to redo: LSE holds its maximum and sum), its dropout factor Z_ij, dP_ij and dS_ij. A
// masked pair, or a row that sees no key, has P = 0 and dS = 0.
template <typename T>
__global__ void scores_kernel(const BackwardParams p, const float* delta, float* Pz, float* dS) {
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
  }
  Pz[row * p.seqlen_k + j] = pz;
  dS[row * p.seqlen_k + j] = ds;
}

// One thread per dQ[b, h, i, c] = scale * sum_j dS_ij K_jc, over the keys row i sees: past them
// dS = 0, and K may be the caller's padding (0 * NaN is NaN).
template <typename T>
__global__ void dq_kernel(const BackwardParams p, const float* dS) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  if (i >= p.seqlen_q || c >= p.dim) return;

  const int64_t row = (int64_t(b) * p.heads + h) * p.seqlen_q + i;
  const T* k = static_cast<const T*>(p.k) +
               (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k * p.dim + c;
  const float* ds = dS + row * p.seqlen_k;
  const int end = attn::row_keys_end(p, b, i);
  float acc = 0.0f;
  for (int j = 0; j < end; ++j) acc += ds[j] * attn::to_float(k[int64_t(j) * p.dim]);
  static_cast<T*>(p.dq)[row * p.dim + c] = attn::from_float<T>(p.scale * acc);
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

void run(const attn::AttentionParams& forward, attn::RunContext& ctx) {
  const BackwardParams p = ctx.backward_params(forward);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  float* delta = ctx.scratch<float>("D", rows);
  float* Pz = ctx.scratch<float>("P*Z", rows * p.seqlen_k);
  float* dS = ctx.scratch<float>("dS", rows * p.seqlen_k);
  const unsigned bh = p.batch * p.heads, bhk = p.batch * p.heads_kv;
  const dim3 block(32, 8);
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    attn::launch(delta_kernel<T>, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 delta);
    attn::launch(scores_kernel<T>, {dim3((p.seqlen_k + 31) / 32, (p.seqlen_q + 7) / 8, bh), block},
                 p, delta, Pz, dS);
    attn::launch(dq_kernel<T>, {dim3((p.dim + 31) / 32, (p.seqlen_q + 7) / 8, bh), block}, p, dS);
    attn::launch(dkdv_kernel<T>, {dim3((p.dim + 31) / 32, (p.seqlen_k + 7) / 8, bhk), block}, p, Pz,
                 dS);
  });
}

}  // namespace step6::rung1::ATTN_BACKEND_NS
