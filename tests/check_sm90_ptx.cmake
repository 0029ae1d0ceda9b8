# Fails unless the PTX of tests/sm90_wrappers.cu holds every Hopper instruction of common/ptx.h.
file(READ ${PTX} ptx)
foreach(insn
    "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"
    "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"
    "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"
    "wgmma.fence.sync.aligned" "wgmma.commit_group.sync.aligned" "wgmma.wait_group.sync.aligned"
    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    "cp.async.bulk.tensor.3d" "cp.async.bulk.tensor.4d"
    "mbarrier.init.shared::cta.b64" "mbarrier.arrive.shared::cta.b64"
    "mbarrier.arrive.expect_tx.shared::cta.b64" "mbarrier.expect_tx"
    "mbarrier.try_wait.parity.shared::cta.b64" "cp.async.mbarrier.arrive.noinc.shared::cta.b64"
    "fence.proxy.async.shared::cta" "setmaxnreg.inc.sync.aligned.u32 232"
    "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32" "cp.async.bulk.commit_group"
    "cp.async.bulk.wait_group.read 0" "cp.async.bulk.wait_group 0"
    "setmaxnreg.dec.sync.aligned.u32 40" "elect.sync" "bar.arrive" "bar.sync")
  string(FIND "${ptx}" "${insn}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "sm_90a PTX of the wrappers lacks ${insn}")
  endif()
endforeach()
message(STATUS "every Hopper wrapper is in the sm_90a PTX")
