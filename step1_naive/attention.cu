// Step 1: attention as three plain kernels, one thread per output element.
//
//   scores_kernel   S = scale * Q K^T, masked to -inf       (FP32, [B, H, Sq, Sk] in global memory)
//   softmax_kernel  P = softmax(S) in place, and LSE        (one thread per row)
//   output_kernel   O = P V                                 (converted to the input dtype)
//
// S and P make a round trip through global memory: 2 * 4 * B * H * Sq * Sk bytes written and read
// back, which grows with L^2 and dominates everything else. Later steps remove that traffic.
#include "common/kernel.h"

namespace step1::ATTN_BACKEND_NS {

using attn::AttentionParams;

// One thread per score S[b, h, i, j]: threads along x walk keys, along y queries; z is (b, h).
template <typename T>
__global__ void scores_kernel(const AttentionParams p, float* S) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  if (i >= p.seqlen_q || j >= p.seqlen_k) return;

  const int64_t row = (int64_t(b) * p.heads + h) * p.seqlen_q + i;
  float s = -INFINITY;  // masked: padding (keys or queries), or a future key under the causal mask
  if (j < attn::row_keys_end(p, b, i)) {
    const T* q = static_cast<const T*>(p.q) + row * p.dim;
    const T* k = static_cast<const T*>(p.k) +
                 ((int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k + j) * p.dim;
    float dot = 0.0f;
    for (int d = 0; d < p.dim; ++d) dot += attn::to_float(q[d]) * attn::to_float(k[d]);
    s = p.scale * dot;
  }
  S[row * p.seqlen_k + j] = s;
}

// One thread per row of S: max, sum of exponentials, then P = exp(s - max) / sum in place.
// Dropout scales the normalised probabilities; LSE is of the softmax before dropout.
__global__ void softmax_kernel(const AttentionParams p, float* S) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= int64_t(p.batch) * p.heads * p.seqlen_q) return;
  const int i = row % p.seqlen_q;
  const int h = row / p.seqlen_q % p.heads;
  const int b = row / p.seqlen_q / p.heads;
  float* s = S + row * p.seqlen_k;

  float m = -INFINITY;
  for (int j = 0; j < p.seqlen_k; ++j) m = fmaxf(m, s[j]);
  if (m == -INFINITY) {  // no visible key: P = 0, so O = 0; LSE = -inf
    for (int j = 0; j < p.seqlen_k; ++j) s[j] = 0.0f;
    p.lse[row] = -INFINITY;
    return;
  }
  float l = 0.0f;
  for (int j = 0; j < p.seqlen_k; ++j) l += __expf(s[j] - m);
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  for (int j = 0; j < p.seqlen_k; ++j)
    s[j] = __expf(s[j] - m) / l * attn::dropout_factor(drop, b, h, i, j);
  p.lse[row] = m + logf(l);
}

// One thread per output element O[b, h, i, d] = sum_j P[b, h, i, j] V[b, kv_head(h), j, d], over
// the keys row i sees: past them P = 0, and V may be the caller's padding (0 * NaN is NaN).
template <typename T>
__global__ void output_kernel(const AttentionParams p, const float* P) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z / p.heads, h = blockIdx.z % p.heads;
  if (i >= p.seqlen_q || d >= p.dim) return;

  const int64_t row = (int64_t(b) * p.heads + h) * p.seqlen_q + i;
  const T* v = static_cast<const T*>(p.v) +
               (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * p.seqlen_k * p.dim + d;
  const float* pr = P + row * p.seqlen_k;
  const int end = attn::row_keys_end(p, b, i);
  float o = 0.0f;
  for (int j = 0; j < end; ++j) o += pr[j] * attn::to_float(v[int64_t(j) * p.dim]);
  static_cast<T*>(p.o)[row * p.dim + d] = attn::from_float<T>(o);
}

void run(const AttentionParams& p, attn::RunContext& ctx) {
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  float* S = ctx.scratch<float>("S/P", rows * p.seqlen_k);
  const unsigned bh = p.batch * p.heads;
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    const dim3 s_block(32, 8), o_block(32, 8);
    attn::launch(scores_kernel<T>,
                 {dim3((p.seqlen_k + 31) / 32, (p.seqlen_q + 7) / 8, bh), s_block}, p, S);
    attn::launch(softmax_kernel, {dim3(static_cast<unsigned>((rows + 127) / 128)), dim3(128)}, p,
                 S);
    attn::launch(output_kernel<T>, {dim3((p.dim + 31) / 32, (p.seqlen_q + 7) / 8, bh), o_block}, p,
                 static_cast<const float*>(S));
  });
}

}  // namespace step1::ATTN_BACKEND_NS
