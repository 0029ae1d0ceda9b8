#include "common/harness.h"

namespace step0 {
void streaming_attention(const attn::AttentionParams& p, attn::RunContext& ctx);
}

int main(int argc, char** argv) {
  return attn::step_main(argc, argv,
                         {.name = "step0_reference", .cpu = &step0::streaming_attention});
}
