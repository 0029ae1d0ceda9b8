// Seeded inputs on the host, and fp16/bf16 <-> float conversion.
//
// Inputs are drawn from 0.5 + U(-1, 1): a non-zero mean makes every score share a large common
// component, which is what exposes a softmax that forgets to subtract its running maximum.
// The values are rounded to the input dtype before anything else sees them, so the FP64 reference
// and the kernels start from bit-identical numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.h"

namespace attn {

// Raw 16-bit storage of fp16 or bf16 values.
using Bits16 = uint16_t;

Bits16 to_bits(float x, DType t);  // round to nearest even
float from_bits(Bits16 b, DType t);

struct HostInputs {
  std::vector<Bits16> q, k, v;  // layouts as in AttentionParams
};

// Deterministic for a given (problem shape, seed): a counter-based generator (Philox), so the
// numbers do not depend on the standard library or on the order they are drawn in.
HostInputs make_inputs(const Problem& p);

// The backward's upstream gradient dO [B, H, Sq, D]: U(-1, 1) rounded to the dtype, from the same
// generator on a stream of its own (Q, K and V keep theirs). Zero-mean, unlike the inputs: a
// gradient has no reason to share a component across a row.
std::vector<Bits16> make_dout(const Problem& p);

// dQ, dK and dV in the input dtype, as a backward step returns them (layouts of Q, K and V).
struct Gradients {
  std::vector<Bits16> dq, dk, dv;
};

}  // namespace attn
