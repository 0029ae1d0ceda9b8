// mma.m16n8k16's body (mma_body.h) compiled for x86-64 CPUs with AVX2, FMA and F16C: this file
// alone gets -mavx2 -mfma -mf16c (common/CMakeLists.txt), and ptx.cpp calls it only when the CPU
// has all three. It uses nothing else from the headers it includes (their inline functions,
// compiled here with those instructions, could otherwise stand in for the portable ones).
#include "common/simt/mma_body.h"

namespace simt {

void mma_avx2_f16(const detail::CollectiveView& v) {
  mma_body<MmaType::f16>(v);
}

void mma_avx2_bf16(const detail::CollectiveView& v) {
  mma_body<MmaType::bf16>(v);
}

}  // namespace simt
