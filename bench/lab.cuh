// What the lab programs (gemm_lab.cu, attention_lab.cu) share: CHECK_CUDA,
// which prints the failing call and its error and exits.
#ifndef VKERN_BENCH_LAB_CUH
#define VKERN_BENCH_LAB_CUH

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(x)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

#endif  // VKERN_BENCH_LAB_CUH
