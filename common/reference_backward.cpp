// The backward pass in FP64 (common/reference.h says what it computes). A block of query rows of
// one head at a time against every key its batch has: P, its dropout factors and dP for 64 rows,
// so that its memory grows with the key length alone, never with Sq * Sk. Each key/value head is
// one task (its dK and dV are written by that task only): the query heads of its group and their
// row blocks run in order inside it.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/dropout.h"
#include "common/memory.h"
#include "common/reference.h"

namespace attn {

namespace {

using MatrixRM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const MatrixRM>;
using Map = Eigen::Map<MatrixRM>;

constexpr int kRows = 64;
// B * H * Sq * Sk * D from which the key/value heads run on every core.
constexpr double kParallelWork = 1 << 26;

}  // namespace

std::vector<double> widen(const std::vector<Bits16>& t, DType dtype) {
  std::vector<double> out;
  host_resize(out, t.size(), "an FP64 copy of a 16-bit tensor");
  for (size_t x = 0; x < t.size(); ++x) out[x] = from_bits(t[x], dtype);
  return out;
}

Fp64Tensors widen(const Problem& p, const HostInputs& in) {
  return {widen(in.q, p.dtype), widen(in.k, p.dtype), widen(in.v, p.dtype)};
}

ReferenceGrads reference_backward(const Problem& p, const Fp64Tensors& in,
                                  const std::vector<double>& dout) {
  const int Sq = p.seqlen_q, Sk = p.seqlen_k, D = p.dim, Hkv = p.kv_heads();
  const int group = p.heads / Hkv;
  const double scale = p.softmax_scale();
  const double inf = std::numeric_limits<double>::infinity();
  const Dropout drop = make_dropout(p.dropout, p.seed);

  ReferenceGrads g;
  host_resize(g.dq, p.q_elements(), "the reference's dQ (FP64)");
  host_resize(g.dk, p.kv_elements(), "the reference's dK (FP64)");
  host_resize(g.dv, p.kv_elements(), "the reference's dV (FP64)");
  host_resize(g.o, p.q_elements(), "the reference's O (FP64)");
  host_resize(g.lse, p.lse_elements(), "the reference's LSE (FP64)");
  host_resize(g.delta, p.lse_elements(), "the reference's D (FP64)");
  host_resize(g.delta_p, p.lse_elements(), "the reference's rowsum(P * dP) (FP64)");
  std::fill(g.lse.begin(), g.lse.end(), -inf);

  const bool parallel = double(p.batch) * p.heads * Sq * Sk * D >= kParallelWork;
#pragma omp parallel for collapse(2) schedule(dynamic) if (parallel)
  for (int b = 0; b < p.batch; ++b) {
    for (int hk = 0; hk < Hkv; ++hk) {
      const int64_t kv_off = (int64_t(b) * Hkv + hk) * Sk * D;
      const ConstMap K(in.k.data() + kv_off, Sk, D), V(in.v.data() + kv_off, Sk, D);
      Map dK(g.dk.data() + kv_off, Sk, D), dV(g.dv.data() + kv_off, Sk, D);
      dK.setZero();
      dV.setZero();
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        for (int i0 = 0; i0 < Sq; i0 += kRows) {
          const int n = std::min(kRows, Sq - i0);
          const int64_t row0 = (int64_t(b) * p.heads + h) * Sq + i0;
          const ConstMap Q(in.q.data() + row0 * D, n, D), dO(dout.data() + row0 * D, n, D);
          MatrixRM P = scale * (Q * K.transpose());  // S, then the probabilities in place
          MatrixRM Z = MatrixRM::Zero(n, Sk);        // the dropout factors of the visible keys
          for (int r = 0; r < n; ++r) {
            const int end = p.row_keys_end(b, i0 + r);
            if (end == 0) {
              P.row(r).setZero();
              continue;
            }
            const double m = P.row(r).head(end).maxCoeff();
            P.row(r).head(end) = (P.row(r).head(end).array() - m).exp().matrix();
            P.row(r).tail(Sk - end).setZero();
            const double l = P.row(r).sum();
            P.row(r) /= l;
            g.lse[row0 + r] = m + std::log(l);
            for (int j = 0; j < end; ++j) Z(r, j) = dropout_factor(drop, b, h, i0 + r, j);
          }
          const MatrixRM Pd = P.cwiseProduct(Z);
          const MatrixRM O = Pd * V;
          const MatrixRM dP = (dO * V.transpose()).cwiseProduct(Z);
          const Eigen::VectorXd delta = dO.cwiseProduct(O).rowwise().sum();
          MatrixRM dS = P.cwiseProduct(dP);
          const Eigen::VectorXd delta_p = dS.rowwise().sum();
          dS -= P.cwiseProduct(delta.replicate(1, Sk));
          Map(g.o.data() + row0 * D, n, D) = O;
          Map(g.dq.data() + row0 * D, n, D).noalias() = scale * (dS * K);
          dK.noalias() += scale * (dS.transpose() * Q);
          dV.noalias() += Pd.transpose() * dO;
          for (int r = 0; r < n; ++r) {
            g.delta[row0 + r] = delta[r];
            g.delta_p[row0 + r] = delta_p[r];
          }
        }
      }
    }
  }
  return g;
}

BackwardInputs backward_inputs(const Problem& p, std::vector<Bits16> dout,
                               const ReferenceGrads& ref) {
  BackwardInputs b;
  b.dout = std::move(dout);
  host_resize(b.o, p.q_elements(), "the forward's O (host)");
  host_resize(b.lse, p.lse_elements(), "the forward's LSE (host)");
  for (size_t x = 0; x < b.o.size(); ++x) b.o[x] = to_bits(float(ref.o[x]), p.dtype);
  for (size_t x = 0; x < b.lse.size(); ++x) b.lse[x] = float(ref.lse[x]);
  return b;
}

}  // namespace attn
