#include "common/tensors.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/memory.h"
#include "common/philox.h"

namespace attn {

Bits16 to_bits(float x, DType t) {
  if (t == DType::fp16) return static_cast<__half_raw>(__float2half_rn(x)).x;
  return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
}

float from_bits(Bits16 b, DType t) {
  if (t == DType::fp16) {
    __half_raw r;
    r.x = b;
    return __half2float(__half(r));
  }
  __nv_bfloat16_raw r;
  r.x = b;
  return __bfloat162float(__nv_bfloat16(r));
}

namespace {

// Fills `out` with mean + U(-1, 1), rounded to `t`. `stream` separates Q, K, V and dO.
void fill(std::vector<Bits16>& out, int64_t n, uint32_t stream, uint64_t seed, DType t, float mean,
          const char* label) {
  host_resize(out, n, label);
  const uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  // Counter-based: every group of four is drawn from its own counter, so the threads that share
  // the work draw the same numbers as one would.
  // Threads for large tensors only: after a parallel region libgomp's idle threads spin for a
  // while, taking a core from the emulator, longer than a small fill takes.
  constexpr int64_t kParallelElements = int64_t(1) << 20;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t base = 0; base < n; base += 4) {
    const PhiloxWords words =
        philox4x32_10({{static_cast<uint32_t>(base >> 2), static_cast<uint32_t>(base >> 34), stream,
                        0x5eed1234u}},
                      key0, key1);
    for (int w = 0; w < 4 && base + w < n; ++w)
      out[base + w] = to_bits(mean + uniform_pm1(words.v[w]), t);
  }
}

}  // namespace

HostInputs make_inputs(const Problem& p) {
  HostInputs in;
  fill(in.q, p.q_elements(), 1, p.seed, p.dtype, 0.5f, "Q (host)");
  fill(in.k, p.kv_elements(), 2, p.seed, p.dtype, 0.5f, "K (host)");
  fill(in.v, p.kv_elements(), 3, p.seed, p.dtype, 0.5f, "V (host)");
  return in;
}

std::vector<Bits16> make_dout(const Problem& p) {
  std::vector<Bits16> dout;
  fill(dout, p.q_elements(), 4, p.seed, p.dtype, 0.0f, "dO (host)");
  return dout;
}

}  // namespace attn
