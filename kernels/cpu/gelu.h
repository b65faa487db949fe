// GPT-2's tanh GELU and its derivative over runs of binary32 values, for
// gelu and gelu_grad (elementwise.cc) and the matmul family's GELU
// epilogues (gemm.cc), so that the fused and the separate ops evaluate the
// same expressions in the same order:
//
//   gelu(x)  = ½x·(1 + T),                         T = tanh t, t = c·(x + k·x·x·x)
//   gelu′(x) = ½(1 + T) + ½x·(1 − T²)·c·(1 + 3k·x²)
//
// with c = √(2/π) and k = 0.044715 rounded to binary32, and tanh from
// vmath.h's tanh_run. t takes seven roundings (oracle.geluParts' count);
// the oracle's gelu, gelu_grad and GELU epilogue bounds follow these
// expressions.
#ifndef VKERN_CPU_GELU_H
#define VKERN_CPU_GELU_H

#include <cmath>
#include <cstddef>

#include "cpu/vmath.h"

namespace vkern {
namespace {

// kGeluRun is the longest run the functions below take (their scratch is
// on the stack).
constexpr size_t kGeluRun = 1024;

// GELU's constants in binary32: √(2/π) and 0.044715.
constexpr float kGeluC = 0.7978845608f;
constexpr float kGeluK = 0.044715f;

// gelu_run replaces v[0, n) by gelu(v), n ≤ kGeluRun.
inline void gelu_run(float* v, size_t n) {
  float t[kGeluRun];
  for (size_t i = 0; i < n; ++i) t[i] = kGeluC * (v[i] + kGeluK * v[i] * v[i] * v[i]);
  tanh_run(t, n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.5f * v[i] * (1.0f + t[i]);
}

// gelu_grad_run replaces x[0, n) by dy·gelu′(x), n ≤ kGeluRun.
inline void gelu_grad_run(float* x, const float* dy, size_t n) {
  float T[kGeluRun];
  for (size_t i = 0; i < n; ++i) T[i] = kGeluC * (x[i] + kGeluK * x[i] * x[i] * x[i]);
  tanh_run(T, n);
  for (size_t i = 0; i < n; ++i) {
    const float sech2 = 1.0f - T[i] * T[i];
    const float inner = kGeluC * (1.0f + 3.0f * kGeluK * x[i] * x[i]);
    x[i] = dy[i] * (0.5f * (1.0f + T[i]) + 0.5f * x[i] * sech2 * inner);
  }
}

}  // namespace
}  // namespace vkern

#endif  // VKERN_CPU_GELU_H
