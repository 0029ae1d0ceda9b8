// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw ("Parallel random
// numbers: as easy as 1, 2, 3", SC 2011), written from its definition there: ten rounds, each two
// 32 x 32 -> 64-bit multiplications of the 128-bit counter, the 64-bit key bumped by two Weyl
// constants between rounds. It is Random123's Philox4x32 (the authors' library, whose constants
// these are), word for word: tests/test_dropout.cpp holds it against Random123 where that is
// installed. Written here because Random123's headers cost every kernel file a second of compile
// time (its arrays bring <iostream>), and because PyPI has no package of it: the Python package
// builds without Random123 (docs/python.md).
#pragma once

#include <cstdint>

#include "common/hd.h"

namespace attn {

struct PhiloxWords {
  uint32_t v[4];
};

// The four 32-bit words Philox4x32-10 makes of counter `ctr` under the key (k0, k1).
ATTN_HD PhiloxWords philox4x32_10(PhiloxWords ctr, uint32_t k0, uint32_t k1) {
#if defined(__CUDA_ARCH__)
#pragma unroll  // (nvcc's host pass would warn of the pragma it does not know)
#endif
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;  // the key bump before every later round
    const uint64_t p0 = uint64_t{0xD2511F53u} * ctr.v[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * ctr.v[2];
    ctr = {{static_cast<uint32_t>(p1 >> 32) ^ ctr.v[1] ^ k0, static_cast<uint32_t>(p1),
            static_cast<uint32_t>(p0 >> 32) ^ ctr.v[3] ^ k1, static_cast<uint32_t>(p0)}};
  }
  return ctr;
}

// A Philox word as a float in [-1, 1], as Random123's uneg11<float> defines it: the word read as a
// signed 32-bit integer, times 2^-31, plus 2^-32 (never 0). The product is exact, so the one
// rounding is the sum's, fused or not. tests/test_tensors.cpp holds it against Random123.
ATTN_HD float uniform_pm1(uint32_t word) {
  return static_cast<float>(static_cast<int32_t>(word)) * 0x1p-31f + 0x1p-32f;
}

}  // namespace attn
