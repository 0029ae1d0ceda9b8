// Dropout on the attention probabilities with a counter-based generator, so that the reference
// and every kernel drop exactly the same elements without sharing any state.
//
// Philox4x32-10 (Random123) is keyed by the 64-bit seed; its 128-bit counter is
// (j / 4, i, h, b) and element (b, h, i, j) uses output word j % 4. One Philox call thus serves
// four neighbouring keys. An element is kept when its 32-bit word is >= threshold, where
// threshold = round(p * 2^32), and a kept element is scaled by 1 / (1 - p).
#pragma once

#include <cstdint>

#include "common/hd.h"

#if defined(__CUDACC__)
// Random123's nvcc support marks its functions __device__ only; we call them from host code too.
#define R123_CUDA_DEVICE __host__ __device__
#endif
// Philox4x32 needs none of Random123's SSE types, whose intrinsics headers would add about half
// a second to every compile that includes this file.
#ifndef R123_USE_SSE
#define R123_USE_SSE 0
#endif
#include <Random123/philox.h>

namespace attn {

struct Dropout {
  uint32_t threshold;  // keep iff random word >= threshold
  float scale;         // 1 / (1 - p)
  uint64_t seed;
  bool enabled;
};

ATTN_HD Dropout make_dropout(float p, uint64_t seed) {
  Dropout d{};
  d.enabled = p > 0.0f;
  const double t = static_cast<double>(p) * 4294967296.0;
  d.threshold = t >= 4294967295.0 ? 0xffffffffu : static_cast<uint32_t>(t + 0.5);
  d.scale = d.enabled ? 1.0f / (1.0f - p) : 1.0f;
  d.seed = seed;
  return d;
}

// The four Philox words for keys 4*(j/4) .. 4*(j/4)+3 of row (b, h, i).
ATTN_HD r123::Philox4x32::ctr_type dropout_words(uint64_t seed, int b, int h, int i, int j) {
  r123::Philox4x32 rng;
  r123::Philox4x32::ctr_type ctr = {{static_cast<uint32_t>(j) >> 2, static_cast<uint32_t>(i),
                                     static_cast<uint32_t>(h), static_cast<uint32_t>(b)}};
  r123::Philox4x32::key_type key = {
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  return rng(ctr, key);
}

ATTN_HD bool dropout_keep(const Dropout& d, int b, int h, int i, int j) {
  if (!d.enabled) return true;
  const r123::Philox4x32::ctr_type w = dropout_words(d.seed, b, h, i, j);
  // Select word j % 4 without indexing the array at run time (which would put it in local memory).
  const uint32_t x = (j & 2) ? ((j & 1) ? w[3] : w[2]) : ((j & 1) ? w[1] : w[0]);
  return x >= d.threshold;
}

// dropout_keep for the two keys j and j + 1 (j even) of row (b, h, i), from one Philox call.
ATTN_HD void dropout_keep_pair(const Dropout& d, int b, int h, int i, int j, bool& keep0,
                               bool& keep1) {
  const r123::Philox4x32::ctr_type w = dropout_words(d.seed, b, h, i, j);
  keep0 = ((j & 2) ? w[2] : w[0]) >= d.threshold;
  keep1 = ((j & 2) ? w[3] : w[1]) >= d.threshold;
}

// The factor element (b, h, i, j) of P is multiplied by: 0 if dropped, 1 / (1 - p) if kept.
ATTN_HD float dropout_factor(const Dropout& d, int b, int h, int i, int j) {
  return dropout_keep(d, b, h, i, j) ? d.scale : 0.0f;
}

}  // namespace attn
