#include "common/sol_model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace attn {

namespace {

// The figures, each from NVIDIA's own documents:
// - SMs, FP32 TFLOPS, dense FP16 tensor TFLOPS with FP32 accumulate, DRAM bandwidth: the
//   product's datasheet (H100: "NVIDIA H100 Tensor Core GPU" datasheet, SXM5 column, 1,979 TFLOPS
//   FP16 with sparsity = 989.5 dense; A100: "NVIDIA A100 Tensor Core GPU" datasheet, 80GB SXM; L4:
//   "NVIDIA L4 Tensor Core GPU" datasheet, 242 TFLOPS FP16 with sparsity = 121 dense; RTX 4090:
//   "NVIDIA Ada GPU Architecture" whitepaper, appendix A, 165.2 TFLOPS FP16 with FP32 accumulate;
//   RTX 5070: the product page, 48 SMs, 30.9 TFLOPS FP32, 672 GB/s; its tensor rate is not on a
//   datasheet and is derived: 48 SMs x 2.51 GHz x 512 FLOP per clock per SM, the rate of GeForce
//   Ada with FP32 accumulate (165.2 TFLOPS / 128 SMs / 2.52 GHz), marked "derived" below);
// - the boost clock: FP32 TFLOPS / (SMs x FP32 lanes per SM x 2), with 64 lanes per SM on sm_80
//   and 128 on the others (CUDA C++ Programming Guide, "Arithmetic Instructions", throughput of
//   32-bit floating-point add, multiply, multiply-add per clock per SM);
// - the SFU: 16 ex2 per clock per SM (the same table: base-2 exponential);
// - the L1/shared-memory data path: 32 banks of 32 bits per clock (CUDA C++ Programming Guide,
//   "Shared Memory"): 128 bytes, one wavefront, per clock per SM, the L1 bandwidth the A100 and
//   H100 architecture whitepapers give (128 bytes per clock per SM). Global sectors pass through
//   it too (L1TEX), four 32-byte sectors a clock.
// RTX 5070 (derived, see above): 48 SMs x its clock (FP32 TFLOPS / (48 x 128 x 2)) x 512.
constexpr double kRtx5070Tensor = 48 * (30.9e3 / (48 * 128 * 2.0)) * 512 / 1e3;

struct Row {
  const char* name;
  const char* arch;
  int sms;
  double fp32_tflops;
  int fp32_lanes;
  double tensor_tflops;
  double dram_gb_s;
  const char* source;
};
constexpr Row kRows[] = {
    {"H100 SXM", "sm_90", 132, 67.0, 128, 989.5, 3350, "H100 datasheet (SXM5)"},
    {"A100 SXM 80GB", "sm_80", 108, 19.5, 64, 312.0, 2039, "A100 datasheet (80GB SXM)"},
    {"L4", "sm_89", 58, 30.3, 128, 121.0, 300, "L4 datasheet"},
    {"RTX 4090", "sm_89", 128, 82.6, 128, 165.2, 1008, "Ada architecture whitepaper, appendix A"},
    {"RTX 5070", "sm_120", 48, 30.9, 128, kRtx5070Tensor, 672,
     "RTX 5070 product page; tensor rate derived from GeForce Ada's per-SM rate"},
};

std::string squash(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string fmt(double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g %s", v, unit);
  return buf;
}

}  // namespace

const std::vector<GpuSpec>& model_gpus() {
  static const std::vector<GpuSpec> gpus = [] {
    std::vector<GpuSpec> out;
    for (const Row& r : kRows) {
      const double clock = r.fp32_tflops * 1e3 / (r.sms * r.fp32_lanes * 2.0);  // GHz
      out.push_back({r.name, r.arch, r.sms, clock, r.tensor_tflops, r.fp32_tflops, r.dram_gb_s, 16,
                     128, r.source});
    }
    return out;
  }();
  return gpus;
}

const GpuSpec* find_gpu(const std::string& name) {
  const std::string want = squash(name);
  for (const GpuSpec& g : model_gpus())
    if (squash(g.name) == want || squash(g.name).rfind(want, 0) == 0) return &g;
  return nullptr;
}

SolModel speed_of_light(const GpuSpec& gpu, const Problem& p, const simt::counters::Report& r) {
  const simt::counters::Counts& c = r.total;
  const double clocks_per_us = gpu.clock_ghz * 1e3 * gpu.sms;  // SM-clocks per microsecond
  uint64_t distinct = 0;
  for (const auto& b : r.buffers) distinct += b.distinct;
  const double cuda_core_flops = std::max(0.0, p.flops() - c.tensor_flops);
  const double exps = double(p.visible_pairs());
  // The L1/shared data path: shared wavefronts, wgmma's and TMA's shared bytes, and global
  // sectors, in 128-byte units (one a clock per SM).
  const double wavefronts =
      double(c.lds_wavefronts + c.sts_wavefronts + c.ldsm_wavefronts + c.ldgsts_wavefronts) +
      double(c.wgmma_smem_bytes + c.tma_bytes + 32 * c.global_sectors()) / gpu.shared_b_per_clk_sm;
  SolModel m;
  m.gpu = &gpu;
  m.bounds = {
      {"tensor", c.tensor_flops / (gpu.tensor_tflops * 1e6), fmt(c.tensor_flops / 1e9, "GFLOP")},
      {"fp32", cuda_core_flops / (gpu.fp32_tflops * 1e6), fmt(cuda_core_flops / 1e9, "GFLOP")},
      {"sfu", exps / (gpu.sfu_per_clk_sm * clocks_per_us), fmt(exps / 1e6, "M exp")},
      {"l1", wavefronts / clocks_per_us, fmt(wavefronts / 1e6, "M wavefronts")},
      {"dram", double(distinct) / (gpu.dram_gb_s * 1e3), fmt(double(distinct) / 1e6, "MB")},
  };
  std::sort(m.bounds.begin(), m.bounds.end(),
            [](const UnitBound& a, const UnitBound& b) { return a.us > b.us; });
  m.us = m.bounds.front().us;
  m.binding = m.bounds.front().unit;
  return m;
}

}  // namespace attn
