// Dropout on the attention probabilities with a counter-based generator, so that the reference
// and every kernel drop exactly the same elements without sharing any state.
//
// Philox4x32-10 (common/philox.h, Random123's generator) is keyed by the 64-bit seed; its 128-bit
// counter is (j / 4, i, h, b) and element (b, h, i, j) uses output word j % 4. One Philox call
// thus serves four neighbouring keys. An element is kept when its 32-bit word is >= threshold,
// where threshold = round(p * 2^32), and a kept element is scaled by 1 / (1 - p).
#pragma once

#include <cstdint>

#include "common/hd.h"
#include "common/philox.h"

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
ATTN_HD PhiloxWords dropout_words(uint64_t seed, int b, int h, int i, int j) {
  return philox4x32_10({{static_cast<uint32_t>(j) >> 2, static_cast<uint32_t>(i),
                         static_cast<uint32_t>(h), static_cast<uint32_t>(b)}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

ATTN_HD bool dropout_keep(const Dropout& d, int b, int h, int i, int j) {
  if (!d.enabled) return true;
  const PhiloxWords w = dropout_words(d.seed, b, h, i, j);
  // Select word j % 4 without indexing the array at run time (which would put it in local memory).
  const uint32_t x = (j & 2) ? ((j & 1) ? w.v[3] : w.v[2]) : ((j & 1) ? w.v[1] : w.v[0]);
  return x >= d.threshold;
}

// dropout_keep for the two keys j and j + 1 (j even) of row (b, h, i), from one Philox call.
ATTN_HD void dropout_keep_pair(const Dropout& d, int b, int h, int i, int j, bool& keep0,
                               bool& keep1) {
  const PhiloxWords w = dropout_words(d.seed, b, h, i, j);
  keep0 = ((j & 2) ? w.v[2] : w.v[0]) >= d.threshold;
  keep1 = ((j & 2) ? w.v[3] : w.v[1]) >= d.threshold;
}

// The factor element (b, h, i, j) of P is multiplied by: 0 if dropped, 1 / (1 - p) if kept.
ATTN_HD float dropout_factor(const Dropout& d, int b, int h, int i, int j) {
  return dropout_keep(d, b, h, i, j) ? d.scale : 0.0f;
}

}  // namespace attn
