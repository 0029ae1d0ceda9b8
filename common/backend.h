// The two places a step can run, behind one interface: the CPU (host memory; kernels run on the
// SIMT backend) and a CUDA GPU (cudaMalloc, CUDA events). The harness only talks to this. A
// step's kernel file needs only what its run function receives (common/run_context.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/run_context.h"

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
  // Sets device memory to zero, in the order of the launches that follow (a counter a kernel
  // counts up from zero: attn::zero_device).
  virtual void zero(void* dst, size_t bytes) = 0;
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

}  // namespace attn
