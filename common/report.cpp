#include "common/report.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace attn {

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> cols = {
      "step",     "backend",     "device",      "dtype",     "batch",        "heads",
      "heads_kv", "seqlen_q",    "seqlen_k",    "seqlens_k", "dim",          "causal",
      "dropout",  "scale",       "seed",        "iters",     "time_ms",      "tflops",
      "flops",    "max_abs_err", "lse_max_err", "checked",   "passed",       "schedule",
      "config",   "commit",      "toolkit",     "driver",    "sm_clock_mhz", "timestamp"};
  return cols;
}

namespace {

std::string num(double v, int precision = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

}  // namespace

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::vector<std::string> csv_fields(const ResultRow& r) {
  const Problem& p = r.problem;
  std::string lens;
  for (size_t b = 0; b < p.seqlens_k.size(); ++b)
    lens += (b ? ";" : "") + std::to_string(p.seqlens_k[b]);
  return {r.step,
          r.backend,
          r.device,
          dtype_name(p.dtype),
          std::to_string(p.batch),
          std::to_string(p.heads),
          std::to_string(p.kv_heads()),
          std::to_string(p.seqlen_q),
          std::to_string(p.seqlen_k),
          lens,
          std::to_string(p.dim),
          p.causal ? "1" : "0",
          num(p.dropout),
          num(p.softmax_scale(), 9),
          std::to_string(p.seed),
          std::to_string(r.iters),
          num(r.time_ms, 8),
          num(r.tflops, 8),
          num(p.flops(), 12),
          r.checked ? num(r.check.max_abs_err, 4) : "",
          r.checked ? num(r.check.lse_max_err, 4) : "",
          r.checked ? "1" : "0",
          r.checked ? (r.check.passed ? "1" : "0") : "",
          r.schedule,
          r.config,
          r.commit,
          r.toolkit,
          r.driver,
          std::to_string(r.sm_clock_mhz),
          r.timestamp};
}

std::string append_csv(const std::string& path, const ResultRow& r) {
  auto join = [](const std::vector<std::string>& fields) {
    std::string line;
    for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_escape(fields[i]);
    return line;
  };
  const std::string header = join(csv_columns());
  bool need_header = true;
  {
    std::ifstream in(path);
    std::string first;
    if (in && std::getline(in, first)) {
      if (first != header)
        return "--csv " + path + ": existing file has a different header; use a new file";
      need_header = false;
    }
  }
  std::ofstream out(path, std::ios::app);
  if (!out) return "--csv " + path + ": cannot open for writing";
  if (need_header) out << header << "\n";
  out << join(csv_fields(r)) << "\n";
  if (!out) return "--csv " + path + ": write failed";
  return "";
}

std::string format_result(const ResultRow& r) {
  std::ostringstream os;
  os << r.step << " [" << r.backend << ": " << r.device << "] " << r.problem.describe();
  if (!r.config.empty()) os << " config " << r.config << " (" << r.config_source << ")";
  os << "\n  ";
  os << "time " << num(r.time_ms, 4) << " ms (median of " << r.iters << "), " << num(r.tflops, 4)
     << " TFLOPS";
  if (r.backend != "gpu") os << " (CPU, not GPU performance)";
  if (!r.checked) {
    os << ", check skipped (--no-check)";
  } else {
    const Tolerance t = tolerance_for(r.problem.dtype);
    if (r.check.nonfinite_o + r.check.nonfinite_lse > 0)  // max|err| covers finite values only
      os << ", " << r.check.nonfinite_o << " O and " << r.check.nonfinite_lse
         << " LSE elements NaN or Inf";
    os << ", max|O-ref| " << num(r.check.max_abs_err, 3) << " (tol " << t.atol << " + " << t.rtol
       << "*|ref|), max|LSE-ref| " << num(r.check.lse_max_err, 3) << ": check "
       << (r.check.passed ? "PASSED" : "FAILED");
    if (!r.check.passed)
      os << "\n  " << r.check.bad_o << " O and " << r.check.bad_lse << " LSE elements bad, "
         << r.check.unwritten << " unwritten; first: " << r.check.first_failure;
  }
  return os.str();
}

}  // namespace attn
