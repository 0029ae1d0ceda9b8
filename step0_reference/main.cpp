#include "common/steps.h"

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, attn::step0_info());
}
