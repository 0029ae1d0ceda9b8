// attn_suite's command line (suite.h): one line and exit status 2 for anything it cannot take.
#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>

#include "suite/suite.h"

namespace {

constexpr char kUsage[] =
    "attn_suite: every kernel of the course in one process (scripts/gpu_run.sh, docs/gpus.md)\n"
    "  attn_suite list [--kernels SETS]           the kernels: label, step, the step's flags\n"
    "  attn_suite check [options]                 each over the test matrix, against FP64\n"
    "  attn_suite time --shapes FILE [options]    each over the shapes of FILE, timed (the\n"
    "                                             forward's kernels, or with --backward step 6's)\n"
    "  attn_suite peaks [--csv FILE]              bf16 matrix-product rate, copy bandwidth\n"
    "  attn_suite run STEP [STEP's flags]         one step's executable (STEP --help)\n"
    "  attn_suite build                           GPU architectures, toolkit, commit\n"
    "SETS: steps, rungs, configs, baseline or all, comma separated\n";

// `run STEP ...`: the step's own main(), argv[0] being the step's name.
int run_step(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "attn_suite run: name a step (attn_suite --help lists the modes)\n";
    return 2;
  }
  std::string known;
  for (const attn::StepInfo& s : suite::all_steps()) {
    if (s.name == argv[2]) return attn::step_main(argc - 2, argv + 2, s);
    known += (known.empty() ? "" : ", ") + s.name;
  }
  std::cerr << "attn_suite run: unknown step '" << argv[2] << "' (" << known << ")\n";
  return 2;
}

// The options check and time share (suite::RunArgs).
void add_run_options(CLI::App* cmd, suite::RunArgs& a, const std::string& csv) {
  cmd->add_option("--backend", a.backend, "gpu | cpu")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--kernels", a.kernel_sets, "kernel sets")->capture_default_str();
  cmd->add_option("--budget", a.budget_s, "seconds; nothing new is started past it")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--hang", a.hang_s, "seconds a run may take before it counts as a hang")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--csv", a.csv, csv);
  cmd->add_option("--tuned-table", a.tuned_table, "step 4's tuned-configuration table");
}

int list(const std::string& sets) {
  try {
    for (const suite::Kernel& k : suite::kernels(sets))
      std::cout << k.label << "\t" << k.step->name << "\t" << k.flags() << "\n";
  } catch (const std::invalid_argument& e) {
    std::cerr << "attn_suite list: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "run") == 0) return run_step(argc, argv);
  CLI::App app{kUsage, "attn_suite"};
  app.require_subcommand(1);
  std::string list_sets = "all", peaks_csv;
  CLI::App* list_cmd = app.add_subcommand("list", "the kernels, one a line");
  list_cmd->add_option("--kernels", list_sets, "kernel sets")->capture_default_str();

  suite::CheckArgs c;
  CLI::App* check_cmd = app.add_subcommand("check", "every kernel over the test matrix");
  add_run_options(check_cmd, c, "one row per kernel and case");
  check_cmd->add_option("--cases", c.cases, "matrix (and tile boundaries) | sanitize (two small)")
      ->capture_default_str();
  check_cmd->add_option("--seed", c.seed, "inputs' seed (default: a fresh one, printed)");

  suite::TimeArgs t;
  CLI::App* time_cmd = app.add_subcommand("time", "kernels over a file of shapes, timed");
  add_run_options(time_cmd, t, "append result rows (the steps' CSV columns)");
  time_cmd->add_option("--shapes", t.shapes, "one shape a line, as a step's flags")->required();
  time_cmd->add_option("--iters", t.iters, "timed samples (median)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  time_cmd->add_option("--warmup", t.warmup, "untimed samples first")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  time_cmd->add_option("--cap-ms", t.cap_ms, "leave out runs predicted to take longer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  time_cmd->add_flag("--backward", t.backward,
                     "time the backward kernels of the sets (step 6 and its rungs) instead");

  CLI::App* build_cmd = app.add_subcommand("build", "what this binary was built from and for");
  CLI::App* peaks_cmd =
      app.add_subcommand("peaks", "this GPU's matrix-product rate and copy bandwidth");
  peaks_cmd->add_option("--csv", peaks_csv, "write the two measures here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "attn_suite: " << e.what() << "\n";
    return 2;
  }
  if (*list_cmd) return list(list_sets);
  if (*check_cmd) return suite::check(c);
  if (*time_cmd) return suite::time(t);
  if (*build_cmd) {
    std::cout << "architectures: " << ATTN_CUDA_ARCHITECTURES
              << "\ntoolkit: " << attn::cuda_toolkit_version()
              << "\ncommit: " << attn::build_commit() << "\n";
    return 0;
  }
  return suite::peaks(peaks_csv);
}
