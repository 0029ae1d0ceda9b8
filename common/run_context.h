// What a step's run function receives besides the problem (RunContext), its signature (StepFn),
// and the stream its launches go to: all a kernel file needs of the harness. Kept apart from
// common/backend.h, whose <functional> and <memory> each nvcc run of a kernel file would otherwise
// parse twice (host and device), about a second of every GPU object's build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/attention_params.h"

namespace attn {

class Backend;  // common/backend.h

// What a step's run function receives besides the problem: the backend, and scratch memory that
// persists across the runs of one invocation (so only the first run pays for allocation).
class RunContext {
 public:
  explicit RunContext(Backend& backend) : backend_(backend) {}
  ~RunContext();
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  template <typename T>
  T* scratch(const std::string& label, size_t count) {
    return static_cast<T*>(scratch_bytes_for(label, count * sizeof(T)));
  }
  // Total scratch memory the step asked for (0 for a fused kernel that writes only O and LSE).
  size_t scratch_bytes() const;
  Backend& backend() { return backend_; }

  // True on the run whose output is checked: a step may verify extra invariants then.
  bool verify = false;
  // Where a step that is not a kernel (step 0) reports its progress, `done` of `total` rows, from
  // any thread; empty where nobody shows it. Kernels report through the CPU backend's launches.
  // (A function and its argument rather than a std::function: this header is in every kernel
  // file's GPU compile, where <functional> would cost each nvcc run a second of parsing.)
  struct Progress {
    void (*fn)(void* arg, uint64_t done, uint64_t total) = nullptr;
    void* arg = nullptr;
    explicit operator bool() const { return fn != nullptr; }
    void operator()(uint64_t done, uint64_t total) const { fn(arg, done, total); }
    // Calls f(done, total); f must outlive the Progress.
    template <typename F>
    static Progress of(F& f) {
      return {[](void* a, uint64_t done, uint64_t total) { (*static_cast<F*>(a))(done, total); },
              &f};
    }
  };
  Progress progress;
  // The tile configuration the harness chose (StepInfo::configs); empty for steps without any.
  std::string config;
  // The kernel variant to run (StepInfo::variants); empty for a step with one kernel.
  std::string variant;
  // The tile the step's kernel ran with, set by its run function: query rows per block (Br),
  // keys per tile (Bc) and the shared-memory stages its K/V tiles cycle through (1: one buffer
  // every tile reuses), the parts each query tile's keys are split into across blocks (1: a
  // block sees all of them), and the query heads a tile's rows hold (a GQA group packed: rows /
  // heads of each); 0 where the step has no tiles. The tests derive tile-boundary shapes
  // from it, and hold the test matrix to wrapping every kernel's ring.
  struct Tile {
    int rows = 0, keys = 0, stages = 1, splits = 1, heads = 1;
  } tile;
  // A backward step's tensors besides the forward's (StepInfo::backward): set by the harness for
  // step 6, null for every other step. backward_params() puts them together with the forward's.
  struct BackwardTensors {
    const void* dout;
    void* dq;
    void* dk;
    void* dv;
  };
  const BackwardTensors* backward = nullptr;
  BackwardParams backward_params(const AttentionParams& p) const;

 private:
  void* scratch_bytes_for(const std::string& label, size_t bytes);
  struct Scratch;  // the blocks by label (backend.cpp)
  Backend& backend_;
  Scratch* scratch_ = nullptr;
};

// The CUDA stream this host thread launches kernels on (common/launch.h), as a cudaStream_t;
// nullptr, the default, is the default stream. Set for a scope by LaunchStream (a GPU backend made
// with a stream holds one).
void* launch_stream();
class LaunchStream {
 public:
  explicit LaunchStream(void* stream);
  ~LaunchStream();
  LaunchStream(const LaunchStream&) = delete;
  LaunchStream& operator=(const LaunchStream&) = delete;

 private:
  void* previous_;
};

// A step's entry point: computes O and LSE for `p` (device pointers of the chosen backend).
using StepFn = void (*)(const AttentionParams& p, RunContext& ctx);

// Thrown for CUDA runtime errors, with the failing call and its location.
void cuda_check(int status, const char* call, const char* file, int line);
#define ATTN_CUDA_CHECK(call) ::attn::cuda_check(static_cast<int>(call), #call, __FILE__, __LINE__)

}  // namespace attn
