// "Device" memory of the CPU backend: host allocations surrounded by guard zones.
//
// Every allocation is 256-byte aligned like cudaMalloc's, starts filled with a poison pattern
// (0xFF bytes: NaN in fp16, bf16 and fp32) as uninitialised device memory would hold garbage,
// and sits between two guard zones of known bytes. simt::launch checks the guard zones after every
// kernel, so an out-of-bounds write is reported with the buffer's label and the kernel's launch
// site instead of silently corrupting a neighbour.
#pragma once

#include <atomic>
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
// check_device_access(p, bytes).empty(), without building the message.
bool device_access_ok(const void* p, size_t bytes);

namespace detail {
// The live allocations as the lookups above search them (an immutable snapshot, replaced on every
// allocation and free), and what the calling OS thread's lookups found in that snapshot:
//   - the last kRecent gaps between allocations (or before the first, or past the last) that held
//     an access (a kernel's parameters, the host's stack and the emulator's thread ids may lie in
//     different ones): a gap holds no allocation's byte, guard zones included;
//   - the data of the last kRecent allocations that wholly held an access (a thread of step 1
//     reads Q and K and writes S in turn): an access inside one of them is in bounds.
// Each holds as long as the snapshot is the same.
extern std::atomic<const void*> g_device_snapshot;
struct DeviceRange {
  const void* snapshot = nullptr;
  uintptr_t lo = 0, hi = 0;
  const void* span = nullptr;  // t_device_data: the allocation's entry in the snapshot
  bool holds(uintptr_t a, size_t bytes, const void* now) const {
    return a >= lo && a + bytes <= hi && snapshot == now;
  }
};
constexpr int kRecent = 4;
extern thread_local constinit DeviceRange t_device_gap[kRecent];   // the most recent first
extern thread_local constinit DeviceRange t_device_data[kRecent];  // the most recent first
// Whether one of `ranges` holds [a, a + bytes) in snapshot `now`.
inline bool any_holds(const DeviceRange* ranges, uintptr_t a, size_t bytes, const void* now) {
  for (int i = 0; i < kRecent; ++i)
    if (ranges[i].holds(a, bytes, now)) return true;
  return false;
}
}  // namespace detail

// True when [a, a + bytes) is known to touch no device allocation (the gap above): then
// check_device_access says "" and find_buffer finds nothing, without a lookup.
inline bool in_device_gap(uintptr_t a, size_t bytes) {
  return detail::any_holds(detail::t_device_gap, a, bytes,
                           detail::g_device_snapshot.load(std::memory_order_acquire));
}

// True when [a, a + bytes) is known to lie inside the data of one device allocation (above): then
// check_device_access says "", without a lookup.
inline bool in_recent_device_data(uintptr_t a, size_t bytes) {
  return detail::any_holds(detail::t_device_data, a, bytes,
                           detail::g_device_snapshot.load(std::memory_order_acquire));
}

// "byte 264 of buffer 'S/P' (1024 bytes)" for an address inside a live allocation, else "".
std::string describe_device_address(const void* p);

// The device allocation whose data holds `p`: its first byte, size and label; false if none.
struct BufferSpan {
  uintptr_t data = 0;
  size_t bytes = 0;
  const std::string* label = nullptr;  // lives as long as the allocation
  uint64_t serial = 0;                 // allocations made before it (since the program started)
};
bool find_buffer(const void* p, BufferSpan& out);

struct AllocationInfo {
  std::string label;
  size_t bytes;
};
std::vector<AllocationInfo> live_allocations();

}  // namespace simt
