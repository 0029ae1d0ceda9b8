// The two places a step can run, behind one interface: the CPU (host memory; kernels run on the
// SIMT backend) and a CUDA GPU (cudaMalloc, CUDA events). The harness only talks to this.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/attention_params.h"

namespace attn {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;    // "cpu" or "gpu"
  virtual std::string device() const = 0;  // for result rows
  virtual std::string driver() const = 0;  // CUDA driver version or "none"
  // Device memory. The CPU backend surrounds every allocation with guard zones (see simt/memory.h).
  virtual void* alloc(size_t bytes, const std::string& label) = 0;
  virtual void release(void* ptr) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Fills device memory with the poison byte (check.h): unwritten outputs are then detectable.
  virtual void poison(void* dst, size_t bytes) = 0;
  // Runs `fn` once and returns how long it took in milliseconds (CUDA events on the GPU).
  virtual double time_ms(const std::function<void()>& fn) = 0;
  // Evicts the inputs from the GPU's L2 cache (by overwriting a buffer twice its size), so that a
  // timed run reads them from memory as a real first use would. Called outside the timed window.
  virtual void flush_l2() {}
  // The size of the device's L2 cache in bytes, 0 where there is none to speak of (the CPU).
  virtual size_t l2_bytes() const { return 0; }
  // The SM clock in MHz as the device reports it, or 0 where unknown (the CPU).
  virtual int sm_clock_mhz() const { return 0; }
  // The architecture tuned tile configurations are looked up by: "sm_80", "sm_90a", ... on the
  // GPU (its compute capability), "cpu" on the CPU backend.
  virtual std::string arch() const { return name(); }
};

std::unique_ptr<Backend> make_cpu_backend();
// Returns nullptr and sets `why_not` when no usable CUDA device is present, or when this is a
// CPU-only build (why_not is then kBuiltWithoutToolkit). `device`: the CUDA device ordinal.
// `stream` (a cudaStream_t; nullptr: the default stream) is where the backend copies, times and
// launches (LaunchStream). `callers_stream`: it is the caller's, with the caller's work queued on
// it; the backend then also allocates and frees in the stream's order, and waits for it only
// where a copy to the host needs the data. The device that was current comes back when the
// backend is destroyed.
std::unique_ptr<Backend> make_gpu_backend(std::string& why_not, int device = 0,
                                          void* stream = nullptr, bool callers_stream = false);
// False in a CPU-only build (configured without nvcc, or with -DATTN_GPU=OFF).
bool gpu_backend_built();
inline constexpr char kBuiltWithoutToolkit[] = "built without the CUDA toolkit";

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
  std::function<void(uint64_t done, uint64_t total)> progress;
  // The tile configuration the harness chose (StepInfo::configs); empty for steps without any.
  std::string config;
  // The kernel variant to run (StepInfo::variants); empty for a step with one kernel.
  std::string variant;
  // The tile the step's kernel ran with, set by its run function: query rows per block (Br),
  // keys per tile (Bc) and the shared-memory stages its K/V tiles cycle through (1: one buffer
  // every tile reuses); 0 where the step has no tiles. The tests derive tile-boundary shapes from
  // it, and hold the test matrix to wrapping every kernel's ring.
  struct Tile {
    int rows = 0, keys = 0, stages = 1;
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
  struct Block {
    void* ptr;
    size_t bytes;
  };
  Backend& backend_;
  std::map<std::string, Block> scratch_;
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
