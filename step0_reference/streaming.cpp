// Step 0, part (b): attention computed the way every fused kernel will compute it, on the CPU.
//
// For each query row we walk the keys in blocks of Bc, keep the online-softmax state (m, l) and
// an unnormalised accumulator acc[D], and never hold more than one block of scores. Part (a), the
// Eigen FP64 reference (a tile of S at a time), is common/reference.cpp; the harness compares the
// two at the end. Here, on the checked run, we also verify after every block that the state
// equals the softmax over the keys seen so far (see README.md, "The invariant"), with the
// InvariantCheck of invariant_check.cpp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "step0_reference/streaming.h"

#include "common/dropout.h"
#include "common/tensors.h"

namespace step0 {

using attn::AttentionParams;

void streaming_attention(const AttentionParams& p, attn::RunContext& ctx) {
  const int Sq = p.seqlen_q, Sk = p.seqlen_k, D = p.dim;
  const bool verify = ctx.verify;
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  const auto* q_bits = static_cast<const attn::Bits16*>(p.q);
  const auto* k_bits = static_cast<const attn::Bits16*>(p.k);
  const auto* v_bits = static_cast<const attn::Bits16*>(p.v);
  auto* o_bits = static_cast<attn::Bits16*>(p.o);

  std::string error;
  // Progress for long runs (a terminal shows it): rows done, reported every 256 rows.
  const uint64_t total_rows = uint64_t(p.batch) * p.heads * Sq;
  std::atomic<uint64_t> rows_done{0};
  if (ctx.progress) ctx.progress(0, total_rows);
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads; ++h) {
      try {
        const int len_k = attn::key_length(p, b);
        const int64_t kv_off = (int64_t(b) * p.heads_kv + attn::kv_head(p, h)) * Sk * D;
        std::vector<float> K(int64_t(len_k) * D), V(int64_t(len_k) * D), q(D), acc(D), s(Bc);
        for (int64_t x = 0; x < int64_t(len_k) * D; ++x) {
          K[x] = attn::from_bits(k_bits[kv_off + x], p.dtype);
          V[x] = attn::from_bits(v_bits[kv_off + x], p.dtype);
        }
        for (int i = 0; i < Sq; ++i) {
          const int64_t row = (int64_t(b) * p.heads + h) * Sq + i;
          for (int d = 0; d < D; ++d) q[d] = attn::from_bits(q_bits[row * D + d], p.dtype);
          const int end = attn::row_keys_end(p, b, i);
          auto score = [&](int j) {
            float dot = 0;
            for (int d = 0; d < D; ++d) dot += q[d] * K[int64_t(j) * D + d];
            return p.scale * dot;
          };

          InvariantCheck check{-INFINITY, std::vector<double>(verify ? D : 0)};
          if (verify)
            for (int j = 0; j < end; ++j) check.M = std::max(check.M, double(score(j)));

          online_softmax::State<float> st = online_softmax::init<float>();
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int j0 = 0; j0 < end; j0 += Bc) {
            const int n = std::min(Bc, end - j0);
            float block_max = -INFINITY;
            for (int c = 0; c < n; ++c) block_max = std::max(block_max, s[c] = score(j0 + c));
            // Move the maximum, rescale what was accumulated under the old one, add the block.
            const float alpha = online_softmax::rescale_to(st, block_max);
            for (int d = 0; d < D; ++d) acc[d] *= alpha;
            for (int c = 0; c < n; ++c) {
              const float pr = online_softmax::prob(st, s[c]);
              const float keep = attn::dropout_factor(drop, b, h, i, j0 + c);
              st.l += pr;  // the softmax normalises over every key, dropped or not
              const float* v = &V[int64_t(j0 + c) * D];
              for (int d = 0; d < D; ++d) acc[d] += pr * keep * v[d];
              if (verify) check.add(s[c], keep, v);
            }
            if (verify) check.verify(st, acc, b, h, i, j0 + n);
          }
          const float inv_l = online_softmax::inv_sum(st);
          for (int d = 0; d < D; ++d) o_bits[row * D + d] = attn::to_bits(acc[d] * inv_l, p.dtype);
          p.lse[row] = online_softmax::lse(st);
          if (ctx.progress && (rows_done.fetch_add(1, std::memory_order_relaxed) + 1) % 256 == 0)
            ctx.progress(rows_done.load(std::memory_order_relaxed), total_rows);
        }
      } catch (const std::exception& e) {
#pragma omp critical
        if (error.empty()) error = e.what();
      }
    }
  }
  if (!error.empty()) throw std::runtime_error(error);
}

}  // namespace step0
