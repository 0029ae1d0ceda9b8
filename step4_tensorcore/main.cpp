#include "common/harness.h"

namespace step4 {
attn::StepInfo info();
}

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, step4::info());
}
