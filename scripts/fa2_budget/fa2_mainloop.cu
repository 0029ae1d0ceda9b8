// FlashAttention-2's forward kernel, `flash_fwd_kernel` of a flash-attention checkout, compiled at
// step 4's tile shape for scripts/fa2_budget.sh: 64 query rows and 64 keys per tile, 4 warps,
// fp16, without dropout, causal mask, local window, ALiBi or softcap, every tile full (the steady
// state the budget is about). Nothing of FlashAttention-2 is copied here: the include path points
// at the checkout, and these lines only name two instantiations of its own template.
#include "flash_fwd_launch_template.h"

// Flash_fwd_kernel_traits<head dim, rows per block, keys per tile, warps, Is_Q_in_regs,
// Share_Q_K_smem, element>; then Is_dropout, Is_causal, Is_local, Has_alibi, Is_even_MN,
// Is_even_K, Is_softcap, Return_softmax, as run_flash_fwd chooses them for such a problem.
template __global__ void FLASH_NAMESPACE::flash_fwd_kernel<
    Flash_fwd_kernel_traits<64, 64, 64, 4, false, false, cutlass::half_t>, false, false, false,
    false, true, true, false, false>(KERNEL_PARAM_MODIFIER const FLASH_NAMESPACE::Flash_fwd_params);
template __global__ void FLASH_NAMESPACE::flash_fwd_kernel<
    Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::half_t>, false, false, false,
    false, true, true, false, false>(KERNEL_PARAM_MODIFIER const FLASH_NAMESPACE::Flash_fwd_params);
