// fill on the GPU: every f32 element set to the value. Zero, the common
// case (clearing gradient accumulators), is a cudaMemsetAsync; any other
// value a grid-stride loop. The value is rounded to binary32 once, to
// nearest (a C++ cast on the host).
#include <cmath>
#include <cstdint>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/rows.cuh"

namespace {
namespace vkern_fill {

constexpr int kThreads = 256;

__global__ void fill(float* y, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) y[i] = v;
}

}  // namespace vkern_fill
}  // namespace

namespace vkern {

cudaError_t run_fill(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_fill;
  const int64_t n = c.params[param::N];
  const float v = static_cast<float>(c.real(param::value));
  float* y = c.ptr<float>(buf::y);
  if (v == 0.0f && !std::signbit(v)) return cudaMemsetAsync(y, 0, sizeof(float) * n, s);
  using vkern_rows::ceil_div;
  using vkern_rows::grid_for;
  vkern_fill::fill<<<grid_for(ceil_div(n, vkern_fill::kThreads)), vkern_fill::kThreads, 0, s>>>(y, n, v);
  return cudaGetLastError();
}

}  // namespace vkern
