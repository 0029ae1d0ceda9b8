#include "common/harness.h"

namespace step1 {
attn::StepInfo info();
}

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, step1::info());
}
