// Every Hopper wrapper of common/ptx.h in one kernel, compiled by nvcc for sm_90a into PTX; the
// CTest sm90.wrappers_in_ptx checks that the PTX holds each instruction.
#include "common/ptx.h"

namespace sm90_test {

template <typename T>
__global__ void __launch_bounds__(384, 1)
    every_hopper_wrapper(const __grid_constant__ attn::TensorMap map, float* out) {
  unsigned char* smem = attn::shared_memory<unsigned char>();
  auto* bar = reinterpret_cast<uint64_t*>(smem + 32768);
  if (threadIdx.x == 0) attn::mbarrier_init(bar, 1);
  attn::mbarrier_label(bar, "bar");
  __syncthreads();
  if (attn::elect_one() && threadIdx.x < 32) {
    attn::mbarrier_arrive_expect_tx(bar, 3 * 4096);
    attn::tma_load_2d(smem, &map, bar, 0, 0);
    attn::tma_load_3d(smem + 4096, &map, bar, 0, 0, 0);
    attn::tma_load_4d(smem + 8192, &map, bar, 0, 0, 0, 0);
    attn::mbarrier_expect_tx(bar, 0);
  }
  attn::mbarrier_wait_parity(bar, 0);
  attn::mbarrier_arrive(bar + 1);
  attn::cp_async_mbarrier_arrive_noinc(bar + 2);
  attn::fence_proxy_async_shared();
  if (threadIdx.x == 0) {
    attn::bulk_reduce_add_f32(out + 512, reinterpret_cast<const float*>(smem + 16384), 64);
    attn::bulk_commit();
    attn::bulk_wait_read<0>();
    attn::bulk_wait<0>();
  }
  if (threadIdx.x < 128) {
    attn::setmaxnreg_dec<40>();
    attn::named_barrier_arrive(1, 256);
  } else {
    attn::setmaxnreg_inc<232>();
    attn::named_barrier_sync(1, 256);
    const uint64_t da = attn::make_wgmma_desc(smem, 16, 1024, attn::WgmmaSwizzle::b128);
    const uint64_t db = attn::make_wgmma_desc(smem + 8192, 16, 1024, attn::WgmmaSwizzle::b128);
    float d64[32] = {}, d128[64] = {}, d256[128] = {};
    uint32_t a[4] = {threadIdx.x, 1, 2, 3};
    attn::wgmma_fence();
    attn::wgmma_ss<64, T>(d64, da, db, false);
    attn::wgmma_ss<128, T, false, true>(d128, da, db, true);
    attn::wgmma_ss<256, T, true, true>(d256, da, db, true);
    attn::wgmma_rs<64, T>(d64, a, db, true);
    attn::wgmma_rs<128, T, true>(d128, a, db, true);
    attn::wgmma_commit();
    attn::wgmma_wait<0>();
    float s = 0;
    for (float x : d64) s += x;
    for (float x : d128) s += x;
    for (float x : d256) s += x;
    out[threadIdx.x] = s;
  }
}

}  // namespace sm90_test

template __global__ void sm90_test::every_hopper_wrapper<__half>(
    const __grid_constant__ attn::TensorMap, float*);
template __global__ void sm90_test::every_hopper_wrapper<__nv_bfloat16>(
    const __grid_constant__ attn::TensorMap, float*);
