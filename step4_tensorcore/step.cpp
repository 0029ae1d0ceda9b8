// What this step is, for its main() and for the tests.
#include "common/harness.h"
#include "step4_tensorcore/configs.h"

namespace step4 {
ATTN_KERNEL_ENTRIES
namespace rung1 {
ATTN_KERNEL_ENTRIES
}
namespace rung2 {
ATTN_KERNEL_ENTRIES
}
namespace rung3 {
ATTN_KERNEL_ENTRIES
}
namespace rung4 {
ATTN_KERNEL_ENTRIES
}
namespace rung5 {
ATTN_KERNEL_ENTRIES
}
namespace rung6 {
ATTN_KERNEL_ENTRIES
}
namespace rung7 {
ATTN_KERNEL_ENTRIES
}
namespace rung8 {
ATTN_KERNEL_ENTRIES
}
namespace rung9 {
ATTN_KERNEL_ENTRIES
}
namespace rung10 {
ATTN_KERNEL_ENTRIES
}

// The kernels are instantiated for these head dims only (attn::dispatch_head_dim); the tile
// configurations (configs.h) for all of them (the default) or 64 and 128.
attn::StepInfo info() {
  attn::StepInfo s{.name = "step4_tensorcore",
                   .cpu = &cpu::run,
                   .gpu = ATTN_GPU_RUN(gpu::run),
                   .counted = ATTN_COUNTED_RUN(counted::run),
                   .head_dims = {64, 80, 96, 128},
                   .min_arch = "sm_80",
                   .min_arch_why = "mma.sync m16n8k16 (bf16) and cp.async"};
  for_each_config([&]<typename Cfg>() {
    s.configs.push_back({Cfg::name, Cfg::kAllHeadDims ? s.head_dims : std::vector<int>{64, 128}});
  });
  s.tuned_table = ATTN_STEP4_TUNED_TABLE;
  // The ladder (README.md, one section per rung): rungN_*.cu, then attention.cu.
  s.rungs = {
      ATTN_RUNG("mma", "step 3's loop with S = Q K^T on tensor cores: mma.sync and ldmatrix",
                rung1),
      ATTN_RUNG("pv", "O += P V on tensor cores too: P through a 16-bit shared tile", rung2),
      ATTN_RUNG("registers", "P stays in registers: the S accumulators are P's A fragments", rung3),
      ATTN_RUNG("swizzle", "XOR-swizzled shared tiles instead of padded ones", rung4),
      ATTN_RUNG("pipeline", "K/V tiles through a multi-stage cp.async pipeline", rung5),
      ATTN_RUNG("exp2", "the softmax in base 2 with the scale folded in; the row sum reduced once",
                rung6),
      ATTN_RUNG("unmasked", "tiles every row sees in full skip the mask", rung7),
      ATTN_RUNG("immediates", "every shared address in the loop a base plus an immediate", rung8),
      ATTN_RUNG("copies", "copy offsets computed once; full tiles copied without bounds checks",
                rung9),
      ATTN_RUNG("keepbits", "dropout's keep bits drawn before S, away from S and P's registers",
                rung10),
      {"configs", "tile configurations chosen per GPU and problem (configs.h)", &cpu::run,
       ATTN_GPU_RUN(gpu::run), ATTN_COUNTED_RUN(counted::run)},
  };
  return s;
}
}  // namespace step4
