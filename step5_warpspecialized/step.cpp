// What this step is, for its main() and for the tests.
#include "common/harness.h"

namespace step5 {
namespace cpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace gpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}

// The kernels are instantiated for these head dims only (attn::dispatch_head_dim). One variant so
// far: the sm_80 producer/consumer kernel, which runs on every GPU from sm_80 on.
attn::StepInfo info() {
  return {.name = "step5_warpspecialized",
          .cpu = &cpu::run,
          .gpu = ATTN_GPU_RUN(gpu::run),
          .head_dims = {64, 80, 96, 128},
          .variants = {"sm80"}};
}
}  // namespace step5
