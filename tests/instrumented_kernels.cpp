// Small kernels for tests/test_instrumented.cpp, compiled with the instrumentation of the
// instrumented test build (every load and store checked by common/simt/checks.cpp).
#include "common/kernel.h"
#include "common/ptx.h"

namespace instrumented {

// Thread t stores to word t of shared memory, then reads word `read`: one past the end when
// `read` is the number of words the launch gave it.
__global__ void shared_access(float* out, int read) {
  float* s = attn::shared_memory<float>();
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[read];
}

// 49 threads store the 49 halves of 98 bytes of shared memory; then thread 0 reads the 4-byte word
// at byte `at`: at 96 its last two bytes lie past the end, inside the last 16-byte chunk, which
// the block wrote.
__global__ void shared_tail_read(float* out, int at) {
  attn::shared_memory<uint16_t>()[threadIdx.x] = static_cast<uint16_t>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0)
    out[0] = static_cast<float>(attn::shared_memory<uint32_t>()[at / 4] & 0xFFFF);
}

// 32 threads store words 0..63 of 128 words of shared memory, then read word 63 (which 0), word 64
// (which 1: never written), or take an ldmatrix of rows 32..39 (which 2: never written either).
__global__ void unwritten_read(float* out, int which) {
  float* s = attn::shared_memory<float>();
  s[threadIdx.x] = s[threadIdx.x + 32] = static_cast<float>(threadIdx.x + 32);
  __syncthreads();
  if (which == 2) {
    uint32_t r[1];
    attn::ldmatrix<1>(r, s + 64 + 4 * (threadIdx.x % 8));
    out[threadIdx.x] = static_cast<float>(r[0]);
    return;
  }
  if (threadIdx.x == 0) out[0] = s[which == 1 ? 64 : 63];
}

// One warp stores an 8x8 matrix of 16-bit elements (each lane a 4-byte word), orders its stores
// with __syncwarp and reads the matrix with ldmatrix; then stores it again and reads it again,
// with (sync 1) or without (sync 0) a second __syncwarp. ldmatrix hands each row to every lane, so
// without it the second read is not ordered after the other lanes' stores (nor the lane's own).
__global__ void restore_then_ldmatrix(uint32_t* out, int sync) {
  uint32_t* s = attn::shared_memory<uint32_t>();
  uint32_t r[1];
  s[threadIdx.x] = threadIdx.x;
  __syncwarp();
  attn::ldmatrix<1>(r, s + 4 * (threadIdx.x % 8));
  s[threadIdx.x] = r[0] + 100;
  if (sync) __syncwarp();
  attn::ldmatrix<1>(r, s + 4 * (threadIdx.x % 8));
  out[threadIdx.x] = r[0];
}

// Two warps fill 128 words of shared memory and meet at __syncthreads, after which every store is
// visible to all. Then each lane of warp 0 stores to a 16-byte chunk of its own and reads its
// neighbour's (lane 31 its own) after a __syncwarp (sync 1) or after only a shuffle (sync 0),
// which orders no memory, while warp 1 meets alone at a named barrier, which orders none of warp
// 0's stores: in the default (forward) order it completes between warp 0's stores and the reads
// of lanes 0-30.
__global__ void restore_after_barrier(float* out, int sync) {
  float* s = attn::shared_memory<float>();
  s[threadIdx.x] = s[threadIdx.x + 64] = 0.0f;
  __syncthreads();
  if (threadIdx.x >= 32) {
    attn::named_barrier_sync(1, 32);
    return;
  }
  const int lane = static_cast<int>(threadIdx.x);
  s[4 * lane] = static_cast<float>(lane + 100);
  if (sync) __syncwarp();
  const int next = __shfl_sync(0xffffffffu, lane == 31 ? 31 : lane + 1, lane);
  out[lane] = s[4 * next];
}

// 32 threads store words 0..31 of shared memory; then thread 0 copies in[0..3] over words 0..3
// with cp.async and reads word 0: after its cp.async.wait_group (wait 1), or while the copy is in
// flight (wait 0), into memory that was written before (so not a read of the start-up poison).
__global__ void refill_then_read(const float* in, float* out, int wait) {
  float* s = attn::shared_memory<float>();
  s[threadIdx.x] = 0.0f;
  __syncthreads();
  if (threadIdx.x != 0) return;
  attn::cp_async_16(s, in, 16);
  attn::cp_async_commit();
  if (wait) attn::cp_async_wait<0>();
  out[0] = s[0];
}

// Reads in[i] for i in [first, first + blockDim.x): before the buffer when first < 0.
__global__ void global_read(const float* in, float* out, int first) {
  out[threadIdx.x] = in[first + static_cast<int>(threadIdx.x)];
}

// Every thread adds to one counter: the atomics of an instrumented kernel work and are checked.
__global__ void count(int* counter, unsigned* bits) {
  atomicAdd(counter, 1);
  atomicMax(reinterpret_cast<int*>(bits), static_cast<int>(threadIdx.x));
}

// An instrumented function that a plain kernel calls, as a plain kernel may call an inline helper
// whose definition the linker took from an instrumented copy: one store to shared word `word`.
void touch_shared(int word) {
  attn::shared_memory<float>()[word] = 1.0f;
}

void run_unwritten_read(float* out, int which) {
  attn::launch(unwritten_read, {dim3(1), dim3(32), 128 * sizeof(float)}, out, which);
}
void run_refill_then_read(const float* in, float* out, int wait) {
  attn::launch(refill_then_read, {dim3(1), dim3(32), 32 * sizeof(float)}, in, out, wait);
}
void run_restore_then_ldmatrix(uint32_t* out, int sync) {
  attn::launch(restore_then_ldmatrix, {dim3(1), dim3(32), 32 * sizeof(uint32_t)}, out, sync);
}
void run_restore_after_barrier(float* out, int sync) {
  attn::launch(restore_after_barrier, {dim3(1), dim3(64), 128 * sizeof(float)}, out, sync);
}
void run_shared_access(float* out, int words, int read) {
  attn::launch(shared_access, {dim3(1), dim3(words), words * sizeof(float)}, out, read);
}
void run_shared_tail_read(float* out, int at) {
  attn::launch(shared_tail_read, {dim3(1), dim3(49), 49 * sizeof(uint16_t)}, out, at);
}
void run_global_read(const float* in, float* out, int n, int first) {
  attn::launch(global_read, {dim3(1), dim3(n)}, in, out, first);
}
void run_count(int* counter, unsigned* bits, int threads) {
  attn::launch(count, {dim3(2), dim3(threads)}, counter, bits);
}

}  // namespace instrumented
