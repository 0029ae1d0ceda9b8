#include "common/harness.h"

namespace step2 {
attn::StepInfo info();
}

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, step2::info());
}
