// The attention problem on the host: its definition, validation and FLOP count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/attention_params.h"

namespace attn {

constexpr int kMaxHeadDim = 256;

struct Problem {
  int batch = 1;
  int heads = 4;
  int heads_kv = 0;  // 0: same as heads (no GQA)
  int seqlen_q = 256;
  int seqlen_k = 256;
  int dim = 64;
  DType dtype = DType::fp16;
  bool causal = false;
  std::vector<int> seqlens_k;  // empty, or one key length per batch, each in [0, seqlen_k]
  std::vector<int> seqlens_q;  // empty, or one query length per batch, each in [0, seqlen_q]
  float dropout = 0.0f;
  uint64_t seed = 0;
  std::optional<float> scale;  // default 1/sqrt(dim)

  int kv_heads() const { return heads_kv == 0 ? heads : heads_kv; }
  float softmax_scale() const;
  int key_length(int b) const { return seqlens_k.empty() ? seqlen_k : seqlens_k[b]; }
  int query_length(int b) const { return seqlens_q.empty() ? seqlen_q : seqlens_q[b]; }
  // Keys row i of batch b sees (as attn::row_keys_end for the kernels).
  int row_keys_end(int b, int i) const {
    return i < query_length(b) ? visible_keys_end(i, query_length(b), key_length(b), causal) : 0;
  }
  int64_t q_elements() const;   // also O
  int64_t kv_elements() const;  // each of K and V
  int64_t lse_elements() const;
  // Number of (b, h, i, j) score elements that are not masked.
  int64_t visible_pairs() const;
  // 4 * dim * visible_pairs(): two multiply-adds per visible score (QK^T and PV).
  double flops() const;
  // The backward's: five matrix products to the forward's two (dV, dP, dQ, dK and S recomputed),
  // as FlashAttention counts them.
  double backward_flops() const { return 2.5 * flops(); }
  // "fp16 B=2 H=4/2 Sq=257 Sk=257 D=96 causal dropout=0.1": for logs and titles.
  std::string describe() const;
};

const char* dtype_name(DType t);
std::optional<DType> parse_dtype(const std::string& s);

// Returns an empty string when the problem is valid, otherwise a one-line reason naming the flag.
std::string validate(const Problem& p);

}  // namespace attn
