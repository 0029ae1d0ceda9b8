// Step 6, rung 3: the pairs in tiles, their rows read once a block through shared memory.
//
//   delta_kernel   D_i = rowsum(dO_i * O_i), and row i of the FP32 dQ set to zero
//   scores_kernel  one block per tile of Br query rows x Bc keys of a head: the tile's rows of Q,
//                  dO, K and V into shared memory once, then P_ij, Z_ij, dP_ij, dS_ij and the
//                  dQ term of each pair, as in rung 2, read from there
//   dkdv_kernel    dK = scale dS^T Q,  dV = (P * Z)^T dO, as in rung 2
//   dq_kernel      dQ rounded to the dtype
//
// In rung 2 the thread of (i, j) read the D numbers of Q_i, dO_i, K_j and V_j from global memory:
// a row of K was read once per query row that sees it. A block now copies its tile's Br + Bc rows
// of each pair of tensors into shared memory and its Br x Bc threads' worth of pairs read them
// there (step 2's tiling, for the backward's scores). The copies are common/backward_tiles.h's.
#include "common/backward_tiles.h"

namespace step6::rung3::ATTN_BACKEND_NS {

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

constexpr int Br = 16, Bc = 16, kThreads = 128;  // query rows a tile, keys a tile, threads

// One block per tile of Br query rows x Bc keys of a query head. Shared memory: K and V of its
// keys, Q and dO of its rows. A masked pair, or a row that sees no key, has P = 0 and dS = 0.
template <typename T>
__global__ void scores_kernel(const BackwardParams p, const float* delta, float* Pz, float* dS,
                              float* dq_acc) {
  const int D = p.dim, stride = D;  // a head's dim; a shared row of K, V, Q or dO
  const int tid = threadIdx.x, j0 = blockIdx.x * Bc, i0 = blockIdx.y * Br;
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  T* Ks = attn::shared_memory<T>();
  T *Vs = Ks + Bc * stride, *Qs = Vs + Bc * stride, *dOs = Qs + Br * stride;

  const int64_t kv0 = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k;
  const int len_q = attn::query_length(p, b), len_k = attn::key_length(p, b);
  // Keys past the batch's key length, and rows past its query length, are zeros: their pairs are
  // masked, and a caller's NaN there would survive a product with P = 0.
  attn::load_rows(Ks, stride, p.k, kv0 + j0, Bc, len_k - j0, D);
  attn::load_rows(Vs, stride, p.v, kv0 + j0, Bc, len_k - j0, D);
  const int64_t row0 = (int64_t(b) * p.heads + h) * p.seqlen_q + i0;
  attn::load_rows(Qs, stride, p.q, row0, Br, len_q - i0, D);
  attn::load_rows(dOs, stride, p.dout, row0, Br, len_q - i0, D);
  __syncthreads();
  // Each (i, j) pair of the tile, as in rung 2, its rows read from shared memory.
  for (int x = tid; x < Br * Bc; x += kThreads) {
    const int r = x / Bc, i = i0 + r, j = j0 + x % Bc;
    const int64_t row = row0 + r;
    if (i >= p.seqlen_q || j >= p.seqlen_k) continue;
    float pz = 0.0f, ds = 0.0f;
    if (j < attn::row_keys_end(p, b, i)) {
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
      for (int c = 0; c < p.dim; ++c)
        atomicAdd(&dq_acc[row * p.dim + c], p.scale * ds * attn::to_float(k[c]));
    }
    Pz[row * p.seqlen_k + j] = pz;
    dS[row * p.seqlen_k + j] = ds;
  }
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
  ctx.tile = {Br, Bc, 1};  // a query tile, a tile's keys, one buffer of them
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    const size_t smem = (2 * Bc + 2 * Br) * p.dim * sizeof(T);
    attn::launch(delta_kernel<T>, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 delta, dq_acc);
    const dim3 tiles((p.seqlen_k + Bc - 1) / Bc, (p.seqlen_q + Br - 1) / Br, bh);
    attn::launch(scores_kernel<T>, {tiles, dim3(kThreads), smem}, p, delta, Pz, dS, dq_acc);
    attn::launch(dkdv_kernel<T>, {dim3((p.dim + 31) / 32, (p.seqlen_k + 7) / 8, bhk), block}, p, Pz,
                 dS);
    attn::launch(dq_kernel<T>, {dim3(static_cast<unsigned>((rows * p.dim + 255) / 256)), dim3(256)},
                 p, dq_acc);
  });
}

}  // namespace step6::rung3::ATTN_BACKEND_NS
