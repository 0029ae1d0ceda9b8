// The online-softmax state: the invariant, merge, -inf handling and overflow safety.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/online_softmax.h"

namespace os = online_softmax;

namespace {

// Streams `s` in blocks of `block` and returns the state.
os::State<double> stream(const std::vector<double>& s, size_t block) {
  auto st = os::init<double>();
  for (size_t j0 = 0; j0 < s.size(); j0 += block) {
    double mx = -INFINITY;
    for (size_t j = j0; j < std::min(s.size(), j0 + block); ++j) mx = std::max(mx, s[j]);
    os::rescale_to(st, mx);
    for (size_t j = j0; j < std::min(s.size(), j0 + block); ++j) st.l += os::prob(st, s[j]);
  }
  return st;
}

double direct_lse(const std::vector<double>& s) {
  double mx = -INFINITY, l = 0;
  for (double x : s) mx = std::max(mx, x);
  for (double x : s) l += std::exp(x - mx);
  return mx + std::log(l);
}

}  // namespace

TEST_CASE("streaming gives the softmax normaliser for any block size", "[online_softmax]") {
  std::mt19937 rng(1);
  std::normal_distribution<double> n(3.0, 4.0);
  std::vector<double> s(300);
  for (double& x : s) x = n(rng);
  for (size_t block : {1, 7, 64, 300}) {
    INFO("block " << block);
    CHECK(os::lse(stream(s, block)) == Approx(direct_lse(s)).epsilon(1e-13));
  }
}

TEST_CASE("the accumulator rescale keeps acc / l equal to softmax . v", "[online_softmax]") {
  const std::vector<double> s = {0.5, 3.0, -1.0, 10.0, 2.0};
  const std::vector<double> v = {1.0, 2.0, 3.0, 4.0, 5.0};
  auto st = os::init<double>();
  double acc = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    acc *= os::rescale_to(st, s[j]);
    const double p = os::prob(st, s[j]);
    st.l += p;
    acc += p * v[j];
    // After every key: acc / l = sum softmax(s_0..j) v.
    double num = 0, den = 0;
    for (size_t k = 0; k <= j; ++k) num += std::exp(s[k]) * v[k], den += std::exp(s[k]);
    CHECK(acc * os::inv_sum(st) == Approx(num / den).epsilon(1e-14));
  }
}

TEST_CASE("merge is order independent within rounding", "[online_softmax]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  std::vector<os::State<float>> parts;
  for (int k = 0; k < 8; ++k) {
    auto st = os::init<float>();
    const float mx = u(rng);
    os::rescale_to(st, mx);
    st.l = 1.0f + 3.0f * (k % 3);
    parts.push_back(st);
  }
  parts.push_back(os::init<float>());  // an empty partial state merges as the identity
  float a, b;
  auto fold = [&](auto begin, auto end) {
    auto acc = os::init<float>();
    for (auto it = begin; it != end; ++it) acc = os::merge(acc, *it, a, b);
    return acc;
  };
  const auto fwd = fold(parts.begin(), parts.end());
  const auto rev = fold(parts.rbegin(), parts.rend());
  CHECK(fwd.m == rev.m);
  CHECK(os::lse(fwd) == Approx(os::lse(rev)).epsilon(1e-6));
}

// Split-KV (step 5's rung 5.10): a row's keys in parts, each part's output normalised by its own
// sum and kept with its LSE alone; the parts merged by their LSEs give the whole row's LSE and
// output, with parts that saw no key (LSE = -inf) weighing nothing.
TEST_CASE("parts known by their LSE alone merge into the row", "[online_softmax]") {
  const std::vector<double> s = {0.5, 3.0, -1.0, 10.0, 2.0, -4.0, 7.5};
  const std::vector<double> v = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0};
  auto part = [&](size_t j0, size_t j1, double& o) {  // O and LSE of keys j0 .. j1 - 1
    const std::vector<double> sp(s.begin() + long(j0), s.begin() + long(j1));
    double num = 0, den = 0;
    for (size_t j = j0; j < j1; ++j) num += std::exp(s[j]) * v[j], den += std::exp(s[j]);
    o = j1 > j0 ? num / den : 0.0;
    return j1 > j0 ? direct_lse(sp) : -double(INFINITY);
  };
  const size_t bounds[][2] = {{0, 3}, {3, 3}, {3, 4}, {4, 7}};  // the second part sees no key
  auto all = os::init<double>();
  double lses[4], outs[4];
  for (int k = 0; k < 4; ++k) {
    lses[k] = part(bounds[k][0], bounds[k][1], outs[k]);
    all = os::merge_lse(all, lses[k]);
  }
  double o = 0, whole = 0;
  for (int k = 0; k < 4; ++k) o += os::exp_shifted(lses[k], all.m) * os::inv_sum(all) * outs[k];
  CHECK(os::lse(all) == Approx(part(0, s.size(), whole)).epsilon(1e-14));
  CHECK(o == Approx(whole).epsilon(1e-14));
  auto none = os::init<double>();  // no part saw a key: LSE = -inf, weights 0
  none = os::merge_lse(none, -double(INFINITY));
  CHECK(os::lse(none) == -INFINITY);
  CHECK(os::inv_sum(none) == 0.0);
}

TEST_CASE("a row with no visible key: O = 0 and LSE = -inf, never NaN", "[online_softmax]") {
  auto st = os::init<float>();
  const float alpha = os::rescale_to(st, -INFINITY);  // a block in which every score is masked
  CHECK(alpha == 1.0f);
  CHECK(os::prob(st, -INFINITY) == 0.0f);
  CHECK(st.l == 0.0f);
  CHECK(os::lse(st) == -std::numeric_limits<float>::infinity());
  CHECK(os::inv_sum(st) == 0.0f);
  float acc = 0.0f;
  CHECK(acc * os::inv_sum(st) == 0.0f);
}

TEST_CASE("masked scores inside a block contribute nothing", "[online_softmax]") {
  auto st = os::init<float>();
  os::rescale_to(st, 2.0f);
  CHECK(os::prob(st, -INFINITY) == 0.0f);
  st.l += os::prob(st, 2.0f);
  CHECK(os::lse(st) == Approx(2.0f));
}

TEST_CASE("large logits do not overflow", "[online_softmax]") {
  auto st = os::init<float>();
  for (float s : {1000.0f, 1000.5f, 999.0f, 88.0f, 3000.0f}) {
    const float alpha = os::rescale_to(st, s);
    CHECK(std::isfinite(alpha));
    st.l += os::prob(st, s);
  }
  CHECK(std::isfinite(st.l));
  CHECK(os::lse(st) == Approx(3000.0f));
  // exp(3000) overflows any float; the state never forms it.
}

TEST_CASE("the first visible block after masked ones starts cleanly", "[online_softmax]") {
  auto st = os::init<float>();
  CHECK(os::rescale_to(st, -INFINITY) == 1.0f);
  const float alpha = os::rescale_to(st, 5.0f);
  CHECK(alpha == 0.0f);  // nothing was accumulated: any value is fine, but never NaN
  st.l += os::prob(st, 5.0f);
  CHECK(st.l == 1.0f);
}

TEST_CASE("the base-2 form with the scale folded in matches the natural form", "[online_softmax]") {
  // Unscaled scores x, scale s (negative too: the kernel then flips the sign of q, i.e. of x).
  std::mt19937 rng(3);
  std::normal_distribution<double> n(2.0, 5.0);
  std::vector<double> x(200);
  for (double& v : x) v = n(rng);
  auto exp2 = [](double v) { return std::exp2(v); };
  for (double scale : {0.125, 1.0, -0.3}) {
    INFO("scale " << scale);
    const double c = os::scale_log2(scale);
    std::vector<double> s(x.size()), xs(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      xs[j] = scale < 0 ? -x[j] : x[j];  // what the kernel's max and FFMA see
      s[j] = scale * x[j];
    }
    auto st = os::init<double>();
    for (size_t j0 = 0; j0 < xs.size(); j0 += 8) {  // 200 = 25 blocks of 8
      double mx = -INFINITY;
      for (size_t j = j0; j < j0 + 8; ++j) mx = std::max(mx, xs[j]);
      os::rescale_to2(st, mx, c, exp2);
      const double off = os::neg_scaled_max(st, c);
      for (size_t j = j0; j < j0 + 8; ++j) st.l += os::prob2(xs[j], c, off, exp2);
    }
    CHECK(os::lse2(st, scale) == Approx(direct_lse(s)).epsilon(1e-13));
  }
}

TEST_CASE("the base-2 form keeps a row with no visible key at O = 0, LSE = -inf",
          "[online_softmax]") {
  auto exp2 = [](float v) { return std::exp2(v); };
  auto st = os::init<float>();
  const float c = os::scale_log2(0.5f);
  const float alpha = os::rescale_to2(st, -INFINITY, c, exp2);  // a fully masked block
  const float off = os::neg_scaled_max(st, c);
  const float p = os::prob2(-INFINITY, c, off, exp2);
  CHECK(alpha == 0.0f);  // multiplies an accumulator that is 0 anyway
  CHECK(p == 0.0f);
  CHECK(std::isinf(os::lse2(st, 0.5f)));
  CHECK(os::inv_sum(st) == 0.0f);
}
