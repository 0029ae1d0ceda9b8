// The kernel steps under test. A new step adds its info() here and to STEP_LIBS in
// tests/CMakeLists.txt.
#pragma once

#include <vector>

#include "common/harness.h"

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

namespace attn_test {
inline std::vector<attn::StepInfo> kernel_steps() {
  return {step1::info(), step2::info(), step3::info(), step4::info(), step5::info()};
}
}  // namespace attn_test
