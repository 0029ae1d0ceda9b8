// The CPU backend's device, as far as a kernel's launch needs it besides the compute capability
// (common/arch.h): its streaming multiprocessors, which a persistent grid sizes itself by.
#pragma once

namespace simt {

// The SMs of an H100 SXM, the GPU the CPU backend presents itself as.
constexpr int kDefaultSms = 132;

// SIMT_SMS if set (a whole number from 1 to 1024: a small count makes each block of a persistent
// grid take several tiles), else kDefaultSms. Any other value throws std::invalid_argument with a
// one-line reason; the harness asks before it runs a step, so that a step is refused, not failed.
int sm_count();

}  // namespace simt
