// What this step is, for its main() and for the tests.
#include "common/harness.h"
#include "step4_tensorcore/configs.h"

// Each kernel file's entry points: its CPU copy, its GPU copy, its counted copy.
#define STEP4_KERNEL_ENTRIES                                                         \
  namespace cpu {                                                                    \
  void run(const attn::AttentionParams& p, attn::RunContext& ctx);                   \
  }                                                                                  \
  namespace gpu {                                                                    \
  void run(const attn::AttentionParams& p, attn::RunContext& ctx);                   \
  }                                                                                  \
  namespace counted {                                                                \
  ATTN_COUNTED_DECL void run(const attn::AttentionParams& p, attn::RunContext& ctx); \
  }

namespace step4 {
STEP4_KERNEL_ENTRIES
namespace rung1 {
STEP4_KERNEL_ENTRIES
}
namespace rung2 {
STEP4_KERNEL_ENTRIES
}
namespace rung3 {
STEP4_KERNEL_ENTRIES
}
namespace rung4 {
STEP4_KERNEL_ENTRIES
}
namespace rung5 {
STEP4_KERNEL_ENTRIES
}
namespace rung6 {
STEP4_KERNEL_ENTRIES
}
namespace rung7 {
STEP4_KERNEL_ENTRIES
}
namespace rung8 {
STEP4_KERNEL_ENTRIES
}
namespace rung9 {
STEP4_KERNEL_ENTRIES
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
  // The ladder (README.md, one section per rung): rungN_*.cu, then attention.cu.
  s.rungs = {
      {"mma", "step 3's loop on tensor cores: mma.sync, ldmatrix, P through shared memory",
       &rung1::cpu::run, ATTN_GPU_RUN(rung1::gpu::run), ATTN_COUNTED_RUN(rung1::counted::run)},
      {"registers", "P stays in registers: the S accumulators are P's A fragments",
       &rung2::cpu::run, ATTN_GPU_RUN(rung2::gpu::run), ATTN_COUNTED_RUN(rung2::counted::run)},
      {"swizzle", "XOR-swizzled shared tiles instead of padded ones", &rung3::cpu::run,
       ATTN_GPU_RUN(rung3::gpu::run), ATTN_COUNTED_RUN(rung3::counted::run)},
      {"pipeline", "K/V tiles through a multi-stage cp.async pipeline", &rung4::cpu::run,
       ATTN_GPU_RUN(rung4::gpu::run), ATTN_COUNTED_RUN(rung4::counted::run)},
      {"exp2", "the softmax in base 2 with the scale folded in; the row sum reduced once",
       &rung5::cpu::run, ATTN_GPU_RUN(rung5::gpu::run), ATTN_COUNTED_RUN(rung5::counted::run)},
      {"unmasked", "tiles every row sees in full skip the mask", &rung6::cpu::run,
       ATTN_GPU_RUN(rung6::gpu::run), ATTN_COUNTED_RUN(rung6::counted::run)},
      {"immediates", "every shared address in the loop a base plus an immediate", &rung7::cpu::run,
       ATTN_GPU_RUN(rung7::gpu::run), ATTN_COUNTED_RUN(rung7::counted::run)},
      {"copies", "copy offsets computed once; full tiles copied without bounds checks",
       &rung8::cpu::run, ATTN_GPU_RUN(rung8::gpu::run), ATTN_COUNTED_RUN(rung8::counted::run)},
      {"keepbits", "dropout's keep bits drawn before S, away from S and P's registers",
       &rung9::cpu::run, ATTN_GPU_RUN(rung9::gpu::run), ATTN_COUNTED_RUN(rung9::counted::run)},
      {"configs", "tile configurations chosen per GPU and problem (configs.h)", &cpu::run,
       ATTN_GPU_RUN(gpu::run), ATTN_COUNTED_RUN(counted::run)},
  };
  return s;
}
}  // namespace step4
