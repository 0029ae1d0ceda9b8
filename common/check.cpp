#include "common/check.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace attn {

Tolerance tolerance_for(DType t) {
  if (t == DType::fp16) return {1e-3, 1e-3, 1e-3};
  return {8e-3, 8e-3, 1e-3};
}

namespace {

std::string where(const Problem& p, int64_t row, int d) {
  const int i = static_cast<int>(row % p.seqlen_q);
  const int h = static_cast<int>(row / p.seqlen_q % p.heads);
  const int b = static_cast<int>(row / p.seqlen_q / p.heads);
  std::ostringstream os;
  os << "[b=" << b << ",h=" << h << ",i=" << i;
  if (d >= 0) os << ",d=" << d;
  os << "]";
  return os.str();
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

}  // namespace attn
