// Host-side encoding of TMA tensor maps with cuTensorMapEncodeTiled's arguments and constraints
// (include/cuda.h documents them). The same description encodes a CUtensorMap for the GPU,
// through the driver entry point that the CUDA runtime hands out (no link against libcuda), or a
// simt::TensorMap for the CPU backend; both are checked by validate() first.
#pragma once

#include <cstdint>
#include <string>

#include "common/simt/sm90.h"

namespace attn {

// CUtensorMapDataType's values for the types the steps use.
enum class TmaDtype : uint32_t { u8 = 0, u16 = 1, u32 = 2, f16 = 6, f32 = 7, bf16 = 9 };

struct TensorMapSpec {
  TmaDtype dtype = TmaDtype::f16;
  uint32_t rank = 2;             // 1..5
  const void* global = nullptr;  // 16-byte aligned
  uint64_t dims[5] = {};         // elements, dimension 0 innermost
  uint64_t strides[5] = {};  // bytes; strides[i] for i = 1..rank-1 (cuda.h's globalStrides[i-1])
  uint32_t box[5] = {};      // 1..256 elements; box[0] * element size a multiple of 16 bytes
  uint32_t element_strides[5] = {1, 1, 1, 1, 1};  // 1..8 (dimension 0's is ignored)
  simt::TmaSwizzle swizzle = simt::TmaSwizzle::none;
};

uint32_t element_bytes(TmaDtype t);
// "" when the spec satisfies cuTensorMapEncodeTiled's rules (interleave none, zero OOB fill),
// else the first rule it breaks, in one line.
std::string validate(const TensorMapSpec& s);
// Throw std::invalid_argument with validate()'s reason, or a driver failure.
simt::TensorMap encode_tensor_map_cpu(const TensorMapSpec& s);
// out: a 64-byte aligned CUtensorMap (128 bytes).
void encode_tensor_map_gpu(void* out, const TensorMapSpec& s);

}  // namespace attn
