// The steps of the course, for the code that calls every one of them (the tests, the Python
// binding, step 0's executable): step 0's StepInfo, and each kernel step's (its step.cpp). A new
// step adds its info() here.
#pragma once

#include <vector>

#include "common/harness.h"

namespace step0 {
void streaming_attention(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step1 {
attn::StepInfo info();
}
namespace step2 {
attn::StepInfo info();
}
namespace step3 {
attn::StepInfo info();
}
namespace step4 {
attn::StepInfo info();
}
namespace step5 {
attn::StepInfo info();
}
namespace step6 {
attn::StepInfo info();
}

namespace attn {

// Step 0 is plain C++ on the CPU: no kernels, no GPU entry.
inline StepInfo step0_info() {
  return {.name = "step0_reference", .cpu = &step0::streaming_attention};
}

inline std::vector<StepInfo> kernel_steps() {
  return {step1::info(), step2::info(), step3::info(), step4::info(), step5::info()};
}

// The backward steps (StepInfo::backward): step 6, checked against the FP64 gradients.
inline std::vector<StepInfo> backward_steps() {
  return {step6::info()};
}

}  // namespace attn
