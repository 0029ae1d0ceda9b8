// "Device" memory of the CPU backend: host allocations surrounded by guard zones.
//
// Every allocation is 256-byte aligned like cudaMalloc's, starts filled with a poison pattern
// (0xFF bytes: NaN in fp16, bf16 and fp32) as uninitialised device memory would hold garbage,
// and sits between two guard zones of known bytes. simt::launch checks the guard zones after every
// kernel, so an out-of-bounds write is reported with the buffer's label and the kernel's launch
// site instead of silently corrupting a neighbour.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace simt {

void* device_malloc(size_t bytes, const std::string& label);
void device_free(void* ptr);

// Describes the first damaged guard zone among live allocations ("" when all are intact), and
// restores the damaged zones so that one bug is reported once.
std::string check_guards();

struct AllocationInfo {
  std::string label;
  size_t bytes;
};
std::vector<AllocationInfo> live_allocations();

}  // namespace simt
