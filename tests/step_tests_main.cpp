// What the step tests do before Catch2 runs (tests/main.cpp). Tests tagged [gpu] need a CUDA
// device: without one this binary exits 77, which CTest reports as "Skipped" (SKIP_RETURN_CODE),
// so the GPU tests are visible in every run and run for real where a GPU exists.
#include <cstring>
#include <iostream>
#include <memory>

#include "common/arch.h"
#include "common/backend.h"
#include "tests/catch_main.h"
#include "tests/steps.h"

int attn_test::before_catch(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "[gpu]", 5) == 0) {  // a spec selecting GPU tests (not "~[gpu]")
      std::string why;
      const std::unique_ptr<attn::Backend> gpu = attn::make_gpu_backend(why);
      if (!gpu) {
        std::cout << "skipped: " << why << "\n";
        return 77;
      }
      // "[gpu][step4_tensorcore]": a step that needs a newer GPU (steps 4 and 5 on a T4) is
      // skipped with its reason; the CPU tests run it.
      const attn::ComputeCapability cc = attn::compute_capability(*gpu);
      for (const attn::StepInfo& step : attn_test::kernel_steps()) {
        attn::ComputeCapability need;
        if (std::strstr(argv[i], ("[" + step.name + "]").c_str()) != nullptr &&
            attn::parse_compute_capability(step.min_arch, need) &&
            !cc.at_least(need.major, need.minor)) {
          std::cout << "skipped: " << step.name << " needs " << step.min_arch << " or newer; this "
                    << "GPU, " << gpu->device() << ", is " << cc.name() << "\n";
          return 77;
        }
      }
    }
  }
  return -1;
}
