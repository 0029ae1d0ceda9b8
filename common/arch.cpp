#include "common/arch.h"

#include <cuda_runtime_api.h>

namespace attn {

ComputeCapability compute_capability(Backend& backend) {
  if (backend.name() == "cpu") return {9, 0, "a"};
  int device = 0, major = 0, minor = 0;
  ATTN_CUDA_CHECK(cudaGetDevice(&device));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return {major, minor, major == 9 && minor == 0 ? "a" : ""};
}

}  // namespace attn
