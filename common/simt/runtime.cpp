#include "common/simt/runtime.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "common/simt/block.h"
#include "common/simt/counters.h"
#include "common/simt/device.h"
#include "common/simt/fiber.h"
#include "common/simt/launch.h"
#include "common/simt/memory.h"

namespace simt {

namespace detail {

constinit thread_local ThreadIds* t_current = nullptr;
constinit thread_local BlockExtension* t_extension = nullptr;
constinit thread_local bool t_in_fiber = false;
constinit thread_local bool t_stores_decided = false;
constinit thread_local uintptr_t t_stack_lo = 0, t_stack_hi = 0, t_shared_lo = 0, t_shared_hi = 0;
constinit thread_local const ThreadIds* t_stack_of = nullptr;
constinit thread_local SharedReads t_shared_reads = {0, 0, nullptr};
constinit thread_local Block* t_block = nullptr;
constinit thread_local Thread* t_thread = nullptr;

namespace {

// Thrown into a suspended CUDA thread to unwind its stack when its block ends early (another
// thread failed); its entry function catches it.
struct Unwind {};

// Makes `t` the CUDA thread this OS thread runs next.
void set_current(Thread& t) {
  t_current = &t.ids;
  t_thread = &t;
}
// What a collective's compute function reads as the input of a lane that gives none, and where it
// writes the output of a lane that takes none (see LaneSlot).
alignas(16) constexpr unsigned char kZeroPayload[kCollectivePayload] = {};
alignas(16) thread_local unsigned char t_scratch_out[kCollectivePayload];

// ---- A kernel that faults anyway -------------------------------------------------------------
// The uninstrumented build does not check plain loads and stores, so a misaligned vector access
// or a wild pointer can still fault (as can a fiber's stack overflow). Instead of a bare
// "Segmentation fault", name the launch, block and thread, and exit 1. Installed only if the
// program has no handler of its own (a debugger or a sanitizer keeps its own).
thread_local const char* t_launch_site = nullptr;

void on_fault(int sig, siginfo_t* info, void*) {
  if (!t_in_fiber || t_current == nullptr) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  const ThreadIds& t = *t_current;
  char buf[1024];
  const int n = std::snprintf(
      buf, sizeof buf,
      "error: %s: block (%u,%u,%u) thread (%u,%u,%u): %s at address %p: a misaligned vector "
      "access, an access outside every allocation, or a fiber stack overflow (SIMT_STACK_KB); "
      "tests/test_instrumented.cpp's build checks every access and names the line\n",
      t_launch_site ? t_launch_site : "kernel", t.block_idx.x, t.block_idx.y, t.block_idx.z,
      t.thread_idx.x, t.thread_idx.y, t.thread_idx.z, sig == SIGBUS ? "bus error" : "memory fault",
      info->si_addr);
  if (n > 0) (void)!write(2, buf, std::min<size_t>(static_cast<size_t>(n), sizeof buf - 1));
  _exit(1);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGSEGV, SIGBUS}) {
      struct sigaction old {};
      sigaction(sig, nullptr, &old);
      if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
      struct sigaction sa {};
      sa.sa_sigaction = on_fault;
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
      sigemptyset(&sa.sa_mask);
      sigaction(sig, &sa, nullptr);
    }
  });
}

// The thread the scheduler would resume next after `t` stopped running without exiting or
// failing, or -1 when it would first do more than pick one (start a round, look at predicates,
// report a deadlock). The same choice as the scheduler loop in run_block.
int next_to_run(Block& blk, const Thread& t) {
  if (blk.order == Schedule::Order::greedy) {
    const int n = blk.nthreads;
    for (int tid = std::min(t.tid, blk.wake_min); tid < n; ++tid)
      if (blk.ready[tid]) return tid;
    return -1;
  }
  while (blk.round_pos < blk.round.size()) {
    const int tid = blk.round[blk.round_pos++];
    if (blk.ready[tid]) return tid;
  }
  return -1;
}

// Stops the calling thread until it is made ready again and resumed. Instead of returning to the
// scheduler, which would only pick the next thread and resume it, switches to that thread
// directly (one context switch instead of two). A thread resumed only to be unwound throws.
[[gnu::always_inline]] inline void suspend(Thread& t) {
  Block& blk = *t_block;
  blk.ready[t.tid] = 0;
  const int next = next_to_run(blk, t);
  if (next < 0) {
    switch_context(blk.contexts[t.tid], blk.sched);
  } else {
    if (blk.order == Schedule::Order::greedy) blk.wake_min = blk.nthreads;
    // The thread after `next` runs next but one: start loading the top of its stack (the frames
    // that its return from the switch touches first) and its Thread. Measured at step4's shape:
    // about 10 % less time than none, 6 lines as good as 16 (more was slower).
    if (blk.round_pos < blk.round.size()) {
      const int after = blk.round[blk.round_pos];
      __builtin_prefetch(&blk.threads[after]);
      const char* sp = static_cast<const char*>(blk.contexts[after].sp);
      for (int i = 0; i < 6; ++i) __builtin_prefetch(sp + 64 * i);
    }
    set_current(blk.threads[next]);
    switch_context(blk.contexts[t.tid], blk.contexts[next]);
  }
  if (t.unwind) throw Unwind{};
}

// ---- Warp collectives
// -----------------------------------------------------------------------------

[[gnu::noinline, gnu::cold]] void count_collective(const Block& blk, int warp, uint32_t arrived,
                                                   const char* kind) {
  counters::hook::collective(kind, blk.threads[warp * 32 + std::countr_zero(arrived)].where, warp,
                             arrived, arrived == blk.live_lanes[warp], &blk.slots[warp * 32]);
}

// Completes the collective (kind, mask) of `warp` if every non-exited lane of the mask waits in
// it. Returns whether it completed.
bool try_complete(Block& blk, int warp, uint32_t mask, const char* kind, CollectiveFn fn) {
  // Exited lanes (and lanes past the end of the block) do not take part.
  const uint32_t arrived = mask & blk.live_lanes[warp];
  if (arrived == 0 || (arrived & ~blk.collective_lanes[warp]) != 0) return false;
  const Block::WarpWait& w = blk.warp_wait[warp];
  if (w.mixed) {
    for (uint32_t m = arrived; m != 0; m &= m - 1) {
      const Block::CollectiveWait& x = blk.coll[warp * 32 + std::countr_zero(m)];
      if (x.mask != mask || x.kind != kind) return false;
    }
  } else if (w.mask != mask || w.kind != kind) {
    return false;
  }
  LaneSlot* slots = &blk.slots[warp * 32];
  for (uint32_t m = mask & ~arrived; m != 0; m &= m - 1) {
    slots[std::countr_zero(m)].in = kZeroPayload;
    slots[std::countr_zero(m)].out = t_scratch_out;
  }
  fn(CollectiveView{mask, arrived, slots, warp});
  if (counters::active()) [[unlikely]]
    count_collective(blk, warp, arrived, kind);
  // Their Thread::wait stays Wait::collective (not worth a cache miss per lane): ready says
  // that they no longer wait.
  if (arrived == ~0u)
    std::memset(&blk.ready[warp * 32], 1, 32);
  else
    for (uint32_t m = arrived; m != 0; m &= m - 1) blk.ready[warp * 32 + std::countr_zero(m)] = 1;
  woke(blk, warp * 32 + std::countr_zero(arrived));
  blk.collective_lanes[warp] &= ~arrived;
  return true;
}

// ---- Thread exit --------------------------------------------------------------------------------

void on_exit(Block& blk, Thread& t) {
  // cp.async copies this thread issued that no cp.async.wait_group retired (nor an mbarrier took)
  // would land after the thread is gone, maybe in shared memory another block owns by then.
  const AsyncCopies& async = t.ids.async;
  size_t copies = async.open.size();
  const PendingCopy* newest = async.open.empty() ? nullptr : &async.open.back();
  for (const auto& group : async.groups)
    if (!group.empty()) copies += group.size(), newest = newest ? newest : &group.back();
  if (copies) {
    const Block::Pending& q = blk.pending[size_t(newest->dst - blk.smem) / 16];
    throw KernelError(thread_name(t.ids) + ": exits with " + std::to_string(copies) +
                      " cp.async cop" + (copies == 1 ? "y" : "ies") +
                      " in flight, never retired by a cp.async.wait_group (one issued at " +
                      (q.file ? loc_of(q.file, q.line) : "?") + ")");
  }
  if (blk.ext)
    if (const std::string left = blk.ext->thread_exited(t.tid); !left.empty())
      throw KernelError(thread_name(t.ids) + ": " + left);
  ++blk.exited;
  blk.live_lanes[t.ids.warp] &= ~(1u << t.ids.lane);
  // A barrier that already has arrivals can no longer complete if too few threads remain.
  for (int id = 0; id < 16; ++id) {
    const Barrier& b = blk.barriers[id];
    if (b.arrived == 0) continue;
    int could_arrive = 0;
    for (int tid = 0; tid < blk.nthreads; ++tid) {
      const Thread& x = blk.threads[tid];
      if (!x.done && !(x.wait == Wait::barrier && x.barrier_id == id)) ++could_arrive;
    }
    if (b.arrived + could_arrive < b.count)
      throw KernelError(block_name(blk.idx) + ": " + b.what + " (" + loc(b.where) +
                        ") can never complete: thread " + std::to_string(t.ids.tid) +
                        " exited without reaching it (" + std::to_string(b.arrived) + " of " +
                        std::to_string(b.count) + " threads arrived)\n" + deadlock_report(blk));
  }
  // Lanes waiting in a collective with this lane in its mask may now be complete (the lanes
  // that wait in one are collective_lanes; a completion may take several of them out).
  // (Usually none: then nothing to look at.)
  const int warp = t.ids.warp;
  for (uint32_t left = blk.collective_lanes[warp]; left != 0;
       left &= blk.collective_lanes[warp]) {  // less the lanes a completion took out
    const int lane = std::countr_zero(left);
    left &= left - 1;
    const Block::CollectiveWait& x = blk.coll[warp * 32 + lane];
    try_complete(blk, warp, x.mask, x.kind, x.fn);
  }
}

// ---- Running a block
// ------------------------------------------------------------------------------

// The function every CUDA thread's context runs: the kernel body, then back to the scheduler.
Context& thread_main(void* arg) {
  Thread& t = *static_cast<Thread*>(arg);
  t.started = true;
  try {
    (*t_block->body)();
  } catch (const Unwind&) {
    // unwound by release_threads: not an error
  } catch (...) {
    t.error = std::current_exception();
  }
  t.done = true;
  t_block->ready[t.tid] = 0;
  return t_block->sched;
}

// Ends the block's threads: unwinds those still suspended (the block ended early, another thread
// failed), so that their stacks' objects are destroyed, and gives back their stacks. A thread
// ended by fail_no_unwind waits inside a check that cannot unwind: its stack is kept forever.
void release_threads(Block& blk) {
  for (int tid = 0; tid < blk.nthreads && blk.threads; ++tid) {
    Thread& t = blk.threads[tid];
    if (t.abandoned) {
#if SIMT_BOOST_CONTEXT
      if (blk.contexts[tid].fiber) new ctx::fiber(std::move(blk.contexts[tid].fiber));
#endif
      t.stack = {};
      continue;
    }
    if (t.started && !t.done) {
      t.unwind = true;
      set_current(t);
      t_in_fiber = true;
      switch_context(blk.sched, blk.contexts[tid]);
      t_in_fiber = false;
    }
    free_context(blk.contexts[tid], t.stack);
  }
  blk.threads.reset();
  blk.contexts.reset();
}

struct LaunchState {
  dim3 grid, block;
  size_t smem_bytes;
  const std::function<void()>* body;
  Schedule schedule;
  bool counting;      // counters::active() when the launch began
  bool instrumented;  // the kernel reports its accesses (an instrumented translation unit)
};

void run_block(const LaunchState& L, uint3 bidx, uint64_t linear_block, Block& blk,
               std::vector<unsigned char>& smem_storage) {
  const int n = static_cast<int>(L.block.x * L.block.y * L.block.z);
  blk.nthreads = n;
  blk.threads = std::make_unique<Thread[]>(n);
  blk.contexts = std::make_unique<Context[]>(n);
  blk.ready = std::make_unique<uint8_t[]>(n);
  std::fill_n(blk.ready.get(), n, uint8_t{1});
  blk.coll = std::make_unique<Block::CollectiveWait[]>(n);
  blk.slots = std::make_unique<LaneSlot[]>((n + 31) / 32 * 32);
  const int warps = (n + 31) / 32;
  blk.live_lanes = std::make_unique<uint32_t[]>(warps);
  blk.collective_lanes = std::make_unique<uint32_t[]>(warps);
  blk.warp_wait = std::make_unique<Block::WarpWait[]>(warps);
  for (int w = 0; w < warps; ++w) {
    const int lanes = std::min(32, n - 32 * w);
    blk.live_lanes[w] = lanes == 32 ? ~0u : (1u << lanes) - 1;
    blk.collective_lanes[w] = 0;
  }
  for (Barrier& b : blk.barriers) b = Barrier{};
  blk.exited = 0;
  blk.idx = bidx;
  blk.ext.reset();
  t_extension = nullptr;
  // Dynamic shared memory starts as poison (0xFF: NaN as fp16, bf16 and fp32; -1 as an integer).
  // At least 1 KiB of slack on either side, so that an instrumented kernel's access just outside
  // it is recognised as an out-of-bounds shared-memory access.
  const size_t align = 1024;
  smem_storage.resize(L.smem_bytes + 3 * align);
  auto base = reinterpret_cast<uintptr_t>(smem_storage.data());
  blk.smem = reinterpret_cast<unsigned char*>((base + align - 1) / align * align + align);
  blk.smem_bytes = L.smem_bytes;
  blk.storage_lo = smem_storage.data();
  blk.storage_hi = smem_storage.data() + smem_storage.size();
  t_shared_lo = reinterpret_cast<uintptr_t>(blk.storage_lo);
  t_shared_hi = reinterpret_cast<uintptr_t>(blk.storage_hi);
  std::memset(blk.smem, 0xFF, L.smem_bytes);
  blk.stores.clear();  // allocated when an instrumented kernel starts (track_stores)
  blk.tracking = false;
  t_stores_decided = false;
  t_shared_reads = {0, 0, nullptr};
  blk.instrumented = L.instrumented;
  blk.pending.assign((L.smem_bytes + 15) / 16, Block::Pending{nullptr, 0, -1, nullptr});
  blk.chunks.assign((L.smem_bytes + 15) / 16, 0);
  blk.clocks.clear();
  for (SyncClock& c : blk.barrier_clocks) c.clear();
  blk.wake_min = n;
  blk.body = L.body;
  t_block = &blk;
  if (L.counting) counters::hook::block_begin(n, blk.live_lanes.get());

  for (int tid = 0; tid < n; ++tid) {
    Thread& t = blk.threads[tid];
    t.ids.thread_idx = {static_cast<unsigned>(tid) % L.block.x,
                        static_cast<unsigned>(tid) / L.block.x % L.block.y,
                        static_cast<unsigned>(tid) / (L.block.x * L.block.y)};
    t.ids.block_idx = bidx;
    t.ids.block_dim = L.block;
    t.ids.grid_dim = L.grid;
    t.ids.tid = tid;
    t.ids.lane = tid % 32;
    t.ids.warp = tid / 32;
    t.tid = tid;
    make_context(blk.contexts[tid], t.stack, thread_main, &t);
  }
  t_stack_of = nullptr;  // the threads may have other stacks than in the last block

  std::mt19937_64 rng(L.schedule.seed * 0x9E3779B97F4A7C15ull + linear_block);
  std::vector<int>& order = blk.round;
  order.clear();
  order.reserve(n);
  blk.round_pos = 0;
  blk.order = L.schedule.order;
  int finished = 0;
  // Resumes `first`; returns the thread that came back to the scheduler, which is another one
  // when threads switched to each other directly (suspend).
  auto resume = [&](Thread& first) -> Thread& {
    set_current(first);
    t_in_fiber = true;
    switch_context(blk.sched, blk.contexts[first.tid]);
    t_in_fiber = false;
    Thread& t = *t_thread;
    if (t.error) {
      try {
        std::rethrow_exception(t.error);
      } catch (const std::exception& e) {
        throw KernelError(thread_name(t.ids) + ": " + e.what());
      }
    }
    if (t.done) {
      ++finished;
      on_exit(blk, t);
    }
    return t;
  };
  if (L.schedule.order == Schedule::Order::greedy) {
    // Always the lowest runnable thread: scan up from the lowest one that may have become
    // runnable (a resumed thread wakes others only through woke()).
    int pos = 0;
    while (finished < n) {
      int tid = pos;
      while (tid < n && !blk.ready[tid]) ++tid;
      // None is ready: the waiting threads' predicates, looked at again while none holds (see
      // wait_until).
      for (int look = 0; tid == n && look < kWaitLooks; ++look)
        for (int k = 0; k < n; ++k) {
          Thread& t = blk.threads[k];
          if (!t.done && !blk.ready[k] && t.wait == Wait::predicate && t.pred(t.pred_arg)) {
            blk.ready[k] = 1;
            t.wait = Wait::none;
            tid = std::min(tid, k);
          }
        }
      if (tid == n) throw KernelError(deadlock_report(blk));
      blk.wake_min = n;
      const Thread& back = resume(blk.threads[tid]);
      pos = std::min(back.ids.tid, blk.wake_min);
    }
    return;
  }
  while (finished < n) {
    // The threads that may run now, in tid order (without a branch per thread: every tid is
    // written, and the count moves past it only if it may run). None: the waiting threads'
    // predicates are looked at again while none holds (see wait_until).
    for (int look = 0; look < kWaitLooks && (look == 0 || order.empty()); ++look) {
      order.resize(n);
      size_t count = 0;
      for (int tid = 0; tid < n; ++tid) {
        bool ready = blk.ready[tid];  // (an exited thread is never ready)
        if (!ready) [[unlikely]] {
          Thread& t = blk.threads[tid];
          if (!t.done && t.wait == Wait::predicate && t.pred(t.pred_arg)) {
            blk.ready[tid] = 1;
            t.wait = Wait::none;
            ready = true;
          }
        }
        order[count] = tid;
        count += ready;
      }
      order.resize(count);
    }
    if (order.empty()) throw KernelError(deadlock_report(blk));
    if (L.schedule.order == Schedule::Order::reverse) std::reverse(order.begin(), order.end());
    if (L.schedule.order == Schedule::Order::random) std::shuffle(order.begin(), order.end(), rng);
    for (blk.round_pos = 0; blk.round_pos < order.size();) {
      Thread& t = blk.threads[order[blk.round_pos++]];
      if (!blk.ready[t.tid]) continue;
      resume(t);
    }
  }
}

// ---- The API used by intrinsics
// -------------------------------------------------------------------

[[noreturn, gnu::noinline, gnu::cold]] void lane_not_in_mask(uint32_t mask, const char* kind,
                                                             const simt::where_t& where) {
  fail(std::string(kind) + " at " + loc(where) + ": mask " + hex(mask) +
       " does not include the calling lane " + std::to_string(current().lane));
}
}  // namespace

void warp_collective(uint32_t mask, const char* kind, const void* in, void* out,
                     CollectiveFn compute, const simt::where_t& where) {
  Thread& t = current_thread();
  Block& blk = *t_block;
  const int lane = t.tid & 31, warp = t.tid >> 5;
  if (!(mask >> lane & 1u)) [[unlikely]]
    lane_not_in_mask(mask, kind, where);
  LaneSlot& slot = blk.slots[t.tid];
  slot.in = static_cast<const unsigned char*>(in);
  slot.out = static_cast<unsigned char*>(out);
  t.wait = Wait::collective;
  blk.coll[t.tid] = {mask, kind, compute};
  t.where = where;
  Block::WarpWait& w = blk.warp_wait[warp];
  if (blk.collective_lanes[warp] == 0)
    w = {mask, false, kind};
  else if (w.mask != mask || w.kind != kind)
    w.mixed = true;
  blk.collective_lanes[warp] |= 1u << lane;
  // Only when every live lane of the mask waits can the collective complete.
  if ((mask & blk.live_lanes[warp] & ~blk.collective_lanes[warp]) != 0 ||
      !try_complete(blk, warp, mask, kind, compute))
    suspend(t);  // resumed once try_complete made it ready again
}

// Thread tid's vector clock joined with c (an acquire by thread tid).
void acquire_into(Block& blk, int tid, const SyncClock& c) {
  if (c.empty()) return;
  int32_t* clock = &blk.clocks[size_t(tid) * blk.nthreads];
  for (size_t i = 0; i < c.size(); ++i) clock[i] = std::max(clock[i], c[i]);
}

// The barrier `id` that a bar.sync or bar.arrive of `count` threads joins: the id and count
// checked, and the count it expects fixed by its first arrival.
Barrier& join_barrier(Block& blk, int id, int count, const char* what, const simt::where_t& where) {
  if (id < 0 || id > 15)
    fail(std::string(what) + ": barrier id " + std::to_string(id) + " not in 0..15");
  if (count < 1 || count > blk.nthreads)
    fail(std::string(what) + " at " + loc(where) + ": thread count " + std::to_string(count) +
         " not in 1.." + std::to_string(blk.nthreads));
  Barrier& b = blk.barriers[id];
  if (b.arrived == 0) {
    b.count = count;
    b.what = what;
    b.where = where;
  } else if (b.count != count) {
    fail(std::string(what) + " at " + loc(where) + ": barrier " + std::to_string(id) + " expects " +
         std::to_string(count) + " threads here but " + std::to_string(b.count) + " at " +
         loc(b.where));
  }
  Thread& t = current_thread();
  if (t.barrier_generation[id] == b.generation + 1)
    fail(std::string(what) + " at " + loc(where) + ": thread " + std::to_string(t.tid) +
         " arrives a second time in one generation of barrier " + std::to_string(id) + " (" +
         std::to_string(b.arrived) + " of " + std::to_string(b.count) +
         " arrivals so far): on a GPU both arrivals count, and the barrier completes without "
         "threads it was meant to wait for");
  t.barrier_generation[id] = b.generation + 1;
  b.warps |= 1u << t.ids.warp;
  if (!blk.clocks.empty()) release_to(blk.barrier_clocks[id]);
  return b;
}

// "warps 4-7"
std::string warp_list(uint32_t warps) {
  std::vector<int> ids;
  for (int w = 0; w < 32; ++w)
    if (warps >> w & 1u) ids.push_back(w);
  return (ids.size() == 1 ? "warp " : "warps ") + ranges(ids);
}

// Completes barrier `id`: every thread waiting at it runs again, with the stores made before the
// barrier visible to it.
//
// Stricter than hardware: a barrier id belongs to one group of warps. A generation that
// completes with more warps than its thread count holds, or with other warps than the first
// generation did, means two groups share the id: on a GPU their arrivals can mix, and a group can
// pass on the other's arrivals (here each group may happen to fill a generation of its own).
void release_barrier(Block& blk, int id, const simt::where_t& where) {
  Barrier& b = blk.barriers[id];
  const int warps = std::popcount(b.warps);
  const std::string name =
      std::string(b.what) + " " + std::to_string(id) + " (" + std::to_string(b.count) + " threads)";
  if (warps > (b.count + 31) / 32)
    fail(name + " completed at " + loc(where) + " with arrivals from " + warp_list(b.warps) +
         ", more warps than " + std::to_string(b.count) +
         " threads make: groups of warps share this barrier id and their arrivals mixed (give "
         "each group its own id)");
  if (b.first_warps == 0) {
    b.first_warps = b.warps;
    b.first_where = where;
  } else if (b.warps != b.first_warps) {
    fail(name + " completed at " + loc(where) + " with " + warp_list(b.warps) + ", but with " +
         warp_list(b.first_warps) + " at " + loc(b.first_where) +
         " before: two groups of warps share this barrier id, and on a GPU their arrivals can "
         "mix, so that a group passes on the other's arrivals (give each group its own id)");
  }
  if (counters::active()) [[unlikely]] {
    counters::hook::barrier(b.where, std::strcmp(b.what, "__syncthreads()") == 0, warps);
    // A warp all of whose live lanes arrived in this generation and wait here has synchronised
    // as a whole. A lane that only arrived (bar.arrive) did not wait: it may be past later
    // accesses already, which the other lanes have still to make (PTX ISA, bar.arrive).
    for (uint32_t m = b.warps; m != 0; m &= m - 1) {
      const int w = std::countr_zero(m);
      bool whole = true;
      for (uint32_t l = blk.live_lanes[w]; l != 0 && whole; l &= l - 1) {
        const Thread& x = blk.threads[w * 32 + std::countr_zero(l)];
        whole = x.barrier_generation[id] == b.generation + 1 && !x.done &&
                x.wait == Wait::barrier && x.barrier_id == id;
      }
      if (whole) counters::hook::warp_synced(w);
    }
  }
  const bool ordering = !blk.clocks.empty();
  int released = 0;
  for (int tid = 0; tid < blk.nthreads; ++tid) {
    Thread& x = blk.threads[tid];
    if (!x.done && x.wait == Wait::barrier && x.barrier_id == id) {
      x.wait = Wait::none;
      blk.ready[tid] = 1;
      ++x.ids.visible_epoch;  // a barrier makes earlier shared-memory stores visible
      if (ordering) acquire_into(blk, tid, blk.barrier_clocks[id]);
      woke(blk, tid);
      ++released;
    }
  }
  // Every thread of the block waited here: every store so far is visible to all of them.
  if (released == blk.nthreads)
    for (uint8_t& c : blk.chunks) c &= uint8_t(~Block::kUnsettled);
  if (ordering) std::fill(blk.barrier_clocks[id].begin(), blk.barrier_clocks[id].end(), 0);
  b.arrived = 0;
  b.warps = 0;
  ++b.generation;
}

void barrier_sync(int id, int count, const char* what, const simt::where_t& where) {
  Thread& t = current_thread();
  Block& blk = *t_block;
  Barrier& b = join_barrier(blk, id, count, what, where);
  if (std::strcmp(what, "__syncthreads()") == 0 &&
      (b.where.line() != where.line() || std::strcmp(b.where.file_name(), where.file_name()) != 0))
    fail("__syncthreads() in divergent code: this thread arrived at " + loc(where) +
         " while others wait at " + loc(b.where) + "\n" + deadlock_report(blk));
  if (blk.exited > 0) {
    int could_arrive = 0;
    for (int tid = 0; tid < blk.nthreads; ++tid) {
      const Thread& x = blk.threads[tid];
      if (!x.done && !(x.wait == Wait::barrier && x.barrier_id == id)) ++could_arrive;
    }
    if (b.arrived + could_arrive < count)
      fail(std::string(what) + " at " + loc(where) +
           " can never complete: " + std::to_string(blk.exited) +
           " thread(s) of the block exited without reaching it\n" + deadlock_report(blk));
  }
  ++b.arrived;
  t.wait = Wait::barrier;
  t.barrier_id = id;
  t.what = what;
  t.where = where;
  if (b.arrived == b.count) {
    release_barrier(blk, id, where);
    return;
  }
  suspend(t);
}

void wait_until(bool (*ready)(void*), void* arg, const char* what, const simt::where_t& where) {
  if (ready(arg)) return;
  Thread& t = current_thread();
  t.wait = Wait::predicate;
  t.pred = ready;
  t.pred_arg = arg;
  t.what = what;
  t.where = where;
  suspend(t);
}

void barrier_arrive(int id, int count, const char* what, const simt::where_t& where) {
  Block& blk = *t_block;
  Barrier& b = join_barrier(blk, id, count, what, where);
  ++current_thread().ids.visible_epoch;  // bar.arrive releases the caller's earlier stores
  if (++b.arrived == b.count) release_barrier(blk, id, where);
}

// ---- Happens-before
// ------------------------------------------------------------------------------

void enable_ordering() {
  Block& blk = *t_block;
  if (!blk.clocks.empty()) return;
  const size_t n = static_cast<size_t>(blk.nthreads);
  blk.clocks.assign(n * n, 0);
  for (SyncClock& c : blk.barrier_clocks) c.assign(n, 0);
}

bool ordering_enabled() {
  return !t_block->clocks.empty();
}

OrderEvent order_event() {
  Block& blk = *t_block;
  const int tid = t_current->tid;
  int32_t& own = blk.clocks[size_t(tid) * blk.nthreads + tid];
  return {tid, own++};
}

bool ordered_before(const OrderEvent& e, int tid) {
  const Block& blk = *t_block;
  return e.tid == tid || blk.clocks[size_t(tid) * blk.nthreads + e.tid] > e.clock;
}

void release_to(SyncClock& c) {
  Block& blk = *t_block;
  const size_t n = static_cast<size_t>(blk.nthreads);
  if (c.size() != n) c.assign(n, 0);
  const int32_t* mine = &blk.clocks[size_t(t_current->tid) * n];
  for (size_t i = 0; i < n; ++i) c[i] = std::max(c[i], mine[i]);
}

void acquire_from(const SyncClock& c) {
  acquire_into(*t_block, t_current->tid, c);
}

BlockExtension* block_extension() {
  return t_block->ext.get();
}
void set_block_extension(BlockExtension* ext) {
  t_block->ext.reset(ext);
  t_extension = ext;
}

unsigned char* dynamic_shared_memory() {
  return t_block->smem;
}
size_t dynamic_shared_memory_bytes() {
  return t_block->smem_bytes;
}

int block_threads() {
  return t_block->nthreads;
}

void mark_visible() {
  ++t_current->visible_epoch;
}

void mark_visible(int warp, uint32_t lanes) {
  Block& blk = *t_block;
  if (!blk.clocks.empty()) {  // __syncwarp orders the lanes' memory operations: join their clocks
    SyncClock joined(size_t(blk.nthreads), 0);
    for (uint32_t l = lanes; l != 0; l &= l - 1)
      if (const int tid = warp * 32 + std::countr_zero(l); tid < blk.nthreads)
        for (int i = 0; i < blk.nthreads; ++i)
          joined[i] = std::max(joined[i], blk.clocks[size_t(tid) * blk.nthreads + i]);
    for (uint32_t l = lanes; l != 0; l &= l - 1)
      if (const int tid = warp * 32 + std::countr_zero(l); tid < blk.nthreads)
        acquire_into(blk, tid, joined);
  }
  for (; lanes != 0; lanes &= lanes - 1) {
    const int tid = warp * 32 + std::countr_zero(lanes);
    if (tid < blk.nthreads) ++blk.threads[tid].ids.visible_epoch;
  }
}

void refresh_stack_bounds() {
  t_stack_of = t_current;
  t_stack_hi = reinterpret_cast<uintptr_t>(t_thread->stack.sp);
  t_stack_lo = t_stack_hi - t_thread->stack.size;
}

void fail_no_unwind(const std::string& what) {
  Thread& t = current_thread();
  t.error = std::make_exception_ptr(KernelError(what));
  t.abandoned = true;
  t_block->ready[t.tid] = 0;
  switch_context(t_block->contexts[t.tid], t_block->sched);
  std::abort();  // never resumed
}

}  // namespace detail

void fail(const std::string& what) {
  throw KernelError(what);
}

// ---- Launch
// ---------------------------------------------------------------------------------------

namespace {
std::mutex g_schedule_mutex;
Schedule g_schedule;
}  // namespace

int sm_count() {
  const char* env = std::getenv("SIMT_SMS");
  if (env == nullptr || *env == '\0') return kDefaultSms;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 1024)
    throw std::invalid_argument(std::string("SIMT_SMS=") + env +
                                ": not a count of SMs (a whole number from 1 to 1024)");
  return static_cast<int>(n);
}

Schedule parse_schedule(const std::string& s) {
  Schedule r;
  if (s == "forward") return r;
  if (s == "reverse") {
    r.order = Schedule::Order::reverse;
    return r;
  }
  if (s == "greedy") {
    r.order = Schedule::Order::greedy;
    return r;
  }
  if (s == "random" || s.rfind("random:", 0) == 0) {
    r.order = Schedule::Order::random;
    if (s.size() > 7) {
      const std::string digits = s.substr(7);
      if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 19)
        throw std::invalid_argument("schedule seed must be a decimal number: " + s);
      r.seed = std::stoull(digits);
    }
    return r;
  }
  throw std::invalid_argument("unknown schedule '" + s +
                              "': expected forward, reverse, random[:SEED] or greedy");
}

std::string to_string(const Schedule& s) {
  switch (s.order) {
    case Schedule::Order::forward: return "forward";
    case Schedule::Order::reverse: return "reverse";
    case Schedule::Order::random: return "random:" + std::to_string(s.seed);
    case Schedule::Order::greedy: return "greedy";
  }
  return "?";
}

const char* context_switch() {
  return detail::asm_switch() ? "simt_switch_context" : "Boost.Context";
}

void set_schedule(const Schedule& s) {
  std::lock_guard lock(g_schedule_mutex);
  g_schedule = s;
}

Schedule schedule() {
  std::lock_guard lock(g_schedule_mutex);
  return g_schedule;
}

namespace {
ProgressHook g_progress;  // guarded by g_schedule_mutex
}  // namespace

void set_progress_hook(ProgressHook hook) {
  std::lock_guard lock(g_schedule_mutex);
  g_progress = std::move(hook);
}

namespace {
std::atomic<const std::atomic<bool>*> g_interrupt{nullptr};
}  // namespace

void set_interrupt(const std::atomic<bool>* flag) {
  g_interrupt.store(flag);
}

namespace detail {
namespace {
std::atomic<uint32_t> g_launch_serial{0};
}  // namespace
uint32_t launch_serial() {
  return g_launch_serial.load(std::memory_order_relaxed);
}
}  // namespace detail

void launch(dim3 grid, dim3 block, size_t smem, const std::function<void()>& body,
            const simt::where_t& where, bool instrumented) {
  detail::g_launch_serial.fetch_add(1, std::memory_order_relaxed);
  const std::string site = "kernel launched at " + detail::loc(where);
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock)
    throw KernelError(site + ": invalid launch: " + std::to_string(threads) +
                      " threads per block (1.." + std::to_string(kMaxThreadsPerBlock) + ")");
  if (block.z > 64)
    throw KernelError(site + ": invalid launch: blockDim.z " + std::to_string(block.z) + " > 64");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
      grid.x > 2147483647u)
    throw KernelError(site + ": invalid launch: grid (" + std::to_string(grid.x) + "," +
                      std::to_string(grid.y) + "," + std::to_string(grid.z) + ")");
  if (smem > kMaxDynamicSmem)
    throw KernelError(site + ": invalid launch: " + std::to_string(smem) +
                      " bytes of dynamic shared memory (at most " +
                      std::to_string(kMaxDynamicSmem) + " on sm_90)");

  // SIMT_LOG_LAUNCHES=FILE appends "file:line threads smem_bytes plain|instrumented" per launch
  // (scripts/kernel_report.py reads it to learn each kernel's block size and dynamic shared
  // memory; the last field says which copy ran, for tests).
  if (const char* log = std::getenv("SIMT_LOG_LAUNCHES")) {
    static std::mutex log_mutex;
    std::lock_guard lock(log_mutex);
    if (FILE* f = std::fopen(log, "a")) {
      std::fprintf(f, "%s:%u %llu %zu %s\n", where.file_name(), where.line(),
                   static_cast<unsigned long long>(threads), smem,
                   instrumented ? "instrumented" : "plain");
      std::fclose(f);
    }
  }
  const detail::LaunchState L{grid,        block, smem, &body, schedule(), counters::active(),
                              instrumented};
  if (L.counting) counters::hook::launch();
  const uint64_t nblocks = uint64_t(grid.x) * grid.y * grid.z;
  std::vector<uint64_t> order(nblocks);
  for (uint64_t i = 0; i < nblocks; ++i) order[i] = i;
  if (L.schedule.order == Schedule::Order::reverse) std::reverse(order.begin(), order.end());
  if (L.schedule.order == Schedule::Order::random) {
    std::mt19937_64 rng(L.schedule.seed);
    std::shuffle(order.begin(), order.end(), rng);
  }

  unsigned workers = std::thread::hardware_concurrency();
  if (const char* env = std::getenv("SIMT_WORKERS")) workers = std::strtoul(env, nullptr, 10);
  workers = static_cast<unsigned>(std::clamp<uint64_t>(workers, 1, nblocks));

  const ProgressHook progress = [] {
    std::lock_guard lock(g_schedule_mutex);
    return g_progress;
  }();
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;
  detail::install_fault_handler();
  auto work = [&] {
    // The fault handler runs on its own stack: the fault may be a fiber's stack overflow.
    std::vector<char> alt_stack(64 * 1024);
    stack_t ss{};
    ss.ss_sp = alt_stack.data();
    ss.ss_size = alt_stack.size();
    sigaltstack(&ss, nullptr);
    detail::t_launch_site = site.c_str();
    detail::Block blk;
    std::vector<unsigned char> smem_storage;
    for (uint64_t i; !failed.load(std::memory_order_relaxed) && (i = next++) < nblocks;) {
      const uint64_t b = order[i];
      if (const std::atomic<bool>* stop = g_interrupt.load(); stop != nullptr && stop->load()) {
        std::lock_guard lock(error_mutex);
        if (!failed.exchange(true)) error = "interrupted";
        break;
      }
      if (progress) progress(i + 1, nblocks);
      const uint3 bidx{static_cast<unsigned>(b % grid.x),
                       static_cast<unsigned>(b / grid.x % grid.y),
                       static_cast<unsigned>(b / (uint64_t(grid.x) * grid.y))};
      try {
        detail::run_block(L, bidx, b, blk, smem_storage);
        if (L.counting) counters::hook::block_end();
      } catch (const std::exception& e) {
        std::lock_guard lock(error_mutex);
        if (!failed.exchange(true)) error = e.what();
      }
      detail::release_threads(blk);  // unwinds the fibers of a failed block
    }
    detail::t_current = nullptr;
    detail::t_thread = nullptr;
    detail::t_block = nullptr;
    detail::t_shared_reads = {0, 0, nullptr};  // the blocks' shared memory is gone
    detail::t_launch_site = nullptr;
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
  };
  if (workers == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < workers; ++w) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  if (failed) throw KernelError(site + ": " + error);
  if (const std::string bad = check_guards(); !bad.empty()) throw KernelError(site + ": " + bad);
}

}  // namespace simt
