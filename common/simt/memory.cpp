#include "common/simt/memory.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
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
  uint64_t serial;  // allocations made before this one
};
uint64_t g_serial = 0;  // with g_mutex held

std::mutex g_mutex;
std::map<const void*, Allocation>& registry() {
  static std::map<const void*, Allocation> r;
  return r;
}

// What check_device_access searches: the live allocations sorted by address, as an immutable
// snapshot replaced (under g_mutex) on every allocation and free. Old snapshots are kept, so a
// reader never sees freed memory; they are small and allocations are rare.
struct Span {
  uintptr_t lo, data, end, hi;  // guard, data, end of data, end of the tail guard
  const std::string* label;
  size_t bytes;
  uint64_t serial;
};
const std::vector<Span>* published_spans() {
  return static_cast<const std::vector<Span>*>(
      detail::g_device_snapshot.load(std::memory_order_acquire));
}
std::vector<std::unique_ptr<std::vector<Span>>> g_old_spans;

void publish_spans() {  // with g_mutex held
  auto spans = std::make_unique<std::vector<Span>>();
  for (const auto& [ptr, a] : registry()) {
    const auto lo = reinterpret_cast<uintptr_t>(a.base);
    spans->push_back({lo, lo + kGuard, lo + kGuard + a.bytes, lo + kGuard + a.bytes + a.tail,
                      &a.label, a.bytes, a.serial});
  }
  detail::g_device_snapshot.store(spans.get(), std::memory_order_release);
  g_old_spans.push_back(std::move(spans));
}

}  // namespace

namespace detail {
std::atomic<const void*> g_device_snapshot{nullptr};
constinit thread_local DeviceRange t_device_gap[kRecent];
constinit thread_local DeviceRange t_device_data[kRecent];
}  // namespace detail

void* device_malloc(size_t bytes, const std::string& label) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  const size_t tail = rounded - bytes + kGuard;
  auto* base = static_cast<unsigned char*>(std::aligned_alloc(kAlign, kGuard + rounded + kGuard));
  if (base == nullptr) throw std::bad_alloc();
  std::memset(base, kGuardByte, kGuard);
  std::memset(base + kGuard, kPoisonByte, bytes);
  std::memset(base + kGuard + bytes, kGuardByte, tail);
  std::lock_guard lock(g_mutex);
  registry()[base + kGuard] = {base, bytes, tail, label, g_serial++};
  publish_spans();
  return base + kGuard;
}

void device_free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(g_mutex);
  auto it = registry().find(ptr);
  if (it == registry().end()) return;
  std::free(it->second.base);
  registry().erase(it);
  publish_spans();
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

namespace {
// The span whose guarded range holds some byte of [a, a + bytes), or nullptr.
//
// An instrumented kernel asks this of many of its loads and stores, and cp.async of every copy,
// most of them to memory asked about just before. So each OS thread remembers, for the snapshot
// it searched last, the data of the last few spans that wholly held an access (a tile loop reads
// K and V in turn; detail::t_device_data) and the last few gaps between spans
// (detail::t_device_gap; or before the first, or past the last) that held one: an access wholly
// inside one of them gets the same answer without a search, here or inline (in_recent_device_data,
// in_device_gap).
const Span* span_of(uintptr_t a, size_t bytes) {
  const std::vector<Span>* spans = published_spans();
  if (spans == nullptr || spans->empty()) return nullptr;
  detail::DeviceRange* data = detail::t_device_data;
  for (int i = 0; i < detail::kRecent; ++i)
    if (data[i].holds(a, bytes, spans)) return static_cast<const Span*>(data[i].span);
  detail::DeviceRange* gap = detail::t_device_gap;
  if (detail::any_holds(gap, a, bytes, spans)) return nullptr;
  // The first span starting past the access's last byte, and the one before it.
  const auto next = std::upper_bound(spans->begin(), spans->end(), a + bytes - 1,
                                     [](uintptr_t x, const Span& s) { return x < s.lo; });
  const Span* before = next == spans->begin() ? nullptr : &*std::prev(next);
  if (before != nullptr && a < before->hi) {
    if (a >= before->data && a + bytes <= before->end)
      std::copy_backward(data, data + detail::kRecent - 1, data + detail::kRecent),
          data[0] = {spans, before->data, before->end, before};
    return before;
  }
  const uintptr_t lo = before != nullptr ? before->hi : 0;
  const uintptr_t hi = next != spans->end() ? next->lo : UINTPTR_MAX;
  if (a >= lo && a + bytes <= hi)
    std::copy_backward(gap, gap + detail::kRecent - 1, gap + detail::kRecent),
        gap[0] = {spans, lo, hi};
  return nullptr;
}
}  // namespace

bool find_buffer(const void* p, BufferSpan& out) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const Span* s = span_of(a, 1);
  if (s == nullptr || a < s->data || a >= s->end) return false;
  out = {s->data, s->bytes, s->label, s->serial};
  return true;
}

std::string describe_device_address(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const Span* s = span_of(a, 1);
  if (s == nullptr || a < s->data || a >= s->end) return "";
  return "byte " + std::to_string(a - s->data) + " of buffer '" + *s->label + "' (" +
         std::to_string(s->bytes) + " bytes)";
}

bool device_access_ok(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const Span* s = span_of(a, bytes);
  return s == nullptr || (a >= s->data && a + bytes <= s->end);
}

std::string check_device_access(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const Span* found = span_of(a, bytes);
  if (found == nullptr) return "";
  const Span& s = *found;
  if (a >= s.data && a + bytes <= s.end) return "";
  std::ostringstream os;
  const long long off = static_cast<long long>(a - s.data);
  os << bytes << "-byte access at byte " << off << " of buffer '" << *s.label << "' (" << s.bytes
     << " bytes): ";
  if (a < s.data)
    os << (s.data - a) << " bytes before its start";
  else
    os << (a + bytes - s.end) << " bytes past its end";
  return os.str();
}

std::vector<AllocationInfo> live_allocations() {
  std::lock_guard lock(g_mutex);
  std::vector<AllocationInfo> out;
  for (const auto& [ptr, a] : registry()) out.push_back({a.label, a.bytes});
  return out;
}

}  // namespace simt
