// rmsnorm and rmsnorm_grad on the GPU: f16 activations in and out, rstd
// and dw f32, binary32 inside. The math is kernels/cpu/rmsnorm.cc's:
//
//   rmsnorm       q = Σ x²,  r = 1/sqrtf(q/C + eps),  y = f16(x·r·w),  rstd = r
//   rmsnorm_grad  x̂ = x·r,  g = w·dy (exact),  c = (Σ g·x̂)/C
//                 dx = f16((g − x̂·c)·r),  dw += Σ_rows dy·x̂
//
// Launch shapes:
// - rmsnorm and rmsnorm_grad's dx: one warp (32 threads) a row, 8 rows a
//   block of 256, rows grid-stride. Lane l takes columns l, l + 32, …, so
//   each warp-wide access is coalesced; the row's sum is a butterfly of
//   warp shuffles (VK_SHFL_XOR, 32 lanes on NVIDIA and AMD alike).
// - rmsnorm_grad's dw: one thread a column, adding dy·x̂ over the rows in
//   order (a warp reads 32 consecutive columns of a row at a time): the
//   same bits every run, no atomics. Its parallelism is C threads, fine
//   for checking and slow for a small C: the simple variant, not a tuned
//   one.
//
// Accuracy, against the bound (rmsnorm.go): every sum is a binary32 sum in
// some order, the division by C and sqrtf are IEEE (no -prec-div=false, no
// -use_fast_math), so r is two roundings of 1/√ẑ; nvcc may fuse a multiply
// and an add, which rounds once where the bound counts two.
#include <cstdint>

#include "cuda/compat.h"

namespace {
namespace userops_rmsnorm {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr int kThreads = kWarp * kRowsPerBlock;

__device__ __forceinline__ float warp_sum(float v) {
  for (int mask = kWarp / 2; mask > 0; mask /= 2) v += VK_SHFL_XOR(v, mask);
  return v;
}

__global__ void forward(const __half* x, const __half* w, __half* y, float* rstd, int64_t R, int64_t C, float eps) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / kWarp; r < R;
       r += int64_t{gridDim.x} * kRowsPerBlock) {
    const __half* xr = x + r * C;
    float q = 0.0f;
    for (int64_t j = lane; j < C; j += kWarp) {
      const float v = __half2float(xr[j]);
      q += v * v;
    }
    q = warp_sum(q);
    const float s = 1.0f / sqrtf(q / static_cast<float>(C) + eps);
    for (int64_t j = lane; j < C; j += kWarp) y[r * C + j] = __float2half_rn(__half2float(xr[j]) * s * __half2float(w[j]));
    if (lane == 0) rstd[r] = s;
  }
}

__global__ void grad_dx(const __half* dy, const __half* x, const __half* w, const float* rstd, __half* dx, int64_t R,
                        int64_t C) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / kWarp; r < R;
       r += int64_t{gridDim.x} * kRowsPerBlock) {
    const float s = rstd[r];
    float c = 0.0f;
    for (int64_t j = lane; j < C; j += kWarp) {
      c += __half2float(w[j]) * __half2float(dy[r * C + j]) * (__half2float(x[r * C + j]) * s);
    }
    c = warp_sum(c) / static_cast<float>(C);
    for (int64_t j = lane; j < C; j += kWarp) {
      const float g = __half2float(w[j]) * __half2float(dy[r * C + j]);
      dx[r * C + j] = __float2half_rn((g - (__half2float(x[r * C + j]) * s) * c) * s);
    }
  }
}

__global__ void grad_dw(const __half* dy, const __half* x, const float* rstd, float* dw, int64_t R, int64_t C) {
  for (int64_t j = int64_t{blockIdx.x} * kThreads + threadIdx.x; j < C; j += int64_t{gridDim.x} * kThreads) {
    float sum = dw[j];
    for (int64_t r = 0; r < R; ++r) sum += __half2float(dy[r * C + j]) * (__half2float(x[r * C + j]) * rstd[r]);
    dw[j] = sum;
  }
}

// blocks is a grid of at most 2¹⁶ blocks for n items of per each.
unsigned blocks(int64_t n, int64_t per) {
  const int64_t b = (n + per - 1) / per;
  return static_cast<unsigned>(b < 65536 ? b : 65536);
}

}  // namespace userops_rmsnorm
}  // namespace

namespace vkern {

cudaError_t run_rmsnorm(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_rmsnorm;
  using namespace userops_rmsnorm;
  const int64_t R = c.params[param::R], C = c.params[param::C];
  forward<<<blocks(R, kRowsPerBlock), kThreads, 0, s>>>(c.ptr<const __half>(buf::x), c.ptr<const __half>(buf::w),
                                                        c.ptr<__half>(buf::y), c.ptr<float>(buf::rstd), R, C,
                                                        static_cast<float>(c.real(param::eps)));
  return cudaGetLastError();
}

cudaError_t run_rmsnorm_grad(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_rmsnorm_grad;
  using namespace userops_rmsnorm;
  const int64_t R = c.params[param::R], C = c.params[param::C];
  const __half* dy = c.ptr<const __half>(buf::dy);
  const __half* x = c.ptr<const __half>(buf::x);
  const float* rstd = c.ptr<const float>(buf::rstd);
  grad_dx<<<blocks(R, kRowsPerBlock), kThreads, 0, s>>>(dy, x, c.ptr<const __half>(buf::w), rstd, c.ptr<__half>(buf::dx),
                                                        R, C);
  grad_dw<<<blocks(C, kThreads), kThreads, 0, s>>>(dy, x, rstd, c.ptr<float>(buf::dw), R, C);
  return cudaGetLastError();
}

}  // namespace vkern
