// Running out of memory as a clear refusal: the buffer, its size and what would fit, exit code 2.
// Large host buffers are sized through host_resize, device buffers through Backend::alloc; both
// throw OutOfMemory, which the harness reports as invalid input (the problem is too large for
// this machine) rather than as a failed run.
#pragma once

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn {

struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "1.5 GiB", "300 MiB", "12 KiB", "17 bytes".
std::string format_bytes(double bytes);

// The kernel's estimate of memory a process can still get without swapping (MemAvailable in
// /proc/meminfo), in bytes; 0 where unknown.
size_t host_memory_available();

// Throws OutOfMemory for `label` unless `bytes` of host memory look available. Allocating more
// than MemAvailable would not fail in malloc (Linux overcommits) but when the pages are touched,
// by the OOM killer, so it is refused here first.
void require_host_memory(const std::string& label, size_t bytes);

[[noreturn]] void throw_out_of_memory(const std::string& where, const std::string& label,
                                      size_t bytes, size_t available);

template <typename T>
void host_resize(std::vector<T>& v, size_t n, const std::string& label) {
  require_host_memory(label, n * sizeof(T));
  try {
    v.resize(n);
  } catch (const std::bad_alloc&) {
    throw_out_of_memory("host", label, n * sizeof(T), host_memory_available());
  }
}

}  // namespace attn
