// The CPU SIMT backend's own semantics, each intrinsic against its definition (CUDA programming
// guide and PTX ISA), and its strictness: deadlocks, barrier misuse, races, out-of-bounds writes.
#include <catch2/catch.hpp>
// The kernels below are compiled by the host compiler against the SIMT backend.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/kernel.h"
#include "common/simt/launch.h"
#include "common/simt/memory.h"
#include "tests/simt_buffer.h"

using attn::launch;
using attn_test::DeviceBuf;

namespace {

// Device buffer on the CPU backend (guarded), filled from / read into a vector.
struct ScheduleGuard {
  explicit ScheduleGuard(const char* s) { simt::set_schedule(simt::parse_schedule(s)); }
  ~ScheduleGuard() { simt::set_schedule({}); }
};

// ---- Shuffles: every mode, width and operand, against the CUDA programming guide's wording ----

// CUDA: __shfl_sync reads lane srcLane % width of the caller's width-segment.
int expect_idx(int lane, int b, int w) {
  return (lane & ~(w - 1)) + (b % w);
}
// __shfl_up_sync: lane - delta, unless that leaves the segment (then the caller's own value).
int expect_up(int lane, int b, int w) {
  return (lane % w) >= b ? lane - b : lane;
}
// __shfl_down_sync: lane + delta, unless that leaves the segment.
int expect_down(int lane, int b, int w) {
  return (lane % w) + b < w ? lane + b : lane;
}
// __shfl_xor_sync: lane ^ laneMask; reading a later segment returns the caller's own value.
int expect_xor(int lane, int b, int w) {
  const int src = lane ^ b;
  return src < (lane & ~(w - 1)) + w ? src : lane;
}

constexpr int kWidths[] = {1, 2, 4, 8, 16, 32};

__global__ void shuffle_all(int* out) {
  const int lane = threadIdx.x;
  const int mine = 1000 + lane;
  int k = 0;
  for (int w : kWidths)
    for (int b = 0; b < 32; ++b) {
      out[(k++) * 32 + lane] = __shfl_sync(0xffffffffu, mine, b, w) - 1000;
      out[(k++) * 32 + lane] = __shfl_up_sync(0xffffffffu, mine, b, w) - 1000;
      out[(k++) * 32 + lane] = __shfl_down_sync(0xffffffffu, mine, b, w) - 1000;
      out[(k++) * 32 + lane] = __shfl_xor_sync(0xffffffffu, mine, b, w) - 1000;
    }
}

}  // namespace

TEST_CASE("simt: shuffles follow CUDA's definition at every width", "[simt]") {
  const int combos = 6 * 32 * 4;
  DeviceBuf<int> out(combos * 32, "out");
  launch(shuffle_all, {dim3(1), dim3(32)}, out.ptr);
  const auto r = out.get();
  int k = 0;
  for (int w : kWidths)
    for (int b = 0; b < 32; ++b)
      for (int mode = 0; mode < 4; ++mode, ++k)
        for (int lane = 0; lane < 32; ++lane) {
          const int want = mode == 0   ? expect_idx(lane, b, w)
                           : mode == 1 ? expect_up(lane, b, w)
                           : mode == 2 ? expect_down(lane, b, w)
                                       : expect_xor(lane, b, w);
          INFO("mode " << mode << " width " << w << " b " << b << " lane " << lane);
          REQUIRE(r[k * 32 + lane] == want);
        }
}

namespace {
__global__ void shuffle_types(double* d, __half* h) {
  const int lane = threadIdx.x;
  d[lane] = __shfl_xor_sync(0xffffffffu, lane + 0.25, 1);
  h[lane] = __shfl_down_sync(0xffffffffu, __float2half(float(lane)), 4);
}
}  // namespace

TEST_CASE("simt: 64-bit and half shuffles move whole values", "[simt]") {
  DeviceBuf<double> d(32, "d");
  DeviceBuf<__half> h(32, "h");
  launch(shuffle_types, {dim3(1), dim3(32)}, d.ptr, h.ptr);
  for (int lane = 0; lane < 32; ++lane) {
    CHECK(d.get()[lane] == (lane ^ 1) + 0.25);
    CHECK(__half2float(h.get()[lane]) == float(lane + 4 < 32 ? lane + 4 : lane));
  }
}

namespace {
__global__ void votes(unsigned* out) {
  const int lane = threadIdx.x % 32;
  const unsigned pred = lane % 3 == 0;
  out[threadIdx.x * 4 + 0] = __ballot_sync(0xffffffffu, pred);
  out[threadIdx.x * 4 + 1] = __any_sync(0xffffffffu, lane == 31);
  out[threadIdx.x * 4 + 2] = __all_sync(0xffffffffu, lane < 31);
  // A partial mask: the even lanes vote among themselves.
  out[threadIdx.x * 4 + 3] = lane % 2 == 0 ? __ballot_sync(0x55555555u, lane < 8) : 7u;
  __syncwarp();
}
}  // namespace

TEST_CASE("simt: ballot, any and all, with full and partial masks", "[simt]") {
  DeviceBuf<unsigned> out(64 * 4, "out");
  launch(votes, {dim3(1), dim3(64)}, out.ptr);
  const auto r = out.get();
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    CHECK(r[t * 4 + 0] == ballot);
    CHECK(r[t * 4 + 1] == 1u);
    CHECK(r[t * 4 + 2] == 0u);
    CHECK(r[t * 4 + 3] == ((t % 2 == 0) ? 0x55u : 7u));
  }
}

namespace {
__global__ void count_up(int* counter, float* fsum, int* mx, unsigned* cas) {
  atomicAdd(counter, 1);
  atomicAdd(fsum, 0.5f);
  atomicMax(mx, int(blockIdx.x * blockDim.x + threadIdx.x));
  if (threadIdx.x == 0) {
    unsigned old = atomicCAS(cas, 0u, blockIdx.x + 1);
    (void)old;
  }
}
}  // namespace

TEST_CASE("simt: atomics are exact across blocks running in parallel", "[simt]") {
  DeviceBuf<int> counter(1, "counter"), mx(1, "max");
  DeviceBuf<float> fsum(1, "fsum");
  DeviceBuf<unsigned> cas(1, "cas");
  *counter.ptr = 0;
  *mx.ptr = -1;
  *fsum.ptr = 0;
  *cas.ptr = 0;
  launch(count_up, {dim3(64), dim3(128)}, counter.ptr, fsum.ptr, mx.ptr, cas.ptr);
  CHECK(*counter.ptr == 64 * 128);
  CHECK(*fsum.ptr == 64 * 128 * 0.5f);
  CHECK(*mx.ptr == 64 * 128 - 1);
  CHECK(*cas.ptr >= 1u);  // exactly one block won
  CHECK(*cas.ptr <= 64u);
}

TEST_CASE("simt: the progress hook sees every block of a launch start, once", "[simt]") {
  DeviceBuf<int> counter(1, "counter"), mx(1, "max");
  DeviceBuf<float> fsum(1, "fsum");
  DeviceBuf<unsigned> cas(1, "cas");
  *counter.ptr = 0;
  std::atomic<uint64_t> calls{0}, max_started{0}, wrong_total{0};
  simt::set_progress_hook([&](uint64_t started, uint64_t total) {
    ++calls;
    if (total != 37) ++wrong_total;
    for (uint64_t m = max_started; started > m && !max_started.compare_exchange_weak(m, started);) {
    }
  });
  launch(count_up, {dim3(37), dim3(32)}, counter.ptr, fsum.ptr, mx.ptr, cas.ptr);
  simt::set_progress_hook({});
  launch(count_up, {dim3(5), dim3(32)}, counter.ptr, fsum.ptr, mx.ptr, cas.ptr);  // no hook
  CHECK(calls == 37);
  CHECK(max_started == 37);
  CHECK(wrong_total == 0);
}

namespace {
__global__ void ids(int* out) {
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  out[bid * blockDim.x * blockDim.y * blockDim.z + tid] = bid * 1000 + tid;
}
}  // namespace

TEST_CASE("simt: threadIdx, blockIdx, blockDim and gridDim in 3D", "[simt]") {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  DeviceBuf<int> out(12 * 24, "out");
  launch(ids, {grid, block}, out.ptr);
  const auto r = out.get();
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 24; ++t) REQUIRE(r[b * 24 + t] == b * 1000 + t);
}

namespace {
__global__ void read_smem_unwritten(float* out) {
  const float* smem = attn::shared_memory<float>();
  out[threadIdx.x] = smem[threadIdx.x];
}
}  // namespace

TEST_CASE("simt: dynamic shared memory starts poisoned", "[simt]") {
  DeviceBuf<float> out(32, "out");
  launch(read_smem_unwritten, {dim3(1), dim3(32), 32 * sizeof(float)}, out.ptr);
  for (float x : out.get()) CHECK(std::isnan(x));
}

TEST_CASE("simt: device allocations start poisoned", "[simt]") {
  DeviceBuf<float> out(8, "fresh");
  for (float x : out.get()) CHECK(std::isnan(x));
}

// ---- Strictness
// -----------------------------------------------------------------------------------

namespace {
__global__ void half_block_returns(float* out) {
  if (threadIdx.x >= 64) return;  // the classic bug: an early exit before a barrier
  out[threadIdx.x] = 1.0f;
  __syncthreads();
}
}  // namespace

TEST_CASE("simt: a barrier that half the block skips is reported, not hung", "[simt][strict]") {
  DeviceBuf<float> out(128, "out");
  CHECK_THROWS_WITH(launch(half_block_returns, {dim3(1), dim3(128)}, out.ptr),
                    Catch::Contains("__syncthreads()") && Catch::Contains("never complete") &&
                        Catch::Contains("test_simt.cpp"));
}

namespace {
__global__ void divergent_barriers(float* out) {
  if (threadIdx.x < 32) {
    out[threadIdx.x] = 1.0f;
    __syncthreads();
  } else {
    __syncthreads();
  }
}
}  // namespace

TEST_CASE("simt: threads waiting at different __syncthreads() are reported", "[simt][strict]") {
  DeviceBuf<float> out(64, "out");
  CHECK_THROWS_WITH(launch(divergent_barriers, {dim3(1), dim3(64)}, out.ptr),
                    Catch::Contains("divergent"));
}

namespace {
__global__ void warp_deadlock(int* out) {
  // Lanes 0-15 shuffle with the whole warp while lanes 16-31 wait in __syncwarp: neither
  // operation can complete.
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), 0);
  else
    __syncwarp();
}
}  // namespace

TEST_CASE("simt: a deadlock names every thread and what it waits on", "[simt][strict]") {
  DeviceBuf<int> out(32, "out");
  try {
    launch(warp_deadlock, {dim3(1), dim3(32)}, out.ptr);
    FAIL("no error reported");
  } catch (const simt::KernelError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Catch::Contains("deadlock in block (0,0,0)"));
    CHECK_THAT(msg, Catch::Contains("threads 0-15: wait in __shfl_sync(mask 0xffffffff)"));
    CHECK_THAT(msg, Catch::Contains("lanes not there: 16-31"));
    CHECK_THAT(msg, Catch::Contains("threads 16-31: wait in __syncwarp"));
  }
}

namespace {
__global__ void mask_without_self(int* out) {
  out[threadIdx.x] = __shfl_sync(0x1u, 5, 0);
}
__global__ void read_exited_lane(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), 3);
}
}  // namespace

TEST_CASE("simt: undefined warp intrinsic uses are errors", "[simt][strict]") {
  DeviceBuf<int> out(32, "out");
  CHECK_THROWS_WITH(launch(mask_without_self, {dim3(1), dim3(32)}, out.ptr),
                    Catch::Contains("does not include the calling lane"));
  CHECK_THROWS_WITH(launch(read_exited_lane, {dim3(1), dim3(32)}, out.ptr),
                    Catch::Contains("reads lane 3, which has exited"));
}

namespace {
// Each thread stores its value in shared memory and reads its neighbour's. With the barrier
// this is correct under every schedule; without it the result depends on the order threads run.
template <bool kBarrier>
__global__ void neighbour_sum(const float* in, float* out) {
  float* smem = attn::shared_memory<float>();
  const int t = threadIdx.x, n = blockDim.x;
  smem[t] = in[blockIdx.x * n + t];
  if (kBarrier) __syncthreads();
  out[blockIdx.x * n + t] = smem[t] + smem[(t + 1) % n];
}

bool neighbour_sum_correct(bool barrier, const char* schedule) {
  ScheduleGuard g(schedule);
  const int blocks = 4, n = 64;
  DeviceBuf<float> in(blocks * n, "in"), out(blocks * n, "out");
  for (int x = 0; x < blocks * n; ++x) in.ptr[x] = float(x);
  const attn::LaunchConfig cfg{dim3(blocks), dim3(n), n * sizeof(float)};
  if (barrier)
    launch(neighbour_sum<true>, cfg, static_cast<const float*>(in.ptr), out.ptr);
  else
    launch(neighbour_sum<false>, cfg, static_cast<const float*>(in.ptr), out.ptr);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < n; ++t)
      if (out.ptr[b * n + t] != in.ptr[b * n + t] + in.ptr[b * n + (t + 1) % n]) return false;
  return true;
}
}  // namespace

TEST_CASE("simt: a missing __syncthreads is exposed by schedule perturbation", "[simt][strict]") {
  for (const char* s : {"forward", "reverse", "random:1", "random:2", "greedy"}) {
    INFO(s);
    CHECK(neighbour_sum_correct(true, s));
  }
  // Without the barrier, at least one order reads a neighbour's slot before it is written and
  // gets the shared-memory poison (NaN).
  bool all = true;
  for (const char* s : {"forward", "reverse", "random:1"}) all &= neighbour_sum_correct(false, s);
  CHECK_FALSE(all);
}

namespace {
__global__ void write_one_past(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f;  // off by one: should be i < n
}
}  // namespace

TEST_CASE("simt: an out-of-bounds write is caught by the guard zones", "[simt][strict]") {
  DeviceBuf<float> out(100, "O");
  CHECK_THROWS_WITH(
      launch(write_one_past, {dim3(4), dim3(32)}, out.ptr, 100),
      Catch::Contains("past the end of buffer 'O'") && Catch::Contains("kernel launched at"));
  // The report restores the guard zone: the next launch is clean.
  CHECK_NOTHROW(launch(write_one_past, {dim3(4), dim3(32)}, out.ptr, 99));
}

namespace {
__global__ void traps(int*) {
  if (threadIdx.x == 5 && blockIdx.x == 1) __trap();
}
}  // namespace

TEST_CASE("simt: invalid launches and __trap are reported with the place", "[simt][strict]") {
  DeviceBuf<int> out(1, "out");
  CHECK_THROWS_WITH(launch(traps, {dim3(1), dim3(2048)}, out.ptr),
                    Catch::Contains("2048 threads per block"));
  CHECK_THROWS_WITH(launch(traps, {dim3(1), dim3(32), 300 * 1024}, out.ptr),
                    Catch::Contains("dynamic shared memory"));
  CHECK_THROWS_WITH(launch(traps, {dim3(2), dim3(32)}, out.ptr),
                    Catch::Contains("block (1,0,0) thread (5,0,0)") && Catch::Contains("__trap"));
}

namespace {
// Counts how many CUDA threads' stacks were unwound: its destructor runs when the thread returns,
// when an exception leaves it, and when the backend unwinds a thread that waits in a failed block.
std::atomic<int> g_destroyed{0};
struct CountsDestruction {
  ~CountsDestruction() { g_destroyed.fetch_add(1); }
};
__global__ void traps_while_others_wait(int* out) {
  CountsDestruction guard;
  out[threadIdx.x] = 1;
  if (threadIdx.x == 40) __trap();
  __syncthreads();
  out[threadIdx.x] = 2;
}
}  // namespace

TEST_CASE("simt: a failed block's waiting threads are unwound, the others never started",
          "[simt][strict]") {
  // Forward order: threads 0-39 wait at the barrier, thread 40 traps, 41-63 have not run yet.
  // The launch reports the trap; the waiting threads' stacks are unwound (their destructors run:
  // 40 of them, and thread 40's own as its error leaves it), the unstarted ones are not entered.
  ScheduleGuard forward("forward");
  DeviceBuf<int> out(64, "out");
  g_destroyed = 0;
  CHECK_THROWS_WITH(launch(traps_while_others_wait, {dim3(1), dim3(64)}, out.ptr),
                    Catch::Contains("thread (40,0,0)") && Catch::Contains("__trap"));
  CHECK(g_destroyed.load() == 41);
  // Unwound where they waited: none of them ran past the barrier (2), none of the others ran at
  // all (the buffer's poison stays).
  const std::vector<int> o = out.get();
  for (int t = 0; t < 64; ++t) {
    INFO("thread " << t);
    if (t <= 40)
      CHECK(o[t] == 1);
    else
      CHECK(o[t] != 1);
  }
  CHECK(std::count(o.begin(), o.end(), 2) == 0);
  // The stacks went back to the pool in a usable state: a clean launch runs every thread.
  g_destroyed = 0;
  CHECK_NOTHROW(launch(traps_while_others_wait, {dim3(1), dim3(32)}, out.ptr));
  CHECK(g_destroyed.load() == 32);
}

TEST_CASE("simt: fibers switch with the backend's own switch where it has one", "[simt]") {
  // tests/CMakeLists.txt runs this whole file a second time with SIMT_FIBER=boost.
  const char* env = std::getenv("SIMT_FIBER");
  const bool boost = (env && std::strcmp(env, "boost") == 0);
#if defined(__x86_64__) && defined(__ELF__)
  CHECK(std::string(simt::context_switch()) == (boost ? "Boost.Context" : "simt_switch_context"));
#else
  (void)boost;
  CHECK(std::string(simt::context_switch()) == "Boost.Context");
#endif
}

TEST_CASE("simt: schedules parse, and bad ones are refused", "[simt]") {
  CHECK(simt::to_string(simt::parse_schedule("forward")) == "forward");
  CHECK(simt::to_string(simt::parse_schedule("reverse")) == "reverse");
  CHECK(simt::to_string(simt::parse_schedule("greedy")) == "greedy");
  CHECK(simt::to_string(simt::parse_schedule("random:42")) == "random:42");
  CHECK_THROWS(simt::parse_schedule("random:x"));
  CHECK_THROWS(simt::parse_schedule("sideways"));
}

TEST_CASE("simt: fp16 and bf16 conversions round to nearest even", "[simt]") {
  // 1 + 2^-11 lies halfway between two fp16 values: it rounds to the even one, 1.0.
  CHECK(attn::to_float(attn::from_float<__half>(1.0f + 0x1p-11f)) == 1.0f);
  CHECK(attn::to_float(attn::from_float<__half>(1.0f + 0x1p-10f + 0x1p-11f)) == 1.0f + 0x1p-9f);
  CHECK(attn::to_float(attn::from_float<__nv_bfloat16>(1.0f + 0x1p-8f)) == 1.0f);
  CHECK(attn::to_float(attn::from_float<__nv_bfloat16>(3.140625f)) == 3.140625f);
}
