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

// A step's GPU entry point for its StepInfo: `.gpu = ATTN_GPU_RUN(gpu::run)`. A CPU-only build (no
// nvcc, so no GPU copy of the kernels to link) has gpu_not_built in its place: the step still says
// it has a GPU kernel, and the harness never calls it, since such a build has no GPU backend.
// A step whose GPU copy is not built for any architecture the build targets (steps 4 and 5 when
// CMAKE_CUDA_ARCHITECTURES holds nothing from sm_80 on) is compiled with ATTN_STEP_GPU=0.
#ifndef ATTN_STEP_GPU
#define ATTN_STEP_GPU 1
#endif
#if ATTN_HAVE_GPU && ATTN_STEP_GPU
#define ATTN_GPU_RUN(fn) (&fn)
#else
#define ATTN_GPU_RUN(fn) (&::attn::gpu_not_built)
#endif

// The GPU entry of a kernel step in a CPU-only build (ATTN_GPU_RUN): throws if ever called.
void gpu_not_built(const AttentionParams& p, RunContext& ctx);

// A step's counted copy (--counters): declared with ATTN_COUNTED_DECL, `.counted =
// ATTN_COUNTED_RUN(counted::run)`. Only bin/counted/<step> links that copy (cmake/AttnStep.cmake):
// elsewhere the weak declaration resolves to null, and so does a build without counted copies.
#if ATTN_HAVE_COUNTERS
#define ATTN_COUNTED_DECL [[gnu::weak]]
#define ATTN_COUNTED_RUN(fn) (&fn)
#else
#define ATTN_COUNTED_DECL
#define ATTN_COUNTED_RUN(fn) (nullptr)
#endif

// The entry points of one kernel file, its CPU, GPU and counted copies, declared in the file's
// namespace (a rung's: `namespace rung1 { ATTN_KERNEL_ENTRIES }`), and a StepInfo::Rung made of
// them: ATTN_RUNG("swizzle", "what it adds", rung4).
#define ATTN_KERNEL_ENTRIES                                                          \
  namespace cpu {                                                                    \
  void run(const attn::AttentionParams& p, attn::RunContext& ctx);                   \
  }                                                                                  \
  namespace gpu {                                                                    \
  void run(const attn::AttentionParams& p, attn::RunContext& ctx);                   \
  }                                                                                  \
  namespace counted {                                                                \
  ATTN_COUNTED_DECL void run(const attn::AttentionParams& p, attn::RunContext& ctx); \
  }
#define ATTN_RUNG(NAME, IDEA, NS) \
  { NAME, IDEA, &NS::cpu::run, ATTN_GPU_RUN(NS::gpu::run), ATTN_COUNTED_RUN(NS::counted::run) }

struct StepInfo {
  std::string name;
  // On the CPU: host code, or the kernels on the SIMT backend. nullptr: the step needs a GPU.
  StepFn cpu;
  StepFn gpu = nullptr;             // nullptr: no GPU version (step0, or a CPU-only build)
  StepFn counted = nullptr;         // the counted copy (--counters); nullptr: not in this binary
  std::vector<int> head_dims = {};  // supported head dims; empty: any the reference supports
  // The compute capability the step's kernels need, e.g. "sm_80", and what for (steps 4 and 5:
  // mma.sync m16n8k16 and cp.async); empty: any the build targets (steps 1-3 run on sm_75 too).
  // On an older GPU, or the CPU backend presenting as one (SIMT_PRESENT_AS), the step refuses.
  std::string min_arch = {};
  std::string min_arch_why = {};
  // Tile configurations the step can run, the default first (empty: none to choose), the head
  // dims each is built for, and the table of tuned choices it reads at run time.
  struct Config {
    std::string name;
    std::vector<int> head_dims;
  };
  std::vector<Config> configs = {};
  std::string tuned_table = {};
  // Kernel variants of the step (e.g. {"sm80", "sm90a"}), picked with --variant and passed to the
  // run function in RunContext::variant; empty: the step has one kernel.
  std::vector<std::string> variants = {};
  // The variant used when --variant is not given, on the chosen backend; nullptr: the first one.
  std::string (*default_variant)(Backend& backend) = nullptr;
  // Why a variant cannot run on this backend ("" if it can): invalid input, exit 2.
  std::string (*variant_unavailable)(Backend& backend, const std::string& variant) = nullptr;
  // The ladder of a step whose lesson is several ideas (--rung NAME or its number): complete
  // kernels in course order, each one idea more than the one before. The last is the step's own
  // kernel (cpu, gpu and counted above), the only one with tile configurations; an earlier one
  // runs as "<step>[<rung>]" in the result line and the CSV. Empty: the step is one kernel.
  struct Rung {
    std::string name;  // e.g. "swizzle"
    std::string idea;  // one line: what this rung adds to the one before
    StepFn cpu;
    StepFn gpu = nullptr;
    StepFn counted = nullptr;
    // The variant the rung's kernel is a step towards (step 5's ladder leads to sm90a): --rung
    // runs that variant, and refuses another --variant. Empty: the step has no variants.
    std::string variant = {};
  };
  std::vector<Rung> rungs = {};
  // A backward step (step 6): its kernels read the forward's O and LSE and the upstream gradient
  // dO and write dQ, dK and dV (RunContext::backward); the harness checks those against the FP64
  // gradients (check_gradients), and times it at 2.5 times the forward's FLOPs.
  bool backward = false;
};

// A problem on a backend: inputs uploaded, outputs allocated and poisoned (so that anything a step
// leaves unwritten is detectable), all described by params(). Frees everything on destruction.
class DeviceProblem {
 public:
  DeviceProblem(Backend& be, const Problem& p, const HostInputs& in);
  // The caller's device arrays in place (Options::DeviceArrays): only the per-batch lengths are
  // uploaded; O and LSE are poisoned when `poison` (a checked run), else left as they are.
  DeviceProblem(Backend& be, const Problem& p, const Options::DeviceArrays& arrays, bool poison);
  ~DeviceProblem();
  DeviceProblem(const DeviceProblem&) = delete;
  DeviceProblem& operator=(const DeviceProblem&) = delete;

  const AttentionParams& params() const { return params_; }
  void download(std::vector<Bits16>& o, std::vector<float>& lse) const;

 private:
  void* alloc(size_t bytes, const char* label);
  void set_problem(const Problem& p);  // the sizes, flags and per-batch lengths
  Backend& be_;
  std::vector<void*> buffers_;
  AttentionParams params_{};
};

struct RunOutcome {
  int exit_code = 0;         // 0 passed (or not checked), 1 failed its check or faulted, 2 invalid
                             // input, or a problem too large for this machine
  std::string message;       // one line: why exit_code is 1 or 2; a notice otherwise (may be empty)
  bool ran = false;          // the step ran to the end: `row` is complete
  bool interrupted = false;  // Options::interrupt was set: the run stopped early (exit_code 1)
  bool out_of_memory = false;  // exit_code 2 because the problem does not fit (device or host)
  ResultRow row;
  std::vector<Bits16> o;  // Options::keep_outputs: O and LSE, layouts as in AttentionParams
  std::vector<float> lse;
  Gradients grads;  // Options::keep_outputs of a backward step: dQ, dK and dV
};

// Everything step_main does except parsing the command line and printing; tests call this.
RunOutcome run_step(const StepInfo& step, const Options& options);

int step_main(int argc, char** argv, const StepInfo& step);

// Build provenance, filled in at build time.
std::string build_commit();
std::string cuda_toolkit_version();

}  // namespace attn
