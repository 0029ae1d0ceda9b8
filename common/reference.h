// The FP64 reference: materialises S = scale * Q K^T and P = softmax(S) for each (batch, head)
// with Eigen, exactly as the formula reads. Every step is checked against it.
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
