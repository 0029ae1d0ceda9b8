// The CPU SIMT backend's core: a block of CUDA threads runs as fibers on one OS thread, switching
// only where a CUDA thread would wait for others (barriers, warp collectives, async waits).
//
// This header is the interface between the core and the intrinsics built on it (warp.h and,
// later, the PTX emulations). Kernels do not include it directly: they see simt.h.
#pragma once

#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>
#include "common/simt/where.h"

namespace simt {

// A kernel fault found by the backend: deadlock, barrier misuse, out-of-bounds write, a misused
// intrinsic. The message names the block, the threads and what they waited on.
struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raises a KernelError for the calling CUDA thread (the message gets its block and thread).
[[noreturn]] void fail(const std::string& what);

namespace detail {

// cp.async state of one thread: copies issued since the last commit_group, and the committed
// groups not yet waited for, oldest first. A copy lands in shared memory only when a
// wait_group retires its group (see ptx.cpp), never earlier.
struct PendingCopy {
  unsigned char* dst;
  unsigned char data[16];  // the source bytes, read when the copy was issued
  int bytes;               // bytes copied from the source; the rest of the 16 are zero-filled
};
struct AsyncCopies {
  std::vector<PendingCopy> open;
  std::vector<std::vector<PendingCopy>> groups;  // not a deque: that allocates when constructed
  std::vector<std::vector<PendingCopy>> spare;   // emptied groups, their buffers kept for reuse
};

// What the builtins threadIdx, blockIdx, blockDim and gridDim read, and other per-thread state
// of the PTX emulations. One per CUDA thread.
struct ThreadIds {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  int tid;   // linear thread index in the block
  int lane;  // tid % 32
  int warp;  // tid / 32
  AsyncCopies async;
  // Counts the points at which this thread's earlier shared-memory stores became visible to the
  // other lanes of its warp: __syncwarp, a block barrier, a memory fence (see shared_access).
  uint32_t visible_epoch;
};

// The CUDA thread running on this OS thread right now.
// constinit: no dynamic initialisation, so other files read it directly (no TLS wrapper call).
extern thread_local constinit ThreadIds* t_current;
// The running block's extension (block_extension() below), read inline on hot paths.
struct BlockExtension;
extern thread_local constinit BlockExtension* t_extension;

inline ThreadIds& current() {
  return *t_current;
}

// ---- Warp collectives --------------------------------------------------------------------------
// Every warp-wide operation (shuffles, votes, __syncwarp, and later ldmatrix and mma) is one
// rendezvous: each lane in `mask` deposits an input and waits; once every non-exited lane of the
// mask has arrived at an operation of the same kind with the same mask, the last one to arrive
// runs `compute` over all inputs and writes every lane's output. Lanes that exited do not take
// part (as in PTX); reading from one is an error.

constexpr size_t kCollectivePayload = 128;  // the most bytes of input or of output per lane

// A waiting lane's input and output, in place: `in` points at the input the lane passed (it stays
// put while the lane waits) and `out` at its result buffer, so nothing is copied. For a lane of
// the mask that does not take part (it exited), `in` reads kCollectivePayload zero bytes and
// `out` is scratch; a compute function writes at most kCollectivePayload bytes of output.
struct LaneSlot {
  const unsigned char* in;
  unsigned char* out;
};

struct CollectiveView {
  uint32_t mask;     // the lanes named by the operation
  uint32_t arrived;  // lanes of the mask that take part (the mask minus exited lanes)
  LaneSlot* lanes;   // indexed by lane, 32 entries
  int warp;
};

using CollectiveFn = void (*)(const CollectiveView& view);

// `kind` names the operation for matching and messages ("__shfl_xor_sync", "mma.sync..."):
// lanes meet only if they pass the same pointer (string literals at one call site are fine; the
// wrappers pass their own name). The lane's slot points at `in` and `out` while it waits;
// `compute` reads the one and writes the other (an operation with no input or no output passes
// nullptr, and its compute function reads or writes nothing there).
void warp_collective(uint32_t mask, const char* kind, const void* in, void* out,
                     CollectiveFn compute, const simt::where_t& where);

// ---- Block barriers ----------------------------------------------------------------------------
// bar.sync: barrier `id` (0..15) completes when `count` threads have arrived. __syncthreads is
// barrier 0 with the whole block; it is an error for any thread of the block to exit instead.
void barrier_sync(int id, int count, const char* what, const simt::where_t& where);

// ---- Shared memory -----------------------------------------------------------------------------
// The block's dynamic shared memory (the launch's smem bytes), poisoned at block start.
unsigned char* dynamic_shared_memory();
size_t dynamic_shared_memory_bytes();
// Fails (naming `what` and `where`) unless [p, p + bytes) lies in the block's dynamic shared
// memory and p is aligned to `align` bytes.
void check_shared(const void* p, size_t bytes, size_t align, const char* what,
                  const simt::where_t& where);
// Number of threads in the block (a warp-wide PTX operation needs whole warps).
int block_threads();

// ---- Generic waiting, for asynchronous operations added by later steps
// --------------------------- Suspends the calling CUDA thread until `ready(arg)` returns true.
// `what` and `where` appear in the deadlock report. The predicate is re-evaluated whenever another
// thread of the block ran, and, when no thread can run, up to kWaitLooks times in a row before the
// block is called deadlocked: a wait that only sits out scheduling passes (a predicate that counts
// its looks, as wgmma.wait_group's does) has nothing to sit out then.
void wait_until(bool (*ready)(void*), void* arg, const char* what, const simt::where_t& where);
constexpr int kWaitLooks = 3;

// ---- Memory-access checks of instrumented kernels (checks.cpp) ---------------------------------
// Kernels compiled with ATTN_INSTRUMENT's flags call the backend on every load and store; these
// are the parts of that check that need the block's state.

// While a kernel fiber runs on this OS thread: t_in_fiber, and the bounds [lo, hi) of its block's
// shared memory storage (shared_access) and of the stack of the thread t_stack_of (empty with
// Boost.Context fibers, whose stacks Boost keeps): the checks' fast path (checks.cpp) reads them
// inline, and refresh_stack_bounds() moves the stack's to the running thread when it reads them
// first after a switch (so that a switch of an uninstrumented kernel pays nothing for them).
extern thread_local constinit bool t_in_fiber;
extern thread_local constinit uintptr_t t_stack_lo, t_stack_hi, t_shared_lo, t_shared_hi;
extern thread_local constinit const ThreadIds* t_stack_of;
void refresh_stack_bounds();
// The most frequent check of all, a read of shared memory that breaks no rule, decided inline
// from one record (checks.cpp): the running block's shared memory and its chunks' states
// (Block::chunks), set when the block starts tracking stores (an instrumented kernel: track_stores)
// and cleared when a block starts and when a launch ends; bytes 0 while there is none. Set only
// while this OS thread runs a block, whose fibers are the only instrumented code it runs then: a
// record that holds an address tells that the access is a kernel's.
struct SharedReads {
  uintptr_t lo;  // 16-byte aligned
  size_t bytes;  // of whole 16-byte chunks
  const uint8_t* chunks;
};
extern thread_local constinit SharedReads t_shared_reads;

// True while a kernel fiber runs on this OS thread.
inline bool in_kernel() {
  return t_in_fiber;
}
// Whether [a, a + bytes) lies on the running fiber's own stack; touches its block's shared memory.
inline bool on_own_stack(uintptr_t a, size_t bytes) {
  if (t_stack_of != t_current) [[unlikely]]
    refresh_stack_bounds();
  return a >= t_stack_lo && a + bytes <= t_stack_hi;
}
inline bool touches_shared(uintptr_t a, size_t bytes) {
  return a + bytes > t_shared_lo && a < t_shared_hi;
}

// The calling thread's stores so far become visible to the other lanes of its warp.
void mark_visible();
void mark_visible(int warp, uint32_t lanes);
// Checks an access of `bytes` at `a` against the block's shared memory: returns false when it
// does not touch the shared-memory allocation at all; otherwise true, with `problem` set when it
// is out of bounds or reads a word another lane of the warp stored since that lane's last
// visibility point. Tracks stores per 4-byte word once track_stores() was called in the block: an
// instrumented kernel calls it on entry, and only such a kernel's every store is seen.
bool shared_access(uintptr_t a, size_t bytes, bool write, std::string& problem);
void track_stores();
// Whether track_stores() has run in the block this OS thread runs (it started tracking, or the
// kernel is not instrumented): every instrumented function's entry asks, inline.
extern thread_local constinit bool t_stores_decided;
// Asynchronous copies into shared memory (cp.async): between issue and landing the 16 bytes at
// `dst` are pending; any read of them (ldmatrix, or a load of an instrumented kernel) is an
// error naming the issuing thread and line. Landing also forgets who last stored there.
void async_issued(const void* dst, const simt::where_t& where);
void async_landed(const void* dst);
// Fails, naming `what` and `where`, if [p, p + bytes) overlaps a pending asynchronous copy.
void check_not_pending(const void* p, size_t bytes, const char* what, const simt::where_t& where);
// check_shared(p, 16, 16, ...) and check_not_pending(p, 16, ...) in one call (ldmatrix's row).
void check_shared_read16(const void* p, const char* what, const simt::where_t& where);
// Ends the calling CUDA thread with a KernelError from code that cannot throw (a compiler-inserted
// check): the fiber is switched away from and never resumed, and the launch reports `what`.
[[noreturn]] void fail_no_unwind(const std::string& what);
// "dir/file:line" as every report names a source line.
std::string short_location(const char* file, unsigned line);
// ---- Hooks for the Hopper emulations (common/simt/sm90.cpp) -------------------------------------
// bar.arrive: counts the calling thread on barrier `id` (completing it when `count` threads have
// arrived) without waiting.
void barrier_arrive(int id, int count, const char* what, const simt::where_t& where);
// State that lives as long as the running block (null until set). Its describe() is appended to
// the block's deadlock report (e.g. each mbarrier's phase, pending arrivals and bytes);
// thread_exited() is asked, when a thread of the block exits, what it left unfinished ("" if
// nothing), which then fails the block.
struct BlockExtension {
  virtual ~BlockExtension() = default;
  virtual std::string describe() const = 0;
  virtual std::string thread_exited(int /*tid*/) { return {}; }
};
BlockExtension* block_extension();
void set_block_extension(BlockExtension* ext);  // the block takes ownership

// ---- Happens-before between the threads of a block (vector clocks) ----------------------------
// What the Hopper emulations check needs an order between threads that the GPU promises, not the
// order in which the fibers happened to run: an mbarrier's initialisation before another thread
// uses it, a generic store's proxy fence before a wgmma reads the bytes. Each thread carries a
// vector clock; only synchronisation moves knowledge between threads: a block or named barrier
// (every arrival releases, every bar.sync waiter acquires), __syncwarp (which the CUDA C++
// Programming Guide says orders memory among its lanes) and, in sm90.cpp, an mbarrier (arrivals
// and TMA completions release into the phase, a parity wait that succeeds acquires it). Shuffles
// and votes, a wgmma's rendezvous and setmaxnreg do not.
// Off until enable_ordering() (the first sm_90 emulation a block uses): a block that never uses
// one pays nothing. Events before that point are never asked about, so starting late loses nothing.
struct OrderEvent {
  int tid = -1;
  int32_t clock = 0;
};
void enable_ordering();
bool ordering_enabled();
// An event of the calling thread now: it happens before everything this thread does from here on
// and, through synchronisation, before what other threads do after it.
OrderEvent order_event();
// Whether event `e` happens before the present point of thread `tid`.
bool ordered_before(const OrderEvent& e, int tid);
// A synchronisation object's clock: release joins the calling thread's clock into it, acquire
// joins it into the calling thread's.
using SyncClock = std::vector<int32_t>;  // signed: the joins vectorise with SSE2
void release_to(SyncClock& c);
void acquire_from(const SyncClock& c);

// The source lines of code addresses (instrumented accesses), as checks.cpp reports them:
// "file:line", ", inlined into file:line" for inlined helpers. One addr2line run per module.
std::vector<std::string> source_lines_of(const std::vector<uintptr_t>& pcs);

// ---- Which shared memory has ever been written -------------------------------------------------
// Per 16-byte chunk since the block started: landed copies (cp.async, TMA), the stores an
// instrumented kernel makes, and what sm90.cpp sees published by a proxy fence. A read of a chunk
// nothing wrote reads the block's start-up poison.
void mark_written(size_t offset, size_t bytes);
bool ever_written(size_t offset, size_t bytes);
// True when every shared-memory store of the running kernel is seen (the instrumented build):
// only then does "never written" hold for what a plain load or ldmatrix reads.
bool stores_tracked();
// A cp.async copy into `dst` that now lands through an mbarrier (cp.async.mbarrier.arrive.noinc):
// reports of a read before it landed name `via` (which must outlive the block) instead of the
// issuer's cp.async.wait_group.
void async_via_mbarrier(const void* dst, const std::string* via);
// A TMA load (cp.async.bulk.tensor) issued into the 16 bytes at `dst`, landing through the
// mbarrier `via` (which must outlive the block): until it lands, a read of them by a generic-proxy
// instruction (ldmatrix, or a load of an instrumented kernel) is reported as a cp.async's is.
void tma_issued(const void* dst, const simt::where_t& where, const std::string* via);
// cp.async in ptx.cpp tells the Hopper emulations (when the block uses them: t_extension) where it
// writes.
void note_async_copy(const void* dst);
// How many launches this process has started (launch() counts them; one runs at a time).
uint32_t launch_serial();
// Whether testing::record_sync is recording (sm90.cpp), and a cp.async's event for it.
bool recording_sync();
void record_async_copy(const void* src, const simt::where_t& where);

}  // namespace detail
}  // namespace simt
