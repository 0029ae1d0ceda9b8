// What this step is, for its main() and for the tests.
#include "common/harness.h"
#include "step4_tensorcore/configs.h"

namespace step4 {
namespace cpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace gpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace counted {
ATTN_COUNTED_DECL void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}

// The kernels are instantiated for these head dims only (attn::dispatch_head_dim); the tile
// configurations (configs.h) for all of them (the default) or 64 and 128.
attn::StepInfo info() {
  attn::StepInfo s{.name = "step4_tensorcore",
                   .cpu = &cpu::run,
                   .gpu = ATTN_GPU_RUN(gpu::run),
                   .counted = ATTN_COUNTED_RUN(counted::run),
                   .head_dims = {64, 80, 96, 128}};
  for_each_config([&]<typename Cfg>() {
    s.configs.push_back({Cfg::name, Cfg::kAllHeadDims ? s.head_dims : std::vector<int>{64, 128}});
  });
  s.tuned_table = ATTN_STEP4_TUNED_TABLE;
  return s;
}
}  // namespace step4
