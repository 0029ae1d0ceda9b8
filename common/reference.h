// The FP64 reference, in Eigen: S = scale * Q K^T and the softmax computed for a tile of 64 query
// rows and 512 keys at a time (the softmax combined across key tiles in FP64), so its memory stays
// a few hundred KB per thread however long the sequences are. Every step is checked against it.
#pragma once

#include <vector>

#include "common/problem.h"
#include "common/tensors.h"

namespace attn {

struct Reference {
  std::vector<double> o;    // [B, H, Sq, D]
  std::vector<double> lse;  // [B, H, Sq], -inf for rows that see no key
};

Reference reference_attention(const Problem& p, const HostInputs& in);

}  // namespace attn
