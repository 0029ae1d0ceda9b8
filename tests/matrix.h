// The test matrix every step passes (docs/architecture.md): dtypes fp16/bf16; head dims 64, 80,
// 96, 128; seqlens 1, 17, 129, 1000 (keys) and Sq != Sk; causal; per-batch key lengths (one of them
// 0); GQA; dropout; a custom scale; per-batch query lengths (one of them 0), causal ones aligned
// per batch. Each problem mixes several features; together they cover every feature in both dtypes
// and every head dim, with shapes that are not multiples of any tile.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/problem.h"

namespace attn_test {

inline attn::Problem make(int batch, int heads, int heads_kv, int sq, int sk, int dim,
                          attn::DType dtype, bool causal, std::vector<int> seqlens_k = {},
                          float dropout = 0.0f) {
  attn::Problem p;
  p.batch = batch;
  p.heads = heads;
  p.heads_kv = heads_kv;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.dim = dim;
  p.dtype = dtype;
  p.causal = causal;
  p.seqlens_k = std::move(seqlens_k);
  p.dropout = dropout;
  p.seed = static_cast<uint64_t>(sq * 131 + sk * 7 + dim);
  return p;
}

// p with per-batch query lengths (--seqlens-q).
inline attn::Problem with_seqlens_q(attn::Problem p, std::vector<int> seqlens_q) {
  p.seqlens_q = std::move(seqlens_q);
  return p;
}

// ATTN_MATRIX=full (CTest's label "full": `ctest -L full`) gives the long problems 1000 queries
// as well as 1000 keys, the matrix as it was before the test command had to fit in minutes.
inline bool full_matrix() {
  const char* env = std::getenv("ATTN_MATRIX");
  if (env == nullptr || std::string(env).empty()) return false;
  if (std::string(env) != "full")
    throw std::invalid_argument("ATTN_MATRIX=" + std::string(env) + ": expected full, or unset");
  return true;
}

inline std::vector<attn::Problem> matrix() {
  using attn::DType;
  const DType f16 = DType::fp16, b16 = DType::bf16;
  const bool full = full_matrix();
  std::vector<attn::Problem> m = {
      // Single query and single key.
      make(1, 2, 2, 1, 1, 64, f16, false),
      make(1, 2, 1, 1, 17, 80, b16, true),
      make(2, 2, 2, 17, 1, 96, f16, true),  // Sq > Sk causal: most rows see no key
      // Odd lengths, not multiples of any tile.
      make(1, 2, 2, 17, 17, 128, b16, false),
      make(2, 4, 2, 129, 129, 64, f16, true),             // GQA
      make(1, 2, 2, 129, 129, 80, b16, false, {}, 0.2f),  // dropout
      make(1, 3, 1, 129, 17, 96, f16, false),             // Sq != Sk, GQA 3:1
      make(1, 2, 2, 17, 129, 128, f16, true),             // causal, Sq < Sk (bottom-right)
      // Per-batch key lengths, including an empty batch.
      make(3, 2, 2, 33, 129, 64, b16, false, {129, 0, 50}),
      make(3, 2, 1, 65, 100, 96, f16, true, {100, 1, 0}, 0.1f),
      // Long: 1000 keys, each kernel's K/V ring wrapped at least twice, and 300 or 200 queries,
      // three blocks of the tallest tile (tests/test_steps.cpp holds both for every kernel).
      make(1, 2, 1, full ? 1000 : 300, 1000, 64, f16, true),
      make(1, 1, 1, full ? 1000 : 200, 1000, 128, b16, false, {}, 0.1f),
      make(2, 2, 2, 100, 1000, 80, f16, false, {1000, 999}),
      // Dropout 0.999: almost every key dropped, the kept ones scaled by 1000 (precision).
      make(1, 2, 1, 129, 129, 64, f16, false, {}, 0.999f),  // GQA
      make(1, 2, 1, 100, 200, 128, b16, true, {}, 0.999f),
  };
  // Per-batch query lengths: padding rows and whole padding tiles, an empty batch, causal masks
  // aligned to each batch's own lengths, and with key lengths too.
  m.push_back(with_seqlens_q(make(3, 2, 1, 65, 100, 64, f16, true, {100, 30, 0}), {65, 10, 40}));
  m.push_back(with_seqlens_q(make(2, 2, 1, 129, 129, 128, b16, false), {0, 77}));  // GQA
  m.push_back(with_seqlens_q(make(2, 3, 1, 150, 90, 96, f16, true, {}, 0.1f), {1, 149}));
  m.push_back(with_seqlens_q(make(1, 2, 2, 100, 40, 80, b16, true), {33}));
  // A scale of its own; 140 keys, three blocks of step 6's 64 at head dim 96 (test_steps.cpp).
  attn::Problem scaled = make(1, 2, 2, 40, 140, 96, b16, true);
  scaled.scale = 0.3f;
  m.push_back(scaled);
  // A negative scale: the largest score is the most negative q.k, and zero-filled keys past the
  // end of a partial tile would dominate if they were not masked.
  attn::Problem negative = make(1, 2, 1, 33, 70, 64, f16, false);  // GQA
  negative.scale = -0.2f;
  m.push_back(negative);
  return m;
}

}  // namespace attn_test
