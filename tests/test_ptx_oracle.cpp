// The CPU backend's mma and ldmatrix against CuTe's layout definitions (tests/cute_layouts.h):
// fragments are built and read back with CuTe's maps, never with the formulas the emulation
// uses, so the two cannot agree by sharing a mistake.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "common/ptx.h"
#include "common/simt/memory.h"
#include "tests/cute_layouts.h"
#include "tests/simt_buffer.h"

using attn::launch;
using attn_test::bits16;
using attn_test::DeviceBuf;

namespace {

// Per lane and value: (row, col) of A (16x16), B (k x n, 16x8), C (16x8), from CuTe.
struct MmaMaps {
  int a[32][8][2], b[32][4][2], c[32][4][2];
};

template <typename T>
__global__ void mma_with_maps(const MmaMaps* maps, const float* A, const float* B, const float* C,
                              float* D) {
  const int l = threadIdx.x;
  uint32_t a[4] = {}, b[2] = {};
  float c[4], d[4];
  for (int v = 0; v < 8; ++v)
    a[v / 2] |= uint32_t(bits16<T>(A[maps->a[l][v][0] * 16 + maps->a[l][v][1]])) << (16 * (v % 2));
  for (int v = 0; v < 4; ++v)
    b[v / 2] |= uint32_t(bits16<T>(B[maps->b[l][v][0] * 8 + maps->b[l][v][1]])) << (16 * (v % 2));
  for (int v = 0; v < 4; ++v) c[v] = C[maps->c[l][v][0] * 8 + maps->c[l][v][1]];
  attn::mma_m16n8k16<T>(d, a, b, c);
  for (int v = 0; v < 4; ++v) D[maps->c[l][v][0] * 8 + maps->c[l][v][1]] = d[v];
}

template <typename T>
void check_mma_against_cute() {
  DeviceBuf<MmaMaps> maps(1);
  for (int l = 0; l < 32; ++l) {
    for (int v = 0; v < 8; ++v)
      cute_oracle::mma_a(l, v, maps.ptr->a[l][v][0], maps.ptr->a[l][v][1]);
    for (int v = 0; v < 4; ++v) {
      cute_oracle::mma_b(l, v, maps.ptr->b[l][v][0], maps.ptr->b[l][v][1]);
      cute_oracle::mma_c(l, v, maps.ptr->c[l][v][0], maps.ptr->c[l][v][1]);
    }
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> u(-8, 8);
  DeviceBuf<float> A(256), B(128), C(128), D(128);
  for (int x = 0; x < 256; ++x) A.ptr[x] = float(u(rng));
  for (int x = 0; x < 128; ++x) B.ptr[x] = float(u(rng)), C.ptr[x] = float(u(rng));
  for (int x = 0; x < 128; ++x) D.ptr[x] = NAN;
  launch(mma_with_maps<T>, {dim3(1), dim3(32)}, static_cast<const MmaMaps*>(maps.ptr),
         static_cast<const float*>(A.ptr), static_cast<const float*>(B.ptr),
         static_cast<const float*>(C.ptr), D.ptr);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      float want = C.ptr[m * 8 + n];
      for (int k = 0; k < 16; ++k) want += A.ptr[m * 16 + k] * B.ptr[k * 8 + n];
      INFO("m " << m << " n " << n);
      REQUIRE(D.ptr[m * 8 + n] == want);  // NaN if CuTe's C layout misses an element
    }
}

}  // namespace

TEST_CASE("oracle: mma.m16n8k16 fragments agree with CuTe's SM80 atoms", "[ptx][cute]") {
  REQUIRE(cute_oracle::all_mma_atoms_agree());
  check_mma_against_cute<__half>();
  check_mma_against_cute<__nv_bfloat16>();
}

namespace {
template <int N, bool Trans>
__global__ void ldmatrix_rows(uint32_t* out) {
  uint16_t* smem = attn::shared_memory<uint16_t>();
  for (int c = 0; c < 8; ++c) smem[threadIdx.x * 8 + c] = uint16_t(100 * threadIdx.x + c);
  __syncthreads();
  uint32_t r[N];
  attn::ldmatrix<N, Trans>(r, smem + threadIdx.x * 8);  // lane l supplies row l
  for (int j = 0; j < N; ++j) out[threadIdx.x * N + j] = r[j];
}

template <int N, bool Trans>
void check_ldmatrix_against_cute() {
  DeviceBuf<uint32_t> out(32 * N);
  launch(ldmatrix_rows<N, Trans>, {dim3(1), dim3(32), 32 * 16}, out.ptr);
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < N; ++j)
      for (int h = 0; h < 2; ++h) {
        int src = -1, col = -1;
        cute_oracle::ldmatrix(N, Trans, l, j, h, src, col);
        INFO("x" << N << (Trans ? ".trans" : "") << " lane " << l << " reg " << j << " half " << h);
        REQUIRE(src >= 0);
        REQUIRE(((out.ptr[l * N + j] >> (16 * h)) & 0xffff) == uint32_t(100 * src + col));
      }
}
}  // namespace

TEST_CASE("oracle: ldmatrix agrees with CuTe's SM75 LDSM atoms", "[ptx][cute]") {
  check_ldmatrix_against_cute<1, false>();
  check_ldmatrix_against_cute<2, false>();
  check_ldmatrix_against_cute<4, false>();
  check_ldmatrix_against_cute<1, true>();
  check_ldmatrix_against_cute<2, true>();
  check_ldmatrix_against_cute<4, true>();
}

// ---- Hopper: GMMA layouts, descriptors and swizzles against CuTe's SM90 definitions -------------

namespace {

// Shared addresses of every element of A (64 x 64) and B (64 x 64, rows = n) per k-block, and the
// descriptors, all from CuTe (make_gmma_desc over its canonical layout atoms).
struct GmmaMaps {
  uint32_t a[4][64][16], b[4][64][16];
  uint64_t da[4], db[4];
  int c[128][32][2];  // accumulator value v of thread t: (m, n), N = 64
  int ar[128][8][2];  // register-A value v of thread t: (m, k)
};

template <bool TransA, bool TransB, bool ARegs>
__global__ void gmma_with_maps(const GmmaMaps* maps, const float* A, const float* B, float* D) {
  auto* smem = attn::shared_memory<unsigned char>();
  for (int x = threadIdx.x; x < 4 * 64 * 16; x += 128) {
    const int kb = x / 1024, r = x / 16 % 64, k = x % 16;
    const uint16_t a = bits16<__half>(A[r * 64 + 16 * kb + k]);
    const uint16_t b = bits16<__half>(B[r * 64 + 16 * kb + k]);
    std::memcpy(smem + maps->a[kb][r][k], &a, 2);
    std::memcpy(smem + maps->b[kb][r][k], &b, 2);
  }
  attn::fence_proxy_async_shared();
  __syncthreads();
  const int t = threadIdx.x;
  float d[32];
  uint32_t a_frags[4][4] = {};  // A's registers stay untouched until the wait retires the wgmmas
  attn::wgmma_fence();
  for (int kb = 0; kb < 4; ++kb) {
    if constexpr (ARegs) {
      uint32_t(&a)[4] = a_frags[kb];
      for (int v = 0; v < 8; ++v)
        a[v / 2] |=
            uint32_t(bits16<__half>(A[maps->ar[t][v][0] * 64 + 16 * kb + maps->ar[t][v][1]]))
            << (16 * (v % 2));
      attn::wgmma_rs<64, __half, TransB>(d, a, maps->db[kb], kb > 0);
    } else {
      attn::wgmma_ss<64, __half, TransA, TransB>(d, maps->da[kb], maps->db[kb], kb > 0);
    }
  }
  attn::wgmma_commit();
  attn::wgmma_wait<0>();
  for (int v = 0; v < 32; ++v) D[maps->c[t][v][0] * 64 + maps->c[t][v][1]] = d[v];
}

template <bool TransA, bool TransB, bool ARegs>
void check_gmma_against_cute(int span) {
  DeviceBuf<GmmaMaps> maps(1);
  GmmaMaps& M = *maps.ptr;
  for (int kb = 0; kb < 4; ++kb) {
    M.da[kb] = cute_oracle::gmma_operand(TransA, span, kb, 0, M.a[kb]);
    M.db[kb] = cute_oracle::gmma_operand(TransB, span, kb, 16384, M.b[kb]);
  }
  for (int t = 0; t < 128; ++t) {
    for (int v = 0; v < 32; ++v) cute_oracle::gmma_c(64, t, v, M.c[t][v][0], M.c[t][v][1]);
    for (int v = 0; v < 8; ++v) cute_oracle::gmma_a_regs(t, v, M.ar[t][v][0], M.ar[t][v][1]);
  }
  std::mt19937 rng(span + 2 * TransA + TransB);
  std::uniform_int_distribution<int> u(-4, 4);
  DeviceBuf<float> A(64 * 64), B(64 * 64), D(64 * 64);
  for (int x = 0; x < 64 * 64; ++x) A.ptr[x] = float(u(rng)), B.ptr[x] = float(u(rng));
  launch(gmma_with_maps<TransA, TransB, ARegs>, {dim3(1), dim3(128), 32768},
         static_cast<const GmmaMaps*>(maps.ptr), static_cast<const float*>(A.ptr),
         static_cast<const float*>(B.ptr), D.ptr);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      float want = 0;
      for (int k = 0; k < 64; ++k) want += A.ptr[m * 64 + k] * B.ptr[n * 64 + k];
      INFO("span " << span << (TransA ? " A MN" : " A K") << (ARegs ? " (regs)" : "")
                   << (TransB ? " B MN" : " B K") << ": m " << m << " n " << n);
      REQUIRE(D.ptr[m * 64 + n] == want);
    }
}

__global__ void make_desc(uint64_t* out) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  out[0] = attn::make_wgmma_desc(smem + 1024, 16, 1024, attn::WgmmaSwizzle::b128);
  out[1] = attn::make_wgmma_desc(smem + 48 * 1024 + 32, 2048, 256, attn::WgmmaSwizzle::b64);
  out[2] = attn::make_wgmma_desc(smem + 208 * 1024 + 16, 128, 4096, attn::WgmmaSwizzle::b32);
  out[3] = attn::make_wgmma_desc(smem, 128, 256, attn::WgmmaSwizzle::none);
}

}  // namespace

TEST_CASE("oracle: wgmma reads CuTe's canonical GMMA layouts through CuTe's descriptors",
          "[ptx][cute][sm90]") {
  for (int span : {0, 32, 64, 128}) {
    check_gmma_against_cute<false, false, false>(span);
    check_gmma_against_cute<false, true, false>(span);
    check_gmma_against_cute<true, false, false>(span);
    check_gmma_against_cute<true, true, false>(span);
    check_gmma_against_cute<false, false, true>(span);  // register A: ALayout_64x16 of the RS atom
    check_gmma_against_cute<false, true, true>(span);
  }
}

TEST_CASE("oracle: the GMMA accumulator layout of ptx.h is CuTe's CLayout_64xN",
          "[ptx][cute][sm90]") {
  for (int N : {64, 128, 256})
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < N / 2; ++i) {
        int m = -1, n = -1;
        cute_oracle::gmma_c(N, t, i, m, n);
        const int w = t / 32, g = t % 32 / 4, q = t % 4;
        INFO("N " << N << " thread " << t << " value " << i);
        REQUIRE(m == 16 * w + g + 8 * ((i / 2) % 2));
        REQUIRE(n == 8 * (i / 4) + 2 * q + i % 2);
      }
}

TEST_CASE("oracle: wgmma descriptor fields are CuTe's GmmaDescriptor", "[ptx][cute][sm90]") {
  DeviceBuf<uint64_t> out(4);
  launch(make_desc, {dim3(1), dim3(1), 227 * 1024}, out.ptr);
  CHECK(out.ptr[0] == cute_oracle::gmma_desc_fields(1024, 16, 1024, 0, 1));
  CHECK(out.ptr[1] == cute_oracle::gmma_desc_fields(48 * 1024 + 32, 2048, 256, 0, 2));
  CHECK(out.ptr[2] == cute_oracle::gmma_desc_fields(208 * 1024 + 16, 128, 4096, 0, 3));
  CHECK(out.ptr[3] == cute_oracle::gmma_desc_fields(0, 128, 256, 0, 0));
}

TEST_CASE("oracle: the TMA and GMMA swizzles are CuTe's Swizzle<B,4,3>", "[ptx][cute][sm90]") {
  for (auto sw : {simt::TmaSwizzle::b32, simt::TmaSwizzle::b64, simt::TmaSwizzle::b128})
    for (uint32_t a = 0; a < 16384; ++a) {
      INFO("B " << int(sw) << " address " << a);
      REQUIRE(simt::swizzle_address(a, sw) == cute_oracle::swizzle(int(sw), a));
    }
}
