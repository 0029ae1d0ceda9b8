// The problem as every kernel sees it: pointers, sizes and flags, passed by value to kernels.
// Also the masking rule (causal, per-batch key lengths) and the GQA head mapping, written once
// here so that the reference and every step agree on them by construction.
#pragma once

#include <cstdint>

#include "common/hd.h"

namespace attn {

enum class DType : int { fp16 = 0, bf16 = 1 };

// Layout (all contiguous, row-major):
//   q   [batch, heads,    seqlen_q, dim]   dtype
//   k,v [batch, heads_kv, seqlen_k, dim]   dtype
//   o   [batch, heads,    seqlen_q, dim]   dtype
//   lse [batch, heads,    seqlen_q]        fp32, natural log of sum_j exp(scale * q_i.k_j)
struct AttentionParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  // Per-batch key lengths (padding / variable length), or nullptr: every batch uses seqlen_k.
  const int* seqlens_k;
  // Per-batch query lengths, or nullptr: every batch uses seqlen_q. Rows past a batch's query
  // length are padding: they see no key (O = 0, LSE = -inf).
  const int* seqlens_q;

  int batch;
  int heads;
  int heads_kv;
  int seqlen_q;
  int seqlen_k;
  int dim;
  DType dtype;

  float scale;    // softmax scale applied to q.k
  bool causal;    // bottom-right aligned when seqlen_q != key length
  float dropout;  // probability of dropping an element of P, in [0, 1)
  uint64_t seed;  // dropout Philox key
};

// Number of keys batch b really has.
ATTN_HD int key_length(const AttentionParams& p, int b) {
  return p.seqlens_k != nullptr ? p.seqlens_k[b] : p.seqlen_k;
}

// Number of queries batch b really has.
ATTN_HD int query_length(const AttentionParams& p, int b) {
  return p.seqlens_q != nullptr ? p.seqlens_q[b] : p.seqlen_q;
}

// Query row i sees keys [0, visible_keys_end(...)). Causal masking is aligned bottom-right, as in
// FlashAttention-2: the last query row sees every key, so with len_k keys row i sees
// j <= i + (len_k - seqlen_q). A result <= 0 means the row sees no key at all (O = 0, LSE = -inf).
ATTN_HD int visible_keys_end(int i, int seqlen_q, int len_k, bool causal) {
  if (!causal) return len_k;
  const int end = i + 1 + (len_k - seqlen_q);
  return end < 0 ? 0 : (end > len_k ? len_k : end);
}

// Keys row i of batch b sees, [0, row_keys_end): the causal diagonal is aligned with the batch's
// own query and key lengths; a padding row (i >= its batch's query length) sees none.
ATTN_HD int row_keys_end(const AttentionParams& p, int b, int i) {
  const int len_q = query_length(p, b);
  return i < len_q ? visible_keys_end(i, len_q, key_length(p, b), p.causal) : 0;
}

// Keys any of the rows [i0, i0 + rows) sees: its last real row sees the most (row_keys_end grows
// with i), so key tiles at or past this are work no row of the tile needs; 0 for a padding tile.
ATTN_HD int tile_keys_end(const AttentionParams& p, int b, int i0, int rows) {
  const int len_q = query_length(p, b);
  const int last = (i0 + rows < len_q ? i0 + rows : len_q) - 1;
  return last < i0 ? 0 : row_keys_end(p, b, last);
}

// Grouped-query attention: query head h reads key/value head h / (heads / heads_kv).
ATTN_HD int kv_head(const AttentionParams& p, int h) {
  return h / (p.heads / p.heads_kv);
}

// The backward pass (step 6): the forward's problem, whose O and LSE it reads (the forward wrote
// them), the upstream gradient dO, and the gradients it writes, in the input dtype:
//   dout, dq [batch, heads,    seqlen_q, dim]
//   dk, dv   [batch, heads_kv, seqlen_k, dim]   each summed over its group's query heads (GQA)
struct BackwardParams : AttentionParams {
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
};

}  // namespace attn
