// The Hopper PTX wrappers (common/ptx.h) on the CPU backend, each against the definition of its
// instruction in the PTX ISA on small exact cases, and the bugs each check exists for, planted in
// test kernels (never in the steps): a wrong parity, a missing wait, a missing fence, an
// over-subscribed register pool. tests/test_ptx_oracle.cpp checks the layouts against CuTe.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/arch.h"
#include "common/ptx.h"
#include "common/simt/memory.h"
#include "common/tensor_map.h"
#include "tests/simt_buffer.h"

using attn::launch;
using attn_test::bits16;
using attn_test::DeviceBuf;
using Catch::Contains;

namespace {

uint64_t* bar_at(int offset) {
  return reinterpret_cast<uint64_t*>(attn::shared_memory<unsigned char>() + offset);
}

// ---- mbarrier -----------------------------------------------------------------------------------

// 64 threads, 3 phases: each thread writes its slot, arrives, waits on the phase's parity, then
// reads every slot. Records the arrive tokens and the sums.
__global__ void mbarrier_phases(uint64_t* tokens, int* sums) {
  int* slots = attn::shared_memory<int>() + 16;
  uint64_t* bar = bar_at(0);
  if (threadIdx.x == 0) attn::mbarrier_init(bar, 64);
  __syncthreads();
  for (int phase = 0; phase < 3; ++phase) {
    slots[phase * 64 + threadIdx.x] = phase * 1000 + int(threadIdx.x);
    tokens[threadIdx.x * 3 + phase] = attn::mbarrier_arrive(bar);
    attn::mbarrier_wait_parity(bar, phase & 1);
    int s = 0;
    for (int t = 0; t < 64; ++t) s += slots[phase * 64 + t];
    sums[threadIdx.x * 3 + phase] = s;
  }
}

}  // namespace

TEST_CASE("sm90: mbarrier phases complete on the last arrival and flip the parity", "[ptx][sm90]") {
  DeviceBuf<uint64_t> tokens(64 * 3);
  DeviceBuf<int> sums(64 * 3);
  for (const char* sched : {"forward", "reverse", "random:7"}) {
    simt::set_schedule(simt::parse_schedule(sched));
    launch(mbarrier_phases, {dim3(1), dim3(64), 16 * 4 + 3 * 64 * 4}, tokens.ptr, sums.ptr);
    for (int t = 0; t < 64; ++t)
      for (int phase = 0; phase < 3; ++phase) {
        INFO(sched << " thread " << t << " phase " << phase);
        CHECK(tokens.ptr[t * 3 + phase] == uint64_t(phase));
        CHECK(sums.ptr[t * 3 + phase] == phase * 1000 * 64 + 63 * 64 / 2);
      }
  }
  simt::set_schedule(simt::Schedule{});
}

namespace {
__global__ void mbarrier_misuse(int which) {
  uint64_t* bar = bar_at(0);
  attn::mbarrier_init(bar, 1);
  if (which == 0) {  // a fresh barrier: parity 1 (the phase "before" phase 0) counts as complete
    attn::mbarrier_wait_parity(bar, 1);
    return;
  }
  if (which == 1) {  // more arrivals than the phase expects
    attn::mbarrier_arrive_expect_tx(bar, 64);
    attn::mbarrier_arrive(bar);
  }
  if (which == 2) {  // waits for a phase that cannot complete: one arrival short
    attn::mbarrier_label(bar, "full[0]");
    attn::mbarrier_expect_tx(bar, 48);
    attn::mbarrier_wait_parity(bar, 0);
  }
  if (which == 3) {  // never initialised (a label alone does not initialise it)
    attn::mbarrier_label(bar + 1, "empty");
    attn::mbarrier_arrive(bar + 1);
  }
}
}  // namespace

TEST_CASE("sm90: mbarrier misuse is reported with the kernel line", "[ptx][sm90]") {
  launch(mbarrier_misuse, {dim3(1), dim3(1), 64}, 0);
  CHECK_THROWS_WITH(launch(mbarrier_misuse, {dim3(1), dim3(1), 64}, 1),
                    Contains("more arrivals than expected") && Contains("test_ptx_sm90.cpp"));
  CHECK_THROWS_WITH(
      launch(mbarrier_misuse, {dim3(1), dim3(1), 64}, 2),
      Contains("deadlock") && Contains("mbarrier.try_wait.parity 0 on mbarrier full[0]") &&
          Contains("mbarrier full[0] at shared 0x0") &&
          Contains("phase 0 (parity 0) waits for 1 arrival(s) and 48 transaction byte(s)") &&
          Contains("test_ptx_sm90.cpp"));
  CHECK_THROWS_WITH(launch(mbarrier_misuse, {dim3(1), dim3(1), 64}, 3),
                    Contains("used before mbarrier.init"));
}

// ---- TMA ----------------------------------------------------------------------------------------

namespace {

// One thread loads the box at (c0, c1[, c2, c3]) and records shared memory before and after the
// wait (the destination is poison until the phase completes).
__global__ void tma_box(const attn::TensorMap map, int rank, int c0, int c1, int c2, int c3,
                        uint32_t bytes, unsigned char* before, unsigned char* after) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 32768);
  attn::mbarrier_init(bar, 1);
  attn::mbarrier_arrive_expect_tx(bar, bytes);
  if (rank == 2) attn::tma_load_2d(smem, &map, bar, c0, c1);
  if (rank == 3) attn::tma_load_3d(smem, &map, bar, c0, c1, c2);
  if (rank == 4) attn::tma_load_4d(smem, &map, bar, c0, c1, c2, c3);
  std::memcpy(before, smem, bytes);
  attn::mbarrier_wait_parity(bar, 0);
  std::memcpy(after, smem, bytes);
}

// The swizzle of the PTX ISA's TMA description: the 16-byte chunk index within each 128-byte row
// XORed with the row index modulo the span's chunk count (rows of 128 bytes, 1024-byte pattern).
uint32_t swizzled(uint32_t a, int span) {
  if (span == 0) return a;
  const uint32_t row = (a / 128) % 8, chunk = (a / 16) % 8;
  const uint32_t mask = uint32_t(span / 16 - 1);
  return (a & ~uint32_t(0x70)) | (((chunk ^ (row & mask)) & 7) << 4);
}

void check_tma(int rank, const uint64_t* dims, const uint32_t* box, const int* coords,
               simt::TmaSwizzle sw) {
  uint64_t total = 1;
  for (int i = 0; i < rank; ++i) total *= dims[i];
  DeviceBuf<uint16_t> g(total, "tensor");
  for (uint64_t x = 0; x < total; ++x) g.ptr[x] = uint16_t(x + 1);  // never 0: zero = OOB fill
  attn::TensorMapSpec s;
  s.dtype = attn::TmaDtype::u16;
  s.rank = uint32_t(rank);
  s.global = g.ptr;
  uint64_t stride = 2;
  for (int i = 0; i < rank; ++i) {
    s.dims[i] = dims[i];
    s.strides[i] = stride;
    stride *= dims[i];
    s.box[i] = box[i];
  }
  s.swizzle = sw;
  const simt::TensorMap map = attn::encode_tensor_map_cpu(s);
  uint32_t elems = 1;
  for (int i = 0; i < rank; ++i) elems *= box[i];
  const uint32_t bytes = elems * 2;
  DeviceBuf<unsigned char> before(bytes), after(bytes);
  launch(tma_box, {dim3(1), dim3(1), 32768 + 64}, map, rank, coords[0], coords[1],
         rank > 2 ? coords[2] : 0, rank > 3 ? coords[3] : 0, bytes, before.ptr, after.ptr);
  const int span = sw == simt::TmaSwizzle::none ? 0 : 16 << int(sw);
  for (uint32_t e = 0; e < elems; ++e) {
    uint32_t rest = e;
    bool inside = true;
    uint64_t gi = 0, gstride = 1;
    for (int i = 0; i < rank; ++i) {
      const int64_t x = coords[i] + int64_t(rest % box[i]);
      rest /= box[i];
      inside &= x >= 0 && x < int64_t(dims[i]);
      gi += uint64_t(x) * gstride;
      gstride *= dims[i];
    }
    const uint16_t want = inside ? g.ptr[gi] : 0;
    uint16_t got, poison;
    const uint32_t at = swizzled(2 * e, span);
    std::memcpy(&got, after.ptr + at, 2);
    std::memcpy(&poison, before.ptr + at, 2);
    INFO("rank " << rank << " swizzle " << span << " element " << e);
    REQUIRE(got == want);
    REQUIRE(poison == 0xFFFF);
  }
}

}  // namespace

TEST_CASE("sm90: TMA tile loads: dense box, dimension 0 innermost, zero outside", "[ptx][sm90]") {
  const uint64_t d2[] = {40, 20};
  const uint32_t b2[] = {16, 8};
  for (const auto& c : std::vector<std::vector<int>>{{0, 0}, {32, 16}, {-8, -3}, {24, 0}})
    check_tma(2, d2, b2, c.data(), simt::TmaSwizzle::none);
  const uint64_t d3[] = {24, 5, 3};
  const uint32_t b3[] = {8, 4, 2};
  const int c3[] = {16, 3, 2};
  check_tma(3, d3, b3, c3, simt::TmaSwizzle::none);
  const uint64_t d4[] = {16, 3, 4, 2};
  const uint32_t b4[] = {16, 2, 2, 2};
  const int c4[] = {0, 2, -1, 1};
  check_tma(4, d4, b4, c4, simt::TmaSwizzle::none);
}

TEST_CASE("sm90: TMA element strides load every n-th row of the box", "[ptx][sm90]") {
  DeviceBuf<uint16_t> g(16 * 12);
  for (int x = 0; x < 16 * 12; ++x) g.ptr[x] = uint16_t(x + 1);
  attn::TensorMapSpec s;
  s.dtype = attn::TmaDtype::u16;
  s.global = g.ptr, s.dims[0] = 16, s.dims[1] = 12, s.strides[1] = 32;
  s.box[0] = 16, s.box[1] = 8, s.element_strides[1] = 3;  // ceil(8 / 3) = 3 rows: 1, 4, 7
  const simt::TensorMap map = attn::encode_tensor_map_cpu(s);
  DeviceBuf<unsigned char> before(96), after(96);
  launch(tma_box, {dim3(1), dim3(1), 32768 + 64}, map, 2, 0, 1, 0, 0, 96u, before.ptr, after.ptr);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 16; ++c) {
      uint16_t got;
      std::memcpy(&got, after.ptr + 2 * (r * 16 + c), 2);
      REQUIRE(got == g.ptr[(1 + 3 * r) * 16 + c]);
    }
}

TEST_CASE("sm90: TMA swizzle 32B, 64B and 128B map each 16-byte chunk exactly", "[ptx][sm90]") {
  const uint64_t dims[] = {200, 40};
  for (auto sw : {simt::TmaSwizzle::b32, simt::TmaSwizzle::b64, simt::TmaSwizzle::b128}) {
    const uint32_t box[] = {uint32_t(8 << int(sw)), 24};  // the inner extent is the span
    const int in[] = {8, 4}, edge[] = {200 - int(box[0]) / 2, 30};
    check_tma(2, dims, box, in, sw);
    check_tma(2, dims, box, edge, sw);
  }
}

TEST_CASE("sm90: tensor maps are validated as cuTensorMapEncodeTiled does", "[ptx][sm90]") {
  alignas(64) static uint16_t data[64 * 64];
  auto ok = [] {
    attn::TensorMapSpec s;
    s.dtype = attn::TmaDtype::f16;
    s.rank = 2;
    s.global = data;
    s.dims[0] = 64, s.dims[1] = 64;
    s.strides[1] = 128;
    s.box[0] = 64, s.box[1] = 32;
    s.swizzle = simt::TmaSwizzle::b128;
    return s;
  };
  CHECK(attn::validate(ok()) == "");
  auto s = ok();
  s.global = data + 1;
  CHECK_THAT(attn::validate(s), Contains("16-byte aligned"));
  s = ok(), s.strides[1] = 120;
  CHECK_THAT(attn::validate(s), Contains("multiple of 16"));
  s = ok(), s.strides[1] = uint64_t(1) << 40;
  CHECK_THAT(attn::validate(s), Contains("2^40"));
  s = ok(), s.box[1] = 257;
  CHECK_THAT(attn::validate(s), Contains("1..256"));
  s = ok(), s.box[0] = 12;
  CHECK_THAT(attn::validate(s), Contains("not a multiple of 16"));
  s = ok(), s.swizzle = simt::TmaSwizzle::b64;
  CHECK_THAT(attn::validate(s), Contains("exceeds the 64-byte swizzle span"));
  s = ok(), s.element_strides[1] = 9;
  CHECK_THAT(attn::validate(s), Contains("element stride"));
  s = ok(), s.rank = 6;
  CHECK_THAT(attn::validate(s), Contains("rank"));
  s = ok(), s.dims[1] = 0;
  CHECK_THROWS_WITH(attn::encode_tensor_map_cpu(s), Contains("1..2^32"));
  // The GPU encoder validates the same way before it asks the driver; without a driver it fails
  // with a message instead of crashing.
  alignas(64) static unsigned char cu_map[128];
  CHECK_THROWS_WITH(attn::encode_tensor_map_gpu(cu_map, s), Contains("1..2^32"));
  try {
    attn::encode_tensor_map_gpu(cu_map, ok());
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Contains("tensor map"));
  }
}

namespace {
// Planted bugs: the consumer reads before waiting, waits on the wrong parity, or the producer
// expects fewer bytes than its box.
__global__ void tma_bug(const attn::TensorMap map, int which, uint16_t* out) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 4096);
  if (threadIdx.x == 0) attn::mbarrier_init(bar, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    attn::mbarrier_arrive_expect_tx(bar, which == 2 ? 256 : 512);
    attn::tma_load_2d(smem, &map, bar, 0, 0);
  }
  if (which == 0) attn::mbarrier_wait_parity(bar, 0);  // correct
  if (which == 1) attn::mbarrier_wait_parity(bar, 1);  // wrong parity: returns at once
  // which == 3: no wait at all
  std::memcpy(out + threadIdx.x * 8, smem + threadIdx.x * 16, 16);
}
}  // namespace

TEST_CASE("sm90: a read before the TMA lands sees poison (wrong parity, missing wait)",
          "[ptx][sm90]") {
  DeviceBuf<uint16_t> g(16 * 16), out(32 * 8);
  for (int x = 0; x < 256; ++x) g.ptr[x] = uint16_t(x);
  attn::TensorMapSpec s;
  s.rank = 2, s.global = g.ptr, s.dims[0] = 16, s.dims[1] = 16, s.strides[1] = 32;
  s.box[0] = 16, s.box[1] = 16;
  const simt::TensorMap map = attn::encode_tensor_map_cpu(s);
  launch(tma_bug, {dim3(1), dim3(32), 4096 + 8}, map, 0, out.ptr);
  for (int x = 0; x < 256; ++x) REQUIRE(out.ptr[x] == x);
  for (int which : {1, 3}) {
    launch(tma_bug, {dim3(1), dim3(32), 4096 + 8}, map, which, out.ptr);
    for (int x = 0; x < 256; ++x) REQUIRE(out.ptr[x] == 0xFFFF);
  }
  CHECK_THROWS_WITH(launch(tma_bug, {dim3(1), dim3(32), 4096 + 8}, map, 2, out.ptr),
                    Contains("transaction count underflow") && Contains("test_ptx_sm90.cpp"));
}

namespace {
// A ring slot reused: the second load into the same destination is read without waiting for its
// phase (parity 1). The slot must read as poison, not as the first load's still-present data.
__global__ void tma_reuse(const attn::TensorMap map, uint16_t* first, uint16_t* early) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 4096);
  attn::mbarrier_init(bar, 1);
  for (int phase = 0; phase < 2; ++phase) {
    attn::mbarrier_arrive_expect_tx(bar, 512);
    attn::tma_load_2d(smem, &map, bar, 0, phase);
    if (phase == 0) attn::mbarrier_wait_parity(bar, 0);
    std::memcpy(phase == 0 ? first : early, smem, 512);
  }
}
}  // namespace

TEST_CASE("sm90: a TMA destination is poison from issue until it lands (a reused ring slot)",
          "[ptx][sm90]") {
  DeviceBuf<uint16_t> g(16 * 17), first(256), early(256);
  for (int x = 0; x < 16 * 17; ++x) g.ptr[x] = uint16_t(x);
  attn::TensorMapSpec s;
  s.rank = 2, s.global = g.ptr, s.dims[0] = 16, s.dims[1] = 17, s.strides[1] = 32;
  s.box[0] = 16, s.box[1] = 16;
  const simt::TensorMap map = attn::encode_tensor_map_cpu(s);
  launch(tma_reuse, {dim3(1), dim3(1), 4096 + 8}, map, first.ptr, early.ptr);
  for (int x = 0; x < 256; ++x) {
    REQUIRE(first.ptr[x] == x);
    REQUIRE(early.ptr[x] == 0xFFFF);
  }
}

// ---- cp.async.mbarrier.arrive.noinc -------------------------------------------------------------

namespace {
__global__ void cp_async_arrive(const unsigned char* src, unsigned char* before,
                                unsigned char* after) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  uint64_t* bar = bar_at(1024);
  if (threadIdx.x == 0) attn::mbarrier_init(bar, 32);  // .noinc: the copies' arrivals are counted
  __syncthreads();
  attn::cp_async_16(smem + 16 * threadIdx.x, src + 16 * threadIdx.x, 16);
  attn::cp_async_mbarrier_arrive_noinc(bar);
  std::memcpy(before + 16 * threadIdx.x, smem + 16 * threadIdx.x, 16);
  attn::mbarrier_wait_parity(bar, 0);
  std::memcpy(after, smem, 512);  // every thread's copy has landed
}
}  // namespace

TEST_CASE("sm90: cp.async.mbarrier.arrive.noinc: copies arrive on the barrier when they land",
          "[ptx][sm90]") {
  DeviceBuf<unsigned char> src(512), before(512), after(512);
  for (int x = 0; x < 512; ++x) src.ptr[x] = uint8_t(x * 7 + 1);
  launch(cp_async_arrive, {dim3(1), dim3(32), 1032}, static_cast<const unsigned char*>(src.ptr),
         before.ptr, after.ptr);
  for (int x = 0; x < 512; ++x) {
    REQUIRE(before.ptr[x] == 0xFF);
    REQUIRE(after.ptr[x] == src.ptr[x]);
  }
}

// ---- wgmma --------------------------------------------------------------------------------------

namespace {

enum class AFrom { smem_k, smem_mn, regs };

struct WgmmaCase {
  int n;
  AFrom a;
  bool b_mn;  // B MN-major (transposed)
  int span;   // swizzle span in bytes (0: none)
  int K;      // total K (a multiple of 16)
};

attn::WgmmaSwizzle desc_swizzle(int span) {
  return span == 0    ? attn::WgmmaSwizzle::none
         : span == 32 ? attn::WgmmaSwizzle::b32
         : span == 64 ? attn::WgmmaSwizzle::b64
                      : attn::WgmmaSwizzle::b128;
}

// Operands are loaded by TMA into the canonical layouts (PTX ISA, "Shared Memory Matrix Layout"):
// K-major: boxes of (span/2 or 8 elements of K) x rows; MN-major: boxes of (span/2 or 8 elements of
// MN) x K. `k_major_map` / `mn_major_map` describe the global matrix (rows x K, or K x rows).
struct Operand {
  attn::TensorMap map;
  int rows;
  bool mn;
};

// Bytes of one box and the count of boxes for an operand.
__device__ int box_elems(const WgmmaCase& c) {
  return c.span ? c.span / 2 : 8;
}

__device__ void load_operand(const Operand& op, const WgmmaCase& c, unsigned char* dst,
                             uint64_t* bar) {
  const int w = box_elems(c);
  const int boxes = op.mn ? op.rows / w : c.K / w;
  const int box_bytes = (op.mn ? c.K : op.rows) * w * 2;
  for (int j = 0; j < boxes; ++j) attn::tma_load_2d(dst + j * box_bytes, &op.map, bar, j * w, 0);
}

// Descriptor of k-block kb (16 elements of K) of an operand loaded by load_operand.
__device__ uint64_t operand_desc(const Operand& op, const WgmmaCase& c, unsigned char* base,
                                 int kb) {
  const int w = box_elems(c);
  const auto sw = desc_swizzle(c.span);
  if (!op.mn) {
    const int box_bytes = op.rows * w * 2;
    if (c.span == 0)  // core matrices: 8 rows of 16 B; LBO = next 8 of K, SBO = next 8 rows
      return attn::make_wgmma_desc(base + 2 * kb * box_bytes, box_bytes, 128, sw);
    return attn::make_wgmma_desc(base + (kb * 32 / c.span) * box_bytes + (kb * 32) % c.span, 16,
                                 8 * c.span, sw);
  }
  const int box_bytes = c.K * w * 2;
  if (c.span == 0)  // LBO = next 8 of K, SBO = next 8 of MN
    return attn::make_wgmma_desc(base + kb * 256, 128, box_bytes, sw);
  return attn::make_wgmma_desc(base + kb * 16 * c.span, box_bytes, 8 * c.span, sw);
}

template <typename T, int N>
__global__ void wgmma_kernel(const WgmmaCase c, const Operand A, const Operand B, const float* Ag,
                             float* D, float* early) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  unsigned char* sa = smem;
  unsigned char* sb = smem + 64 * 1024;
  uint64_t* bar = bar_at(128 * 1024);
  if (threadIdx.x == 0) {
    attn::mbarrier_init(bar, 1);
    attn::mbarrier_arrive_expect_tx(bar, uint32_t((c.a == AFrom::regs ? 0 : 64) + N) * c.K * 2);
    if (c.a != AFrom::regs) load_operand(A, c, sa, bar);
    load_operand(B, c, sb, bar);
  }
  __syncthreads();
  attn::mbarrier_wait_parity(bar, 0);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, t = l % 4;
  float d[N / 2];
  for (float& x : d) x = 1.0f;  // scale_d = false on the first k-block ignores it
  // A from registers: one fragment per k-block, all live until the wait (a wgmma's register
  // operands may not be written before the wait_group that retires it).
  uint32_t a_frags[8][4] = {};
  attn::wgmma_fence();
  for (int kb = 0; kb < c.K / 16; ++kb) {
    const uint64_t db = operand_desc(B, c, sb, kb);
    if (c.a == AFrom::regs) {
      uint32_t(&a)[4] = a_frags[kb];
      for (int i = 0; i < 8; ++i) {
        const int m = 16 * w + g + 8 * ((i / 2) % 2), k = 16 * kb + 2 * t + i % 2 + 8 * (i / 4);
        a[i / 2] |= uint32_t(bits16<T>(Ag[m * c.K + k])) << (16 * (i % 2));
      }
      if (c.b_mn)
        attn::wgmma_rs<N, T, true>(d, a, db, kb > 0);
      else
        attn::wgmma_rs<N, T, false>(d, a, db, kb > 0);
    } else {
      const uint64_t da = operand_desc(A, c, sa, kb);
      if (c.a == AFrom::smem_mn && c.b_mn) attn::wgmma_ss<N, T, true, true>(d, da, db, kb > 0);
      if (c.a == AFrom::smem_mn && !c.b_mn) attn::wgmma_ss<N, T, true, false>(d, da, db, kb > 0);
      if (c.a == AFrom::smem_k && c.b_mn) attn::wgmma_ss<N, T, false, true>(d, da, db, kb > 0);
      if (c.a == AFrom::smem_k && !c.b_mn) attn::wgmma_ss<N, T, false, false>(d, da, db, kb > 0);
    }
  }
  attn::wgmma_commit();
  early[threadIdx.x] = d[0];  // between issue and the retiring wait: poison
  attn::wgmma_wait<0>();
  for (int i = 0; i < N / 2; ++i)
    D[(16 * w + g + 8 * ((i / 2) % 2)) * N + 8 * (i / 4) + 2 * t + i % 2] = d[i];
}

template <typename T, int N>
void check_wgmma(AFrom a_from, bool b_mn, int span) {
  const int K = span == 0 ? 32 : std::max(32, span / 2);
  const WgmmaCase c{N, a_from, b_mn, span, K};
  std::mt19937 rng(N + span + 7 * int(a_from) + 3 * b_mn);
  std::uniform_int_distribution<int> u(-4, 4);
  // Plain matrices: A is 64 x K, B is N x K (D = A B^T), small integers (exact in f32).
  std::vector<float> A(64 * K), B(N * K);
  for (float& x : A) x = float(u(rng));
  for (float& x : B) x = float(u(rng));
  // Global copies in the operand's storage order: K-major rows x K, MN-major K x rows.
  auto global = [&](const std::vector<float>& M, int rows, bool mn, const char* label) {
    auto* g = new DeviceBuf<uint16_t>(size_t(rows) * K, label);
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < K; ++k) g->ptr[mn ? k * rows + r : r * K + k] = bits16<T>(M[r * K + k]);
    return std::unique_ptr<DeviceBuf<uint16_t>>(g);
  };
  const bool a_mn = a_from == AFrom::smem_mn;
  auto ga = global(A, 64, a_mn, "A"), gb = global(B, N, b_mn, "B");
  auto map = [&](const DeviceBuf<uint16_t>& g, int rows, bool mn) {
    attn::TensorMapSpec s;
    s.dtype = std::is_same_v<T, __half> ? attn::TmaDtype::f16 : attn::TmaDtype::bf16;
    s.global = g.ptr;
    s.dims[0] = uint64_t(mn ? rows : K), s.dims[1] = uint64_t(mn ? K : rows);
    s.strides[1] = s.dims[0] * 2;
    s.box[0] = span ? uint32_t(span / 2) : 8u;
    s.box[1] = uint32_t(mn ? K : rows);
    s.swizzle = span == 0    ? simt::TmaSwizzle::none
                : span == 32 ? simt::TmaSwizzle::b32
                : span == 64 ? simt::TmaSwizzle::b64
                             : simt::TmaSwizzle::b128;
    return attn::encode_tensor_map_cpu(s);
  };
  const Operand opa{map(*ga, 64, a_mn), 64, a_mn}, opb{map(*gb, N, b_mn), N, b_mn};
  DeviceBuf<float> Ag(A.size()), D(64 * N), early(128);
  std::copy(A.begin(), A.end(), Ag.ptr);
  launch(wgmma_kernel<T, N>, {dim3(1), dim3(128), 128 * 1024 + 64}, c, opa, opb,
         static_cast<const float*>(Ag.ptr), D.ptr, early.ptr);
  for (int t = 0; t < 128; ++t) REQUIRE(std::isnan(early.ptr[t]));
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      float want = 0;
      for (int k = 0; k < K; ++k) want += A[m * K + k] * B[n * K + k];
      INFO("N " << N << " A " << int(a_from) << " B " << (b_mn ? "MN" : "K") << "-major, span "
                << span << ": m " << m << " n " << n);
      REQUIRE(D.ptr[m * N + n] == want);
    }
}

}  // namespace

TEST_CASE("sm90: wgmma m64nNk16 = A B over every operand form and swizzle", "[ptx][sm90]") {
  for (int span : {0, 32, 64, 128})
    for (AFrom a : {AFrom::smem_k, AFrom::smem_mn, AFrom::regs})
      for (bool b_mn : {false, true}) {
        check_wgmma<__half, 64>(a, b_mn, span);
        check_wgmma<__nv_bfloat16, 64>(a, b_mn, span);
      }
  check_wgmma<__half, 128>(AFrom::smem_k, false, 128);
  check_wgmma<__half, 256>(AFrom::smem_k, true, 128);
  check_wgmma<__nv_bfloat16, 8>(AFrom::regs, false, 32);
  check_wgmma<__nv_bfloat16, 136>(AFrom::smem_mn, false, 64);
}

namespace {
// Operands written by ordinary stores, with (which 0) or without (which 1) the proxy fence; which 2
// skips wgmma.fence; which 3 leaves one warp out of the warpgroup's wgmma.
__global__ void wgmma_fences(int which, float* out) {
  auto* s = attn::shared_memory<uint16_t>();
  for (int x = threadIdx.x; x < (64 + 8) * 16; x += blockDim.x) s[x] = 0x3C00;  // 1.0 in fp16
  if (which != 1) attn::fence_proxy_async_shared();
  __syncthreads();
  // K-major, no swizzle: core matrices of 8 rows x 16 B; LBO (next 8 of K) 128 B, SBO 256 B.
  const uint64_t da = attn::make_wgmma_desc(s, 128, 256, attn::WgmmaSwizzle::none);
  const uint64_t db = attn::make_wgmma_desc(s + 64 * 16, 128, 256, attn::WgmmaSwizzle::none);
  float d[4] = {};
  if (which == 3 && threadIdx.x >= 96) return;
  if (which != 2) attn::wgmma_fence();
  attn::wgmma_ss<8, __half>(d, da, db, false);
  attn::wgmma_commit();
  attn::wgmma_wait<0>();
  out[threadIdx.x] = d[0];
}
}  // namespace

TEST_CASE("sm90: generic stores need fence.proxy.async before wgmma; wgmma needs wgmma.fence",
          "[ptx][sm90]") {
  DeviceBuf<float> out(128);
  launch(wgmma_fences, {dim3(1), dim3(128), (64 + 8) * 32}, 0, out.ptr);
  for (int t = 0; t < 128; ++t) REQUIRE(out.ptr[t] == 16.0f);
  CHECK_THROWS_WITH(launch(wgmma_fences, {dim3(1), dim3(128), (64 + 8) * 32}, 1, out.ptr),
                    Contains("fence.proxy.async.shared::cta") && Contains("test_ptx_sm90.cpp"));
  CHECK_THROWS_WITH(launch(wgmma_fences, {dim3(1), dim3(128), (64 + 8) * 32}, 2, out.ptr),
                    Contains("no wgmma.fence"));
  CHECK_THROWS_WITH(launch(wgmma_fences, {dim3(1), dim3(128), (64 + 8) * 32}, 3, out.ptr),
                    Contains("deadlock") &&
                        Contains("warpgroup 0: 96 of 128 threads arrived at wgmma.mma_async"));
}

namespace {
// wgmma_desc_plus(desc of p, n) is the descriptor of p + n, for each swizzle and offset.
__global__ void desc_plus_matches(int* mismatches) {
  auto* s = attn::shared_memory<unsigned char>();
  for (auto sw : {attn::WgmmaSwizzle::none, attn::WgmmaSwizzle::b128, attn::WgmmaSwizzle::b32})
    for (uint32_t n = 0; n < 200 * 1024; n += 16 * 97) {
      const uint64_t moved = attn::wgmma_desc_plus(attn::make_wgmma_desc(s, 16, 1024, sw), n);
      *mismatches += moved != attn::make_wgmma_desc(s + n, 16, 1024, sw);
    }
}
}  // namespace

TEST_CASE("sm90: a wgmma descriptor moves through shared memory by addition", "[ptx][sm90]") {
  DeviceBuf<int> mismatches(1);
  mismatches.ptr[0] = 0;
  launch(desc_plus_matches, {dim3(1), dim3(1), 200 * 1024 + 16}, mismatches.ptr);
  CHECK(mismatches.ptr[0] == 0);
}

namespace {
// Accumulators a wgmma owns until the wait that retires it (PTX ISA: accessing them before that
// wait is undefined): which 0 waits first; which 1 writes an accumulator before the wait (the
// masking of a softmax that skipped its wait).
__global__ void wgmma_owned_registers(int which, float* out) {
  auto* s = attn::shared_memory<uint16_t>();
  for (int x = threadIdx.x; x < (64 + 8) * 16; x += blockDim.x) s[x] = 0x3C00;
  attn::fence_proxy_async_shared();
  __syncthreads();
  const uint64_t db = attn::make_wgmma_desc(s + 64 * 16, 128, 256, attn::WgmmaSwizzle::none);
  float d[4] = {};
  uint32_t a[4] = {0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
  attn::wgmma_fence();
  attn::wgmma_rs<8, __half>(d, a, db, false);
  attn::wgmma_commit();
  if (which == 1) d[threadIdx.x % 4] = -INFINITY;
  attn::wgmma_wait<0>();
  out[threadIdx.x] = d[0];
}
}  // namespace

TEST_CASE("sm90: a wgmma's accumulators are its own until its wait_group", "[ptx][sm90]") {
  DeviceBuf<float> out(128);
  const attn::LaunchConfig cfg{dim3(1), dim3(128), (64 + 8) * 32};
  launch(wgmma_owned_registers, cfg, 0, out.ptr);
  for (int t = 0; t < 128; ++t) REQUIRE(out.ptr[t] == 16.0f);
  CHECK_THROWS_WITH(
      launch(wgmma_owned_registers, cfg, 1, out.ptr),
      Contains("was written before this wait retired it") && Contains("test_ptx_sm90.cpp"));
}

namespace {
// Three groups chained on one accumulator: each wgmma adds 16 (ones times ones over k = 16); the
// accumulator stays poison until the wait that retires the newest of them.
__global__ void wgmma_chain(float* out) {
  auto* s = attn::shared_memory<uint16_t>();
  for (int x = threadIdx.x; x < (64 + 8) * 16; x += blockDim.x) s[x] = 0x3C00;
  attn::fence_proxy_async_shared();
  __syncthreads();
  const uint64_t da = attn::make_wgmma_desc(s, 128, 256, attn::WgmmaSwizzle::none);
  const uint64_t db = attn::make_wgmma_desc(s + 64 * 16, 128, 256, attn::WgmmaSwizzle::none);
  float d[4] = {};
  attn::wgmma_fence();
  for (int g = 0; g < 3; ++g) {
    attn::wgmma_ss<8, __half>(d, da, db, g > 0);
    attn::wgmma_commit();
  }
  attn::wgmma_wait<2>();
  out[threadIdx.x * 3] = d[0];
  attn::wgmma_wait<1>();
  out[threadIdx.x * 3 + 1] = d[0];
  attn::wgmma_wait<0>();
  out[threadIdx.x * 3 + 2] = d[0];
}
}  // namespace

TEST_CASE("sm90: wgmma chained across groups: the newest result, at the wait that retires it",
          "[ptx][sm90]") {
  DeviceBuf<float> out(3 * 128);
  launch(wgmma_chain, {dim3(1), dim3(128), (64 + 8) * 32}, out.ptr);
  for (int t = 0; t < 128; ++t) {
    CHECK(std::isnan(out.ptr[3 * t]));
    CHECK(std::isnan(out.ptr[3 * t + 1]));
    CHECK(out.ptr[3 * t + 2] == 48.0f);
  }
}

// ---- setmaxnreg ---------------------------------------------------------------------------------

namespace {
// Warpgroup 0 is the producer, warpgroup 1 the consumer (an FA3-style split).
__global__ void registers(int which, int* out) {
  const int wg = threadIdx.x / 128;
  if (which == 0) {  // fits: 128 - 24 registers freed per thread, 232 - 128 taken
    if (wg == 0)
      attn::setmaxnreg_dec<24>();
    else
      attn::setmaxnreg_inc<232>();
  }
  if (which == 1 && wg == 1) attn::setmaxnreg_inc<240>();  // nobody gave registers back
  if (which == 2 && wg == 1) {                             // not warpgroup-uniform
    if (threadIdx.x < 160)
      attn::setmaxnreg_inc<232>();
    else
      attn::setmaxnreg_inc<240>();
  }
  if (which == 3) simt::setmaxnreg(true, 100, simt::where_t::current());  // not a multiple of 8
  out[threadIdx.x] = 1;
}
}  // namespace

TEST_CASE("sm90: setmaxnreg validates its operand and the block's register pool", "[ptx][sm90]") {
  DeviceBuf<int> out(256);
  simt::set_entry_registers(128);  // the pool: 128 x 256 registers
  launch(registers, {dim3(1), dim3(256)}, 0, out.ptr);
  CHECK_THROWS_WITH(launch(registers, {dim3(1), dim3(256)}, 1, out.ptr),
                    Contains("deadlock") && Contains("register pool: 0 of 32768 registers free") &&
                        Contains("setmaxnreg.inc"));
  CHECK_THROWS_WITH(launch(registers, {dim3(1), dim3(256)}, 2, out.ptr),
                    Contains("not warpgroup-uniform"));
  CHECK_THROWS_WITH(launch(registers, {dim3(1), dim3(256)}, 3, out.ptr),
                    Contains("multiple of 8 in 24..256"));
  simt::set_entry_registers(0);
}

// ---- elect.sync and named barriers -------------------------------------------------------------

namespace {
__global__ void elect(uint32_t mask, int* out) {
  if (!(mask >> threadIdx.x & 1u)) return;
  out[threadIdx.x] = attn::elect_one(mask) ? 1 : 0;
}

// Warp 0 produces into shared memory and signals with bar.arrive (no wait); warps 1-2 consume
// after bar.sync on the same barrier; then they signal back that the slot is free.
__global__ void producer_consumer(int* out) {
  int* slot = attn::shared_memory<int>();
  for (int round = 0; round < 3; ++round) {
    if (threadIdx.x < 32) {
      if (round > 0) attn::named_barrier_sync(2, 96);  // wait until the slot is free
      slot[threadIdx.x] = 100 * round + int(threadIdx.x);
      attn::named_barrier_arrive(1, 96);
    } else {
      attn::named_barrier_sync(1, 96);
      out[round * 64 + threadIdx.x - 32] = slot[threadIdx.x % 32];
      if (round < 2) attn::named_barrier_arrive(2, 96);
    }
  }
}
__global__ void bad_named_barrier() {
  attn::named_barrier_sync(1, 48);
}
}  // namespace

TEST_CASE("sm90: elect.sync picks one lane of the mask", "[ptx][sm90]") {
  DeviceBuf<int> out(32);
  for (uint32_t mask : {0xffffffffu, 0x000000f0u, 0x80000000u, 0x00ff0f00u}) {
    for (int l = 0; l < 32; ++l) out.ptr[l] = -1;
    launch(elect, {dim3(1), dim3(32)}, mask, out.ptr);
    int leaders = 0;
    for (int l = 0; l < 32; ++l) {
      INFO("mask " << mask << " lane " << l);
      if (mask >> l & 1u) {
        leaders += out.ptr[l];
        CHECK(out.ptr[l] == (l == std::countr_zero(mask) ? 1 : 0));
      } else {
        CHECK(out.ptr[l] == -1);
      }
    }
    CHECK(leaders == 1);
  }
}

TEST_CASE("sm90: bar.arrive signals without waiting, bar.sync waits for the count", "[ptx][sm90]") {
  DeviceBuf<int> out(3 * 64);
  for (const char* sched : {"forward", "reverse", "random:3"}) {
    simt::set_schedule(simt::parse_schedule(sched));
    launch(producer_consumer, {dim3(1), dim3(96), 128}, out.ptr);
    for (int r = 0; r < 3; ++r)
      for (int t = 0; t < 64; ++t) REQUIRE(out.ptr[r * 64 + t] == 100 * r + t % 32);
  }
  simt::set_schedule(simt::Schedule{});
  CHECK_THROWS_WITH(launch(bad_named_barrier, {dim3(1), dim3(64)}),
                    Contains("not a positive multiple of 32"));
}

TEST_CASE("sm90: the CPU backend presents itself as sm_90a", "[ptx][sm90]") {
  auto cpu = attn::make_cpu_backend();
  const attn::ComputeCapability cc = attn::compute_capability(*cpu);
  CHECK(cc.is_sm90a());
  CHECK(cc.at_least(8, 0));
}

// ---- A producer/consumer ring, as step 5 will build it, with planted bugs -----------------------

namespace {

constexpr int kStages = 2, kTiles = 4;
// The lines of the ring kernel's wgmma and of its early "empty" arrival (bug 4), for the reports.
constexpr int kRingWgmmaLine = 819, kRingEarlyArriveLine = 823;

// Warpgroup 0 produces (one elected thread issues the TMA loads), warpgroup 1 consumes with wgmma:
// D (64 x 64) = sum over tiles t of A_t B_t^T, each A_t, B_t a 64 x 64 K-major tile in 128-byte
// swizzle. full[s]: the producer's arrive.expect_tx plus the TMA bytes; empty[s]: the 128 consumer
// threads release the slot. bug 1: the producer waits on "empty" with the consumer's parity (its
// first pass then blocks forever); bug 2: the consumer waits on the wrong parity (its wgmma reads
// a TMA destination that has not landed); bug 3: the
// producer never waits on "empty" (it refills slots still being read); bug 4: the consumer releases
// the slot before the wgmma reading it has been waited for.
__global__ void ring(const attn::TensorMap mA, const attn::TensorMap mB, int bug, float* D) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  auto* full = reinterpret_cast<uint64_t*>(smem + kStages * 16384);
  uint64_t* empty = full + kStages;
  if (threadIdx.x == 0)
    for (int s = 0; s < kStages; ++s) {
      attn::mbarrier_init(&full[s], 1);
      attn::mbarrier_init(&empty[s], 128);
      attn::mbarrier_label(&full[s], s == 0 ? "full[0]" : "full[1]");
      attn::mbarrier_label(&empty[s], s == 0 ? "empty[0]" : "empty[1]");
    }
  __syncthreads();
  if (threadIdx.x < 128) {  // producer warpgroup
    if (threadIdx.x < 32 && attn::elect_one()) {
      for (int t = 0; t < kTiles; ++t) {
        const int s = t % kStages;
        const uint32_t phase = (t / kStages) & 1;
        if (bug != 3) attn::mbarrier_wait_parity(&empty[s], bug == 1 ? phase : phase ^ 1);
        attn::mbarrier_arrive_expect_tx(&full[s], 16384);
        attn::tma_load_2d(smem + s * 16384, &mA, &full[s], 64 * t, 0);
        attn::tma_load_2d(smem + s * 16384 + 8192, &mB, &full[s], 64 * t, 0);
      }
    }
    return;
  }
  float d[32];
  for (int t = 0; t < kTiles; ++t) {
    const int s = t % kStages;
    const uint32_t phase = (t / kStages) & 1;
    attn::mbarrier_wait_parity(&full[s], bug == 2 ? phase ^ 1 : phase);
    attn::wgmma_fence();
    for (int kb = 0; kb < 4; ++kb) {
      const uint64_t da =
          attn::make_wgmma_desc(smem + s * 16384 + 32 * kb, 16, 1024, attn::WgmmaSwizzle::b128);
      const uint64_t db = attn::make_wgmma_desc(smem + s * 16384 + 8192 + 32 * kb, 16, 1024,
                                                attn::WgmmaSwizzle::b128);
      attn::wgmma_ss<64, __half>(d, da, db, t > 0 || kb > 0);
      static_assert(kRingWgmmaLine == __LINE__ - 1);
    }
    attn::wgmma_commit();
    if (bug == 4) attn::mbarrier_arrive(&empty[s]);
    static_assert(kRingEarlyArriveLine == __LINE__ - 1);
    attn::wgmma_wait<0>();
    if (bug != 4) attn::mbarrier_arrive(&empty[s]);
  }
  const int w = threadIdx.x / 32 - 4, l = threadIdx.x % 32, g = l / 4, q = l % 4;
  for (int i = 0; i < 32; ++i)
    D[(16 * w + g + 8 * ((i / 2) % 2)) * 64 + 8 * (i / 4) + 2 * q + i % 2] = d[i];
}

}  // namespace

TEST_CASE("sm90: a TMA + mbarrier ring feeding wgmma, and the bugs it is built to catch",
          "[ptx][sm90]") {
  constexpr int K = 64 * kTiles;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> u(-2, 2);
  DeviceBuf<uint16_t> A(64 * K, "A"), B(64 * K, "B");
  std::vector<float> a(64 * K), b(64 * K);
  for (int x = 0; x < 64 * K; ++x) {
    a[x] = float(u(rng)), b[x] = float(u(rng));
    A.ptr[x] = bits16<__half>(a[x]), B.ptr[x] = bits16<__half>(b[x]);
  }
  auto map = [&](const uint16_t* g) {
    attn::TensorMapSpec s;
    s.global = g, s.dims[0] = K, s.dims[1] = 64, s.strides[1] = 2 * K;
    s.box[0] = 64, s.box[1] = 64, s.swizzle = simt::TmaSwizzle::b128;
    return attn::encode_tensor_map_cpu(s);
  };
  const simt::TensorMap mA = map(A.ptr), mB = map(B.ptr);
  DeviceBuf<float> D(64 * 64);
  const attn::LaunchConfig cfg{dim3(1), dim3(256), kStages * 16384 + 64};
  for (const char* sched : {"forward", "reverse", "random:11"}) {
    simt::set_schedule(simt::parse_schedule(sched));
    launch(ring, cfg, mA, mB, 0, D.ptr);
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < 64; ++n) {
        float want = 0;
        for (int k = 0; k < K; ++k) want += a[m * K + k] * b[n * K + k];
        INFO(sched << " m " << m << " n " << n);
        REQUIRE(D.ptr[m * 64 + n] == want);
      }
    CHECK_THROWS_WITH(
        launch(ring, cfg, mA, mB, 1, D.ptr),
        Contains("deadlock") && Contains("mbarrier.try_wait.parity 0 on mbarrier empty[0]"));
    // The consumer reads a slot before its TMA landed, or before the producer even issued it.
    CHECK_THROWS_WITH(
        launch(ring, cfg, mA, mB, 2, D.ptr),
        ((Contains("is the destination of the TMA load issued at") && Contains("has not landed")) ||
         Contains("nothing has written since the block started")) &&
            Contains("test_ptx_sm90.cpp:" + std::to_string(kRingWgmmaLine)));
    bool wrong = false;
    try {
      launch(ring, cfg, mA, mB, 3, D.ptr);
      for (int x = 0; x < 64 * 64; ++x) wrong |= std::isnan(D.ptr[x]);
    } catch (const simt::KernelError& e) {
      const std::string what = e.what();
      wrong = what.find("more arrivals") != std::string::npos ||
              what.find("has not landed") != std::string::npos;
      INFO(e.what());
    }
    CHECK(wrong);
    // The slot released before the wgmma reading it retired: reported at the arrival.
    CHECK_THROWS_WITH(launch(ring, cfg, mA, mB, 4, D.ptr),
                      Contains("mbarrier.arrive at tests/test_ptx_sm90.cpp:" +
                               std::to_string(kRingEarlyArriveLine)) &&
                          Contains("mbarrier empty[0]") &&
                          Contains("the wgmma issued at tests/test_ptx_sm90.cpp:" +
                                   std::to_string(kRingWgmmaLine) + " still reads"));
  }
  simt::set_schedule(simt::Schedule{});
}

// ---- What the GPU does not promise: orders between threads, and the ends of async operations ----
// Each kernel below is correct for which == 0 and plants one bug otherwise. The CPU backend must
// report the bug although, run as fibers, each of them happens to compute the right answer.

namespace {
// The kernel lines the reports below must name (each checked by a static_assert at the line).
constexpr int kGroupBarrierLine = 924, kInitUseLine = 948, kFenceReadLine = 976,
              kEndsIssueLine = 998, kEndsWait1Line = 1004, kEndsWait0Line = 1008,
              kOverDeliveryLine = 1022;

// Two groups of four warps, each meant to synchronise among itself. PTX ISA, "bar, barrier": a
// barrier counts arriving threads by whole warps and completes when `count` have arrived, so two
// groups of 128 threads on one id with count 128 complete it with any four warps, mixed.
// which 1: both groups on barrier 1; which 2: warps 0-3 signal barrier 3 twice (bar.arrive) before
// warps 4-7 reach it, so that one generation counts a warp twice.
__global__ void barrier_groups(int which, int* out) {
  int* s = attn::shared_memory<int>();
  const int group = threadIdx.x / 128;
  s[threadIdx.x] = int(threadIdx.x);
  if (which == 2) {
    if (group == 0) {
      attn::named_barrier_arrive(3, 256);
      attn::named_barrier_arrive(3, 256);
    } else {
      attn::named_barrier_sync(3, 256);
    }
    return;
  }
  attn::named_barrier_sync(which == 1 ? 1 : 1 + group, 128);
  static_assert(kGroupBarrierLine == __LINE__ - 1);
  int sum = 0;
  for (int t = 0; t < 128; ++t) sum += s[128 * group + t];
  out[threadIdx.x] = sum;
}

// PTX ISA, "mbarrier.init": the initialisation is a write to shared memory like any other, and
// the other threads may use the barrier only once it is visible to them: a barrier between them
// (CUTLASS: fence_barrier_init, then a cluster or block barrier). which 0: __syncthreads; which 1:
// none; which 2: the order comes to warp 1 through a named barrier that warp 0 arrives at after
// the initialisation, and to warp 0's other lanes through __syncwarp (which orders memory).
__global__ void init_order(int which, int* out) {
  uint64_t* bar = bar_at(0);
  if (threadIdx.x == 0) attn::mbarrier_init(bar, 64);
  if (which == 0) __syncthreads();
  if (which == 2) {
    if (threadIdx.x < 32) {
      __syncwarp();
      attn::named_barrier_arrive(1, 64);
    } else {
      attn::named_barrier_sync(1, 64);
    }
  }
  attn::mbarrier_arrive(bar);
  static_assert(kInitUseLine == __LINE__ - 1);
  attn::mbarrier_wait_parity(bar, 0);
  out[threadIdx.x] = 1;
}

// Warpgroup 1 writes the ones that warpgroup 0's wgmma reads (B, 8 x 16), with the proxy fence.
// PTX ISA, "Asynchronous proxy" and "wgmma": generic stores must be fenced
// (fence.proxy.async.shared::cta) and the fence ordered before the wgmma by synchronisation.
// which 0: __syncthreads after the fence; which 1: none; warpgroup 0 waits only in setmaxnreg.inc
// for the registers warpgroup 1 gives back after its fence, which is no synchronisation.
__global__ void fence_order(int which, float* out) {
  auto* s = attn::shared_memory<uint16_t>();
  const int wg = threadIdx.x / 128;
  if (wg == 1) {
    for (int x = threadIdx.x - 128; x < (64 + 8) * 16; x += 128) s[x] = 0x3C00;
    attn::fence_proxy_async_shared();
  }
  if (which == 0) __syncthreads();
  if (wg == 1) {
    attn::setmaxnreg_dec<24>();
    return;
  }
  attn::setmaxnreg_inc<232>();
  const uint64_t da = attn::make_wgmma_desc(s, 128, 256, attn::WgmmaSwizzle::none);
  const uint64_t db = attn::make_wgmma_desc(s + 64 * 16, 128, 256, attn::WgmmaSwizzle::none);
  float d[4] = {};
  attn::wgmma_fence();
  attn::wgmma_ss<8, __half>(d, da, db, false);
  static_assert(kFenceReadLine == __LINE__ - 1);
  attn::wgmma_commit();
  attn::wgmma_wait<0>();
  out[threadIdx.x] = d[0];
}

// One warpgroup, B = ones written and fenced first. PTX ISA, "wgmma.mma_async": the accumulators
// and the registers holding A are not to be accessed until a wgmma.wait_group retires the wgmma.
// which 1: A's registers rewritten before the wait; which 2: the thread exits with the group in
// flight; which 3: wait_group 1 leaves the only group in flight, then exits; which 4: B read from
// shared memory nothing ever wrote.
__global__ void wgmma_ends(int which, float* out) {
  auto* s = attn::shared_memory<uint16_t>();
  for (int x = threadIdx.x; x < 8 * 16; x += 128) s[x] = 0x3C00;
  attn::fence_proxy_async_shared();
  __syncthreads();
  const uint64_t db =
      attn::make_wgmma_desc(s + (which == 4 ? 1024 : 0), 128, 256, attn::WgmmaSwizzle::none);
  float d[4] = {};
  uint32_t a[4] = {0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
  attn::wgmma_fence();
  attn::wgmma_rs<8, __half>(d, a, db, false);
  static_assert(kEndsIssueLine == __LINE__ - 1);
  attn::wgmma_commit();
  if (which == 1) a[1] = 0;
  if (which == 2) return;
  if (which == 3) {
    attn::wgmma_wait<1>();
    static_assert(kEndsWait1Line == __LINE__ - 1);
    return;
  }
  attn::wgmma_wait<0>();
  static_assert(kEndsWait0Line == __LINE__ - 1);
  out[threadIdx.x] = d[0];
}

// PTX ISA, "mbarrier: tx-count": a phase completes when its pending arrivals and its tx-count
// reach zero; expect_tx announces bytes. which 1 announces the box's elements instead of its bytes,
// so that the second box over-delivers.
__global__ void tma_over_delivery(const attn::TensorMap map, int which) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 8192);
  attn::mbarrier_init(bar, 1);
  attn::mbarrier_arrive_expect_tx(bar, which == 1 ? 2 * 64 * 16 : 2 * 64 * 16 * 2);
  attn::tma_load_2d(smem, &map, bar, 0, 0);
  attn::tma_load_2d(smem + 4096, &map, bar, 0, 16);
  static_assert(kOverDeliveryLine == __LINE__ - 1);
  attn::mbarrier_wait_parity(bar, 0);
}

// PTX ISA, "cp.async.mbarrier.arrive": a thread's copies arrive on the barrier when they land.
// which 1 reads them (ldmatrix) without waiting on the barrier: the report names the barrier.
__global__ void noinc_unwaited(const unsigned char* src, int which, uint32_t* out) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  uint64_t* bar = bar_at(1024);
  if (threadIdx.x == 0) {
    attn::mbarrier_init(bar, 32);
    attn::mbarrier_label(bar, "full");
  }
  __syncthreads();
  attn::cp_async_16(smem + 16 * threadIdx.x, src + 16 * threadIdx.x, 16);
  attn::cp_async_mbarrier_arrive_noinc(bar);
  if (which == 0) attn::mbarrier_wait_parity(bar, 0);
  uint32_t r[4];
  attn::ldmatrix<4>(r, smem + 16 * threadIdx.x);
  out[threadIdx.x] = r[0];
}

// Warpgroup 0 retires a wgmma while warpgroup 1 waits for it at a named barrier: once warpgroup 1
// waits, no thread can run, and the wait_group, which sits out scheduling passes, must still end.
__global__ void wait_beside_barrier(float* out) {
  auto* s = attn::shared_memory<uint16_t>();
  for (int x = threadIdx.x; x < 8 * 16; x += 256) s[x] = 0x3C00;
  attn::fence_proxy_async_shared();
  __syncthreads();
  if (threadIdx.x < 128) {
    const uint64_t db = attn::make_wgmma_desc(s, 128, 256, attn::WgmmaSwizzle::none);
    float d[4] = {};
    uint32_t a[4] = {0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
    attn::wgmma_fence();
    attn::wgmma_rs<8, __half>(d, a, db, false);
    attn::wgmma_commit();
    attn::named_barrier_sync(2, 128);  // the warpgroup's threads reach the wait together
    attn::wgmma_wait<0>();
    out[threadIdx.x] = d[0];
  }
  attn::named_barrier_sync(1, 256);
}

}  // namespace

TEST_CASE("sm90: a named barrier belongs to one group of warps", "[ptx][sm90]") {
  DeviceBuf<int> out(256);
  const attn::LaunchConfig cfg{dim3(1), dim3(256), 256 * 4};
  const std::string line = "tests/test_ptx_sm90.cpp:" + std::to_string(kGroupBarrierLine);
  for (const char* sched : {"forward", "reverse", "random:5", "greedy"}) {
    INFO(sched);
    simt::set_schedule(simt::parse_schedule(sched));
    launch(barrier_groups, cfg, 0, out.ptr);
    for (int t = 0; t < 256; ++t) REQUIRE(out.ptr[t] == 128 * 127 / 2 + 128 * 128 * (t / 128));
    // Separate generations (forward) or mixed ones (random): either way, reported at the line.
    CHECK_THROWS_WITH(launch(barrier_groups, cfg, 1, out.ptr),
                      Contains("bar.sync 1 (128 threads) completed at " + line) &&
                          (Contains("two groups of warps share this barrier id") ||
                           Contains("more warps than 128 threads make")));
    CHECK_THROWS_WITH(launch(barrier_groups, cfg, 2, out.ptr),
                      Contains("arrives a second time in one generation of barrier 3"));
  }
  simt::set_schedule(simt::Schedule{});
}

TEST_CASE("sm90: an mbarrier is used only after its initialisation is ordered before the use",
          "[ptx][sm90]") {
  DeviceBuf<int> out(64);
  const attn::LaunchConfig cfg{dim3(1), dim3(64), 64};
  for (const char* sched : {"forward", "reverse", "random:5", "greedy"}) {
    INFO(sched);
    simt::set_schedule(simt::parse_schedule(sched));
    launch(init_order, cfg, 0, out.ptr);
    launch(init_order, cfg, 2, out.ptr);
    // Before the initialisation happened (reverse, random), or after it, unordered (forward).
    CHECK_THROWS_WITH(
        launch(init_order, cfg, 1, out.ptr),
        Contains("mbarrier.arrive at tests/test_ptx_sm90.cpp:" + std::to_string(kInitUseLine)) &&
            ((Contains("initialised by thread 0 at tests/test_ptx_sm90.cpp:") &&
              Contains("which nothing orders after that initialisation")) ||
             Contains("used before mbarrier.init")));
  }
  simt::set_schedule(simt::Schedule{});
}

TEST_CASE("sm90: a proxy fence must be ordered before the wgmma that reads the stores",
          "[ptx][sm90]") {
  DeviceBuf<float> out(256);
  const attn::LaunchConfig cfg{dim3(1), dim3(256), (64 + 8) * 32};
  simt::set_entry_registers(128);
  for (const char* sched : {"forward", "reverse", "random:5", "greedy"}) {
    INFO(sched);
    simt::set_schedule(simt::parse_schedule(sched));
    launch(fence_order, cfg, 0, out.ptr);
    for (int t = 0; t < 128; ++t) REQUIRE(out.ptr[t] == 16.0f);
    // setmaxnreg.inc waited for warpgroup 1's .dec, which came after its fence: no order.
    CHECK_THROWS_WITH(
        launch(fence_order, cfg, 1, out.ptr),
        Contains("wgmma.mma_async at tests/test_ptx_sm90.cpp:" + std::to_string(kFenceReadLine)) &&
            Contains("does not happen before this wgmma in every thread of warpgroup 0"));
  }
  simt::set_entry_registers(0);
  simt::set_schedule(simt::Schedule{});
}

TEST_CASE("sm90: a wgmma owns its A registers until retired, and every wgmma is retired",
          "[ptx][sm90]") {
  DeviceBuf<float> out(128);
  const attn::LaunchConfig cfg{dim3(1), dim3(128), 4096};
  const std::string file = "tests/test_ptx_sm90.cpp:";
  launch(wgmma_ends, cfg, 0, out.ptr);
  for (int t = 0; t < 128; ++t) REQUIRE(out.ptr[t] == 16.0f);
  CHECK_THROWS_WITH(launch(wgmma_ends, cfg, 1, out.ptr),
                    Contains("wgmma.wait_group at " + file + std::to_string(kEndsWait0Line)) &&
                        Contains("the A fragment registers of the wgmma issued at " + file +
                                 std::to_string(kEndsIssueLine) + " were written"));
  CHECK_THROWS_WITH(launch(wgmma_ends, cfg, 2, out.ptr),
                    Contains("exits with 1 wgmma group(s) not retired") &&
                        Contains("the newest issued at " + file + std::to_string(kEndsIssueLine)));
  CHECK_THROWS_WITH(launch(wgmma_ends, cfg, 3, out.ptr),
                    Contains("exits with 1 wgmma group(s) not retired") &&
                        Contains("the last wgmma.wait_group, at " + file +
                                 std::to_string(kEndsWait1Line) + ", left them in flight"));
  CHECK_THROWS_WITH(launch(wgmma_ends, cfg, 4, out.ptr),
                    Contains("wgmma.mma_async at " + file + std::to_string(kEndsIssueLine)) &&
                        Contains("nothing has written since the block started"));
}

TEST_CASE("sm90: a wgmma.wait_group ends while every other thread waits for it at a barrier",
          "[ptx][sm90]") {
  DeviceBuf<float> out(128);
  const attn::LaunchConfig cfg{dim3(1), dim3(256), 4096};
  for (const char* sched : {"forward", "reverse", "random:5", "greedy"}) {
    INFO(sched);
    simt::set_schedule(simt::parse_schedule(sched));
    launch(wait_beside_barrier, cfg, out.ptr);
    for (int t = 0; t < 128; ++t) REQUIRE(out.ptr[t] == 16.0f);
  }
  simt::set_schedule(simt::Schedule{});
}

TEST_CASE("sm90: TMA bytes beyond what expect_tx announced are reported at the TMA",
          "[ptx][sm90]") {
  DeviceBuf<uint16_t> g(64 * 32, "G");
  for (int x = 0; x < 64 * 32; ++x) g.ptr[x] = uint16_t(x);
  attn::TensorMapSpec s;
  s.global = g.ptr, s.dims[0] = 64, s.dims[1] = 32, s.strides[1] = 128;
  s.box[0] = 64, s.box[1] = 16, s.swizzle = simt::TmaSwizzle::b128;
  const simt::TensorMap map = attn::encode_tensor_map_cpu(s);
  const attn::LaunchConfig cfg{dim3(1), dim3(1), 8192 + 64};
  launch(tma_over_delivery, cfg, map, 0);
  CHECK_THROWS_WITH(
      launch(tma_over_delivery, cfg, map, 1),
      Contains("cp.async.bulk.tensor at tests/test_ptx_sm90.cpp:" +
               std::to_string(kOverDeliveryLine)) &&
          Contains("this box's 2048 bytes bring the phase's copies in flight to 4096 bytes, "
                   "more than the 2048 its expect_tx announced"));
}

TEST_CASE("sm90: a copy that lands through an mbarrier is named with it when read too early",
          "[ptx][sm90]") {
  DeviceBuf<unsigned char> src(512);
  DeviceBuf<uint32_t> out(32);
  for (int x = 0; x < 512; ++x) src.ptr[x] = uint8_t(x);
  const attn::LaunchConfig cfg{dim3(1), dim3(32), 1032};
  launch(noinc_unwaited, cfg, static_cast<const unsigned char*>(src.ptr), 0, out.ptr);
  CHECK_THROWS_WITH(
      launch(noinc_unwaited, cfg, static_cast<const unsigned char*>(src.ptr), 1, out.ptr),
      Contains("has not landed (it lands when mbarrier full at shared 0x400 "
               "completes the phase"));
}

namespace {
// PTX ISA, "cp.async.bulk.tensor": the destination is written asynchronously, and complete-tx on
// the mbarrier is what makes the writes visible to the threads that observe the phase complete.
// which 1 waits on the other parity (it returns at once) and reads the box with ldmatrix, a
// generic-proxy read: the report names the TMA's line and the barrier it lands through.
__global__ void tma_ldmatrix(const attn::TensorMap map, int which, uint32_t* out) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 4096);
  if (threadIdx.x == 0) {
    attn::mbarrier_init(bar, 1);
    attn::mbarrier_label(bar, "box");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    attn::mbarrier_arrive_expect_tx(bar, 512);
    attn::tma_load_2d(smem, &map, bar, 0, 0);
  }
  constexpr int kTmaLine = __LINE__ - 2;
  attn::mbarrier_wait_parity(bar, which == 1 ? 1 : 0);
  uint32_t r[4];
  attn::ldmatrix<4>(r, smem + threadIdx.x % 16 * 32 + threadIdx.x / 16 * 16);
  for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = r[i];
  if (threadIdx.x == 0) out[128] = kTmaLine;
}
}  // namespace

TEST_CASE("sm90: an ldmatrix of a TMA destination before it lands names the TMA and its barrier",
          "[ptx][sm90]") {
  DeviceBuf<uint16_t> g(16 * 16);
  DeviceBuf<uint32_t> out(129);
  for (int x = 0; x < 256; ++x) g.ptr[x] = uint16_t(x);
  attn::TensorMapSpec s;
  s.rank = 2, s.global = g.ptr, s.dims[0] = 16, s.dims[1] = 16, s.strides[1] = 32;
  s.box[0] = 16, s.box[1] = 16;
  const simt::TensorMap map = attn::encode_tensor_map_cpu(s);
  const attn::LaunchConfig cfg{dim3(1), dim3(32), 4096 + 8};
  launch(tma_ldmatrix, cfg, map, 0, out.ptr);  // waited for: the box's values
  CHECK((out.ptr[0] & 0xFFFF) == 0);
  CHECK(out.ptr[0] >> 16 == 1);
  const std::string tma = "test_ptx_sm90.cpp:" + std::to_string(out.ptr[128]);
  CHECK_THROWS_WITH(launch(tma_ldmatrix, cfg, map, 1, out.ptr),
                    Contains("ldmatrix at") && Contains("TMA load (cp.async.bulk.tensor)") &&
                        Contains(tma + " has not landed") && Contains("mbarrier box") &&
                        Contains("a wait on the wrong parity"));
}

namespace {
// Two TMA loads in flight into one buffer: the PTX ISA orders neither write before the other, so
// what the buffer holds when both have landed is either box. which 1 waits for the first before
// issuing the second (a buffer refilled after its copy landed: fine).
__global__ void tma_twice(const attn::TensorMap map, int which) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 4096);
  attn::mbarrier_init(bar, 1);
  attn::mbarrier_arrive_expect_tx(bar, which == 1 ? 512 : 1024);
  attn::tma_load_2d(smem, &map, bar, 0, 0);
  if (which == 1) {
    attn::mbarrier_wait_parity(bar, 0);
    attn::mbarrier_arrive_expect_tx(bar, 512);
  }
  attn::tma_load_2d(smem, &map, bar, 0, 0);
  attn::mbarrier_wait_parity(bar, which == 1 ? 1 : 0);
}
}  // namespace

TEST_CASE("sm90: a TMA into a buffer whose last copy has not landed is reported", "[ptx][sm90]") {
  DeviceBuf<uint16_t> g(16 * 16);
  attn::TensorMapSpec s;
  s.rank = 2, s.global = g.ptr, s.dims[0] = 16, s.dims[1] = 16, s.strides[1] = 32;
  s.box[0] = 16, s.box[1] = 16;
  const simt::TensorMap map = attn::encode_tensor_map_cpu(s);
  const attn::LaunchConfig cfg{dim3(1), dim3(1), 4096 + 8};
  launch(tma_twice, cfg, map, 1);
  CHECK_THROWS_WITH(launch(tma_twice, cfg, map, 0),
                    Contains("cp.async.bulk.tensor at") && Contains("TMA load that thread 0") &&
                        Contains("two copies in flight into one buffer"));
}

namespace {
// PTX ISA, "cp.reduce.async.bulk": 64 floats of each block's shared memory added into one global
// vector. which 0: stored, fenced, a barrier, then thread 0 reduces, commits and waits (its
// writes complete). The bugs: 1, no proxy fence after the stores; 2, the other threads' stores
// and fences but no barrier before thread 31's bulk copy of them; 3, the source overwritten after
// wait_group.read 1 (which leaves the newest group free to read); 4, the thread exits without any
// wait; 5, a size that is not a multiple of 16.
__global__ void bulk_add(float* out, int which) {
  float* smem = attn::shared_memory<float>();
  const int t = threadIdx.x, issuer = which == 2 ? 31 : 0;
  if (t != issuer || which != 2) {
    smem[t] = float(blockIdx.x + 1) * float(t);
    smem[t + 32] = 1.0f;
    if (which != 1) attn::fence_proxy_async_shared();
  }
  if (which != 2) __syncthreads();
  if (t != issuer) return;
  attn::bulk_reduce_add_f32(out, smem, which == 5 ? 200 : which == 2 ? 64 : 256);
  attn::bulk_commit();
  if (which == 3) {
    attn::bulk_wait_read<1>();
    smem[0] = 7.0f;
    attn::bulk_wait<0>();
  } else if (which != 4) {
    attn::bulk_wait_read<0>();
    attn::bulk_wait<0>();
  }
}
}  // namespace

TEST_CASE("sm90: cp.reduce.async.bulk adds shared floats into global memory, and its misuses",
          "[ptx][sm90]") {
  DeviceBuf<float> out(64);
  for (int i = 0; i < 64; ++i) out.ptr[i] = 0.5f;
  const attn::LaunchConfig cfg{dim3(3), dim3(32), 64 * sizeof(float)};
  launch(bulk_add, cfg, out.ptr, 0);
  for (int i = 0; i < 32; ++i) CHECK(out.ptr[i] == 0.5f + 6.0f * float(i));  // (1 + 2 + 3) i
  for (int i = 32; i < 64; ++i) CHECK(out.ptr[i] == 3.5f);
  CHECK_THROWS_WITH(launch(bulk_add, cfg, out.ptr, 1),
                    Contains("cp.reduce.async.bulk at") && Contains("after the last "
                                                                    "fence.proxy.async"));
  CHECK_THROWS_WITH(launch(bulk_add, cfg, out.ptr, 2),
                    Contains("cp.reduce.async.bulk at") && Contains("does not happen before it"));
  CHECK_THROWS_WITH(launch(bulk_add, cfg, out.ptr, 3),
                    Contains("cp.async.bulk.wait_group at") &&
                        Contains("changed before this wait retired its read"));
  CHECK_THROWS_WITH(launch(bulk_add, cfg, out.ptr, 4),
                    Contains("exits with the bulk reduction issued at"));
  CHECK_THROWS_WITH(launch(bulk_add, cfg, out.ptr, 5),
                    Contains("size 200 bytes is not a positive multiple of 16"));
}
