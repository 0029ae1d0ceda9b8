// CPU emulations of the sm_80 PTX instructions the tensor-core steps use, following NVIDIA's PTX
// ISA (sections "Matrix Fragments for mma.m16n8k16 with floating point type", "ldmatrix" and
// "cp.async"); common/ptx.h states each layout in this project's notation. Kernels call them
// through common/ptx.h, which uses the real instruction under nvcc.
//
// Strictness beyond hardware: a cp.async copy lands in shared memory only when a wait_group
// retires its group, and its destination reads as poison from the moment it is issued, so a
// missing wait, or a refill of a buffer another warp still reads, reads poison; ldmatrix
// and cp.async check that their shared addresses lie in the block's shared memory and are
// aligned; mma and ldmatrix need all 32 lanes of the warp.
#pragma once

#include <cstdint>
#include <cstring>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#include "common/simt/where.h"

namespace simt {

enum class MmaType { f16, bf16 };

// The FP32 value of the fp16 with these bits (exact; every NaN becomes 0x7fffffff, as the
// headers' conversion makes it), as mma.sync reads its operands. Plain bit operations: the same
// result as __half2float for every input (tested).
inline float f16_bits_to_float(uint16_t h) {
#if defined(__F16C__)
  if (__builtin_expect((h & 0x7c00u) != 0x7c00u || (h & 0x3ffu) == 0, 1))
    return _cvtsh_ss(h);  // one vcvtph2ps: exact, as below (NaN below)
#endif
  // Branch-free (selects), so that a loop over an array of halves vectorises.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = h & 0x7c00u, mantissa = h & 0x3ffu;
  const uint32_t normal = sign | ((static_cast<uint32_t>(h & 0x7fffu) << 13) + (112u << 23));
  const float subnormal = static_cast<float>(mantissa) * 0x1p-24f;  // exact, and 0 for zero
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &subnormal, sizeof sub_bits);
  const uint32_t special = mantissa != 0 ? 0x7fffffffu : sign | 0x7f800000u;  // NaN, infinity
  const uint32_t bits = exponent == 0x7c00u ? special : (exponent == 0 ? sign | sub_bits : normal);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 d, a, b, c, and
// ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 (`count` 8x8 matrices of 16-bit
// elements; lanes 8j..8j+7 give the row addresses of matrix j): inline, in ptx_ops.h.

namespace detail {
// What mma_m16n8k16 and ldmatrix hand to their warp collective.
inline constexpr char kMmaF16[] = "mma.sync.m16n8k16.f32.f16.f16.f32";
inline constexpr char kMmaBf16[] = "mma.sync.m16n8k16.f32.bf16.bf16.f32";
inline constexpr char kLdmatrix[] = "ldmatrix.sync.m8n8.b16";
struct MmaIn {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
};
struct LdmatrixIn {
  const unsigned char* row;
  int count;
  int trans;
};
}  // namespace detail

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: copies src_bytes (0..16) and zero-fills
// the rest of the 16 bytes, asynchronously.
void cp_async_16(void* dst, const void* src, int src_bytes, const simt::where_t& where);
// cp.async.commit_group
void cp_async_commit();
// cp.async.wait_group n: returns when at most n of this thread's committed groups are pending.
void cp_async_wait(int n, const simt::where_t& where);

// Fault injection for tests: removes every cp.async.wait_group (copies then never land), or the
// block barrier or __syncwarp at one source line, as if the kernel had been written without it.
namespace testing {
void skip_cp_async_wait(bool on);
void skip_barrier_at(const char* file_suffix, int line);  // line 0: none
bool barrier_skipped(const simt::where_t& where);
// mma.m16n8k16's computation outside a kernel, for 32 lanes' fragments: with the SIMD (AVX2) body
// or the portable one, which must give the same bits. simd is ignored where none is available.
bool mma_simd_available();
void mma_compute(MmaType type, bool simd, const uint32_t (*a)[4], const uint32_t (*b)[2],
                 const float (*c)[4], float (*d)[4]);
}  // namespace testing

}  // namespace simt
