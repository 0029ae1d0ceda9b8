// Baseline: the unfused "GEMM + softmax" pipeline a fused kernel must beat, with cuBLAS doing the
// two products on tensor cores:
//
//   S = scale * Q K^T     cublasGemmStridedBatchedEx, FP16/BF16 in, FP32 out   [B, H, Sq, Sk]
//   P = softmax(mask(S))  softmax_kernel below, one warp per row, P in the input dtype, LSE
//   O = P V               cublasGemmStridedBatchedEx, FP16/BF16 in and out, FP32 accumulation
//
// GQA costs nothing extra: the query heads of one key/value head are contiguous rows of Q, so each
// GEMM is one batch entry per (batch, key/value head) with G * Sq rows.
//
// Row-major matrices are column-major transposes, so row-major S = Q K^T is computed as
// column-major S^T = K Q^T (op(K) = T), and O = P V as O^T = V^T P^T (no transposes).
// GPU only: there is no CPU version of cuBLAS.
#include "baselines/cublas_unfused.h"

#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "common/kernel.h"
#include "common/tiles.h"

namespace baseline_cublas {

using attn::AttentionParams;

template <typename T>
__global__ void softmax_kernel(const AttentionParams p, const float* S, T* P) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(p.batch) * p.heads * p.seqlen_q) return;
  const int i = row % p.seqlen_q;
  const int h = row / p.seqlen_q % p.heads;
  const int b = row / p.seqlen_q / p.heads;
  const float* s = S + row * p.seqlen_k;
  T* pr = P + row * p.seqlen_k;
  const int end = attn::visible_keys_end(i, p.seqlen_q, attn::key_length(p, b), p.causal);

  float m = -INFINITY;
  for (int j = lane; j < end; j += 32) m = fmaxf(m, s[j]);
  m = attn::row_max<32>(m);
  float l = 0.0f;
  for (int j = lane; j < end; j += 32) l += __expf(s[j] - m);
  l = attn::row_sum<32>(l);
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  for (int j = lane; j < p.seqlen_k; j += 32) {
    const float v = j < end ? __expf(s[j] - m) / l * attn::dropout_factor(drop, b, h, i, j) : 0.0f;
    pr[j] = attn::from_float<T>(v);
  }
  if (lane == 0) p.lse[row] = end > 0 ? m + logf(l) : -INFINITY;
}

namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error ") + std::to_string(int(status)) + " in " +
                             what);
}

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    check(cublasCreate(&created), "cublasCreate");
    return created;
  }();
  return h;
}

}  // namespace

void run(const AttentionParams& p, attn::RunContext& ctx) {
  const int G = p.heads / p.heads_kv;  // query heads per key/value head
  const int M = G * p.seqlen_q;        // rows of one GEMM
  const int batches = p.batch * p.heads_kv;
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen_q;
  float* S = ctx.scratch<float>("S", rows * p.seqlen_k);
  const cudaDataType_t type = p.dtype == attn::DType::fp16 ? CUDA_R_16F : CUDA_R_16BF;
  const float scale = p.scale, one = 1.0f, zero = 0.0f;

  check(cublasGemmStridedBatchedEx(
            handle(), CUBLAS_OP_T, CUBLAS_OP_N, p.seqlen_k, M, p.dim, &scale, p.k, type, p.dim,
            int64_t(p.seqlen_k) * p.dim, p.q, type, p.dim, int64_t(M) * p.dim, &zero, S, CUDA_R_32F,
            p.seqlen_k, int64_t(M) * p.seqlen_k, batches, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "S = Q K^T");
  attn::dispatch_dtype(p.dtype, [&]<typename T>() {
    T* P = ctx.scratch<T>("P", rows * p.seqlen_k);
    attn::launch(softmax_kernel<T>, {dim3(static_cast<unsigned>((rows + 3) / 4)), dim3(128)}, p,
                 static_cast<const float*>(S), P);
    check(cublasGemmStridedBatchedEx(
              handle(), CUBLAS_OP_N, CUBLAS_OP_N, p.dim, M, p.seqlen_k, &one, p.v, type, p.dim,
              int64_t(p.seqlen_k) * p.dim, P, type, p.seqlen_k, int64_t(M) * p.seqlen_k, &zero, p.o,
              type, p.dim, int64_t(M) * p.dim, batches, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "O = P V");
  });
}

}  // namespace baseline_cublas
