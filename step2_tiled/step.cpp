// What this step is, for its main() and for the tests.
#include "common/harness.h"

namespace step2 {
namespace cpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace gpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace counted {
ATTN_COUNTED_DECL void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}

// The kernels are instantiated for these head dims only (attn::dispatch_head_dim).
attn::StepInfo info() {
  return {.name = "step2_tiled",
          .cpu = &cpu::run,
          .gpu = ATTN_GPU_RUN(gpu::run),
          .counted = ATTN_COUNTED_RUN(counted::run),
          .head_dims = {64, 80, 96, 128}};
}
}  // namespace step2
