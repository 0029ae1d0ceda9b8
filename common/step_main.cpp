// A step executable's main: the command line (cli.cpp, CLI11), the run (harness.cpp), and what it
// prints. Apart from harness.cpp so that the Python package, which has no command line, builds
// without CLI11 (the library attn_cli, common/CMakeLists.txt).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "common/cli.h"
#include "common/harness.h"
#include "common/report.h"

namespace attn {

namespace {

// "name: idea" for each rung, as --help lists them.
std::vector<std::string> rung_lines(const StepInfo& step) {
  std::vector<std::string> lines;
  for (const auto& r : step.rungs) lines.push_back(r.name + ": " + r.idea);
  return lines;
}

}  // namespace

int step_main(int argc, char** argv, const StepInfo& step) {
  Options opt;
  const CliResult cli = parse_cli(argc, argv,
                                  CliStep{step.name, step.gpu != nullptr, step.variants,
                                          !step.configs.empty(), step.head_dims, rung_lines(step)},
                                  opt);
  if (cli.exit_code == 0) {
    std::cout << cli.message;
    return 0;
  }
  if (cli.exit_code > 0) {
    std::cerr << cli.message << "\n";
    return cli.exit_code;
  }
  if ((opt.counters || opt.instrumented) && step.counted == nullptr && step.gpu != nullptr) {
    // The counted copy lives in bin/counted/<step> (cmake/AttnStep.cmake): run that instead.
    std::string self(4096, '\0');
    const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
    self.resize(n > 0 ? size_t(n) : 0);
    const size_t slash = self.rfind('/');
    const std::string counted = slash == std::string::npos
                                    ? ""
                                    : self.substr(0, slash) + "/counted/" + self.substr(slash + 1);
    if (!counted.empty() && access(counted.c_str(), X_OK) == 0) {
      execv(counted.c_str(), argv);
      std::cerr << step.name << ": " << (opt.counters ? "--counters" : "--instrumented")
                << ": cannot run " << counted << ": " << std::strerror(errno) << "\n";
      return 2;
    }
    std::cerr << step.name << ": " << (opt.counters ? "--counters" : "--instrumented")
              << ": this build has no counted copy of " << step.name << " (bin/counted/"
              << step.name << ": built by g++ with ATTN_COUNTERS on)\n";
    return 2;
  }
  opt.notice = [](const std::string& line) { std::cerr << line << "\n"; };
  opt.show_progress = isatty(STDERR_FILENO) != 0;
  const RunOutcome r = run_step(step, opt);
  if (!r.message.empty()) std::cerr << r.message << "\n";
  if (!r.ran) return r.exit_code;
  std::cout << (opt.quiet ? "" : format_result(r.row) + "\n");
  if (r.row.counted && !opt.quiet) std::cout << format_counters(r.row) << "\n";
  if (opt.quiet)
    std::cout << csv_escape(r.row.step) << " " << r.row.time_ms << " ms "
              << (r.row.checked ? (r.row.check.passed ? "PASSED" : "FAILED") : "unchecked") << "\n";
  if (!opt.csv.empty()) {
    if (const std::string err = append_csv(opt.csv, r.row); !err.empty()) {
      std::cerr << step.name << ": " << err << "\n";
      return 2;
    }
  }
  return r.exit_code;
}

}  // namespace attn
