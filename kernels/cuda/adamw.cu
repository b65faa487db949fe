// adamw on the GPU: torch.optim.AdamW's step on f32 param, m and v in place,
// with the gradient multiplied by grad_scale, and param's f16 copy out.
//
// Launch shape: a grid-stride loop of 256-thread blocks. Where param, grad,
// m and v are 16-byte aligned and param16 8-byte aligned, each step of a
// thread updates four elements: one 16-byte load and store per f32 operand
// and one 8-byte store of param16 (Vec); the N mod 4 elements after the last
// whole vector, or every element where the pointers are not aligned, one at
// a time (Scalar). Memory-bound: the floor is 30·N bytes (four f32 reads,
// three f32 writes, one f16 write) over the copy bandwidth.
//
// Per element, in binary32 and in torch's order (the math of
// kernels/cpu/adamw.cc, which the oracle's bound follows):
//
//   g = grad·s;  p = p·decay;  m = β1·m + (1 − β1)·g;  v = β2·v + (1 − β2)·(g·g)
//   p = p − η·(m / (√v / √c2 + eps));  param16 = f16(p)
//
// The scalars are computed once per call on the host in binary64 and rounded
// once to binary32, and passed to the kernel by value: decay =
// fma(−lr, weight_decay, 1), 1 − β as a binary64 difference, cᵢ = 1 − βᵢᵗ as
// −expm1(t·log βᵢ) (accurate even where βᵢᵗ is near 1; exactly 1 for
// βᵢ = 0), η = lr/c1 and √c2.
//
// Facts relied on: sqrtf and float division are correctly rounded (nvcc's
// defaults, -prec-sqrt=true and -prec-div=true; hipcc's
// -fhip-fp32-correctly-rounded-divide-sqrt); nvcc may fuse a multiply and an
// add, which rounds once where the oracle's bound counts two; f16 results are
// rounded once (__float2half_rn); no flush-to-zero; ±Inf and NaN follow the
// formula. Each element is read and written by one thread.
//
// Variants (one so far):
//   1. grid-stride, 16-byte accesses where aligned.
#include <cmath>
#include <cstdint>

#include "core/backend.h"
#include "core/adamw.h"
#include "cuda/compat.h"
#include "cuda/rows.cuh"

namespace {
namespace vkern_adamw {

using vkern_rows::aligned16;
using vkern_rows::ceil_div;
using vkern_rows::grid_for;

constexpr int kThreads = 256;

// The step's constants (core/adamw.h).
using vkern::adamw_step::Scalars;
using vkern::adamw_step::scalars_of;

// step updates one element in place and returns its new param.
__device__ __forceinline__ float step(const Scalars& s, float& p, float grad, float& m, float& v) {
  const float g = grad * s.scale;
  const float decayed = p * s.decay;
  m = s.beta1 * m + s.keep1 * g;
  v = s.beta2 * v + s.keep2 * (g * g);
  const float denom = sqrtf(v) / s.root2 + s.eps;
  p = decayed - s.step_size * (m / denom);
  return p;
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16;
}

// scalar updates elements [first, n), one per thread per step.
__global__ void scalar(Scalars s, float* p, const float* grad, float* m, float* v, __half* p16, int64_t first,
                       int64_t n) {
  for (int64_t i = first + blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    float pi = p[i], mi = m[i], vi = v[i];
    p16[i] = __float2half_rn(step(s, pi, grad[i], mi, vi));
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// vec updates elements [0, 4·n4), four per thread per step.
__global__ void vec(Scalars s, float4* p, const float4* grad, float4* m, float4* v, uint2* p16, int64_t n4) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n4; i += int64_t{gridDim.x} * kThreads) {
    float4 pi = p[i], mi = m[i], vi = v[i];
    const float4 gi = VK_LDG(grad + i);
    const float x = step(s, pi.x, gi.x, mi.x, vi.x);
    const float y = step(s, pi.y, gi.y, mi.y, vi.y);
    const float z = step(s, pi.z, gi.z, mi.z, vi.z);
    const float w = step(s, pi.w, gi.w, mi.w, vi.w);
    p16[i] = make_uint2(pack2(x, y), pack2(z, w));
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

cudaError_t adamw(const Scalars& s, float* p, const float* grad, float* m, float* v, __half* p16, int64_t n,
                  cudaStream_t stream) {
  int64_t done = 0;
  const bool aligned = aligned16(p) && aligned16(grad) && aligned16(m) && aligned16(v) &&
                       (reinterpret_cast<uintptr_t>(p16) & 7u) == 0;
  if (aligned && n >= 4) {
    const int64_t n4 = n / 4;
    vec<<<grid_for(ceil_div(n4, kThreads)), kThreads, 0, stream>>>(
        s, reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(grad), reinterpret_cast<float4*>(m),
        reinterpret_cast<float4*>(v), reinterpret_cast<uint2*>(p16), n4);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    done = 4 * n4;
  }
  if (done == n) return cudaSuccess;
  scalar<<<grid_for(ceil_div(n - done, kThreads)), kThreads, 0, stream>>>(s, p, grad, m, v, p16, done, n);
  return cudaGetLastError();
}

}  // namespace vkern_adamw
}  // namespace

namespace vkern {

// The op's entry (kernels.cu lists it).
cudaError_t run_adamw(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_adamw;
  const vkern_adamw::Scalars scalars = vkern_adamw::scalars_of(
      c.real(param::lr), c.real(param::beta1), c.real(param::beta2), c.real(param::eps), c.real(param::weight_decay),
      static_cast<double>(c.params[param::t]), c.real(param::grad_scale));
  return vkern_adamw::adamw(scalars, c.ptr<float>(buf::param), c.ptr<const float>(buf::grad), c.ptr<float>(buf::m),
                            c.ptr<float>(buf::v), c.ptr<__half>(buf::param16), c.params[param::N], s);
}

}  // namespace vkern
