#include "common/check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace attn {

Tolerance tolerance_for(DType t) {
  if (t == DType::fp16) return {1e-3, 1e-3, 1e-3};
  return {8e-3, 8e-3, 1e-3};
}

namespace {

// "[b=0,h=1,i=3,d=2]": row `row` of a [B, heads, rows, ...] tensor (rows named `letter`: i for
// queries, j for keys), element d of it (none when d < 0).
std::string where(int heads, int rows, char letter, int64_t row, int d) {
  std::ostringstream os;
  os << "[b=" << row / rows / heads << ",h=" << row / rows % heads << "," << letter << "="
     << row % rows;
  if (d >= 0) os << ",d=" << d;
  os << "]";
  return os.str();
}

// A row of O or LSE.
std::string where(const Problem& p, int64_t row, int d) {
  return where(p.heads, p.seqlen_q, 'i', row, d);
}

}  // namespace

CheckResult check_outputs(const Problem& p, const std::vector<Bits16>& o,
                          const std::vector<float>& lse, const Reference& ref) {
  const Tolerance tol = tolerance_for(p.dtype);
  const Bits16 poison16 = static_cast<Bits16>(kPoisonByte | (kPoisonByte << 8));
  uint32_t poison32;
  std::memset(&poison32, kPoisonByte, sizeof poison32);

  CheckResult r;
  auto fail = [&](const std::string& msg) {
    r.passed = false;
    if (r.first_failure.empty()) r.first_failure = msg;
  };

  for (int64_t idx = 0; idx < p.q_elements(); ++idx) {
    const int64_t row = idx / p.dim;
    const int d = static_cast<int>(idx % p.dim);
    if (o[idx] == poison16) {
      ++r.unwritten, ++r.unwritten_o;
      fail("O" + where(p, row, d) + " was never written (still holds the pre-launch poison)");
      continue;
    }
    const double got = from_bits(o[idx], p.dtype), want = ref.o[idx];
    if (!std::isfinite(got) && r.nonfinite_o++ == 0) {
      std::ostringstream os;
      os << "O" << where(p, row, d) << " = " << got;
      if (r.first_nonfinite.empty()) r.first_nonfinite = os.str();
    }
    const double err = std::fabs(got - want);
    if (std::isfinite(got)) r.max_abs_err = std::max(r.max_abs_err, err);
    if (!(err <= tol.atol + tol.rtol * std::fabs(want))) {  // false for NaN
      ++r.bad_o;
      std::ostringstream os;
      os << "O" << where(p, row, d) << " = " << got << ", reference " << want << " (|err| " << err
         << " > " << tol.atol << " + " << tol.rtol << "*|ref|)";
      fail(os.str());
    }
  }

  for (int64_t row = 0; row < p.lse_elements(); ++row) {
    uint32_t bits;
    std::memcpy(&bits, &lse[row], sizeof bits);
    if (bits == poison32) {
      ++r.unwritten, ++r.unwritten_lse;
      fail("LSE" + where(p, row, -1) + " was never written (still holds the pre-launch poison)");
      continue;
    }
    const double got = lse[row], want = ref.lse[row];
    if ((std::isnan(got) || got == INFINITY || (std::isinf(got) && std::isfinite(want))) &&
        r.nonfinite_lse++ == 0) {
      std::ostringstream os;
      os << "LSE" << where(p, row, -1) << " = " << got;
      if (r.first_nonfinite.empty()) r.first_nonfinite = os.str();
    }
    bool ok;
    if (std::isinf(want)) {
      ok = got == want;
    } else {
      const double err = std::fabs(got - want);
      if (std::isfinite(got)) r.lse_max_err = std::max(r.lse_max_err, err);
      ok = err <= tol.lse_rtol * std::max(1.0, std::fabs(want));
    }
    if (!ok) {
      ++r.bad_lse;
      std::ostringstream os;
      os << "LSE" << where(p, row, -1) << " = " << got << ", reference " << want;
      fail(os.str());
    }
  }
  if (r.nonfinite_o + r.nonfinite_lse > 0) {
    // A NaN or Inf says more than any error size: it leads the report.
    std::ostringstream os;
    os << r.nonfinite_o << " O and " << r.nonfinite_lse
       << " LSE elements are NaN or Inf (first: " << r.first_nonfinite << ")";
    r.first_failure = os.str();
  }
  return r;
}

namespace {

// u: half the distance from 1 to the next value of the dtype (fp16 2^-11, bf16 2^-8).
double unit_roundoff(DType t) {
  return t == DType::fp16 ? 0x1p-11 : 0x1p-8;
}

}  // namespace

GradientCheck check_gradients(const Problem& p, const Gradients& got, const ReferenceGrads& ref,
                              const Gradients& dtype_ref) {
  const Bits16 poison16 = static_cast<Bits16>(kPoisonByte | (kPoisonByte << 8));
  GradientCheck c;
  const std::array<const std::vector<Bits16>*, 3> outs{&got.dq, &got.dk, &got.dv};
  const std::array<const std::vector<Bits16>*, 3> yard{&dtype_ref.dq, &dtype_ref.dk, &dtype_ref.dv};
  const std::array<const std::vector<double>*, 3> truth{&ref.dq, &ref.dk, &ref.dv};
  double largest = 0;  // the largest exact gradient of the three
  for (const std::vector<double>* t : truth)
    for (double g : *t) largest = std::max(largest, std::fabs(g));
  for (int x = 0; x < 3; ++x) {
    GradientCheck::Tensor& t = c.tensors[x];
    const int heads = x == 0 ? p.heads : p.kv_heads(), rows = x == 0 ? p.seqlen_q : p.seqlen_k;
    const char row = x == 0 ? 'i' : 'j';
    int64_t worst = -1, first_bad = -1;  // the largest error; the first NaN, Inf or poison
    for (size_t e = 0; e < truth[x]->size(); ++e) {
      const double want = (*truth[x])[e];
      t.rounding_err = std::max(
          t.rounding_err, std::fabs(from_bits(to_bits(float(want), p.dtype), p.dtype) - want));
      t.dtype_err = std::max(t.dtype_err, std::fabs(from_bits((*yard[x])[e], p.dtype) - want));
      if ((*outs[x])[e] == poison16) {
        if (t.unwritten++ == 0 && first_bad < 0) first_bad = int64_t(e);
        continue;
      }
      const double v = from_bits((*outs[x])[e], p.dtype), err = std::fabs(v - want);
      if (!std::isfinite(v)) {
        if (t.nonfinite++ == 0 && first_bad < 0) first_bad = int64_t(e);
        continue;
      }
      if (err > t.max_err || worst < 0) t.max_err = std::max(t.max_err, err), worst = int64_t(e);
    }
    t.limit = 2 * std::max(t.dtype_err, t.rounding_err);
    const bool all_zero =
        std::all_of(truth[x]->begin(), truth[x]->end(), [](double g) { return g == 0; });
    if (all_zero) t.limit = unit_roundoff(p.dtype) * largest;
    std::ostringstream os;
    if (!std::isfinite(t.limit)) {  // an exact gradient past the dtype's range: no gate holds
      os << t.name << ": the exact gradient reaches " << std::scientific
         << *std::max_element(truth[x]->begin(), truth[x]->end(),
                              [](double a, double b) { return std::fabs(a) < std::fabs(b); })
         << ", beyond " << dtype_name(p.dtype) << "'s range: it cannot be checked in this dtype";
      c.passed = false;
      if (c.first_failure.empty()) c.first_failure = os.str();
      continue;
    }
    if (t.unwritten + t.nonfinite > 0) {
      const int64_t e = first_bad;
      os << t.name << ": " << t.unwritten << " elements never written (still the pre-launch poison)"
         << " and " << t.nonfinite << " NaN or Inf (first: " << t.name
         << where(heads, rows, row, e / p.dim, int(e % p.dim)) << " = "
         << ((*outs[x])[e] == poison16 ? "poison"
                                       : std::to_string(from_bits((*outs[x])[e], p.dtype)))
         << ")";
    } else if (!(t.max_err <= t.limit)) {
      os << t.name << where(heads, rows, row, worst / p.dim, int(worst % p.dim)) << " = "
         << from_bits((*outs[x])[worst], p.dtype) << ", reference " << (*truth[x])[worst]
         << ": max |err| " << t.max_err << " > " << t.limit << " ("
         << (all_zero                        ? "the rounding of the largest gradient in "
             : t.dtype_err >= t.rounding_err ? "twice the error of the computation in "
                                             : "twice the rounding to ")
         << dtype_name(p.dtype) << ")";
    }
    if (!os.str().empty()) {
      c.passed = false;
      if (c.first_failure.empty()) c.first_failure = os.str();
    }
  }
  return c;
}

}  // namespace attn
