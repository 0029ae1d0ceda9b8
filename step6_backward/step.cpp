// What this step is, for its main() and for the tests.
#include "common/harness.h"

namespace step6 {
ATTN_KERNEL_ENTRIES

// Any head dim the reference supports: the kernels loop over D at run time.
attn::StepInfo info() {
  return {.name = "step6_backward",
          .cpu = &cpu::run,
          .gpu = ATTN_GPU_RUN(gpu::run),
          .counted = ATTN_COUNTED_RUN(counted::run),
          .backward = true};
}
}  // namespace step6
