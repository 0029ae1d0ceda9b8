#include "common/tensor_map.h"

#if ATTN_HAVE_GPU
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#include <stdexcept>

namespace attn {

uint32_t element_bytes(TmaDtype t) {
  switch (t) {
    case TmaDtype::u8: return 1;
    case TmaDtype::u16:
    case TmaDtype::f16:
    case TmaDtype::bf16: return 2;
    case TmaDtype::u32:
    case TmaDtype::f32: return 4;
  }
  return 0;
}

std::string validate(const TensorMapSpec& s) {
  const uint32_t es = element_bytes(s.dtype);
  if (es == 0) return "tensor map: unknown data type";
  if (s.rank < 1 || s.rank > 5)
    return "tensor map: rank " + std::to_string(s.rank) + " not in 1..5";
  if (s.global == nullptr || reinterpret_cast<uintptr_t>(s.global) % 16 != 0)
    return "tensor map: global address not 16-byte aligned";
  for (uint32_t i = 0; i < s.rank; ++i) {
    const std::string dim = " of dimension " + std::to_string(i);
    if (s.dims[i] < 1 || s.dims[i] > (uint64_t(1) << 32))
      return "tensor map: size " + std::to_string(s.dims[i]) + dim + " not in 1..2^32";
    if (i > 0 && (s.strides[i] % 16 != 0 || s.strides[i] >= (uint64_t(1) << 40)))
      return "tensor map: stride " + std::to_string(s.strides[i]) + dim +
             " is not a multiple of 16 bytes below 2^40";
    if (s.box[i] < 1 || s.box[i] > 256)
      return "tensor map: box size " + std::to_string(s.box[i]) + dim + " not in 1..256";
    if (s.element_strides[i] < 1 || s.element_strides[i] > 8)
      return "tensor map: element stride " + std::to_string(s.element_strides[i]) + dim +
             " not in 1..8";
  }
  const uint64_t inner = uint64_t(s.box[0]) * es;
  if (inner % 16 != 0)
    return "tensor map: inner box extent " + std::to_string(inner) +
           " bytes is not a multiple of 16";
  if (s.swizzle != simt::TmaSwizzle::none) {
    const uint64_t span = 16u << static_cast<int>(s.swizzle);
    if (inner > span)
      return "tensor map: inner box extent " + std::to_string(inner) + " bytes exceeds the " +
             std::to_string(span) + "-byte swizzle span";
  }
  return "";
}

simt::TensorMap encode_tensor_map_cpu(const TensorMapSpec& s) {
  if (const std::string why = validate(s); !why.empty()) throw std::invalid_argument(why);
  simt::TensorMap m;
  m.global = static_cast<const unsigned char*>(s.global);
  m.rank = s.rank;
  m.element_bytes = element_bytes(s.dtype);
  for (uint32_t i = 0; i < s.rank; ++i) {
    m.dims[i] = s.dims[i];
    m.strides[i] = i == 0 ? m.element_bytes : s.strides[i];
    m.box[i] = s.box[i];
    m.element_strides[i] = s.element_strides[i];
  }
  m.swizzle = s.swizzle;
  return m;
}

void encode_tensor_map_gpu(void* out, const TensorMapSpec& s) {
  if (const std::string why = validate(s); !why.empty()) throw std::invalid_argument(why);
  if (reinterpret_cast<uintptr_t>(out) % 64 != 0)
    throw std::invalid_argument("tensor map: CUtensorMap storage not 64-byte aligned");
#if !ATTN_HAVE_GPU
  throw std::runtime_error(
      "tensor map: this build has no CUDA toolkit, so no driver to encode with");
#else
  using Encode =
      CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  // The driver's function through the runtime (the ABI of CUDA 12.0's version of it).
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr)
    throw std::runtime_error("tensor map: the driver has no cuTensorMapEncodeTiled");
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], estrides[5];
  for (uint32_t i = 0; i < s.rank; ++i) {
    dims[i] = s.dims[i];
    box[i] = s.box[i];
    estrides[i] = s.element_strides[i];
    if (i > 0) strides[i - 1] = s.strides[i];
  }
  const CUresult r = reinterpret_cast<Encode>(fn)(
      static_cast<CUtensorMap*>(out), static_cast<CUtensorMapDataType>(s.dtype), s.rank,
      const_cast<void*>(s.global), dims, strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      static_cast<CUtensorMapSwizzle>(s.swizzle), CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("tensor map: cuTensorMapEncodeTiled failed with CUresult " +
                             std::to_string(static_cast<int>(r)));
#endif
}

}  // namespace attn
