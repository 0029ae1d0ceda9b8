// Warp shuffles, votes and __syncwarp on top of the core's warp collective rendezvous.
#include <cstring>
#include <string>

#include "common/simt/simt.h"

namespace simt {

ShflSource shfl_source(ShflMode mode, int lane, uint32_t b, uint32_t c) {
  const int bval = static_cast<int>(b & 0x1f);
  const int cval = static_cast<int>(c & 0x1f);
  const int segmask = static_cast<int>((c >> 8) & 0x1f);
  const int max_lane = (lane & segmask) | (cval & ~segmask);
  const int min_lane = lane & segmask;
  int j = lane;
  bool valid = false;
  switch (mode) {
    case ShflMode::up:
      j = lane - bval;
      valid = j >= max_lane;
      break;
    case ShflMode::down:
      j = lane + bval;
      valid = j <= max_lane;
      break;
    case ShflMode::bfly:
      j = lane ^ bval;
      valid = j <= max_lane;
      break;
    case ShflMode::idx:
      j = min_lane | (bval & ~segmask);
      valid = j <= max_lane;
      break;
  }
  return {valid ? j : lane, valid};
}

namespace {

struct ShflIn {
  uint64_t value;
  uint32_t mode;
  uint32_t b;
  uint32_t c;
};

void shuffle_compute(const detail::CollectiveView& v) {
  for (int lane = 0; lane < 32; ++lane) {
    if (!(v.arrived >> lane & 1u)) continue;
    ShflIn in;
    std::memcpy(&in, v.lanes[lane].in, sizeof in);
    const ShflSource src = shfl_source(static_cast<ShflMode>(in.mode), lane, in.b, in.c);
    if (!(v.arrived >> src.lane & 1u))
      fail("warp shuffle: lane " + std::to_string(lane) + " of warp " + std::to_string(v.warp) +
           " reads lane " + std::to_string(src.lane) +
           ((v.mask >> src.lane & 1u) ? ", which has exited" : ", which is not in the mask") +
           " (undefined on hardware)");
    std::memcpy(v.lanes[lane].out, v.lanes[src.lane].in, sizeof(uint64_t));
  }
}

template <int Op>  // 0 ballot, 1 any, 2 all
void vote_compute(const detail::CollectiveView& v) {
  uint32_t ballot = 0;
  for (int lane = 0; lane < 32; ++lane)
    if ((v.arrived >> lane & 1u) && v.lanes[lane].in[0]) ballot |= 1u << lane;
  uint32_t result = ballot;
  if (Op == 1) result = ballot != 0;
  if (Op == 2) result = ballot == v.arrived;
  for (int lane = 0; lane < 32; ++lane)
    if (v.arrived >> lane & 1u) std::memcpy(v.lanes[lane].out, &result, sizeof result);
}

// __syncwarp: the lanes' earlier shared-memory stores become visible to each other.
void syncwarp_compute(const detail::CollectiveView& v) {
  detail::mark_visible(v.warp, v.arrived);
}

}  // namespace

uint64_t shuffle(const char* kind, ShflMode mode, uint32_t mask, uint64_t value, uint32_t b,
                 int width, const where_t& where) {
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fail(std::string(kind) + ": width " + std::to_string(width) +
         " is not a power of two in [1, 32]");
  const ShflIn in{value, static_cast<uint32_t>(mode), b, shfl_c(mode, width)};
  uint64_t out;
  detail::warp_collective(mask, kind, &in, &out, shuffle_compute, where);
  return out;
}

uint32_t vote(const char* kind, uint32_t mask, bool pred, const where_t& where) {
  const unsigned char in = pred ? 1 : 0;
  uint32_t out;
  const detail::CollectiveFn fn = kind == kBallot ? vote_compute<0>
                                  : kind == kAny  ? vote_compute<1>
                                                  : vote_compute<2>;
  detail::warp_collective(mask, kind, &in, &out, fn, where);
  return out;
}

}  // namespace simt

void __syncwarp(unsigned mask, const simt::where_t& where) {
  if (simt::testing::barrier_skipped(where)) return;  // fault injection (tests only)
  simt::detail::warp_collective(mask, simt::kSyncwarp, nullptr, nullptr, simt::syncwarp_compute,
                                where);
}
