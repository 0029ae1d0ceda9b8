// main() of every step: parse the shared CLI, build the inputs, run the step on the chosen backend,
// check it against the FP64 reference, time it, print and record the result.
//
//     int main(int argc, char** argv) {
//       return attn::step_main(argc, argv, {"step1_naive", &step1::cpu::run, &step1::gpu::run});
//     }
#pragma once

#include <string>
#include <vector>

#include "common/backend.h"
#include "common/cli.h"
#include "common/report.h"
#include "common/tensors.h"

namespace attn {

struct StepInfo {
  std::string name;
  // On the CPU: host code, or the kernels on the SIMT backend. nullptr: the step needs a GPU.
  StepFn cpu;
  StepFn gpu = nullptr;             // nullptr: the step has no GPU version
  std::vector<int> head_dims = {};  // supported head dims; empty: any the reference supports
  // Kernel variants of the step (e.g. {"sm80", "sm90a"}), picked with --variant and passed to the
  // run function in RunContext::variant; empty: the step has one kernel.
  std::vector<std::string> variants = {};
  // The variant used when --variant is not given, on the chosen backend; nullptr: the first one.
  std::string (*default_variant)(Backend& backend) = nullptr;
};

// A problem on a backend: inputs uploaded, outputs allocated and poisoned (so that anything a step
// leaves unwritten is detectable), all described by params(). Frees everything on destruction.
class DeviceProblem {
 public:
  DeviceProblem(Backend& be, const Problem& p, const HostInputs& in);
  ~DeviceProblem();
  DeviceProblem(const DeviceProblem&) = delete;
  DeviceProblem& operator=(const DeviceProblem&) = delete;

  const AttentionParams& params() const { return params_; }
  void download(std::vector<Bits16>& o, std::vector<float>& lse) const;

 private:
  void* alloc(size_t bytes, const char* label);
  Backend& be_;
  std::vector<void*> buffers_;
  AttentionParams params_{};
};

struct RunOutcome {
  int exit_code = 0;    // 0 passed (or not checked), 1 failed its check or faulted, 2 invalid
  std::string message;  // one line: why exit_code is 1 or 2; a notice otherwise (may be empty)
  bool ran = false;     // the step ran to the end: `row` is complete
  ResultRow row;
};

// Everything step_main does except parsing the command line and printing; tests call this.
RunOutcome run_step(const StepInfo& step, const Options& options);

int step_main(int argc, char** argv, const StepInfo& step);

// Build provenance, filled in at build time.
std::string build_commit();
std::string cuda_toolkit_version();

}  // namespace attn
