#include "common/reference.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "common/dropout.h"

namespace attn {

namespace {

using MatrixRM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

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

  Reference ref;
  ref.o.assign(p.q_elements(), 0.0);
  ref.lse.assign(p.lse_elements(), -inf);

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads; ++h) {
      const int hk = h / (p.heads / Hkv);
      const int len_k = p.key_length(b);
      const int64_t q_off = (int64_t(b) * p.heads + h) * Sq * D;
      const int64_t kv_off = (int64_t(b) * Hkv + hk) * Sk * D;
      const MatrixRM Q = load(in.q, q_off, Sq, D, p.dtype);
      const MatrixRM K = load(in.k, kv_off, Sk, D, p.dtype);
      const MatrixRM V = load(in.v, kv_off, Sk, D, p.dtype);

      // S = scale * Q K^T, then the mask: -inf where a key is padding or in the causal future.
      MatrixRM S = scale * (Q * K.transpose());
      for (int i = 0; i < Sq; ++i)
        for (int j = visible_keys_end(i, Sq, len_k, p.causal); j < Sk; ++j) S(i, j) = -inf;

      // P = softmax(S) row by row; LSE = log sum exp(S). Rows with no visible key keep P = 0.
      MatrixRM P = MatrixRM::Zero(Sq, Sk);
      for (int i = 0; i < Sq; ++i) {
        const double m = S.row(i).maxCoeff();
        if (m == -inf) continue;
        P.row(i) = (S.row(i).array() - m).exp().matrix();
        const double l = P.row(i).sum();
        P.row(i) /= l;
        ref.lse[(int64_t(b) * p.heads + h) * Sq + i] = m + std::log(l);
      }
      // Dropout acts on P after normalisation: the softmax (and LSE) see every key.
      if (drop.enabled)
        for (int i = 0; i < Sq; ++i)
          for (int j = 0; j < Sk; ++j) P(i, j) *= dropout_factor(drop, b, h, i, j);

      const MatrixRM O = P * V;
      for (int i = 0; i < Sq; ++i)
        for (int d = 0; d < D; ++d) ref.o[q_off + int64_t(i) * D + d] = O(i, d);
    }
  }
  return ref;
}

}  // namespace attn
