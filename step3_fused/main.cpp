#include "common/harness.h"

namespace step3 {
attn::StepInfo info();
}

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, step3::info());
}
