// The Eigen FP64 reference against a plain brute-force loop, on tiny cases with every feature.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "common/check.h"
#include "common/dropout.h"
#include "common/reference.h"

using attn::Problem;

namespace {

// Attention written as the formula reads, one output element at a time, in long double.
attn::Reference brute_force(const Problem& p, const attn::HostInputs& in) {
  attn::Reference r;
  r.o.assign(p.q_elements(), 0.0);
  r.lse.assign(p.lse_elements(), -std::numeric_limits<double>::infinity());
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  const int D = p.dim, Hkv = p.kv_heads();
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.query_length(b); ++i) {
        const int hk = h * Hkv / p.heads;
        std::vector<long double> s(p.seqlen_k, -INFINITY);
        long double mx = -INFINITY;
        for (int j = 0; j < p.seqlen_k; ++j) {
          const int len = p.key_length(b);
          const bool visible = j < len && (!p.causal || j <= i + (len - p.query_length(b)));
          if (!visible) continue;
          long double dot = 0;
          for (int d = 0; d < D; ++d)
            dot +=
                (long double)attn::from_bits(
                    in.q[((int64_t(b) * p.heads + h) * p.seqlen_q + i) * D + d], p.dtype) *
                attn::from_bits(in.k[((int64_t(b) * Hkv + hk) * p.seqlen_k + j) * D + d], p.dtype);
          s[j] = p.softmax_scale() * dot;
          mx = std::max(mx, s[j]);
        }
        const int64_t row = (int64_t(b) * p.heads + h) * p.seqlen_q + i;
        if (mx == -INFINITY) continue;
        long double l = 0;
        for (int j = 0; j < p.seqlen_k; ++j) l += std::exp(s[j] - mx);
        r.lse[row] = static_cast<double>(mx + std::log(l));
        for (int d = 0; d < D; ++d) {
          long double o = 0;
          for (int j = 0; j < p.seqlen_k; ++j)
            o += std::exp(s[j] - mx) / l * attn::dropout_factor(drop, b, h, i, j) *
                 attn::from_bits(in.v[((int64_t(b) * Hkv + hk) * p.seqlen_k + j) * D + d], p.dtype);
          r.o[row * D + d] = static_cast<double>(o);
        }
      }
  return r;
}

void compare(const Problem& p) {
  const attn::HostInputs in = attn::make_inputs(p);
  const attn::Reference ref = attn::reference_attention(p, in);
  const attn::Reference bf = brute_force(p, in);
  for (size_t x = 0; x < ref.o.size(); ++x) REQUIRE(ref.o[x] == Approx(bf.o[x]).margin(1e-12));
  for (size_t x = 0; x < ref.lse.size(); ++x) {
    if (std::isinf(bf.lse[x]))
      REQUIRE(ref.lse[x] == bf.lse[x]);
    else
      REQUIRE(ref.lse[x] == Approx(bf.lse[x]).epsilon(1e-12));
  }
}

Problem tiny() {
  Problem p;
  p.batch = 2;
  p.heads = 2;
  p.seqlen_q = 5;
  p.seqlen_k = 7;
  p.dim = 3;
  return p;
}

}  // namespace

TEST_CASE("reference matches brute force: plain, both dtypes", "[reference]") {
  Problem p = tiny();
  compare(p);
  p.dtype = attn::DType::bf16;
  compare(p);
}

TEST_CASE("reference matches brute force: causal with Sq < Sk and Sq > Sk", "[reference]") {
  Problem p = tiny();
  p.causal = true;
  compare(p);
  std::swap(p.seqlen_q, p.seqlen_k);
  compare(p);
}

TEST_CASE("reference matches brute force: per-batch key lengths, including 0", "[reference]") {
  Problem p = tiny();
  p.seqlens_k = {0, 4};
  compare(p);
  p.causal = true;
  compare(p);
}

TEST_CASE("reference matches brute force: per-batch query lengths, including 0", "[reference]") {
  Problem p = tiny();
  p.seqlens_q = {3, 0};
  compare(p);
  p.causal = true;  // aligned bottom-right at (3, 7) for batch 0
  compare(p);
  p.seqlens_k = {2, 7};  // batch 0: 3 queries, 2 keys: row 0 sees nothing
  p.seqlens_q = {3, 5};
  compare(p);
}

TEST_CASE("reference matches brute force across its row and key tiles", "[reference]") {
  // 64 query rows and 512 keys per tile: 130 rows and 1100 keys make partial tiles of both, and
  // the softmax of a row is combined across three key tiles (with dropout, causal, lengths).
  Problem p = tiny();
  p.seqlen_q = 130;
  p.seqlen_k = 1100;
  p.dim = 4;
  p.causal = true;
  p.dropout = 0.2f;
  p.seqlens_q = {130, 70};
  p.seqlens_k = {1100, 600};
  compare(p);
}

TEST_CASE("reference matches brute force: GQA, dropout, custom scale", "[reference]") {
  Problem p = tiny();
  p.heads = 4;
  p.heads_kv = 2;
  p.dropout = 0.3f;
  p.scale = 0.7f;
  p.seed = 99;
  compare(p);
}

TEST_CASE("reference: rows with no visible key give O = 0 and LSE = -inf", "[reference]") {
  Problem p = tiny();
  p.causal = true;
  p.seqlen_q = 6;
  p.seqlen_k = 2;  // rows 0..3 see nothing
  const attn::Reference ref = attn::reference_attention(p, attn::make_inputs(p));
  for (int i = 0; i < 4; ++i) {
    CHECK(ref.lse[i] == -std::numeric_limits<double>::infinity());
    for (int d = 0; d < p.dim; ++d) CHECK(ref.o[i * p.dim + d] == 0.0);
  }
  CHECK(std::isfinite(ref.lse[4]));
}

TEST_CASE("inputs are the ones Random123 drew: known answers", "[reference][inputs]") {
  // make_inputs drew with Random123's Philox4x32 and uneg11 until common/philox.h took their place
  // (so that the Python package builds without Random123). These elements were drawn by that code;
  // element 524289 and the last by its parallel loop (a tensor of 2^20 elements).
  struct Known {
    attn::DType dtype;
    size_t at;
    uint16_t q, k, v;
  };
  for (const Known& e : std::vector<Known>{{attn::DType::fp16, 0, 0x3910, 0x3c78, 0x31e2},
                                           {attn::DType::fp16, 1, 0xb23e, 0x3c51, 0x3dea},
                                           {attn::DType::fp16, 777, 0x3cf4, 0x3d07, 0x3bf3},
                                           {attn::DType::fp16, 524289, 0x3dc0, 0xb6f7, 0x3c57},
                                           {attn::DType::fp16, 1048575, 0x3c21, 0x3c55, 0x399c},
                                           {attn::DType::bf16, 0, 0x3f22, 0x3f8f, 0x3e3c},
                                           {attn::DType::bf16, 2, 0x3f1a, 0xbdc5, 0xbc86},
                                           {attn::DType::bf16, 524289, 0x3fb8, 0xbedf, 0x3f8b},
                                           {attn::DType::bf16, 1048575, 0x3f84, 0x3f8b, 0x3f34}}) {
    Problem p = tiny();
    p.batch = 1, p.heads = p.heads_kv = 2, p.seqlen_q = p.seqlen_k = 4096, p.dim = 128;
    p.dtype = e.dtype, p.seed = 20261127;
    const attn::HostInputs in = attn::make_inputs(p);
    INFO(attn::dtype_name(e.dtype) << " element " << e.at);
    CHECK(in.q.at(e.at) == e.q);
    CHECK(in.k.at(e.at) == e.k);
    CHECK(in.v.at(e.at) == e.v);
  }
}

TEST_CASE("inputs are seeded, rounded to the dtype, with a non-zero mean", "[reference][inputs]") {
  Problem p = tiny();
  p.seqlen_q = p.seqlen_k = 256;
  p.dim = 64;
  const attn::HostInputs a = attn::make_inputs(p), b = attn::make_inputs(p);
  CHECK(a.q == b.q);
  p.seed = 1;
  CHECK(attn::make_inputs(p).q != a.q);
  double mean = 0;
  for (auto x : a.k) mean += attn::from_bits(x, p.dtype);
  mean /= a.k.size();
  CHECK(mean == Approx(0.5).margin(0.02));
  // Q, K and V are independent streams.
  CHECK(a.k != a.v);
}

// ---- the backward pass (reference_backward) --------------------------------------------------

namespace {

// Every feature at once: GQA (4 query heads on 2 key/value heads), causal with Sq != Sk, per-batch
// lengths (a batch with a short key length and one with padding query rows), dropout, a scale.
Problem backward_problem() {
  Problem p;
  p.batch = 2, p.heads = 4, p.heads_kv = 2, p.seqlen_q = 6, p.seqlen_k = 9, p.dim = 5;
  p.causal = true, p.dropout = 0.3f, p.seed = 11, p.scale = 0.7f;
  p.seqlens_q = {6, 4};
  p.seqlens_k = {9, 5};
  return p;
}

std::vector<double> uniform(size_t n, uint64_t seed) {  // U(-1, 1), reproducible
  std::vector<double> x(n);
  uint64_t s = seed;
  for (double& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = double(s >> 11) / double(1ull << 53) * 2 - 1;
  }
  return x;
}

// L = sum(dO * O): its gradient with respect to Q, K and V is what the backward computes.
double loss(const Problem& p, const attn::Fp64Tensors& in, const std::vector<double>& dout) {
  const attn::ReferenceGrads g = attn::reference_backward(p, in, dout);
  double l = 0;
  for (size_t x = 0; x < dout.size(); ++x) l += dout[x] * g.o[x];
  return l;
}

}  // namespace

TEST_CASE("backward: dQ, dK and dV are the loss's gradient (central differences)",
          "[reference][backward]") {
  const Problem p = backward_problem();
  attn::Fp64Tensors in{uniform(p.q_elements(), 1), uniform(p.kv_elements(), 2),
                       uniform(p.kv_elements(), 3)};
  const std::vector<double> dout = uniform(p.q_elements(), 4);
  const attn::ReferenceGrads g = attn::reference_backward(p, in, dout);
  const double h = 1e-6;
  int nonzero = 0;
  for (auto [name, t, grad] :
       {std::tuple{"dQ", &in.q, &g.dq}, {"dK", &in.k, &g.dk}, {"dV", &in.v, &g.dv}}) {
    for (size_t x = 0; x < t->size(); ++x) {
      const double keep = (*t)[x];
      (*t)[x] = keep + h;
      const double up = loss(p, in, dout);
      (*t)[x] = keep - h;
      const double down = loss(p, in, dout);
      (*t)[x] = keep;
      INFO(name << "[" << x << "]");
      REQUIRE((*grad)[x] == Approx((up - down) / (2 * h)).margin(1e-8));
      nonzero += (*grad)[x] != 0;
    }
  }
  CHECK(nonzero > int(g.dq.size()));  // not a test that zeros would pass
}

TEST_CASE("backward: rowsum(dO * O) = rowsum(P * dP), and the forward is the reference's",
          "[reference][backward]") {
  Problem p = backward_problem();
  for (const attn::DType dtype : {attn::DType::fp16, attn::DType::bf16}) {
    p.dtype = dtype;
    const attn::HostInputs in = attn::make_inputs(p);
    const attn::ReferenceGrads g =
        attn::reference_backward(p, attn::widen(p, in), uniform(p.q_elements(), 5));
    int rows = 0;
    for (size_t r = 0; r < g.delta.size(); ++r) {
      REQUIRE(g.delta[r] == Approx(g.delta_p[r]).margin(1e-13));
      rows += g.delta[r] != 0;
    }
    CHECK(rows > 0);
    const attn::Reference f = attn::reference_attention(p, in);
    for (size_t x = 0; x < f.o.size(); ++x) REQUIRE(g.o[x] == Approx(f.o[x]).margin(1e-13));
    for (size_t r = 0; r < f.lse.size(); ++r) {
      if (std::isinf(f.lse[r])) {
        REQUIRE(g.lse[r] == f.lse[r]);
        continue;
      }
      REQUIRE(g.lse[r] == Approx(f.lse[r]).margin(1e-13));
    }
  }
}

TEST_CASE("backward: padding rows and keys get no gradient", "[reference][backward]") {
  const Problem p = backward_problem();
  const attn::Fp64Tensors in{uniform(p.q_elements(), 6), uniform(p.kv_elements(), 7),
                             uniform(p.kv_elements(), 8)};
  const attn::ReferenceGrads g = attn::reference_backward(p, in, uniform(p.q_elements(), 9));
  const int D = p.dim;
  for (int h = 0; h < p.heads; ++h)
    for (int i = p.seqlens_q[1]; i < p.seqlen_q; ++i)
      for (int d = 0; d < D; ++d)
        REQUIRE(g.dq[((int64_t(1) * p.heads + h) * p.seqlen_q + i) * D + d] == 0);
  for (int hk = 0; hk < p.kv_heads(); ++hk)
    for (int j = p.seqlens_k[1]; j < p.seqlen_k; ++j)
      for (int d = 0; d < D; ++d) {
        const int64_t x = ((int64_t(1) * p.kv_heads() + hk) * p.seqlen_k + j) * D + d;
        REQUIRE(g.dk[x] == 0);
        REQUIRE(g.dv[x] == 0);
      }
}

// ---- the backward's inputs and its gate (check_gradients) ---------------------------------------

namespace {

// A second backward, written as the formulas read, one (i, j) pair at a time in long double, with
// the bugs a backward kernel can have, one at a time: the gate must pass it clean and fail each.
enum class Bug { none, no_delta, no_scale, dropout_left_out_of_dp, first_head_of_group_only };

attn::Gradients brute_force_backward(const Problem& p, const attn::HostInputs& in,
                                     const std::vector<attn::Bits16>& dout, Bug bug) {
  const int D = p.dim, Hkv = p.kv_heads(), group = p.heads / Hkv;
  const long double scale = bug == Bug::no_scale ? 1 : p.softmax_scale();
  const attn::Dropout drop = attn::make_dropout(p.dropout, p.seed);
  auto at = [&](const std::vector<attn::Bits16>& t, int64_t row, int d) -> long double {
    return attn::from_bits(t[row * D + d], p.dtype);
  };
  std::vector<long double> dq(p.q_elements()), dk(p.kv_elements()), dv(p.kv_elements());
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seqlen_q; ++i) {
        const int hk = h / group, end = p.row_keys_end(b, i);
        const int64_t qrow = (int64_t(b) * p.heads + h) * p.seqlen_q + i;
        const int64_t kv0 = (int64_t(b) * Hkv + hk) * p.seqlen_k;
        std::vector<long double> s(end), dov(end);
        long double m = -INFINITY, l = 0, delta = 0;
        for (int j = 0; j < end; ++j) {
          long double qk = 0, dv_dot = 0;
          for (int d = 0; d < D; ++d) {
            qk += at(in.q, qrow, d) * at(in.k, kv0 + j, d);
            dv_dot += at(dout, qrow, d) * at(in.v, kv0 + j, d);
          }
          s[j] = p.softmax_scale() * qk, dov[j] = dv_dot;
          m = std::max(m, s[j]);
        }
        for (int j = 0; j < end; ++j) l += std::exp(s[j] - m);
        for (int j = 0; j < end; ++j)
          delta += std::exp(s[j] - m) / l * attn::dropout_factor(drop, b, h, i, j) * dov[j];
        for (int j = 0; j < end; ++j) {
          const long double P = std::exp(s[j] - m) / l, Z = attn::dropout_factor(drop, b, h, i, j);
          const long double dP = (bug == Bug::dropout_left_out_of_dp ? 1 : Z) * dov[j];
          const long double dS = P * (dP - (bug == Bug::no_delta ? 0 : delta));
          const bool counted = bug != Bug::first_head_of_group_only || h % group == 0;
          for (int d = 0; d < D; ++d) {
            dq[qrow * D + d] += scale * dS * at(in.k, kv0 + j, d);
            if (!counted) continue;
            dk[(kv0 + j) * D + d] += scale * dS * at(in.q, qrow, d);
            dv[(kv0 + j) * D + d] += P * Z * at(dout, qrow, d);
          }
        }
      }
  auto narrow = [&](const std::vector<long double>& x) {
    std::vector<attn::Bits16> out(x.size());
    for (size_t e = 0; e < x.size(); ++e) out[e] = attn::to_bits(float(x[e]), p.dtype);
    return out;
  };
  return {narrow(dq), narrow(dk), narrow(dv)};
}

}  // namespace

namespace {

// What the gate holds a backward to, for a problem: its inputs and dO, the FP64 gradients and the
// dtype computation (the yardstick).
struct GateCase {
  explicit GateCase(const Problem& p)
      : in(attn::make_inputs(p)),
        dout(attn::make_dout(p)),
        ref(attn::reference_backward(p, attn::widen(p, in), attn::widen(dout, p.dtype))),
        yard(attn::reference_backward_dtype(p, in, dout, attn::backward_inputs(p, dout, ref).o)) {}
  attn::HostInputs in;
  std::vector<attn::Bits16> dout;
  attn::ReferenceGrads ref;
  attn::Gradients yard;
};

}  // namespace

TEST_CASE("backward inputs: dO drawn on its own stream, O and LSE the forward's, rounded",
          "[reference][backward]") {
  Problem p = backward_problem();
  p.seqlen_q = 256;
  const attn::HostInputs in = attn::make_inputs(p);
  const std::vector<attn::Bits16> dout = attn::make_dout(p);
  CHECK(dout == attn::make_dout(p));
  CHECK(dout != in.q);
  double mean = 0, lo = 1, hi = -1;
  for (auto x : dout) {
    const double v = attn::from_bits(x, p.dtype);
    mean += v, lo = std::min(lo, v), hi = std::max(hi, v);
  }
  CHECK(mean / double(dout.size()) == Approx(0).margin(0.03));
  CHECK(lo >= -1);
  CHECK(hi <= 1);
  const attn::ReferenceGrads ref =
      attn::reference_backward(p, attn::widen(p, in), attn::widen(dout, p.dtype));
  const attn::BackwardInputs b = attn::backward_inputs(p, dout, ref);
  CHECK(b.dout == dout);
  for (size_t x = 0; x < b.o.size(); ++x)
    REQUIRE(b.o[x] == attn::to_bits(float(ref.o[x]), p.dtype));
  for (size_t r = 0; r < b.lse.size(); ++r) REQUIRE(b.lse[r] == float(ref.lse[r]));
}

TEST_CASE("the backward's gate: twice the dtype computation's error, which is near the truth",
          "[reference][backward]") {
  Problem p;
  p.batch = 1, p.heads = 4, p.heads_kv = 2, p.seqlen_q = 129, p.seqlen_k = 160, p.dim = 64;
  p.causal = true, p.dropout = 0.2f, p.seed = 5;
  for (const attn::DType dtype : {attn::DType::fp16, attn::DType::bf16}) {
    p.dtype = dtype;
    const GateCase g(p);
    const attn::ReferenceGrads& ref = g.ref;
    const attn::GradientCheck c = attn::check_gradients(p, g.yard, ref, g.yard);
    for (const auto& t : c.tensors) {
      double largest = 0;
      for (double g : t.name[1] == 'Q' ? ref.dq : t.name[1] == 'K' ? ref.dk : ref.dv)
        largest = std::max(largest, std::fabs(g));
      INFO(attn::dtype_name(dtype)
           << " " << t.name << ": dtype computation's error " << t.dtype_err << ", rounding "
           << t.rounding_err << ", largest gradient " << largest);
      CHECK(t.dtype_err > t.rounding_err);  // the yardstick, not the floor, sets the limit
      CHECK(t.dtype_err < 0.02 * largest);  // and it is a computation of the same gradient
      CHECK(t.limit == 2 * t.dtype_err);
    }
    CHECK(c.passed);
  }
}

TEST_CASE("the backward's gate passes exact gradients and fails each bug, NaN and poison",
          "[reference][backward]") {
  Problem p = backward_problem();
  p.dim = 16;
  for (const attn::DType dtype : {attn::DType::fp16, attn::DType::bf16}) {
    p.dtype = dtype;
    const GateCase g(p);
    const attn::HostInputs& in = g.in;
    const std::vector<attn::Bits16>& dout = g.dout;
    const attn::ReferenceGrads& ref = g.ref;
    const attn::Gradients& yard = g.yard;
    attn::Gradients exact = brute_force_backward(p, in, dout, Bug::none);
    const attn::GradientCheck clean = attn::check_gradients(p, exact, ref, yard);
    INFO(attn::dtype_name(dtype));
    CHECK(clean.passed);
    CHECK(clean.first_failure.empty());
    for (auto [bug, fails] : {std::pair{Bug::no_delta, "dQ"},
                              {Bug::no_scale, "dQ"},
                              {Bug::dropout_left_out_of_dp, "dQ"},
                              {Bug::first_head_of_group_only, "dK"}}) {
      const attn::GradientCheck c =
          attn::check_gradients(p, brute_force_backward(p, in, dout, bug), ref, yard);
      INFO(int(bug) << ": " << c.first_failure);
      CHECK_FALSE(c.passed);
      CHECK(c.first_failure.rfind(fails, 0) == 0);
    }
    attn::Gradients broken = exact;
    broken.dv[7] = attn::to_bits(NAN, dtype);
    attn::GradientCheck c = attn::check_gradients(p, broken, ref, yard);
    CHECK_FALSE(c.passed);
    CHECK(c.tensors[2].nonfinite == 1);
    CHECK(c.first_failure ==
          "dV: 0 elements never written (still the pre-launch poison) and 1 NaN "
          "or Inf (first: dV[b=0,h=0,j=0,d=7] = nan)");
    // An exact gradient past fp16's range: no limit holds, and the gate says so.
    if (dtype == attn::DType::fp16) {
      attn::ReferenceGrads huge = ref;
      huge.dv[3] = 1e6;
      const attn::GradientCheck h = attn::check_gradients(p, exact, huge, yard);
      CHECK_FALSE(h.passed);
      CHECK(h.first_failure.find("beyond fp16's range") != std::string::npos);
    }
    broken = exact;
    broken.dk.back() = 0xFFFF;
    c = attn::check_gradients(p, broken, ref, yard);
    CHECK_FALSE(c.passed);
    CHECK(c.tensors[1].unwritten == 1);
    CHECK(c.first_failure.find("dK: 1 elements never written") == 0);
  }
}
