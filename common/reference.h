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

// The backward pass in FP64 (common/reference_backward.cpp): the gradients of attention for an
// upstream gradient dO, what step 6's kernels are checked against. From the inputs as given:
//   P  = softmax(scale * Q K^T + mask), recomputed      Pd = P * Z   (Z: the dropout factors)
//   O  = Pd V                                          D_i = rowsum(dO * O)
//   dV = Pd^T dO      dPd = dO V^T      dP = dPd * Z   dS = P * (dP - D_i)
//   dQ = scale * dS K                                  dK = scale * dS^T Q
// D_i = rowsum(dO * O) equals rowsum(P * dP) (both are sum_j P_ij Z_ij dO_i . V_j): that identity
// is what lets the backward skip a reduction over keys; `delta_p` holds the second form so that
// the tests hold the two together. dK and dV of a key/value head sum over the query heads of its
// group (GQA). A row that sees no key has P = 0 and adds nothing; its LSE is -inf.
struct Fp64Tensors {
  std::vector<double> q, k, v;  // layouts as in AttentionParams
};
struct ReferenceGrads {
  std::vector<double> dq;       // [B, H, Sq, D]
  std::vector<double> dk, dv;   // [B, Hkv, Sk, D]
  std::vector<double> o;        // [B, H, Sq, D]: the forward's O, from the same P
  std::vector<double> lse;      // [B, H, Sq]
  std::vector<double> delta;    // [B, H, Sq]: rowsum(dO * O)
  std::vector<double> delta_p;  // [B, H, Sq]: rowsum(P * dP)
};
Fp64Tensors widen(const Problem& p, const HostInputs& in);
std::vector<double> widen(const std::vector<Bits16>& t, DType dtype);
ReferenceGrads reference_backward(const Problem& p, const Fp64Tensors& in,
                                  const std::vector<double>& dout);

// What a backward step reads besides Q, K and V: dO, and the forward's O and LSE as a forward step
// writes them (O rounded to the dtype, LSE in FP32), here the FP64 forward's of `ref`.
struct BackwardInputs {
  std::vector<Bits16> dout, o;  // [B, H, Sq, D]
  std::vector<float> lse;       // [B, H, Sq]
};
BackwardInputs backward_inputs(const Problem& p, std::vector<Bits16> dout,
                               const ReferenceGrads& ref);

// The same gradients computed the way PyTorch computes attention in fp16 or bf16, the yardstick of
// the backward's gate (common/check.h): FlashAttention's tests hold its gradients against
// `attention_ref(upcast=False, reorder_ops=True)` differentiated by autograd, whose every operation
// runs in the input dtype. Here, as there (common/reference_backward_dtype.cpp): each product
// accumulated in FP32 and rounded to the dtype, the softmax and its backward computed in FP32 and
// rounded, and every scaling (K by the softmax scale, V by the dropout's 1 / (1 - p), and their
// gradients) rounded, in the order the reference writes them; except the softmax backward's row
// sum, taken as FlashAttention-2 takes it, rowsum(dO * O) over `o`, the forward's O in the dtype.
Gradients reference_backward_dtype(const Problem& p, const HostInputs& in,
                                   const std::vector<Bits16>& dout, const std::vector<Bits16>& o);

}  // namespace attn
