// simt::f16_bits_to_float as the kernels' CPU copies compile it (their flags, with -mf16c where
// the machine that builds has F16C: CMakeLists.txt, ATTN_CPU_F16C), for test_ptx.cpp to hold
// against the portable conversion on every input.
#include <cstdint>

#include "common/simt/ptx.h"

namespace ptx_test {
float f16_bits_to_float_as_kernels(uint16_t h) {
  return simt::f16_bits_to_float(h);
}
bool kernels_use_f16c() {
#if defined(__F16C__)
  return true;
#else
  return false;
#endif
}
}  // namespace ptx_test
