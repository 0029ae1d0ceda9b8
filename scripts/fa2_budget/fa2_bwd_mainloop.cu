// FlashAttention-2's backward kernel, `flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel` of a
// flash-attention checkout, compiled for scripts/fa2_budget.sh --backward at the tile shapes its
// own run_mha_bwd_hdim64 and run_mha_bwd_hdim128 choose on an A100 or H100 (at least 144 KB of
// shared memory a block): fp16, without dropout, causal mask, local window, ALiBi or softcap,
// every tile full (the steady state the budget is about). Nothing of FlashAttention-2 is copied
// here: the include path points at the checkout, and these lines only name two instantiations of
// its own template.
#include "flash_bwd_launch_template.h"

// Flash_bwd_kernel_traits<head dim, query rows per tile, keys per block, warps, AtomLayoutMSdP,
// AtomLayoutNdKV, AtomLayoutMdQ, Is_V_in_regs, No_double_buffer, element>; then Is_dropout,
// Is_causal, Is_local, Has_alibi, Is_even_MN, Is_even_K, Is_softcap, as run_flash_bwd_seqk_parallel
// chooses them for such a problem.
template __global__ void FLASH_NAMESPACE::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<
    Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, false, cutlass::half_t>, false, false,
    false, false, true, true, false>(KERNEL_PARAM_MODIFIER const FLASH_NAMESPACE::Flash_bwd_params);
template __global__ void FLASH_NAMESPACE::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<
    Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::half_t>, false, false,
    false, false, true, true, false>(KERNEL_PARAM_MODIFIER const FLASH_NAMESPACE::Flash_bwd_params);
