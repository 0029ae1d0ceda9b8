// Where a kernel line is, so that a test can require a report to name it: the line number of
// the first line of `file` (relative to the source root, ATTN_SOURCE_DIR) containing `text`,
// 0 if none does.
#pragma once

#include <fstream>
#include <string>

namespace attn_test {

inline int line_of(const std::string& file, const std::string& text) {
  std::ifstream in(std::string(ATTN_SOURCE_DIR) + "/" + file);
  int n = 0;
  for (std::string line; std::getline(in, line);)
    if (++n, line.find(text) != std::string::npos) return n;
  return 0;
}

}  // namespace attn_test
