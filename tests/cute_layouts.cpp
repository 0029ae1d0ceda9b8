#include "tests/cute_layouts.h"

#include <cute/atom/copy_traits_sm75.hpp>
#include <cute/atom/mma_traits_sm80.hpp>

namespace cute_oracle {

using namespace cute;
using F16 = MMA_Traits<SM80_16x8x16_F32F16F16F32_TN>;
using BF16 = MMA_Traits<SM80_16x8x16_F32BF16BF16F32_TN>;

// CuTe's MMA layouts map (thread, value) to an index in the column-major (M, K), (N, K) and
// (M, N) tiles of the atom (M = 16, N = 8, K = 16).
void mma_a(int lane, int v, int& m, int& k) {
  const int idx = typename F16::ALayout{}(lane, v);
  m = idx % 16, k = idx / 16;
}
void mma_b(int lane, int v, int& k, int& n) {
  const int idx = typename F16::BLayout{}(lane, v);
  n = idx % 8, k = idx / 8;
}
void mma_c(int lane, int v, int& m, int& n) {
  const int idx = typename F16::CLayout{}(lane, v);
  m = idx % 16, n = idx / 16;
}
bool all_mma_atoms_agree() {
  for (int t = 0; t < 32; ++t) {
    for (int v = 0; v < 8; ++v)
      if (typename F16::ALayout{}(t, v) != typename BF16::ALayout{}(t, v)) return false;
    for (int v = 0; v < 4; ++v)
      if (typename F16::BLayout{}(t, v) != typename BF16::BLayout{}(t, v) ||
          typename F16::CLayout{}(t, v) != typename BF16::CLayout{}(t, v))
        return false;
  }
  return true;
}

// A copy atom's SrcLayout and DstLayout map (thread, bit) into one index space of bits; for
// ldmatrix the source is "thread t supplies 128 bits (one row)". Element (reg, h) of a lane
// starts at destination bit 32 * reg + 16 * h.
template <class Traits>
void ldsm(int lane, int reg, int h, int& src_lane, int& col) {
  const int x = typename Traits::DstLayout{}(lane, 32 * reg + 16 * h);
  // Invert the source layout: find the (thread, bit) it maps to x.
  using Src = typename Traits::SrcLayout;
  for (int t = 0; t < 32; ++t)
    for (int b = 0; b < 128; b += 16)
      if (Src{}(t, b) == x) {
        src_lane = t, col = b / 16;
        return;
      }
  src_lane = col = -1;
}

void ldmatrix(int count, bool trans, int lane, int reg, int h, int& src_lane, int& col) {
  if (!trans && count == 1)
    return ldsm<Copy_Traits<SM75_U32x1_LDSM_N>>(lane, reg, h, src_lane, col);
  if (!trans && count == 2)
    return ldsm<Copy_Traits<SM75_U32x2_LDSM_N>>(lane, reg, h, src_lane, col);
  if (!trans && count == 4)
    return ldsm<Copy_Traits<SM75_U32x4_LDSM_N>>(lane, reg, h, src_lane, col);
  if (trans && count == 1) return ldsm<Copy_Traits<SM75_U16x2_LDSM_T>>(lane, reg, h, src_lane, col);
  if (trans && count == 2) return ldsm<Copy_Traits<SM75_U16x4_LDSM_T>>(lane, reg, h, src_lane, col);
  return ldsm<Copy_Traits<SM75_U16x8_LDSM_T>>(lane, reg, h, src_lane, col);
}

}  // namespace cute_oracle
