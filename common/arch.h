// The compute capability a step may dispatch on (e.g. a Hopper kernel on sm_90a), and the one it
// needs (steps 4 and 5: sm_80). The CPU backend presents itself as sm_90a: it emulates every
// instruction up to the Hopper ones (common/ptx.h). SIMT_PRESENT_AS=sm_75 (or sm_80, sm_86, sm_89,
// sm_90a, sm_120) makes it present itself as that GPU instead, so that what a step does on such a
// GPU (a refusal, a variant chosen) can be tested without one; the instructions it emulates stay
// the same.
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
  std::string name() const;  // "sm_75", "sm_90a"
};

// Parses "sm_75" / "sm_90a" (SIMT_PRESENT_AS); false if it is not such a name.
bool parse_compute_capability(const std::string& text, ComputeCapability& out);

// {9, 0, "a"} on the CPU backend (or what SIMT_PRESENT_AS names: an invalid name throws
// std::invalid_argument with a one-line reason); the current device's on the GPU ("a" on 9.0, which
// runs sm_90a code; whether this binary holds sm_90a code is a build matter:
// CMAKE_CUDA_ARCHITECTURES).
ComputeCapability compute_capability(Backend& backend);

// For a step with an sm80 and an sm90a variant (steps 5 and 6), `built`: whether this binary holds
// the step's sm_90a code (its ATTN_HAVE_SM90A). The variant a run gets without --variant: sm90a on
// a compute capability 9.0 GPU when built, sm80 elsewhere (the CPU backend runs either; sm80 is
// its default).
std::string sm90a_default_variant(Backend& backend, bool built);
// Why `variant` cannot run on this backend, in one line, or "": sm90a needs the sm_90a code on a
// GPU, and a compute capability 9.0 GPU (or the CPU backend presenting itself as one).
std::string sm90a_unavailable(Backend& backend, const std::string& variant, bool built);

}  // namespace attn
