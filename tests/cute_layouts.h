// Fragment layouts as CuTe (NVIDIA CUTLASS) encodes them, evaluated on the host: the independent
// oracle for the CPU backend's PTX emulation. Implemented in cute_layouts.cpp, the only file that
// includes CuTe (installed by scripts/setup.sh --python from the nvidia-cutlass package).
#pragma once

#include <cstdint>

namespace cute_oracle {

// mma.m16n8k16 with FP32 accumulation (SM80_16x8x16_F32F16F16F32_TN; the bf16 atom has the same
// layouts, which all_mma_atoms_agree() checks): value v of lane `lane`.
void mma_a(int lane, int v, int& m, int& k);  // v in 0..7
void mma_b(int lane, int v, int& k, int& n);  // v in 0..3
void mma_c(int lane, int v, int& m, int& n);  // v in 0..3
bool all_mma_atoms_agree();

// ldmatrix (SM75_U32x{1,2,4}_LDSM_N, SM75_U16x{2,4,8}_LDSM_T): the 16-bit element (register
// reg, half h) of lane `lane` comes from the row address of lane src_lane, element col of it.
void ldmatrix(int count, bool trans, int lane, int reg, int h, int& src_lane, int& col);

}  // namespace cute_oracle

namespace cute_oracle {

// wgmma m64nNk16 with FP32 accumulation (SM90_64xNx16_F32F16F16_SS / _RS): accumulator value v of
// thread t (0..127) is at (m, n) of the 64 x N tile (CLayout_64xN), N = 64, 128 or 256; register-A
// value v (0..7) at (m, k) of the 64 x 16 A tile (ALayout_64x16 of the RS atom).
void gmma_c(int n_size, int thread, int v, int& m, int& n);
void gmma_a_regs(int thread, int v, int& m, int& k);

// A 64 x 64 (rows x K) tile of 16-bit elements in CuTe's canonical GMMA shared-memory layout
// (GMMA::Layout_{K,MN}_{INTER,SW32,SW64,SW128}_Atom tiled over the tile) at shared address `base`:
// the shared address of element (row, k) of k-block kb (16 of K), and the descriptor
// make_gmma_desc builds for that k-block. span 0 = no swizzle (INTERLEAVE).
uint64_t gmma_operand(bool mn_major, int span, int kb, uint32_t base, uint32_t (&addr)[64][16]);

// GmmaDescriptor's bit fields set through CuTe's union.
uint64_t gmma_desc_fields(uint32_t start, uint32_t lbo, uint32_t sbo, int base_offset, int layout);

// Swizzle<B,4,3> applied to a byte address (B = 1, 2, 3: TMA's and GMMA's 32/64/128-byte modes).
uint32_t swizzle(int b, uint32_t address);

}  // namespace cute_oracle
