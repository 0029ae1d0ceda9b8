// A speed-of-light MODEL, not a measurement: for a named GPU, the least time each unit would need
// for the work a counted run did (common/simt/counters.h), from datasheet figures (sol_model.cpp
// cites each), in the spirit of Nsight Compute's "GPU Speed Of Light" section. The binding unit is
// the one that needs the most; a kernel cannot run faster than that on that GPU, and usually runs
// slower (latency, occupancy, issue). No figure here is fitted to a measurement.
#pragma once

#include <string>
#include <vector>

#include "common/problem.h"
#include "common/simt/counters.h"

namespace attn {

struct GpuSpec {
  std::string name;  // "H100 SXM"
  std::string arch;  // "sm_90"
  int sms;
  double clock_ghz;            // boost clock
  double tensor_tflops;        // dense fp16/bf16 in, fp32 accumulate
  double fp32_tflops;          // FFMA counted as 2 FLOPs
  double dram_gb_s;            // DRAM bandwidth
  double sfu_per_clk_sm;       // ex2.approx (MUFU) per clock per SM
  double shared_b_per_clk_sm;  // L1/shared bandwidth: 32 banks x 4 bytes, one wavefront a clock
  std::string source;          // where the figures come from
};

const std::vector<GpuSpec>& model_gpus();
// The named GPU (case-insensitive, spaces or dashes ignored: "h100", "rtx4090"), or nullptr.
const GpuSpec* find_gpu(const std::string& name);

struct UnitBound {
  std::string unit;  // "tensor", "fp32", "sfu", "l1" (the L1/shared data path), "dram"
  double us;         // the least time that unit needs, in microseconds (model)
  std::string what;  // the work it is for ("2.15 GFLOP of mma/wgmma")
};

struct SolModel {
  const GpuSpec* gpu = nullptr;
  std::vector<UnitBound> bounds;  // every unit, most time first
  double us = 0;                  // the binding unit's time: the modelled lower bound
  std::string binding;            // its unit
};

// The model for a counted run of problem p. What is not counted comes from the problem: FLOPs not
// done on tensor cores are done on the FP32 pipe (one FFMA per 2 FLOPs), and every visible score
// needs one exponential on the SFU.
SolModel speed_of_light(const GpuSpec& gpu, const Problem& p, const simt::counters::Report& r);

}  // namespace attn
