// Step 0, part (b): the streaming (online-softmax) attention on the CPU, and the check of its
// invariant. See streaming.cpp, invariant_check.cpp and README.md.
#pragma once

#include <cmath>
#include <vector>

#include "common/attention_params.h"
#include "common/backend.h"
#include "common/online_softmax.h"

namespace step0 {

constexpr int Bc = 64;  // keys per block, as a kernel's K/V tile

// Computes O and LSE for p by streaming over key blocks. On the checked run (ctx.verify) it
// verifies the online-softmax invariant after every block and throws if it is broken.
void streaming_attention(const attn::AttentionParams& p, attn::RunContext& ctx);

// An independent account of the keys seen so far, used only to check the invariant. It knows the
// row's true maximum M in advance (a streaming algorithm cannot), so it never rescales:
//     L = sum_j exp(s_j - M),   U = sum_j exp(s_j - M) * keep_j * v_j     (in double).
struct InvariantCheck {
  double M;               // the row's maximum visible score
  std::vector<double> U;  // D entries
  double L = 0;
  float seen_max = -INFINITY;

  void add(float s, double keep, const float* v);
  // Throws std::runtime_error naming (b, h, i) unless, after the keys [0, seen):
  //     m = max_j s_j,   l = sum_j exp(s_j - m),   acc / l = softmax(s_0..seen-1) . V.
  void verify(const online_softmax::State<float>& st, const std::vector<float>& acc, int b, int h,
              int i, int seen) const;
};

}  // namespace step0
