#include "common/tensor_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/memory.h"
#include "common/safetensors.h"

namespace attn {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The dims of a 4-d q/k/v tensor as ints (each must fit one).
std::string dims4(const safetensors::Header& h, const char* name, int64_t out[4]) {
  const auto it = h.tensors.find(name);
  if (it == h.tensors.end()) return std::string("no tensor '") + name + "' (needs q, k and v)";
  const auto& t = it->second;
  if (t.dtype != "F16" && t.dtype != "BF16")
    return std::string("tensor '") + name + "' is " + t.dtype + "; q, k, v must be F16 or BF16";
  if (t.shape.size() != 4)
    return std::string("tensor '") + name + "' has shape " + shape_str(t.shape) +
           "; expected rank 4 [batch, heads, seqlen, dim]";
  for (int d = 0; d < 4; ++d) {
    if (t.shape[d] > (int64_t(1) << 31) - 1)
      return std::string("tensor '") + name + "' has shape " + shape_str(t.shape) +
             ": a dimension is too large";
    out[d] = t.shape[d];
  }
  return "";
}

std::string read_lengths(const std::string& path, const safetensors::Header& h, const char* name,
                         int64_t batch, std::vector<int>& out) {
  const auto it = h.tensors.find(name);
  if (it == h.tensors.end()) return "";
  const auto& t = it->second;
  if (t.dtype != "I32" || t.shape.size() != 1 || t.shape[0] != batch)
    return std::string("tensor '") + name + "' is " + t.dtype + " " + shape_str(t.shape) +
           "; expected I32 [" + std::to_string(batch) + "] (one length per batch)";
  out.resize(static_cast<size_t>(batch));
  safetensors::read_tensor(path, t, out.data());
  return "";
}

std::string read_metadata(const safetensors::Header& h, Problem& p) {
  const auto& m = h.metadata;
  auto number = [&](const char* key, double lo, double hi, double& out) -> std::string {
    const std::string& text = m.at(key);
    char* end = nullptr;
    out = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(out >= lo && out <= hi))
      return std::string("metadata ") + key + " = '" + text + "' is not a number in [" +
             std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return "";
  };
  if (m.count("causal")) {
    if (m.at("causal") != "0" && m.at("causal") != "1")
      return "metadata causal = '" + m.at("causal") + "' is not 0 or 1";
    p.causal = m.at("causal") == "1";
  }
  double x;
  if (m.count("dropout")) {
    if (std::string why = number("dropout", 0.0, 0.999999, x); !why.empty()) return why;
    p.dropout = float(x);
  }
  if (m.count("scale")) {
    if (std::string why = number("scale", -1e30, 1e30, x); !why.empty()) return why;
    p.scale = float(x);
  }
  if (m.count("seed")) {
    const std::string& text = m.at("seed");
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
        text.size() > 20)
      return "metadata seed = '" + text + "' is not a non-negative integer";
    p.seed = std::stoull(text);
  }
  return "";
}

}  // namespace

std::string read_problem(const std::string& path, Problem& p) {
  try {
    const safetensors::Header h = safetensors::read_header(path);
    int64_t q[4], k[4], v[4];
    for (auto [name, dims] : {std::pair{"q", q}, {"k", k}, {"v", v}})
      if (std::string why = dims4(h, name, dims); !why.empty()) return why;
    const std::string dt = h.tensors.at("q").dtype;
    if (h.tensors.at("k").dtype != dt || h.tensors.at("v").dtype != dt)
      return "q, k and v must share one dtype (q is " + dt + ", k " + h.tensors.at("k").dtype +
             ", v " + h.tensors.at("v").dtype + ")";
    for (int d = 0; d < 4; ++d)
      if (k[d] != v[d])
        return "k " + shape_str({k, k + 4}) + " and v " + shape_str({v, v + 4}) +
               " must have the same shape";
    if (q[0] != k[0] || q[3] != k[3])
      return "q " + shape_str({q, q + 4}) + " and k " + shape_str({k, k + 4}) +
             " must agree on batch (dim 0) and head dim (dim 3)";
    p.batch = static_cast<int>(q[0]);
    p.heads = static_cast<int>(q[1]);
    p.heads_kv = static_cast<int>(k[1]);
    p.seqlen_q = static_cast<int>(q[2]);
    p.seqlen_k = static_cast<int>(k[2]);
    p.dim = static_cast<int>(q[3]);
    p.dtype = dt == "F16" ? DType::fp16 : DType::bf16;
    p.seqlens_q.clear();
    p.seqlens_k.clear();
    if (std::string why = read_lengths(path, h, "seqlens_q", q[0], p.seqlens_q); !why.empty())
      return why;
    if (std::string why = read_lengths(path, h, "seqlens_k", q[0], p.seqlens_k); !why.empty())
      return why;
    // The problem's other fields, where the file records them (--save does): the mask, the
    // scale, dropout and its seed. A file without them leaves p's (the flags').
    if (std::string why = read_metadata(h, p); !why.empty()) return why;
  } catch (const safetensors::FormatError& e) {
    return e.what();
  }
  return "";
}

std::string load_inputs(const std::string& path, const Problem& p, HostInputs& in) {
  try {
    const safetensors::Header h = safetensors::read_header(path);
    Problem again = p;
    if (std::string why = read_problem(path, again); !why.empty()) return why;
    if (again.q_elements() != p.q_elements() || again.kv_elements() != p.kv_elements() ||
        again.dtype != p.dtype)
      return "the file changed since it was first read";
    host_resize(in.q, p.q_elements(), "Q (host)");
    host_resize(in.k, p.kv_elements(), "K (host)");
    host_resize(in.v, p.kv_elements(), "V (host)");
    safetensors::read_tensor(path, h.tensors.at("q"), in.q.data());
    safetensors::read_tensor(path, h.tensors.at("k"), in.k.data());
    safetensors::read_tensor(path, h.tensors.at("v"), in.v.data());
  } catch (const safetensors::FormatError& e) {
    return e.what();
  }
  return "";
}

void save_tensors(const std::string& path, const std::string& step, const Problem& p,
                  const HostInputs& in, const std::vector<Bits16>& o,
                  const std::vector<float>& lse) {
  const std::string dt = p.dtype == DType::fp16 ? "F16" : "BF16";
  const int64_t B = p.batch, H = p.heads, Hkv = p.kv_heads(), Sq = p.seqlen_q, Sk = p.seqlen_k,
                D = p.dim;
  std::vector<safetensors::TensorOut> t = {
      {"q", dt, {B, H, Sq, D}, in.q.data(), in.q.size() * sizeof(Bits16)},
      {"k", dt, {B, Hkv, Sk, D}, in.k.data(), in.k.size() * sizeof(Bits16)},
      {"v", dt, {B, Hkv, Sk, D}, in.v.data(), in.v.size() * sizeof(Bits16)},
      {"o", dt, {B, H, Sq, D}, o.data(), o.size() * sizeof(Bits16)},
      {"lse", "F32", {B, H, Sq}, lse.data(), lse.size() * sizeof(float)}};
  if (!p.seqlens_q.empty())
    t.push_back({"seqlens_q", "I32", {B}, p.seqlens_q.data(), p.seqlens_q.size() * sizeof(int)});
  if (!p.seqlens_k.empty())
    t.push_back({"seqlens_k", "I32", {B}, p.seqlens_k.data(), p.seqlens_k.size() * sizeof(int)});
  auto num = [](double x) {
    std::ostringstream os;
    os.precision(9);
    os << x;
    return os.str();
  };
  const std::map<std::string, std::string> meta = {
      {"step", step},
      {"problem", p.describe()},
      {"causal", p.causal ? "1" : "0"},
      {"scale", num(p.softmax_scale())},
      {"dropout", num(p.dropout)},
      {"seed", std::to_string(p.seed)},
      {"layout", "q [B,H,Sq,D], k/v [B,Hkv,Sk,D], o as q, lse [B,H,Sq] natural log"}};
  safetensors::write(path, t, meta);
}

std::string check_output_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path f(path);
  const bool existed = fs::exists(f, ec);
  if (existed && fs::is_directory(f, ec)) return "is a directory";
  if (!existed) {
    const fs::path dir = f.parent_path().empty() ? fs::path(".") : f.parent_path();
    if (!fs::is_directory(dir, ec)) return "directory " + dir.string() + " does not exist";
  }
  // Opened, not only checked: access() says yes to root everywhere, where open() can still fail
  // (/proc, a read-only file system). Appending writes nothing; a file made here is removed.
  FILE* out = std::fopen(path.c_str(), "a");
  if (out == nullptr) return std::string("cannot open for writing (") + std::strerror(errno) + ")";
  std::fclose(out);
  if (!existed) std::remove(path.c_str());
  return "";
}

}  // namespace attn
