// CPU emulations of the sm_90a PTX instructions a Hopper kernel uses (mbarrier, TMA tile loads,
// wgmma, proxy fences, setmaxnreg, elect.sync, named barriers), following the PTX ISA. Kernels
// call them through common/ptx.h, which uses the real instruction under nvcc.
//
// Strictness beyond hardware (each violation is a KernelError naming the kernel line):
// - a TMA tile load poisons its destination when issued and lands only when its mbarrier's phase
//   completes, so reading it before the wait (or after waiting on the wrong parity) reads NaN;
// - wgmma accumulators hold NaN from issue until the wait_group that retires them, A's registers
//   must hold what they held at issue until then, and the shared bytes a wgmma read must be
//   unchanged when its warpgroup retires it (a slot released early); a thread that exits with
//   wgmmas in flight is reported;
// - shared memory that wgmma reads must match what the async proxy saw at the last
//   fence.proxy.async (or what TMA wrote): a generic store not followed by the fence is reported,
//   and so is one whose fence does not happen before the wgmma (no barrier between them), or
//   memory nothing ever wrote;
// - an mbarrier used by a thread that nothing orders after its initialisation is reported (the
//   order is happens-before through barriers and mbarriers, runtime.h; a wgmma's rendezvous and
//   setmaxnreg are no synchronisation);
// - an mbarrier phase that receives more arrivals, or more transaction bytes, than it expects is
//   reported (over-delivered TMA bytes at the TMA that over-delivers); a wait that can never
//   complete is a deadlock report listing every mbarrier;
// - an arrival on an mbarrier that guards a buffer (a thread waited on it, then copied into the
//   buffer: a ring's "empty") while the arriving thread's wgmma still reads the buffer;
// - setmaxnreg that over-subscribes the block's register pool is a deadlock report.
// The block and named barriers' own rules (runtime.cpp): one group of warps per barrier id, one
// arrival per thread and generation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/simt/where.h"

namespace simt {

// ---- Shared-memory addresses --------------------------------------------------------------------
// The 32-bit shared-window address of p (what __cvta_generic_to_shared gives on the GPU): its
// offset in the block's shared memory, whose base is 1024-byte aligned as the GPU's is.
uint32_t shared_address(const void* p, const where_t& where);

// ---- mbarrier (PTX ISA: "Parallel Synchronization and Communication Instructions: mbarrier") ---
void mbarrier_init(uint64_t* bar, uint32_t count, const where_t& where);
// arrive(count 1); returns the state token (the phase the arrival belongs to).
uint64_t mbarrier_arrive(uint64_t* bar, const where_t& where);
// expect_tx(bytes) then arrive, as one operation.
uint64_t mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes, const where_t& where);
void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes, const where_t& where);
// try_wait.parity: suspends the thread until the phase of parity `parity` has completed, then
// returns true (the hardware's time limit never expires here; a wait that cannot complete is a
// deadlock report).
bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity, const where_t& where);
// cp.async.mbarrier.arrive.noinc: the calling thread's pending cp.async copies arrive on `bar`
// when they land; they land when the barrier's phase completes.
void cp_async_mbarrier_arrive_noinc(uint64_t* bar, const where_t& where);
// Names a barrier in reports (e.g. "full[2]"); optional.
void mbarrier_label(uint64_t* bar, const char* label);

// ---- Tensor maps and TMA ---------------------------------------------------------------------
enum class TmaSwizzle : uint32_t { none = 0, b32 = 1, b64 = 2, b128 = 3 };  // CUtensorMapSwizzle

// What cuTensorMapEncodeTiled stores, for the CPU backend (common/tensor_map.h encodes it with the
// driver's validation rules). Dimension 0 is innermost.
struct TensorMap {
  const unsigned char* global = nullptr;
  uint32_t rank = 0;
  uint32_t element_bytes = 0;
  uint64_t dims[5] = {};
  uint64_t strides[5] = {};  // bytes; strides[0] = element_bytes
  uint32_t box[5] = {};
  uint32_t element_strides[5] = {};
  TmaSwizzle swizzle = TmaSwizzle::none;
};

// cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// [dst], [map, {c0..}], [bar]: the box at element coordinates c into dst, densely (dimension 0
// innermost), swizzled, out-of-range elements zero; credits `bar` with the box's bytes.
void tma_load(void* dst, const TensorMap* map, uint64_t* bar, const int32_t* coords, int rank,
              const where_t& where);

// The byte-address swizzle of TMA and wgmma: Swizzle<B,4,3> with B = 1, 2, 3 for 32/64/128 B.
inline uint32_t swizzle_address(uint32_t a, TmaSwizzle s) {
  const uint32_t b = static_cast<uint32_t>(s);
  return b == 0 ? a : a ^ ((a >> 3) & (((1u << b) - 1u) << 4));
}

// ---- Bulk reductions into global memory ---------------------------------------------------------
// cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [dst], [src], bytes: adds the bytes / 4
// floats at shared `src` into global `dst`, element by element, each add atomic. The async proxy
// reads `src` (the bytes the last fence.proxy.async.shared::cta made visible to it), at any time
// until a cp.async.bulk.wait_group{.read} retires the operation's bulk async-group; the adds land
// at any time until a cp.async.bulk.wait_group without .read retires it (here: then, or when the
// issuing thread exits). src and dst 16-byte aligned, bytes a positive multiple of 16.
void bulk_reduce_add_f32(float* dst, const void* src, uint32_t bytes, const where_t& where);
// cp.async.bulk.commit_group: this thread's bulk operations not yet in a group become one.
void bulk_commit_group(const where_t& where);
// cp.async.bulk.wait_group{.read} n: at most n of this thread's newest bulk async-groups still
// pending (read: still reading their sources), the older ones complete.
void bulk_wait_group(int n, bool read, const where_t& where);

// ---- Proxy fences ------------------------------------------------------------------------------
// fence.proxy.async.shared::cta: generic-proxy writes to shared memory become visible to the async
// proxy (wgmma, TMA stores).
void fence_proxy_async_shared(const where_t& where);

// ---- wgmma (PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate") ----------------
enum class WgmmaType { f16, bf16 };
void wgmma_fence(const where_t& where);
// wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{type}.{type}: D (n/2 floats per thread) =
// A B + (scale_d ? D : 0). a_regs null: A from the descriptor desc_a (trans_a: MN-major);
// else A from four registers per thread (K-major). B from desc_b (trans_b: MN-major).
void wgmma_mma_async(WgmmaType type, int n, float* d, uint64_t desc_a, const uint32_t* a_regs,
                     uint64_t desc_b, bool scale_d, int scale_a, int scale_b, bool trans_a,
                     bool trans_b, const where_t& where);
void wgmma_commit_group(const where_t& where);
void wgmma_wait_group(int n, const where_t& where);

// ---- Warp and block synchronisation
// -------------------------------------------------------------- elect.sync: every lane of `mask`
// gets the lowest lane of the mask; *is_leader for that lane.
uint32_t elect_sync(uint32_t mask, bool* is_leader, const where_t& where);
// bar.sync id, count / bar.arrive id, count (count a multiple of 32).
void named_barrier_sync(int id, int count, const where_t& where);
void named_barrier_arrive(int id, int count, const where_t& where);

// ---- setmaxnreg ---------------------------------------------------------------------------------
void setmaxnreg(bool inc, int regs, const where_t& where);
// The per-thread register count at kernel entry for the next launches (the block's pool is that
// times the block's threads). 0 restores the default: what __launch_bounds__(threads, 1) gives,
// min(255, 65536 / threads rounded down to a multiple of 8).
void set_entry_registers(int regs);

// Fault injection for tests, the kernel source untouched: the instruction at one source line
// behaves as if it had been written wrong. skip: an mbarrier arrive that never arrives, a parity
// wait that returns at once, a wgmma.wait_group or fence.proxy.async that does nothing;
// flip_parity: a parity wait on the other parity; barrier_id: a bar.sync or bar.arrive on barrier
// `value` instead of the id it names. Line 0 removes the fault.
namespace testing {
enum class Fault { skip, flip_parity, barrier_id };
void fault_at(const char* file_suffix, int line, Fault fault, int value = 0);

// A run's synchronisation in the order it happened, for the chapters' figures drawn from a real
// run (scripts/figures.py): each mbarrier wait that completed (the barrier's label and shared
// address, the parity waited for), each wgmma issued (its kernel line) and each cp.async issued
// (its global source), by block (linear) and block-local thread. record_sync(&events) starts
// appending to `events`, nullptr stops.
struct SyncEvent {
  int block, thread;
  std::string what;      // "wait", "wgmma" or "cp.async"
  std::string label;     // the mbarrier's label ("full", "empty", ...); for a cp.async, where
                         // its source is ("byte 264 of buffer 'Q' (2176 bytes)"); "" otherwise
  uint32_t address;      // the mbarrier's shared address; 0 otherwise
  uint32_t parity;       // the parity waited for; 0 otherwise
  int line;              // the kernel line
  uintptr_t source = 0;  // a cp.async's global source address; 0 otherwise
  uint32_t launch = 0;   // the launch it happened in (the process's n-th)
};
void record_sync(std::vector<SyncEvent>* events);
}  // namespace testing

}  // namespace simt
