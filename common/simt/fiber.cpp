// The fibers of the CPU backend (fiber.h): the pool of their stacks, the context switch written
// for x86-64 Linux, and the setting up and giving back of a context.
#include "common/simt/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace simt::detail {

namespace {

// ---- Fiber stacks: a process-wide pool of mmap'd stacks with a guard page below each ----------

size_t stack_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("SIMT_STACK_KB");
    const size_t kb = env ? std::strtoul(env, nullptr, 10) : 256;
    return std::max<size_t>(kb, 64) * 1024;
  }();
  return bytes;
}

std::mutex g_stack_mutex;
std::vector<StackContext> g_free_stacks;

// Each OS thread keeps the stacks its blocks' threads gave back, for the threads of its next
// block: no lock and no cache line shared with the other workers on each CUDA thread's start and
// exit (with two workers, plain step 1's many short threads spent a quarter of their time on the
// pool's mutex). What an OS thread holds goes to the process-wide pool when it ends.
struct LocalStacks {
  std::vector<StackContext> free;
  ~LocalStacks() {
    std::lock_guard lock(g_stack_mutex);
    g_free_stacks.insert(g_free_stacks.end(), free.begin(), free.end());
  }
};
thread_local LocalStacks t_stacks;

struct PooledStack {
  StackContext allocate() {
    if (std::vector<StackContext>& mine = t_stacks.free; !mine.empty()) {
      StackContext sc = mine.back();
      mine.pop_back();
      return sc;
    }
    {
      std::lock_guard lock(g_stack_mutex);
      if (!g_free_stacks.empty()) {
        StackContext sc = g_free_stacks.back();
        g_free_stacks.pop_back();
        return sc;
      }
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t total = stack_bytes() + page;
    void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    mprotect(base, page, PROT_NONE);  // overflowing a fiber's stack faults instead of corrupting
    // Stack colouring: stacks are page-aligned, so without an offset every fiber's hot top of
    // stack falls in the same cache sets, and switching between 32 lanes evicts them from each
    // other. Successive stacks start 64 * k bytes lower (k cycles through 0..63).
    static std::atomic<unsigned> colour{0};
    const size_t offset = 64 * (colour++ % 64);
    StackContext sc;
    sc.size = total - offset;
    sc.sp = static_cast<char*>(base) + total - offset;
    return sc;
  }
  void deallocate(StackContext& sc) { t_stacks.free.push_back(sc); }
};

}  // namespace

#ifdef SIMT_ASM_SWITCH
extern "C" void simt_context_entry();
// simt_switch_context: pushes rbp, rbx, r12-r15, stores rsp in *save_sp (rdi), loads load_sp
// (rsi) and pops the same registers of the context saved there, then returns into it.
// simt_context_entry: where a new context's first switch returns to: calls rbx(r12, r13)
// (asm_context_main and its arguments, placed in the new stack's saved registers), which never
// returns.
asm(R"(
  .text
  .p2align 4
  .globl simt_switch_context
  .hidden simt_switch_context
  .type simt_switch_context, @function
simt_switch_context:
  .cfi_startproc
  pushq %rbp
  .cfi_adjust_cfa_offset 8
  pushq %rbx
  .cfi_adjust_cfa_offset 8
  pushq %r12
  .cfi_adjust_cfa_offset 8
  pushq %r13
  .cfi_adjust_cfa_offset 8
  pushq %r14
  .cfi_adjust_cfa_offset 8
  pushq %r15
  .cfi_adjust_cfa_offset 8
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  .cfi_adjust_cfa_offset -8
  popq %r14
  .cfi_adjust_cfa_offset -8
  popq %r13
  .cfi_adjust_cfa_offset -8
  popq %r12
  .cfi_adjust_cfa_offset -8
  popq %rbx
  .cfi_adjust_cfa_offset -8
  popq %rbp
  .cfi_adjust_cfa_offset -8
  ret
  .cfi_endproc
  .size simt_switch_context, .-simt_switch_context

  .p2align 4
  .globl simt_context_entry
  .hidden simt_context_entry
  .type simt_context_entry, @function
simt_context_entry:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  movq %r13, %rsi
  callq *%rbx
  ud2
  .cfi_endproc
  .size simt_context_entry, .-simt_context_entry
)");

const bool g_asm_switch = [] {
  const char* env = std::getenv("SIMT_FIBER");
  const bool boost = env && std::strcmp(env, "boost") == 0;
#if !SIMT_BOOST_CONTEXT
  if (boost) {  // before main: no exception to throw, so the one line and exit 2 here
    std::fputs(
        "error: SIMT_FIBER=boost: this build has no Boost.Context (built without it, as "
        "the Python package is; unset SIMT_FIBER)\n",
        stderr);
    std::_Exit(2);
  }
#endif
  return !boost;
}();

namespace {
// What simt_context_entry calls on a new context's stack: runs entry(arg), then switches to the
// context it returns, never to come back.
[[noreturn]] void asm_context_main(void* arg, ContextEntry entry) {
  Context& next = entry(arg);
  void* finished;
  simt_switch_context(&finished, next.sp);
  __builtin_trap();  // never resumed
}
}  // namespace
#endif

void make_context(Context& c, StackContext& stack, ContextEntry entry, void* arg) {
#ifdef SIMT_ASM_SWITCH
  if (asm_switch()) {
    stack = PooledStack{}.allocate();
    // The frame simt_switch_context pops: r15 = 0, r14 = 0, r13 = entry, r12 = arg,
    // rbx = asm_context_main, rbp = 0, then the return address simt_context_entry, after which
    // rsp is 16-byte aligned for its call.
    auto* top = static_cast<uintptr_t*>(stack.sp);
    uintptr_t* frame = top - 9;
    frame[0] = frame[1] = 0;
    frame[2] = reinterpret_cast<uintptr_t>(entry);
    frame[3] = reinterpret_cast<uintptr_t>(arg);
    frame[4] = reinterpret_cast<uintptr_t>(&asm_context_main);
    frame[5] = 0;
    frame[6] = reinterpret_cast<uintptr_t>(&simt_context_entry);
    frame[7] = frame[8] = 0;
    c.sp = frame;
    return;
  }
#endif
#if SIMT_BOOST_CONTEXT
  c.fiber = ctx::fiber(std::allocator_arg, PooledStack{}, [entry, arg](ctx::fiber&&) -> ctx::fiber {
    return std::move(entry(arg).fiber);
  });
#endif
}

void free_context(Context& c, StackContext& stack) {
  if (stack.sp != nullptr) PooledStack{}.deallocate(stack);
  stack = {};
  c.sp = nullptr;
#if SIMT_BOOST_CONTEXT
  c.fiber = {};
#endif
}

}  // namespace simt::detail
