// One small function per PTX instruction the tensor-core steps use. Under nvcc each is the
// instruction itself (inline asm); on the CPU backend each calls the emulation in
// common/simt/ptx.h, which follows the PTX ISA. Notation: g = lane / 4, t = lane % 4.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/kernel.h"

#if defined(__CUDACC__)
#include <cuda.h>  // CUtensorMap (a type only: nothing links against the driver library)
#endif

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

// ex2.approx.ftz.f32: 2^x in one MUFU.EX2, subnormal inputs and results flushed to zero
// (2^-126 > result -> +0; 2^-inf = +0). Without .ftz, ptxas wraps every MUFU.EX2 in a range test
// and two multiplies to produce subnormal results, which a softmax never needs: a probability
// below 2^-126 of the row maximum's is 0 to FP32 accumulation anyway. The PTX ISA bounds the
// approximation's error by 2 ulp over the full range; the CPU backend computes 2^x exactly
// (std::exp2) and flushes the same way, well within every step's check.
__device__ __forceinline__ float exp2_ftz(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
  const float y = std::exp2(x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
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

// What pack2<T>(lo, hi) lost to rounding, packed again: pack2(lo, hi) + pack2_residual(...)
// holds (lo, hi) to about 2 x 8 (bf16) or 2 x 11 (fp16) bits. The dropout kernels multiply both
// parts by V, so that P's rounding is not amplified by the 1 / (1 - p) of the kept keys.
template <typename T>
__device__ __forceinline__ uint32_t pack2_residual(float lo, float hi, uint32_t packed) {
  const unsigned short l = packed & 0xffffu, h = packed >> 16;
  if constexpr (std::is_same_v<T, __half>)
    return pack2<T>(lo - __half2float(__ushort_as_half(l)), hi - __half2float(__ushort_as_half(h)));
  else
    return pack2<T>(lo - __bfloat162float(__ushort_as_bfloat16(l)),
                    hi - __bfloat162float(__ushort_as_bfloat16(h)));
}

// ================================ Hopper (sm_90a) ================================================
// On the CPU backend each calls the emulation in common/simt/sm90.h. mbarriers are 8-byte objects
// in dynamic shared memory; the tensor map of a TMA copy is a kernel parameter
// (`const __grid_constant__ attn::TensorMap map`) encoded on the host by common/tensor_map.h.

#if defined(__CUDACC__)
using TensorMap = CUtensorMap;
#else
using TensorMap = simt::TensorMap;
#endif

// The 32-bit shared-window address of a pointer into shared memory (cvta.to.shared).
__device__ __forceinline__ uint32_t smem_addr(const void* p ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#elif defined(SIMT_BACKEND)
  return simt::shared_address(p, where);
#else
  return 0;
#endif
}

// ---- mbarrier: a phase completes when its pending arrivals and its transaction bytes both reach
// zero; the phase parity then flips and the arrival count reloads. try_wait.parity P succeeds once
// the phase of parity P has completed (so waiting on parity 1 of a fresh barrier returns at once).

// mbarrier.init.shared::cta.b64 [bar], count
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
#elif defined(SIMT_BACKEND)
  simt::mbarrier_init(bar, count, where);
#endif
}

// Names an mbarrier ("full[2]") in the CPU backend's reports; nothing on the GPU.
__device__ __forceinline__ void mbarrier_label(uint64_t* bar, const char* label) {
#if defined(SIMT_BACKEND)
  simt::mbarrier_label(bar, label);
#else
  (void)bar;
  (void)label;
#endif
}

// mbarrier.arrive.shared::cta.b64 state, [bar]: one arrival; returns the phase's state token.
__device__ __forceinline__ uint64_t mbarrier_arrive(uint64_t* bar ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
               : "=l"(state)
               : "r"(smem_addr(bar))
               : "memory");
  return state;
#elif defined(SIMT_BACKEND)
  return simt::mbarrier_arrive(bar, where);
#else
  return 0;
#endif
}

// mbarrier.arrive.expect_tx.shared::cta.b64 state, [bar], bytes: expect `bytes` more transaction
// bytes in this phase (a TMA load's box), then arrive.
__device__ __forceinline__ uint64_t mbarrier_arrive_expect_tx(uint64_t* bar,
                                                              uint32_t bytes ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  uint64_t state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state)
               : "r"(smem_addr(bar)), "r"(bytes)
               : "memory");
  return state;
#elif defined(SIMT_BACKEND)
  return simt::mbarrier_arrive_expect_tx(bar, bytes, where);
#else
  return 0;
#endif
}

// mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [bar], bytes (no arrival).
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
#elif defined(SIMT_BACKEND)
  simt::mbarrier_expect_tx(bar, bytes, where);
#endif
}

// mbarrier.test_wait.parity.shared::cta.b64 (sm_80 and newer), looped until the phase of parity
// `parity` completed. test_wait never suspends the thread: the loop polls. The sm_80-style kernels
// use it on every architecture: around try_wait's loop, ptxas for sm_90a allocates up to 50 more
// registers in step 5's sm_80 kernel (and spills at D = 128 with dropout); around this one, as
// many as for sm_80. (On the CPU backend both are the same wait.)
__device__ __forceinline__ void mbarrier_test_wait_parity(uint64_t* bar,
                                                          uint32_t parity ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#elif defined(SIMT_BACKEND)
  while (!simt::mbarrier_try_wait_parity(bar, parity, where)) {
  }
#endif
}

// mbarrier.try_wait.parity.shared::cta.b64, looped until the phase of parity `parity` completed.
// try_wait (sm_90) may suspend the thread until the phase completes or a time limit passes; before
// sm_90 only test_wait exists, and it is used there.
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar,
                                                     uint32_t parity ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  mbarrier_test_wait_parity(bar, parity);
#elif defined(__CUDA_ARCH__)
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#elif defined(SIMT_BACKEND)
  while (!simt::mbarrier_try_wait_parity(bar, parity, where)) {
  }
#endif
}

// cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar] (sm_80): this thread's cp.async copies
// issued so far arrive on `bar` when they land. .noinc: the arrival counts against the count the
// barrier was initialised with.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar))
               : "memory");
#elif defined(SIMT_BACKEND)
  simt::cp_async_mbarrier_arrive_noinc(bar, where);
#endif
}

// ---- TMA: cp.async.bulk.tensor.{2,3,4}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// Copies the map's box at element coordinates (c0 innermost) into dst (128-byte aligned; 1024 for
// the 128-byte swizzle), densely and swizzled as the map says; elements outside the tensor are
// zero. The mbarrier's phase is credited with the box's bytes when the copy lands.
#if defined(__CUDA_ARCH__)
#define ATTN_TMA_ASM(rank, coords, ...)                                                         \
  asm volatile("cp.async.bulk.tensor." #rank                                                    \
               "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {" coords \
               "}], [%2];\n" ::"r"(smem_addr(dst)),                                             \
               "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), __VA_ARGS__           \
               : "memory")
#endif
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, uint64_t* bar, int c0,
                                            int c1 ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  ATTN_TMA_ASM(2, "%3, %4", "r"(c0), "r"(c1));
#elif defined(SIMT_BACKEND)
  const int32_t c[2] = {c0, c1};
  simt::tma_load(dst, map, bar, c, 2, where);
#endif
}
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, uint64_t* bar, int c0,
                                            int c1, int c2 ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  ATTN_TMA_ASM(3, "%3, %4, %5", "r"(c0), "r"(c1), "r"(c2));
#elif defined(SIMT_BACKEND)
  const int32_t c[3] = {c0, c1, c2};
  simt::tma_load(dst, map, bar, c, 3, where);
#endif
}
__device__ __forceinline__ void tma_load_4d(void* dst, const TensorMap* map, uint64_t* bar, int c0,
                                            int c1, int c2, int c3 ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  ATTN_TMA_ASM(4, "%3, %4, %5, %6", "r"(c0), "r"(c1), "r"(c2), "r"(c3));
#elif defined(SIMT_BACKEND)
  const int32_t c[4] = {c0, c1, c2, c3};
  simt::tma_load(dst, map, bar, c, 4, where);
#endif
}

// ---- Bulk reduction: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [dst], [src],
// bytes adds the bytes / 4 floats at shared `src` into global `dst`, element by element, each add
// atomic (other blocks may add to the same floats). src and dst 16-byte aligned, bytes a positive
// multiple of 16. The async proxy reads src: stores to it need fence.proxy.async.shared::cta, and
// the fencing threads a barrier with the issuing one, first. It completes as this thread's bulk
// async-groups do: cp.async.bulk.commit_group closes them, cp.async.bulk.wait_group.read N lets
// their sources be reused, cp.async.bulk.wait_group N waits for the adds themselves.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src,
                                                    uint32_t bytes ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
      "r"(smem_addr(src)), "r"(bytes)
      : "memory");
#elif defined(SIMT_BACKEND)
  simt::bulk_reduce_add_f32(dst, src, bytes, where);
#endif
}

// cp.async.bulk.commit_group: this thread's bulk operations issued since the last commit, a group.
__device__ __forceinline__ void bulk_commit(ATTN_PTX_WHERE_ONLY) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#elif defined(SIMT_BACKEND)
  simt::bulk_commit_group(where);
#endif
}

// cp.async.bulk.wait_group.read N: at most N of this thread's newest bulk groups may still read
// their shared-memory sources (the buffers of the older ones may be written again).
template <int N>
__device__ __forceinline__ void bulk_wait_read(ATTN_PTX_WHERE_ONLY) {
  static_assert(N >= 0 && N <= 63, "cp.async.bulk.wait_group takes 0..63");
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#elif defined(SIMT_BACKEND)
  simt::bulk_wait_group(N, true, where);
#endif
}

// cp.async.bulk.wait_group N: at most N of this thread's newest bulk groups pending; the older
// ones complete, their writes to global memory performed.
template <int N>
__device__ __forceinline__ void bulk_wait(ATTN_PTX_WHERE_ONLY) {
  static_assert(N >= 0 && N <= 63, "cp.async.bulk.wait_group takes 0..63");
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#elif defined(SIMT_BACKEND)
  simt::bulk_wait_group(N, false, where);
#endif
}

// fence.proxy.async.shared::cta: ordinary (generic-proxy) stores to shared memory made before it
// become visible to the async proxy (wgmma operands, TMA stores). Needed, followed by a barrier,
// between writing a tile with st.shared and handing it to wgmma.
__device__ __forceinline__ void fence_proxy_async_shared(ATTN_PTX_WHERE_ONLY) {
#if defined(__CUDA_ARCH__)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#elif defined(SIMT_BACKEND)
  simt::fence_proxy_async_shared(where);
#endif
}

// ---- wgmma (warpgroup = 4 consecutive warps, 128 threads; every wrapper below is executed by all
// of them). Shared-memory operands are described by a 64-bit matrix descriptor:
//   bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
//   49-51 base offset (0 here), 62-63 swizzle: 0 none, 1 128B, 2 64B, 3 32B.
// The layouts (PTX ISA, "Shared Memory Matrix Layout"), for 16-bit elements, T = 8 elements:
//   K-major:  8 rows of 16 bytes (none) or of the swizzle span (32/64/128 B) per core block; SBO
//             steps 8 rows; without swizzle LBO steps the second 8 elements of K.
//   MN-major: 8 consecutive MN elements (16 B) per core row, rows step K; with swizzle a row is
//             the span wide, LBO steps the next span of MN and SBO the next 8 of K; without
//             swizzle SBO steps 8 of MN and LBO 8 of K.
// Accumulator d[i] (f32) of thread id (w = id / 32, l = id % 32, g = l / 4, t = l % 4):
//   row 16w + g + 8((i/2)%2), column 8(i/4) + 2t + i%2,   i = 0 .. N/2 - 1
// A from registers: the mma.m16n8k16 A fragment of rows 16w .. 16w + 15.
enum class WgmmaSwizzle : uint64_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

__device__ __forceinline__ uint64_t make_wgmma_desc(const void* smem, uint32_t leading_bytes,
                                                    uint32_t stride_bytes,
                                                    WgmmaSwizzle swizzle ATTN_PTX_WHERE) {
#if defined(SIMT_BACKEND)
  const uint32_t a = smem_addr(smem, where);
#else
  const uint32_t a = smem_addr(smem);
#endif
  return uint64_t((a >> 4) & 0x3fff) | uint64_t((leading_bytes >> 4) & 0x3fff) << 16 |
         uint64_t((stride_bytes >> 4) & 0x3fff) << 32 | static_cast<uint64_t>(swizzle) << 62;
}

// The descriptor of the same matrix `bytes` further into shared memory (a k-block, a ring slot):
// the start address is bits 0-13 in 16-byte units and shared addresses stay below 2^18, so moving
// it is one addition, with no new cvta.
__device__ __forceinline__ uint64_t wgmma_desc_plus(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// wgmma.fence.sync.aligned: before the first wgmma, and between register accesses (accumulators,
// A fragments) and a wgmma that uses those registers.
__device__ __forceinline__ void wgmma_fence(ATTN_PTX_WHERE_ONLY) {
#if defined(__CUDA_ARCH__)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(SIMT_BACKEND)
  simt::wgmma_fence(where);
#endif
}
// wgmma.commit_group.sync.aligned: closes this thread's wgmma operations into a group.
__device__ __forceinline__ void wgmma_commit(ATTN_PTX_WHERE_ONLY) {
#if defined(__CUDA_ARCH__)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(SIMT_BACKEND)
  simt::wgmma_commit_group(where);
#endif
}
// wgmma.wait_group.sync.aligned N: at most N groups pending; retired accumulators are readable.
template <int N>
__device__ __forceinline__ void wgmma_wait(ATTN_PTX_WHERE_ONLY) {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
#if defined(__CUDA_ARCH__)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#elif defined(SIMT_BACKEND)
  simt::wgmma_wait_group(N, where);
#endif
}

// The asm of wgmma m64nNk16 for each N (8..256): the N/2 accumulators are operands %0..%(N/2-1).
// Expanded in sm_90a device passes only (wgmma is sm_90a's alone): its 128 statements (32 N, two
// types, SS and RS) would cost every other pass most of a second of preprocessing. Only these
// passes include Boost.Preprocessor, so a CPU-only build (the Python package's) needs no Boost.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include <boost/preprocessor/arithmetic/add.hpp>
#include <boost/preprocessor/control/if.hpp>
#include <boost/preprocessor/punctuation/comma_if.hpp>
#include <boost/preprocessor/repetition/repeat.hpp>
#include <boost/preprocessor/stringize.hpp>
#include <boost/preprocessor/tuple/elem.hpp>
#define ATTN_WGMMA_ASM 1
// N and its N/2 accumulators for the 32 shapes, looked up by the case's index: computed with
// BOOST_PP_MUL instead, they took two of the two and a half seconds each pass spent expanding
// these statements.
#define ATTN_WGMMA_N(j)                                                                        \
  BOOST_PP_TUPLE_ELEM(32, j,                                                                   \
                      (8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, \
                       144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256))
#define ATTN_WGMMA_NR(j)                                                                         \
  BOOST_PP_TUPLE_ELEM(32, j,                                                                     \
                      (4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, \
                       80, 84, 88, 92, 96, 100, 104, 108, 112, 116, 120, 124, 128))
#define ATTN_WGMMA_D_STR(z, i, _) BOOST_PP_IF(i, ",", "") "%" BOOST_PP_STRINGIZE(i)
#define ATTN_WGMMA_D_OPS(z, i, _) BOOST_PP_COMMA_IF(i) "+f"(d[i])
#define ATTN_WGMMA_OP(nr, k) "%" BOOST_PP_STRINGIZE(BOOST_PP_ADD(nr, k))
#define ATTN_WGMMA_SS_CASE(z, j, ty) ATTN_WGMMA_SS(ATTN_WGMMA_N(j), ATTN_WGMMA_NR(j), ty)
#define ATTN_WGMMA_SS(n, nr, ty) \
  if constexpr (N == n)          \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " ATTN_WGMMA_OP(nr, 2) ", 0;\n"             \
                 " wgmma.mma_async.sync.aligned.m64n" BOOST_PP_STRINGIZE(n) "k16.f32." ty "." ty \
                 " {" BOOST_PP_REPEAT(nr, ATTN_WGMMA_D_STR, _) "}, " ATTN_WGMMA_OP(nr, 0) ", "   \
                 ATTN_WGMMA_OP(nr, 1) ", p, 1, 1, " ATTN_WGMMA_OP(nr, 3) ", "                    \
                 ATTN_WGMMA_OP(nr, 4) ";\n}\n"                                                   \
                 : BOOST_PP_REPEAT(nr, ATTN_WGMMA_D_OPS, _)                                      \
                 : "l"(desc_a), "l"(desc_b), "r"(int(scale_d)), "n"(int(TransA)),               \
                   "n"(int(TransB)));
#define ATTN_WGMMA_RS_CASE(z, j, ty) ATTN_WGMMA_RS(ATTN_WGMMA_N(j), ATTN_WGMMA_NR(j), ty)
#define ATTN_WGMMA_RS(n, nr, ty) \
  if constexpr (N == n)          \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " ATTN_WGMMA_OP(nr, 5) ", 0;\n"             \
                 " wgmma.mma_async.sync.aligned.m64n" BOOST_PP_STRINGIZE(n) "k16.f32." ty "." ty \
                 " {" BOOST_PP_REPEAT(nr, ATTN_WGMMA_D_STR, _) "}, {" ATTN_WGMMA_OP(nr, 0) ", "  \
                 ATTN_WGMMA_OP(nr, 1) ", " ATTN_WGMMA_OP(nr, 2) ", " ATTN_WGMMA_OP(nr, 3) "}, "  \
                 ATTN_WGMMA_OP(nr, 4) ", p, 1, 1, " ATTN_WGMMA_OP(nr, 6) ";\n}\n"               \
                 : BOOST_PP_REPEAT(nr, ATTN_WGMMA_D_OPS, _)                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(scale_d)),  \
                   "n"(int(TransB)));
#endif

// The accumulators of a wgmma m64nNk16 are N / 2 floats per thread, d[4 nt + i] holding element i
// of the mma.sync m16n8 accumulator fragment of columns 8 nt .. 8 nt + 7 of its warp's 16 rows:
// a kernel may keep them as float[N / 2] or, as the mma.sync kernels do, float[N / 8][4].
template <int N, typename Acc>
__device__ __forceinline__ float (&wgmma_accumulators(Acc& acc))[N / 2] {
  static_assert(std::is_array_v<Acc> && std::is_same_v<std::remove_all_extents_t<Acc>, float> &&
                    sizeof(Acc) == N / 2 * sizeof(float),
                "wgmma m64nNk16: the accumulators are float[N / 2] or float[N / 8][4]");
  return reinterpret_cast<float(&)[N / 2]>(acc);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}: D (64 x N, f32) = A (64 x 16, shared,
// desc_a; TransA: MN-major) * B (16 x N, shared, desc_b; TransB = 0: K-major, i.e. stored N rows
// of K, 1: MN-major) + (scale_d ? D : 0). Asynchronous: acc holds no defined value until the
// wgmma_wait that retires it (poison on the CPU backend).
template <int N, typename T, bool TransA = false, bool TransB = false, typename Acc>
__device__ __forceinline__ void wgmma_ss(Acc& acc, uint64_t desc_a, uint64_t desc_b,
                                         bool scale_d ATTN_PTX_WHERE) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma m64nNk16: N is a multiple of 8 to 256");
  float(&d)[N / 2] = wgmma_accumulators<N>(acc);
#if defined(ATTN_WGMMA_ASM)
  if constexpr (std::is_same_v<T, __half>) {
    BOOST_PP_REPEAT(32, ATTN_WGMMA_SS_CASE, "f16")
  } else {
    BOOST_PP_REPEAT(32, ATTN_WGMMA_SS_CASE, "bf16")
  }
#elif defined(__CUDA_ARCH__)
  static_assert(N < 0, "wgmma needs sm_90a: compile this kernel for sm_90a only");
#elif defined(SIMT_BACKEND)
  simt::wgmma_mma_async(std::is_same_v<T, __half> ? simt::WgmmaType::f16 : simt::WgmmaType::bf16, N,
                        d, desc_a, nullptr, desc_b, scale_d, 1, 1, TransA, TransB, where);
#endif
}

// The same with A from registers (K-major only): a[0..3] is the mma.m16n8k16 A fragment of this
// warp's 16 rows (16w .. 16w + 15).
template <int N, typename T, bool TransB = false, typename Acc>
__device__ __forceinline__ void wgmma_rs(Acc& acc, const uint32_t (&a)[4], uint64_t desc_b,
                                         bool scale_d ATTN_PTX_WHERE) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma m64nNk16: N is a multiple of 8 to 256");
  float(&d)[N / 2] = wgmma_accumulators<N>(acc);
#if defined(ATTN_WGMMA_ASM)
  if constexpr (std::is_same_v<T, __half>) {
    BOOST_PP_REPEAT(32, ATTN_WGMMA_RS_CASE, "f16")
  } else {
    BOOST_PP_REPEAT(32, ATTN_WGMMA_RS_CASE, "bf16")
  }
#elif defined(__CUDA_ARCH__)
  static_assert(N < 0, "wgmma needs sm_90a: compile this kernel for sm_90a only");
#elif defined(SIMT_BACKEND)
  simt::wgmma_mma_async(std::is_same_v<T, __half> ? simt::WgmmaType::f16 : simt::WgmmaType::bf16, N,
                        d, 0, a, desc_b, scale_d, 1, 1, false, TransB, where);
#endif
}

// setmaxnreg.{inc,dec}.sync.aligned.u32 R: the warpgroup's per-thread register budget becomes R
// (24..256, a multiple of 8, the same in all four warps). .inc waits until the block's pool has
// room; ptxas honours it only for kernels with a register cap at entry (__launch_bounds__(T, 1)).
template <int R>
__device__ __forceinline__ void setmaxnreg_inc(ATTN_PTX_WHERE_ONLY) {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if defined(__CUDA_ARCH__)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
#elif defined(SIMT_BACKEND)
  simt::setmaxnreg(true, R, where);
#endif
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec(ATTN_PTX_WHERE_ONLY) {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if defined(__CUDA_ARCH__)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
#elif defined(SIMT_BACKEND)
  simt::setmaxnreg(false, R, where);
#endif
}

// elect.sync _|p, mask: true in exactly one lane of `mask` (the lowest), false in the others.
__device__ __forceinline__ bool elect_one(uint32_t mask = 0xffffffffu ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  uint32_t pred;
  asm volatile("{\n .reg .pred p;\n .reg .b32 l;\n elect.sync l|p, %1;\n selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(pred)
               : "r"(mask));
  return pred != 0;
#elif defined(SIMT_BACKEND)
  bool leader = false;
  simt::elect_sync(mask, &leader, where);
  return leader;
#else
  return false;
#endif
}

// bar.sync id, count: waits until `count` threads (whole warps) arrived at barrier id (1..15;
// 0 is __syncthreads). bar.arrive id, count: arrives without waiting (a producer signalling
// consumers that wait with bar.sync on the same id and count).
__device__ __forceinline__ void named_barrier_sync(int id, int count ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#elif defined(SIMT_BACKEND)
  simt::named_barrier_sync(id, count, where);
#endif
}
__device__ __forceinline__ void named_barrier_arrive(int id, int count ATTN_PTX_WHERE) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#elif defined(SIMT_BACKEND)
  simt::named_barrier_arrive(id, count, where);
#endif
}

}  // namespace attn
