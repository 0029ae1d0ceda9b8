// What this step is, for its main() and for the tests.
#include "common/arch.h"
#include "common/harness.h"

namespace step6 {
ATTN_KERNEL_ENTRIES
// The Hopper kernel (attention_sm90a.cu), the ladder's rungs after the sm_80 one.
namespace sm90a {
ATTN_KERNEL_ENTRIES
}
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

// A rung of the ladder to the sm_80 kernel: --rung runs it, and refuses --variant sm90a.
#define STEP6_RUNG(NAME, IDEA, NS)                                                             \
  {                                                                                            \
    NAME, IDEA, &NS::cpu::run, ATTN_GPU_RUN(NS::gpu::run), ATTN_COUNTED_RUN(NS::counted::run), \
        "sm80"                                                                                 \
  }

namespace {
// Two kernels: the sm_80 one (attention.cu), which runs on every GPU from sm_80 on, and the Hopper
// one (attention_sm90a.cu). The CPU backend runs either.
void run_cpu(const attn::AttentionParams& p, attn::RunContext& ctx) {
  if (ctx.variant == "sm90a")
    sm90a::cpu::run(p, ctx);
  else
    cpu::run(p, ctx);
}

// The counted copies of both (--counters), where this binary has them.
[[maybe_unused]] void run_counted(const attn::AttentionParams& p, attn::RunContext& ctx) {
#if ATTN_HAVE_COUNTERS
  if (ctx.variant == "sm90a")
    sm90a::counted::run(p, ctx);
  else
    counted::run(p, ctx);
#else
  (void)p, (void)ctx;
#endif
}

#if ATTN_HAVE_GPU && ATTN_STEP_GPU
void run_gpu(const attn::AttentionParams& p, attn::RunContext& ctx) {
#if ATTN_HAVE_SM90A
  if (ctx.variant == "sm90a") return sm90a::gpu::run(p, ctx);
#endif
  gpu::run(p, ctx);
}
#endif

// On a GPU: the Hopper kernel on compute capability 9.0 when this build holds sm_90a code,
// otherwise the sm_80 one; the CPU backend runs either (sm80 by default) unless it presents itself
// as another GPU (SIMT_PRESENT_AS). common/arch.h.
std::string default_variant(attn::Backend& backend) {
  return attn::sm90a_default_variant(backend, ATTN_HAVE_SM90A);
}
std::string unavailable(attn::Backend& backend, const std::string& variant) {
  return attn::sm90a_unavailable(backend, variant, ATTN_HAVE_SM90A);
}
}  // namespace

// The tensor-core kernel is instantiated for these head dims only (attn::dispatch_head_dim); the
// rungs before it loop over D at run time, and are held to the same list.
attn::StepInfo info() {
  attn::StepInfo s{.name = "step6_backward",
                   .cpu = &run_cpu,
                   .gpu = ATTN_GPU_RUN(run_gpu),
                   .counted = ATTN_COUNTED_RUN(counted::run) ? &run_counted : nullptr,
                   .head_dims = {64, 80, 96, 128},
                   .min_arch = "sm_80",
                   .min_arch_why = "mma.sync m16n8k16 (bf16)",
                   .variants = {"sm80", "sm90a"},
                   .default_variant = &default_variant,
                   .variant_unavailable = &unavailable,
                   .backward = true};
  // The ladder (README.md, one section per rung): rungN_*.cu, then attention.cu (the sm80
  // variant), then the sm90a one's: attention_sm90a.cu. Each of the two kernels runs as the step.
  s.rungs = {
      STEP6_RUNG("math", "the backward's formulas as four kernels, P and dS in global memory",
                 rung1),
      STEP6_RUNG("atomics", "dQ accumulated in FP32 with atomicAdd by the threads that compute dS",
                 rung2),
      STEP6_RUNG("tiles", "the pairs in tiles: a block reads its rows of Q, dO, K and V once",
                 rung3),
      STEP6_RUNG("fused",
                 "a block owns a tile of keys: dK and dV on chip, P and dS in shared memory",
                 rung4),
      STEP6_RUNG("mma", "S and dP on tensor cores: mma.sync with K and V rows as A fragments",
                 rung5),
      STEP6_RUNG(
          "registers",
          "dV and dK on tensor cores: P * Z and dS reused from registers, dV and dK kept there",
          rung6),
      STEP6_RUNG("dq",
                 "dQ on tensor cores too: dS^T through shared memory in the dtype, ldmatrix.trans",
                 rung7),
      STEP6_RUNG("deterministic",
                 "dQ in a pass of its own, summed in registers: no atomics, the same bits", rung8),
      STEP6_RUNG("pipeline",
                 "the next tile's copies (cp.async) in flight while the warps compute on this one",
                 rung9),
      STEP6_RUNG("elementwise",
                 "a tile's pairs in one straight run: rows' LSE and D_i once a tile, P by ex2, the "
                 "mask and dropout tested only where needed",
                 rung10),
      {"taller",
       "dkdv_kernel's query tiles 64 rows tall, four 16-row slices a tile: its copies, barriers "
       "and loop paid once for four times the products",
       &run_cpu, ATTN_GPU_RUN(run_gpu), s.counted, "sm80"},
      {"tma", "dkdv_kernel's tiles by TMA, one thread a tile, waited for on mbarriers", &run_cpu,
       ATTN_GPU_RUN(run_gpu), s.counted, "sm90a"},
  };
  return s;
}
}  // namespace step6
