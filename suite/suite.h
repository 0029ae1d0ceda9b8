// attn_suite: every kernel of the course in one process, for a GPU run that has minutes, not hours
// (scripts/gpu_run.sh, docs/gpus.md). Its modes:
//   list    the kernels: every step's own kernel (each variant), every rung, every configuration;
//   check   each of them over the test matrix and the tile-boundary shapes, fresh inputs each run;
//   time    each of them over a file of shapes, timed with the harness's method (the forward
//           kernels, or with --backward the backward's);
//   peaks   the GPU's bf16 matrix-product rate and device-to-device copy bandwidth;
//   run     one step's own executable (its command line), for the profilers.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/harness.h"

namespace suite {

// One kernel the suite runs: a step with the options that select it.
struct Kernel {
  std::string label;  // as result rows name it, "step4_tensorcore[swizzle]", with a configuration
                      // other than the default after a space: "step4_tensorcore br64_bc32_w4_s3"
  const attn::StepInfo* step = nullptr;
  std::string rung, variant, config;
  std::string set;  // which kernel set it belongs to: steps, rungs, configs or baseline
  // The options that run it, on top of `base`.
  attn::Options options(const attn::Options& base) const;
  // The same as flags of its step's command line ("--rung swizzle"), for `list`.
  std::string flags() const;
};

// The kernel sets, in this order: "steps" (each step's own kernel, and each variant of a step that
// has several), "rungs" (every rung of every ladder but its last, which is the step's own kernel),
// "configs" (step 4's tile configurations beside the default) and "baseline" (the cuBLAS unfused
// pipeline, where the build has GPU code). `sets` is a comma-separated list of them, or "all";
// returns the kernels in the order above, or throws std::invalid_argument naming an unknown set.
std::vector<Kernel> kernels(const std::string& sets);

// Every step, step 0 included (for `run`), and the baseline where it is built.
const std::vector<attn::StepInfo>& all_steps();

// A time budget in seconds (<= 0: none), counted from construction.
class Budget {
 public:
  explicit Budget(double seconds) : seconds_(seconds) {}
  bool spent() const { return seconds_ > 0 && elapsed() >= seconds_; }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double seconds_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// "" when `backend` ("gpu" or "cpu") can run here, else why not (no CUDA device, say; or a CUDA
// context that an earlier kernel's fault has left unusable for the rest of the process).
std::string backend_unavailable(const std::string& backend);

// A run that never returns (a deadlocked kernel) cannot be stopped but by ending the process: arm()
// before each run, naming it, disarm() after; a run longer than `seconds` (<= 0: no limit) prints
// "attn_suite: NAME has not returned after N s: a hang" and ends the process with exit status 4.
class Watchdog {
 public:
  explicit Watchdog(double seconds);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  void arm(const std::string& what);
  void disarm();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The modes; each returns the process's exit status: 0, 1 for a failed check or run, 2 for invalid
// input, 3 when its budget ran out before every kernel ran (and nothing failed), 4 for a hang
// (Watchdog).
// What check and time share: the backend, the kernel sets, the CSV to write, step 4's tuned
// table, the budget and the hang limit (seconds, <= 0: none).
struct RunArgs {
  std::string backend = "gpu", kernel_sets, csv, tuned_table;
  double budget_s = 0, hang_s = 0;
};

struct CheckArgs : RunArgs {
  CheckArgs() { kernel_sets = "steps,rungs,configs"; }
  std::string cases = "matrix";
  uint64_t seed = 0;  // 0: a fresh one
};
int check(const CheckArgs& args);

struct TimeArgs : RunArgs {
  TimeArgs() { kernel_sets = "steps,baseline"; }
  std::string shapes;
  int iters = 20, warmup = 2;
  double cap_ms = 40;
  bool backward = false;  // the backward kernels of the sets instead of the forward ones
};
int time(const TimeArgs& args);

int peaks(const std::string& csv);

}  // namespace suite
