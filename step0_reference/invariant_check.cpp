// Step 0's check of the online-softmax invariant (streaming.h): an independent account of the keys
// a row has seen, in double, against which streaming.cpp's state is compared after every block.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "step0_reference/streaming.h"

namespace step0 {

void InvariantCheck::add(float s, double keep, const float* v) {
  const double e = std::exp(double(s) - M);
  L += e;
  for (size_t d = 0; d < U.size(); ++d) U[d] += e * keep * v[d];
  seen_max = std::max(seen_max, s);
}

void InvariantCheck::verify(const online_softmax::State<float>& st, const std::vector<float>& acc,
                            int b, int h, int i, int seen) const {
  std::ostringstream why;
  const double l_expected = L * std::exp(M - double(st.m));
  if (st.m != seen_max) {
    why << "m = " << st.m << " but the largest score seen is " << seen_max;
  } else if (!(std::fabs(st.l - l_expected) <= 1e-4 * l_expected)) {
    why << "l = " << st.l << " but sum_j exp(s_j - m) = " << l_expected;
  } else {
    for (size_t d = 0; d < U.size(); ++d) {
      const double got = acc[d] / st.l, want = U[d] / L;
      if (!(std::fabs(got - want) <= 1e-4 * (1 + std::fabs(want)))) {
        why << "acc[" << d << "] / l = " << got << " but softmax(seen) . V = " << want;
        break;
      }
    }
  }
  if (why.str().empty()) return;
  std::ostringstream os;
  os << "online-softmax invariant broken at b=" << b << " h=" << h << " i=" << i
     << " after keys [0, " << seen << "): " << why.str();
  throw std::runtime_error(os.str());
}

}  // namespace step0
