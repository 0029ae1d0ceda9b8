// --load and --save: a problem's tensors in a safetensors file (common/safetensors.h).
//
// Names, shapes and dtypes (the layouts of AttentionParams):
//   q [B, H, Sq, D], k and v [B, Hkv, Sk, D]   F16 or BF16, all three the same
//   o [B, H, Sq, D] (as q), lse [B, H, Sq] F32 (-inf for rows that see no key)
//   seqlens_q, seqlens_k [B] I32               optional per-batch lengths
// --save also records the problem (the flags that define it) as strings in __metadata__.
#pragma once

#include <string>
#include <vector>

#include "common/problem.h"
#include "common/tensors.h"

namespace attn {

// Reads the problem shape from the file's q, k, v (and seqlens_* when present) into p: batch,
// heads, heads_kv, seqlen_q/k, dim, dtype, seqlens_q/k. Returns "" or one line saying what is
// wrong with the file.
// Also the problem's causal mask, scale, dropout and seed, where the file's metadata records them
// (as --save writes it); fields the file does not record are left as they are in p.
std::string read_problem(const std::string& path, Problem& p);

// Reads q, k and v of `path` into `in`; the file must still describe `p`. "" or one line.
std::string load_inputs(const std::string& path, const Problem& p, HostInputs& in);

// Writes q, k, v, o, lse (and the per-batch lengths) with the problem in the metadata. Throws
// std::runtime_error.
void save_tensors(const std::string& path, const std::string& step, const Problem& p,
                  const HostInputs& in, const std::vector<Bits16>& o,
                  const std::vector<float>& lse);

// "" when `path` can be written (an existing writable file, or a new name in a writable
// directory), otherwise why not: the file is opened for appending (and removed again if this made
// it), before a run, so that a bad path fails at once.
std::string check_output_path(const std::string& path);

}  // namespace attn
