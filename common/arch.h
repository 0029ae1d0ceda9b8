// The compute capability a step may dispatch on (e.g. a Hopper kernel on sm_90a). The CPU backend
// presents itself as sm_90a: it emulates every instruction up to the Hopper ones (common/ptx.h).
#pragma once

#include <string>

#include "common/backend.h"

namespace attn {

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  std::string suffix;  // "a": the architecture-specific features (wgmma, setmaxnreg) are there
  bool at_least(int maj, int min) const { return major > maj || (major == maj && minor >= min); }
  bool is_sm90a() const { return major == 9 && minor == 0 && suffix == "a"; }
};

// {9, 0, "a"} on the CPU backend; the current device's on the GPU ("a" on 9.0, which runs sm_90a
// code; whether this binary holds sm_90a code is a build matter: CMAKE_CUDA_ARCHITECTURES).
ComputeCapability compute_capability(Backend& backend);

}  // namespace attn
