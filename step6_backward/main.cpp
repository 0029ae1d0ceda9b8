#include "common/harness.h"

namespace step6 {
attn::StepInfo info();
}

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, step6::info());
}
