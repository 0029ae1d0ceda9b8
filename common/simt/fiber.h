// The fibers the CPU backend runs CUDA threads on (fiber.cpp): a context per CUDA thread, each on
// a stack of its own from a process-wide pool, and the switch between two contexts, which the
// scheduler (runtime.cpp) calls about once per lane per warp collective.
//
// A context is the scheduler (the OS thread's own stack) or one CUDA thread's fiber. Every switch
// is symmetric: switch_context(from, to) saves the running context into `from` and resumes `to`,
// and returns when some other context switches back to `from`.
//
// Two implementations of the same switch. On x86-64 ELF (Linux) a minimal one (fiber.cpp): it
// saves the six callee-saved integer registers and the stack pointer, no more. Boost.Context's
// switch also saves and restores the MXCSR and x87 control words on every switch; ldmxcsr and
// fldcw are slow, serialising instructions, and at one switch per lane per warp collective
// (about 50 million in one step4 launch at S=1024) perf put a sixth of the CPU backend's time in
// Boost.Context's switch function.
// Skipping them is sound here because no context changes the floating-point environment (the
// emulations and kernels run in the default rounding mode throughout). Elsewhere (arm64, macOS)
// and with SIMT_FIBER=boost, Boost.Context's fibers, switched with resume_with (an ontop call
// that keeps the return-stack buffer balanced, unlike a plain resume).
#pragma once

#include <cstddef>

// SIMT_BOOST_CONTEXT (common/CMakeLists.txt): 1 when Boost.Context is there. The Python package's
// build on x86-64 Linux goes without it (pip brings no Boost): the minimal switch alone.
#if SIMT_BOOST_CONTEXT
#include <boost/context/fiber.hpp>
#endif

namespace simt::detail {

#if SIMT_BOOST_CONTEXT
namespace ctx = boost::context;
using StackContext = ctx::stack_context;
#else
struct StackContext {  // Boost.Context's stack_context: the top of a stack and its size
  std::size_t size = 0;
  void* sp = nullptr;
};
#endif

#if defined(__x86_64__) && defined(__ELF__)
#define SIMT_ASM_SWITCH 1
// Saves the running context's registers and stack pointer in *save_sp and resumes the context
// saved at load_sp (fiber.cpp).
extern "C" void simt_switch_context(void** save_sp, void* load_sp);
// Whether this process switches with simt_switch_context (false: Boost.Context). Decided once,
// before main (SIMT_FIBER=boost), so that a switch reads a plain flag.
[[gnu::visibility("hidden")]] extern const bool g_asm_switch;
#endif
#if !SIMT_BOOST_CONTEXT && !defined(SIMT_ASM_SWITCH)
#error "the CPU backend's fibers need Boost.Context where its own switch (x86-64 ELF) is not built"
#endif

inline bool asm_switch() {
#ifdef SIMT_ASM_SWITCH
  return g_asm_switch;
#else
  return false;
#endif
}

struct Context {
  void* sp = nullptr;  // simt_switch_context: the saved stack pointer
#if SIMT_BOOST_CONTEXT
  ctx::fiber fiber;  // Boost.Context: the suspended fiber
#endif
};

[[gnu::always_inline]] inline void switch_context(Context& from, Context& to) {
#ifdef SIMT_ASM_SWITCH
  if (asm_switch()) {
    simt_switch_context(&from.sp, to.sp);
    return;
  }
#endif
#if SIMT_BOOST_CONTEXT
  Context* save = &from;
  // Whoever resumes `from` later does so through this same function: the fiber it returns is the
  // empty one its lambda returns.
  (void)std::move(to.fiber).resume_with([save](ctx::fiber&& f) -> ctx::fiber {
    save->fiber = std::move(f);
    return {};
  });
#endif
}

// What a context runs: returns the context to switch to when it has finished (after which it
// is never resumed).
using ContextEntry = Context& (*)(void* arg);

// Prepares `c` to run entry(arg) on a stack of its own when first switched to; with
// simt_switch_context, that stack is `stack`, to be given back by free_context.
void make_context(Context& c, StackContext& stack, ContextEntry entry, void* arg);
// Gives back the stack of a context that finished (or never ran). Boost.Context frees a finished
// fiber's stack itself; destroying one that never ran unwinds nothing.
void free_context(Context& c, StackContext& stack);

}  // namespace simt::detail
