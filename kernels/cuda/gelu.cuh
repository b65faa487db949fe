// GPT-2's tanh GELU and its derivative in binary32, for gelu and gelu_grad
// (elementwise.cu) and the matmul family's GELU epilogues (epilogue.cuh),
// so that the fused and the separate ops evaluate the same expressions in
// the same order (cpu/gelu.h's, which the oracle's bounds follow):
//
//   gelu(x)      = ½x·(1 + T),   T = tanh t, t = c·(x + k·x·x·x)
//   dy·gelu′(x)  = dy·(½(1 + T) + ½x·(1 − T²)·c·(1 + 3k·x²))
//
// c = √(2/π) and k = 0.044715 rounded to binary32; tanhf is CUDA's accurate
// tanh (within 2 ulps; no -use_fast_math), which the oracle allows twice
// over.
#ifndef VKERN_CUDA_GELU_CUH
#define VKERN_CUDA_GELU_CUH

#include "cuda/compat.h"

namespace {
namespace vkern_gelu {

constexpr float kGeluC = 0.7978845608f;  // √(2/π)
constexpr float kGeluK = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float t = kGeluC * (x + kGeluK * x * x * x);
  return 0.5f * x * (1.0f + tanhf(t));
}

// dy·gelu′(x).
__device__ __forceinline__ float gelu_grad(float x, float dy) {
  const float T = tanhf(kGeluC * (x + kGeluK * x * x * x));
  const float sech2 = 1.0f - T * T;
  const float inner = kGeluC * (1.0f + 3.0f * kGeluK * x * x);
  return dy * (0.5f * (1.0f + T) + 0.5f * x * sech2 * inner);
}

}  // namespace vkern_gelu
}  // namespace

#endif  // VKERN_CUDA_GELU_CUH
