// rmsnorm and rmsnorm_grad on the CPU: f16 activations in and out, rstd
// and dw f32, binary32 inside.
//
// rmsnorm: the pool runs blocks of whole rows; per row
//
//   q    = Σ_j x_j²                 in column order (each x² exact)
//   r    = 1 / sqrtf(q / C + eps)
//   y_j  = f16(x_j · r · w_j)       the only rounding to f16
//
// and stores rstd = r.
//
// rmsnorm_grad, two phases. The pool runs blocks of whole rows for dx; per
// row, with x̂_j = x_j·r and g_j = w_j·dy_j (exact):
//
//   c    = (Σ_j g_j·x̂_j) / C
//   dx_j = f16((g_j − x̂_j·c) · r)
//
// Then it runs blocks of kColumns columns for dw: each block starts from
// the columns' dw and adds dy·x̂ row by row, rows in order. No atomics and
// no per-thread partials: the result does not depend on the thread count.
//
// Facts relied on (no fast-math, no flush-to-zero): binary32 arithmetic
// rounded to nearest, sqrtf correctly rounded (glibc), so r is two
// roundings of 1/√ẑ, which the bound allows (rmsnorm.go); NaN and ±Inf
// follow the formulas, as the reference's do.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/backend.h"
#include "core/f16.h"

namespace vkern {
namespace {

constexpr size_t kColumns = 256;  // dw columns per task

// rms_rows_per_task keeps a task near 16k elements.
size_t rms_rows_per_task(size_t cols) { return std::max<size_t>(1, (size_t{1} << 14) / cols); }

void rmsnorm_row(const uint16_t* x, const uint16_t* w, float eps, uint16_t* y, float* rstd, size_t cols) {
  float q = 0.0f;
  for (size_t j = 0; j < cols; ++j) {
    const float v = f16_to_f32(x[j]);
    q += v * v;
  }
  const float r = 1.0f / std::sqrt(q / static_cast<float>(cols) + eps);
  for (size_t j = 0; j < cols; ++j) y[j] = f32_to_f16(f16_to_f32(x[j]) * r * f16_to_f32(w[j]));
  *rstd = r;
}

void rmsnorm_grad_row(const uint16_t* dy, const uint16_t* x, const uint16_t* w, float r, uint16_t* dx, size_t cols) {
  float c = 0.0f;
  for (size_t j = 0; j < cols; ++j) c += f16_to_f32(w[j]) * f16_to_f32(dy[j]) * (f16_to_f32(x[j]) * r);
  c /= static_cast<float>(cols);
  for (size_t j = 0; j < cols; ++j) {
    const float g = f16_to_f32(w[j]) * f16_to_f32(dy[j]);
    dx[j] = f32_to_f16((g - (f16_to_f32(x[j]) * r) * c) * r);
  }
}

}  // namespace

Result run_rmsnorm(const Call& c, uint64_t*) {
  using namespace op_rmsnorm;
  const size_t R = c.dim(param::R), C = c.dim(param::C);
  const float eps = static_cast<float>(c.real(param::eps));
  const uint16_t* x = c.ptr<const uint16_t>(buf::x);
  const uint16_t* w = c.ptr<const uint16_t>(buf::w);
  uint16_t* y = c.ptr<uint16_t>(buf::y);
  float* rstd = c.ptr<float>(buf::rstd);
  const size_t block = rms_rows_per_task(C);
  cpu_pool().parallel_for((R + block - 1) / block, [&](size_t task, unsigned) {
    for (size_t r = task * block; r < std::min(R, (task + 1) * block); ++r) {
      rmsnorm_row(x + r * C, w, eps, y + r * C, rstd + r, C);
    }
  });
  return Result::OK();
}

Result run_rmsnorm_grad(const Call& c, uint64_t*) {
  using namespace op_rmsnorm_grad;
  const size_t R = c.dim(param::R), C = c.dim(param::C);
  const uint16_t* dy = c.ptr<const uint16_t>(buf::dy);
  const uint16_t* x = c.ptr<const uint16_t>(buf::x);
  const uint16_t* w = c.ptr<const uint16_t>(buf::w);
  const float* rstd = c.ptr<const float>(buf::rstd);
  uint16_t* dx = c.ptr<uint16_t>(buf::dx);
  float* dw = c.ptr<float>(buf::dw);
  ThreadPool& pool = cpu_pool();
  const size_t block = rms_rows_per_task(C);
  pool.parallel_for((R + block - 1) / block, [&](size_t task, unsigned) {
    for (size_t r = task * block; r < std::min(R, (task + 1) * block); ++r) {
      rmsnorm_grad_row(dy + r * C, x + r * C, w, rstd[r], dx + r * C, C);
    }
  });
  pool.parallel_for((C + kColumns - 1) / kColumns, [&](size_t task, unsigned) {
    const size_t first = task * kColumns, n = std::min(kColumns, C - first);
    float sum[kColumns];
    std::copy(dw + first, dw + first + n, sum);
    for (size_t r = 0; r < R; ++r) {
      for (size_t j = 0; j < n; ++j) {
        sum[j] += f16_to_f32(dy[r * C + first + j]) * (f16_to_f32(x[r * C + first + j]) * rstd[r]);
      }
    }
    std::copy(sum, sum + n, dw + first);
  });
  return Result::OK();
}

}  // namespace vkern
