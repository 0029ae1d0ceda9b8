// The counters (counters.h): lanes grouped into warp-level instructions, each instruction's
// sectors and wavefronts, per site, merged per source line at the end.
#include "common/simt/counters.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/simt/memory.h"
#include "common/simt/ptx.h"
#include "common/simt/runtime.h"

namespace simt::counters {

std::atomic<bool> g_active{false};

void Counts::add(const Counts& o) {
  gld_requests += o.gld_requests, gld_sectors += o.gld_sectors, gld_bytes += o.gld_bytes;
  gst_requests += o.gst_requests, gst_sectors += o.gst_sectors, gst_bytes += o.gst_bytes;
  ldgsts_requests += o.ldgsts_requests, ldgsts_sectors += o.ldgsts_sectors;
  ldgsts_bytes += o.ldgsts_bytes;
  ldgsts_wavefronts += o.ldgsts_wavefronts, ldgsts_ideal += o.ldgsts_ideal;
  tma_copies += o.tma_copies, tma_sectors += o.tma_sectors, tma_bytes += o.tma_bytes;
  lds_inst += o.lds_inst, lds_wavefronts += o.lds_wavefronts, lds_ideal += o.lds_ideal;
  sts_inst += o.sts_inst, sts_wavefronts += o.sts_wavefronts, sts_ideal += o.sts_ideal;
  ldsm_inst += o.ldsm_inst, ldsm_wavefronts += o.ldsm_wavefronts, ldsm_ideal += o.ldsm_ideal;
  mma += o.mma, wgmma += o.wgmma, wgmma_smem_bytes += o.wgmma_smem_bytes;
  tensor_flops += o.tensor_flops;
  block_barriers += o.block_barriers, named_barriers += o.named_barriers;
  mbarrier_ops += o.mbarrier_ops, shuffles += o.shuffles, votes += o.votes;
}

namespace {

using hook::Kind;

// What the finished blocks counted, per site, and the launches.
std::mutex g_mutex;
std::unordered_map<uint64_t, Counts> g_sites;
uint64_t g_launches = 0;

// Per device buffer touched: a bit per byte (distinct bytes), and the bytes its sectors moved.
struct BufferBits {
  BufferSpan span;
  std::unique_ptr<std::atomic<uint64_t>[]> bits;
  std::atomic<uint64_t> moved{0};
};
std::mutex g_buffers_mutex;
std::map<uintptr_t, std::unique_ptr<BufferBits>> g_buffers;  // by the data's first byte
std::atomic<uint64_t> g_generation{0};  // moves on at start(): cached pointers into g_buffers die

// Whether buffer b (or none) holds byte a.
bool holds(const BufferBits* b, uintptr_t a) {
  return b != nullptr && a >= b->span.data && a < b->span.data + b->span.bytes;
}

BufferBits* buffer_at(uintptr_t a) {
  // The buffers a kernel touches in turn (Q, K, V, O, ...), most recent first, per OS thread.
  constexpr int kRecent = 4;
  thread_local BufferBits* recent[kRecent] = {};
  thread_local uint64_t recent_generation = ~uint64_t(0);
  const uint64_t generation = g_generation.load(std::memory_order_relaxed);
  if (recent_generation != generation) {
    std::fill(recent, recent + kRecent, nullptr);
    recent_generation = generation;
  }
  for (int i = 0; i < kRecent; ++i)
    if (BufferBits* b = recent[i]; holds(b, a)) {
      std::rotate(recent, recent + i, recent + i + 1);
      return b;
    }
  BufferSpan span;
  if (!find_buffer(reinterpret_cast<const void*>(a), span)) return nullptr;
  std::lock_guard lock(g_buffers_mutex);
  auto& b = g_buffers[span.data];
  if (!b || b->span.bytes != span.bytes) {
    b = std::make_unique<BufferBits>();
    b->span = span;
    const size_t words = (span.bytes + 63) / 64;
    b->bits = std::make_unique<std::atomic<uint64_t>[]>(words);
    for (size_t w = 0; w < words; ++w) b->bits[w].store(0, std::memory_order_relaxed);
  }
  std::rotate(recent, recent + kRecent - 1, recent + kRecent);
  return recent[0] = b.get();
}

// Marks [a, a + n) of device memory as touched, a word of bits at a time (`last`: the buffer the
// caller's previous range was in, asked first). Bytes touched before are mostly touched again, so
// a word is read before it is written.
void touch(uintptr_t a, uint32_t n, BufferBits*& last) {
  for (uintptr_t x = a; x < a + n;) {
    BufferBits* b = holds(last, x) ? last : (last = buffer_at(x));
    if (!b) {
      ++x;
      continue;
    }
    const uintptr_t end = std::min<uintptr_t>(a + n, b->span.data + b->span.bytes);
    while (x < end) {
      const size_t i = x - b->span.data, bit = i % 64;
      const size_t count = std::min<size_t>(64 - bit, end - x);
      const uint64_t mask = (count == 64 ? ~uint64_t(0) : (uint64_t(1) << count) - 1) << bit;
      std::atomic<uint64_t>& word = b->bits[i / 64];
      if ((word.load(std::memory_order_relaxed) & mask) != mask)
        word.fetch_or(mask, std::memory_order_relaxed);
      x += count;
    }
  }
}

// Counts the distinct sectors of `sectors` (sector numbers, a >> 5), and credits 32 bytes of
// each to the buffer that holds it (buffers start 256-byte aligned), once per run of sectors in
// the same buffer. Sorts `sectors`.
uint64_t distinct_sectors(uintptr_t* sectors, size_t n) {
  if (!std::is_sorted(sectors, sectors + n)) std::sort(sectors, sectors + n);
  n = size_t(std::unique(sectors, sectors + n) - sectors);
  BufferBits* run = nullptr;
  uint64_t run_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const uintptr_t a = sectors[i] << 5;
    if (!holds(run, a)) {
      if (run) run->moved.fetch_add(run_bytes, std::memory_order_relaxed);
      run = buffer_at(a), run_bytes = 0;
    }
    run_bytes += 32;
  }
  if (run) run->moved.fetch_add(run_bytes, std::memory_order_relaxed);
  return n;
}
uint64_t distinct_sectors(std::vector<uintptr_t>& sectors) {
  return distinct_sectors(sectors.data(), sectors.size());
}

// Up to N values on the stack, more on the heap (an access of more than 16 bytes, from a copy
// of a larger object, is rare).
template <typename T, size_t N>
struct Few {
  T small[N];
  std::vector<T> big;
  size_t n = 0;
  void push(T x) {
    if (n < N) {
      small[n] = x;
    } else {
      if (big.empty()) big.assign(small, small + N);
      big.push_back(x);
    }
    ++n;
  }
  T* data() { return big.empty() ? small : big.data(); }
};

struct LaneRec {
  uintptr_t addr, addr2;
  uint32_t bytes;
};

struct Instance {
  Kind kind;
  uint64_t site;
  uint32_t lanes = 0;
  LaneRec rec[32];
};

struct Key {
  uint64_t site;
  uint64_t occurrence;
  bool operator==(const Key& o) const { return site == o.site && occurrence == o.occurrence; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<uint64_t>()(k.site * 0x9E3779B97F4A7C15ull ^ k.occurrence);
  }
};

// A warp's open instructions: those some of its lanes have reached and others not yet. Most
// warps' lanes reach the same sites in the same order, so the instructions are kept in the order
// their first lane reached them, and a lane whose accesses so far are that order's first ones
// finds its instruction at its own position in it, with no lookup. The first lane that leaves the
// order turns the warp to a map keyed by (site, occurrence) until it synchronises again; the key is
// the same either way, so the grouping is too.
struct WarpOpen {
  struct Head {
    uint64_t site;
    uint32_t lanes;  // 0: finished
    Kind kind;
  };
  bool keyed = false;
  // Before `keyed`: the instructions in the order first reached, and each lane's part of them in
  // that lane's own array (a lane writes, and the last lane reads, one after another). The
  // finished ones at the front are dropped now and then, their sites kept for the occurrences;
  // `base` is how many, `done` how many finished ones lead what is left.
  std::vector<Head> order;
  struct Part {  // a LaneRec in 16 bytes: addr2 (cp.async's shared destination) as an offset
    uintptr_t addr;
    uint32_t addr2, bytes;
  };
  // A lane's parts: a vector whose usual push (room left) lane() makes itself, with no call.
  struct Parts {
    std::unique_ptr<Part[]> data;
    size_t n = 0, room = 0;
    bool full() const { return n == room; }
    void push(const Part& p) {
      if (full()) {
        room = std::max<size_t>(64, 2 * room);
        auto more = std::make_unique_for_overwrite<Part[]>(room);
        std::copy(data.get(), data.get() + n, more.get());
        data = std::move(more);
      }
      data[n++] = p;
    }
    void drop_front(size_t k) {  // (k at most n)
      std::copy(data.get() + k, data.get() + n, data.get());
      n -= k;
    }
    size_t size() const { return n; }
    void clear() { n = 0; }
    const Part& operator[](size_t i) const { return data[i]; }
  };
  Parts recs[32];
  size_t base = 0, done = 0;
  std::vector<uint64_t> dropped;
  std::unordered_map<Key, Instance, KeyHash> open;  // after

  void clear() {
    keyed = false;
    order.clear(), dropped.clear(), open.clear();
    for (auto& r : recs) r.clear();
    base = done = 0;
  }
  // Instruction i of the order, its lanes' parts gathered.
  Instance instance(size_t i) const {
    Instance in;
    in.kind = order[i].kind, in.site = order[i].site, in.lanes = order[i].lanes;
    for (uint32_t m = in.lanes; m != 0; m &= m - 1) {
      const int l = std::countr_zero(m);
      const Part& part = recs[l][i];
      in.rec[l] = {part.addr, in.kind == Kind::cp_async ? detail::t_shared_lo + part.addr2 : 0,
                   part.bytes};
    }
    return in;
  }
};

// A worker thread's counting state for the block it runs.
struct BlockState {
  int nthreads = 0;
  const uint32_t* live_lanes = nullptr;  // per warp (the runtime's)
  // Per thread: its accesses since its warp last synchronised as a whole (its place in `order`),
  // and once the warp is keyed, how often it reached each site in that time.
  std::vector<size_t> position;
  std::vector<std::unordered_map<uint64_t, uint64_t>> occurrences;
  std::vector<WarpOpen> warps;
  std::unordered_map<uint64_t, Counts> sites;
};
thread_local BlockState t_block;
// The same, for lane(): a plain pointer reads without thread_local's guard (set by block_begin).
constinit thread_local BlockState* t_state = nullptr;
// What lane() needs of the thread that runs, for thread `of` (none after block_begin or save):
// where in its warp's order it is and where its next part goes, as pointers that lane() moves on
// by itself, its bit and its warp's live lanes; and where those pointers are kept as a position
// and a count, which save() brings up to date. `next` and `end` are equal (null) where the warp is
// keyed or its order has never held an instruction: then lane() moves nothing. Whatever else reads
// a position or a count, or changes a warp's order or a lane's parts (lane_any, drop_finished,
// flush), saves first: the pointers may move; a new block resets the cursor. (lane_finish reads
// the order and the parts unsaved: by index, and the running lane's part is written already.)
struct Cursor {
  const detail::ThreadIds* of = nullptr;
  WarpOpen::Head *next = nullptr, *end = nullptr;
  WarpOpen::Part *rec = nullptr, *rec_end = nullptr;
  uint32_t bit = 0;
  const uint32_t* live = nullptr;
  WarpOpen* warp = nullptr;
  size_t* position = nullptr;
  WarpOpen::Parts* recs = nullptr;
  [[gnu::noinline]] void point_at(BlockState& b, const detail::ThreadIds& me) {
    save();
    of = &me;
    warp = &b.warps[size_t(me.warp)];
    position = &b.position[size_t(me.tid)];
    recs = &warp->recs[me.lane];
    bit = 1u << me.lane;
    live = &b.live_lanes[me.warp];
    if (warp->keyed) {
      next = end = nullptr;
    } else {
      next = warp->order.data() + (*position - warp->base);
      end = warp->order.data() + warp->order.size();
    }
    rec = recs->data.get() + recs->n;
    rec_end = recs->data.get() + recs->room;
  }
  void save() {
    if (of != nullptr && next != nullptr) {
      *position = warp->base + size_t(next - warp->order.data());
      recs->n = size_t(rec - recs->data.get());
    }
    of = nullptr;
    next = end = nullptr;
  }
};
constinit thread_local Cursor t_cursor;

// The wavefronts one group of lanes needs (those of `lanes`, a mask): the most distinct 4-byte
// words any bank holds.
uint64_t group_wavefronts(const LaneRec* rec, uint32_t lanes, bool second) {
  auto each_word = [&](auto&& f) {  // every 4-byte word each lane accesses
    for (uint32_t m = lanes; m != 0; m &= m - 1) {
      const LaneRec& r = rec[std::countr_zero(m)];
      const uintptr_t a = second ? r.addr2 : r.addr;
      const uint32_t bytes = second ? 16 : r.bytes;
      if (bytes == 0) continue;
      for (uintptr_t w = a / 4; w <= (a + bytes - 1) / 4; ++w) f(uint32_t(w));
    }
  };
  // The usual case first, with nothing gathered: no bank holds two distinct words, so one
  // wavefront (none if no lane accesses a byte). Each bank keeps the last word a lane gave it: a
  // bank given two distinct words is at some point given one that differs from the one it keeps.
  // No branch on the addresses (lanes that take turns between rows would mispredict them).
  uint32_t bank_word[32];
  uint32_t banks_used = 0;
  bool distinct_in_a_bank = false;
  each_word([&](uint32_t w) {
    const uint32_t bank = w % 32, bit = 1u << bank;
    distinct_in_a_bank |= ((banks_used & bit) != 0) & (bank_word[bank] != w);
    banks_used |= bit;
    bank_word[bank] = w;
  });
  if (banks_used == 0) return 0;
  if (!distinct_in_a_bank) return 1;
  Few<uint32_t, 32 * 4> few;  // a lane's access of up to 16 bytes covers at most 4 words
  each_word([&](uint32_t w) { few.push(w); });
  uint32_t* words = few.data();
  int count = int(few.n);
  std::sort(words, words + count);
  count = int(std::unique(words, words + count) - words);
  int per_bank[32] = {};
  int most = 0;
  for (int i = 0; i < count; ++i) most = std::max(most, ++per_bank[words[i] % 32]);
  return uint64_t(most);
}

// The wavefronts of a warp-level shared-memory instruction whose lanes access `width` bytes each,
// and the fewest it could take: groups of 32, 16 or 8 lanes (at most 128 bytes a wavefront).
void shared_wavefronts(const Instance& in, uint32_t width, bool second, uint64_t& wavefronts,
                       uint64_t& ideal) {
  const int group = width <= 4 ? 32 : width <= 8 ? 16 : 8;
  const uint32_t group_lanes = group == 32 ? ~0u : (1u << group) - 1;
  for (int g0 = 0; g0 < 32; g0 += group) {
    const uint64_t w = group_wavefronts(in.rec, in.lanes & group_lanes << g0, second);
    wavefronts += w;
    ideal += w > 0 ? 1 : 0;
  }
}

// Global side: one request, its distinct sectors, the bytes asked for.
void global_request(const Instance& in, uint64_t& requests, uint64_t& sectors, uint64_t& bytes) {
  Few<uintptr_t, 32 * 2> s;  // a lane's access of up to 16 bytes spans at most two sectors
  uint64_t asked = 0;
  BufferBits* last = nullptr;
  // Neighbouring lanes mostly read the same bytes (a broadcast) or the next ones (coalesced):
  // their bytes are touched as one range [lo, hi), and a sector the lane before also gave is not
  // given again (distinct_sectors drops repeats anyway).
  uintptr_t lo = 0, hi = 0;
  for (uint32_t m = in.lanes; m != 0; m &= m - 1) {
    const LaneRec& r = in.rec[std::countr_zero(m)];
    if (r.bytes == 0) continue;
    asked += r.bytes;
    if (r.addr < lo || r.addr + r.bytes > hi) {  // not inside the range so far
      if (r.addr == hi) {
        hi += r.bytes;
      } else {
        if (hi > lo) touch(lo, uint32_t(hi - lo), last);
        lo = r.addr, hi = r.addr + r.bytes;
      }
    }
    for (uintptr_t x = r.addr >> 5; x <= (r.addr + r.bytes - 1) >> 5; ++x)
      if (s.n == 0 || s.data()[s.n - 1] != x) s.push(x);
  }
  if (hi > lo) touch(lo, uint32_t(hi - lo), last);
  if (asked == 0) return;  // every lane zero-filled (cp.async with no source bytes)
  ++requests;
  sectors += distinct_sectors(s.data(), s.n);
  bytes += asked;
}

void finish(const Instance& in) {
  Counts& c = t_block.sites[in.site];
  const int first = std::countr_zero(in.lanes);
  switch (in.kind) {
    case Kind::global_load: global_request(in, c.gld_requests, c.gld_sectors, c.gld_bytes); break;
    case Kind::global_store: global_request(in, c.gst_requests, c.gst_sectors, c.gst_bytes); break;
    case Kind::shared_load:
      ++c.lds_inst;
      shared_wavefronts(in, in.rec[first].bytes, false, c.lds_wavefronts, c.lds_ideal);
      break;
    case Kind::shared_store:
      ++c.sts_inst;
      shared_wavefronts(in, in.rec[first].bytes, false, c.sts_wavefronts, c.sts_ideal);
      break;
    case Kind::cp_async:
      global_request(in, c.ldgsts_requests, c.ldgsts_sectors, c.ldgsts_bytes);
      shared_wavefronts(in, 16, true, c.ldgsts_wavefronts, c.ldgsts_ideal);
      break;
    case Kind::ldmatrix:
      ++c.ldsm_inst;
      for (int m = 0; m < 4; ++m) {  // one group of eight rows per matrix
        const uint64_t w = group_wavefronts(in.rec, in.lanes & 0xFFu << 8 * m, false);
        c.ldsm_wavefronts += w;
        c.ldsm_ideal += w > 0 ? 1 : 0;
      }
      break;
    case Kind::mbarrier: ++c.mbarrier_ops; break;
  }
}

// Turns warp `w` from its order to the map: each open instruction under its key, each lane's
// occurrences counted over the part of the order it has passed.
void key_warp(int w) {
  BlockState& b = t_block;
  WarpOpen& warp = b.warps[size_t(w)];
  for (int t = 32 * w; t < std::min(32 * w + 32, b.nthreads); ++t) {
    auto& mine = b.occurrences[size_t(t)];
    const size_t passed = b.position[size_t(t)];
    for (size_t i = 0; i < passed; ++i)
      ++mine[i < warp.base ? warp.dropped[i] : warp.order[i - warp.base].site];
  }
  std::unordered_map<uint64_t, uint64_t> seen;
  for (uint64_t site : warp.dropped) ++seen[site];
  for (size_t i = 0; i < warp.order.size(); ++i) {
    const uint64_t occurrence = seen[warp.order[i].site]++;
    if (warp.order[i].lanes != 0)
      warp.open.emplace(Key{warp.order[i].site, occurrence}, warp.instance(i));
  }
  warp.order.clear();
  for (auto& r : warp.recs) r.clear();
  warp.keyed = true;
}

// Drops the finished instructions at the front of a warp's order once they are half of it.
void drop_finished(WarpOpen& warp) {
  while (warp.done < warp.order.size() && warp.order[warp.done].lanes == 0) ++warp.done;
  if (warp.done < 64 || 2 * warp.done < warp.order.size()) return;
  t_cursor.save();  // the order and the parts move
  for (size_t i = 0; i < warp.done; ++i) warp.dropped.push_back(warp.order[i].site);
  warp.order.erase(warp.order.begin(), warp.order.begin() + ptrdiff_t(warp.done));
  for (auto& r : warp.recs)  // a lane that has exited may have fewer
    r.drop_front(std::min(warp.done, r.size()));
  warp.base += warp.done;
  warp.done = 0;
}

void flush(int w) {
  t_cursor.save();  // the order and the parts are cleared
  WarpOpen& warp = t_block.warps[size_t(w)];
  for (size_t i = 0; i < warp.order.size(); ++i)
    if (warp.order[i].lanes != 0) finish(warp.instance(i));
  for (const auto& entry : warp.open) finish(entry.second);
  warp.clear();
}

}  // namespace

// ---- Starting and stopping, and the report ------------------------------------------------------

void start() {
  std::lock_guard lock(g_mutex);
  g_sites.clear();
  g_launches = 0;
  {
    std::lock_guard b(g_buffers_mutex);
    g_buffers.clear();
  }
  ++g_generation;
  g_active.store(true, std::memory_order_release);
}

Report stop() {
  g_active.store(false, std::memory_order_release);
  Report r;
  std::unordered_map<uint64_t, Counts> sites;
  {
    std::lock_guard lock(g_mutex);
    sites.swap(g_sites);
    r.launches = g_launches;
  }
  // Source lines: a kernel line for an emulation's site, the debug information for a code
  // address (resolved all at once).
  std::vector<uintptr_t> pcs;
  for (const auto& entry : sites)
    if (!(entry.first >> 63)) pcs.push_back(uintptr_t(entry.first));
  const std::vector<std::string> pc_lines = detail::source_lines_of(pcs);
  std::map<std::string, Counts> by_line;
  size_t next_pc = 0;
  for (const auto& entry : sites) {
    std::string where;
    if (entry.first >> 63) {
      const uint64_t k = entry.first & ~(uint64_t(1) << 63);
      where = detail::short_location(reinterpret_cast<const char*>(k >> 16), unsigned(k & 0xFFFF));
    } else {
      where = pc_lines[next_pc++];
    }
    by_line[where].add(entry.second);
    r.total.add(entry.second);
  }
  for (auto& [where, counts] : by_line) r.lines.push_back({where, counts});
  std::sort(r.lines.begin(), r.lines.end(), [](const Line& a, const Line& b) {
    return a.counts.global_sectors() != b.counts.global_sectors()
               ? a.counts.global_sectors() > b.counts.global_sectors()
               : a.where < b.where;
  });
  std::lock_guard b(g_buffers_mutex);
  std::vector<const BufferBits*> touched;  // in allocation order (g_buffers is by address)
  for (const auto& entry : g_buffers) touched.push_back(entry.second.get());
  std::sort(touched.begin(), touched.end(), [](const BufferBits* x, const BufferBits* y) {
    return x->span.serial < y->span.serial;
  });
  for (const BufferBits* entry : touched) {
    const BufferBits& bits = *entry;
    Buffer out{*bits.span.label, bits.span.bytes, 0, bits.moved.load()};
    for (size_t w = 0; w < (bits.span.bytes + 63) / 64; ++w)
      out.distinct += uint64_t(std::popcount(bits.bits[w].load(std::memory_order_relaxed)));
    r.buffers.push_back(out);
  }
  g_buffers.clear();
  return r;
}

// ---- Hooks
// ----------------------------------------------------------------------------------------

namespace hook {

uint64_t site_of(const where_t& where) {
  // The file name's address (a string literal: fixed) and the line, tagged by the top bit.
  return uint64_t(1) << 63 | uint64_t(reinterpret_cast<uintptr_t>(where.file_name())) << 16 |
         (where.line() & 0xFFFF);
}

namespace {
// Instruction i of a warp's order is complete: counted, and marked finished.
[[gnu::noinline]] void finish_in_order(WarpOpen& warp, size_t i) {
  finish(warp.instance(i));
  warp.order[i].lanes = 0;
  if (i == warp.done) drop_finished(warp);
}

// lane() in every case: the first lane at an instruction, a lane that leaves the order (the warp
// is keyed from then on), a keyed warp; out of line.
[[gnu::noinline]] void lane_any(Kind kind, uint64_t site, uintptr_t addr, uint32_t bytes,
                                uintptr_t addr2) {
  t_cursor.save();  // the order may grow, the warp be keyed
  BlockState& b = t_block;
  const detail::ThreadIds& me = detail::current();
  WarpOpen& warp = b.warps[size_t(me.warp)];
  const uint32_t live = b.live_lanes[me.warp];
  if (!warp.keyed) {
    size_t& position = b.position[size_t(me.tid)];
    const size_t i = position - warp.base;
    if (i == warp.order.size()) warp.order.push_back({site, 0, kind});  // the first lane here
    WarpOpen::Head& head = warp.order[i];
    if (head.site == site) {
      ++position;
      head.lanes |= 1u << me.lane;
      // At i: the lane passed all before. Only cp.async gives addr2, in the block's shared memory.
      const uint32_t offset = kind == Kind::cp_async ? uint32_t(addr2 - detail::t_shared_lo) : 0;
      warp.recs[me.lane].push({addr, offset, bytes});
      if ((live & ~head.lanes) == 0) finish_in_order(warp, i);  // every live lane is here
      return;
    }
    key_warp(me.warp);  // this lane left the order
  }
  const uint64_t occurrence = b.occurrences[size_t(me.tid)][site]++;
  auto [it, fresh] = warp.open.try_emplace(Key{site, occurrence});
  Instance& in = it->second;
  if (fresh) in.kind = kind, in.site = site;
  in.lanes |= 1u << me.lane;
  in.rec[me.lane] = {addr, addr2, bytes};
  if ((live & ~in.lanes) == 0) {
    finish(in);
    warp.open.erase(it);
  }
}
// lane() in the usual case's last step: every live lane has reached instruction `head`.
[[gnu::noinline]] void lane_finish(WarpOpen::Head* head) {
  WarpOpen& warp = *t_cursor.warp;
  finish_in_order(warp, size_t(head - warp.order.data()));
}
// lane() in every other case: after a switch, what it needs of the thread that now runs looked up
// first.
[[gnu::noinline]] void lane_slow(Kind kind, uint64_t site, uintptr_t addr, uint32_t bytes,
                                 uintptr_t addr2) {
  Cursor& c = t_cursor;
  if (c.of != detail::t_current) {
    c.point_at(*t_state, *detail::t_current);
    return lane(kind, site, addr, bytes, addr2);
  }
  lane_any(kind, site, addr, bytes, addr2);
}
}  // namespace

// The usual case, in few instructions and no call but the last: a lane of a warp still in order
// that reaches the instruction a lane before it reached at the same position, with room for its
// part in its array (what lane_any's first branch does there). Every other case goes to
// lane_slow.
void lane(Kind kind, uint64_t site, uintptr_t addr, uint32_t bytes, uintptr_t addr2) {
  Cursor& c = t_cursor;
  WarpOpen::Head* head = c.next;
  WarpOpen::Part* rec = c.rec;
  if (c.of != detail::t_current || head == c.end || head->site != site || rec == c.rec_end)
      [[unlikely]]
    return lane_slow(kind, site, addr, bytes, addr2);
  c.next = head + 1;
  c.rec = rec + 1;
  // At head: the lane passed all before. Only cp.async gives addr2, in the block's shared memory.
  *rec = {addr, kind == Kind::cp_async ? uint32_t(addr2 - detail::t_shared_lo) : 0, bytes};
  head->lanes |= c.bit;
  if ((*c.live & ~head->lanes) == 0) return lane_finish(head);  // every live lane is here
}

void collective(const char* kind, const where_t& where, int warp, uint32_t arrived, bool whole_warp,
                const detail::LaneSlot* lanes) {
  auto starts = [&](const char* prefix) {
    return std::strncmp(kind, prefix, std::strlen(prefix)) == 0;
  };
  if (kind == detail::kLdmatrix) {  // the rows lanes 8j .. 8j + 7 gave, per matrix j
    Instance in;
    in.kind = Kind::ldmatrix;
    in.site = site_of(where);
    in.lanes = arrived;
    for (uint32_t m = arrived; m != 0; m &= m - 1) {
      const int l = std::countr_zero(m);
      const auto* x = reinterpret_cast<const detail::LdmatrixIn*>(lanes[l].in);
      in.rec[l] = {reinterpret_cast<uintptr_t>(x->row), 0, l < 8 * x->count ? 16u : 0u};
    }
    finish(in);
  } else if (starts("mma")) {
    Counts& c = t_block.sites[site_of(where)];
    ++c.mma;
    c.tensor_flops += 2.0 * 16 * 8 * 16;  // m16n8k16
  } else if (starts("__shfl")) {
    ++t_block.sites[site_of(where)].shuffles;
  } else if (starts("__ballot") || starts("__any") || starts("__all") || starts("__syncwarp")) {
    ++t_block.sites[site_of(where)].votes;
  }
  if (whole_warp) warp_synced(warp);
}

void wgmma(const where_t& where, int n, bool a_from_shared) {
  Counts& c = t_block.sites[site_of(where)];
  ++c.wgmma;
  c.tensor_flops += 2.0 * 64 * n * 16;
  c.wgmma_smem_bytes += uint64_t(a_from_shared ? 64 * 16 * 2 : 0) + uint64_t(n) * 16 * 2;
}

void tma(const where_t& where, const std::vector<uintptr_t>& global_addrs, uint32_t piece,
         uint64_t bytes) {
  Counts& c = t_block.sites[site_of(where)];
  ++c.tma_copies;
  c.tma_bytes += bytes;
  std::vector<uintptr_t> sectors;
  sectors.reserve(global_addrs.size());
  BufferBits* last = nullptr;
  for (uintptr_t a : global_addrs) {
    touch(a, piece, last);
    for (uintptr_t x = a >> 5; x <= (a + piece - 1) >> 5; ++x) sectors.push_back(x);
  }
  c.tma_sectors += distinct_sectors(sectors);
}

void barrier(const where_t& where, bool block_barrier, int warps) {
  Counts& c = t_block.sites[site_of(where)];
  (block_barrier ? c.block_barriers : c.named_barriers) += uint64_t(warps);
}

void block_begin(int nthreads, const uint32_t* live_lanes) {
  BlockState& b = t_block;
  t_state = &b;
  t_cursor = Cursor{};  // dropped, not saved: the state it points into is made anew below
  b.nthreads = nthreads;
  b.live_lanes = live_lanes;
  b.position.assign(size_t(nthreads), 0);
  b.occurrences.assign(size_t(nthreads), {});
  b.warps.resize(size_t((nthreads + 31) / 32));
  for (WarpOpen& w : b.warps) w.clear();
  b.sites.clear();
}

void block_end() {
  BlockState& b = t_block;
  // Each warp's open instructions counted. The threads' positions are left as they are, unlike
  // warp_synced's: nothing reads them before block_begin assigns them anew.
  for (int w = 0; w < int(b.warps.size()); ++w) flush(w);
  std::lock_guard lock(g_mutex);
  for (const auto& [site, counts] : b.sites) g_sites[site].add(counts);
  b.sites.clear();
}

void launch() {
  std::lock_guard lock(g_mutex);
  ++g_launches;
}

void warp_synced(int warp) {
  BlockState& b = t_block;
  if (size_t(warp) >= b.warps.size()) return;
  flush(warp);
  for (int t = 32 * warp; t < std::min(32 * warp + 32, b.nthreads); ++t) {
    b.position[size_t(t)] = 0;
    b.occurrences[size_t(t)].clear();
  }
}

}  // namespace hook
}  // namespace simt::counters
