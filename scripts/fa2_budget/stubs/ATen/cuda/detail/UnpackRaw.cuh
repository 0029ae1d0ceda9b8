// A stand-in for PyTorch's header, for scripts/fa2_budget.sh only (see CUDAGeneratorImpl.h):
// at::cuda::philox::unpack, the seed and offset of a PhiloxCudaState.
#pragma once
#include <ATen/cuda/CUDAGeneratorImpl.h>

#include <tuple>

namespace at::cuda::philox {
__host__ __device__ inline std::tuple<uint64_t, uint64_t> unpack(PhiloxCudaState s) {
  return {s.seed, s.offset};
}
}  // namespace at::cuda::philox
