// simt::where_t: the source location a CPU-backend intrinsic reports a misuse at (a defaulted last
// parameter, so it is the kernel's line). It is std::source_location where the standard library
// has it; clang 14 with libstdc++ 12 (Debian 12's default clang) has no std::source_location, so
// there it is the same interface built on the compilers' __builtin_FILE and __builtin_LINE.
#pragma once

#include <version>

#if defined(__cpp_lib_source_location)
#include <source_location>

namespace simt {
using where_t = std::source_location;
}  // namespace simt
#else
namespace simt {
class where_t {
 public:
  static constexpr where_t current(const char* file = __builtin_FILE(),
                                   unsigned line = __builtin_LINE()) noexcept {
    where_t w;
    w.file_ = file;
    w.line_ = line;
    return w;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  unsigned line_ = 0;
};
}  // namespace simt
#endif
