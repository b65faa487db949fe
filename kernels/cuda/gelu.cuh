// GPT-2's tanh GELU and its derivative in binary32, for gelu and gelu_grad
// (elementwise.cu) and the matmul family's GELU epilogues (epilogue.cuh),
// so that the fused and the separate ops evaluate the same expressions in
// the same order. The same functions as the cpu backend's (cpu/gelu.h),
// written through the logistic function σ(2t) = ½(1 + tanh t):
//
//   gelu(x)      = ½x·(1 + tanh t) = x·σ,   σ = 1/(1 + E), E = e^(−2t) = 2^z,
//                                            t = c·(x + k·x³), z = x·(a + b·x²)
//   dy·gelu′(x)  = dy·σ·(1 + w·(1 − σ)),    1 − σ = E·σ, w = x·(2c + 6ck·x²)
//
// c = √(2/π), k = 0.044715, a = −2c·log₂e and b = −2ck·log₂e rounded to
// binary32. One 2^z (the EX2 unit's, within 2 ulps; exp_of below) and one reciprocal
// (__fdividef, within 2 ulps where the divisor is at most 2¹²⁶, else 0)
// take the place of tanhf's polynomial, branches and its own exponential
// and reciprocal: GPT-2's MLP applies these to every element of c_fc's
// output and of c_proj's input gradient inside the GEMM's epilogue, where
// tanhf's 22 instructions an element kept the tensor cores waiting.
// Measured on the H100 (bench/gemm_lab.cu, 16384x3072x768, cuBLAS's plain
// product over vkern's; BENCHMARKS.md): the fused c_fc forward 0.707-0.720
// with tanhf, 0.780-0.788 in this form; c_proj's input gradient 0.524-0.539
// and 0.595-0.599. oracle.geluLogistic derives the bounds of this form, and
// geluParts and geluGradFactor take the larger of them and the cpu
// backend's tanh form's; the
// specials come out as the reference's: NaN stays NaN; gelu(+Inf) = +Inf
// (E = 0), gelu(−Inf) = −Inf·0 = NaN; gelu′(±Inf) is NaN (Inf·0 in w·(1 − σ)
// at +Inf, 0·(−Inf) in σ·(…) at −Inf), and where E overflows for a finite
// x ≪ 0, E·σ = Inf·0 is NaN, so 1 − σ is taken as min(E·σ, 1), which is 1
// there, as it should be. dy = ±Inf times a gelu′ within its bound of 0
// (x ≪ 0) is left open by the reference (oracle.Reference).
#ifndef VKERN_CUDA_GELU_CUH
#define VKERN_CUDA_GELU_CUH

#include "cuda/compat.h"

namespace {
namespace vkern_gelu {

constexpr float kGeluA = -2.302208198f;   // −2√(2/π)·log₂e
constexpr float kGeluB = -0.1029432396f;  // −2√(2/π)·0.044715·log₂e
constexpr float kGeluW1 = 1.595769122f;   // 2√(2/π)
constexpr float kGeluW3 = 0.2140644488f;  // 6√(2/π)·0.044715

// exp_of is E = 2^z = e^(−2t) for x, its 2^z vk_ex2_ftz (compat.h), the
// multiprocessor's EX2 alone (ex2.approx.ftz.f32), rather than exp2f.
// Nsight Compute of c_proj's dx through the GELU
// (docs/layernorm-grad-reduce-h100) counted eight FMUL, one FSETP and two
// MUFU an element, where gelu_grad's expression has six multiplies. On
// sm_90a exp2f is FSETP z < −126, then z·½, EX2 and a squaring, the last
// two under the predicate, to keep subnormal results; ex2.approx.ftz.f32 is
// the EX2 alone (docs/gelu-ex2-ftz-h100, call1-ex2-sass.txt). Measured on
// the H100 in one call against the exp2f build: c_proj's dx through the
// GELU (linear_grad_x 16384x768x3072:gelu=1) 0.1749-0.1765 ms against
// 0.1784-0.1815, c_fc's forward 0.1565-0.1569 against 0.1582-0.1583, the
// gpt2 step 34.65 against 34.91 ms; the memory-bound gelu_grad the same
// (0.1027-0.1028 ms both). The two forms agree
// except where z or 2^z is subnormal. A subnormal z reads as 0, and 2^z
// rounds to 1 either way. Where 2^z is subnormal (z < −126: x > 10),
// E becomes +0: 1 + E, and with it σ, is 1 either way, so gelu is
// unchanged. In gelu_grad, 1 − σ = min(E·σ, 1) becomes 0 instead of
// less than 2⁻¹²⁶, and w·(1 − σ) + 1 rounds to 1 either way unless
// |w| ≥ 2¹⁰¹, which needs x ≥ 2³⁴, where E is 0 in both (z < −149).
// For normal z and 2^z the error is EX2's in both, the 2 ulps the
// oracle's bound takes. HIP (elementwise.cu's gelu ops on AMD) keeps
// exp2f.
__device__ __forceinline__ float exp_of(float x, float x2) { return vk_ex2_ftz(x * fmaf(kGeluB, x2, kGeluA)); }

__device__ __forceinline__ float gelu(float x) {
  const float e = exp_of(x, x * x);
  return __fdividef(x, 1.0f + e);
}

// dy·gelu′(x).
__device__ __forceinline__ float gelu_grad(float x, float dy) {
  const float x2 = x * x;
  const float e = exp_of(x, x2);
  const float s = __fdividef(1.0f, 1.0f + e);  // σ
  const float q = fminf(e * s, 1.0f);          // 1 − σ
  const float w = x * fmaf(kGeluW3, x2, kGeluW1);
  return dy * (s * fmaf(w, q, 1.0f));
}

}  // namespace vkern_gelu
}  // namespace

#endif  // VKERN_CUDA_GELU_CUH
