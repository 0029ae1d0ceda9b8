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

// Merges a partial result known by its log-sum-exp alone (a block that saw some of the row's keys
// and divided its output by their l): its state is (lse, 1), since exp(lse) = sum_j exp(s_j).
// That output's weight in the merged row is then exp_shifted(lse, merged.m) * inv_sum(merged).
template <typename T>
ATTN_HD State<T> merge_lse(const State<T>& a, T lse) {
  T alpha_a, alpha_b;
  return merge(a, State<T>{lse, T(1)}, alpha_a, alpha_b);
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

// ---- The same invariant in base 2, with the softmax scale folded in (the tensor-core kernel).
//
// The kernel keeps the scores unscaled, x = q . k, and State::m is the maximum of those. With
// c = scale * log2(e) > 0,
//     exp(scale * x - scale * m) = exp2(x * c - m * c),
// so each probability costs one FFMA (x * c + (-m * c)) and one exp2, and -m * c is computed once
// per row and tile. (A negative scale is folded into q first, so that c is always positive and
// the maximum of x is the maximum of scale * x.) `exp2` is the caller's: the kernel passes the
// hardware's flush-to-zero approximation, step 0 and the tests std::exp2.

// log2(e): exp(x) = exp2(x * kLog2e).
inline constexpr double kLog2e = 1.4426950408889634;

template <typename T>
ATTN_HD T scale_log2(T scale) {
  return (scale < T(0) ? -scale : scale) * T(kLog2e);
}

// kMaybeEmpty = false below is the caller's promise that the row has seen a finite score (a
// tile without a mask): the -inf guards are then left out.

// -m * c, the offset that prob2 adds, and 0 for a row with no visible key: every x is then -inf
// and exp2(-inf) = 0, with no -inf - -inf = NaN on the way.
template <bool kMaybeEmpty = true, typename T>
ATTN_HD T neg_scaled_max(const State<T>& s, T c) {
  return kMaybeEmpty && s.m == neg_inf<T>() ? T(0) : -s.m * c;
}

// Moves m to max(m, block_max), rescales l and returns alpha = exp2((m_old - m_new) * c): 0 when
// nothing was visible before (exp2(-inf)), and exp2(-inf) = 0 again when nothing is visible yet
// (the accumulator is then 0 anyway).
template <bool kMaybeEmpty = true, typename T, typename Exp2>
ATTN_HD T rescale_to2(State<T>& s, T block_max, T c, Exp2 exp2);

// The same for a kernel that keeps l elsewhere (step 5's Hopper kernel sums P on the tensor
// cores): moves m and returns alpha, leaving l to the caller.
template <bool kMaybeEmpty = true, typename T, typename Exp2>
ATTN_HD T move_max2(State<T>& s, T block_max, T c, Exp2 exp2) {
  const T m_new = block_max > s.m ? block_max : s.m;
  const T m_guarded = kMaybeEmpty && m_new == neg_inf<T>() ? T(0) : m_new;
  const T alpha = exp2((s.m - m_guarded) * c);
  s.m = m_new;
  return alpha;
}

template <bool kMaybeEmpty, typename T, typename Exp2>
ATTN_HD T rescale_to2(State<T>& s, T block_max, T c, Exp2 exp2) {
  const T alpha = move_max2<kMaybeEmpty>(s, block_max, c, exp2);
  s.l *= alpha;
  return alpha;
}

// Unnormalised probability exp(scale * (x - m)) of an unscaled score x: one FFMA and one exp2.
template <typename T, typename Exp2>
ATTN_HD T prob2(T x, T c, T neg_mc, Exp2 exp2) {
  return exp2(x * c + neg_mc);
}

// log(sum_j exp(scale * x_j)) for a state of unscaled scores; -inf for a row with no visible key.
template <typename T>
ATTN_HD T lse2(const State<T>& s, T scale) {
  if (s.l == T(0)) return neg_inf<T>();
  const T abs_scale = scale < T(0) ? -scale : scale;
#if defined(__CUDA_ARCH__)
  return s.m * abs_scale + ::log(s.l);
#else
  return s.m * abs_scale + std::log(s.l);
#endif
}

}  // namespace online_softmax
