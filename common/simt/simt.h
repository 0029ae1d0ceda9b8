// The CPU SIMT backend as a kernel sees it: CUDA's keywords, builtins and intrinsics, for a
// kernel source compiled by the host compiler instead of nvcc. Include it (through
// common/kernel.h) instead of the CUDA runtime headers.
//
// Semantics follow CUDA and the PTX ISA, with stricter checking where hardware leaves behaviour
// undefined: a warp intrinsic whose mask omits the caller, a shuffle that reads an exited lane, a
// __syncthreads() that part of the block skips, or threads waiting at different __syncthreads()
// are reported as errors rather than producing garbage.
#pragma once

#define SIMT_BACKEND 1

// libstdc++'s shared_ptr spells GCC's attribute __noinline__, which the macro below would break:
// read first, <memory> is not read again after it (its include guard).
#include <memory>

// CUDA's qualifiers, defined before the CUDA headers so that they keep these definitions.
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __constant__
// A static __shared__ variable is shared by the fibers of a block (one OS thread runs one block
// at a time). Note: unlike dynamic shared memory it is not poisoned at block start; it keeps
// whatever the previous block on that worker left. The steps use dynamic shared memory.
#define __shared__ static thread_local

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include "common/simt/where.h"

#include "common/simt/launch.h"
#include "common/simt/ptx.h"
#include "common/simt/ptx_ops.h"
#include "common/simt/runtime.h"
#include "common/simt/sm90.h"

// ---- Builtin variables -------------------------------------------------------------------------
#define threadIdx (::simt::detail::current().thread_idx)
#define blockIdx (::simt::detail::current().block_idx)
#define blockDim (::simt::detail::current().block_dim)
#define gridDim (::simt::detail::current().grid_dim)
inline constexpr int warpSize = 32;

namespace simt {

// The names that identify each warp collective (lanes meet only in the same kind).
inline constexpr char kShflIdx[] = "__shfl_sync";
inline constexpr char kShflUp[] = "__shfl_up_sync";
inline constexpr char kShflDown[] = "__shfl_down_sync";
inline constexpr char kShflXor[] = "__shfl_xor_sync";
inline constexpr char kBallot[] = "__ballot_sync";
inline constexpr char kAny[] = "__any_sync";
inline constexpr char kAll[] = "__all_sync";
inline constexpr char kSyncwarp[] = "__syncwarp";

enum class ShflMode : uint32_t { up, down, bfly, idx };

// PTX shfl.sync: the source lane of `lane` for operands b and c, and whether it is in range
// (when it is not, the lane keeps its own value). Straight from the PTX ISA's pseudo-code:
//   maxLane = (lane & segmask) | (cval & ~segmask);  minLane = lane & segmask
//   up: j = lane - b, valid j >= maxLane;  down: j = lane + b, valid j <= maxLane
//   bfly: j = lane ^ b, valid j <= maxLane;  idx: j = minLane | (b & ~segmask), valid j <= maxLane
struct ShflSource {
  int lane;
  bool valid;
};
ShflSource shfl_source(ShflMode mode, int lane, uint32_t b, uint32_t c);

// The c operand CUDA's __shfl_*_sync(…, width) intrinsics pass to shfl.sync.
inline uint32_t shfl_c(ShflMode mode, int width) {
  return (uint32_t(32 - width) << 8) | (mode == ShflMode::up ? 0u : 0x1fu);
}

uint64_t shuffle(const char* kind, ShflMode mode, uint32_t mask, uint64_t value, uint32_t b,
                 int width, const where_t& where);
uint32_t vote(const char* kind, uint32_t mask, bool pred, const where_t& where);

template <typename T>
T shuffle_as(const char* kind, ShflMode mode, uint32_t mask, T var, uint32_t b, int width,
             const where_t& where) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "warp shuffles move values of at most 8 bytes");
  // Byte copies through void*: T may be a class such as __half (trivially copyable).
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const void*>(&var), sizeof(T));
  bits = shuffle(kind, mode, mask, bits, b, width, where);
  T out;
  std::memcpy(static_cast<void*>(&out), &bits, sizeof(T));
  return out;
}

// The block's dynamic shared memory as T* (what `extern __shared__ T smem[]` names on the GPU).
template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(detail::dynamic_shared_memory());
}

}  // namespace simt

// ---- Synchronisation ----------------------------------------------------------------------------
inline void __syncthreads(const simt::where_t& where = simt::where_t::current()) {
  if (simt::testing::barrier_skipped(where)) return;  // fault injection (tests only)
  simt::detail::barrier_sync(0, static_cast<int>(blockDim.x * blockDim.y * blockDim.z),
                             "__syncthreads()", where);
}
void __syncwarp(unsigned mask = 0xffffffffu, const simt::where_t& where = simt::where_t::current());
// A fence makes the calling thread's earlier stores visible (the instrumented build's check of
// intra-warp shared-memory ordering counts it as a visibility point, like __syncwarp).
inline void __threadfence_block() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  simt::detail::mark_visible();
}
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  simt::detail::mark_visible();
}

// ---- Warp shuffles and votes --------------------------------------------------------------------
template <typename T>
T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize,
              const simt::where_t& where = simt::where_t::current()) {
  return simt::shuffle_as(simt::kShflIdx, simt::ShflMode::idx, mask, var,
                          static_cast<uint32_t>(srcLane), width, where);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 const simt::where_t& where = simt::where_t::current()) {
  return simt::shuffle_as(simt::kShflUp, simt::ShflMode::up, mask, var, delta, width, where);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   const simt::where_t& where = simt::where_t::current()) {
  return simt::shuffle_as(simt::kShflDown, simt::ShflMode::down, mask, var, delta, width, where);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,
                  const simt::where_t& where = simt::where_t::current()) {
  return simt::shuffle_as(simt::kShflXor, simt::ShflMode::bfly, mask, var,
                          static_cast<uint32_t>(laneMask), width, where);
}
inline unsigned __ballot_sync(unsigned mask, int pred,
                              const simt::where_t& where = simt::where_t::current()) {
  return simt::vote(simt::kBallot, mask, pred != 0, where);
}
inline int __any_sync(unsigned mask, int pred,
                      const simt::where_t& where = simt::where_t::current()) {
  return simt::vote(simt::kAny, mask, pred != 0, where) != 0;
}
inline int __all_sync(unsigned mask, int pred,
                      const simt::where_t& where = simt::where_t::current()) {
  return simt::vote(simt::kAll, mask, pred != 0, where) != 0;
}

// ---- Atomics (real atomics: blocks run in parallel on several OS threads)
// ------------------------
template <typename T>
T __simt_atomic_add(T* address, T val) {
  return std::atomic_ref<T>(*address).fetch_add(val);
}
inline int atomicAdd(int* a, int v) {
  return __simt_atomic_add(a, v);
}
inline unsigned atomicAdd(unsigned* a, unsigned v) {
  return __simt_atomic_add(a, v);
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return __simt_atomic_add(a, v);
}
#if defined(__SANITIZE_THREAD__)
// In an instrumented kernel, a floating-point atomicAdd (a compare-and-swap loop on x86-64, which
// retries while another OS thread's block updates the same address) is checked and counted as one
// load and one store however often it retries: the counts do not depend on the schedule
// (checks.cpp).
namespace simt {
float atomic_add_checked(float* a, float v);
double atomic_add_checked(double* a, double v);
}  // namespace simt
[[gnu::always_inline]] inline float atomicAdd(float* a, float v) {
  return simt::atomic_add_checked(a, v);
}
[[gnu::always_inline]] inline double atomicAdd(double* a, double v) {
  return simt::atomic_add_checked(a, v);
}
#else
inline float atomicAdd(float* a, float v) {
  return __simt_atomic_add(a, v);
}
inline double atomicAdd(double* a, double v) {
  return __simt_atomic_add(a, v);
}
#endif
template <typename T>
T __simt_atomic_update(T* address, T (*f)(T, T), T val) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (!ref.compare_exchange_weak(old, f(old, val))) {
  }
  return old;
}
inline int atomicMax(int* a, int v) {
  return __simt_atomic_update<int>(
      a, [](int x, int y) { return x > y ? x : y; }, v);
}
inline unsigned atomicMax(unsigned* a, unsigned v) {
  return __simt_atomic_update<unsigned>(
      a, [](unsigned x, unsigned y) { return x > y ? x : y; }, v);
}
inline int atomicMin(int* a, int v) {
  return __simt_atomic_update<int>(
      a, [](int x, int y) { return x < y ? x : y; }, v);
}
inline unsigned atomicMin(unsigned* a, unsigned v) {
  return __simt_atomic_update<unsigned>(
      a, [](unsigned x, unsigned y) { return x < y ? x : y; }, v);
}
template <typename T>
T atomicExch(T* a, T v) {
  return std::atomic_ref<T>(*a).exchange(v);
}
template <typename T>
T atomicCAS(T* a, T compare, T val) {
  std::atomic_ref<T>(*a).compare_exchange_strong(compare, val);
  return compare;  // the old value, whether or not the swap happened
}

// ---- Math and bit intrinsics --------------------------------------------------------------------
inline float __expf(float x) {
  return std::exp(x);
}
inline float __logf(float x) {
  return std::log(x);
}
inline float __log2f(float x) {
  return std::log2(x);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float __frcp_rn(float x) {
  return 1.0f / x;
}
inline float __saturatef(float x) {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline unsigned __float_as_uint(float x) {
  return std::bit_cast<unsigned>(x);
}
inline float __uint_as_float(unsigned x) {
  return std::bit_cast<float>(x);
}
inline int __float_as_int(float x) {
  return std::bit_cast<int>(x);
}
inline float __int_as_float(int x) {
  return std::bit_cast<float>(x);
}
inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline int __clz(unsigned x) {
  return std::countl_zero(x);
}
inline int __ffs(unsigned x) {
  return x == 0 ? 0 : std::countr_zero(x) + 1;
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
inline long long max(long long a, long long b) {
  return a > b ? a : b;
}
inline float min(float a, float b) {
  return std::fmin(a, b);
}
inline float max(float a, float b) {
  return std::fmax(a, b);
}
[[noreturn]] inline void __trap() {
  simt::fail("__trap() called");
}
