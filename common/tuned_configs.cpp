#include "common/tuned_configs.h"

#include <fstream>
#include <sstream>

namespace attn {

std::string read_tuned_table(const std::string& path, std::vector<TunedRow>& rows) {
  std::ifstream in(path);
  if (!in) return path + ": cannot open the tuned-configuration table";
  std::string line;
  bool header = false;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    if (!header) {
      if (line != "arch,dtype,dim,causal,config")
        return where + "expected the header arch,dtype,dim,causal,config";
      header = true;
      continue;
    }
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string field; std::getline(ss, field, ',');) f.push_back(field);
    if (f.size() != 5) return where + "expected 5 fields, found " + std::to_string(f.size());
    TunedRow r;
    r.arch = f[0];
    if (r.arch.empty()) return where + "empty arch";
    if (!parse_dtype(f[1])) return where + "dtype '" + f[1] + "' is not fp16 or bf16";
    r.dtype = f[1];
    try {
      size_t used = 0;
      r.dim = std::stoi(f[2], &used);
      if (used != f[2].size() || r.dim <= 0) throw std::invalid_argument(f[2]);
    } catch (const std::exception&) {
      return where + "dim '" + f[2] + "' is not a positive integer";
    }
    if (f[3] != "0" && f[3] != "1") return where + "causal '" + f[3] + "' is not 0 or 1";
    r.causal = f[3] == "1";
    if (f[4].empty()) return where + "empty config";
    r.config = f[4];
    for (const TunedRow& o : rows)
      if (o.arch == r.arch && o.dtype == r.dtype && o.dim == r.dim && o.causal == r.causal)
        return where + "a second row for " + r.arch + " " + r.dtype + " D=" + f[2] +
               " causal=" + f[3];
    rows.push_back(r);
  }
  if (!header) return path + ": no header line (arch,dtype,dim,causal,config)";
  return "";
}

std::string lookup_tuned(const std::vector<TunedRow>& rows, const std::string& arch,
                         const Problem& p) {
  for (const TunedRow& r : rows)
    if (r.arch == arch && r.dtype == dtype_name(p.dtype) && r.dim == p.dim && r.causal == p.causal)
      return r.config;
  return "";
}

}  // namespace attn
