// The correctness gate: a step's O and LSE against the FP64 reference.
//
// FP16: |O - ref| <= 1e-3 + 1e-3 * |ref| elementwise (the contract in docs/architecture.md).
// BF16: |O - ref| <= 8e-3 + 8e-3 * |ref|. Justification: bf16 keeps 8 significant bits, so its
//   unit roundoff is u = 2^-8 = 3.9e-3. Rounding O to bf16 costs up to u * |ref|; a tensor-core
//   step that rounds P to bf16 before P V adds up to u * sum_j P_ij |V_jd| <= u * max|V| = 1.5 u
//   = 5.9e-3 with our inputs (|V| <= 1.5); FP32 accumulation adds far less. A correct kernel thus
//   stays within 5.9e-3 + 3.9e-3 * |ref| even in the worst case, and 8e-3 + 8e-3 * |ref| leaves
//   margin while still catching real bugs (a missed rescale or a wrong mask moves O by 1e-1 or
//   more). The same reasoning for fp16 (u = 2^-11 = 4.9e-4) gives 7.3e-4 + 4.9e-4 * |ref|, inside
//   the contract's 1e-3 + 1e-3 * |ref|.
// LSE (FP32): |lse - ref| <= 1e-3 * max(1, |ref|), and -inf exactly where the reference has -inf.
// NaN never passes; an element still holding the poison pattern written before the launch is
// reported as unwritten.
//
// The backward's gate (step 6), per gradient tensor X of dQ, dK and dV, FlashAttention's own test
// criterion: the largest |X - ref| over its elements at most twice the largest error of the same
// gradient computed as PyTorch computes it in the dtype (reference_backward_dtype), the FP64
// reference `ref` being the truth for both. An FP32 computation is not the yardstick: its error is
// far below the rounding of a 16-bit gradient, so no kernel that returns fp16 or bf16 could meet
// twice it. And never below twice the error of the exact gradient rounded to the dtype, which a
// kernel returning exact gradients has (the floor where the dtype reference happens to round
// exactly). A tensor whose exact gradient is zero everywhere (each row sees one key: P = 1, so
// dS = dP - D_i cancels exactly, but only where dP and D_i are summed in the same order) comes back
// within the dtype's rounding of the largest gradient of the three.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.h"
#include "common/reference.h"
#include "common/tensors.h"

namespace attn {

struct Tolerance {
  double atol;
  double rtol;
  double lse_rtol;
};

Tolerance tolerance_for(DType t);

// Byte pattern outputs are filled with before a launch: 0xFF..FF is a NaN in fp16, bf16 and fp32,
// and not one that arithmetic produces (hardware NaNs are 0x7E00 / 0x7FFF / 0x7FFFFFFF).
constexpr uint8_t kPoisonByte = 0xFF;

struct CheckResult {
  bool passed = true;
  double max_abs_err = 0;  // over finite O elements
  double lse_max_err = 0;  // max |lse - ref| over rows where both are finite
  int64_t bad_o = 0;       // O elements outside tolerance (NaN included)
  int64_t bad_lse = 0;
  int64_t unwritten = 0;                       // O or LSE elements still holding the poison pattern
  int64_t unwritten_o = 0, unwritten_lse = 0;  // the same, per tensor
  // O elements that are NaN or +-Inf, and LSE elements that are NaN, +Inf, or -Inf where the
  // reference is finite (poison excluded): a blown-up softmax, reported as such.
  int64_t nonfinite_o = 0;
  int64_t nonfinite_lse = 0;
  std::string first_nonfinite;  // "O[b=0,h=1,i=3,d=0] = nan", empty when there is none
  std::string first_failure;    // one line naming the first bad element, empty when passed
};

CheckResult check_outputs(const Problem& p, const std::vector<Bits16>& o,
                          const std::vector<float>& lse, const Reference& ref);

struct GradientCheck {
  struct Tensor {
    const char* name;         // "dQ", "dK", "dV"
    double max_err = 0;       // max |X - ref| over its finite elements
    double dtype_err = 0;     // the dtype reference's max |X - ref|
    double rounding_err = 0;  // max |ref rounded to the dtype - ref|
    double limit = 0;         // 2 * max(dtype_err, rounding_err) (an all-zero tensor: above)
    int64_t unwritten = 0;    // elements still holding the pre-launch poison
    int64_t nonfinite = 0;    // NaN or +-Inf (poison excluded)
  };
  std::array<Tensor, 3> tensors{{{"dQ"}, {"dK"}, {"dV"}}};
  bool passed = true;
  std::string first_failure;  // one line: the first tensor that fails and its worst element
};

GradientCheck check_gradients(const Problem& p, const Gradients& got, const ReferenceGrads& ref,
                              const Gradients& dtype_ref);

}  // namespace attn
