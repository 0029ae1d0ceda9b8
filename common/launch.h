// One launch call for both backends:
//     launch(scores_kernel<T>, {grid, block, smem_bytes}, p, S);
// nvcc: a <<<grid, block, smem, stream>>> launch on this thread's launch_stream(), checked. Host
// compiler: simt::launch runs the grid on the CPU and reports faults with the launch site (the
// default member `where` records the caller).
#pragma once

#include <cstddef>
#include "common/simt/where.h"

#include "common/run_context.h"

namespace attn {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t smem_bytes = 0;
  simt::where_t where = simt::where_t::current();
};

// Whether this translation unit is instrumented (GCC's -fsanitize=thread: ATTN_INSTRUMENT_FLAGS).
// It is a template argument of launch below, so that the instrumented and the plain copies of a
// kernel's launch are different functions: the linker cannot merge them into one.
#if defined(__SANITIZE_THREAD__)
#define ATTN_INSTRUMENTED_TU true
#else
#define ATTN_INSTRUMENTED_TU false
#endif

template <bool kInstrumented = ATTN_INSTRUMENTED_TU, typename... Params, typename... Args>
void launch(void (*kernel)(Params...), const LaunchConfig& cfg, const Args&... args) {
#if defined(__CUDACC__)
  if (cfg.smem_bytes > 48 * 1024)
    ATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(cfg.smem_bytes)));
  kernel<<<cfg.grid, cfg.block, cfg.smem_bytes, static_cast<cudaStream_t>(launch_stream())>>>(
      args...);
  ATTN_CUDA_CHECK(cudaGetLastError());
#else
  simt::launch(
      cfg.grid, cfg.block, cfg.smem_bytes, [&] { kernel(args...); }, cfg.where, kInstrumented);
#endif
}

}  // namespace attn
