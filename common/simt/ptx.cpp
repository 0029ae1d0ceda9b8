// The sm_80 PTX emulations: mma.sync m16n8k16, ldmatrix, cp.async.
#include "common/simt/ptx.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "common/simt/memory.h"
#include "common/simt/mma_body.h"
#include "common/simt/runtime.h"

namespace simt {

namespace {

inline constexpr char kMmaF16[] = "mma.sync.m16n8k16.f32.f16.f16.f32";
inline constexpr char kMmaBf16[] = "mma.sync.m16n8k16.f32.bf16.bf16.f32";
inline constexpr char kLdmatrix[] = "ldmatrix.sync.m8n8.b16";

std::atomic<bool> g_skip_wait{false};
std::mutex g_skip_mutex;
std::string g_skip_file;
std::atomic<int> g_skip_line{0};  // 0: no barrier skipped (checked without the lock)

template <MmaType T>
void mma_portable(const detail::CollectiveView& v) {
  mma_body<T>(v);
}

// Whether the CPU runs the AVX2 body (mma_avx2.cpp: AVX2, FMA and F16C).
bool cpu_has_avx2_body() {
#ifdef SIMT_MMA_AVX2
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

// Whether mma_m16n8k16 uses the AVX2 body: when the CPU can run it, unless SIMT_SIMD=0.
bool use_simd() {
#ifdef SIMT_MMA_AVX2
  static const bool yes = [] {
    const char* env = std::getenv("SIMT_SIMD");
    return cpu_has_avx2_body() && !(env && std::strcmp(env, "0") == 0);
  }();
  return yes;
#else
  return false;
#endif
}

template <MmaType T>
detail::CollectiveFn mma_compute(bool simd) {
#ifdef SIMT_MMA_AVX2
  if (simd) return T == MmaType::f16 ? mma_avx2_f16 : mma_avx2_bf16;
#endif
  (void)simd;
  return mma_portable<T>;
}

struct LdmatrixIn {
  const unsigned char* row;
  int count;
  int trans;
};

// ldmatrix (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): register j of lane l holds
// two 16-bit elements of matrix j: row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1; with .trans,
// rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4. Row r of matrix j is 16 bytes at the address
// lane 8 j + r supplied.
void ldmatrix_compute(const detail::CollectiveView& v) {
  LdmatrixIn first;
  std::memcpy(&first, v.lanes[0].in, sizeof first);
  const unsigned char* rows[32];  // row r of matrix j: rows[8 j + r]
  for (int lane = 0; lane < 8 * first.count; ++lane) {
    LdmatrixIn src;
    std::memcpy(&src, v.lanes[lane].in, sizeof src);
    rows[lane] = src.row;
  }
  auto element = [&](int j, int r, int c) {
    uint16_t e;
    std::memcpy(&e, rows[8 * j + r] + 2 * c, 2);
    return static_cast<uint32_t>(e);
  };
  for (int lane = 0; lane < 32; ++lane) {
    uint32_t regs[4] = {};
    const int q = lane / 4, p = 2 * (lane % 4);
    for (int j = 0; j < first.count; ++j)
      regs[j] = first.trans ? element(j, p, q) | element(j, p + 1, q) << 16
                            : element(j, q, p) | element(j, q, p + 1) << 16;
    std::memcpy(v.lanes[lane].out, regs, sizeof regs);
  }
}

[[noreturn, gnu::noinline, gnu::cold]] void not_whole_warps(const char* what,
                                                            const simt::where_t& where) {
  fail(std::string(what) + " at " + where.file_name() + ":" + std::to_string(where.line()) +
       ": the block has " + std::to_string(detail::block_threads()) +
       " threads; a .sync.aligned warp instruction needs whole warps");
}

[[gnu::always_inline]] inline void need_whole_warp(const char* what, const simt::where_t& where) {
  // On every mma and ldmatrix: the block size from the thread's own ids, not a call.
  const dim3& bd = detail::current().block_dim;
  if (bd.x * bd.y * bd.z % 32 != 0) [[unlikely]]
    not_whole_warps(what, where);
}

}  // namespace

void mma_m16n8k16(MmaType type, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                  const float (&c)[4], const simt::where_t& where) {
  need_whole_warp("mma.sync", where);
  MmaIn in;
  std::memcpy(in.a, a, sizeof in.a);
  std::memcpy(in.b, b, sizeof in.b);
  std::memcpy(in.c, c, sizeof in.c);
  if (type == MmaType::f16)
    detail::warp_collective(0xffffffffu, kMmaF16, &in, sizeof in, d, sizeof d,
                            mma_compute<MmaType::f16>(use_simd()), where);
  else
    detail::warp_collective(0xffffffffu, kMmaBf16, &in, sizeof in, d, sizeof d,
                            mma_compute<MmaType::bf16>(use_simd()), where);
}

void ldmatrix(int count, bool trans, uint32_t* regs, const void* row_address,
              const simt::where_t& where) {
  need_whole_warp("ldmatrix", where);
  // Lanes past the last matrix's rows supply no address (hardware ignores them).
  if (detail::current().lane < 8 * count) {
    detail::check_shared(row_address, 16, 16, "ldmatrix", where);
    detail::check_not_pending(row_address, 16, "ldmatrix", where);
  }
  const LdmatrixIn in{static_cast<const unsigned char*>(row_address), count, trans ? 1 : 0};
  uint32_t out[4];
  detail::warp_collective(0xffffffffu, kLdmatrix, &in, sizeof in, out, sizeof out, ldmatrix_compute,
                          where);
  if (count == 4)  // the usual case, as a fixed-size copy (no call to memcpy)
    std::memcpy(regs, out, sizeof out);
  else
    std::memcpy(regs, out, sizeof(uint32_t) * count);
}

void cp_async_16(void* dst, const void* src, int src_bytes, const simt::where_t& where) {
  detail::check_shared(dst, 16, 16, "cp.async", where);
  if (src_bytes < 0 || src_bytes > 16) fail("cp.async: source size must be in [0, 16]");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % 16 != 0)
    fail(std::string("cp.async at ") + where.file_name() + ":" + std::to_string(where.line()) +
         ": global source address not 16-byte aligned");
  if (src_bytes > 0) {
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
  detail::current().async.open.push_back(c);
}

void cp_async_commit() {
  auto& a = detail::current().async;
  a.groups.push_back(std::move(a.open));
  a.open.clear();
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
