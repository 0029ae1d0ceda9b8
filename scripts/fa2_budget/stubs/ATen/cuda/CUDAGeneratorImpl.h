// A stand-in for PyTorch's header, for scripts/fa2_budget.sh only: FlashAttention-2's flash.h
// names at::PhiloxCudaState (the dropout RNG's seed and offset) in its parameter struct. The
// measured kernels are FlashAttention-2's without dropout, which never read it.
#pragma once
#include <cstdint>

namespace at {
struct PhiloxCudaState {
  uint64_t seed = 0, offset = 0;
};
}  // namespace at
