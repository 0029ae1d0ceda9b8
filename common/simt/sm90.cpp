// The sm_90a PTX emulations: mbarrier, TMA tile loads, wgmma, proxy fences, setmaxnreg,
// elect.sync, named barriers. All state lives in a per-block extension (runtime.h), so that it
// dies with the block and appears in the block's deadlock report.
#include "common/simt/sm90.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/simt/counters.h"
#include "common/simt/memory.h"
#include "common/simt/runtime.h"

namespace simt {

namespace {

inline constexpr char kElect[] = "elect.sync";
inline constexpr char kWgmma[] = "wgmma.mma_async";
inline constexpr char kSetmaxnreg[] = "setmaxnreg";

std::atomic<int> g_entry_registers{0};

// The injected fault (testing::fault_at): a line, a file suffix, what to do.
std::atomic<int> g_fault_line{0};  // 0: none (checked without the lock)
std::mutex g_fault_mutex;
std::string g_fault_file;
testing::Fault g_fault = testing::Fault::skip;
int g_fault_value = 0;

// testing::record_sync's destination (nullptr: not recording, checked without the lock), and the
// helper that appends to it.
std::mutex g_record_mutex;
std::atomic<std::vector<testing::SyncEvent>*> g_record{nullptr};
void record(const char* what, const std::string& label, uint32_t address, uint32_t parity,
            const where_t& where, uintptr_t source = 0) {
  if (g_record.load(std::memory_order_relaxed) == nullptr) return;
  const detail::ThreadIds& me = detail::current();
  const int block =
      int(me.block_idx.x + me.grid_dim.x * (me.block_idx.y + me.grid_dim.y * me.block_idx.z));
  std::lock_guard lock(g_record_mutex);
  if (auto* events = g_record.load()) {
    events->push_back({block, me.tid, what, label, address, parity, int(where.line()), source,
                       detail::launch_serial()});
  }
}

}  // namespace

namespace detail {
bool recording_sync() {
  return g_record.load(std::memory_order_relaxed) != nullptr;
}

void record_async_copy(const void* src, const where_t& where) {
  // Where the source is, described now: the buffer may be freed before the events are read.
  record("cp.async", describe_device_address(src), 0, 0, where, reinterpret_cast<uintptr_t>(src));
}
}  // namespace detail

namespace {

bool faulted(const where_t& where, testing::Fault fault) {
  const int line = g_fault_line.load(std::memory_order_relaxed);
  if (line == 0 || static_cast<int>(where.line()) != line) return false;
  std::lock_guard lock(g_fault_mutex);
  const std::string f = where.file_name();
  return g_fault == fault && f.size() >= g_fault_file.size() &&
         f.compare(f.size() - g_fault_file.size(), g_fault_file.size(), g_fault_file) == 0;
}

std::string loc(const where_t& w) {
  std::string file = w.file_name();
  if (auto slash = file.rfind('/'); slash != std::string::npos) {
    auto prev = file.rfind('/', slash - 1);
    file = file.substr(prev == std::string::npos ? 0 : prev + 1);
  }
  return file + ":" + std::to_string(w.line());
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

[[noreturn]] void fail_at(const char* what, const where_t& where, const std::string& why) {
  fail(std::string(what) + " at " + loc(where) + ": " + why);
}

// Bytes that land in shared memory when an mbarrier phase completes: a TMA box (16-byte chunks at
// their swizzled addresses; `async` = written by the async proxy) or cp.async copies.
struct Landing {
  std::vector<uint32_t> chunk_addr;  // shared address of each 16-byte chunk
  std::vector<unsigned char> bytes;  // 16 per chunk
  bool async;
};

struct MBarrier {
  uint32_t count = 0;
  uint32_t pending = 0;
  int64_t tx = 0;      // transaction bytes expected in this phase
  uint64_t phase = 0;  // completed phases
  std::string label;
  where_t init_at;
  std::vector<Landing> inflight;
  int64_t inflight_bytes = 0;  // transaction bytes the in-flight TMA copies will complete
  uint32_t addr = 0;           // shared address, for reports
  std::string name;            // "mbarrier full at shared 0x..", for reports (stable address)
  where_t last_arrival;        // the latest arrival's source line, for reports
  // Ordering: the initialisation, which every other thread's use must happen after; the clocks
  // released into the phase in progress, and those of the last completed phase of each parity.
  detail::OrderEvent init_event;
  int init_tid = 0;
  detail::SyncClock acc, done[2];
  // The shared memory this barrier guards (an "empty" barrier of a ring): per 16-byte chunk, 1
  // where a thread that waited on it then issued a copy (TMA or cp.async) into the chunk. An
  // arrival on it while the arriving thread's in-flight wgmma still reads a guarded chunk
  // releases the chunk too early.
  std::vector<uint8_t> guards;
  // Threads suspended in a parity wait: the phase each waits for, and where it waits.
  struct Waiter {
    uint64_t phase;
    where_t at;
  };
  std::map<int, Waiter> waiters;
};

// The shared-memory bytes a wgmma read at issue. On hardware it may read them any time until the
// wait_group that retires it, so they must not change before then (checked at the retirement).
struct OperandSnapshot {
  std::vector<uint32_t> addr;
  std::vector<uint16_t> bits;
  where_t issued_at;
  int retired = 0;  // threads of the warpgroup whose wait_group retired it
};

struct WgmmaPending {
  float* d = nullptr;
  int count = 0;
  std::vector<float> result;
  std::shared_ptr<OperandSnapshot> read;
  where_t issued_at;
  // A from registers: the thread's four registers, and what they held at issue. The PTX ISA makes
  // writing them before the wait_group that retires the wgmma undefined, as for the accumulators.
  const uint32_t* a_regs = nullptr;
  uint32_t a_bits[4] = {};
};

// What a pending wgmma's accumulators hold until the wait_group that retires it: a quiet NaN
// with a payload of its own, so that a write to them in between (undefined behaviour in the PTX
// ISA, as is a read) is told apart at the wait. A read cannot be seen; it reads NaN.
constexpr uint32_t kPendingAccumulator = 0x7fc0deadu;

// One warpgroup's rendezvous for its .sync.aligned collectives (wgmma, setmaxnreg).
struct WarpgroupSlot {
  const char* kind = nullptr;
  where_t where;
  int arrived = 0;
  uint64_t generation = 0;
  // wgmma inputs and outputs per thread of the warpgroup
  WgmmaType type{};
  int n = 0;
  uint64_t desc_a = 0, desc_b = 0;
  bool a_regs = false, scale_d = false, trans_a = false, trans_b = false;
  int scale_a = 1, scale_b = 1;
  uint32_t a[128][4];
  float c[128][128];
  float out[128][128];
  // setmaxnreg
  std::shared_ptr<OperandSnapshot> read;  // of the last completed wgmma
  bool inc[128];
  int regs_req[128];
  int regs = 0;             // the warpgroup's current per-thread register count
  int64_t waiting_for = 0;  // registers a pending .inc still needs from the pool
  bool granted = true;
};

// A bulk reduction in flight (cp.reduce.async.bulk ... .add.f32): what it read from the async
// proxy's view at issue (checked unchanged in shared memory when its group's read is retired), and
// where it adds.
struct BulkOp {
  float* dst = nullptr;
  uint32_t src = 0;
  std::vector<unsigned char> bytes;
  where_t issued_at;
  bool read = false;  // a wait_group.read retired its read of the source
};

struct ThreadState {
  std::vector<BulkOp> bulk_open;
  std::deque<std::vector<BulkOp>> bulk_groups;
  bool wgmma_fenced = false;
  std::vector<WgmmaPending> open;
  std::deque<std::vector<WgmmaPending>> groups;
  std::string wait_text;
  where_t last_wgmma_wait;  // for the report of a thread that exits with wgmmas in flight
  bool waited_wgmma = false;
  MBarrier* last_waited = nullptr;  // the mbarrier this thread last waited on (guards)
  // This thread's proxy fences: (its clock at the fence, the block's fence number).
  std::vector<std::pair<int32_t, uint32_t>> fences;
};

struct Sm90Block final : detail::BlockExtension {
  std::map<uint32_t, MBarrier> barriers;
  std::vector<unsigned char> async_view;  // shared memory as the async proxy sees it
  // Per 16-byte chunk of shared memory: the TMA load in flight into it (an index into tma_sites),
  // or -1, so that a wgmma reading it before it landed is named.
  std::vector<int32_t> tma_chunk;
  std::vector<where_t> tma_sites;
  std::vector<std::unique_ptr<WarpgroupSlot>> warpgroups;
  std::vector<ThreadState> threads;
  int64_t pool = 0, pool_free = 0;
  int entry_regs = 0;
  // The async proxy's happens-before (fence_proxy_async_shared): per 2-byte element of shared
  // memory, the number of the first proxy fence after the last generic store that changed it (0:
  // nothing to order: never stored, or written by TMA). A wgmma may read it only if some proxy
  // fence numbered that or later happens before every thread that issues the wgmma. Allocated at
  // the block's first fence.
  std::vector<uint32_t> first_fence;
  uint32_t fences = 0;
  std::vector<int> fencers;        // threads that have fenced
  std::vector<uint32_t> fence_ok;  // per warpgroup: fences up to this number known ordered

  std::string thread_exited(int tid) override {
    ThreadState& t = threads[size_t(tid)];
    if (std::string why = bulk_exited(t); !why.empty()) return why;
    size_t pending = t.groups.size() + (t.open.empty() ? 0 : 1);
    if (pending == 0) return {};
    const WgmmaPending& newest = t.open.empty() ? t.groups.back().back() : t.open.back();
    std::string why = "exits with " + std::to_string(pending) +
                      " wgmma group(s) not retired by a wgmma.wait_group (the newest issued at " +
                      loc(newest.issued_at) + ")";
    if (t.waited_wgmma)
      why += "; the last wgmma.wait_group, at " + loc(t.last_wgmma_wait) +
             ", left them in flight, so whatever read their accumulators after it read undefined "
             "values";
    return why;
  }

  // A thread's bulk reductions when it exits: their sources must have been read (shared memory
  // goes with the block), and what they add lands now.
  std::string bulk_exited(ThreadState& t);

  std::string describe() const override {
    std::ostringstream os;
    for (const auto& entry : barriers) {
      const MBarrier& b = entry.second;
      if (b.count == 0) continue;  // labelled, never initialised
      os << "\n  " << b.name << " (initialised at " << loc(b.init_at) << ", count " << b.count
         << "): phase " << b.phase << " (parity " << (b.phase & 1) << ") waits for " << b.pending
         << " arrival(s) and " << (b.tx - b.inflight_bytes) << " transaction byte(s)";
      if (b.inflight_bytes) os << "; " << b.inflight_bytes << " byte(s) of TMA in flight";
    }
    for (size_t w = 0; w < warpgroups.size(); ++w) {
      const WarpgroupSlot* g = warpgroups[w].get();
      if (g && g->arrived > 0)
        os << "\n  warpgroup " << w << ": " << g->arrived << " of 128 threads arrived at "
           << g->kind << " (" << loc(g->where) << ")";
      if (g && !g->granted)
        os << "\n  register pool: " << pool_free << " of " << pool << " registers free; warpgroup "
           << w << " waits in setmaxnreg.inc for " << g->waiting_for << " more";
    }
    return os.str();
  }
};

Sm90Block& ext() {
  // The only extension a block gets is this one (detail::t_extension: no call, no dynamic_cast).
  if (detail::t_extension) return *static_cast<Sm90Block*>(detail::t_extension);
  auto made = std::make_unique<Sm90Block>();
  Sm90Block* e = made.get();
  const int n = detail::block_threads();
  // The async proxy has seen shared memory as the block started: all poison.
  made->async_view.assign(detail::dynamic_shared_memory_bytes(), 0xFF);
  made->tma_chunk.assign(detail::dynamic_shared_memory_bytes() / 16 + 1, -1);
  made->threads.resize(n);
  made->warpgroups.resize((n + 127) / 128);
  const int entry = g_entry_registers.load();
  made->entry_regs = entry > 0 ? entry : std::min(255, 65536 / n / 8 * 8);
  made->pool = int64_t(made->entry_regs) * n;
  made->pool_free = 0;
  made->fence_ok.assign(made->warpgroups.size(), 0);
  detail::enable_ordering();
  detail::set_block_extension(made.release());
  return *e;
}

unsigned char* smem_at(uint32_t addr) {
  return detail::dynamic_shared_memory() + addr;
}

[[noreturn, gnu::cold]] void unordered_use(const MBarrier& b, const char* what,
                                           const where_t& where) {
  fail_at(what, where,
          b.name + " (initialised by thread " + std::to_string(b.init_tid) + " at " +
              loc(b.init_at) + ") is used by thread " + std::to_string(detail::current().tid) +
              ", which nothing orders after that initialisation: it need not see the barrier "
              "initialised (a __syncthreads(), or a fence and a barrier, after mbarrier.init)");
}

MBarrier& barrier_at(uint64_t* bar, const char* what, const where_t& where) {
  const uint32_t a = shared_address(bar, where);
  auto it = ext().barriers.find(a);
  if (it == ext().barriers.end() || it->second.count == 0)
    fail_at(what, where, "mbarrier at shared " + hex(a) + " used before mbarrier.init");
  if (!detail::ordered_before(it->second.init_event, detail::current().tid)) [[unlikely]]
    unordered_use(it->second, what, where);
  if (counters::active()) [[unlikely]]
    counters::hook::lane(counters::hook::Kind::mbarrier, counters::hook::site_of(where), 0, 0);
  return it->second;
}

std::string name_of(const MBarrier& b, uint64_t*) {
  return b.name;
}

void set_name(MBarrier& b) {
  b.name =
      "mbarrier " + (b.label.empty() ? std::string() : b.label + " ") + "at shared " + hex(b.addr);
}

void land(const Landing& l) {
  Sm90Block& e = ext();
  for (size_t c = 0; c < l.chunk_addr.size(); ++c) {
    std::memcpy(smem_at(l.chunk_addr[c]), &l.bytes[16 * c], 16);
    detail::async_landed(smem_at(l.chunk_addr[c]));  // a cp.async chunk is no longer pending
    if (l.async) {
      std::memcpy(&e.async_view[l.chunk_addr[c]], &l.bytes[16 * c], 16);
      e.tma_chunk[l.chunk_addr[c] / 16] = -1;
      if (!e.first_fence.empty())  // the async proxy wrote them: no generic store to order
        std::fill_n(&e.first_fence[l.chunk_addr[c] / 2], 8, 0u);
    }
  }
}

bool phase_ready(const MBarrier& b) {
  return b.pending == 0 && b.inflight_bytes == b.tx;
}

// Completes the phase: the in-flight copies land, the phase advances (flipping the parity) and the
// pending count reloads.
//
// A phase that completes while some thread still waits for the phase before it is reported: the
// parity flipped twice under that thread, so its wait cannot tell the phase it wanted from the
// one after (on the GPU it may hang, or pass a lap late). In a ring this is a producer that
// refilled a slot without waiting for the consumers to release it.
void complete_phase(MBarrier& b) {
  for (const Landing& l : b.inflight) land(l);
  b.inflight.clear();
  b.inflight_bytes = 0;
  b.tx = 0;
  std::swap(b.done[b.phase & 1], b.acc);
  std::fill(b.acc.begin(), b.acc.end(), 0);
  ++b.phase;
  b.pending = b.count;
  for (const auto& [tid, w] : b.waiters)
    if (b.phase >= w.phase + 2)
      fail("mbarrier " + (b.label.empty() ? std::string() : b.label + " ") + "at shared " +
           hex(b.addr) + ": phase " + std::to_string(b.phase - 1) + " completed (last arrival at " +
           loc(b.last_arrival) + ") while thread " + std::to_string(tid) + " still waits at " +
           loc(w.at) + " for phase " + std::to_string(w.phase) +
           ": the parity flipped twice under it (a slot refilled before it was released?)");
}

// Called after every change to a phase's counts. A phase whose arrivals and transaction bytes are
// all in completes at once when nothing is in flight; with copies in flight it completes as late
// as the PTX ISA allows: when a thread waits on it or the barrier is used again (so a read that
// does not wait for the copy sees poison).
void advance(MBarrier& b, uint64_t* bar, const char* what, const where_t& where) {
  if (b.pending != 0) return;
  if (b.inflight_bytes > b.tx)
    fail_at(what, where,
            name_of(b, bar) + ": transaction count underflow: TMA completed " +
                std::to_string(b.inflight_bytes) + " bytes but the phase expects only " +
                std::to_string(b.tx) + " (phase " + std::to_string(b.phase) + ")");
  if (phase_ready(b) && b.inflight.empty()) complete_phase(b);
}

// Before a barrier is used again, a phase that only waited for its copies to land completes.
MBarrier& settled(MBarrier& b) {
  if (phase_ready(b)) complete_phase(b);
  return b;
}

// An arrival on a barrier that guards shared memory (an "empty" barrier) tells the thread that
// refills it that this thread is done reading. A wgmma of this thread still in flight that reads a
// guarded chunk is not done: on hardware it may read the chunk until the wait_group retiring it.
void check_release(const MBarrier& b, const char* what, const where_t& where) {
  const ThreadState& t = ext().threads[detail::current().tid];
  auto reads_guarded = [&](const WgmmaPending& p) -> int64_t {
    if (!p.read) return -1;
    for (uint32_t a : p.read->addr)
      if (a / 16 < b.guards.size() && b.guards[a / 16]) return a;
    return -1;
  };
  auto report = [&](const WgmmaPending& p, int64_t a) {
    fail_at(what, where,
            b.name + " guards shared memory that the wgmma issued at " + loc(p.issued_at) +
                " still reads (shared " + hex(uint64_t(a)) +
                "), and no wgmma.wait_group has retired it: the arrival releases the buffer "
                "before its last reader is done (wait first, then arrive)");
  };
  for (const WgmmaPending& p : t.open)
    if (const int64_t a = reads_guarded(p); a >= 0) report(p, a);
  for (const auto& g : t.groups)
    for (const WgmmaPending& p : g)
      if (const int64_t a = reads_guarded(p); a >= 0) report(p, a);
}

// A thread that waited on `b` and now issues a copy into [addr, addr + bytes) is refilling what
// b's arrivals released: b guards it.
void guard(ThreadState& t, uint32_t addr, uint32_t bytes) {
  MBarrier* b = t.last_waited;
  if (!b) return;
  const size_t chunks = detail::dynamic_shared_memory_bytes() / 16 + 1;
  if (b->guards.size() != chunks) b->guards.assign(chunks, 0);
  for (uint32_t c = addr / 16; c <= (addr + bytes - 1) / 16 && c < chunks; ++c) b->guards[c] = 1;
}

constexpr int64_t kTxLimit = (1 << 20) - 1;  // the PTX ISA's tx-count range

uint64_t arrive(uint64_t* bar, uint32_t tx, const char* what, const where_t& where) {
  MBarrier& b = settled(barrier_at(bar, what, where));
  if (b.pending == 0)
    fail_at(what, where,
            name_of(b, bar) + ": more arrivals than expected: phase " + std::to_string(b.phase) +
                " already has all " + std::to_string(b.count) + " arrivals and waits for " +
                std::to_string(b.tx - b.inflight_bytes) + " transaction bytes");
  b.tx += tx;
  if (b.tx > kTxLimit)
    fail_at(what, where,
            name_of(b, bar) + ": tx-count " + std::to_string(b.tx) + " exceeds 2^20-1");
  if (!b.guards.empty()) check_release(b, what, where);
  b.last_arrival = where;
  detail::release_to(b.acc);
  const uint64_t state = b.phase;
  --b.pending;
  advance(b, bar, what, where);
  return state;
}

}  // namespace

uint32_t shared_address(const void* p, const where_t& where) {
  const auto* c = static_cast<const unsigned char*>(p);
  const unsigned char* base = detail::dynamic_shared_memory();
  if (c < base || c >= base + detail::dynamic_shared_memory_bytes())
    fail_at("shared address", where,
            "pointer is not inside the block's dynamic shared memory (" +
                std::to_string(detail::dynamic_shared_memory_bytes()) + " bytes)");
  return static_cast<uint32_t>(c - base);
}

// ---- mbarrier -----------------------------------------------------------------------------------

void mbarrier_init(uint64_t* bar, uint32_t count, const where_t& where) {
  detail::check_shared(bar, 8, 8, "mbarrier.init", where);
  if (count < 1 || count > kTxLimit)
    fail_at("mbarrier.init", where, "count " + std::to_string(count) + " not in 1..2^20-1");
  MBarrier& b = ext().barriers[shared_address(bar, where)];
  std::string label = std::move(b.label);
  b = MBarrier{};
  b.label = std::move(label);
  b.count = b.pending = count;
  b.init_at = where;
  b.addr = shared_address(bar, where);
  b.init_event = detail::order_event();
  b.init_tid = detail::current().tid;
  set_name(b);
}

void mbarrier_label(uint64_t* bar, const char* label) {
  MBarrier& b = ext().barriers[shared_address(bar, where_t::current())];
  b.label = label;
  if (b.count != 0) set_name(b);
}

uint64_t mbarrier_arrive(uint64_t* bar, const where_t& where) {
  if (faulted(where, testing::Fault::skip)) return 0;
  return arrive(bar, 0, "mbarrier.arrive", where);
}

uint64_t mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes, const where_t& where) {
  return arrive(bar, bytes, "mbarrier.arrive.expect_tx", where);
}

void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes, const where_t& where) {
  MBarrier& b = settled(barrier_at(bar, "mbarrier.expect_tx", where));
  b.tx += bytes;
  if (b.tx > kTxLimit)
    fail_at("mbarrier.expect_tx", where,
            name_of(b, bar) + ": tx-count " + std::to_string(b.tx) + " exceeds 2^20-1");
}

namespace {
struct ParityWait {
  MBarrier* b;
  uint32_t parity;
};
// The phase of parity P has completed when the current phase has the other parity. A waiter on the
// current phase lets a phase that only waits for its in-flight copies complete.
bool parity_done(void* p) {
  auto* w = static_cast<ParityWait*>(p);
  if ((w->b->phase & 1) == w->parity && phase_ready(*w->b)) complete_phase(*w->b);
  return (w->b->phase & 1) != w->parity;
}
}  // namespace

bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity, const where_t& where) {
  MBarrier& b = barrier_at(bar, "mbarrier.try_wait.parity", where);
  if (parity > 1) fail_at("mbarrier.try_wait.parity", where, "parity must be 0 or 1");
  if (faulted(where, testing::Fault::skip)) return true;
  if (faulted(where, testing::Fault::flip_parity)) parity ^= 1;
  ParityWait w{&b, parity};
  ThreadState& t = ext().threads[detail::current().tid];
  t.wait_text = "mbarrier.try_wait.parity " + std::to_string(parity) + " on " + name_of(b, bar);
  const int tid = detail::current().tid;
  if ((b.phase & 1) == parity) b.waiters[tid] = {b.phase, where};
  detail::wait_until(parity_done, &w, t.wait_text.c_str(), where);
  b.waiters.erase(tid);
  detail::acquire_from(b.done[parity]);  // what the phase's arrivals and copies released
  t.last_waited = &b;
  record("wait", b.label, b.addr, parity, where);
  return true;
}

void cp_async_mbarrier_arrive_noinc(uint64_t* bar, const where_t& where) {
  if (faulted(where, testing::Fault::skip)) return;
  const char* what = "cp.async.mbarrier.arrive.noinc";
  MBarrier& b = settled(barrier_at(bar, what, where));
  auto& async = detail::current().async;
  Landing l{{}, {}, false};
  auto take = [&](const std::vector<detail::PendingCopy>& copies) {
    for (const detail::PendingCopy& c : copies) {
      detail::async_via_mbarrier(c.dst, &b.name);
      l.chunk_addr.push_back(shared_address(c.dst, where));
      const size_t at = l.bytes.size();
      l.bytes.resize(at + 16, 0);  // bytes past the source size are the zero fill
      std::memcpy(&l.bytes[at], c.data, c.bytes);
    }
  };
  // The copies now land with the barrier's phase, not at a later cp.async.wait_group.
  for (auto& g : async.groups) take(g), g.clear();
  take(async.open);
  async.open.clear();
  if (b.pending == 0)
    fail_at(what, where,
            name_of(b, bar) + ": more arrivals than expected in phase " + std::to_string(b.phase));
  b.inflight.push_back(std::move(l));
  b.last_arrival = where;
  detail::release_to(b.acc);
  --b.pending;
  advance(b, bar, what, where);
}

// ---- TMA ----------------------------------------------------------------------------------------

namespace {
// The global address of element e of a box of n[0] x n[1] x ... elements at `coords` (dimension 0
// innermost), or nullptr when it lies outside the tensor (TMA fills it with zero).
const unsigned char* element_source(const TensorMap* map, const int32_t* coords, const uint64_t* n,
                                    int rank, uint64_t e) {
  const unsigned char* src = map->global;
  for (int i = 0; i < rank; ++i) {
    const uint64_t idx = e % n[i];
    e /= n[i];
    const int64_t x = int64_t(coords[i]) + int64_t(idx) * (i == 0 ? 1 : map->element_strides[i]);
    if (x < 0 || x >= int64_t(map->dims[i])) return nullptr;
    src += uint64_t(x) * map->strides[i];
  }
  return src;
}
}  // namespace

void tma_load(void* dst, const TensorMap* map, uint64_t* bar, const int32_t* coords, int rank,
              const where_t& where) {
  const char* what = "cp.async.bulk.tensor";
  if (map == nullptr || map->rank == 0) fail_at(what, where, "tensor map not encoded");
  if (static_cast<uint32_t>(rank) != map->rank)
    fail_at(what, where,
            std::to_string(rank) + "d copy with a rank-" + std::to_string(map->rank) + " map");
  if (reinterpret_cast<uintptr_t>(dst) % 128 != 0 || shared_address(dst, where) % 128 != 0)
    fail_at(what, where, "shared destination not 128-byte aligned");
  const uint32_t es = map->element_bytes;
  uint64_t n[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < rank; ++i) {
    const uint32_t stride = i == 0 ? 1 : map->element_strides[i];
    n[i] = (map->box[i] + stride - 1) / stride;
  }
  const uint64_t bytes = n[0] * n[1] * n[2] * n[3] * n[4] * es;
  // A phase whose arrivals are all in expects exactly the bytes its expect_tx announced. A box
  // that would bring the copies in flight past them over-delivers: the surplus completes the
  // phase early and is credited to the next one, which then completes before its own data lands.
  // (Reported here, before this emulation lets the phase complete lazily.)
  if (MBarrier& pre = barrier_at(bar, what, where);
      pre.pending == 0 && !pre.inflight.empty() && pre.inflight_bytes + int64_t(bytes) > pre.tx)
      [[unlikely]]
    fail_at(what, where,
            pre.name + ": this box's " + std::to_string(bytes) +
                " bytes bring the phase's copies in flight to " +
                std::to_string(pre.inflight_bytes + int64_t(bytes)) + " bytes, more than the " +
                std::to_string(pre.tx) +
                " its expect_tx announced (expect_tx counts bytes, not elements)");
  MBarrier& b = settled(barrier_at(bar, what, where));
  const uint32_t span =
      map->swizzle == TmaSwizzle::none ? 0 : 16u << static_cast<int>(map->swizzle);
  if (span && n[0] * es != span)
    fail_at(what, where,
            "not modelled: a swizzled box whose inner extent (" + std::to_string(n[0] * es) +
                " bytes) is not the swizzle span (" + std::to_string(span) + " bytes)");
  const uint32_t base = shared_address(dst, where);
  detail::check_shared(dst, bytes, 128, what, where);
  // The dense box, dimension 0 innermost; an element outside the tensor reads as zero.
  Landing l{{}, std::vector<unsigned char>(bytes, 0), true};
  for (uint64_t e = 0; e < bytes / es; ++e)
    if (const unsigned char* src = element_source(map, coords, n, rank, e))
      std::memcpy(&l.bytes[e * es], src, es);
  for (uint64_t c = 0; c < bytes / 16; ++c)
    l.chunk_addr.push_back(swizzle_address(base + uint32_t(16 * c), map->swizzle));
  if (counters::active()) [[unlikely]] {
    std::vector<uintptr_t> pieces;  // the box's elements inside the tensor, for its sectors
    for (uint64_t e = 0; e < bytes / es; ++e)
      if (const unsigned char* src = element_source(map, coords, n, rank, e))
        pieces.push_back(reinterpret_cast<uintptr_t>(src));
    counters::hook::tma(where, pieces, es, bytes);
  }
  // Poison the destination now (in both proxies' views): it reads as NaN until the copy lands.
  Sm90Block& e = ext();
  e.tma_sites.push_back(where);
  for (uint32_t a : l.chunk_addr) {
    std::memset(smem_at(a), 0xFF, 16);
    std::memset(&e.async_view[a], 0xFF, 16);
    e.tma_chunk[a / 16] = static_cast<int32_t>(e.tma_sites.size() - 1);
    detail::tma_issued(smem_at(a), where, &b.name);  // ldmatrix and loads before it lands: named
  }
  for (uint32_t a : l.chunk_addr) guard(e.threads[detail::current().tid], a, 16);
  detail::release_to(b.acc);  // the copy's completion carries what its issuer knew
  b.inflight.push_back(std::move(l));
  b.inflight_bytes += static_cast<int64_t>(bytes);
  advance(b, bar, what, where);
}

namespace detail {
void note_async_copy(const void* dst) {
  guard(ext().threads[current().tid], shared_address(dst, where_t::current()), 16);
}
}  // namespace detail

// ---- Proxy fence --------------------------------------------------------------------------------

void fence_proxy_async_shared(const where_t& where) {
  if (faulted(where, testing::Fault::skip)) return;
  // On hardware the fence makes the executing thread's generic writes visible to the async proxy,
  // and a barrier then orders each writer's fence before the read. Here the stores themselves are
  // not seen (only an instrumented kernel's are), so every byte that changed since the last fence
  // becomes visible, numbered with this fence: a wgmma may read it only if a fence numbered that
  // or later happens before it (element() below). That a thread fenced another's store is not
  // caught: the order between fence and read is.
  Sm90Block& e = ext();
  const detail::OrderEvent ev = detail::order_event();
  const uint32_t seq = ++e.fences;
  if (e.first_fence.empty()) e.first_fence.assign(e.async_view.size() / 2 + 1, 0);
  ThreadState& t = e.threads[detail::current().tid];
  if (t.fences.empty()) e.fencers.push_back(detail::current().tid);
  t.fences.emplace_back(ev.clock, seq);
  const unsigned char* smem = detail::dynamic_shared_memory();
  unsigned char* view = e.async_view.data();
  const size_t n = e.async_view.size();
  for (size_t c = 0; c < n; c += 16) {
    const size_t len = std::min<size_t>(16, n - c);
    if (std::memcmp(view + c, smem + c, len) == 0) continue;
    for (size_t a = c; a < c + len; ++a)
      if (view[a] != smem[a]) view[a] = smem[a], e.first_fence[a / 2] = seq;
    detail::mark_written(c, len);
  }
}

namespace {
// The highest-numbered proxy fence that happens before every thread of warpgroup `wg` (0: none).
uint32_t fences_ordered_before(Sm90Block& e, int wg) {
  uint32_t lowest = ~0u;
  for (int r = 128 * wg; r < 128 * (wg + 1); ++r) {
    uint32_t best = 0;
    for (int f : e.fencers)
      for (auto it = e.threads[size_t(f)].fences.rbegin(); it != e.threads[size_t(f)].fences.rend();
           ++it)
        if (detail::ordered_before({f, it->first}, r)) {
          best = std::max(best, it->second);
          break;
        }
    lowest = std::min(lowest, best);
  }
  return lowest;
}
}  // namespace

// ---- Warpgroup rendezvous -----------------------------------------------------------------------

namespace {

struct GenerationWait {
  const WarpgroupSlot* g;
  uint64_t generation;
};
bool generation_passed(void* p) {
  const auto* w = static_cast<const GenerationWait*>(p);
  return w->g->generation != w->generation;
}

WarpgroupSlot& warpgroup(const char* what, const where_t& where) {
  const int tid = detail::current().tid, wg = tid / 128;
  if ((wg + 1) * 128 > detail::block_threads())
    fail_at(what, where,
            "thread " + std::to_string(tid) + " is not in a whole warpgroup (the block has " +
                std::to_string(detail::block_threads()) + " threads)");
  Sm90Block& e = ext();
  if (!e.warpgroups[wg]) {
    e.warpgroups[wg] = std::make_unique<WarpgroupSlot>();
    e.warpgroups[wg]->regs = e.entry_regs;
  }
  return *e.warpgroups[wg];
}

// Arrives at the warpgroup's collective `kind`; the last of its 128 threads runs `complete`.
template <typename F>
void rendezvous(WarpgroupSlot& g, const char* kind, const where_t& where, F&& complete) {
  if (g.arrived > 0 && g.kind != kind)
    fail_at(kind, where,
            std::string("warpgroup threads at different .aligned instructions: others wait in ") +
                g.kind + " at " + loc(g.where));
  if (g.arrived == 0) g.kind = kind, g.where = where;
  if (++g.arrived == 128) {
    g.arrived = 0;
    complete();
    ++g.generation;
    return;
  }
  GenerationWait w{&g, g.generation};
  detail::wait_until(generation_passed, &w, kind, where);
}

float element(uint32_t addr, WgmmaType t, const char* which, const where_t& where,
              OperandSnapshot& read, int wg) {
  Sm90Block& e = ext();
  if (addr + 2 > e.async_view.size())
    fail_at(kWgmma, where,
            std::string("matrix ") + which + " reads shared address " + hex(addr) +
                " outside the block's shared memory");
  const unsigned char* p = smem_at(addr);
  if (const int32_t site = e.tma_chunk[addr / 16]; site >= 0)
    fail_at(kWgmma, where,
            std::string("matrix ") + which + " at shared " + hex(addr) +
                " is the destination of the TMA load issued at " + loc(e.tma_sites[size_t(site)]) +
                ", which has not landed (its mbarrier phase has not completed: a missing wait, "
                "or a wait on the wrong parity)");
  if (std::memcmp(p, &e.async_view[addr], 2) != 0)
    fail_at(kWgmma, where,
            std::string("matrix ") + which + " at shared " + hex(addr) +
                " was written by generic-proxy stores after the last "
                "fence.proxy.async.shared::cta (fence, then a barrier, before wgmma reads it)");
  if (!detail::ever_written(addr, 2)) [[unlikely]]
    fail_at(kWgmma, where,
            std::string("matrix ") + which + " at shared " + hex(addr) +
                " reads shared memory that nothing has written since the block started (no TMA "
                "landed there and no store was fenced: a wrong ring stage, descriptor or offset?)");
  if (const uint32_t need = e.first_fence.empty() ? 0 : e.first_fence[addr / 2];
      need > e.fence_ok[size_t(wg)]) [[unlikely]] {
    e.fence_ok[size_t(wg)] = fences_ordered_before(e, wg);
    if (need > e.fence_ok[size_t(wg)])
      fail_at(kWgmma, where,
              std::string("matrix ") + which + " at shared " + hex(addr) +
                  " holds generic-proxy stores whose fence.proxy.async.shared::cta does not "
                  "happen before this wgmma in every thread of warpgroup " +
                  std::to_string(wg) +
                  ": the fence must be followed by a barrier (or an mbarrier's arrive and wait) "
                  "that orders it before the wgmma");
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  read.addr.push_back(addr);
  read.bits.push_back(bits);
  if (t == WgmmaType::f16) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  }
  __nv_bfloat16_raw r;
  r.x = bits;
  return __bfloat162float(__nv_bfloat16(r));
}

float reg_half(const uint32_t* regs, int i, WgmmaType t) {
  const uint16_t bits = static_cast<uint16_t>(regs[i / 2] >> (16 * (i % 2)));
  if (t == WgmmaType::f16) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  }
  __nv_bfloat16_raw r;
  r.x = bits;
  return __bfloat162float(__nv_bfloat16(r));
}

}  // namespace

// The shared address of element (row, k) of a 16-bit matrix a wgmma descriptor describes (row is
// m for A, n for B), in the canonical layouts of the PTX ISA ("Shared Memory Matrix Layout"),
// with T = 8 elements (16 bytes) and W the swizzle span in 16-byte units (1 without swizzle):
//   K-major,  none:      ((8,m),(T,2k)) : ((16 B, SBO), (2 B, LBO))
//   K-major,  swizzled:  ((8,m),(T,2k)) : ((16W B, SBO), (2 B, 16 B))
//   MN-major, none:      ((T,1,m),(8,k)) : ((2 B, -, SBO), (16 B, LBO))
//   MN-major, swizzled:  ((T,W,m),(8,k)) : ((2 B, 16 B, LBO), (16W B, SBO))
// then the swizzle of the mode on the resulting byte address.
uint32_t wgmma_element_address(uint64_t desc, bool mn_major, int row, int k) {
  const uint32_t start = uint32_t(desc & 0x3fff) << 4;
  const uint32_t lbo = uint32_t((desc >> 16) & 0x3fff) << 4;
  const uint32_t sbo = uint32_t((desc >> 32) & 0x3fff) << 4;
  const uint32_t mode = uint32_t(desc >> 62);
  static constexpr TmaSwizzle kSwizzle[4] = {TmaSwizzle::none, TmaSwizzle::b128, TmaSwizzle::b64,
                                             TmaSwizzle::b32};
  const TmaSwizzle sw = kSwizzle[mode];
  const uint32_t W = sw == TmaSwizzle::none ? 1 : 1u << static_cast<int>(sw);
  uint32_t off;
  if (!mn_major) {
    const uint32_t r0 = row % 8, r1 = row / 8, k0 = k % 8, k1 = k / 8;
    off = sw == TmaSwizzle::none ? r0 * 16 + r1 * sbo + k0 * 2 + k1 * lbo
                                 : r0 * 16 * W + r1 * sbo + k0 * 2 + k1 * 16;
  } else {
    const uint32_t r0 = row % 8, r1 = (row / 8) % W, r2 = row / (8 * W), k0 = k % 8, k1 = k / 8;
    off = sw == TmaSwizzle::none ? r0 * 2 + r2 * sbo + k0 * 16 + k1 * lbo
                                 : r0 * 2 + r1 * 16 + r2 * lbo + k0 * 16 * W + k1 * sbo;
  }
  return swizzle_address(start + off, sw);
}

void wgmma_fence(const where_t&) {
  ext().threads[detail::current().tid].wgmma_fenced = true;
}

void wgmma_mma_async(WgmmaType type, int n, float* d, uint64_t desc_a, const uint32_t* a_regs,
                     uint64_t desc_b, bool scale_d, int scale_a, int scale_b, bool trans_a,
                     bool trans_b, const where_t& where) {
  if (n < 8 || n > 256 || n % 8 != 0)
    fail_at(kWgmma, where, "N = " + std::to_string(n) + " is not a multiple of 8 in 8..256");
  if (a_regs && trans_a) fail_at(kWgmma, where, "A from registers must be K-major");
  if ((scale_a != 1 && scale_a != -1) || (scale_b != 1 && scale_b != -1))
    fail_at(kWgmma, where, "imm-scale-a/b must be 1 or -1");
  for (uint64_t desc : {desc_a, desc_b})
    if (((desc >> 49) & 7) != 0 && !(a_regs && desc == desc_a))
      fail_at(kWgmma, where, "not modelled: a descriptor with a non-zero base offset");
  record("wgmma", "", 0, 0, where);
  Sm90Block& e = ext();
  const int tid = detail::current().tid;
  ThreadState& ts = e.threads[tid];
  // Chaining on an accumulator still in flight (same shape) needs no fence; the input is the
  // pending result. Anything else needs wgmma.fence since this thread's last wait_group.
  const WgmmaPending* chained = nullptr;
  for (const WgmmaPending& p : ts.open)
    if (p.d == d) chained = &p;
  for (auto g = ts.groups.rbegin(); !chained && g != ts.groups.rend(); ++g)  // newest first
    for (const WgmmaPending& p : *g)
      if (p.d == d) chained = &p;
  if (chained && chained->count != n / 2)
    fail_at(kWgmma, where, "accumulator chained from a wgmma of a different shape");
  if (!chained && !ts.wgmma_fenced)
    fail_at(kWgmma, where,
            "no wgmma.fence before this wgmma.mma_async (needed before the first one and after "
            "the registers were accessed)");
  WarpgroupSlot& g = warpgroup(kWgmma, where);
  const int me = tid % 128, wg = tid / 128;
  if (g.arrived == 0) {
    g.type = type, g.n = n, g.desc_a = desc_a, g.desc_b = desc_b, g.a_regs = a_regs != nullptr;
    g.scale_d = scale_d, g.trans_a = trans_a, g.trans_b = trans_b;
    g.scale_a = scale_a, g.scale_b = scale_b;
  } else if (g.kind == kWgmma &&
             (g.type != type || g.n != n || g.desc_a != desc_a || g.desc_b != desc_b ||
              g.a_regs != (a_regs != nullptr) || g.scale_d != scale_d || g.trans_a != trans_a ||
              g.trans_b != trans_b || g.scale_a != scale_a || g.scale_b != scale_b)) {
    fail_at(kWgmma, where,
            "the threads of the warpgroup disagree on the shape, type, descriptors or immediates "
            "(first thread's at " +
                loc(g.where) + ")");
  }
  if (a_regs) std::memcpy(g.a[me], a_regs, sizeof g.a[me]);
  std::memcpy(g.c[me], chained ? chained->result.data() : d, sizeof(float) * (n / 2));
  rendezvous(g, kWgmma, where, [&] {
    float A[64][16], B[256][16];
    g.read = std::make_shared<OperandSnapshot>();
    g.read->issued_at = where;
    g.read->addr.reserve(size_t(16) * (64 + g.n));
    g.read->bits.reserve(size_t(16) * (64 + g.n));
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k)
        if (!g.a_regs)
          A[m][k] = element(wgmma_element_address(g.desc_a, g.trans_a, m, k), g.type, "A", where,
                            *g.read, wg);
    if (g.a_regs)
      for (int t = 0; t < 128; ++t) {
        const int w = t / 32, l = t % 32, gg = l / 4, tt = l % 4;
        for (int i = 0; i < 8; ++i)
          A[16 * w + gg + 8 * ((i / 2) % 2)][2 * tt + i % 2 + 8 * (i / 4)] =
              reg_half(g.a[t], i, g.type);
      }
    for (int nn = 0; nn < g.n; ++nn)
      for (int k = 0; k < 16; ++k)
        B[nn][k] = element(wgmma_element_address(g.desc_b, g.trans_b, nn, k), g.type, "B", where,
                           *g.read, wg);
    // D[m][nn] = C[m][nn] + sum over k of (scale_a A[m][k]) (scale_b B[nn][k]), each element's
    // products added in k order, one rounding each (a scale of -1 is exact); a row at a time over
    // all n columns, which the compiler vectorises. The fragment layout: thread t's i-th
    // accumulator is element (m, nn) below.
    thread_local float D[64][256], Bt[16][256];  // no fiber switch within: one per OS thread
    auto fragment = [](int t, int i) {
      const int w = t / 32, l = t % 32, gg = l / 4, tt = l % 4;
      return std::pair{16 * w + gg + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * tt + i % 2};
    };
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < g.n / 2; ++i) {
        const auto [m, nn] = fragment(t, i);
        D[m][nn] = g.scale_d ? g.c[t][i] : 0.0f;
      }
    for (int k = 0; k < 16; ++k)
      for (int nn = 0; nn < g.n; ++nn) Bt[k][nn] = B[nn][k];
    const float sign = float(g.scale_a * g.scale_b);
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k) {
        const float a = sign * A[m][k];
        for (int nn = 0; nn < g.n; ++nn) D[m][nn] += a * Bt[k][nn];
      }
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < g.n / 2; ++i) {
        const auto [m, nn] = fragment(t, i);
        g.out[t][i] = D[m][nn];
      }
  });
  if (counters::active() && me == 0) [[unlikely]]  // once per warpgroup instance
    counters::hook::wgmma(where, n, a_regs == nullptr);
  WgmmaPending p;
  p.d = d, p.count = n / 2, p.read = g.read, p.issued_at = where;
  if (a_regs) p.a_regs = a_regs, std::memcpy(p.a_bits, a_regs, sizeof p.a_bits);
  p.result.assign(g.out[me], g.out[me] + n / 2);
  ts.open.push_back(std::move(p));
  for (int i = 0; i < n / 2; ++i)  // undefined until the wait: poison
    std::memcpy(&d[i], &kPendingAccumulator, sizeof(float));
}

void wgmma_commit_group(const where_t&) {
  ThreadState& ts = ext().threads[detail::current().tid];
  ts.groups.push_back(std::move(ts.open));
  ts.open.clear();
}

namespace {
// True on the third look: the caller sits out two scheduling passes.
bool third_look(void* p) {
  static_assert(detail::kWaitLooks >= 3, "the scheduler must look three times before a deadlock");
  return ++*static_cast<int*>(p) > 2;
}
}  // namespace

void wgmma_wait_group(int n, const where_t& where) {
  if (n < 0 || n > 7) fail_at("wgmma.wait_group", where, "N must be in 0..7");
  if (faulted(where, testing::Fault::skip)) return;
  ThreadState& ts = ext().threads[detail::current().tid];
  ts.last_wgmma_wait = where;
  ts.waited_wgmma = true;
  if (static_cast<int>(ts.groups.size()) > n) {
    // The wait takes time: the other threads run first, as they could on the GPU while the wgmma
    // still reads its operands (a slot released too early is then refilled before the check).
    int looks = 0;
    detail::wait_until(third_look, &looks, "wgmma.wait_group", where);
  }
  while (static_cast<int>(ts.groups.size()) > n) {
    // The accumulators of the group's wgmmas must still hold the poison, and A's registers what
    // they held at issue: written in between, they were used before their wait. (A kernel must
    // keep A's registers in a variable that lives until the wait, as the registers do on the
    // GPU: a C++ variable whose storage a later one reuses would be reported here.)
    for (const WgmmaPending& p : ts.groups.front()) {
      if (p.a_regs && std::memcmp(p.a_regs, p.a_bits, sizeof p.a_bits) != 0)
        fail_at("wgmma.wait_group", where,
                "the A fragment registers of the wgmma issued at " + loc(p.issued_at) +
                    " were written before this wait retired it (the PTX ISA leaves a wgmma's "
                    "register operands undefined to write until then: a missing or too late "
                    "wgmma.wait_group)");
      for (int i = 0; i < p.count; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &p.d[i], sizeof bits);
        if (bits != kPendingAccumulator)
          fail_at("wgmma.wait_group", where,
                  "accumulator " + std::to_string(i) + " of the wgmma issued at " +
                      loc(p.issued_at) +
                      " was written before this wait retired it (a missing or too late "
                      "wgmma.wait_group)");
      }
    }
    for (const WgmmaPending& p : ts.groups.front()) {
      // The operands are read as late as possible: checked when the warpgroup's last thread
      // retires the wgmma.
      if (p.read && ++p.read->retired == 128) {
        for (size_t i = 0; i < p.read->addr.size(); ++i) {
          uint16_t now;
          std::memcpy(&now, smem_at(p.read->addr[i]), 2);
          if (now != p.read->bits[i])
            fail_at("wgmma.wait_group", where,
                    "shared memory at " + hex(p.read->addr[i]) + " read by the wgmma issued at " +
                        loc(p.read->issued_at) + " changed before this wait retired it (" +
                        hex(p.read->bits[i]) + " -> " + hex(now) +
                        "): its buffer was released or overwritten too early");
        }
      }
      bool newer = false;  // a later wgmma still in flight owns these registers now
      for (size_t gi = 1; gi < ts.groups.size(); ++gi)
        for (const WgmmaPending& q : ts.groups[gi]) newer |= q.d == p.d;
      for (const WgmmaPending& q : ts.open) newer |= q.d == p.d;
      if (!newer) std::memcpy(p.d, p.result.data(), sizeof(float) * p.count);
    }
    ts.groups.pop_front();
  }
  ts.wgmma_fenced = false;
}

// ---- elect.sync, named barriers -----------------------------------------------------------------

namespace {
void elect_compute(const detail::CollectiveView& v) {
  const uint32_t leader = static_cast<uint32_t>(std::countr_zero(v.arrived));
  for (int lane = 0; lane < 32; ++lane)
    if (v.arrived >> lane & 1u) std::memcpy(v.lanes[lane].out, &leader, sizeof leader);
}
}  // namespace

uint32_t elect_sync(uint32_t mask, bool* is_leader, const where_t& where) {
  uint32_t leader = 0;
  detail::warp_collective(mask, kElect, nullptr, &leader, elect_compute, where);
  *is_leader = leader == static_cast<uint32_t>(detail::current().lane);
  return leader;
}

namespace {
void check_named(int id, int count, const char* what, const where_t& where) {
  if (id < 0 || id > 15) fail_at(what, where, "barrier id " + std::to_string(id) + " not in 0..15");
  if (count <= 0 || count % 32 != 0)
    fail_at(what, where,
            "thread count " + std::to_string(count) + " is not a positive multiple of 32");
}
}  // namespace

void named_barrier_sync(int id, int count, const where_t& where) {
  if (faulted(where, testing::Fault::barrier_id)) id = g_fault_value;
  check_named(id, count, "bar.sync", where);
  detail::barrier_sync(id, count, "bar.sync", where);
}

void named_barrier_arrive(int id, int count, const where_t& where) {
  if (faulted(where, testing::Fault::barrier_id)) id = g_fault_value;
  check_named(id, count, "bar.arrive", where);
  detail::barrier_arrive(id, count, "bar.arrive", where);
}

// ---- setmaxnreg ---------------------------------------------------------------------------------

namespace {
struct Grant {
  WarpgroupSlot* g;
  Sm90Block* e;
};
bool granted(void* p) {
  auto* x = static_cast<Grant*>(p);
  if (!x->g->granted && x->e->pool_free >= x->g->waiting_for) {
    x->e->pool_free -= x->g->waiting_for;
    x->g->waiting_for = 0;
    x->g->granted = true;
  }
  return x->g->granted;
}
}  // namespace

void setmaxnreg(bool inc, int regs, const where_t& where) {
  const char* what = inc ? "setmaxnreg.inc" : "setmaxnreg.dec";
  if (regs < 24 || regs > 256 || regs % 8 != 0)
    fail_at(what, where,
            "register count " + std::to_string(regs) + " is not a multiple of 8 in 24..256");
  WarpgroupSlot& g = warpgroup(kSetmaxnreg, where);
  const int me = detail::current().tid % 128;
  g.inc[me] = inc;
  g.regs_req[me] = regs;
  Sm90Block& e = ext();
  rendezvous(g, kSetmaxnreg, where, [&] {
    for (int t = 1; t < 128; ++t)
      if (g.inc[t] != g.inc[0] || g.regs_req[t] != g.regs_req[0])
        fail_at(what, where,
                "not warpgroup-uniform: thread " + std::to_string(t) + " asks " +
                    (g.inc[t] ? ".inc " : ".dec ") + std::to_string(g.regs_req[t]) + ", thread 0 " +
                    (g.inc[0] ? ".inc " : ".dec ") + std::to_string(g.regs_req[0]));
    const int want = g.regs_req[0];
    if (g.inc[0] && want < g.regs)
      fail_at(what, where,
              "asks " + std::to_string(want) + " registers, below the current " +
                  std::to_string(g.regs));
    if (!g.inc[0] && want > g.regs)
      fail_at(what, where,
              "asks " + std::to_string(want) + " registers, above the current " +
                  std::to_string(g.regs));
    if (g.inc[0]) {
      g.waiting_for = int64_t(want - g.regs) * 128;
      g.granted = false;
    } else {
      e.pool_free += int64_t(g.regs - want) * 128;
    }
    g.regs = want;
  });
  Grant x{&g, &e};
  detail::wait_until(granted, &x, what, where);
}

void set_entry_registers(int regs) {
  g_entry_registers = regs;
}

// ---- Bulk reductions into global memory ---------------------------------------------------------

namespace {
constexpr const char* kBulkReduce = "cp.reduce.async.bulk";
constexpr const char* kBulkWait = "cp.async.bulk.wait_group";

// The highest-numbered proxy fence that happens before thread `tid` (0: none).
uint32_t fences_ordered_before_thread(Sm90Block& e, int tid) {
  uint32_t best = 0;
  for (int f : e.fencers)
    for (auto it = e.threads[size_t(f)].fences.rbegin(); it != e.threads[size_t(f)].fences.rend();
         ++it)
      if (detail::ordered_before({f, it->first}, tid)) {
        best = std::max(best, it->second);
        break;
      }
  return best;
}

// The source was read as late as the PTX ISA allows: it must still hold what the operation read.
void retire_read(BulkOp& op, const where_t& where) {
  if (op.read) return;
  for (size_t x = 0; x < op.bytes.size(); ++x)
    if (*smem_at(op.src + uint32_t(x)) != op.bytes[x])
      fail_at(kBulkWait, where,
              "shared memory at " + hex(op.src + uint32_t(x)) +
                  ", the source of the bulk reduction issued at " + loc(op.issued_at) +
                  ", changed before this wait retired its read (a buffer reused before "
                  "cp.async.bulk.wait_group.read let it go)");
  op.read = true;
}

// The adds land: each element atomically, as other blocks' reductions into the same floats may.
void land(const BulkOp& op) {
  for (size_t i = 0; i < op.bytes.size() / 4; ++i) {
    float x;
    std::memcpy(&x, &op.bytes[4 * i], 4);
    std::atomic_ref<float>(op.dst[i]).fetch_add(x, std::memory_order_relaxed);
  }
}
}  // namespace

std::string Sm90Block::bulk_exited(ThreadState& t) {
  if (!t.bulk_open.empty()) t.bulk_groups.push_back(std::move(t.bulk_open));
  t.bulk_open.clear();
  for (const auto& group : t.bulk_groups)
    for (const BulkOp& op : group)
      if (!op.read)
        return "exits with the bulk reduction issued at " + loc(op.issued_at) +
               " still free to read its shared-memory source (no cp.async.bulk.wait_group{.read} "
               "retired it, and the block's shared memory goes when it ends)";
  for (const auto& group : t.bulk_groups)
    for (const BulkOp& op : group) land(op);
  t.bulk_groups.clear();
  return {};
}

void bulk_reduce_add_f32(float* dst, const void* src, uint32_t bytes, const where_t& where) {
  if (bytes == 0 || bytes % 16 != 0)
    fail_at(kBulkReduce, where,
            "size " + std::to_string(bytes) + " bytes is not a positive multiple of 16");
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0)
    fail_at(kBulkReduce, where, "global destination not 16-byte aligned");
  detail::check_shared(src, bytes, 16, kBulkReduce, where);
  const uint32_t a = shared_address(src, where);
  Sm90Block& e = ext();
  const int tid = detail::current().tid;

  // The async proxy reads the source: what the last proxy fence made visible to it, and only
  // where that fence happens before this thread (fence, then a barrier, then the bulk copy).
  uint32_t need = 0;
  for (uint32_t x = a; x < a + bytes; ++x) {
    if (*smem_at(x) != e.async_view[x])
      fail_at(
          kBulkReduce, where,
          "reads shared memory at " + hex(x) +
              ", written by generic-proxy stores after the "
              "last fence.proxy.async.shared::cta: the async proxy does not see them (fence, then "
              "the bulk copy)");
    if (!e.first_fence.empty()) need = std::max(need, e.first_fence[x / 2]);
  }
  if (!detail::ever_written(a, bytes))
    fail_at(kBulkReduce, where,
            "reads shared memory at " + hex(a) +
                " that nothing has written and fenced since the block started");
  if (need > fences_ordered_before_thread(e, tid))
    fail_at(kBulkReduce, where,
            "reads shared memory whose fence.proxy.async.shared::cta does not happen before it: "
            "the threads that stored and fenced it must meet this one at a barrier first");
  BulkOp op{dst, a,
            std::vector<unsigned char>(e.async_view.begin() + a, e.async_view.begin() + a + bytes),
            where, false};
  e.threads[size_t(tid)].bulk_open.push_back(std::move(op));
}

void bulk_commit_group(const where_t&) {
  ThreadState& ts = ext().threads[detail::current().tid];
  ts.bulk_groups.push_back(std::move(ts.bulk_open));
  ts.bulk_open.clear();
}

void bulk_wait_group(int n, bool read, const where_t& where) {
  if (n < 0 || n > 63) fail_at(kBulkWait, where, "N must be in 0..63");
  ThreadState& ts = ext().threads[detail::current().tid];
  if (static_cast<int>(ts.bulk_groups.size()) > n) {
    // The wait takes time: the other threads run first, as they could on the GPU while the copy
    // still reads its source (a buffer overwritten too early is then caught below).
    int looks = 0;
    detail::wait_until(third_look, &looks, kBulkWait, where);
  }
  for (size_t g = 0; g + size_t(n) < ts.bulk_groups.size(); ++g)
    for (BulkOp& op : ts.bulk_groups[g]) retire_read(op, where);
  if (read) return;
  while (static_cast<int>(ts.bulk_groups.size()) > n) {
    for (const BulkOp& op : ts.bulk_groups.front()) land(op);
    ts.bulk_groups.pop_front();
  }
}

namespace testing {
void record_sync(std::vector<SyncEvent>* events) {
  std::lock_guard lock(g_record_mutex);
  g_record.store(events);
}

void fault_at(const char* file_suffix, int line, Fault fault, int value) {
  std::lock_guard lock(g_fault_mutex);
  g_fault_file = file_suffix ? file_suffix : "";
  g_fault = fault;
  g_fault_value = value;
  g_fault_line = line;
}
}  // namespace testing

}  // namespace simt
