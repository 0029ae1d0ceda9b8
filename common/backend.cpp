#include "common/backend.h"

#if ATTN_HAVE_GPU
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/memory.h"
#include "common/simt/memory.h"

namespace attn {

void cuda_check(int status, const char* call, const char* file, int line) {
  if (status == 0) return;  // cudaSuccess
#if ATTN_HAVE_GPU
  const std::string what = cudaGetErrorString(static_cast<cudaError_t>(status));
#else
  const std::string what = "error " + std::to_string(status);
#endif
  throw std::runtime_error("CUDA error: " + what + " in " + call + " at " + file + ":" +
                           std::to_string(line));
}

namespace {
thread_local void* t_launch_stream = nullptr;
}

void* launch_stream() {
  return t_launch_stream;
}

LaunchStream::LaunchStream(void* stream) : previous_(t_launch_stream) {
  t_launch_stream = stream;
}

LaunchStream::~LaunchStream() {
  t_launch_stream = previous_;
}

struct RunContext::Scratch {
  struct Block {
    void* ptr;
    size_t bytes;
  };
  std::map<std::string, Block> blocks;
};

RunContext::~RunContext() {
  if (scratch_ == nullptr) return;
  for (auto& [label, block] : scratch_->blocks) backend_.release(block.ptr);
  delete scratch_;
}

void* RunContext::scratch_bytes_for(const std::string& label, size_t bytes) {
  if (scratch_ == nullptr) scratch_ = new Scratch;
  auto& blocks = scratch_->blocks;
  auto it = blocks.find(label);
  if (it != blocks.end() && it->second.bytes >= bytes) return it->second.ptr;
  if (it != blocks.end()) {
    backend_.release(it->second.ptr);
    blocks.erase(it);
  }
  void* ptr = backend_.alloc(bytes, label);
  blocks[label] = {ptr, bytes};
  return ptr;
}

void zero_device(RunContext& ctx, void* ptr, size_t bytes) {
  ctx.backend().zero(ptr, bytes);
}

BackwardParams RunContext::backward_params(const AttentionParams& p) const {
  if (backward == nullptr)
    throw std::logic_error(
        "a backward step ran without the backward's tensors (RunContext::backward)");
  BackwardParams b;
  static_cast<AttentionParams&>(b) = p;
  b.dout = backward->dout, b.dq = backward->dq, b.dk = backward->dk, b.dv = backward->dv;
  return b;
}

size_t RunContext::scratch_bytes() const {
  size_t total = 0;
  if (scratch_ != nullptr)
    for (const auto& [label, block] : scratch_->blocks) total += block.bytes;
  return total;
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string device() const override {
    return cpu_model() + " x" + std::to_string(std::thread::hardware_concurrency());
  }
  std::string driver() const override { return "none"; }
  // Device memory is host memory here: the same limit, and the same refusal, applies.
  void* alloc(size_t bytes, const std::string& label) override {
    require_host_memory(label + " (CPU-backend device memory)", bytes);
    try {
      return simt::device_malloc(bytes, label);
    } catch (const std::bad_alloc&) {
      throw_out_of_memory("host", label + " (CPU-backend device memory)", bytes,
                          host_memory_available());
    }
  }
  void release(void* ptr) override { simt::device_free(ptr); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void poison(void* dst, size_t bytes) override { std::memset(dst, kPoisonByte, bytes); }
  void zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  double time_ms(const std::function<void()>& fn) override {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
};

#if ATTN_HAVE_GPU
// A device's properties, read once per process (cudaGetDeviceProperties reads every attribute,
// slow enough to show in a call from Python that launches in place). False where it fails.
bool device_properties(int device, cudaDeviceProp& prop) {
  static std::mutex mutex;
  static std::map<int, cudaDeviceProp> known;
  std::lock_guard lock(mutex);
  auto it = known.find(device);
  if (it == known.end()) {
    cudaDeviceProp read{};
    if (cudaGetDeviceProperties(&read, device) != cudaSuccess) {
      cudaGetLastError();  // clear it
      return false;
    }
    it = known.emplace(device, read).first;
  }
  prop = it->second;
  return true;
}

// Host-to-device copies on a caller's stream, which the call must not wait on: from pageable
// memory cudaMemcpyAsync may wait for the stream first (the CUDA Runtime API's "API
// synchronization behavior"), from pinned memory it does not. The bytes go into a block of pinned
// memory, copied from there in the stream's order; a block is taken again once the event recorded
// after its copy has completed. The pool is the process's, a list per device, never given back.
void staged_upload(int device, void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  struct Block {
    void* host;
    size_t bytes;
    cudaEvent_t copied;  // recorded after the block's last copy
  };
  static std::mutex mutex;
  static std::map<int, std::vector<Block>> pools;
  std::lock_guard lock(mutex);
  std::vector<Block>& pool = pools[device];
  Block* block = nullptr;
  for (Block& b : pool) {
    if (b.bytes < bytes) continue;
    const cudaError_t done = cudaEventQuery(b.copied);
    if (done == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: the copy is in flight (clear it)
      continue;
    }
    ATTN_CUDA_CHECK(done);
    block = &b;
    break;
  }
  if (block == nullptr) {
    Block b{nullptr, std::max<size_t>(bytes, 4096), nullptr};
    ATTN_CUDA_CHECK(cudaHostAlloc(&b.host, b.bytes, cudaHostAllocDefault));
    if (const cudaError_t err = cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming);
        err != cudaSuccess) {
      cudaFreeHost(b.host);
      ATTN_CUDA_CHECK(err);
    }
    block = &pool.emplace_back(b);
  }
  std::memcpy(block->host, src, bytes);
  ATTN_CUDA_CHECK(cudaMemcpyAsync(dst, block->host, bytes, cudaMemcpyHostToDevice, stream));
  ATTN_CUDA_CHECK(cudaEventRecord(block->copied, stream));
}

// The GPU backend exists only in a build with the CUDA toolkit (ATTN_HAVE_GPU); a CPU-only build
// has no cudart to call.
class GpuBackend final : public Backend {
 public:
  // `stream_ordered`: the stream is the caller's (the default one included), whose work may still
  // be queued: memory then comes from the stream-ordered allocator, since cudaFree would wait for
  // the whole device. Otherwise (the step programs) cudaMalloc and cudaFree.
  GpuBackend(int device, cudaStream_t stream, bool stream_ordered)
      : device_(device), stream_(stream), stream_ordered_(stream_ordered), launch_(stream) {
    ATTN_CUDA_CHECK(cudaGetDevice(&previous_device_));
    ATTN_CUDA_CHECK(cudaSetDevice(device_));
    try {
      if (!device_properties(device_, prop_))
        ATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop_, device_));
      ATTN_CUDA_CHECK(cudaEventCreate(&start_));
      ATTN_CUDA_CHECK(cudaEventCreate(&stop_));
      int l2 = 0;
      ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_));
      flush_bytes_ = 2 * static_cast<size_t>(l2);
    } catch (...) {  // no destructor runs: put back what the destructor would
      if (start_) cudaEventDestroy(start_);
      cudaSetDevice(previous_device_);
      throw;
    }
  }
  ~GpuBackend() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    if (flush_buffer_) release(flush_buffer_);
    cudaSetDevice(previous_device_);
  }
  size_t l2_bytes() const override { return flush_bytes_ / 2; }
  void flush_l2() override {
    if (flush_bytes_ == 0) return;
    if (!flush_buffer_) flush_buffer_ = alloc(flush_bytes_, "the L2 flush buffer");
    ATTN_CUDA_CHECK(cudaMemsetAsync(flush_buffer_, 0, flush_bytes_, stream_));
  }
  int sm_clock_mhz() const override {
    int khz = 0;  // cudaDevAttrClockRate: the peak SM clock, in kHz
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device_) != cudaSuccess) return 0;
    return khz / 1000;
  }
  std::string name() const override { return "gpu"; }
  std::string arch() const override {
    // The build's architecture names: Hopper's features (wgmma, TMA) need sm_90a.
    return "sm_" + std::to_string(prop_.major) + std::to_string(prop_.minor) +
           (prop_.major == 9 && prop_.minor == 0 ? "a" : "");
  }
  std::string device() const override { return prop_.name; }
  std::string driver() const override {
    int v = 0;
    ATTN_CUDA_CHECK(cudaDriverGetVersion(&v));
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  }
  // On the caller's stream (the default one included), memory is allocated and freed in the
  // stream's order (the stream-ordered allocator), so that a buffer freed after a launch is not
  // reused before the launch ends; alloc and release choose by the same flag.
  void* alloc(size_t bytes, const std::string& label) override {
    void* ptr = nullptr;
    const cudaError_t err =
        stream_ordered_ ? cudaMallocAsync(&ptr, bytes, stream_) : cudaMalloc(&ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw_out_of_memory("GPU", label, bytes, free);
    }
    ATTN_CUDA_CHECK(err);
    return ptr;
  }
  void release(void* ptr) override {
    if (stream_ordered_)
      cudaFreeAsync(ptr, stream_);
    else
      cudaFree(ptr);
  }
  // `src` may go as soon as the call returns. On the caller's stream the copy is staged through
  // pinned memory, so that the call does not wait for the stream (staged_upload); the steps'
  // programs, which wait for every run anyway, copy from where the bytes are.
  void upload(void* dst, const void* src, size_t bytes) override {
    if (stream_ordered_)
      staged_upload(device_, dst, src, bytes, stream_);
    else
      ATTN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void download(void* dst, const void* src, size_t bytes) override {
    ATTN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void poison(void* dst, size_t bytes) override {
    ATTN_CUDA_CHECK(cudaMemsetAsync(dst, kPoisonByte, bytes, stream_));
  }
  void zero(void* dst, size_t bytes) override {
    ATTN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
  }
  double time_ms(const std::function<void()>& fn) override {
    ATTN_CUDA_CHECK(cudaEventRecord(start_, stream_));
    fn();
    ATTN_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    ATTN_CUDA_CHECK(cudaEventSynchronize(stop_));
    ATTN_CUDA_CHECK(cudaGetLastError());
    float ms = 0;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  int device_;
  int previous_device_ = 0;
  cudaStream_t stream_;
  bool stream_ordered_;
  LaunchStream launch_;  // the backend's launches go to stream_
  cudaDeviceProp prop_{};
  cudaEvent_t start_{}, stop_{};
  void* flush_buffer_ = nullptr;
  size_t flush_bytes_ = 0;
};
#endif  // ATTN_HAVE_GPU

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

bool gpu_backend_built() {
  return ATTN_HAVE_GPU != 0;
}

std::unique_ptr<Backend> make_gpu_backend(std::string& why_not, int device, void* stream,
                                          bool callers_stream) {
#if !ATTN_HAVE_GPU
  (void)device;
  (void)stream;
  (void)callers_stream;
  why_not = kBuiltWithoutToolkit;
  return nullptr;
#else
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    int driver = 0;
    cudaDriverGetVersion(&driver);
    why_not = driver == 0 ? std::string("no CUDA device (no NVIDIA driver is loaded)")
                          : std::string("no usable CUDA device (") + cudaGetErrorString(err) + ")";
    cudaGetLastError();  // clear the sticky error
    return nullptr;
  }
  if (count == 0) {
    why_not = "no CUDA device present";
    return nullptr;
  }
  if (device < 0 || device >= count) {
    why_not =
        "no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " present)";
    return nullptr;
  }
  cudaDeviceProp prop{};
  if (!device_properties(device, prop) || prop.major * 10 + prop.minor < 75) {
    why_not = std::string("GPU ") + prop.name + " is sm_" + std::to_string(prop.major) +
              std::to_string(prop.minor) +
              "; the kernels are built for sm_75 and newer (steps 4 and 5: sm_80)";
    return nullptr;
  }
  return std::make_unique<GpuBackend>(device, static_cast<cudaStream_t>(stream), callers_stream);
#endif
}

}  // namespace attn
