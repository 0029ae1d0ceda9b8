// What this step is, for its main() and for the tests.
#include "common/harness.h"

namespace step1 {
namespace cpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace gpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace counted {
ATTN_COUNTED_DECL void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}

// Any head dim the reference supports: the kernels loop over D at run time.
attn::StepInfo info() {
  return {.name = "step1_naive",
          .cpu = &cpu::run,
          .gpu = ATTN_GPU_RUN(gpu::run),
          .counted = ATTN_COUNTED_RUN(counted::run)};
}
}  // namespace step1
