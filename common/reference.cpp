#include "common/reference.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/dropout.h"
#include "common/memory.h"

namespace attn {

namespace {

using MatrixRM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A tile of query rows, and of keys per step: the reference holds kRows x kKeys scores at a time
// per thread, so its memory does not grow with the sequence lengths (S itself can be tens of GB).
constexpr int kRows = 64;
constexpr int kKeys = 512;
// B * H * Sq * Sk * D from which the reference runs on every core.
constexpr double kParallelWork = 1 << 26;

// The [rows, dim] slice starting at `offset`, widened to double.
MatrixRM load(const std::vector<Bits16>& t, int64_t offset, int rows, int dim, DType dtype) {
  MatrixRM m(rows, dim);
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < dim; ++d) m(r, d) = from_bits(t[offset + int64_t(r) * dim + d], dtype);
  return m;
}

}  // namespace

Reference reference_attention(const Problem& p, const HostInputs& in) {
  const int Sq = p.seqlen_q, Sk = p.seqlen_k, D = p.dim, Hkv = p.kv_heads();
  const double scale = p.softmax_scale();
  const double inf = std::numeric_limits<double>::infinity();
  const Dropout drop = make_dropout(p.dropout, p.seed);
  const int row_tiles = (Sq + kRows - 1) / kRows;

  Reference ref;
  host_resize(ref.o, p.q_elements(), "the reference's O (FP64)");
  host_resize(ref.lse, p.lse_elements(), "the reference's LSE (FP64)");
  std::fill(ref.lse.begin(), ref.lse.end(), -inf);

  // Threads only where the work pays for them: after a parallel region libgomp's idle threads
  // spin for a while, taking a core from the emulator (and from a test running beside it).
  const bool parallel = double(p.batch) * p.heads * Sq * Sk * D >= kParallelWork;
#pragma omp parallel for collapse(3) schedule(dynamic) if (parallel)
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads; ++h) {
      for (int tile = 0; tile < row_tiles; ++tile) {
        const int i0 = tile * kRows, n = std::min(kRows, Sq - i0);
        const int hk = h / (p.heads / Hkv);
        const int64_t q_off = ((int64_t(b) * p.heads + h) * Sq + i0) * D;
        const int64_t kv_off = (int64_t(b) * Hkv + hk) * Sk * D;
        const MatrixRM Q = load(in.q, q_off, n, D, p.dtype);

        // Keys each row sees (the mask: padding of keys or queries, and the causal future).
        std::vector<int> end(n);
        int tile_end = 0;
        for (int r = 0; r < n; ++r)
          tile_end = std::max(tile_end, end[r] = p.row_keys_end(b, i0 + r));

        // The softmax over all visible keys, taken one block of keys at a time: m is the row's
        // maximum so far, l = sum exp(s - m), acc = sum exp(s - m) * keep * v. Rescaling by
        // exp(m_old - m_new) when m moves is exact in real arithmetic; in FP64 it costs a few ulp.
        Eigen::VectorXd m = Eigen::VectorXd::Constant(n, -inf), l = Eigen::VectorXd::Zero(n);
        MatrixRM acc = MatrixRM::Zero(n, D);
        for (int j0 = 0; j0 < tile_end; j0 += kKeys) {
          const int c = std::min(kKeys, tile_end - j0);
          const MatrixRM K = load(in.k, kv_off + int64_t(j0) * D, c, D, p.dtype);
          const MatrixRM V = load(in.v, kv_off + int64_t(j0) * D, c, D, p.dtype);
          MatrixRM P = scale * (Q * K.transpose());  // S, turned into exp(S - m) in place
          for (int r = 0; r < n; ++r) {
            const int visible = std::clamp(end[r] - j0, 0, c);
            if (visible == 0) {
              P.row(r).setZero();
              continue;
            }
            const double m_new = std::max(m[r], P.row(r).head(visible).maxCoeff());
            const double alpha = std::exp(m[r] - m_new);  // 0 when m was -inf
            P.row(r).head(visible) = (P.row(r).head(visible).array() - m_new).exp().matrix();
            P.row(r).tail(c - visible).setZero();
            l[r] = l[r] * alpha + P.row(r).sum();  // the softmax normalises over every key
            acc.row(r) *= alpha;
            m[r] = m_new;
            // Dropout acts on P after normalisation: the softmax (and LSE) see every key.
            if (drop.enabled)
              for (int j = 0; j < visible; ++j)
                P(r, j) *= dropout_factor(drop, b, h, i0 + r, j0 + j);
          }
          acc.noalias() += P * V;
        }
        for (int r = 0; r < n; ++r) {
          if (m[r] == -inf) continue;  // no visible key: O = 0, LSE = -inf
          ref.lse[(int64_t(b) * p.heads + h) * Sq + i0 + r] = m[r] + std::log(l[r]);
          for (int d = 0; d < D; ++d) ref.o[q_off + int64_t(r) * D + d] = acc(r, d) / l[r];
        }
      }
    }
  }
  return ref;
}

}  // namespace attn
