#include "baselines/cublas_unfused.h"

int main(int argc, char** argv) {
  return attn::step_main(argc, argv, baseline_cublas::info());
}
