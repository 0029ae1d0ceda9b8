// The CPU backend's mma and ldmatrix against CuTe's layout definitions (tests/cute_layouts.h):
// fragments are built and read back with CuTe's maps, never with the formulas the emulation
// uses, so the two cannot agree by sharing a mistake.
#include <catch2/catch.hpp>
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
