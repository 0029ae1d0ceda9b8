// ATTN_HD marks a function usable from host code and from kernels. Under nvcc it is
// __host__ __device__; for the host compiler (plain host code and the SIMT backend) it is empty.
#pragma once

#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__ __forceinline__
#else
#define ATTN_HD inline
#endif
