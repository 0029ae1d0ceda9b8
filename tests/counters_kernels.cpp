// Access patterns with known counts, for tests/test_counters.cpp: compiled with the instrumented
// build's flags (every load and store counted, at the width the source gives it).
#include <cstring>

#include "common/kernel.h"
#include "common/ptx.h"

namespace counters_kernels {

// One warp. Lane l loads `bytes` (4, 8 or 16) from shared memory at byte (l * stride) % 4096,
// after every lane stored the 4096 bytes (32-bit stores, conflict-free).
__global__ void shared_pattern(int bytes, int stride, uint32_t* out) {
  uint32_t* s = attn::shared_memory<uint32_t>();
  for (int x = int(threadIdx.x); x < 1024; x += 32) s[x] = uint32_t(x);
  __syncthreads();
  const int at = int(threadIdx.x) * stride % 4096;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s) + at;
  uint32_t v = 0;
  if (bytes == 4) {
    v = *reinterpret_cast<const uint32_t*>(p);  // the 4-byte load
  } else if (bytes == 8) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);  // the 8-byte load
    v = q.x ^ q.y;
  } else {
    const uint4 q = *reinterpret_cast<const uint4*>(p);  // the 16-byte load
    v = q.x ^ q.y ^ q.z ^ q.w;
  }
  out[threadIdx.x] = v;
}

// One warp, one ldmatrix.x4 of a 32 x 64 tile of 16-bit elements: matrix j is rows 8j .. 8j + 7,
// columns 0-7. layout 0: rows of 128 bytes; 1: rows padded to 144 bytes; 2: 128-byte rows with the
// 16-byte chunk c of row r stored at chunk c ^ (r % 8) (step 4's swizzle).
__global__ void ldmatrix_pattern(int layout, uint32_t* out) {
  unsigned char* s = attn::shared_memory<unsigned char>();
  const int pitch = layout == 1 ? 144 : 128;
  for (int x = int(threadIdx.x); x < 32 * pitch / 4; x += 32)
    reinterpret_cast<uint32_t*>(s)[x] = uint32_t(x);
  __syncthreads();
  const int r = int(threadIdx.x);  // lane l gives row l's address (matrix l / 8)
  const int chunk = layout == 2 ? 0 ^ (r % 8) : 0;
  uint32_t regs[4];
  attn::ldmatrix<4>(regs, s + r * pitch + chunk * 16);
  out[threadIdx.x] = regs[0];
}

// One warp. Lane l loads 4 or 16 bytes from global memory at byte offset + l * stride.
__global__ void global_pattern(const unsigned char* in, int bytes, int stride, int offset,
                               uint32_t* out) {
  const unsigned char* p = in + offset + int(threadIdx.x) * stride;
  uint32_t v;
  if (bytes == 16) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);  // the global 16-byte load
    v = q.x ^ q.y ^ q.z ^ q.w;
  } else {
    v = *reinterpret_cast<const uint32_t*>(p);  // the global 4-byte load
  }
  out[threadIdx.x] = v;
}

// One warp. Lane l copies 16 bytes from global offset l * stride into shared 16 * l with
// cp.async, then every lane waits and reads its chunk back.
__global__ void cp_async_pattern(const unsigned char* in, int stride, uint32_t* out) {
  unsigned char* s = attn::shared_memory<unsigned char>();
  attn::cp_async_16(s + 16 * threadIdx.x, in + int(threadIdx.x) * stride, 16);
  attn::cp_async_commit();
  attn::cp_async_wait<0>();
  __syncwarp();
  out[threadIdx.x] = *reinterpret_cast<const uint32_t*>(s + 16 * threadIdx.x);
}

// Two warps. Warp 0 arrives on named barrier 1 (bar.arrive: it does not wait) and stores four
// coalesced rows; warp 1 waits there (bar.sync). Warp 0 never synchronises: its stores are four
// warp-level instructions, whenever the barrier completes.
__global__ void arrive_then_store(uint32_t* out) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (warp == 0) {
    attn::named_barrier_arrive(1, 64);
    for (int k = 0; k < 4; ++k) out[32 * k + lane] = uint32_t(k);  // the stores after bar.arrive
  } else {
    attn::named_barrier_sync(1, 64);
  }
}

// Blocks of one warp. Lane l adds 1 to out[l] `times` times with atomicAdd: the blocks that worker
// threads run at once contend for the same 32 floats.
__global__ void atomic_adds(float* out, int times) {
  for (int k = 0; k < times; ++k) atomicAdd(&out[threadIdx.x], 1.0f);  // the float atomicAdd
}

void run_shared(int bytes, int stride, uint32_t* out) {
  attn::launch(shared_pattern, {dim3(1), dim3(32), 4096 + 16}, bytes, stride, out);
}
void run_ldmatrix(int layout, uint32_t* out) {
  attn::launch(ldmatrix_pattern, {dim3(1), dim3(32), 32 * 144}, layout, out);
}
void run_global(const unsigned char* in, int bytes, int stride, int offset, uint32_t* out) {
  attn::launch(global_pattern, {dim3(1), dim3(32)}, in, bytes, stride, offset, out);
}
void run_arrive_then_store(uint32_t* out) {
  attn::launch(arrive_then_store, {dim3(1), dim3(64)}, out);
}
void run_cp_async(const unsigned char* in, int stride, uint32_t* out) {
  attn::launch(cp_async_pattern, {dim3(1), dim3(32), 512}, in, stride, out);
}
void run_atomic_adds(float* out, int blocks, int times) {
  attn::launch(atomic_adds, {dim3(unsigned(blocks)), dim3(32)}, out, times);
}

}  // namespace counters_kernels
