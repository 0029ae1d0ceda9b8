// mma.sync m16n8k16 and ldmatrix as kernels call them (through common/ptx.h): inline, because
// they run once per lane for every mma and ldmatrix of a kernel, so that the kernel's call is the
// warp collective's. What they compute is in ptx.cpp; ptx.h documents both.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/simt/ptx.h"
#include "common/simt/runtime.h"
#include "common/simt/where.h"

// The instrumented test build (cmake/AttnStep.cmake) checks a kernel's own loads and stores; these
// are the backend's (a lane's operands on its stack), so they stay out of it. Functions whose
// sanitizer attributes differ are not inlined into each other: there they remain calls.
#define SIMT_NOT_INSTRUMENTED __attribute__((no_sanitize("thread", "alignment")))

namespace simt {

namespace detail {
// The collectives' compute functions (ptx.cpp; mma's is the AVX2 body or the portable one,
// chosen before main).
extern const CollectiveFn g_mma_f16;
extern const CollectiveFn g_mma_bf16;
extern const CollectiveFn g_ldmatrix;
[[noreturn, gnu::noinline, gnu::cold]] void not_whole_warps(const char* what,
                                                            const simt::where_t& where);

// On every mma and ldmatrix: the block size from the thread's own ids, not a call.
SIMT_NOT_INSTRUMENTED inline void need_whole_warp(const char* what, const simt::where_t& where) {
  const dim3& bd = current().block_dim;
  if (bd.x * bd.y * bd.z % 32 != 0) [[unlikely]]
    not_whole_warps(what, where);
}
}  // namespace detail

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 d, a, b, c.
SIMT_NOT_INSTRUMENTED inline void mma_m16n8k16(MmaType type, float (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2], const float (&c)[4],
                                               const simt::where_t& where) {
  detail::need_whole_warp("mma.sync", where);
  detail::MmaIn in;
  std::memcpy(in.a, a, sizeof in.a);
  std::memcpy(in.b, b, sizeof in.b);
  std::memcpy(in.c, c, sizeof in.c);
  const bool f16 = type == MmaType::f16;
  detail::warp_collective(0xffffffffu, f16 ? detail::kMmaF16 : detail::kMmaBf16, &in, d,
                          f16 ? detail::g_mma_f16 : detail::g_mma_bf16, where);
}

// ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: `count` 8x8 matrices of 16-bit
// elements; lanes 8j..8j+7 give the row addresses of matrix j.
SIMT_NOT_INSTRUMENTED inline void ldmatrix(int count, bool trans, uint32_t* regs,
                                           const void* row_address, const simt::where_t& where) {
  detail::need_whole_warp("ldmatrix", where);
  // Lanes past the last matrix's rows supply no address (hardware ignores them).
  if (detail::current().lane < 8 * count)
    detail::check_shared_read16(row_address, "ldmatrix", where);
  const detail::LdmatrixIn in{static_cast<const unsigned char*>(row_address), count, trans ? 1 : 0};
  uint32_t out[4];
  detail::warp_collective(0xffffffffu, detail::kLdmatrix, &in, out, detail::g_ldmatrix, where);
  std::memcpy(regs, out, sizeof(uint32_t) * count);
}

}  // namespace simt
