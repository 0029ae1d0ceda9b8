// Test helpers for kernels run on the CPU backend: a guarded device buffer, and 16-bit encodings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/kernel.h"
#include "common/simt/memory.h"

namespace attn_test {

// A CPU-backend "device" allocation (guard zones, poisoned contents) freed on scope exit.
template <typename T>
struct DeviceBuf {
  T* ptr;
  size_t n;
  explicit DeviceBuf(size_t count, const char* label = "buf") : n(count) {
    ptr = static_cast<T*>(simt::device_malloc(count * sizeof(T), label));
  }
  ~DeviceBuf() { simt::device_free(ptr); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  std::vector<T> get() const { return std::vector<T>(ptr, ptr + n); }
};

// The 16-bit encoding of x in T (__half or __nv_bfloat16), rounded to nearest even.
template <typename T>
uint16_t bits16(float x) {
  if constexpr (std::is_same_v<T, __half>)
    return __half_as_ushort(__float2half_rn(x));
  else
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

}  // namespace attn_test
