// Catch2 main for the step tests. Tests tagged [gpu] need a CUDA device: without one this binary
// exits 77, which CTest reports as "Skipped" (SKIP_RETURN_CODE), so the GPU tests are visible in
// every run and run for real where a GPU exists.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstring>
#include <iostream>

#include "common/backend.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "[gpu]", 5) == 0) {  // a spec selecting GPU tests (not "~[gpu]")
      std::string why;
      if (!attn::make_gpu_backend(why)) {
        std::cout << "skipped: " << why << "\n";
        return 77;
      }
    }
  }
  return Catch::Session().run(argc, argv);
}
