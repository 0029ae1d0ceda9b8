// Fragment layouts as CuTe (NVIDIA CUTLASS) encodes them, evaluated on the host: the independent
// oracle for the CPU backend's PTX emulation. Implemented in cute_layouts.cpp, the only file that
// includes CuTe (installed by scripts/setup.sh --python from the nvidia-cutlass package).
#pragma once

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
