// What Nsight Compute would count, counted exactly on the CPU backend for the accesses a run made:
// global memory requests and 32-byte sectors, shared-memory wavefronts and bank conflicts, tensor
// instructions and FLOPs, synchronisation, per source line. docs/profiling.md maps each counter
// to its ncu metric.
//
// Plain loads and stores are seen only in a kernel's instrumented copy (cmake/AttnStep.cmake:
// every access calls the backend, common/simt/checks.cpp); the PTX emulations (cp.async,
// ldmatrix, mma, TMA, wgmma, mbarrier, shuffles and votes, barriers) count themselves. A counted
// run therefore runs a step's instrumented copy (`--counters`).
//
// Lanes are grouped as hardware issues them: the accesses of a warp's lanes form one warp-level
// instruction when they come from the same source access (the same code address, or for the PTX
// emulations the same kernel line) for the same time since the warp last synchronised as a whole
// (a warp collective of all its lanes, or a block or named barrier). A lane that skips an access
// (a branch) is simply absent from it, as an inactive lane is on a GPU.
//
// The rules, from NVIDIA's documents (the tests in tests/test_counters.cpp cite each):
// - global: a request per warp-level instruction; its sectors are the distinct aligned 32-byte
//   chunks its active lanes touch (Nsight Compute Kernel Profiling Guide, "Metrics Decoder":
//   request, sector);
// - shared: 32 banks of 4-byte words (CUDA C++ Programming Guide, "Compute Capability 5.x: Shared
//   Memory", kept by 8.x and 9.x); lanes reading or writing the same word do not conflict
//   (broadcast); a wavefront serves at most 128 bytes, so 8-byte accesses are served per half
//   warp and 16-byte accesses per quarter warp; a group of lanes needs as many wavefronts as the
//   most distinct words any one bank holds for it; bank conflicts are the wavefronts beyond one
//   per group with an active lane (Profiling Guide: wavefront);
// - ldmatrix: each 8x8 matrix is one group of eight 16-byte rows; cp.async's shared writes are
//   16-byte writes (quarter warps);
// - TMA and wgmma: their global sectors and the bytes they move are counted; their shared-memory
//   side goes through the async proxy, not the LSU, and is not modelled as wavefronts.
// Accesses are counted at the width the source gives them (the counted copy is compiled so that
// a 16-byte vector load stays one 16-byte access): nvcc may merge neighbouring narrower accesses
// into wider ones, which ncu then counts as fewer requests over the same sectors.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/simt/where.h"

namespace simt::detail {
struct LaneSlot;
}

namespace simt::counters {

struct Counts {
  // Global memory through the LSU: warp-level instructions (requests), 32-byte sectors, and the
  // bytes the active threads asked for; loads and stores.
  uint64_t gld_requests = 0, gld_sectors = 0, gld_bytes = 0;
  uint64_t gst_requests = 0, gst_sectors = 0, gst_bytes = 0;
  // cp.async (LDGSTS): the global side as above, and its shared-memory writes.
  uint64_t ldgsts_requests = 0, ldgsts_sectors = 0, ldgsts_bytes = 0;
  uint64_t ldgsts_wavefronts = 0, ldgsts_ideal = 0;
  // TMA tile loads (UTMALDG): copies, the sectors of the box's elements inside the tensor, bytes
  // written to shared memory.
  uint64_t tma_copies = 0, tma_sectors = 0, tma_bytes = 0;
  // Shared memory through the LSU: loads, stores, ldmatrix (LDSM): warp-level instructions,
  // wavefronts, and the fewest wavefronts their sizes allow (conflicts are the difference).
  uint64_t lds_inst = 0, lds_wavefronts = 0, lds_ideal = 0;
  uint64_t sts_inst = 0, sts_wavefronts = 0, sts_ideal = 0;
  uint64_t ldsm_inst = 0, ldsm_wavefronts = 0, ldsm_ideal = 0;
  // Tensor cores: mma.sync (warp-level) and wgmma (warpgroup-level) instructions, their FLOPs
  // (2 m n k each), and the shared-memory bytes the wgmmas read as operands.
  uint64_t mma = 0, wgmma = 0, wgmma_smem_bytes = 0;
  double tensor_flops = 0;
  // Synchronisation, warp-level: block barriers (__syncthreads), named barriers (bar.sync and
  // bar.arrive with a count), mbarrier operations, shuffles, votes (and __syncwarp).
  uint64_t block_barriers = 0, named_barriers = 0, mbarrier_ops = 0, shuffles = 0, votes = 0;

  uint64_t lds_conflicts() const { return lds_wavefronts - lds_ideal; }
  uint64_t sts_conflicts() const { return sts_wavefronts - sts_ideal; }
  uint64_t ldsm_conflicts() const { return ldsm_wavefronts - ldsm_ideal; }
  uint64_t ldgsts_conflicts() const { return ldgsts_wavefronts - ldgsts_ideal; }
  uint64_t shared_conflicts() const {
    return lds_conflicts() + sts_conflicts() + ldsm_conflicts() + ldgsts_conflicts();
  }
  uint64_t global_sectors() const {
    return gld_sectors + gst_sectors + ldgsts_sectors + tma_sectors;
  }
  void add(const Counts& o);
};

// One source line (a kernel line, "file:line", with ", inlined into ..." for a helper's).
struct Line {
  std::string where;
  Counts counts;
};

// One device buffer: its size, the distinct bytes the counted launches touched (a lower bound of
// its DRAM traffic), and the bytes the sectors of its accesses moved (32 per sector, every path).
struct Buffer {
  std::string label;
  uint64_t bytes = 0, distinct = 0, moved = 0;
};

struct Report {
  Counts total;
  std::vector<Line> lines;      // most sectors first
  std::vector<Buffer> buffers;  // in allocation order
  uint64_t launches = 0;
};

// Counting is on for the launches made between start() and stop(); start() forgets what was
// counted before. Not re-entrant: one counted run at a time per process.
void start();
Report stop();
// True between start() and stop() (one relaxed load: the emulations ask on every operation).
extern std::atomic<bool> g_active;
inline bool active() {
  return g_active.load(std::memory_order_relaxed);
}

// ---- What the backend tells the counters (only while active) ----------------------------------
namespace hook {

enum class Kind : uint8_t {
  global_load,
  global_store,
  shared_load,
  shared_store,
  cp_async,  // addr: the global source, addr2: the shared destination
  ldmatrix,  // addr: the row's shared address (bytes: 16, or 0 for a lane that gives none)
  mbarrier,  // no address
};

// A code address (an instrumented access) or a kernel line (an emulation), as a site key.
uint64_t site_of(const where_t& where);

// One lane's part of a warp-level operation; grouped with the other lanes' (see above).
// Shared addresses are offsets in the block's shared memory.
void lane(Kind kind, uint64_t site, uintptr_t addr, uint32_t bytes, uintptr_t addr2 = 0);

// Operations counted once per warp (or warpgroup) instance, by the thread that completes them: a
// warp collective (`kind` as the emulation names it: mma, shuffles, votes, __syncwarp; a
// collective of every live lane is a point where the warp synchronises as a whole), a wgmma.
// `lanes`: the waiting lanes' inputs (ldmatrix counts its rows' addresses from them).
void collective(const char* kind, const where_t& where, int warp, uint32_t arrived, bool whole_warp,
                const detail::LaneSlot* lanes);
void wgmma(const where_t& where, int n, bool a_from_shared);
// A TMA tile load: the global addresses of its 16-byte (or element) pieces inside the tensor.
void tma(const where_t& where, const std::vector<uintptr_t>& global_addrs, uint32_t piece,
         uint64_t bytes);
void barrier(const where_t& where, bool block_barrier, int warps);

// A counted launch, a block's lifetime, and the points where a warp synchronises as a whole.
void launch();
// `live_lanes`: per warp, the lanes that exist and have not exited (a bit each), as the block's
// threads exit.
void block_begin(int nthreads, const uint32_t* live_lanes);
void block_end();
void warp_synced(int warp);

}  // namespace hook
}  // namespace simt::counters
