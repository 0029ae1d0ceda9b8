// "Device" memory of the CPU backend: host allocations surrounded by guard zones.
//
// Every allocation is 256-byte aligned like cudaMalloc's, starts filled with a poison pattern
// (0xFF bytes: NaN in fp16, bf16 and fp32) as uninitialised device memory would hold garbage,
// and sits between two guard zones of known bytes. simt::launch checks the guard zones after every
// kernel, so an out-of-bounds write is reported with the buffer's label and the kernel's launch
// site instead of silently corrupting a neighbour.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace simt {

void* device_malloc(size_t bytes, const std::string& label);
void device_free(void* ptr);

// Describes the first damaged guard zone among live allocations ("" when all are intact), and
// restores the damaged zones so that one bug is reported once.
std::string check_guards();

// For an access of `bytes` at `p`: "" when it lies inside one device allocation or touches none;
// otherwise what is wrong ("4-byte access at byte 264 of buffer 'Q' (264 bytes): 4 bytes past its
// end"). Detects accesses that reach into an allocation's guard zones (256 bytes or more on either
// side). Lock-free: safe to call on every load and store of an instrumented kernel.
std::string check_device_access(const void* p, size_t bytes);
// check_device_access(p, bytes).empty(), answered from the allocation the calling OS thread
// found last where it can be (an operation on a tile reads one buffer many times).
bool device_access_ok(const void* p, size_t bytes);

// "byte 264 of buffer 'S/P' (1024 bytes)" for an address inside a live allocation, else "".
std::string describe_device_address(const void* p);

// The device allocation whose data holds `p`: its first byte, size and label; false if none.
struct BufferSpan {
  uintptr_t data = 0;
  size_t bytes = 0;
  const std::string* label = nullptr;  // lives as long as the allocation
};
bool find_buffer(const void* p, BufferSpan& out);

struct AllocationInfo {
  std::string label;
  size_t bytes;
};
std::vector<AllocationInfo> live_allocations();

}  // namespace simt
