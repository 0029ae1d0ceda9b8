// attn_device: prints the GPU the steps would use ("gpu: NAME") and exits 0, or explains why
// there is none ("cpu: REASON") and exits 1. The main job uses it to pick the backend and grid.
#include <iostream>

#include "common/backend.h"

int main() {
  std::string why;
  if (auto gpu = attn::make_gpu_backend(why)) {
    std::cout << "gpu: " << gpu->device() << "\n";
    return 0;
  }
  std::cout << "cpu: " << why << "\n";
  return 1;
}
