// The state of one block of the CPU backend's core, shared by the files that make the core up:
//   runtime.cpp       the CUDA threads as fibers, their scheduling, warp collectives, barriers and
//                     the launch;
//   shared_memory.cpp what a block's shared memory holds (written, in flight from a cp.async, last
//                     stored by whom) and the checks on each access;
//   report.cpp        what the backend's errors say: source locations, names, the deadlock report.
// Internal to common/simt: kernels and the PTX emulations use runtime.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/simt/fiber.h"
#include "common/simt/launch.h"
#include "common/simt/runtime.h"

namespace simt::detail {

enum class Wait : uint8_t { none, barrier, collective, predicate };

// One CUDA thread. What it reads and writes itself on every warp collective comes first, in one
// cache line; what the scheduler and a collective's completion read for 32 threads at a time is
// not here but in the Block's dense per-thread arrays (contexts, ready, coll).
struct alignas(64) Thread {
  bool done = false;
  bool started = false;    // has begun running (set by the thread itself)
  bool unwind = false;     // set to end the thread by throwing Unwind where it waits
  bool abandoned = false;  // ended by fail_no_unwind: its fiber must never be resumed or unwound
  int tid = 0;             // ids.tid, here in the first cache line
  Wait wait = Wait::none;
  simt::where_t where;
  ThreadIds ids{};
  std::exception_ptr error;
  StackContext stack{};  // simt_switch_context: the thread's stack (from PooledStack)
  const char* what = nullptr;
  int barrier_id = -1;
  bool (*pred)(void*) = nullptr;
  void* pred_arg = nullptr;
  // Per barrier id, the generation (plus one) this thread last arrived in: a second arrival in
  // the same generation (two bar.arrive) is reported.
  uint32_t barrier_generation[16] = {};
};

struct Barrier {
  int count = 0;
  int arrived = 0;
  const char* what = nullptr;
  simt::where_t where;
  uint32_t generation = 0;  // completed generations
  uint32_t warps = 0;       // the warps that arrived in this generation, a bit each
  // The warps of the first generation that completed, and where: every later generation must
  // complete with the same warps (a barrier id belongs to one group of warps).
  uint32_t first_warps = 0;
  simt::where_t first_where;
};

struct Block {
  int nthreads = 0;
  std::unique_ptr<Thread[]> threads;
  std::unique_ptr<LaneSlot[]> slots;  // rounded up to whole warps
  // Per warp, as lane bitmasks: the lanes that exist and have not exited, and the lanes waiting
  // in a warp collective. An arriving lane checks in O(1) whether every live lane of its mask
  // waits (the only case in which try_complete can succeed) instead of scanning the warp.
  std::unique_ptr<uint32_t[]> live_lanes;
  std::unique_ptr<uint32_t[]> collective_lanes;
  // Per warp, the collective its first waiting lane waits in, and whether a lane waiting since
  // then waits in another one (mixed); reset when no lane waits. While not mixed, every waiting
  // lane waits in the same collective, and completing it needs no look at each lane's.
  struct WarpWait {
    uint32_t mask;
    bool mixed;
    const char* kind;
  };
  std::unique_ptr<WarpWait[]> warp_wait;
  Barrier barriers[16];
  int exited = 0;
  unsigned char* smem = nullptr;
  size_t smem_bytes = 0;
  // The whole allocation around smem: the slack before and after it is out of bounds.
  unsigned char* storage_lo = nullptr;
  unsigned char* storage_hi = nullptr;
  // Per 4-byte word of smem, the last plain store: (thread + 1) << 32 | its visible_epoch then;
  // tracked only in an instrumented kernel (track_stores).
  std::vector<uint64_t> stores;
  bool tracking = false;
  // The launch came from an instrumented translation unit (simt::launch's `instrumented`): only
  // then is every plain store seen, and tracking may start. A plain kernel can still call an
  // instrumented helper (an inline function the linker took from the instrumented copy), whose
  // accesses must not start tracking what the kernel's own plain stores never report.
  bool instrumented = false;
  // Per 16-byte chunk of smem, the cp.async or TMA load in flight into it (thread -1: none).
  struct Pending {
    const char* file;
    uint32_t line;
    int tid;
    const std::string* via;  // the mbarrier it lands through, or null: its issuer's wait_group
    bool tma = false;        // a TMA load (cp.async.bulk.tensor), which lands through `via`
  };
  std::vector<Pending> pending;
  // Per 16-byte chunk of smem, what the checks know of it (small enough to stay in the L1 cache):
  //   kWritten: anything wrote it since the block started (a store, a copy landing, mark_written);
  //   kInFlight: pending[chunk] holds a cp.async copy or a TMA load into it;
  //   kUnsettled: a tracked store wrote it since a barrier last released every thread of the
  //     block (which makes every store so far visible to all): only then may a word of it hold a
  //     store another lane of the writer's warp may not see yet, which `stores` tells.
  // A read of a chunk that is exactly kWritten breaks no rule.
  enum ChunkState : uint8_t { kWritten = 1, kInFlight = 2, kUnsettled = 4 };
  std::vector<uint8_t> chunks;
  uint3 idx{};
  int wake_min = 0;  // lowest thread made runnable since the greedy scheduler last looked
  // The scheduler's position, shared with suspend(), which switches straight to the thread the
  // scheduler would resume next: the round's order (forward, reverse, random) and the next entry
  // of it to look at; greedy keeps none.
  Schedule::Order order = Schedule::Order::forward;
  std::vector<int> round;
  size_t round_pos = 0;
  std::unique_ptr<BlockExtension> ext;  // Hopper emulation state (sm90.cpp), if the kernel uses it
  // Vector clocks (ordering_enabled): thread tid's is clocks[tid * nthreads ..], entry u the
  // latest event of thread u known to it. One accumulating clock per barrier id.
  std::vector<int32_t> clocks;
  SyncClock barrier_clocks[16];
  Context sched;  // the scheduler, while a CUDA thread runs
  // Per thread, in arrays of their own (a collective's completion and every switch read them for
  // 32 threads: dense, they stay in the L1 cache where the threads' own state does not):
  std::unique_ptr<Context[]> contexts;  // the thread while it does not run
  std::unique_ptr<uint8_t[]> ready;     // 1: may run (not waiting, not exited)
  // The collective a thread waits in, when its wait is Wait::collective.
  struct CollectiveWait {
    uint32_t mask;
    const char* kind;
    CollectiveFn fn;
  };
  std::unique_ptr<CollectiveWait[]> coll;
  const std::function<void()>* body = nullptr;
};

// The block this OS thread runs, and the CUDA thread of it running now.
extern constinit thread_local Block* t_block;
extern constinit thread_local Thread* t_thread;

inline Thread& current_thread() {
  return *t_thread;
}

// Thread tid became runnable: the greedy scheduler looks from the lowest such thread on.
inline void woke(Block& blk, int tid) {
  blk.wake_min = std::min(blk.wake_min, tid);
}

// The usual case of shared_access (runtime.h), inline for the instrumented build's every access:
// an access inside the block's dynamic shared memory, in a kernel whose stores are tracked, that
// breaks no rule. A store is recorded. Returns false, having changed nothing, in every other case,
// for shared_access (which asks it first too) to decide and to say what is wrong.
[[gnu::always_inline]] inline bool shared_access_fine(uintptr_t a, size_t bytes, bool write) {
  Block& blk = *t_block;
  const auto s = reinterpret_cast<uintptr_t>(blk.smem);
  if (!t_stores_decided || blk.stores.empty() || a < s || a + bytes > s + blk.smem_bytes)
    return false;
  const size_t off = a - s;
  const ThreadIds& me = *t_current;
  if (write) {
    const uint64_t mine = uint64_t(me.tid + 1) << 32 | me.visible_epoch;
    for (size_t w = off / 4; w <= (off + bytes - 1) / 4; ++w) {
      blk.stores[w] = mine;
      blk.chunks[w / 4] |= Block::kWritten | Block::kUnsettled;
    }
    return true;
  }
  bool settled = true;
  for (size_t c = off / 16; c <= (off + bytes - 1) / 16; ++c) {
    if ((blk.chunks[c] & (Block::kWritten | Block::kInFlight)) != Block::kWritten) return false;
    settled &= blk.chunks[c] == Block::kWritten;
  }
  if (settled) return true;
  for (size_t w = off / 4; w <= (off + bytes - 1) / 4; ++w) {
    const uint64_t last = blk.stores[w];
    if (last == 0) continue;
    const int writer = static_cast<int>(last >> 32) - 1;
    if (writer != me.tid && writer / 32 == me.warp &&
        blk.threads[writer].ids.visible_epoch == static_cast<uint32_t>(last))
      return false;
  }
  return true;
}

// ---- What errors say (report.cpp) ---------------------------------------------------------------

// "dir/file.cu:line": the file with its directory, so that the step is visible.
std::string loc_of(const char* name, unsigned line);
std::string loc(const simt::where_t& w);
// "block (x,y,z)" and "block (x,y,z) thread (x,y,z)".
std::string block_name(const uint3& b);
std::string thread_name(const ThreadIds& t);
// "0x0000ffff"
std::string hex(uint32_t v);
// How a pending cp.async copy lands, for a report of a read before it did.
std::string landing_hint(const Block::Pending& q);
// "0-31, 40, 42-44"
std::string ranges(const std::vector<int>& ids);
// Every thread of the block and what it waits for, threads in the same state grouped.
std::string deadlock_report(const Block& blk);

}  // namespace simt::detail
