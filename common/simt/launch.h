// Launching a kernel on the CPU SIMT backend.
#pragma once

#include <vector_types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include "common/simt/where.h"

namespace simt {

// The order in which runnable fibers (and blocks) are resumed between synchronisation points.
// A correct kernel gives the same result under every order; a difference exposes a race.
// greedy always resumes the lowest-numbered runnable thread, so warp 0 runs as far ahead of the
// others as synchronisation allows (to its next __syncthreads or a wait on another warp) before
// warp 1 starts: a warp that overwrites shared memory another warp has yet to read shows.
struct Schedule {
  enum class Order { forward, reverse, random, greedy } order = Order::forward;
  uint64_t seed = 0;  // for random
};

// "forward" | "reverse" | "random" | "random:SEED" | "greedy". Throws std::invalid_argument
// otherwise.
Schedule parse_schedule(const std::string& s);
std::string to_string(const Schedule& s);

// Process-wide setting used by every following launch.
void set_schedule(const Schedule& s);
Schedule schedule();

// Runs `body` once per CUDA thread of a grid, block by block, and returns when the grid is done.
// Blocks run in parallel on worker OS threads (SIMT_WORKERS, default: all cores). Afterwards the
// guard zones of all device allocations are checked. Throws KernelError on any fault, naming
// the launch site `where`.
//
// `instrumented`: the kernel was compiled with the instrumentation hooks (ATTN_INSTRUMENT_FLAGS),
// so that every shared-memory store it makes is seen and "never written" can be checked.
void launch(dim3 grid, dim3 block, size_t dynamic_smem_bytes, const std::function<void()>& body,
            const simt::where_t& where = simt::where_t::current(), bool instrumented = false);

// Progress of long runs: `hook(started, total)` is called from the worker threads each time a
// block of a launch starts (started counts 1..total within that launch). Process-wide; pass an
// empty function to remove it. The hook must be cheap and thread-safe.
using ProgressHook = std::function<void(uint64_t started, uint64_t total)>;
void set_progress_hook(ProgressHook hook);

// Stops launches early: while `flag` points at true, a launch starts no further block and throws
// KernelError ("interrupted"). Process-wide; nullptr removes it. Set from a signal handler (the
// Python binding's Ctrl-C).
void set_interrupt(const std::atomic<bool>* flag);

// How this process switches between CUDA threads' fibers: "simt_switch_context" (the backend's
// own, on x86-64 Linux) or "Boost.Context" (elsewhere, and wherever SIMT_FIBER=boost is set).
const char* context_switch();

// Limits a launch is checked against (those of sm_90; smaller GPUs allow less shared memory).
constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxDynamicSmem = 227 * 1024;

}  // namespace simt
