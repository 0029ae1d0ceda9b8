// The backward pass as PyTorch computes it in fp16 or bf16 (common/reference.h says why). The
// operations, in the order FlashAttention's `attention_ref(upcast=False, reorder_ops=True)` and
// autograd run them, each result rounded to the dtype (written [x]):
//   forward   Ks = [K * scale]   Vs = [V * r]  (r = 1 / (1 - dropout))   S = [Q Ks^T] (masked)
//             A = [softmax(S)]   Ad = A with the dropped elements zeroed
//   backward  dAd = [dO Vs^T]    dA = dAd with the dropped elements zeroed
//             dS = [A * (dA - D_i)]   D_i = rowsum(dO * O)     (softmax's backward, in FP32)
//             dQ = [dS Ks]       dK_h = [[dS^T Q] * scale]    dV_h = [[Ad^T dO] * r]
//             dK, dV = [the sum of dK_h, dV_h over the query heads h of a group]   (GQA)
// D_i is where this departs from PyTorch, whose softmax backward sums dA * A over the row: here it
// is the sum FlashAttention-2's backward takes, over the forward's O as the forward wrote it (in
// the dtype). Both equal rowsum(P * dP) exactly; with the 16-bit O, D_i carries O's rounding into
// every dS of its row, an error every FlashAttention-style backward has and PyTorch's has not.
// (With inputs of mean 0.5, as here, O is near 0.5 and that rounding moves dQ by a few parts in
// a hundred thousand, more than PyTorch's own error.) Products accumulate in FP32. Rows are taken
// 64 at a time (dS^T Q and Ad^T dO accumulate across them in FP32 before their rounding), so that
// memory grows with the key length alone.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "common/dropout.h"
#include "common/memory.h"
#include "common/reference.h"

namespace attn {

namespace {

using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int kRows = 64;
constexpr double kParallelWork = 1 << 26;  // as reference_backward.cpp

// x rounded to the dtype (round to nearest even), as a float.
MatrixF rounded(const MatrixF& x, DType t) {
  return x.unaryExpr([t](float v) { return from_bits(to_bits(v, t), t); });
}

MatrixF load(const std::vector<Bits16>& t, int64_t offset, int rows, int cols, DType dtype) {
  MatrixF m(rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) m(r, c) = from_bits(t[offset + int64_t(r) * cols + c], dtype);
  return m;
}

void store(const MatrixF& m, std::vector<Bits16>& t, int64_t offset, DType dtype) {
  for (int r = 0; r < m.rows(); ++r)
    for (int c = 0; c < m.cols(); ++c)
      t[offset + int64_t(r) * m.cols() + c] = to_bits(m(r, c), dtype);
}

}  // namespace

Gradients reference_backward_dtype(const Problem& p, const HostInputs& in,
                                   const std::vector<Bits16>& dout, const std::vector<Bits16>& o) {
  const int Sq = p.seqlen_q, Sk = p.seqlen_k, D = p.dim, Hkv = p.kv_heads();
  const int group = p.heads / Hkv;
  const DType t = p.dtype;
  const float scale = p.softmax_scale();
  const Dropout drop = make_dropout(p.dropout, p.seed);
  const float r = drop.scale;  // 1 / (1 - dropout), 1 without dropout

  Gradients g;
  host_resize(g.dq, p.q_elements(), "the dtype reference's dQ");
  host_resize(g.dk, p.kv_elements(), "the dtype reference's dK");
  host_resize(g.dv, p.kv_elements(), "the dtype reference's dV");

  const bool parallel = double(p.batch) * p.heads * Sq * Sk * D >= kParallelWork;
#pragma omp parallel for collapse(2) schedule(dynamic) if (parallel)
  for (int b = 0; b < p.batch; ++b) {
    for (int hk = 0; hk < Hkv; ++hk) {
      const int64_t kv_off = (int64_t(b) * Hkv + hk) * Sk * D;
      const MatrixF Ks = rounded(load(in.k, kv_off, Sk, D, t) * scale, t);
      const MatrixF Vs = rounded(load(in.v, kv_off, Sk, D, t) * r, t);
      MatrixF dK_group = MatrixF::Zero(Sk, D), dV_group = MatrixF::Zero(Sk, D);
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        MatrixF dKs = MatrixF::Zero(Sk, D), dVs = MatrixF::Zero(Sk, D);  // FP32 accumulators
        for (int i0 = 0; i0 < Sq; i0 += kRows) {
          const int n = std::min(kRows, Sq - i0);
          const int64_t row0 = (int64_t(b) * p.heads + h) * Sq + i0;
          const MatrixF Q = load(in.q, row0 * D, n, D, t), dO = load(dout, row0 * D, n, D, t);
          const Eigen::VectorXf delta = dO.cwiseProduct(load(o, row0 * D, n, D, t)).rowwise().sum();
          const MatrixF S = rounded(Q * Ks.transpose(), t);
          const MatrixF dAd = rounded(dO * Vs.transpose(), t);
          MatrixF A = MatrixF::Zero(n, Sk), Ad = MatrixF::Zero(n, Sk), dS = MatrixF::Zero(n, Sk);
          for (int x = 0; x < n; ++x) {
            const int end = p.row_keys_end(b, i0 + x);
            if (end == 0) continue;  // no visible key: A = 0, no gradient
            const float m = S.row(x).head(end).maxCoeff();
            float l = 0;
            for (int j = 0; j < end; ++j) l += std::exp(S(x, j) - m);
            for (int j = 0; j < end; ++j) {
              A(x, j) = from_bits(to_bits(std::exp(S(x, j) - m) / l, t), t);
              const bool keep = dropout_keep(drop, b, h, i0 + x, j);
              Ad(x, j) = keep ? A(x, j) : 0.0f;
              const float dA = keep ? dAd(x, j) : 0.0f;
              dS(x, j) = from_bits(to_bits(A(x, j) * (dA - delta[x]), t), t);
            }
          }
          store(rounded(dS * Ks, t), g.dq, row0 * D, t);
          dKs.noalias() += dS.transpose() * Q;
          dVs.noalias() += Ad.transpose() * dO;
        }
        dK_group += rounded(rounded(dKs, t) * scale, t);
        dV_group += rounded(rounded(dVs, t) * r, t);
      }
      store(dK_group, g.dk, kv_off, t);  // store rounds: the group's sum, rounded once
      store(dV_group, g.dv, kv_off, t);
    }
  }
  return g;
}

}  // namespace attn
