// An environment variable set for a scope and put back as it was after it: a test that needs the
// CPU backend to present another number of SMs (SIMT_SMS) or workers (SIMT_WORKERS).
#pragma once

#include <cstdlib>
#include <string>

namespace attn_test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* before = std::getenv(name);
    had_ = before != nullptr;
    if (had_) saved_ = before;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, saved_.c_str(), 1) : unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string saved_;
};

}  // namespace attn_test
