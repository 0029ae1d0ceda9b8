// The table of tuned tile configurations a step reads at run time (step4_tensorcore/
// tuned_configs.csv): one row per (arch, dtype, dim, causal) naming the configuration that
// scripts/autotune.py found fastest there. Lines starting with '#' are comments; the first other
// line is the header `arch,dtype,dim,causal,config`.
#pragma once

#include <string>
#include <vector>

#include "common/problem.h"

namespace attn {

struct TunedRow {
  std::string arch;  // as the backend presents it: sm_80, sm_90a, ... or cpu
  std::string dtype;
  int dim = 0;
  bool causal = false;
  std::string config;
};

// Parses the table in `path`. Returns an empty string, or one line saying what is wrong (the
// file, the line number and why): a missing file, a bad header, a malformed field, a duplicate.
std::string read_tuned_table(const std::string& path, std::vector<TunedRow>& rows);

// The configuration of the row matching (arch, p.dtype, p.dim, p.causal), or "" if none does.
std::string lookup_tuned(const std::vector<TunedRow>& rows, const std::string& arch,
                         const Problem& p);

}  // namespace attn
