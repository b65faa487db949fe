// AdamW's step constants, shared by the cpu and cuda kernels (cpu/adamw.cc,
// cuda/adamw.cu): computed once per call on the host in binary64 and rounded
// once to binary32, the roundings oracle/adamw.go's bound assumes.
//
// decay = fma(−lr, weight_decay, 1); 1 − β as a binary64 difference;
// cᵢ = 1 − βᵢᵗ as −expm1(t·log βᵢ), within a few ulps of binary64 even where
// βᵢᵗ is near 1, and exactly 1 for βᵢ = 0; step_size = η = lr/c1; root2 = √c2.
#ifndef VKERN_CORE_ADAMW_H
#define VKERN_CORE_ADAMW_H

#include <cmath>

namespace vkern {
namespace adamw_step {

// Scalars are the step's constants in binary32.
struct Scalars {
  float scale, decay, beta1, keep1, beta2, keep2, step_size, root2, eps;
};

// correction is 1 − βᵗ.
inline double correction(double beta, double t) { return -std::expm1(t * std::log(beta)); }

inline Scalars scalars_of(double lr, double beta1, double beta2, double eps, double weight_decay, double t,
                          double grad_scale) {
  Scalars s;
  s.scale = static_cast<float>(grad_scale);
  s.decay = static_cast<float>(std::fma(-lr, weight_decay, 1.0));
  s.beta1 = static_cast<float>(beta1);
  s.keep1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.keep2 = static_cast<float>(1.0 - beta2);
  s.step_size = static_cast<float>(lr / correction(beta1, t));
  s.root2 = static_cast<float>(std::sqrt(correction(beta2, t)));
  s.eps = static_cast<float>(eps);
  return s;
}

}  // namespace adamw_step
}  // namespace vkern

#endif  // VKERN_CORE_ADAMW_H
