#include "tests/cute_layouts.h"

#include <cstddef>
#include <cstdint>

// make_gmma_desc reads a descriptor's start address through __cvta_generic_to_shared, which only
// exists on the device. On the host the oracle gives it a shared window that starts at address 0:
// the "pointers" below are shared addresses, never dereferenced.
static size_t __cvta_generic_to_shared(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}
#define CUTE_CVTA_GENERIC_TO_SHARED_ACTIVATED 1

#include <cute/atom/copy_traits_sm75.hpp>
#include <cute/atom/mma_traits_sm80.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

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

namespace cute_oracle {

using namespace cute;

template <int N>
void gmma_c_n(int thread, int v, int& m, int& n) {
  const int idx = SM90::GMMA::CLayout_64xN<N>{}(thread, v);
  m = idx % 64, n = idx / 64;
}

void gmma_c(int n_size, int thread, int v, int& m, int& n) {
  if (n_size == 64) return gmma_c_n<64>(thread, v, m, n);
  if (n_size == 128) return gmma_c_n<128>(thread, v, m, n);
  return gmma_c_n<256>(thread, v, m, n);
}

void gmma_a_regs(int thread, int v, int& m, int& k) {
  using RS = MMA_Traits<SM90::GMMA::MMA_64x64x16_F32F16F16_RS<GMMA::Major::K, GMMA::Major::K>>;
  const int idx = typename RS::ALayout{}(thread, v);
  m = idx % 64, k = idx / 64;
}

template <GMMA::Major Major, class Atom>
uint64_t operand(int kb, uint32_t base, uint32_t (&addr)[64][16]) {
  auto tile = make_tensor(make_smem_ptr(reinterpret_cast<half_t*>(uintptr_t(base))),
                          tile_to_shape(Atom{}, Shape<_64, _64>{}));
  auto block = local_tile(tile, Shape<_64, _16>{}, make_coord(0, kb));
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < 16; ++k)
      addr[r][k] = uint32_t(reinterpret_cast<uintptr_t>(raw_pointer_cast(&block(r, k))));
  return SM90::GMMA::make_gmma_desc<Major>(block).desc_;
}

uint64_t gmma_operand(bool mn_major, int span, int kb, uint32_t base, uint32_t (&addr)[64][16]) {
  using GMMA::Major;
  if (mn_major) {
    if (span == 0) return operand<Major::MN, GMMA::Layout_MN_INTER_Atom<half_t>>(kb, base, addr);
    if (span == 32) return operand<Major::MN, GMMA::Layout_MN_SW32_Atom<half_t>>(kb, base, addr);
    if (span == 64) return operand<Major::MN, GMMA::Layout_MN_SW64_Atom<half_t>>(kb, base, addr);
    return operand<Major::MN, GMMA::Layout_MN_SW128_Atom<half_t>>(kb, base, addr);
  }
  if (span == 0) return operand<Major::K, GMMA::Layout_K_INTER_Atom<half_t>>(kb, base, addr);
  if (span == 32) return operand<Major::K, GMMA::Layout_K_SW32_Atom<half_t>>(kb, base, addr);
  if (span == 64) return operand<Major::K, GMMA::Layout_K_SW64_Atom<half_t>>(kb, base, addr);
  return operand<Major::K, GMMA::Layout_K_SW128_Atom<half_t>>(kb, base, addr);
}

uint64_t gmma_desc_fields(uint32_t start, uint32_t lbo, uint32_t sbo, int base_offset, int layout) {
  GmmaDescriptor d;
  d.bitfield.start_address_ = static_cast<uint16_t>(start >> 4);
  d.bitfield.leading_byte_offset_ = static_cast<uint16_t>(lbo >> 4);
  d.bitfield.stride_byte_offset_ = static_cast<uint16_t>(sbo >> 4);
  d.bitfield.base_offset_ = static_cast<uint8_t>(base_offset);
  d.bitfield.layout_type_ = static_cast<uint8_t>(layout);
  return d.desc_;
}

uint32_t swizzle(int b, uint32_t address) {
  if (b == 1) return Swizzle<1, 4, 3>{}(address);
  if (b == 2) return Swizzle<2, 4, 3>{}(address);
  return Swizzle<3, 4, 3>{}(address);
}

}  // namespace cute_oracle
