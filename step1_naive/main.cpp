#include "common/harness.h"

namespace step1 {
namespace cpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace gpu {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
}  // namespace step1

int main(int argc, char** argv) {
  return attn::step_main(argc, argv,
                         {.name = "step1_naive", .cpu = &step1::cpu::run, .gpu = &step1::gpu::run});
}
