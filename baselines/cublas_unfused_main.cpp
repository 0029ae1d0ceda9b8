#include "common/harness.h"

namespace baseline_cublas {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, {.name = "baseline_cublas", .cpu = nullptr,
                                      .gpu = &baseline_cublas::run});
}
