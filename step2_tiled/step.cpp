// What this step is, for its main() and for the tests.
#include "common/harness.h"

namespace step2 {
ATTN_KERNEL_ENTRIES
namespace rung1 {
ATTN_KERNEL_ENTRIES
}
namespace rung2 {
ATTN_KERNEL_ENTRIES
}

// The kernels are instantiated for these head dims only (attn::dispatch_head_dim).
attn::StepInfo info() {
  attn::StepInfo s{.name = "step2_tiled",
                   .cpu = &cpu::run,
                   .gpu = ATTN_GPU_RUN(gpu::run),
                   .counted = ATTN_COUNTED_RUN(counted::run),
                   .head_dims = {64, 80, 96, 128}};
  // The ladder (README.md, one section per rung): rungN_*.cu, then attention.cu.
  s.rungs = {
      ATTN_RUNG("tiles", "the scores and the output tiled through shared memory", rung1),
      ATTN_RUNG("warps", "the softmax with one warp per row, combined by shuffles", rung2),
      {"vectors", "16-byte loads of the tiles and of P", &cpu::run, ATTN_GPU_RUN(gpu::run),
       ATTN_COUNTED_RUN(counted::run)},
  };
  return s;
}
}  // namespace step2
