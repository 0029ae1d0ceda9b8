// The sm_80 PTX wrappers (common/ptx.h) on the CPU backend, each against the definition of its
// instruction in the PTX ISA. tests/test_ptx_oracle.cpp checks the same layouts against CuTe.
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/ptx.h"
#include "common/simt/memory.h"
#include "common/simt/ptx.h"
#include "tests/simt_buffer.h"

using attn::launch;
using attn_test::bits16;
using attn_test::DeviceBuf;

namespace {

// One warp: builds its A, B, C fragments from full matrices with the layouts the PTX ISA gives,
// runs mma.m16n8k16, and scatters D back the same way.
template <typename T>
__global__ void mma_kernel(const float* A, const float* B, const float* C, float* D) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  uint32_t a[4] = {}, b[2] = {};
  float c[4], d[4];
  for (int i = 0; i < 8; ++i) {
    const int m = g + 8 * ((i / 2) % 2), k = 2 * t + i % 2 + 8 * (i / 4);
    a[i / 2] |= uint32_t(bits16<T>(A[m * 16 + k])) << (16 * (i % 2));
  }
  for (int i = 0; i < 4; ++i) {
    const int k = 2 * t + i % 2 + 8 * (i / 2), n = g;
    b[i / 2] |= uint32_t(bits16<T>(B[k * 8 + n])) << (16 * (i % 2));
  }
  for (int i = 0; i < 4; ++i) c[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  attn::mma_m16n8k16<T>(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

// Small integers (exact = true): every product and sum is exact, so any order gives D. Otherwise
// random 16-bit values with a non-zero mean, whose sums round: D must then be, bit for bit, C plus
// the products added in k order in FP32 (the order the emulation defines).
template <typename T>
void check_mma(bool exact = true) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(-8, 8);
  std::normal_distribution<float> nd(0.5f, 1.0f);
  auto value = [&](float scale) {
    const float x = exact ? float(u(rng)) * scale : nd(rng) * scale;
    return exact ? x : attn::to_float(attn::from_float<T>(x));  // representable in T
  };
  DeviceBuf<float> A(256), B(128), C(128), D(128);
  for (int x = 0; x < 256; ++x) A.ptr[x] = value(1);
  for (int x = 0; x < 128; ++x) B.ptr[x] = value(1), C.ptr[x] = exact ? value(0.25f) : nd(rng);
  launch(mma_kernel<T>, {dim3(1), dim3(32)}, static_cast<const float*>(A.ptr),
         static_cast<const float*>(B.ptr), static_cast<const float*>(C.ptr), D.ptr);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      float want = C.ptr[m * 8 + n];
      for (int k = 0; k < 16; ++k) want += A.ptr[m * 16 + k] * B.ptr[k * 8 + n];
      INFO("m " << m << " n " << n);
      REQUIRE(D.ptr[m * 8 + n] == want);
    }
}

}  // namespace

TEST_CASE("ptx: mma.m16n8k16 computes D = A B + C, fp16 and bf16", "[ptx]") {
  check_mma<__half>();
  check_mma<__nv_bfloat16>();
}

TEST_CASE("ptx: mma.m16n8k16 sums in FP32 in k order, bit for bit, fp16 and bf16", "[ptx]") {
  check_mma<__half>(false);
  check_mma<__nv_bfloat16>(false);
}

TEST_CASE("ptx: the mma operand conversion equals __half2float and __bfloat162float", "[ptx]") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    __half_raw h;
    h.x = static_cast<uint16_t>(bits);
    __nv_bfloat16_raw b;
    b.x = static_cast<uint16_t>(bits);
    const float want_h = __half2float(__half(h)), want_b = __bfloat162float(__nv_bfloat16(b));
    const float got_h = simt::f16_bits_to_float(static_cast<uint16_t>(bits));
    const float got_b = std::bit_cast<float>(bits << 16);
    INFO("bits " << bits);
    REQUIRE(std::bit_cast<uint32_t>(got_h) == std::bit_cast<uint32_t>(want_h));
    REQUIRE(std::bit_cast<uint32_t>(got_b) == std::bit_cast<uint32_t>(want_b));
  }
}

namespace ptx_test {
float f16_bits_to_float_as_kernels(uint16_t h);  // f16c_conversion.cpp
bool kernels_use_f16c();
}  // namespace ptx_test

// The kernels' copies convert with F16C where the machine that builds has it: the same bits as
// the portable conversion above for every input (NaN: the same canonical NaN).
TEST_CASE("ptx: the kernels' fp16 conversion with or without F16C equals the portable one",
          "[ptx]") {
  CHECK(ptx_test::kernels_use_f16c() == bool(ATTN_KERNELS_USE_F16C));
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float want = simt::f16_bits_to_float(static_cast<uint16_t>(bits));
    const float got = ptx_test::f16_bits_to_float_as_kernels(static_cast<uint16_t>(bits));
    INFO("bits " << bits);
    REQUIRE(std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want));
  }
}

namespace {
// mma's computation as the PTX ISA defines it, one element at a time: the operands at their
// fragment places, converted with f16_bits_to_float (bf16: the top half of an FP32), and D = C +
// the sixteen products added in k order in FP32; a NaN result is the canonical NaN.
void mma_scalar(simt::MmaType type, const uint32_t (*a)[4], const uint32_t (*b)[2],
                const float (*c)[4], float (*d)[4]) {
  auto f = [&](uint16_t h) {
    return type == simt::MmaType::f16 ? simt::f16_bits_to_float(h)
                                      : std::bit_cast<float>(uint32_t(h) << 16);
  };
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 8; ++i)
      A[g + 8 * ((i / 2) % 2)][2 * t + i % 2 + 8 * (i / 4)] =
          f(static_cast<uint16_t>(a[lane][i / 2] >> (16 * (i % 2))));
    for (int i = 0; i < 4; ++i)
      B[2 * t + i % 2 + 8 * (i / 2)][g] =
          f(static_cast<uint16_t>(b[lane][i / 2] >> (16 * (i % 2))));
    for (int i = 0; i < 4; ++i) C[g + 8 * (i / 2)][2 * t + i % 2] = c[lane][i];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int m = g + 8 * (i / 2), n = 2 * t + i % 2;
      float acc = C[m][n];
      for (int k = 0; k < 16; ++k) acc += A[m][k] * B[k][n];
      d[lane][i] = std::isnan(acc) ? std::bit_cast<float>(0x7fffffffu) : acc;  // canonical NaN
    }
  }
}
}  // namespace

// The SIMD body of mma (AVX2 where the CPU has it) against the portable one and against the
// element-wise definition above, bit for bit: random operands with every fp16 and bf16 pattern
// (NaN, infinity, subnormals, zeros of both signs) and accumulators with specials of their own.
TEST_CASE("ptx: mma's SIMD and portable bodies give the same bits, specials included", "[ptx]") {
  std::mt19937 rng(11);
  const float specials[] = {0.0f,   -0.0f,   INFINITY, -INFINITY, NAN,
                            1e-45f, -1e-40f, 3.4e38f,  -3.4e38f,  1.0f};
  const uint16_t special16[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfdff, 0x0001,
                                0x83ff, 0x0400, 0x7bff, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3c00};
  for (simt::MmaType type : {simt::MmaType::f16, simt::MmaType::bf16}) {
    // 256 runs whose A operands together are every 16-bit pattern; B and C random, a quarter of
    // their elements special.
    for (uint32_t run = 0; run < 256; ++run) {
      uint32_t a[32][4], b[32][2];
      float c[32][4], scalar[32][4], portable[32][4], simd[32][4];
      auto half = [&]() -> uint32_t {
        return rng() % 4 == 0 ? special16[rng() % 16] : static_cast<uint16_t>(rng());
      };
      for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r) {
          const uint32_t x = run * 256 + lane * 8 + r * 2;
          a[lane][r] = x | (x + 1) << 16;
          c[lane][r] = rng() % 4 == 0 ? specials[rng() % 10]
                                      : std::ldexp(float(int32_t(rng())) / 2147483648.0f,
                                                   int(rng() % 40) - 20);
        }
        for (int r = 0; r < 2; ++r) b[lane][r] = half() | half() << 16;
      }
      mma_scalar(type, a, b, c, scalar);
      simt::testing::mma_compute(type, false, a, b, c, portable);
      simt::testing::mma_compute(type, true, a, b, c, simd);
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
          INFO((type == simt::MmaType::f16 ? "f16" : "bf16")
               << " run " << run << " lane " << lane << " d" << i);
          REQUIRE(std::bit_cast<uint32_t>(portable[lane][i]) ==
                  std::bit_cast<uint32_t>(scalar[lane][i]));
          REQUIRE(std::bit_cast<uint32_t>(simd[lane][i]) ==
                  std::bit_cast<uint32_t>(portable[lane][i]));
        }
    }
  }
  if (!simt::testing::mma_simd_available()) WARN("no SIMD body on this CPU: portable one only");
}

namespace {
// Shared memory holds 32 rows of 8 halves, value 100 * row + col; lane l points at row l.
template <int N, bool Trans>
__global__ void ldmatrix_kernel(uint32_t* out) {
  uint16_t* smem = attn::shared_memory<uint16_t>();
  for (int c = 0; c < 8; ++c) smem[threadIdx.x * 8 + c] = uint16_t(100 * threadIdx.x + c);
  __syncthreads();
  uint32_t r[N];
  attn::ldmatrix<N, Trans>(r, smem + (threadIdx.x % (8 * N)) * 8);
  for (int j = 0; j < N; ++j) out[threadIdx.x * N + j] = r[j];
}

template <int N, bool Trans>
void check_ldmatrix() {
  DeviceBuf<uint32_t> out(32 * N);
  launch(ldmatrix_kernel<N, Trans>, {dim3(1), dim3(32), 32 * 8 * 2}, out.ptr);
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < N; ++j) {
      // Matrix j is rows 8j..8j+7 of shared memory; PTX: lane l gets row l/4, cols 2(l%4)+{0,1}
      // (.trans: rows 2(l%4)+{0,1}, col l/4).
      const int q = l / 4, p = 2 * (l % 4);
      const uint32_t lo = Trans ? 100 * (8 * j + p) + q : 100 * (8 * j + q) + p;
      const uint32_t hi = Trans ? 100 * (8 * j + p + 1) + q : 100 * (8 * j + q) + p + 1;
      INFO("x" << N << (Trans ? ".trans" : "") << " lane " << l << " reg " << j);
      REQUIRE(out.ptr[l * N + j] == (lo | hi << 16));
    }
}
}  // namespace

TEST_CASE("ptx: ldmatrix x1, x2, x4, with and without .trans", "[ptx]") {
  check_ldmatrix<1, false>();
  check_ldmatrix<2, false>();
  check_ldmatrix<4, false>();
  check_ldmatrix<1, true>();
  check_ldmatrix<2, true>();
  check_ldmatrix<4, true>();
}

namespace {
// Each thread copies 16 bytes of `src` into shared memory in three groups, with a partial
// source in the last one, and records what it sees at each stage.
__global__ void cp_async_kernel(const unsigned char* src, unsigned char* seen) {
  unsigned char* smem = attn::shared_memory<unsigned char>() + threadIdx.x * 48;
  const unsigned char* s = src + threadIdx.x * 48;
  unsigned char* out = seen + threadIdx.x * 4 * 48;
  attn::cp_async_16(smem, s, 16);
  attn::cp_async_commit();
  attn::cp_async_16(smem + 16, s + 16, 16);
  attn::cp_async_commit();
  attn::cp_async_16(smem + 32, s + 32, 6);  // 6 bytes copied, 10 zero-filled
  attn::cp_async_commit();
  std::memcpy(out, smem, 48);  // before any wait: nothing has landed
  attn::cp_async_wait<2>();
  std::memcpy(out + 48, smem, 48);  // the oldest group has landed
  attn::cp_async_wait<1>();
  std::memcpy(out + 96, smem, 48);
  attn::cp_async_wait<0>();
  std::memcpy(out + 144, smem, 48);
}
}  // namespace

TEST_CASE("ptx: cp.async lands only at its wait_group, with zero fill", "[ptx]") {
  DeviceBuf<unsigned char> src(4 * 48), seen(4 * 4 * 48);
  for (int x = 0; x < 4 * 48; ++x) src.ptr[x] = static_cast<unsigned char>(x + 1);
  launch(cp_async_kernel, {dim3(1), dim3(4), 4 * 48}, static_cast<const unsigned char*>(src.ptr),
         seen.ptr);
  for (int t = 0; t < 4; ++t) {
    const unsigned char* s = src.ptr + t * 48;
    const unsigned char* v = seen.ptr + t * 4 * 48;
    for (int stage = 0; stage < 4; ++stage)
      for (int x = 0; x < 48; ++x) {
        const int group = x / 16;   // groups 0, 1, 2 land at stages 1, 2, 3
        unsigned char want = 0xFF;  // shared memory's poison until the copy lands
        if (stage > group) want = (group == 2 && x >= 38) ? 0 : s[x];
        INFO("thread " << t << " stage " << stage << " byte " << x);
        REQUIRE(v[stage * 48 + x] == want);
      }
  }
}

namespace {
__global__ void bad_cp_async(const unsigned char* src, int which) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  if (which == 0) attn::cp_async_16(smem + 8, src, 16);   // misaligned
  if (which == 1) attn::cp_async_16(smem + 64, src, 16);  // past the end of shared memory
  if (which == 2) attn::cp_async_16(smem, src + 4, 16);   // misaligned source
  if (which == 3) {  // one copy inside the buffer, then one reaching past its end
    attn::cp_async_16(smem, src + 32, 16);
    attn::cp_async_16(smem + 16, src + 64, 16);
  }
}
__global__ void partial_warp_mma(float* out) {
  uint32_t a[4] = {}, b[2] = {};
  float c[4] = {}, d[4];
  attn::mma_m16n8k16<__half>(d, a, b, c);
  out[threadIdx.x] = d[0];
}
}  // namespace

TEST_CASE("ptx: misuse is reported, not executed", "[ptx]") {
  DeviceBuf<unsigned char> src(64);
  for (int which : {0, 1, 2}) {
    INFO(which);
    CHECK_THROWS_WITH(launch(bad_cp_async, {dim3(1), dim3(1), 64},
                             static_cast<const unsigned char*>(src.ptr), which),
                      Catch::Contains("cp.async") && Catch::Contains("test_ptx.cpp"));
  }
  // The source bounds check remembers the last buffer an OS thread read inside: the second copy
  // of the same buffer still gets the whole check.
  CHECK_THROWS_WITH(
      launch(bad_cp_async, {dim3(1), dim3(1), 64}, static_cast<const unsigned char*>(src.ptr), 3),
      Catch::Contains("cp.async") && Catch::Contains("16 bytes past its end"));
  DeviceBuf<float> out(48);
  CHECK_THROWS_WITH(launch(partial_warp_mma, {dim3(1), dim3(48)}, out.ptr),
                    Catch::Contains("whole warps"));
}

namespace {
// A thread that issues a copy and exits: waiting for it (which), or leaving it in flight, committed
// or not; an empty group left behind is no copy in flight.
__global__ void exit_with_copy(const unsigned char* src, int which) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  if (which != 3) attn::cp_async_16(smem + 16 * threadIdx.x, src, 16);
  if (which != 1) attn::cp_async_commit();
  if (which == 0) attn::cp_async_wait<0>();
}
}  // namespace

TEST_CASE("ptx: a thread that exits with cp.async copies in flight is reported", "[ptx]") {
  // Stricter than the PTX ISA, which leaves it undefined: the copy would land in shared memory the
  // block may no longer own. Reported with the copy's line, committed or not.
  DeviceBuf<unsigned char> src(16);
  const auto* s = static_cast<const unsigned char*>(src.ptr);
  CHECK_NOTHROW(launch(exit_with_copy, {dim3(1), dim3(2), 32}, s, 0));
  CHECK_NOTHROW(launch(exit_with_copy, {dim3(1), dim3(2), 32}, s, 3));
  for (int which : {1, 2}) {
    INFO(which);
    CHECK_THROWS_WITH(
        launch(exit_with_copy, {dim3(1), dim3(2), 32}, s, which),
        Catch::Contains("exits with 1 cp.async copy in flight") && Catch::Contains("test_ptx.cpp"));
  }
}

TEST_CASE("ptx: pack2 rounds to nearest even, low half first", "[ptx]") {
  const uint32_t h = attn::pack2<__half>(1.0f, 1.0f + 0x1p-11f);  // a tie: rounds to 1.0
  CHECK((h & 0xffff) == 0x3C00);
  CHECK((h >> 16) == 0x3C00);
  const uint32_t b = attn::pack2<__nv_bfloat16>(-2.0f, 1.0f + 0x1p-7f);
  CHECK((b & 0xffff) == 0xC000);
  CHECK((b >> 16) == 0x3F81);
}
