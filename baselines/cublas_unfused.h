// The cuBLAS unfused baseline (cublas_unfused.cu): a step's entry point and its StepInfo, for its
// own executable and for attn_suite. GPU only: there is no CPU version of cuBLAS.
#pragma once

#include "common/harness.h"

namespace baseline_cublas {

void run(const attn::AttentionParams& p, attn::RunContext& ctx);

inline attn::StepInfo info() {
  return {.name = "baseline_cublas", .cpu = nullptr, .gpu = &run};
}

}  // namespace baseline_cublas
