// Launching a kernel on the CPU SIMT backend.
#pragma once

#include <vector_types.h>

#include <cstdint>
#include <functional>
#include <string>
#include "common/simt/where.h"

namespace simt {

// The order in which runnable fibers (and blocks) are resumed between synchronisation points.
// A correct kernel gives the same result under every order; a difference exposes a race.
struct Schedule {
  enum class Order { forward, reverse, random } order = Order::forward;
  uint64_t seed = 0;  // for random
};

// "forward" | "reverse" | "random" | "random:SEED". Throws std::invalid_argument otherwise.
Schedule parse_schedule(const std::string& s);
std::string to_string(const Schedule& s);

// Process-wide setting used by every following launch.
void set_schedule(const Schedule& s);
Schedule schedule();

// Runs `body` once per CUDA thread of a grid, block by block, and returns when the grid is done.
// Blocks run in parallel on worker OS threads (SIMT_WORKERS, default: all cores). Afterwards the
// guard zones of all device allocations are checked. Throws KernelError on any fault, naming
// the launch site `where`.
void launch(dim3 grid, dim3 block, size_t dynamic_smem_bytes, const std::function<void()>& body,
            const simt::where_t& where = simt::where_t::current());

// Limits a launch is checked against (those of sm_90; smaller GPUs allow less shared memory).
constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxDynamicSmem = 227 * 1024;

}  // namespace simt
