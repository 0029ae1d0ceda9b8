// The command line every step shares (the flags listed in ARCHITECTURE.md).
#pragma once

#include <string>

#include "common/problem.h"

namespace attn {

struct Options {
  Problem problem;
  std::string backend = "auto";      // auto | gpu | cpu
  std::string schedule = "forward";  // CPU backend fiber order: forward | reverse | random[:SEED]
  int iters = 5;
  int warmup = 1;
  std::string variant;  // kernel variant of a step that has several; empty: the step's default
  std::string csv;      // append a result row here when set
  bool check = true;
  bool quiet = false;
};

struct CliResult {
  int exit_code = -1;   // -1: go on and run; 0: --help printed; 2: invalid input
  std::string message;  // the help text, or the one-line reason for exit code 2
};

// Parses and validates the shared flags (problem validation included).
CliResult parse_cli(int argc, const char* const* argv, const std::string& program, Options& out);

}  // namespace attn
