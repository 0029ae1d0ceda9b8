// The kernel steps under test. A new step adds its info() here and to STEP_LIBS in
// tests/CMakeLists.txt.
#pragma once

#include <stdexcept>
#include <string>
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

// The step as one rung of its ladder (StepInfo::rungs), for tests that call the kernel entry
// directly; "" or the last rung: the step itself.
inline attn::StepInfo as_rung(attn::StepInfo step, const std::string& rung) {
  if (rung.empty() || (!step.rungs.empty() && step.rungs.back().name == rung)) return step;
  for (const auto& r : step.rungs)
    if (r.name == rung) {
      step.name += "[" + rung + "]";
      step.cpu = r.cpu;
      step.gpu = r.gpu;
      step.counted = r.counted;
      step.configs = {};
      return step;
    }
  throw std::runtime_error(step.name + " has no rung " + rung);
}
}  // namespace attn_test
