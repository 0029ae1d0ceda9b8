// The kernel steps under test (common/steps.h). A new step adds its info() there and to STEP_LIBS
// in tests/CMakeLists.txt.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "common/steps.h"

namespace attn_test {
using attn::kernel_steps;

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
