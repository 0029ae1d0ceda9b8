#include "common/arch.h"

#if ATTN_HAVE_GPU
#include <cuda_runtime_api.h>
#endif
#include <stdexcept>

namespace attn {

ComputeCapability compute_capability(Backend& backend) {
  if (backend.name() == "cpu") return {9, 0, "a"};
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

}  // namespace attn
