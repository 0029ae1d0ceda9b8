// What this step is, for its main() and for the tests.
#include "common/arch.h"
#include "common/harness.h"

namespace step5 {
namespace cpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}  // namespace cpu
namespace gpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}  // namespace gpu
namespace counted {
ATTN_COUNTED_DECL void run(const attn::AttentionParams& p, attn::RunContext& ctx);
ATTN_COUNTED_DECL void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}  // namespace counted

// The ladder from the sm_80 kernel to the Hopper one (README.md, one section per rung).
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

// A rung of the sm90a ladder: its GPU copy exists where the build holds sm_90a code (elsewhere
// --rung is refused before it runs, as --variant sm90a is: unavailable() below).
#if ATTN_HAVE_SM90A
#define STEP5_RUNG(NAME, IDEA, NS)                                                             \
  {                                                                                            \
    NAME, IDEA, &NS::cpu::run, ATTN_GPU_RUN(NS::gpu::run), ATTN_COUNTED_RUN(NS::counted::run), \
        "sm90a"                                                                                \
  }
#else
#define STEP5_RUNG(NAME, IDEA, NS)                                  \
  {                                                                 \
    NAME, IDEA, &NS::cpu::run, ATTN_GPU_RUN(::attn::gpu_not_built), \
        ATTN_COUNTED_RUN(NS::counted::run), "sm90a"                 \
  }
#endif

namespace {
// Two kernels: the sm_80 producer/consumer kernel (attention.cu), which runs on every GPU from
// sm_80 on, and the Hopper one (attention_sm90a.cu). The CPU backend runs either.
void run_cpu(const attn::AttentionParams& p, attn::RunContext& ctx) {
  if (ctx.variant == "sm90a")
    cpu::run_sm90a(p, ctx);
  else
    cpu::run(p, ctx);
}

// The counted copies of both (--counters), where this binary has them.
[[maybe_unused]] void run_counted(const attn::AttentionParams& p, attn::RunContext& ctx) {
#if ATTN_HAVE_COUNTERS
  if (ctx.variant == "sm90a")
    counted::run_sm90a(p, ctx);
  else
    counted::run(p, ctx);
#else
  (void)p, (void)ctx;
#endif
}

#if ATTN_HAVE_GPU && ATTN_STEP_GPU
void run_gpu(const attn::AttentionParams& p, attn::RunContext& ctx) {
#if ATTN_HAVE_SM90A
  if (ctx.variant == "sm90a") return gpu::run_sm90a(p, ctx);
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

// The kernels are instantiated for these head dims only (attn::dispatch_head_dim).
attn::StepInfo info() {
  return {
      .name = "step5_warpspecialized",
      .cpu = &run_cpu,
      .gpu = ATTN_GPU_RUN(run_gpu),
      .counted = ATTN_COUNTED_RUN(counted::run) ? &run_counted : nullptr,
      .head_dims = {64, 80, 96, 128},
      .min_arch = "sm_80",
      .min_arch_why = "mma.sync m16n8k16 (bf16), cp.async and mbarrier",
      .variants = {"sm80", "sm90a"},
      .default_variant = &default_variant,
      .variant_unavailable = &unavailable,
      .rungs = {
          STEP5_RUNG("tma", "the producer's copies by TMA, one thread per tile", rung1),
          STEP5_RUNG("wgmma", "the consumer warps a warpgroup that multiplies with wgmma", rung2),
          STEP5_RUNG("warpgroups",
                     "two consumer warpgroups share each tile; setmaxnreg moves registers", rung3),
          STEP5_RUNG("pingpong", "the consumer warpgroups take turns issuing S = Q K^T", rung4),
          STEP5_RUNG("overlap", "S of tile n issued with P V of tile n - 1, the softmax beside it",
                     rung5),
          STEP5_RUNG("budget", "wide key tiles, and the row sums as a wgmma with a matrix of ones",
                     rung6),
          STEP5_RUNG("persistent",
                     "a block per SM takes query tiles in turn, loading one as the last ends",
                     rung7),
          STEP5_RUNG("lpt", "causal tiles longest first, each to the block that is free first",
                     rung8),
          STEP5_RUNG("shapes",
                     "a tile per head dim: wider key tiles, fewer ring slots above D = 64", rung9),
          STEP5_RUNG("split",
                     "keys split across blocks when the query tiles fill at most half the SMs",
                     rung10),
          {"pack", "a GQA group's query heads in one tile when that saves a tenth of the tiles",
           &run_cpu, ATTN_GPU_RUN(run_gpu), ATTN_COUNTED_RUN(counted::run) ? &run_counted : nullptr,
           "sm90a"},
      }};
}
}  // namespace step5
