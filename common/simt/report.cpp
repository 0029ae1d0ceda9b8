// What the CPU backend's errors say: source locations, block and thread names, and the deadlock
// report (block.h).
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "common/simt/block.h"

namespace simt::detail {

std::string loc_of(const char* name, unsigned line) {
  std::string file = name;
  if (auto slash = file.rfind('/'); slash != std::string::npos && slash > 0) {
    // Keep "dir/file.cu" so that the step is visible.
    auto prev = file.rfind('/', slash - 1);
    file = file.substr(prev == std::string::npos ? 0 : prev + 1);
  }
  return file + ":" + std::to_string(line);
}

std::string loc(const simt::where_t& w) {
  return loc_of(w.file_name(), w.line());
}

std::string block_name(const uint3& b) {
  return "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) +
         ")";
}

std::string thread_name(const ThreadIds& t) {
  return block_name(t.block_idx) + " thread (" + std::to_string(t.thread_idx.x) + "," +
         std::to_string(t.thread_idx.y) + "," + std::to_string(t.thread_idx.z) + ")";
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string landing_hint(const Block::Pending& q) {
  if (q.tma)
    return " (it lands when " + *q.via +
           " completes the phase its bytes were announced for: a missing wait on that mbarrier, "
           "or a wait on the wrong parity)";
  if (q.via)
    return " (it lands when " + *q.via +
           " completes the phase its issuer's cp.async.mbarrier.arrive.noinc arrived on: a "
           "missing wait on that mbarrier, a wait on the wrong parity, or an arrival count that "
           "lets the phase complete before this copy's arrival)";
  return " (a copy lands at its issuer's cp.async.wait_group, and other threads need a barrier "
         "after that)";
}

std::string ranges(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(ids[i]) +
         (j > i ? "-" + std::to_string(ids[j]) : std::string());
    i = j + 1;
  }
  return s;
}

namespace {

std::string describe_wait(const Block& blk, const Thread& t) {
  if (t.done) return "exited";
  if (blk.ready[t.tid]) return "runnable";
  switch (t.wait) {
    case Wait::barrier: {
      const Barrier& b = blk.barriers[t.barrier_id];
      return std::string("wait at ") + t.what + " (" + loc(t.where) + "), barrier " +
             std::to_string(t.barrier_id) + ": " + std::to_string(b.arrived) + " of " +
             std::to_string(b.count) + " threads arrived";
    }
    case Wait::collective: {
      std::vector<int> missing;
      const int warp = t.ids.warp;
      const Block::CollectiveWait& c = blk.coll[t.tid];
      for (int lane = 0; lane < 32; ++lane) {
        if (!(c.mask >> lane & 1u)) continue;
        const int tid = warp * 32 + lane;
        if (tid >= blk.nthreads) continue;
        const Thread& x = blk.threads[tid];
        if (x.done || blk.ready[tid] || x.wait != Wait::collective ||
            blk.coll[tid].mask != c.mask || blk.coll[tid].kind != c.kind)
          missing.push_back(lane);
      }
      return std::string("wait in ") + c.kind + "(mask " + hex(c.mask) + ") at " + loc(t.where) +
             "; lanes not there: " + (missing.empty() ? "none" : ranges(missing));
    }
    case Wait::predicate: return std::string("wait for ") + t.what + " at " + loc(t.where);
    case Wait::none: break;
  }
  return "runnable";
}

}  // namespace

std::string deadlock_report(const Block& blk) {
  std::ostringstream os;
  os << "deadlock in " << block_name(blk.idx) << ": no thread can make progress";
  std::string prev;
  std::vector<int> group;
  auto flush = [&] {
    if (!group.empty()) os << "\n  threads " << ranges(group) << ": " << prev;
    group.clear();
  };
  for (int tid = 0; tid < blk.nthreads; ++tid) {
    const std::string d = describe_wait(blk, blk.threads[tid]);
    if (d != prev) flush();
    prev = d;
    group.push_back(tid);
  }
  flush();
  if (blk.ext) os << blk.ext->describe();
  return os.str();
}

std::string short_location(const char* file, unsigned line) {
  return loc_of(file, line);
}

}  // namespace simt::detail
