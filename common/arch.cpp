#include "common/arch.h"

#if ATTN_HAVE_GPU
#include <cuda_runtime_api.h>
#endif
#include <cstdlib>
#include <regex>
#include <stdexcept>

namespace attn {

std::string ComputeCapability::name() const {
  return "sm_" + std::to_string(major) + std::to_string(minor) + suffix;
}

bool parse_compute_capability(const std::string& text, ComputeCapability& out) {
  std::smatch m;
  if (!std::regex_match(text, m, std::regex("sm_([1-9][0-9]?)([0-9])(a?)"))) return false;
  out = {std::stoi(m[1]), std::stoi(m[2]), m[3]};
  return out.major >= 5;
}

ComputeCapability compute_capability(Backend& backend) {
  if (backend.name() == "cpu") {
    const char* as = std::getenv("SIMT_PRESENT_AS");
    if (as == nullptr || *as == '\0') return {9, 0, "a"};
    ComputeCapability cc;
    if (!parse_compute_capability(as, cc))
      throw std::invalid_argument(std::string("SIMT_PRESENT_AS=") + as +
                                  ": not an architecture name such as sm_75, sm_80 or sm_90a");
    return cc;
  }
#if ATTN_HAVE_GPU
  int device = 0, major = 0, minor = 0;
  ATTN_CUDA_CHECK(cudaGetDevice(&device));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return {major, minor, major == 9 && minor == 0 ? "a" : ""};
#else
  throw std::logic_error("compute_capability: a GPU backend in a build without the CUDA toolkit");
#endif
}

std::string sm90a_default_variant(Backend& backend, bool built) {
  if (backend.name() == "gpu" && built && compute_capability(backend).is_sm90a()) return "sm90a";
  return "sm80";
}

std::string sm90a_unavailable(Backend& backend, const std::string& variant, bool built) {
  if (variant != "sm90a") return "";
  if (backend.name() == "gpu" && !built)
    return "--variant sm90a: this build has no sm_90a code (configure with "
           "-DCMAKE_CUDA_ARCHITECTURES containing 90a)";
  const ComputeCapability cc = compute_capability(backend);
  if (!cc.is_sm90a())
    return "--variant sm90a: needs a compute capability 9.0 GPU (" +
           std::string(backend.name() == "gpu" ? "this one is "
                                               : "the CPU backend presents itself as ") +
           std::to_string(cc.major) + "." + std::to_string(cc.minor) + "); use --variant sm80";
  return "";
}

}  // namespace attn
