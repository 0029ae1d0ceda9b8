// What a block's shared memory holds, for the checks on each access (runtime.h, block.h): which
// 16-byte chunks anything has written, which a cp.async still copies into, and which thread last
// stored each 4-byte word and when (the instrumented build, which sees every store).
#include <cstdint>
#include <string>

#include "common/simt/block.h"

namespace simt::detail {

void mark_written(size_t offset, size_t bytes) {
  Block& blk = *t_block;
  for (size_t c = offset / 16; c <= (offset + bytes - 1) / 16 && c < blk.chunks.size(); ++c)
    blk.chunks[c] |= Block::kWritten;
}

namespace {
[[gnu::always_inline]] inline bool written_all(const Block& blk, size_t offset, size_t bytes) {
  for (size_t c = offset / 16; c <= (offset + bytes - 1) / 16 && c < blk.chunks.size(); ++c)
    if (!(blk.chunks[c] & Block::kWritten)) return false;
  return true;
}
}  // namespace

bool ever_written(size_t offset, size_t bytes) {
  return written_all(*t_block, offset, bytes);
}

bool stores_tracked() {
  return !t_block->stores.empty();
}

void async_via_mbarrier(const void* dst, const std::string* via) {
  Block& blk = *t_block;
  blk.pending[size_t(static_cast<const unsigned char*>(dst) - blk.smem) / 16].via = via;
}

void track_stores() {
  t_stores_decided = true;
  Block& blk = *t_block;
  if (blk.tracking || !blk.instrumented) return;
  blk.stores.assign((blk.smem_bytes + 3) / 4 + 1, 0);
  blk.tracking = true;
  // The inline read check covers the whole 16-byte chunks of a 16-byte aligned base (runtime.cpp
  // aligns it to 1 KiB); a tail shorter than a chunk goes to the full check.
  const auto lo = reinterpret_cast<uintptr_t>(blk.smem);
  t_shared_reads = {lo, lo % 16 == 0 ? blk.smem_bytes / 16 * 16 : 0, blk.chunks.data()};
}

namespace {
// What shared_access reports, out of its way (it runs on every shared access of an instrumented
// kernel, and a small frame keeps it quick).
[[gnu::noinline, gnu::cold]] std::string out_of_bounds(long long off, size_t bytes, bool write,
                                                       size_t smem_bytes) {
  return "out-of-bounds shared-memory " + std::string(write ? "write" : "read") + " of " +
         std::to_string(bytes) + " bytes at offset " + std::to_string(off) + " of the block's " +
         std::to_string(smem_bytes) + " bytes of dynamic shared memory";
}
[[gnu::noinline, gnu::cold]] std::string read_in_flight(size_t off, const Block::Pending& q) {
  return "read of shared memory (offset " + std::to_string(off) + ") while the " +
         (q.tma ? "TMA load (cp.async.bulk.tensor)" : "cp.async") + " that thread " +
         std::to_string(q.tid) + " issued into it at " + loc_of(q.file, q.line) +
         " has not landed" + landing_hint(q);
}
[[gnu::noinline, gnu::cold]] std::string read_unwritten(size_t off) {
  return "read of shared memory (offset " + std::to_string(off) +
         ") that nothing has written since the block started (it holds the start-up "
         "poison: a wrong buffer, stage or offset?)";
}
[[gnu::noinline, gnu::cold]] std::string read_unordered(size_t word, int writer, int lane) {
  return "read of shared memory (offset " + std::to_string(word * 4) + ") that lane " +
         std::to_string(writer % 32) +
         " of the same warp stored with no __syncwarp, "
         "barrier or fence since: its store need not be visible to lane " +
         std::to_string(lane) + " (a shuffle or vote does not order memory)";
}
}  // namespace

bool shared_access(uintptr_t a, size_t bytes, bool write, std::string& problem) {
  Block& blk = *t_block;
  const auto lo = reinterpret_cast<uintptr_t>(blk.storage_lo);
  const auto hi = reinterpret_cast<uintptr_t>(blk.storage_hi);
  if (a + bytes <= lo || a >= hi) return false;
  if (!t_stores_decided) track_stores();  // (an instrumented kernel called it on entry)
  if (shared_access_fine(a, bytes, write)) return true;  // the usual case, a store recorded
  // Not fine: out of bounds, a rule broken (say which), or stores not tracked (a plain kernel's
  // instrumented helper: only the bounds and copies in flight can be checked).
  const auto s = reinterpret_cast<uintptr_t>(blk.smem);
  if (a < s || a + bytes > s + blk.smem_bytes) {
    problem = out_of_bounds(static_cast<long long>(a) - static_cast<long long>(s), bytes, write,
                            blk.smem_bytes);
    return true;
  }
  const bool tracked = !blk.stores.empty();
  if (write) return true;
  const size_t off = a - s;
  for (size_t c = off / 16; c <= (off + bytes - 1) / 16; ++c)
    if (blk.chunks[c] & Block::kInFlight) {
      problem = read_in_flight(off, blk.pending[c]);
      return true;
    }
  if (!tracked) return true;
  if (!written_all(blk, off, bytes)) {
    problem = read_unwritten(off);
    return true;
  }
  const ThreadIds& me = *t_current;
  for (size_t w = off / 4; w <= (off + bytes - 1) / 4; ++w) {
    const uint64_t last = blk.stores[w];
    if (last == 0) continue;
    const int writer = static_cast<int>(last >> 32) - 1;
    if (writer == me.tid || writer / 32 != me.warp) continue;
    if (blk.threads[writer].ids.visible_epoch != static_cast<uint32_t>(last)) continue;
    problem = read_unordered(w, writer, me.lane);
    return true;
  }
  return true;
}

void async_issued(const void* dst, const simt::where_t& where) {
  Block& blk = *t_block;
  const size_t off = static_cast<const unsigned char*>(dst) - blk.smem;
  blk.pending[off / 16] = {where.file_name(), where.line(), t_current->tid, nullptr};
  blk.chunks[off / 16] |= Block::kInFlight;
}

namespace {
[[noreturn, gnu::noinline, gnu::cold]] void copy_over_copy(const Block::Pending& q, size_t off,
                                                           const simt::where_t& where) {
  fail("cp.async.bulk.tensor at " + loc(where) + " writes shared memory bytes " +
       std::to_string(off) + ".." + std::to_string(off + 15) + " while the " +
       (q.tma ? "TMA load" : "cp.async") + " that thread " + std::to_string(q.tid) +
       " issued into them at " + loc_of(q.file, q.line) +
       " has not landed: two copies in flight into one buffer land in either order (a buffer "
       "refilled before anyone waited for its last copy)");
}
}  // namespace

void tma_issued(const void* dst, const simt::where_t& where, const std::string* via) {
  Block& blk = *t_block;
  const size_t off = static_cast<const unsigned char*>(dst) - blk.smem;
  if (blk.chunks[off / 16] & Block::kInFlight) [[unlikely]]
    copy_over_copy(blk.pending[off / 16], off, where);
  blk.pending[off / 16] = {where.file_name(), where.line(), t_current->tid, via, true};
  blk.chunks[off / 16] |= Block::kInFlight;
}

void async_landed(const void* dst) {
  Block& blk = *t_block;
  const size_t off = static_cast<const unsigned char*>(dst) - blk.smem;
  blk.pending[off / 16].tid = -1;
  blk.chunks[off / 16] = Block::kWritten;  // landed, and no store in it left (below)
  if (!blk.stores.empty())
    for (size_t w = off / 4; w < off / 4 + 4 && w < blk.stores.size(); ++w) blk.stores[w] = 0;
}

namespace {
[[noreturn, gnu::noinline, gnu::cold]] void pending_read(const Block::Pending& q, size_t off,
                                                         size_t bytes, const char* what,
                                                         const simt::where_t& where) {
  fail(std::string(what) + " at " + loc(where) + " reads shared memory bytes " +
       std::to_string(off) + ".." + std::to_string(off + bytes - 1) + " while the " +
       (q.tma ? "TMA load (cp.async.bulk.tensor)" : "cp.async") + " that thread " +
       std::to_string(q.tid) + " issued into them at " + loc_of(q.file, q.line) +
       " has not landed" + landing_hint(q));
}
[[noreturn, gnu::noinline, gnu::cold]] void unordered_collective_read(size_t off, int writer,
                                                                      const char* what,
                                                                      const simt::where_t& where) {
  fail(std::string(what) + " at " + loc(where) + " reads shared memory bytes " +
       std::to_string(off) + ".." + std::to_string(off + 15) + ", which lane " +
       std::to_string(writer % 32) +
       " of the same warp stored with no __syncwarp, barrier or fence since: the instruction "
       "hands every row to all 32 lanes, and nothing makes that store visible to them");
}
[[noreturn, gnu::noinline, gnu::cold]] void unwritten_read(size_t off, const char* what,
                                                           const simt::where_t& where) {
  fail(std::string(what) + " at " + loc(where) + " reads shared memory bytes " +
       std::to_string(off) + ".." + std::to_string(off + 15) +
       ", which nothing has written since the block started (they hold the start-up poison: a "
       "wrong buffer, ring stage or offset?)");
}
}  // namespace

void check_not_pending(const void* p, size_t bytes, const char* what, const simt::where_t& where) {
  const Block& blk = *t_block;
  const size_t off = static_cast<const unsigned char*>(p) - blk.smem;
  for (size_t c = off / 16; c <= (off + bytes - 1) / 16; ++c)
    if (blk.chunks[c] & Block::kInFlight) [[unlikely]]
      pending_read(blk.pending[c], off, bytes, what, where);
}

namespace {
[[noreturn, gnu::noinline, gnu::cold]] void not_shared(size_t smem_bytes, const char* what,
                                                       const simt::where_t& where) {
  fail(std::string(what) + " at " + loc(where) + ": address is not inside the block's " +
       std::to_string(smem_bytes) + " bytes of shared memory");
}
[[noreturn, gnu::noinline, gnu::cold]] void misaligned_shared(size_t align, const char* what,
                                                              const simt::where_t& where) {
  fail(std::string(what) + " at " + loc(where) + ": shared address not " + std::to_string(align) +
       "-byte aligned");
}
}  // namespace

void check_shared_read16(const void* p, const char* what, const simt::where_t& where) {
  const auto* c = static_cast<const unsigned char*>(p);
  const Block& blk = *t_block;
  if (c < blk.smem || c + 16 > blk.smem + blk.smem_bytes) [[unlikely]]
    not_shared(blk.smem_bytes, what, where);
  if (reinterpret_cast<uintptr_t>(c) % 16 != 0) [[unlikely]]
    misaligned_shared(16, what, where);
  const size_t off = c - blk.smem;
  if (blk.chunks[off / 16] & Block::kInFlight) [[unlikely]]
    pending_read(blk.pending[off / 16], off, 16, what, where);
  // Only where every store is seen (the instrumented build) is an unwritten chunk known, and the
  // lane that stored each word. A warp collective (ldmatrix) gives each row to every lane: a
  // store by any lane of this warp, the supplying lane's own included, must be ordered before it.
  if (!blk.tracking) return;
  if (!(blk.chunks[off / 16] & Block::kWritten)) [[unlikely]]
    unwritten_read(off, what, where);
  if (!(blk.chunks[off / 16] & Block::kUnsettled)) return;  // no store a lane may not see yet
  for (size_t w = off / 4; w < off / 4 + 4; ++w) {
    const uint64_t last = blk.stores[w];
    if (last == 0) continue;
    const int writer = static_cast<int>(last >> 32) - 1;
    if (writer / 32 == t_current->warp &&
        blk.threads[writer].ids.visible_epoch == static_cast<uint32_t>(last)) [[unlikely]]
      unordered_collective_read(off, writer, what, where);
  }
}

void check_shared(const void* p, size_t bytes, size_t align, const char* what,
                  const simt::where_t& where) {
  const auto* c = static_cast<const unsigned char*>(p);
  const Block& blk = *t_block;
  if (c < blk.smem || c + bytes > blk.smem + blk.smem_bytes) [[unlikely]]
    not_shared(blk.smem_bytes, what, where);
  if (reinterpret_cast<uintptr_t>(c) % align != 0) [[unlikely]]
    misaligned_shared(align, what, where);
}

}  // namespace simt::detail
