// attn_suite peaks: the two ceilings a kernel's time is held against, measured on this GPU in this
// run rather than taken from a datasheet: the bf16 matrix-product rate (cuBLAS, 8192 x 8192 x 8192,
// bf16 in and out, FP32 accumulation, random inputs) and the device-to-device copy bandwidth (2
// GiB, bytes read plus bytes written). Each the median of 20 after 3 warm-ups, timed with CUDA
// events.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <vector>

#include "common/backend.h"
#include "common/report.h"
#include "suite/suite.h"

#if ATTN_HAVE_GPU
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>

#include "common/tensors.h"
#endif

namespace suite {

#if ATTN_HAVE_GPU
namespace {

template <typename F>
double median_ms(F&& body) {
  cudaEvent_t a, b;
  ATTN_CUDA_CHECK(cudaEventCreate(&a));
  ATTN_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < 23; ++i) {
    ATTN_CUDA_CHECK(cudaEventRecord(a));
    body();
    ATTN_CUDA_CHECK(cudaEventRecord(b));
    ATTN_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
}

double copy_tb_per_s() {
  const size_t bytes = size_t(2) << 30;
  void *src = nullptr, *dst = nullptr;
  ATTN_CUDA_CHECK(cudaMalloc(&src, bytes));
  ATTN_CUDA_CHECK(cudaMalloc(&dst, bytes));
  ATTN_CUDA_CHECK(cudaMemset(src, 0x5a, bytes));
  const double ms = median_ms(
      [&] { ATTN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e12;
}

double bf16_gemm_tflops() {
  const int n = 8192;
  const size_t elements = size_t(n) * n;
  std::vector<attn::Bits16> host(elements);
  uint64_t x = 0x9E3779B97F4A7C15ull;  // xorshift64: random, never zero (zeros run faster)
  for (attn::Bits16& h : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    h = attn::to_bits(float(x >> 40) / float(1 << 24) * 2.0f - 1.0f, attn::DType::bf16);
  }
  void *a = nullptr, *b = nullptr, *c = nullptr;
  for (void** p : {&a, &b, &c}) ATTN_CUDA_CHECK(cudaMalloc(p, elements * 2));
  ATTN_CUDA_CHECK(cudaMemcpy(a, host.data(), elements * 2, cudaMemcpyHostToDevice));
  ATTN_CUDA_CHECK(cudaMemcpy(b, host.data(), elements * 2, cudaMemcpyHostToDevice));
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasCreate failed");
  const float one = 1, zero = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const double ms = median_ms([&] {
    const cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, n, n, n, &one, a,
                                          CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero, c, CUDA_R_16BF,
                                          n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) status = s;
  });
  cublasDestroy(handle);
  for (void* p : {a, b, c}) cudaFree(p);
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasGemmEx failed: status " + std::to_string(int(status)));
  return 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
}

}  // namespace

int peaks(const std::string& csv) {
  std::string why;
  const auto gpu = attn::make_gpu_backend(why);
  if (!gpu) {
    std::cerr << "attn_suite peaks: " << why << "\n";
    return 2;
  }
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    if (!out) {
      std::cerr << "attn_suite peaks: --csv " << csv << ": cannot write it\n";
      return 2;
    }
  }
  try {
    const double copy = copy_tb_per_s();
    const double gemm = bf16_gemm_tflops();
    std::cout << "peaks: " << gpu->device() << ": device-to-device copy " << copy
              << " TB/s (read + write), bf16 matrix product " << gemm << " TFLOP/s" << std::endl;
    if (out.is_open())
      out << "measure,value,unit,device,driver,method\n"
          << "copy_bandwidth," << copy << ",TB/s," << attn::csv_escape(gpu->device()) << ","
          << gpu->driver()
          << ",cudaMemcpyAsync of 2 GiB device to device; bytes read plus written; median of 20\n"
          << "bf16_matmul," << gemm << ",TFLOP/s," << attn::csv_escape(gpu->device()) << ","
          << gpu->driver()
          << ",cublasGemmEx 8192^3 bf16 in and out FP32 accumulation random inputs; median of 20\n";
  } catch (const std::exception& e) {
    std::cerr << "attn_suite peaks: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
#else
int peaks(const std::string&) {
  std::cerr << "attn_suite peaks: " << attn::kBuiltWithoutToolkit << "\n";
  return 2;
}
#endif

}  // namespace suite
