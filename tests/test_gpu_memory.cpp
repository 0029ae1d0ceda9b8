// The GPU backend's memory calls (common/backend.cpp) against a stand-in for the CUDA runtime,
// defined below: no GPU, and no cudart linked, so each call the backend makes lands here, on host
// memory, and is checked by rules stricter than the runtime's own:
//   - a block is given back by the call that pairs with the one that took it (cudaMalloc with
//     cudaFree, cudaMallocAsync with cudaFreeAsync);
//   - a copy from the host on a stream comes from pinned memory (cudaHostAlloc) when the backend
//     is on a caller's stream: from pageable memory cudaMemcpyAsync may wait for the stream, which
//     the call must not (docs/python.md);
//   - a stream's work completes only when the test says so (complete_streams), so an event
//     recorded after a copy is pending until then.
// Built where the CUDA toolkit's headers are (the declarations it defines are theirs).
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/backend.h"

namespace {

enum class Taken { malloc, malloc_async, host_alloc };
struct Runtime {
  std::map<void*, std::pair<Taken, size_t>> blocks;
  std::vector<std::string> misuse;  // what the rules above refused
  std::vector<const void*> copy_sources;
  std::set<cudaEvent_t> pending;  // events recorded on work not yet complete
  int syncs = 0;                  // cudaStreamSynchronize, cudaEventSynchronize calls
};
Runtime rt;

const std::pair<Taken, size_t>* pinned_block(const void* p) {
  for (const auto& [ptr, what] : rt.blocks)
    if (what.first == Taken::host_alloc && p >= ptr &&
        static_cast<const char*>(p) < static_cast<const char*>(ptr) + what.second)
      return &what;
  return nullptr;
}

cudaError_t take(void** ptr, size_t bytes, Taken how) {
  *ptr = std::malloc(bytes ? bytes : 1);
  rt.blocks[*ptr] = {how, bytes};
  return cudaSuccess;
}

cudaError_t give_back(void* ptr, Taken how, const char* call) {
  auto it = rt.blocks.find(ptr);
  if (it == rt.blocks.end()) {
    rt.misuse.push_back(std::string(call) + " of a pointer no allocation returned");
    return cudaErrorInvalidValue;
  }
  if (it->second.first != how)
    rt.misuse.push_back(std::string(call) + " of a block another allocator gave");
  std::free(ptr);
  rt.blocks.erase(it);
  return cudaSuccess;
}

// The stream's work done: every event recorded so far has completed.
void complete_streams() {
  rt.pending.clear();
}

}  // namespace

// The runtime calls backend.cpp makes, on host memory.
extern "C" {
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) {
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int) {
  *prop = cudaDeviceProp{};
  std::strcpy(prop->name, "stand-in GPU");
  prop->major = 9;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  *value = attr == cudaDevAttrL2CacheSize ? 1 << 20 : 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t) {
  return "stand-in error";
}
cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  return take(ptr, bytes, Taken::malloc);
}
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) {
  return take(ptr, bytes, Taken::malloc_async);
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  return take(ptr, bytes, Taken::host_alloc);
}
cudaError_t cudaFree(void* ptr) {
  return give_back(ptr, Taken::malloc, "cudaFree");
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) {
  return give_back(ptr, Taken::malloc_async, "cudaFreeAsync");
}
cudaError_t cudaFreeHost(void* ptr) {
  return give_back(ptr, Taken::host_alloc, "cudaFreeHost");
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = *total = size_t(1) << 30;
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  if (kind == cudaMemcpyHostToDevice) rt.copy_sources.push_back(src);
  std::memcpy(dst, src, bytes);  // done at once here; the event after it says when, on a GPU
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  ++rt.syncs;
  complete_streams();
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  return cudaEventCreate(event);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  rt.pending.insert(event);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return rt.pending.count(event) ? cudaErrorNotReady : cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  ++rt.syncs;
  complete_streams();
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 1;
  return cudaSuccess;
}
}  // extern "C"

namespace {

std::unique_ptr<attn::Backend> backend(void* stream, bool callers_stream) {
  std::string why;
  auto be = attn::make_gpu_backend(why, 0, stream, callers_stream);
  REQUIRE(be != nullptr);
  return be;
}

void* const kCallersStream = reinterpret_cast<void*>(0x5172ea);

}  // namespace

TEST_CASE("a block is given back by the call that pairs with the one that took it") {
  rt.misuse.clear();
  struct Case {
    void* stream;
    bool callers;
  };
  // The steps' programs (the default stream, theirs), and a caller's stream: a named one, and the
  // default stream as a caller's (a tensor on PyTorch's default stream).
  for (const Case c : {Case{nullptr, false}, Case{kCallersStream, true}, Case{nullptr, true}}) {
    auto be = backend(c.stream, c.callers);
    void* p = be->alloc(256, "a buffer");
    REQUIRE(rt.blocks.at(p).first == (c.callers ? Taken::malloc_async : Taken::malloc));
    be->release(p);
  }
  CHECK(rt.misuse.empty());
  CHECK(rt.blocks.empty());
}

TEST_CASE("an upload on a caller's stream copies from pinned memory and does not wait") {
  rt.copy_sources.clear();
  rt.syncs = 0;
  auto be = backend(kCallersStream, true);
  void* lengths = be->alloc(4 * sizeof(int), "seqlens_k");
  std::vector<int> host = {7, 0, 129, 1};
  be->upload(lengths, host.data(), host.size() * sizeof(int));
  REQUIRE(rt.copy_sources.size() == 1);
  CHECK(pinned_block(rt.copy_sources[0]) != nullptr);  // not from `host`, pageable
  CHECK(rt.syncs == 0);
  // The caller may reuse its bytes at once: they were taken before the call returned.
  const void* first = rt.copy_sources[0];
  host.assign(4, -1);
  // A second upload while the first copy is in flight takes another pinned block, ...
  std::vector<int> more = {3, 3, 3, 3};
  be->upload(lengths, more.data(), more.size() * sizeof(int));
  CHECK(pinned_block(rt.copy_sources[1]) != nullptr);
  CHECK(rt.copy_sources[1] != first);
  // ... and once the stream has done its copies, the first block is taken again.
  complete_streams();
  be->upload(lengths, more.data(), more.size() * sizeof(int));
  CHECK(rt.copy_sources[2] == first);
  CHECK(rt.syncs == 0);
  be->release(lengths);
  // The steps' programs wait for each run anyway: theirs copy from where the bytes are.
  auto own = backend(nullptr, false);
  void* q = own->alloc(16, "Q");
  own->upload(q, host.data(), 16);
  CHECK(rt.copy_sources.back() == host.data());
  own->release(q);
}
