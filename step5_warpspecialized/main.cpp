#include "common/harness.h"

namespace step5 {
attn::StepInfo info();
}

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, step5::info());
}
