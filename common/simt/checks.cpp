// Checks of every load and store of an instrumented kernel (the instrumented test build, see
// cmake/AttnStep.cmake: attn_add_instrumented_kernel).
//
// The kernel's CPU copy is compiled with GCC's -fsanitize=thread and -fsanitize=alignment, but
// linked without their runtimes: the calls the compiler inserts land here instead.
//   - ThreadSanitizer's instrumentation calls __tsan_read<N>/__tsan_write<N>(address) before every
//     load and store the optimiser keeps in memory. Each access is checked against the block's
//     shared memory (bounds, and the intra-warp store visibility of shared_memory.cpp) and against
//     the device allocations' guard zones (memory.cpp). Accesses to anything else (the fiber's
//     stack, host memory) are not checked.
//   - UBSan's alignment check calls __ubsan_handle_type_mismatch_v1_abort when a pointer is
//     dereferenced at an address not aligned for its type (a float4 load from an 8-byte aligned
//     address), before the access happens.
// A violation ends the CUDA thread with a KernelError naming the kernel's source line, through
// fail_no_unwind: these hooks are declared nothrow by the compiler, so they may not throw.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/simt/block.h"
#include "common/simt/counters.h"
#include "common/simt/memory.h"
#include "common/simt/runtime.h"

namespace simt::detail {
namespace {

struct Module {
  uintptr_t pc;
  uintptr_t bias = 0;
  std::string path;
  bool found = false;
};

int find_module(dl_phdr_info* info, size_t, void* arg) {
  auto* m = static_cast<Module*>(arg);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    if (m->pc >= lo && m->pc < lo + ph.p_memsz) {
      m->bias = info->dlpi_addr;
      if (info->dlpi_name && info->dlpi_name[0]) {
        m->path = info->dlpi_name;
      } else {  // the executable: its path, since /proc/self/exe in addr2line is addr2line
        char buf[4096];
        const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
        m->path = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
      }
      m->found = true;
      return 1;
    }
  }
  return 0;
}

// The source lines of code addresses, innermost inlined frame first ("common/tiles.h:27, inlined
// into step3_fused/attention.cu:40"), from the debug information, by addr2line (binutils): one
// run per module, all of its addresses at once.
std::vector<std::string> lines_of(const std::vector<uintptr_t>& pcs) {
  std::vector<std::string> out(pcs.size(), "an unknown address");
  std::map<std::string, std::vector<size_t>> by_module;
  std::vector<uintptr_t> offset(pcs.size());
  for (size_t i = 0; i < pcs.size(); ++i) {
    Module m;
    m.pc = pcs[i] - 1;  // the call instruction, not the return address
    dl_iterate_phdr(find_module, &m);
    if (!m.found) continue;
    offset[i] = m.pc - m.bias;
    by_module[m.path].push_back(i);
  }
  for (const auto& [path, ids] : by_module) {
    std::string cmd = "addr2line -a -i -e '" + path + "'";
    for (size_t i : ids) {
      char hex[32];
      std::snprintf(hex, sizeof hex, " 0x%" PRIxPTR, offset[i]);
      cmd += hex;
    }
    cmd += " 2>/dev/null";
    std::vector<std::vector<std::string>> frames;
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char buf[2048];
      while (std::fgets(buf, sizeof buf, f)) {
        std::string l = buf;
        while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
        if (l.rfind("0x", 0) == 0) {  // -a: each address opens its block of frames
          frames.emplace_back();
          continue;
        }
        if (auto d = l.find(" (discriminator"); d != std::string::npos) l.resize(d);
        const auto colon = l.rfind(':');
        if (frames.empty() || colon == std::string::npos || l.compare(0, 2, "??") == 0) continue;
        frames.back().push_back(short_location(l.substr(0, colon).c_str(),
                                               std::strtoul(l.c_str() + colon + 1, nullptr, 10)));
      }
      pclose(f);
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k >= frames.size() || frames[k].empty()) {
        out[ids[k]] = "an address without line information (build with -g)";
        continue;
      }
      std::string s = frames[k][0];
      for (size_t i = 1; i < frames[k].size() && i < 4; ++i) s += ", inlined into " + frames[k][i];
      out[ids[k]] = s;
    }
  }
  return out;
}

[[noreturn]] void report(const std::string& what, const void* pc) {
  const std::string msg = what + " at " + lines_of({reinterpret_cast<uintptr_t>(pc)})[0];
  if (in_kernel()) fail_no_unwind(msg);
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::_Exit(1);
}

// What check_access reports, out of its way.
[[gnu::noinline, gnu::cold]] std::string misaligned(size_t bytes, bool write) {
  return "misaligned " + std::to_string(bytes) + "-byte " + (write ? "store" : "load");
}
[[gnu::noinline, gnu::cold]] std::string out_of_bounds(const void* p, size_t bytes, bool write) {
  return std::string("out-of-bounds ") + (write ? "write: " : "read: ") +
         simt::check_device_access(p, bytes);
}

[[gnu::noinline]] void check_access(const void* p, size_t bytes, bool write, bool aligned,
                                    const void* pc) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::string problem;
  bool shared = false, in_buffer = false;
  if (aligned && a % bytes != 0) [[unlikely]]
    problem = misaligned(bytes, write);
  else if (touches_shared(a, bytes))  // the block's shared memory, its slack included
    shared = shared_access(a, bytes, write, problem);
  else if (simt::in_recent_device_data(a, bytes))  // inside a buffer found just before
    in_buffer = true;
  else if (!simt::device_access_ok(p, bytes)) [[unlikely]]
    problem = out_of_bounds(p, bytes, write);
  if (!problem.empty()) [[unlikely]]
    report(problem, pc);
  if (counters::active()) {
    using counters::hook::Kind;
    BufferSpan buffer;
    if (shared)
      counters::hook::lane(write ? Kind::shared_store : Kind::shared_load,
                           reinterpret_cast<uintptr_t>(pc), a, uint32_t(bytes));
    else if (in_buffer || find_buffer(p, buffer))
      counters::hook::lane(write ? Kind::global_store : Kind::global_load,
                           reinterpret_cast<uintptr_t>(pc), a, uint32_t(bytes));
  }
}

// Each hook (below) decides the three usual cases itself, in a handful of instructions and no
// call, in the order a kernel makes them most: a read of shared memory that breaks no rule, an
// access to the running fiber's own stack, an access inside a device buffer this OS thread's
// lookups found last. Each is counted where counting is on, as check_access would count it;
// anything else goes to access(). Outside a kernel fiber nothing is checked or counted: the
// stack's case may pass such an access (as access() would), the shared case's record holds
// nothing then (runtime.h), and the device case asks in_kernel().
//
// A read of N bytes inside one 16-byte chunk of the block's shared memory that is exactly
// kWritten (Block::chunks: written, no copy in flight, no store a lane may not see yet). An
// aligned read (N a power of two up to 16) that starts inside the record's whole chunks lies
// inside one of them; an unaligned one is checked for both.
template <size_t N, bool aligned>
[[gnu::always_inline]] inline bool shared_read_fine(const void* p) {
  static_assert(N <= 16 && (N & (N - 1)) == 0);
  const auto a = reinterpret_cast<uintptr_t>(p);
  const SharedReads& s = t_shared_reads;
  const uintptr_t off = a - s.lo;
  if constexpr (aligned)
    return (a & (N - 1)) == 0 && off < s.bytes && s.chunks[off / 16] == Block::kWritten;
  else
    return off < s.bytes && s.bytes - off >= N && off / 16 == (off + N - 1) / 16 &&
           s.chunks[off / 16] == Block::kWritten;
}
// An access to the running fiber's own stack (a kernel's local arrays), once its bounds are known
// (on_own_stack refreshes them after a switch): only its alignment is checked.
[[gnu::always_inline]] inline bool own_stack_fine(const void* p, size_t bytes, bool aligned) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return t_stack_of == t_current && a >= t_stack_lo && a + bytes <= t_stack_hi &&
         !(aligned && (a & (bytes - 1)) != 0);
}
// A device access inside one of the buffers this OS thread's lookups found last (memory.h).
[[gnu::always_inline]] inline bool device_data_fine(const void* p, size_t bytes, bool aligned) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return !(aligned && (a & (bytes - 1)) != 0) && simt::in_recent_device_data(a, bytes) &&
         in_kernel();
}
[[gnu::always_inline]] inline void count(counters::hook::Kind kind, const void* p, size_t bytes,
                                         const void* pc) {
  if (counters::active())
    counters::hook::lane(kind, reinterpret_cast<uintptr_t>(pc), reinterpret_cast<uintptr_t>(p),
                         uint32_t(bytes));
}

// Every other load and store of an instrumented kernel: the first access to the stack after a
// switch, shared-memory stores, reads the hook could not pass, and the emulator's own state that
// the kernel's inline helpers read (the current thread's ids: neither shared nor device memory,
// so only their alignment is checked, and nothing is counted). The usual cases of the rest are
// decided here too, and counted where counting is on (as check_access would): a shared access
// that breaks no rule, an access in a gap between buffers or inside a buffer a lookup just found.
// Out of line, so that the hooks' own frame stays small.
[[gnu::noinline]] void access(const void* p, size_t bytes, bool write, bool aligned,
                              const void* pc) {
  using counters::hook::Kind;
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (!in_kernel()) return;
  if (!(aligned && (a & (bytes - 1)) != 0)) {  // (bytes: a power of two where aligned)
    if (touches_shared(a, bytes)) {            // first: what a kernel's loops read most
      if (shared_access_fine(a, bytes, write)) {
        if (counters::active())
          counters::hook::lane(write ? Kind::shared_store : Kind::shared_load,
                               reinterpret_cast<uintptr_t>(pc), a, uint32_t(bytes));
        return;
      }
    } else if (on_own_stack(a, bytes)) {
      return;
    } else if (simt::in_device_gap(a, bytes)) {
      return;
    } else if (simt::in_recent_device_data(a, bytes)) {
      if (counters::active())
        counters::hook::lane(write ? Kind::global_store : Kind::global_load,
                             reinterpret_cast<uintptr_t>(pc), a, uint32_t(bytes));
      return;
    }
  }
  check_access(p, bytes, write, aligned, pc);
}

}  // namespace

std::vector<std::string> source_lines_of(const std::vector<uintptr_t>& pcs) {
  return lines_of(pcs);
}

}  // namespace simt::detail

namespace simt {
namespace {
// The load and the store the instrumentation saw in std::atomic_ref's loop, as two instructions of
// the kernel's line: the load one byte before the call's return address, the store at it (both
// inside the call instruction, which is what source lines are looked up by).
template <typename T>
[[gnu::always_inline]] inline T atomic_add(T* a, T v, const char* pc) {
  detail::access(a, sizeof(T), false, true, pc - 1);
  detail::access(a, sizeof(T), true, true, pc);
  return std::atomic_ref<T>(*a).fetch_add(v);
}
}  // namespace
float atomic_add_checked(float* a, float v) {
  return atomic_add(a, v, static_cast<const char*>(__builtin_return_address(0)));
}
double atomic_add_checked(double* a, double v) {
  return atomic_add(a, v, static_cast<const char*>(__builtin_return_address(0)));
}
}  // namespace simt

#define SIMT_PC __builtin_return_address(0)
#define SIMT_KIND(K) simt::counters::hook::Kind::K
#define SIMT_HOOKS(N)                                                     \
  void __tsan_read##N(void* p) {                                          \
    if (simt::detail::shared_read_fine<N, true>(p))                       \
      return simt::detail::count(SIMT_KIND(shared_load), p, N, SIMT_PC);  \
    if (simt::detail::own_stack_fine(p, N, true)) return;                 \
    if (simt::detail::device_data_fine(p, N, true))                       \
      return simt::detail::count(SIMT_KIND(global_load), p, N, SIMT_PC);  \
    simt::detail::access(p, N, false, true, SIMT_PC);                     \
  }                                                                       \
  void __tsan_write##N(void* p) {                                         \
    if (simt::detail::own_stack_fine(p, N, true)) return;                 \
    if (simt::detail::device_data_fine(p, N, true))                       \
      return simt::detail::count(SIMT_KIND(global_store), p, N, SIMT_PC); \
    simt::detail::access(p, N, true, true, SIMT_PC);                      \
  }                                                                       \
  void __tsan_unaligned_read##N(void* p) {                                \
    if (simt::detail::shared_read_fine<N, false>(p))                      \
      return simt::detail::count(SIMT_KIND(shared_load), p, N, SIMT_PC);  \
    if (simt::detail::own_stack_fine(p, N, false)) return;                \
    if (simt::detail::device_data_fine(p, N, false))                      \
      return simt::detail::count(SIMT_KIND(global_load), p, N, SIMT_PC);  \
    simt::detail::access(p, N, false, false, SIMT_PC);                    \
  }                                                                       \
  void __tsan_unaligned_write##N(void* p) {                               \
    if (simt::detail::own_stack_fine(p, N, false)) return;                \
    if (simt::detail::device_data_fine(p, N, false))                      \
      return simt::detail::count(SIMT_KIND(global_store), p, N, SIMT_PC); \
    simt::detail::access(p, N, true, false, SIMT_PC);                     \
  }

extern "C" {

// The instrumented module's constructor: nothing to do (see __tsan_func_entry).
void __tsan_init() {}
// Every instrumented function calls this on entry, the kernel first: from then on the block's
// shared-memory stores are tracked (shared_memory.cpp), before its first access.
void __tsan_func_entry(void*) {
  if (simt::detail::in_kernel() && !simt::detail::t_stores_decided) simt::detail::track_stores();
}
void __tsan_func_exit() {}
SIMT_HOOKS(1)
SIMT_HOOKS(2)
SIMT_HOOKS(4)
SIMT_HOOKS(8)
SIMT_HOOKS(16)
void __tsan_read_range(void* p, unsigned long n) {
  if (n) simt::detail::access(p, n, false, false, SIMT_PC);
}
void __tsan_write_range(void* p, unsigned long n) {
  if (n) simt::detail::access(p, n, true, false, SIMT_PC);
}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

// UBSan's ABI for -fsanitize=alignment (GCC's libubsan and LLVM's compiler-rt share it).
struct SimtUbsanSourceLocation {
  const char* file;
  uint32_t line;
  uint32_t column;
};
struct SimtUbsanTypeDescriptor {
  uint16_t kind;
  uint16_t info;
  char name[1];
};
struct SimtUbsanTypeMismatch {
  SimtUbsanSourceLocation loc;
  const SimtUbsanTypeDescriptor* type;
  unsigned char log_alignment;
  unsigned char type_check_kind;
};

[[noreturn]] void __ubsan_handle_type_mismatch_v1_abort(SimtUbsanTypeMismatch* d, uintptr_t ptr) {
  static const char* const kinds[] = {"load of",
                                      "store to",
                                      "reference binding to",
                                      "member access within",
                                      "member call on",
                                      "constructor call on",
                                      "downcast of",
                                      "downcast of",
                                      "upcast of",
                                      "cast to virtual base of",
                                      "_Nonnull binding to",
                                      "dynamic operation on"};
  const unsigned long align = 1ul << d->log_alignment;
  unsigned long actual = 1;
  while (actual < align && ptr % (actual * 2) == 0) actual *= 2;
  std::string what = std::string("misaligned address: ") +
                     (d->type_check_kind < 12 ? kinds[d->type_check_kind] : "access to") + " " +
                     d->type->name + ", which needs " + std::to_string(align) +
                     "-byte alignment, at an address aligned to " + std::to_string(actual) +
                     " bytes";
  if (const std::string buf = simt::describe_device_address(reinterpret_cast<void*>(ptr));
      !buf.empty())
    what += " (" + buf + ")";
  what += " at " + simt::detail::short_location(d->loc.file, d->loc.line);
  if (simt::detail::in_kernel()) simt::detail::fail_no_unwind(what);
  std::fprintf(stderr, "error: %s\n", what.c_str());
  std::_Exit(1);
}
[[noreturn]] void __ubsan_handle_type_mismatch_v1(SimtUbsanTypeMismatch* d, uintptr_t ptr) {
  __ubsan_handle_type_mismatch_v1_abort(d, ptr);
}

}  // extern "C"

// Atomics in an instrumented kernel (atomicAdd and friends are std::atomic_ref operations, which
// the instrumentation turns into these calls): the address is checked, the operation done with
// the same builtin, always sequentially consistent (at least as strong as what was asked).
#define SIMT_ATOMICS(BITS, T)                                                               \
  T __tsan_atomic##BITS##_load(const volatile T* a, int) {                                  \
    simt::detail::access(const_cast<const T*>(a), sizeof(T), false, true, SIMT_PC);         \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                            \
  }                                                                                         \
  void __tsan_atomic##BITS##_store(volatile T* a, T v, int) {                               \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                               \
  }                                                                                         \
  T __tsan_atomic##BITS##_exchange(volatile T* a, T v, int) {                               \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                     \
  }                                                                                         \
  T __tsan_atomic##BITS##_fetch_add(volatile T* a, T v, int) {                              \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                         \
  T __tsan_atomic##BITS##_fetch_sub(volatile T* a, T v, int) {                              \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                         \
  T __tsan_atomic##BITS##_fetch_and(volatile T* a, T v, int) {                              \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                         \
  T __tsan_atomic##BITS##_fetch_or(volatile T* a, T v, int) {                               \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                       \
  }                                                                                         \
  T __tsan_atomic##BITS##_fetch_xor(volatile T* a, T v, int) {                              \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                         \
  int __tsan_atomic##BITS##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {   \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
  }                                                                                         \
  int __tsan_atomic##BITS##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {     \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);  \
  }                                                                                         \
  T __tsan_atomic##BITS##_compare_exchange_val(volatile T* a, T c, T v, int, int) {         \
    simt::detail::access(const_cast<T*>(a), sizeof(T), true, true, SIMT_PC);                \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
    return c;                                                                               \
  }

extern "C" {
SIMT_ATOMICS(8, uint8_t)
SIMT_ATOMICS(16, uint16_t)
SIMT_ATOMICS(32, uint32_t)
SIMT_ATOMICS(64, uint64_t)
void __tsan_atomic_thread_fence(int) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
}  // extern "C"
