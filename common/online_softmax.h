// The online softmax: the invariant this project teaches, in one place for step0 and every fused
// kernel.
//
// For one query row with scores s_1..s_t seen so far, the state holds
//     m = max_{j<=t} s_j
//     l = sum_{j<=t} exp(s_j - m)
// and the caller keeps the unnormalised accumulator
//     acc = sum_{j<=t} exp(s_j - m) * v_j.
// Then softmax(s_1..s_t) . V_1..t = acc / l, at every t, not only at the end.
//
// A new block of scores moves the maximum to m' >= m. Every term stored so far was scaled by
// exp(-m); rescaling by alpha = exp(m - m') turns it into exp(-m'):
//     l'   = alpha * l   + sum_{new j} exp(s_j - m')
//     acc' = alpha * acc + sum_{new j} exp(s_j - m') * v_j.
// Masked scores are -inf. While every score seen is -inf, m = -inf and exp(-inf - -inf) would be
// NaN, so the functions below treat "no visible key yet" explicitly: alpha = 1, p = 0.
//
// Usage for one block (the same in step0 and in the kernels):
//     float alpha = online_softmax::rescale_to(state, block_max);   // m <- max(m, block_max)
//     acc *= alpha;
//     for j in block: p = online_softmax::prob(state, s_j); state.l += p; acc += p * v_j;
//     ...
//     lse = online_softmax::lse(state); out = acc * online_softmax::inv_sum(state);
#pragma once

#include <cmath>

#include "common/hd.h"

namespace online_softmax {

// -inf as T; INFINITY (unlike std::numeric_limits) is usable in device code.
template <typename T>
ATTN_HD T neg_inf() {
  return static_cast<T>(-INFINITY);
}

template <typename T>
struct State {
  T m;  // running maximum of the scores seen so far (-inf: none visible yet)
  T l;  // running sum of exp(s_j - m)
};

template <typename T>
ATTN_HD State<T> init() {
  return {neg_inf<T>(), T(0)};
}

template <typename T>
ATTN_HD T exp_(T x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);
#else
  return std::exp(x);
#endif
}
template <>
ATTN_HD float exp_<float>(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return std::exp(x);
#endif
}

// exp(x - m), with the convention that a row with no visible score (m = -inf) contributes 0.
template <typename T>
ATTN_HD T exp_shifted(T x, T m) {
  return m == neg_inf<T>() ? T(0) : exp_(x - m);
}

// Moves the running maximum to max(m, block_max), rescales l, and returns the factor alpha by
// which the caller must multiply its accumulator.
template <typename T>
ATTN_HD T rescale_to(State<T>& s, T block_max) {
  const T m_new = block_max > s.m ? block_max : s.m;
  const T alpha = exp_shifted(s.m, m_new);  // 0 when nothing was visible before
  s.m = m_new;
  s.l *= alpha;
  return m_new == neg_inf<T>() ? T(1) : alpha;
}

// Unnormalised probability of a score under the current maximum: exp(s - m).
template <typename T>
ATTN_HD T prob(const State<T>& s, T score) {
  return exp_shifted(score, s.m);
}

// Merges two partial states over disjoint key sets (for example two threads that each saw half a
// row). alpha_a and alpha_b rescale the two accumulators: acc = alpha_a * acc_a + alpha_b * acc_b.
template <typename T>
ATTN_HD State<T> merge(const State<T>& a, const State<T>& b, T& alpha_a, T& alpha_b) {
  const T m = a.m > b.m ? a.m : b.m;
  alpha_a = exp_shifted(a.m, m);
  alpha_b = exp_shifted(b.m, m);
  return {m, a.l * alpha_a + b.l * alpha_b};
}

// log(sum_j exp(s_j)) of the whole row, -inf for a row with no visible key.
template <typename T>
ATTN_HD T lse(const State<T>& s) {
  if (s.l == T(0)) return neg_inf<T>();
#if defined(__CUDA_ARCH__)
  return s.m + ::log(s.l);
#else
  return s.m + std::log(s.l);
#endif
}

// 1 / l, and 0 for a row with no visible key, so that acc * inv_sum = 0 (never NaN).
template <typename T>
ATTN_HD T inv_sum(const State<T>& s) {
  return s.l == T(0) ? T(0) : T(1) / s.l;
}

}  // namespace online_softmax
