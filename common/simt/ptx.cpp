// The sm_80 PTX emulations: mma.sync m16n8k16, ldmatrix, cp.async.
#include "common/simt/ptx.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifdef SIMT_MMA_AVX2
#include <cpuid.h>
#endif

#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "common/simt/counters.h"
#include "common/simt/memory.h"
#include "common/simt/mma_body.h"
#include "common/simt/ptx_ops.h"
#include "common/simt/runtime.h"

namespace simt {

namespace {

std::atomic<bool> g_skip_wait{false};
std::mutex g_skip_mutex;
std::string g_skip_file;
std::atomic<int> g_skip_line{0};  // 0: no barrier skipped (checked without the lock)

template <MmaType T>
void mma_portable(const detail::CollectiveView& v) {
  mma_body<T>(v);
}

// Whether the CPU runs the AVX2 body (mma_avx2.cpp: AVX2, FMA and F16C). F16C from CPUID leaf 1
// (ECX bit 29): older clang's __builtin_cpu_supports does not know it.
bool cpu_has_avx2_body() {
#ifdef SIMT_MMA_AVX2
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

// Whether mma_m16n8k16 uses the AVX2 body: when the CPU can run it, unless SIMT_SIMD=0. Decided
// once, before main.
const bool g_use_simd = [] {
  const char* env = std::getenv("SIMT_SIMD");
  return cpu_has_avx2_body() && !(env && std::strcmp(env, "0") == 0);
}();
inline bool use_simd() {
  return g_use_simd;
}

template <MmaType T>
detail::CollectiveFn mma_compute(bool simd) {
#ifdef SIMT_MMA_AVX2
  if (simd) return T == MmaType::f16 ? mma_avx2_f16 : mma_avx2_bf16;
#endif
  (void)simd;
  return mma_portable<T>;
}

// ldmatrix (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): register j of lane l holds
// two 16-bit elements of matrix j: row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1; with .trans,
// rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4. Row r of matrix j is 16 bytes at the address
// lane 8 j + r supplied. So register j of lanes 4q..4q+3 is row q of matrix j, or (.trans) its
// column q read two rows at a time; registers past `count` are zero.
void ldmatrix_compute(const detail::CollectiveView& v) {
  using detail::LdmatrixIn;
  LdmatrixIn first;
  std::memcpy(&first, v.lanes[0].in, sizeof first);
  U4 quad[8][4] = {};  // quad[q][j]: register j of lanes 4q..4q+3
  for (int j = 0; j < first.count; ++j) {
    H8 row[8];
    for (int r = 0; r < 8; ++r) {
      LdmatrixIn src;
      std::memcpy(&src, v.lanes[8 * j + r].in, sizeof src);
      std::memcpy(&row[r], src.row, sizeof row[r]);
    }
    if (!first.trans) {
      for (int q = 0; q < 8; ++q) quad[q][j] = reinterpret_cast<U4>(row[q]);
      continue;
    }
    // pairs[p][c] = rows 2p and 2p + 1 of column c as one 32-bit value (c = 0..3, then 4..7).
    U4 pairs[4][2];
    for (int p = 0; p < 4; ++p) {
      pairs[p][0] = reinterpret_cast<U4>(
          __builtin_shufflevector(row[2 * p], row[2 * p + 1], 0, 8, 1, 9, 2, 10, 3, 11));
      pairs[p][1] = reinterpret_cast<U4>(
          __builtin_shufflevector(row[2 * p], row[2 * p + 1], 4, 12, 5, 13, 6, 14, 7, 15));
    }
    for (int half = 0; half < 2; ++half) {
      U4 x[4] = {pairs[0][half], pairs[1][half], pairs[2][half], pairs[3][half]};
      transpose4(x);  // x[c]: column 4 half + c, lanes' registers in p order
      for (int c = 0; c < 4; ++c) quad[4 * half + c][j] = x[c];
    }
  }
  for (int q = 0; q < 8; ++q) {
    transpose4(quad[q]);  // quad[q][t]: the registers of lane 4q + t
    for (int t = 0; t < 4; ++t) std::memcpy(v.lanes[4 * q + t].out, &quad[q][t], sizeof quad[q][t]);
  }
}

}  // namespace

namespace detail {
void not_whole_warps(const char* what, const simt::where_t& where) {
  fail(std::string(what) + " at " + where.file_name() + ":" + std::to_string(where.line()) +
       ": the block has " + std::to_string(detail::block_threads()) +
       " threads; a .sync.aligned warp instruction needs whole warps");
}

const CollectiveFn g_mma_f16 = mma_compute<MmaType::f16>(use_simd());
const CollectiveFn g_mma_bf16 = mma_compute<MmaType::bf16>(use_simd());
const CollectiveFn g_ldmatrix = ldmatrix_compute;
}  // namespace detail

void cp_async_16(void* dst, const void* src, int src_bytes, const simt::where_t& where) {
  detail::check_shared(dst, 16, 16, "cp.async", where);
  if (src_bytes < 0 || src_bytes > 16) fail("cp.async: source size must be in [0, 16]");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % 16 != 0)
    fail(std::string("cp.async at ") + where.file_name() + ":" + std::to_string(where.line()) +
         ": global source address not 16-byte aligned");
  if (src_bytes > 0 && !device_access_ok(src, src_bytes)) {
    if (const std::string bad = check_device_access(src, src_bytes); !bad.empty())
      fail(std::string("cp.async at ") + where.file_name() + ":" + std::to_string(where.line()) +
           ": source " + bad);
  }
  detail::PendingCopy c{static_cast<unsigned char*>(dst), {}, src_bytes};
  if (src_bytes == 16)  // the usual case, as a fixed-size copy
    std::memcpy(c.data, src, 16);
  else if (src_bytes > 0)
    std::memcpy(c.data, src, src_bytes);
  // Until the copy lands (at the wait_group that retires it) its destination holds no defined
  // value: it reads as poison, so a stage refilled while another warp still reads it is caught.
  std::memset(c.dst, 0xFF, 16);
  detail::async_issued(c.dst, where);
  if (detail::t_extension) [[unlikely]]
    detail::note_async_copy(c.dst);
  if (detail::recording_sync()) [[unlikely]]
    detail::record_async_copy(src, where);
  if (counters::active()) [[unlikely]]
    counters::hook::lane(counters::hook::Kind::cp_async, counters::hook::site_of(where),
                         reinterpret_cast<uintptr_t>(src), uint32_t(src_bytes),
                         reinterpret_cast<uintptr_t>(dst));
  detail::current().async.open.push_back(c);
}

void cp_async_commit() {
  auto& a = detail::current().async;
  a.groups.push_back(std::move(a.open));
  a.open.clear();
  if (!a.spare.empty()) {  // a landed group's buffer, so that issuing allocates nothing
    a.open = std::move(a.spare.back());
    a.spare.pop_back();
  }
}

void cp_async_wait(int n, const simt::where_t&) {
  if (g_skip_wait.load(std::memory_order_relaxed)) return;
  auto& a = detail::current().async;
  while (static_cast<int>(a.groups.size()) > n) {
    for (const detail::PendingCopy& c : a.groups.front()) {
      if (c.bytes == 16) {
        std::memcpy(c.dst, c.data, 16);
      } else {
        std::memcpy(c.dst, c.data, c.bytes);
        std::memset(c.dst + c.bytes, 0, 16 - c.bytes);  // the zero-fill of a partial source
      }
      detail::async_landed(c.dst);
    }
    a.groups.front().clear();
    a.spare.push_back(std::move(a.groups.front()));
    a.groups.erase(a.groups.begin());
  }
}

namespace testing {
bool mma_simd_available() {
  return cpu_has_avx2_body();
}
void mma_compute(MmaType type, bool simd, const uint32_t (*a)[4], const uint32_t (*b)[2],
                 const float (*c)[4], float (*d)[4]) {
  MmaIn in[32];
  detail::LaneSlot slots[32];
  for (int lane = 0; lane < 32; ++lane) {
    std::memcpy(in[lane].a, a[lane], sizeof in[lane].a);
    std::memcpy(in[lane].b, b[lane], sizeof in[lane].b);
    std::memcpy(in[lane].c, c[lane], sizeof in[lane].c);
    slots[lane].in = reinterpret_cast<const unsigned char*>(&in[lane]);
    slots[lane].out = reinterpret_cast<unsigned char*>(d[lane]);
  }
  const detail::CollectiveView view{0xffffffffu, 0xffffffffu, slots, 0};
  (type == MmaType::f16 ? simt::mma_compute<MmaType::f16>(simd)
                        : simt::mma_compute<MmaType::bf16>(simd))(view);
}
void skip_cp_async_wait(bool on) {
  g_skip_wait = on;
}
void skip_barrier_at(const char* file_suffix, int line) {
  std::lock_guard lock(g_skip_mutex);
  g_skip_file = file_suffix ? file_suffix : "";
  g_skip_line = line;
}
bool barrier_skipped(const simt::where_t& where) {
  // Called by every __syncthreads: without an injected fault it is one relaxed atomic load.
  const int line = g_skip_line.load(std::memory_order_relaxed);
  if (line == 0 || static_cast<int>(where.line()) != line) return false;
  std::lock_guard lock(g_skip_mutex);
  const std::string f = where.file_name();
  return f.size() >= g_skip_file.size() &&
         f.compare(f.size() - g_skip_file.size(), g_skip_file.size(), g_skip_file) == 0;
}
}  // namespace testing

}  // namespace simt
