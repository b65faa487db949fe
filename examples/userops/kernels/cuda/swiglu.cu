// swiglu on the GPU: y = silu(a)·b elementwise, with a and b the two
// halves of each row of x; f16 in and out, binary32 inside.
//
// Launch shape: a grid-stride loop of 256-thread blocks over the R·C
// outputs; element i is row i / C, column i % C, so a warp reads 32
// consecutive gates and values and writes 32 consecutive outputs.
// Memory-bound: the floor is 6 bytes an element (x in, y out) over the
// copy bandwidth.
//
// Facts relied on: expf is CUDA's accurate exp (within 2 ulps, the CUDA
// Math API's table; no -use_fast_math), which the bound (swiglu.go) allows
// twice over; the division is IEEE (no -prec-div=false); f16 results are
// rounded once (__float2half_rn). expf(−a) overflows to +Inf for
// a < −88.7, where y is ±0, as the bound allows.
#include <cstdint>

#include "cuda/compat.h"

namespace {
namespace userops_swiglu {

constexpr int kThreads = 256;

__global__ void swiglu(const __half* x, __half* y, int64_t n, int64_t C) {
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / C, j = i % C;
    const float a = __half2float(x[2 * r * C + j]);
    const float b = __half2float(x[2 * r * C + C + j]);
    y[i] = __float2half_rn(a / (1.0f + expf(-a)) * b);
  }
}

}  // namespace userops_swiglu
}  // namespace

namespace vkern {

cudaError_t run_swiglu(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_swiglu;
  const int64_t R = c.params[param::R], C = c.params[param::C];
  const int64_t n = R * C;
  const int64_t need = (n + userops_swiglu::kThreads - 1) / userops_swiglu::kThreads;
  const unsigned grid = static_cast<unsigned>(need < 65536 ? need : 65536);
  userops_swiglu::swiglu<<<grid, userops_swiglu::kThreads, 0, s>>>(c.ptr<const __half>(buf::x), c.ptr<__half>(buf::y), n,
                                                                   C);
  return cudaGetLastError();
}

}  // namespace vkern
