// What this step is, for its main() and for the tests.
#include "common/harness.h"

namespace step6 {
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

// The tensor-core kernel is instantiated for these head dims only (attn::dispatch_head_dim); the
// rungs before it loop over D at run time, and are held to the same list.
attn::StepInfo info() {
  attn::StepInfo s{.name = "step6_backward",
                   .cpu = &cpu::run,
                   .gpu = ATTN_GPU_RUN(gpu::run),
                   .counted = ATTN_COUNTED_RUN(counted::run),
                   .head_dims = {64, 80, 96, 128},
                   .min_arch = "sm_80",
                   .min_arch_why = "mma.sync m16n8k16 (bf16)",
                   .backward = true};
  // The ladder (README.md, one section per rung): rungN_*.cu, then attention.cu.
  s.rungs = {
      ATTN_RUNG("math", "the backward's formulas as four kernels, P and dS in global memory",
                rung1),
      ATTN_RUNG("atomics", "dQ accumulated in FP32 with atomicAdd by the threads that compute dS",
                rung2),
      ATTN_RUNG("tiles", "the pairs in tiles: a block reads its rows of Q, dO, K and V once",
                rung3),
      ATTN_RUNG("fused",
                "a block owns a tile of keys: dK and dV on chip, P and dS in shared memory", rung4),
      ATTN_RUNG("mma", "S and dP on tensor cores: mma.sync with K and V rows as A fragments",
                rung5),
      ATTN_RUNG(
          "registers",
          "dV and dK on tensor cores: P * Z and dS reused from registers, dV and dK kept there",
          rung6),
      ATTN_RUNG("dq",
                "dQ on tensor cores too: dS^T through shared memory in the dtype, ldmatrix.trans",
                rung7),
      ATTN_RUNG("deterministic",
                "dQ in a pass of its own, summed in registers: no atomics, the same bits", rung8),
      ATTN_RUNG("pipeline",
                "the next tile's copies (cp.async) in flight while the warps compute on this one",
                rung9),
      ATTN_RUNG("elementwise",
                "a tile's pairs in one straight run: rows' LSE and D_i once a tile, P by ex2, the "
                "mask and dropout tested only where needed",
                rung10),
      {"taller",
       "dkdv_kernel's query tiles 64 rows tall, four 16-row slices a tile: its copies, barriers "
       "and loop paid once for four times the products",
       &cpu::run, ATTN_GPU_RUN(gpu::run), ATTN_COUNTED_RUN(counted::run)},
  };
  return s;
}
}  // namespace step6
