// CPU emulations of the sm_80 PTX instructions the tensor-core steps use, following NVIDIA's PTX
// ISA (sections "Matrix Fragments for mma.m16n8k16 with floating point type", "ldmatrix" and
// "cp.async"); common/ptx.h states each layout in this project's notation. Kernels call them
// through common/ptx.h, which uses the real instruction under nvcc.
//
// Strictness beyond hardware: a cp.async copy lands in shared memory only when a wait_group
// retires its group, and its destination reads as poison from the moment it is issued, so a
// missing wait, or a refill of a buffer another warp still reads, reads poison; ldmatrix
// and cp.async check that their shared addresses lie in the block's shared memory and are
// aligned; mma and ldmatrix need all 32 lanes of the warp.
#pragma once

#include <cstdint>
#include <source_location>

namespace simt {

enum class MmaType { f16, bf16 };

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 d, a, b, c.
void mma_m16n8k16(MmaType type, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                  const float (&c)[4], const std::source_location& where);

// ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: `count` 8x8 matrices of 16-bit
// elements; lanes 8j..8j+7 give the row addresses of matrix j.
void ldmatrix(int count, bool trans, uint32_t* regs, const void* row_address,
              const std::source_location& where);

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: copies src_bytes (0..16) and zero-fills
// the rest of the 16 bytes, asynchronously.
void cp_async_16(void* dst, const void* src, int src_bytes, const std::source_location& where);
// cp.async.commit_group
void cp_async_commit();
// cp.async.wait_group n: returns when at most n of this thread's committed groups are pending.
void cp_async_wait(int n, const std::source_location& where);

// Fault injection for tests: removes every cp.async.wait_group (copies then never land), or the
// block barrier or __syncwarp at one source line, as if the kernel had been written without it.
namespace testing {
void skip_cp_async_wait(bool on);
void skip_barrier_at(const char* file_suffix, int line);  // line 0: none
bool barrier_skipped(const std::source_location& where);
}  // namespace testing

}  // namespace simt
