// mma.m16n8k16's computation over a warp's 32 lanes, internal to the CPU backend. Compiled twice:
// portably by ptx.cpp (mma_portable) and, on x86-64, by mma_avx2.cpp with -mavx2 -mfma -mf16c
// (mma_avx2_f16/bf16, chosen at run time when the CPU has all three). Both give the same bits:
// tests/test_ptx.cpp compares them with each other and with the element-by-element definition
// on random and special inputs. Everything here has internal linkage, so that the two
// compilations never stand in for each other at link time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/simt/ptx.h"
#include "common/simt/runtime.h"

#if defined(__F16C__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace simt {

#ifdef SIMT_MMA_AVX2
// mma_avx2.cpp
void mma_avx2_f16(const detail::CollectiveView& v);
void mma_avx2_bf16(const detail::CollectiveView& v);
#endif

namespace {

using detail::MmaIn;

// Vectors of four and eight 32-bit values and of eight and sixteen 16-bit ones: GCC's and clang's
// generic vectors (SSE, AVX or NEON as available), element-wise operations, so each element sees
// exactly the scalar sequence of operations.
typedef float F4 __attribute__((vector_size(16)));
typedef float F8 __attribute__((vector_size(32)));
typedef uint32_t U4 __attribute__((vector_size(16)));
typedef uint32_t U8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef uint16_t H8 __attribute__((vector_size(16)));
typedef uint16_t H16 __attribute__((vector_size(32)));

// The four 32-bit values x[0][i], x[1][i], x[2][i], x[3][i] for each i: a 4 x 4 transpose
// (mma gathers its rows this way, ldmatrix its registers).
[[gnu::always_inline]] inline void transpose4(U4 (&x)[4]) {
  const U4 lo01 = __builtin_shufflevector(x[0], x[1], 0, 4, 1, 5);
  const U4 lo23 = __builtin_shufflevector(x[2], x[3], 0, 4, 1, 5);
  const U4 hi01 = __builtin_shufflevector(x[0], x[1], 2, 6, 3, 7);
  const U4 hi23 = __builtin_shufflevector(x[2], x[3], 2, 6, 3, 7);
  x[0] = __builtin_shufflevector(lo01, lo23, 0, 1, 4, 5);
  x[1] = __builtin_shufflevector(lo01, lo23, 2, 3, 6, 7);
  x[2] = __builtin_shufflevector(hi01, hi23, 0, 1, 4, 5);
  x[3] = __builtin_shufflevector(hi01, hi23, 2, 3, 6, 7);
}

// Eight 16-bit operands to FP32. bf16 is the top half of an FP32. fp16: the F16C conversion where
// compiled for it (exact, as every fp16 value is an FP32 value; a NaN stays a NaN, and the result
// is canonicalised below), else f16_bits_to_float (ptx.h, tested against __half2float for all
// 65536 inputs) with the same integer operations on eight lanes at once. Selects are masks (a
// comparison gives -1 or 0 per element).
template <MmaType T>
[[gnu::always_inline]] inline void to_float8(F8& out, const H8 h16) {
  if constexpr (T == MmaType::bf16) {
    out = reinterpret_cast<F8>(__builtin_convertvector(h16, I8) << 16);
  } else {
#ifdef __F16C__
    out = reinterpret_cast<F8>(_mm256_cvtph_ps(reinterpret_cast<__m128i>(h16)));
#else
    const I8 h = __builtin_convertvector(h16, I8);  // zero-extended
    const I8 sign = (h & 0x8000) << 16;
    const I8 exponent = h & 0x7c00, mantissa = h & 0x3ff;
    const I8 normal = sign | (((h & 0x7fff) << 13) + (112 << 23));
    const F8 subnormal = __builtin_convertvector(mantissa, F8) * 0x1p-24f;  // exact, 0 for zero
    const I8 sub = sign | reinterpret_cast<I8>(subnormal);
    const I8 nan = mantissa != 0;
    const I8 special = (nan & 0x7fffffff) | (~nan & (sign | 0x7f800000));  // NaN, infinity
    const I8 is_special = exponent == 0x7c00, is_sub = exponent == 0;
    out = reinterpret_cast<F8>((is_special & special) |
                               (~is_special & ((is_sub & sub) | (~is_sub & normal))));
#endif
  }
}

// acc + a * b for every element, in FP32. For fp16 operands the product is exact (11-bit
// significands, exponents far inside FP32's range), so a fused multiply-add, where compiled for
// it, gives the same bits as a multiply then an add. A bf16 product can overflow or underflow
// (bf16 has FP32's exponent range) and then rounds: bf16 always multiplies, then adds. (The CPU
// backend is compiled with -ffp-contract=off, so the compiler fuses nothing by itself.)
template <MmaType T>
[[gnu::always_inline]] inline void multiply_add(F8& acc, float a, const F8& b) {
#ifdef __FMA__
  if constexpr (T == MmaType::f16) {
    acc = reinterpret_cast<F8>(_mm256_fmadd_ps(_mm256_set1_ps(a), reinterpret_cast<__m256>(b),
                                               reinterpret_cast<__m256>(acc)));
    return;
  }
#endif
  acc += a * b;
}

// The fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
// floating point type"), with g = lane / 4 and t = lane % 4:
//   A (16 x 16, row): a_i at row g + 8 * ((i / 2) % 2), column 2t + i % 2 + 8 * (i / 4)
//   B (16 x 8, col):  b_i at row (k) 2t + i % 2 + 8 * (i / 2), column (n) g
//   C, D (16 x 8):    c_i at row g + 8 * (i / 2), column 2t + i % 2
// Read the other way round: the four lanes 4g..4g+3 together hold rows g and g + 8 of A (register
// a[0]: row g, k 0..7; a[1]: row g + 8, k 0..7; a[2], a[3]: the same rows, k 8..15) and of C and
// D (c[0], c[1]: row g; c[2], c[3]: row g + 8), in k (n) order; the eight lanes t, t + 4, ...,
// t + 28 hold rows 2t, 2t + 1 (low and high halves of b[0]) and 2t + 8, 2t + 9 (of b[1]) of B, in
// n order. So whole rows are transposes of 4 x 4 blocks of registers.
template <MmaType T>
[[gnu::always_inline]] inline void mma_body(const detail::CollectiveView& v) {
  alignas(32) float A[16][16];  // A[m][k], for broadcasting
  F8 B[16];                     // B[k] = row k of B (its 8 n)
  F8 D[16];                     // D[m], starting as C
  for (int g = 0; g < 8; ++g) {
    U4 a[4];
    F4 c[4];
    for (int t = 0; t < 4; ++t) {
      std::memcpy(&a[t], v.lanes[4 * g + t].in + offsetof(MmaIn, a), sizeof a[t]);
      std::memcpy(&c[t], v.lanes[4 * g + t].in + offsetof(MmaIn, c), sizeof c[t]);
    }
    transpose4(a);  // a[r]: register r of lanes 4g..4g+3, eight halves in k order
    F8 r[4];
    for (int i = 0; i < 4; ++i) to_float8<T>(r[i], reinterpret_cast<H8>(a[i]));
    std::memcpy(&A[g][0], &r[0], sizeof r[0]);
    std::memcpy(&A[g + 8][0], &r[1], sizeof r[1]);
    std::memcpy(&A[g][8], &r[2], sizeof r[2]);
    std::memcpy(&A[g + 8][8], &r[3], sizeof r[3]);
    const F4 row_g01 = __builtin_shufflevector(c[0], c[1], 0, 1, 4, 5);
    const F4 row_g23 = __builtin_shufflevector(c[2], c[3], 0, 1, 4, 5);
    const F4 row_g8_01 = __builtin_shufflevector(c[0], c[1], 2, 3, 6, 7);
    const F4 row_g8_23 = __builtin_shufflevector(c[2], c[3], 2, 3, 6, 7);
    D[g] = __builtin_shufflevector(row_g01, row_g23, 0, 1, 2, 3, 4, 5, 6, 7);
    D[g + 8] = __builtin_shufflevector(row_g8_01, row_g8_23, 0, 1, 2, 3, 4, 5, 6, 7);
  }
  for (int t = 0; t < 4; ++t) {
    uint32_t b[2][8];  // register b[j] of lanes t, t + 4, ..., t + 28
    for (int g = 0; g < 8; ++g)
      std::memcpy(b[0] + g, v.lanes[4 * g + t].in + offsetof(MmaIn, b), 4);
    for (int g = 0; g < 8; ++g)
      std::memcpy(b[1] + g, v.lanes[4 * g + t].in + offsetof(MmaIn, b) + 4, 4);
    for (int j = 0; j < 2; ++j) {
      H16 halves;
      std::memcpy(&halves, b[j], sizeof halves);
      to_float8<T>(B[2 * t + 8 * j],
                   __builtin_shufflevector(halves, halves, 0, 2, 4, 6, 8, 10, 12, 14));
      to_float8<T>(B[2 * t + 8 * j + 1],
                   __builtin_shufflevector(halves, halves, 1, 3, 5, 7, 9, 11, 13, 15));
    }
  }
  // D[m][n] = C[m][n] + A[m][0] B[0][n] + ... + A[m][15] B[15][n], added in that order in FP32.
  // The eight n of a row are independent, one vector; eight rows at a time, k outermost, so that
  // eight independent sums are in flight.
  for (int m0 = 0; m0 < 16; m0 += 8)
    for (int k = 0; k < 16; ++k)
      for (int m = m0; m < m0 + 8; ++m) multiply_add<T>(D[m], A[m][k], B[k]);
  // A NaN result is the canonical NaN 0x7fffffff, as on the GPU (and the operand conversion
  // gives): which NaN operand an FP add passes on depends on the operand order the compiler picked.
  for (int m = 0; m < 16; ++m) {
    const I8 nan = D[m] != D[m];
    D[m] = reinterpret_cast<F8>((nan & 0x7fffffff) | (~nan & reinterpret_cast<I8>(D[m])));
  }
  // Lane 4g + t gets d = D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1].
  for (int g = 0; g < 8; ++g) {
    const F4 d[4] = {__builtin_shufflevector(D[g], D[g + 8], 0, 1, 8, 9),
                     __builtin_shufflevector(D[g], D[g + 8], 2, 3, 10, 11),
                     __builtin_shufflevector(D[g], D[g + 8], 4, 5, 12, 13),
                     __builtin_shufflevector(D[g], D[g + 8], 6, 7, 14, 15)};
    for (int t = 0; t < 4; ++t) std::memcpy(v.lanes[4 * g + t].out, &d[t], sizeof d[t]);
  }
}

}  // namespace
}  // namespace simt
