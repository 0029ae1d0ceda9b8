// One small function per PTX instruction the tensor-core steps use. Under nvcc each is the
// instruction itself (inline asm); on the CPU backend each calls the emulation in
// common/simt/ptx.h, which follows the PTX ISA. Notation: g = lane / 4, t = lane % 4.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/kernel.h"

namespace attn {

// On the CPU backend every wrapper also takes the caller's source location (a defaulted last
// parameter), so that a misuse is reported at the kernel's line, not inside this header.
#if defined(SIMT_BACKEND)
#define ATTN_PTX_WHERE_ONLY const simt::where_t& where = simt::where_t::current()
#define ATTN_PTX_WHERE , ATTN_PTX_WHERE_ONLY
#else
#define ATTN_PTX_WHERE_ONLY
#define ATTN_PTX_WHERE
#endif

// mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}.{f16|bf16}.f32: D = A B + C for one warp,
// A 16x16 (row major), B 16x8 (column major), C and D 16x8 in FP32. Fragments per lane:
//
//   A: a[0..3], 8 halves a0..a7 (low half first)   B: b[0..1], 4 halves b0..b3
//      a_i at row g + 8*((i/2)%2),                    b_i at k = 2t + i%2 + 8*(i/2), n = g
//             col 2t + i%2 + 8*(i/4)
//          cols 0..7    8..15                       C/D: c_i at row g + 8*(i/2), col 2t + i%2
//   rows 0-7  a0 a1     a4 a5      (lane 4g+t holds        cols 0..7
//   rows 8-15 a2 a3     a6 a7       the pairs at 2t)   rows 0-7   c0 c1
//                                                      rows 8-15  c2 c3
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2],
                                             const float (&c)[4] ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 2 && std::is_same_v<T, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
#elif defined(SIMT_BACKEND)
  simt::mma_m16n8k16(std::is_same_v<T, __half> ? simt::MmaType::f16 : simt::MmaType::bf16, d, a, b,
                     c, where);
#endif
}

// ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: N 8x8 matrices of 16-bit elements
// from shared memory. Lanes 8j..8j+7 pass the addresses of rows 0..7 of matrix j (16 bytes each);
// register j of lane l receives matrix j's row l/4, columns 2(l%4) and 2(l%4)+1:
//
//   matrix j, row r = 8 halves at the address from lane 8j + r
//   lane l, reg j:  [ m_j(l/4, 2(l%4)) | m_j(l/4, 2(l%4)+1) << 16 ]
//   .trans:         [ m_j(2(l%4), l/4) | m_j(2(l%4)+1, l/4) << 16 ]   (the transposed tile)
//
// So a non-transposed 8x8 tile lands exactly as an mma B fragment whose rows are n (K stored
// [key][d]), and a transposed one as a B fragment whose rows are k (V stored [key][d]).
template <int N, bool Trans = false>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[N], const void* row_address ATTN_PTX_WHERE) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(__CUDA_ARCH__)
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  if constexpr (N == 1 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s));
  if constexpr (N == 1 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(s));
  if constexpr (N == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(s));
  if constexpr (N == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(s));
  if constexpr (N == 4 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  if constexpr (N == 4 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#elif defined(SIMT_BACKEND)
  simt::ldmatrix(N, Trans, r, row_address, where);
#endif
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: an asynchronous 16-byte copy from global
// to shared memory that bypasses L1; src_bytes < 16 copies that many bytes and zero-fills the
// rest (0: pure zero fill, used for rows past the end of a sequence). The copy is only
// guaranteed to have landed after cp_async_wait retires its group, and only for the issuing
// thread: other threads need a barrier too.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src,
                                            int src_bytes ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
               "r"(src_bytes));
#elif defined(SIMT_BACKEND)
  simt::cp_async_16(dst, src, src_bytes, where);
#endif
}

// cp.async.commit_group: closes this thread's copies issued so far into one group.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::);
#elif defined(SIMT_BACKEND)
  simt::cp_async_commit();
#endif
}

// cp.async.wait_group N: waits until at most N of this thread's most recent groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait(ATTN_PTX_WHERE_ONLY) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#elif defined(SIMT_BACKEND)
  simt::cp_async_wait(N, where);
#endif
}

// Two FP32 values rounded (to nearest even) into one register of 16-bit values, low half first:
// the layout of one mma A/B fragment register (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint16_t l, h;
  if constexpr (std::is_same_v<T, __half>) {
    l = __half_as_ushort(__float2half_rn(lo));
    h = __half_as_ushort(__float2half_rn(hi));
  } else {
    l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
  }
  return static_cast<uint32_t>(l) | static_cast<uint32_t>(h) << 16;
}

}  // namespace attn
