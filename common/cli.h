// The command line every step shares (the flags listed in docs/architecture.md).
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "common/problem.h"
#include "common/reference.h"

namespace attn {

struct HostInputs;

struct Options {
  Problem problem;
  std::string backend = "auto";      // auto | gpu | cpu
  std::string schedule = "forward";  // CPU backend fiber order: forward | reverse | random[:SEED]
  // -1: the backend's default, 20 timed samples after 2 warm-up ones on a GPU (a sample runs
  // once on each of the input sets that keep L2 cold: common/harness.cpp, time_runs); 1 timed run
  // and no warm-up on the CPU backend, where a run measures the emulator and can take minutes.
  // 0: the checked run alone, its time the row's (the Python binding; a profiler's one run).
  int iters = -1;
  int warmup = -1;
  std::string variant;  // kernel variant of a step that has several; empty: the step's default
  std::string rung;     // a rung of a step's ladder, by name or number; empty: the last (the step)
  std::string csv;      // append a result row here when set
  std::string load;     // take q, k, v (and per-batch lengths) from this safetensors file
  std::string save;     // write q, k, v, o, lse to this safetensors file
  bool check = true;
  bool quiet = false;
  // Where notes go as soon as they are known (the backend chosen, a long check ahead), and whether
  // to show progress of long CPU runs; unset (tests): notes end up in RunOutcome::message.
  std::function<void(const std::string&)> notice;
  bool show_progress = false;
  std::string config;       // a step's tile configuration by name; empty: the tuned table's
  std::string tuned_table;  // the tuned-configuration table; empty: the step's own
  // Count what Nsight Compute would (common/simt/counters.h) in the checked run, on the CPU
  // backend, and model the run on a named GPU (common/sol_model.h).
  bool counters = false;
  // Run the checked run's kernels as the counted copy does, every access checked against the
  // CPU backend's rules (docs/cpu_backend.md), without counting: the checks of --counters, sooner.
  bool instrumented = false;
  std::string model_gpu = "H100 SXM";
  // For a caller that holds the inputs (the Python binding, python/src/flashsteps.cpp): q, k, v
  // taken from here instead of generated or loaded (refused if they hold NaN or Inf outside a
  // batch's padding, as --load's), and O and LSE kept in RunOutcome.
  const HostInputs* inputs = nullptr;
  bool keep_outputs = false;
  // A backward step's (StepInfo::backward) from the same caller: dO and the forward's O and LSE
  // (common/reference.h; refused if, outside a batch's padding rows, dO or O hold NaN or Inf or
  // LSE NaN or +Inf), instead of dO drawn and O and LSE from the FP64 forward; with
  // keep_outputs, dQ, dK and dV are kept.
  const BackwardInputs* backward_inputs = nullptr;
  // For a caller whose arrays are on the GPU already (the binding's CUDA arrays): the step reads
  // Q, K, V and writes O, LSE in place at these device addresses (AttentionParams' layouts, on
  // gpu_device), launched once on `stream` (a cudaStream_t) and not waited for. Nothing is copied
  // and the values are not looked at, unless `check`: then the inputs and outputs are copied to
  // the host for the checks of --load and the FP64 comparison. Needs backend "gpu" (or "cpu" with
  // host memory and no stream: the CPU backend's device memory, where the tests run this path),
  // iters 0, and neither counters nor instrumented.
  // A backward step reads O and LSE there (the forward's) and dO, and writes dQ, dK and dV in place
  // (dout .. dv: a backward step's alone, each set for it).
  struct DeviceArrays {
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    void* o = nullptr;
    float* lse = nullptr;
    void* stream = nullptr;
    const void* dout = nullptr;
    void* dq = nullptr;
    void* dk = nullptr;
    void* dv = nullptr;
  };
  const DeviceArrays* device_arrays = nullptr;
  int gpu_device = 0;  // the CUDA device the GPU backend uses (the binding: the array's)
  // When set (by a signal handler), a CPU-backend run stops at its next block (a kernel) or row
  // group (step 0), and the outcome says "interrupted" (RunOutcome::interrupted).
  const std::atomic<bool>* interrupt = nullptr;
};

// Parses "3,0,17" into lengths; an empty item, a sign or anything not a number is refused.
// Returns "" or the reason.
std::string parse_lengths(const std::string& text, std::vector<int>& out);

struct CliResult {
  int exit_code = -1;   // -1: go on and run; 0: --help printed; 2: invalid input
  std::string message;  // the help text, or the one-line reason for exit code 2
};

// What a step's command line offers beyond the shared flags: a step that runs kernels (the CPU
// backend's --schedule, --counters), its variants (--variant), its tile configurations (--config,
// --tuned-table), its rungs (--rung), and the head dims it is built for (listed in --help; empty:
// any).
struct CliStep {
  std::string name;
  bool kernels = true;
  std::vector<std::string> variants;
  bool configs = false;
  std::vector<int> head_dims;
  std::vector<std::string> rungs;  // "name: idea", in course order (--rung); empty: one kernel
};

// Parses and validates the step's flags (problem validation included); a flag the step does not
// take is refused like an unknown one, and --help lists only the step's.
CliResult parse_cli(int argc, const char* const* argv, const CliStep& step, Options& out);
// Every flag (a step with kernels, variants and configurations).
CliResult parse_cli(int argc, const char* const* argv, const std::string& program, Options& out);

}  // namespace attn
