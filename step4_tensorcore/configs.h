// step4's tile configurations: the kernel is a template over one of these, and the step picks one
// at run time (tuned_configs.csv, or --config NAME). Each is a complete instantiation of every
// dtype and dropout choice, so each adds to the build: keep the list short.
#pragma once

#include "common/tiles.h"

#include <stdexcept>
#include <string>

namespace step4 {

// Br query rows per block (16 per warp), Bc keys per K/V tile, kStages K/V tiles in flight.
template <int Br_, int Bc_, int kWarps_, int kStages_, bool kAllHeadDims_>
struct Config {
  static constexpr int kWarps = kWarps_;
  static constexpr int Br = Br_;
  static constexpr int Bc = Bc_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 32 * kWarps;
  // Only the default is built for head dims 80 and 96; the others for 64 and 128, the head dims
  // scripts/autotune.py tunes.
  static constexpr bool kAllHeadDims = kAllHeadDims_;
  static_assert(Br == 16 * kWarps, "every warp owns 16 query rows");
  static_assert(Bc % 16 == 0 && kStages >= 2, "P fragments span 16 keys; one tile in flight");
};

// The names are the CLI's and the table's (and the kernel report's: they are the types' names).
// The default: today's step 4 tile.
struct br64_bc64_w4_s2 : Config<64, 64, 4, 2, true> {
  static constexpr const char* name = "br64_bc64_w4_s2";
};
// Twice the rows per block with twice the warps: K/V tiles are loaded once for 128 query rows.
struct br128_bc64_w8_s2 : Config<128, 64, 8, 2, false> {
  static constexpr const char* name = "br128_bc64_w8_s2";
};
// Half-size K/V tiles, three in flight: more latency hidden, fewer registers for S and P.
struct br64_bc32_w4_s3 : Config<64, 32, 4, 3, false> {
  static constexpr const char* name = "br64_bc32_w4_s3";
};

using DefaultConfig = br64_bc64_w4_s2;

// Calls f.template operator()<Cfg>() for every configuration, the default first.
template <typename F>
void for_each_config(F&& f) {
  f.template operator()<br64_bc64_w4_s2>();
  f.template operator()<br128_bc64_w8_s2>();
  f.template operator()<br64_bc32_w4_s3>();
}

// Calls f.template operator()<Cfg>() for the configuration named `name` (empty: the default).
template <typename F>
void with_config(const std::string& name, F&& f) {
  bool found = false;
  for_each_config([&]<typename Cfg>() {
    if (!found && (name == Cfg::name || (name.empty() && Cfg::kAllHeadDims))) {
      found = true;
      f.template operator()<Cfg>();
    }
  });
  if (!found) throw std::invalid_argument("unknown tile configuration " + name);
}

// attn::dispatch_head_dim for the head dims Cfg is built for: the default configuration covers
// every head dim, the others only those they are tuned for, which keeps the build small.
template <typename Cfg, typename F>
void dispatch_head_dim(int dim, F&& f) {
  if constexpr (Cfg::kAllHeadDims)
    attn::dispatch_head_dim(dim, f);
  else if (dim == 64)
    f.template operator()<64>();
  else if (dim == 128)
    f.template operator()<128>();
  else
    throw std::invalid_argument(std::string(Cfg::name) + " is not built for head dim " +
                                std::to_string(dim));
}

}  // namespace step4
