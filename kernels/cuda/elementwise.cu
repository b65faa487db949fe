// add, gelu and gelu_grad on the GPU: elementwise, f16 in and out, binary32
// inside.
//
// Launch shape: a grid-stride loop of 256-thread blocks. When N is a
// multiple of 8 and every pointer is 16-byte aligned, each step of a thread
// moves 8 elements per operand in one 16-byte access (Vec); otherwise one
// element (Scalar). Memory-bound: the floor is the operands' bytes over the
// copy bandwidth.
//
// Facts relied on: GELU is gelu.cuh's logistic form, with EX2
// (ex2.approx.ftz.f32, the instruction exp2f is wherever 2^z is normal) and
// __fdividef (each within 2 ulps, the CUDA Math API's table; no
// -use_fast_math), which the oracle's bound allows twice over; nvcc may fuse a multiply and an add, which rounds once where
// the bound counts two; f16 results are rounded once (__float2half_rn).
// add may run in place (y = a): every element is read before it is written,
// by the same thread.
//
// Variants (one so far):
//   1. grid-stride, 16-byte accesses where aligned.
#include <cstdint>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/gelu.cuh"
#include "cuda/rows.cuh"

namespace {
namespace vkern_elementwise {

using namespace vkern_rows;

constexpr int kThreads = 256;
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct Gelu {
  __device__ float operator()(float x, float) const { return vkern_gelu::gelu(x); }
};

struct GeluGrad {
  __device__ float operator()(float x, float dy) const { return vkern_gelu::gelu_grad(x, dy); }
};

// scalar: out[i] = f(a[i], b[i]) (b may be null: f ignores it).
template <class F>
__global__ void scalar(const __half* a, const __half* b, __half* out, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const float vb = b != nullptr ? __half2float(b[i]) : 0.0f;
    out[i] = __float2half_rn(f(__half2float(a[i]), vb));
  }
}

// vec: the same, 8 elements (16 bytes) per operand at a time; n8 = N / 8.
template <class F>
__global__ void vec(const uint4* a, const uint4* b, uint4* out, int64_t n8, F f) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n8; i += int64_t{gridDim.x} * kThreads) {
    const uint4 va = a[i];
    const uint4 vb = b != nullptr ? b[i] : make_uint4(0, 0, 0, 0);
    const uint32_t* wa = reinterpret_cast<const uint32_t*>(&va);
    const uint32_t* wb = reinterpret_cast<const uint32_t*>(&vb);
    uint4 r;
    uint32_t* wr = reinterpret_cast<uint32_t*>(&r);
#pragma unroll
    for (int k = 0; k < 4; ++k) wr[k] = pack(f(half_lo(wa[k]), half_lo(wb[k])), f(half_hi(wa[k]), half_hi(wb[k])));
    out[i] = r;
  }
}

template <class F>
cudaError_t launch(const __half* a, const __half* b, __half* out, int64_t n, F f, cudaStream_t s) {
  if (n % 8 == 0 && aligned16(a) && aligned16(out) && (b == nullptr || aligned16(b))) {
    const int64_t n8 = n / 8;
    vec<<<grid_for(ceil_div(n8, kThreads)), kThreads, 0, s>>>(reinterpret_cast<const uint4*>(a),
                                                               reinterpret_cast<const uint4*>(b),
                                                               reinterpret_cast<uint4*>(out), n8, f);
  } else {
    scalar<<<grid_for(ceil_div(n, kThreads)), kThreads, 0, s>>>(a, b, out, n, f);
  }
  return cudaGetLastError();
}

}  // namespace vkern_elementwise
}  // namespace

namespace vkern {

// The ops' entries (kernels.cu lists them).
cudaError_t run_add(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_add;
  return vkern_elementwise::launch(c.ptr<const __half>(buf::a), c.ptr<const __half>(buf::b), c.ptr<__half>(buf::y),
                                   c.params[param::N], vkern_elementwise::Add{}, s);
}

cudaError_t run_gelu(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_gelu;
  return vkern_elementwise::launch(c.ptr<const __half>(buf::x), static_cast<const __half*>(nullptr),
                                   c.ptr<__half>(buf::y), c.params[param::N], vkern_elementwise::Gelu{}, s);
}

cudaError_t run_gelu_grad(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_gelu_grad;
  return vkern_elementwise::launch(c.ptr<const __half>(buf::x), c.ptr<const __half>(buf::dy), c.ptr<__half>(buf::dx),
                                   c.params[param::N], vkern_elementwise::GeluGrad{}, s);
}

}  // namespace vkern
