#include "common/simt/memory.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <sstream>

namespace simt {

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kGuard = 256;  // bytes of guard before and after the data
constexpr unsigned char kGuardByte = 0xA5;
constexpr unsigned char kPoisonByte = 0xFF;

struct Allocation {
  unsigned char* base;  // what aligned_alloc returned
  size_t bytes;         // the user's size
  size_t tail;          // guard bytes after the data (kGuard plus the rounding)
  std::string label;
};

std::mutex g_mutex;
std::map<const void*, Allocation>& registry() {
  static std::map<const void*, Allocation> r;
  return r;
}

}  // namespace

void* device_malloc(size_t bytes, const std::string& label) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  const size_t tail = rounded - bytes + kGuard;
  auto* base = static_cast<unsigned char*>(std::aligned_alloc(kAlign, kGuard + rounded + kGuard));
  if (base == nullptr) throw std::bad_alloc();
  std::memset(base, kGuardByte, kGuard);
  std::memset(base + kGuard, kPoisonByte, bytes);
  std::memset(base + kGuard + bytes, kGuardByte, tail);
  std::lock_guard lock(g_mutex);
  registry()[base + kGuard] = {base, bytes, tail, label};
  return base + kGuard;
}

void device_free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(g_mutex);
  auto it = registry().find(ptr);
  if (it == registry().end()) return;
  std::free(it->second.base);
  registry().erase(it);
}

std::string check_guards() {
  std::lock_guard lock(g_mutex);
  std::string first;
  for (auto& entry : registry()) {
    // A named reference, not a structured binding: clang before 16 cannot capture those.
    auto& a = entry.second;
    auto scan = [&](unsigned char* zone, size_t n, bool before) {
      size_t lo = n, hi = 0;
      for (size_t i = 0; i < n; ++i)
        if (zone[i] != kGuardByte) lo = std::min(lo, i), hi = i;
      if (lo == n) return;
      if (first.empty()) {
        std::ostringstream os;
        if (before)
          os << "out-of-bounds write before buffer '" << a.label << "' (" << a.bytes
             << " bytes): bytes -" << (n - lo) << "..-" << (n - hi) << " changed";
        else
          os << "out-of-bounds write past the end of buffer '" << a.label << "' (" << a.bytes
             << " bytes): bytes +" << lo << "..+" << hi << " after its end changed";
        first = os.str();
      }
      std::memset(zone, kGuardByte, n);
    };
    scan(a.base, kGuard, true);
    scan(a.base + kGuard + a.bytes, a.tail, false);
  }
  return first;
}

std::vector<AllocationInfo> live_allocations() {
  std::lock_guard lock(g_mutex);
  std::vector<AllocationInfo> out;
  for (const auto& [ptr, a] : registry()) out.push_back({a.label, a.bytes});
  return out;
}

}  // namespace simt
