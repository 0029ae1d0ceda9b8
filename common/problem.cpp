#include "common/problem.h"

#include <cmath>
#include <sstream>

namespace attn {

float Problem::softmax_scale() const {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(dim));
}

int64_t Problem::q_elements() const {
  return int64_t(batch) * heads * seqlen_q * dim;
}
int64_t Problem::kv_elements() const {
  return int64_t(batch) * kv_heads() * seqlen_k * dim;
}
int64_t Problem::lse_elements() const {
  return int64_t(batch) * heads * seqlen_q;
}

int64_t Problem::visible_pairs() const {
  int64_t pairs = 0;
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < query_length(b); ++i) pairs += row_keys_end(b, i);
  }
  return pairs * heads;
}

double Problem::flops() const {
  return 4.0 * dim * static_cast<double>(visible_pairs());
}

const char* dtype_name(DType t) {
  return t == DType::fp16 ? "fp16" : "bf16";
}

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "fp16") return DType::fp16;
  if (s == "bf16") return DType::bf16;
  return std::nullopt;
}

std::string Problem::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << " B=" << batch << " H=" << heads;
  if (kv_heads() != heads) os << "/" << kv_heads();
  os << " Sq=" << seqlen_q << " Sk=" << seqlen_k << " D=" << dim;
  if (causal) os << " causal";
  if (!seqlens_k.empty()) {
    os << " seqlens_k=";
    for (size_t b = 0; b < seqlens_k.size(); ++b) os << (b ? "," : "") << seqlens_k[b];
  }
  if (!seqlens_q.empty()) {
    os << " seqlens_q=";
    for (size_t b = 0; b < seqlens_q.size(); ++b) os << (b ? "," : "") << seqlens_q[b];
  }
  if (dropout > 0) os << " dropout=" << dropout;
  if (scale) os << " scale=" << *scale;
  return os.str();
}

namespace {
std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

std::string validate(const Problem& p) {
  std::ostringstream why;
  auto positive = [&](const char* flag, int v) {
    if (v < 1 && why.str().empty()) why << flag << " " << v << ": must be at least 1";
  };
  positive("--batch", p.batch);
  positive("--heads", p.heads);
  positive("--seqlen-q", p.seqlen_q);
  positive("--seqlen-k", p.seqlen_k);
  if (!why.str().empty()) return why.str();
  if (p.dim < 1 || p.dim > kMaxHeadDim)
    return "--dim " + std::to_string(p.dim) + ": head dim must be between 1 and " +
           std::to_string(kMaxHeadDim);
  if (p.heads_kv < 0 || (p.heads_kv > 0 && p.heads % p.heads_kv != 0))
    return "--heads " + std::to_string(p.heads) + " --heads-kv " + std::to_string(p.heads_kv) +
           ": heads must be a positive multiple of heads-kv (each K/V head serves a group of "
           "query heads)";
  if (!(p.dropout >= 0.0f && p.dropout < 1.0f))
    return "--dropout " + fmt(p.dropout) + ": probability must be in [0, 1)";
  if (p.scale && !(std::isfinite(*p.scale) && *p.scale != 0.0f))
    return "--scale: must be a finite non-zero number";
  if (!p.seqlens_k.empty()) {
    if (static_cast<int>(p.seqlens_k.size()) != p.batch)
      return "--seqlens-k: expected " + std::to_string(p.batch) +
             " key lengths (one per batch), got " + std::to_string(p.seqlens_k.size());
    for (int len : p.seqlens_k)
      if (len < 0 || len > p.seqlen_k)
        return "--seqlens-k " + std::to_string(len) +
               ": each key length must be in [0, seqlen_k=" + std::to_string(p.seqlen_k) + "]";
  }
  if (!p.seqlens_q.empty()) {
    if (static_cast<int>(p.seqlens_q.size()) != p.batch)
      return "--seqlens-q: expected " + std::to_string(p.batch) +
             " query lengths (one per batch), got " + std::to_string(p.seqlens_q.size());
    for (int len : p.seqlens_q)
      if (len < 0 || len > p.seqlen_q)
        return "--seqlens-q " + std::to_string(len) +
               ": each query length must be in [0, seqlen_q=" + std::to_string(p.seqlen_q) + "]";
  }
  if (int64_t(p.batch) * p.heads > 65535)
    return "--batch " + std::to_string(p.batch) + " --heads " + std::to_string(p.heads) +
           ": batch * heads must be at most 65535 (the kernels give each (batch, head) one grid "
           "index in a dimension limited to 65535)";
  // Kernels index with 32-bit element offsets inside one (batch, head) and 64-bit across them;
  // keep every tensor below 2^31 elements so that no index can overflow.
  constexpr int64_t kMaxElements = int64_t(1) << 31;
  if (p.q_elements() >= kMaxElements || p.kv_elements() >= kMaxElements)
    return "problem too large: Q/K/V/O must each have fewer than 2^31 elements (Q has " +
           std::to_string(p.q_elements()) + ", K and V " + std::to_string(p.kv_elements()) + ")";
  return "";
}

}  // namespace attn
